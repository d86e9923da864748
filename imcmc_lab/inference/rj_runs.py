"""Running a reversible-jump proposal program under the handlers ``rj_proposal`` needs.

A proposal is an ordinary ``@gen`` function ``proposal(trace, *args)`` that reads the
current model trace with ``trace[address]``, draws with ``dist @ address`` and returns
``{model address: new value}``. Run by ``simulate``/``generate`` it is the auxiliary
program ``q`` of the derived kernel; run here, its draws and its trace reads are
answered by functions the caller gives (values read through the transform language,
values of a reverse move being searched for, ...), so one body serves every role.
"""

from __future__ import annotations

import math

import torch

from ..core.address import format_address, normalize_address
from ..core.distributions.discrete import Bernoulli, UniformDiscrete
from ..core.effects import pop_handler, push_handler, resolve_line
from ..errors import TransformError

__all__ = ["ProposalError", "TraceView", "run_proposal", "discrete_candidates", "is_discrete_value"]


class ProposalError(TransformError):
    """A reversible-jump proposal program that no involutive kernel can be derived from."""


class TraceView:
    """What the proposal sees as ``trace``: ``trace[address]`` answered by ``get(address)``."""

    __slots__ = ("_get", "_trace")

    def __init__(self, get, trace):
        self._get, self._trace = get, trace

    def __getitem__(self, address):
        return self._get(normalize_address(address))

    def __contains__(self, address):
        return normalize_address(address) in self._trace

    def get_args(self):
        return self._trace.get_args()

    def __getattr__(self, name):
        raise AttributeError(
            f"a reversible-jump proposal reads the model trace only as trace[address] (and "
            f"`address in trace`, trace.get_args()); trace.{name} is not available, because "
            f"every value it uses must be tracked for the Jacobian")


class _ProposalHandler:
    """Answers ``dist @ address`` in the proposal's body with ``draw(address, dist)``."""

    def __init__(self, draw, name):
        self.draw, self.name = draw, name
        self.prefix = ()
        self.draws = {}                 # address -> (dist, value), in the order drawn

    def choice(self, address, dist, line):
        address = self.prefix + address
        if address in self.draws:
            raise ProposalError(f"the proposal {self.name} draws {format_address(address)} twice "
                                f"(line {resolve_line(line)[1]}); give each draw its own address")
        value = self.draw(address, dist)
        self.draws[address] = (dist, value)
        return value

    def call(self, address, gen_fn, args, line):
        saved, self.prefix = self.prefix, self.prefix + address
        try:
            return _body(gen_fn)(*args)
        finally:
            self.prefix = saved

    def choice_family(self, namespace, keys, dist, line):   # bodies run unlowered (see _body)
        raise ProposalError(f"the proposal {self.name} draws a lowered family at "
                            f"{format_address(namespace)}; decorate it with @il.gen(lower=False)")


def _body(gen_fn):
    """The function as written (``__wrapped__``): loops run as loops, one draw at a time."""
    return getattr(gen_fn, "__wrapped__", None) or gen_fn.fn


def run_proposal(proposal, view, args, draw):
    """Run ``proposal(view, *args)``; return ``(changes, draws)``: the returned
    ``{address: value}`` with addresses normalised, and ``{address: (dist, value)}``."""
    handler = _ProposalHandler(draw, proposal.name)
    saved = push_handler(handler)
    try:
        returned = _body(proposal)(view, *args)
    finally:
        pop_handler(saved)
    if not isinstance(returned, dict):
        raise ProposalError(
            f"the proposal {proposal.name} returned {type(returned).__name__}; a reversible-jump "
            f"proposal returns the new values of the model choices it changes, as a dict "
            f"{{address: value}} (e.g. {{\"model\": 2, \"kap\": 0.015 * torch.exp(u)}})")
    return {normalize_address(a): v for a, v in returned.items()}, handler.draws


def is_discrete_value(value) -> bool:
    """A returned value's kind when the model trace has no choice there yet."""
    if isinstance(value, (bool, int)):
        return True
    return isinstance(value, torch.Tensor) and not (value.is_floating_point() or value.is_complex())


def _support(dist, address):
    if isinstance(dist, Bernoulli):
        return [False, True]
    if isinstance(dist, UniformDiscrete):
        return range(dist.lo, dist.hi + 1)
    probs = getattr(dist, "probs", None)
    if isinstance(probs, torch.Tensor) and probs.ndim == 1:
        return range(probs.shape[0])
    raise ProposalError(
        f"the proposal's discrete draw {format_address(address)} ({dist.name}) has no finite "
        f"support that the reverse move can be searched over; draw move choices from "
        f"il.uniform_discrete, il.categorical or il.bernoulli")


def discrete_candidates(dist, address, preferred=None):
    """The values a discrete draw can take (with positive probability), ``preferred`` first."""
    values = [v for v in _support(dist, address) if dist.logpdf(v) > -math.inf]
    if preferred is not None and preferred in values:
        values.remove(preferred)
        values.insert(0, preferred)
    return values
