"""The Metropolis-Hastings accept/reject decision, shared by every kernel."""

from __future__ import annotations

import math
import threading

import torch

__all__ = ["metropolis_accept"]

# One 0-d float64 tensor per thread, refilled in place for each decision: the same
# draw from the same generator as torch.rand((), dtype=torch.float64) (rand is empty
# + uniform_), without allocating a tensor and parsing arguments on every move.
_uniforms = threading.local()


def _uniform() -> float:
    buffer = getattr(_uniforms, "buffer", None)
    if buffer is None:
        buffer = _uniforms.buffer = torch.empty((), dtype=torch.float64)
    return buffer.uniform_().item()


def metropolis_accept(log_alpha: float) -> bool:
    """Accept with probability ``min(1, exp(log_alpha))``; ``-inf`` and NaN reject.

    A NaN acceptance ratio never accepts: a move whose ratio cannot be computed
    must not move the chain.
    """
    if math.isnan(log_alpha) or log_alpha == -math.inf:
        return False
    return log_alpha >= 0 or math.log(_uniform()) < log_alpha
