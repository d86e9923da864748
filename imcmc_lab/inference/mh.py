"""Metropolis-Hastings: resimulation from the prior, and custom proposal programs."""

from __future__ import annotations

from ..core.address import format_address
from ..errors import TransformError
from ..modeling.gen import GenerativeFunction
from .acceptance import metropolis_accept
from .kernels import Kernel
from .selections import CheckedSelection

__all__ = ["mh", "MH"]


def mh(trace, selection_or_proposal, proposal_args=None):
    """One MH step: ``(new_trace, accepted)``.

    ``mh(trace, selection)`` resimulates the selected addresses from their prior
    (``trace.regenerate``); every selected address must be named by ``trace``
    (see :mod:`imcmc_lab.inference.selections`: a typo is an error, not a no-op).
    ``mh(trace, q, q_args)`` proposes with a generative
    function ``q(trace, *q_args)`` whose choices are new values at model
    addresses; the reverse proposal is ``q`` at the new trace scoring the old
    values (``q`` must propose every address it changes or adds).
    """
    if isinstance(selection_or_proposal, GenerativeFunction):
        return _custom_mh(trace, selection_or_proposal, tuple(proposal_args or ()))
    return _resimulation_mh(trace, CheckedSelection(selection_or_proposal).confirm(trace, "mh"))


def _resimulation_mh(trace, selection):
    new_trace, weight = trace.regenerate(selection)
    if metropolis_accept(weight):
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
    backward = q.assess((result.trace,) + q_args, result._discard)     # read, not handed out
    log_alpha = result.weight + backward - forward.score
    if metropolis_accept(log_alpha):
        return result.trace, True
    return trace, False


class MH(Kernel):
    """Kernel form of :func:`mh`: ``MH(selection)`` or ``MH(q, q_args)``.

    With a selection, the kernel remembers the selected addresses it has seen in a
    trace, so a trans-dimensional chain may pass through states without them.
    """

    def __init__(self, selection_or_proposal, proposal_args=None, name=None):
        target = selection_or_proposal
        label = getattr(target, "name", None) or repr(target)
        super().__init__(name or f"mh({label})")
        self.proposal = target if isinstance(target, GenerativeFunction) else None
        self.selection = None if self.proposal is not None else CheckedSelection(target)
        self.args = tuple(proposal_args or ())

    @property
    def target(self):
        """The proposal program, or the selection."""
        return self.proposal if self.proposal is not None else self.selection.selection

    def step(self, trace):
        if self.proposal is not None:
            return _custom_mh(trace, self.proposal, self.args)
        return _resimulation_mh(trace, self.selection.confirm(trace, self.name))
