"""Reversible jump from ONE proposal program (Roberts, Gallagher & Taimre, *Reversible
Jump Probabilistic Programming*, AISTATS 2019 -- Stochaskell), on the involutive engine.

The user writes a ``@gen`` proposal that reads the current model trace and returns the
new values of the model choices it changes, computed from its random draws::

    @il.gen
    def soccer_jump(trace):
        if trace["model"] == 1:
            u = il.normal(0.0, 1.5) @ "u"
            return {"model": 2, "kap": 0.015 * torch.exp(u)}
        return {"model": 1}                    # kap is discarded

    kernel = il.rj_proposal(soccer_jump)

Design
------
*The involution.* A run of the proposal at ``x`` with draws ``y`` (its trace: discrete
move choices and continuous auxiliaries ``u`` alike) returns ``x* = h(u; x)``. The
derived transform maps ``(x, y)`` to ``(x*, y*)`` where ``y*`` is the run of the *same*
proposal at ``x*`` that returns ``x`` (Stochaskell's ``u* = h^{-1}(x; x*)``). Applied to
``(x*, y*)`` it finds ``y`` again -- provided that only one run at ``x`` returns ``x*``
(``h`` invertible in ``u``) -- so it is an involution on ``(x, y)``, and the kernel is
the engine's :class:`~.involutive.InvolutiveKernel` with ``q = proposal`` and this
transform. The acceptance ratio is therefore the engine's tested Algorithm 2:
``log p(x*) - log p(x)`` by incremental ``update``, ``log q_{x*}(y*) - log q_x(y)`` by
scoring both runs of the proposal, and ``log |det J|`` of ``(x, u) -> (x*, u*)`` by the
transform machinery's autodiff, with copied and unchanged coordinates removed (Green's
``|d(x*, u*)/d(x, u)|``, the paper's eq. 2, without deriving it by hand).
``il.check_involution(model, args, kernel.q, kernel.f, q_args=kernel.q_args)`` --
or ``kernel.check_involution(model, args)`` -- runs Algorithm 4 on what was derived.

*Which run is the reverse.* Draws with a discrete distribution are move choices
(birth/death/move selectors, indices); continuous draws are the auxiliaries ``u``.
Every run of the proposal at ``x*`` is a candidate: the discrete draws are enumerated
depth first (the forward run's value at the same address first, so a within-model
move finds itself at once; only values of positive probability), and a path is dropped
as soon as one run shows that it cannot return ``x`` (a discrete value differs, an
address that changed is not returned, a shape differs). On a surviving path the
continuous draws are solved for (:mod:`.rj_solve`): exactly with SymPy when the
traced computation is scalar and elementary (:mod:`.rj_symbolic`), else by
Gauss-Newton with torch autograd, started from the forward run's value, the values
``x*`` lost and a draw of the auxiliary's distribution. A solution is accepted only if
re-running the proposal with it returns ``x``'s value at every address where ``x*``
differs from ``x`` (so ``x*.update(returned)`` is ``x``). The derivatives of ``u*``
come from the implicit function theorem (one Newton step from the detached solution,
on the transform's tracked values), so the Jacobian the engine takes is exact.

*Errors.* No run returns ``x``: the proposal cannot propose going back (it names the
changed addresses and what each path lacked). Mapping such an ``(x, y)`` to itself
(rejecting) would be valid only if no reverse run exists, which a numerical search cannot
prove; a missed one would break detailed balance silently, so it is an error. The result does not change with a draw
(``kap = 0.015``), or two values of a draw give the same result (``kap = u ** 2``): not
invertible, naming the draw. Unequal dimensions are the engine's dimension error.

*Limits.* A reverse run is found by search, so a move choice needs a finite support
(``uniform_discrete``, ``categorical``, ``bernoulli``) and each search costs a few runs
of the proposal (all paths in the worst case; at most ``max_runs``). If two discrete
paths at ``x`` return the same ``x*`` with positive probability (e.g. a symmetric
swap), the reverse is not unique; ``check_involution`` catches that.
"""

from __future__ import annotations

import torch

from ..transform.checks import check_involution
from ..transform.language import Transform, continuous, discrete, read, write
from .involutive import InvolutiveKernel
from .rj_runs import ProposalError, TraceView, is_discrete_value, run_proposal
from .rj_solve import ReverseSearch

__all__ = ["rj_proposal", "RJProposalKernel", "ProposalError", "derive_transform"]


def _label(trace, address, value=None):
    """A model address's label: its choice's kind, else (a new address) the value's."""
    record = trace.choice_record(address)
    if record is not None:
        return discrete if record.discrete else continuous
    if value is None or is_discrete_value(value):
        return discrete
    return continuous


def _detach(value):
    return value.detach() if isinstance(value, torch.Tensor) else value


def derive_transform(proposal, args=(), *, rtol=1e-11, max_runs=5000, name=None) -> Transform:
    """The involution derived from ``proposal`` (see the module doc), as a transform."""
    args = tuple(args)
    cache, hints = {}, {}           # symbolic solutions by discrete path; reverse move choices

    def rj_involution(model_in, aux_in, model_out, aux_out):
        x = model_in.trace

        def read_model(address):
            return read(model_in[address], _label(x, address))

        changes, draws = run_proposal(
            proposal, TraceView(read_model, x), args,
            lambda address, dist: read(aux_in[address], discrete if dist.discrete else continuous))
        for address, value in changes.items():
            write(model_out[address], value, _label(x, address, value))
        x_star = x.update({a: _detach(v) for a, v in changes.items()})[0]
        draws = {a: (d, _detach(v)) for a, (d, v) in draws.items()}
        # the forward run must be the only one at x that gives x* (checked where exact)
        ReverseSearch(proposal, args, x_star, x, {}, changes, symbolic_cache=cache).check_unique(
            draws, {a: _detach(v) for a, v in changes.items()})
        search = ReverseSearch(proposal, args, x, x_star, draws, changes,
                               rtol=rtol, max_runs=max_runs, symbolic_cache=cache, hints=hints)
        move = search.find()
        kind = "none" if not move.unknowns else "symbolic" if move.formula is not None else "numerical"
        rj_involution.inversions[kind] += 1

        def read_new(address):      # x*, tracked: the proposal's new values over x's
            return changes[address] if address in changes else read_model(address)

        values = search.tracked_draws(move, TraceView(read_new, x_star),
                                      lambda address: read(model_in[address], continuous))
        for address, dist in move.order:
            write(aux_out[address], values[address], discrete if dist.discrete else continuous)

    rj_involution.inversions = {"symbolic": 0, "numerical": 0, "none": 0}
    f = Transform(rj_involution, name=name or f"rj({proposal.name})", autodiff="torch")
    f.inversions = rj_involution.inversions
    return f


class RJProposalKernel(InvolutiveKernel):
    """Involutive MCMC with the auxiliary program ``proposal`` and the involution derived from
    it. ``f.inversions`` counts the reverse moves solved symbolically, numerically, and
    those with no continuous draw to solve for ("none")."""

    def __init__(self, proposal, args=(), *, check=False, name=None, rtol=1e-11, max_runs=5000):
        f = derive_transform(proposal, args, rtol=rtol, max_runs=max_runs)
        super().__init__(proposal, tuple(args), f, check=check, name=name or f"rj({proposal.name})")
        self.proposal = proposal

    def check_involution(self, model, model_args, *, trials=100, observations=None, seed=None, **kw):
        """Algorithm 4 on the derived involution, with cases ``x ~ model``, ``y ~ proposal``."""
        return check_involution(model, model_args, self.q, self.f, trials=trials, q_args=self.q_args,
                                observations=observations, seed=seed, **kw)


def rj_proposal(proposal, args=(), *, check=False, name=None, rtol=1e-11, max_runs=5000) -> RJProposalKernel:
    """A reversible-jump kernel derived from ONE proposal program (see the module doc).

    ``proposal(trace, *args)`` is a ``@gen`` function that reads the current model trace
    with ``trace[address]`` and returns ``{model address: new value}`` computed from its
    draws. ``check=True`` runs Algorithm 4's checks on every move. ``rtol``: how closely
    a solved reverse move must reproduce the current values; ``max_runs``: how many runs
    of the proposal a search for the reverse move may take.
    """
    if not hasattr(proposal, "simulate") or not hasattr(proposal, "__wrapped__"):
        raise ProposalError(
            f"rj_proposal needs a proposal written with @il.gen (proposal(trace, *args) returning "
            f"{{address: new value}}), got {proposal!r}")
    return RJProposalKernel(proposal, args, check=check, name=name, rtol=rtol, max_runs=max_runs)
