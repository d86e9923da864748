"""Metropolis-Hastings: resimulation from the prior, and custom proposal programs."""

from __future__ import annotations

import math

import torch

from ..core.address import format_address
from ..core.choicemap import as_selection
from ..errors import TransformError
from .kernels import Kernel

__all__ = ["mh", "MH"]


def _accept(log_alpha) -> bool:
    if math.isnan(log_alpha) or log_alpha == -math.inf:
        return False
    return log_alpha >= 0 or math.log(float(torch.rand((), dtype=torch.float64))) < log_alpha


def mh(trace, selection_or_proposal, proposal_args=None):
    """One MH step: ``(new_trace, accepted)``.

    ``mh(trace, selection)`` resimulates the selected addresses from their prior
    (``trace.regenerate``). ``mh(trace, q, q_args)`` proposes with a generative
    function ``q(trace, *q_args)`` whose choices are new values at model
    addresses; the reverse proposal is ``q`` at the new trace scoring the old
    values (``q`` must propose every address it changes or adds).
    """
    from ..modeling.gen import GenerativeFunction

    if isinstance(selection_or_proposal, GenerativeFunction):
        return _custom_mh(trace, selection_or_proposal, tuple(proposal_args or ()))
    new_trace, weight = trace.regenerate(as_selection(selection_or_proposal))
    if _accept(weight):
        return new_trace, True
    return trace, False


def _custom_mh(trace, q, q_args):
    forward = q.simulate(trace, *q_args)
    result = trace.update_detailed(forward.get_choices())
    if result.fresh:
        raise TransformError(
            f"the proposal {q.name} does not propose {format_address(result.fresh[0])}, which the "
            f"model needs after the proposed change; propose it too (custom-proposal MH needs every "
            f"new address proposed so the reverse move can score it)."
        )
    backward = q.assess((result.trace,) + q_args, result.discard)
    log_alpha = result.weight + backward - forward.score
    if _accept(log_alpha):
        return result.trace, True
    return trace, False


class MH(Kernel):
    """Kernel form of :func:`mh`: ``MH(selection)`` or ``MH(q, q_args)``."""

    def __init__(self, selection_or_proposal, proposal_args=None, name=None):
        target = selection_or_proposal
        label = getattr(target, "name", None) or repr(target)
        super().__init__(name or f"mh({label})")
        self.target = target if hasattr(target, "simulate") else as_selection(target)
        self.args = proposal_args

    def step(self, trace):
        return mh(trace, self.target, self.args)
