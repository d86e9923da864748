"""The Metropolis-Hastings accept/reject decision, shared by every kernel."""

from __future__ import annotations

import math

from ..core.distributions._draws import uniform01

__all__ = ["metropolis_accept"]


def metropolis_accept(log_alpha: float) -> bool:
    """Accept with probability ``min(1, exp(log_alpha))``; ``-inf`` and NaN reject.

    A NaN acceptance ratio never accepts: a move whose ratio cannot be computed
    must not move the chain.
    """
    if math.isnan(log_alpha) or log_alpha == -math.inf:
        return False
    # uniform01() is torch.rand((), dtype=float64) drawn into a kept tensor: the same draw.
    return log_alpha >= 0 or math.log(uniform01()) < log_alpha
