"""Finding the reverse move of a reversible-jump proposal: ``u* = h^{-1}(x; x*)``.

Given the current model trace ``x`` and the proposed one ``x*``, search the runs of
the proposal *at x** for the one that returns ``x``: its discrete draws by
depth-first enumeration (the forward run's value at the same address first), its
continuous draws ``u*`` by solving ``returned(u*; x*) = x`` -- symbolically
(:mod:`.rj_symbolic`) where the traced computation is scalar and elementary, else by
Gauss-Newton with torch autograd from a few starting points. A solution counts only
when re-running the proposal with it returns ``x`` (:meth:`ReverseSearch.verify`).

The solution's derivatives come from the implicit function theorem, without
differentiating through the solver: at a solution ``u0``, ``u* = u0 - J^+ r(u0; x*, x)``
with ``J = dr/du`` held constant has the value ``u0`` (``r(u0) = 0``) and the exact
first derivatives ``du* = -J^+ (dr/dx* dx* - dx)``; evaluated on the transform's
tracked values, it gives the Jacobian machinery exactly what it needs.
"""

from __future__ import annotations

import itertools
import math

import torch

from ..core.address import format_address
from ..core.values import DTYPE
from .rj_runs import ProposalError, TraceView, discrete_candidates, run_proposal
from .rj_symbolic import NotSymbolic, solve_symbolically

__all__ = ["ReverseSearch", "ReverseMove"]

MAX_STARTS = 24          # Gauss-Newton starting points tried per discrete path
MAX_ITERATIONS = 60
MAX_REMOVED = 8          # values of x that x* lost, tried as starting points
ABSOLUTE_TOLERANCE = 1e-300   # a solved value must match x to rtol relative (an exact zero exactly)


class _Mismatch(Exception):
    """This discrete path cannot return ``x`` (checked without solving)."""


class _LostDraw(Exception):
    """What the run returns does not depend on these draws (zero derivative) at this point."""

    def __init__(self, names):
        super().__init__(names)
        self.names = names


class ReverseMove:
    """The reverse run found: its discrete ``path``, its draws in order (``order``:
    ``[(address, dist)]``), its continuous unknowns with their solution ``u0`` and the
    Jacobian ``jac`` of the residual there (or a symbolic ``formula``)."""

    __slots__ = ("path", "order", "unknowns", "u0", "jac", "formula", "continuous")

    def __init__(self, path, draws, unknowns, u0, jac, continuous, formula=None):
        self.path, self.unknowns, self.u0, self.jac = path, unknowns, u0, jac
        self.order = [(a, d) for a, (d, _) in draws.items()]
        self.continuous, self.formula = continuous, formula


def _flat(value):
    return torch.as_tensor(value, dtype=DTYPE).reshape(-1)


def _scalar(value):
    """A discrete value as a hashable Python scalar (None for a vector)."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else None
    return value


def _same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        a, b = torch.as_tensor(a), torch.as_tensor(b)
        return a.shape == b.shape and bool(torch.equal(a.to(b.dtype), b))
    return a == b


class _Solving:
    """The continuous part of :class:`ReverseSearch`: solving one discrete path's draws
    (symbolically, else by Gauss-Newton) and their tracked values. A base class only to
    keep each class short; it uses the search's ``run``, ``residual``, ``converged`` and ``verify``."""

    def solve(self, path, draws, changes, continuous):
        unknowns = [(a, d, tuple(torch.as_tensor(v).shape)) for a, (d, v) in draws.items() if not d.discrete]
        if not unknowns:
            if self.converged(self.residual(changes, continuous), continuous) and self.verify(changes):
                return ReverseMove(path, draws, [], None, None, continuous)
            return None
        formula = self.symbolic(path, draws, changes, continuous, unknowns)
        if formula is not None:
            return formula
        k = sum(math.prod(s) for _, _, s in unknowns)
        m = int(self.residual(changes, continuous).numel())
        if m < k:
            self.problems.append(
                f"the run drawing {_describe(path, draws)} has {k} continuous coordinates "
                f"({', '.join(format_address(a) for a, _, _ in unknowns)}) but what it returns "
                f"fixes only {m}")
            return None
        return self.newton_from_starts(path, draws, unknowns, continuous)

    def starting_points(self, address, dist):
        """Where to start solving for a continuous draw: the forward run's value at the same
        address, the values ``x*`` lost, a draw of ``dist``; only points in its support."""
        found = self.forward_draws.get(address)
        points = [found[1]] if found is not None and not found[0].discrete else []
        if not dist.event_shape:
            points += self.removed
        points.append(_private_draw(dist))
        kept = []
        for p in points:
            p = torch.as_tensor(p, dtype=DTYPE).detach()
            if dist.logpdf(p) > -math.inf and not any(torch.equal(p, q) for q in kept):
                kept.append(p)
        return kept

    def newton_from_starts(self, path, draws, unknowns, continuous):
        lists = [self.starting_points(a, d) for a, d, _ in unknowns]
        tried, lost = 0, []
        for start in itertools.islice(itertools.product(*lists), MAX_STARTS):
            tried += 1
            u = torch.cat([_flat(v) for v in start])
            try:
                solved = _gauss_newton(self, path, unknowns, continuous, u)
            except _Mismatch:
                continue
            except _LostDraw as exc:          # zero derivative here; maybe not elsewhere
                lost.append(exc.names)
                continue
            if solved is None:
                continue
            u, jac = solved
            _require_full_rank(self.proposal, path, draws, unknowns, jac)
            changes = self.run(path, _split(u, unknowns))[0]
            if self.verify(changes):
                return ReverseMove(path, draws, unknowns, u, jac, continuous)
        if lost and len(lost) == tried:       # what it returns ignores the draw at every start
            _not_invertible(self.proposal, path, draws, lost[0])
        self.problems.append(f"the run drawing {_describe(path, draws)}: no solution for "
                             f"{', '.join(format_address(a) for a, _, _ in unknowns)} from {tried} "
                             f"starting points")
        return None

    def formula(self, path, draws, changes, continuous, unknowns):
        """The symbolic solution of this discrete path (cached), or None."""
        key = (tuple(path), tuple(draws), tuple(changes))
        formula = self.symbolic_cache.get(key, False)
        if formula is False:
            try:
                formula = solve_symbolically(self, path, unknowns, continuous)
            except NotSymbolic:
                formula = None
            self.symbolic_cache[key] = formula
        return formula

    def check_unique(self, draws, changes):
        """For the forward run itself (this search built with ``x`` and ``x*`` swapped): an
        error if the symbolic route finds two admissible draws giving the same ``x*``."""
        unknowns = [(a, d, tuple(torch.as_tensor(v).shape)) for a, (d, v) in draws.items() if not d.discrete]
        if not unknowns:
            return
        path = [v for d, v in draws.values() if d.discrete]
        try:
            continuous = self.continuous_returns(changes)
        except _Mismatch:
            return
        formula = self.formula(path, draws, changes, continuous, unknowns)
        if formula is not None:
            formula.evaluate_numeric(self, path, unknowns, continuous)

    def symbolic(self, path, draws, changes, continuous, unknowns):
        formula = self.formula(path, draws, changes, continuous, unknowns)
        if formula is None:
            return None
        u = formula.evaluate_numeric(self, path, unknowns, continuous)
        if u is None:
            return None
        changes = self.run(path, _split(u, unknowns))[0]
        if not self.verify(changes):
            return None
        return ReverseMove(path, draws, unknowns, u, None, continuous, formula=formula)

    # -- the tracked solution (inside the transform) -------------------------
    def tracked_draws(self, move, view, target):
        """The reverse run's draws as tracked values: discrete ones as found, continuous ones
        ``u0 - J^+ r`` evaluated on the transform's tracked ``x*`` (``view``) and ``x`` (``target``)."""
        values = dict(zip([a for a, d in move.order if d.discrete], move.path))
        if not move.unknowns:
            return values
        if move.formula is not None:
            u = move.formula.evaluate_tracked(self, move, view, target)
        else:
            fixed = _split(move.u0, move.unknowns)
            changes, _ = run_proposal(self.proposal, view, self.args, _fixed_draw(move.path, fixed))
            r = self.residual(changes, move.continuous, target)
            u = move.u0 - torch.linalg.pinv(move.jac) @ r
        values.update(_split(u, move.unknowns))
        return values


class ReverseSearch(_Solving):
    """Search the proposal's runs at ``x_star`` for the one that returns ``x``."""

    def __init__(self, proposal, args, x, x_star, forward_draws, changes, *, rtol=1e-11, max_runs=5000,
                 symbolic_cache=None, hints=None):
        self.proposal, self.args, self.x, self.x_star = proposal, args, x, x_star
        self.forward_draws, self.rtol, self.max_runs = forward_draws, rtol, max_runs
        self.view = TraceView(x_star.__getitem__, x_star)
        flat_x, flat_star = x.flat_records(), x_star.flat_records()
        self.targets = flat_x
        self.must_return = [a for a in flat_x if a not in flat_star
                            or (a in changes and not _same(flat_x[a].value, flat_star[a].value))]
        self.removed = self._removed_values(flat_x, flat_star)
        self.problems = []
        self.symbolic_cache = {} if symbolic_cache is None else symbolic_cache
        self.hints = {} if hints is None else hints

    def _removed_values(self, flat_x, flat_star):
        """Scalars of ``x`` that ``x*`` lost: likely values of the reverse draws (a death's
        deleted point is the birth's position)."""
        values = []
        for a in self.must_return:
            rec = flat_x[a]
            if rec.discrete:
                continue
            old = _flat(rec.value)
            if a in flat_star:
                old = old[~torch.isin(old, _flat(flat_star[a].value))]
            values.extend(old[:MAX_REMOVED])
        return values[:MAX_REMOVED]

    # -- one run of the proposal at x* ---------------------------------------
    def run(self, path, continuous_values, branches=None):
        """Run with the discrete draws of ``path`` (extended by first candidates, their
        alternatives pushed on ``branches``) and continuous draws from ``continuous_values``
        (a dict, filled with a first starting point for a draw it lacks)."""
        chosen = []

        def draw(address, dist):
            if not dist.discrete:
                if address not in continuous_values:
                    continuous_values[address] = self.first_guess(address, dist)
                return continuous_values[address]
            k = len(chosen)
            if k < len(path):
                chosen.append(path[k])
                return path[k]
            if branches is None:
                raise _Mismatch
            values = discrete_candidates(dist, address, self.preferred(address))
            if not values:
                raise _Mismatch
            branches.extend(chosen + [v] for v in reversed(values[1:]))
            chosen.append(values[0])
            return values[0]

        changes, draws = run_proposal(self.proposal, self.view, self.args, draw)
        return changes, draws, chosen

    def continuous_returns(self, changes):
        """The continuous addresses of ``changes`` to solve for; ``_Mismatch`` if a discrete
        value or an address set cannot be ``x``'s whatever the continuous draws are."""
        for a in self.must_return:
            if a not in changes:
                raise _Mismatch
        continuous = []
        for a, v in changes.items():
            rec = self.targets.get(a)
            if rec is None:
                raise _Mismatch
            if rec.discrete:
                if not _same(v, rec.value):
                    raise _Mismatch
            elif torch.as_tensor(v).shape != rec.value.shape:
                raise _Mismatch
            else:
                continuous.append(a)
        return continuous

    def residual(self, changes, continuous, target=None):
        target = target or (lambda a: self.targets[a].value)
        parts = [(torch.as_tensor(changes[a], dtype=DTYPE) - target(a)).reshape(-1) for a in continuous]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=DTYPE)

    def converged(self, r, continuous):
        scale = torch.cat([_flat(self.targets[a].value) for a in continuous]) if continuous else r
        return bool(torch.all(torch.abs(r) <= self.rtol * torch.abs(scale) + ABSOLUTE_TOLERANCE))

    # -- the search ----------------------------------------------------------
    def find(self) -> ReverseMove:
        stack, runs = [[]], 0
        while stack and runs < self.max_runs:
            prefix, runs = stack.pop(), runs + 1
            branches = []
            try:
                changes, draws, path = self.run(prefix, {}, branches)
                continuous = self.continuous_returns(changes)
            except _Mismatch:
                continue
            finally:
                stack.extend(branches)        # the alternatives met on the way, deepest on top
            found = self.solve(path, draws, changes, continuous)
            if found is not None:
                self.remember(found)
                return found
        raise self.no_reverse_error(runs)

    def no_reverse_error(self, runs):
        changed = ", ".join(format_address(a) for a in self.must_return) or "(none)"
        why = "".join(f"\n  - {p}" for p in self.problems[:6])
        return ProposalError(
            f"rj_proposal({self.proposal.name}): the proposal run at the proposed state cannot propose "
            f"going back. None of its runs ({runs} discrete paths searched) returns the current values "
            f"of {changed}.{why}\nA reversible-jump proposal must be able to propose the reverse of "
            f"every move it makes (e.g. a death for each birth), with its continuous draws "
            f"determined by what it returns.")

    def preferred(self, address):
        """The value to try first for a discrete draw: what the reverse of a move like the
        forward one drew before (``hints``), else the forward run's value."""
        found = self.forward_draws.get(address)
        if found is None or not found[0].discrete:
            return None
        value = _scalar(found[1])
        return None if value is None else self.hints.get((address, value), value)

    def remember(self, move):
        """After a success: the reverse draws of this kind of forward move, as hints."""
        for (address, dist), value in zip([o for o in move.order if o[1].discrete], move.path):
            found = self.forward_draws.get(address)
            if found is not None and found[0].discrete and _scalar(found[1]) is not None:
                self.hints[(address, _scalar(found[1]))] = value

    def first_guess(self, address, dist):
        """A value for a continuous draw while only the discrete path is being tried."""
        found = self.forward_draws.get(address)
        if found is not None and not found[0].discrete and dist.logpdf(found[1]) > -math.inf:
            return found[1]
        return torch.as_tensor(_private_draw(dist), dtype=DTYPE)

    def verify(self, changes) -> bool:
        """Whether a reverse run's result gives back ``x``: every address where ``x*`` differs
        from ``x`` (discarded ones included) is returned, and every returned value is ``x``'s
        (continuous ones to ``rtol``). Then ``x*.update(changes)`` is ``x``: the model, run
        with ``x``'s value at each address it visits, visits exactly ``x``'s addresses."""
        try:
            continuous = self.continuous_returns(changes)
        except _Mismatch:
            return False
        return self.converged(self.residual(changes, continuous), continuous)


def _private_draw(dist):
    """A draw of ``dist`` from a fixed seed, outside the user's random stream: the derived
    transform stays a deterministic function of ``(x, y)`` and a chain consumes the same
    random numbers as a hand-written kernel's."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(20190416)
        return dist.sample()


def _fixed_draw(path, continuous_values):
    chosen = iter(path)

    def draw(address, dist):
        return continuous_values[address] if not dist.discrete else next(chosen)
    return draw


def _split(u, unknowns):
    values, at = {}, 0
    for address, _, shape in unknowns:
        size = math.prod(shape)
        values[address] = u[at:at + size].reshape(shape)
        at += size
    return values


def _describe(path, draws):
    discrete = [a for a, (d, _) in draws.items() if d.discrete]
    return ", ".join(f"{format_address(a)}={v!r}" for a, v in zip(discrete, path)) or "no discrete draws"


def _gauss_newton(search, path, unknowns, continuous, u):
    """Solve ``returned(u) = x`` from ``u``; ``(u, J)`` at the solution, or None."""
    def residual(v):
        changes = search.run(path, _split(v, unknowns))[0]
        if search.continuous_returns(changes) != continuous:
            raise _Mismatch
        return search.residual(changes, continuous)

    for _ in range(MAX_ITERATIONS):
        r, jac = _residual_and_jacobian(residual, u)
        lost = _lost_draws(unknowns, jac)
        if lost:
            raise _LostDraw(lost)
        if search.converged(r, continuous):
            return u, jac
        if not (torch.all(torch.isfinite(r)) and torch.all(torch.isfinite(jac))):
            return None
        step = torch.linalg.lstsq(jac, -r.unsqueeze(-1)).solution.squeeze(-1)
        if not torch.all(torch.isfinite(step)):
            return None
        u = u + step
    return None


def _residual_and_jacobian(residual, u):
    """``r(u)`` and ``dr/du`` from one run: all rows in one batched backward pass (a loop
    over rows if an operation has no batching rule)."""
    u = u.detach().requires_grad_(True)
    r = residual(u)
    if not r.requires_grad:          # nothing returned depends on the draws
        return r.detach(), torch.zeros(r.numel(), u.numel(), dtype=DTYPE)
    rows = torch.eye(r.numel(), dtype=DTYPE)
    try:
        (jac,) = torch.autograd.grad(r, u, rows, is_grads_batched=True, allow_unused=True,
                                     materialize_grads=True)
    except RuntimeError:
        jac = torch.stack([torch.autograd.grad(r, u, row, retain_graph=True, allow_unused=True,
                                               materialize_grads=True)[0] for row in rows])
    return r.detach(), jac


def _require_full_rank(proposal, path, draws, unknowns, jac):
    """At a solution, ``u*`` must be the only one nearby: J of full column rank."""
    sv = torch.linalg.svdvals(jac)
    if sv.numel() == jac.shape[1] and sv[-1] > 1e-9 * max(float(sv[0]), 1e-300):
        return
    _, _, vh = torch.linalg.svd(jac)
    lost = vh[-1].abs()
    names, at = [], 0
    for address, _, shape in unknowns:
        size = math.prod(shape)
        if float(lost[at:at + size].max()) > 1e-3:
            names.append(format_address(address))
        at += size
    _not_invertible(proposal, path, draws, names)


def _lost_draws(unknowns, jac):
    """The draws whose every column of ``jac`` is zero: what is returned ignores them."""
    lost, at = [], 0
    for address, _, shape in unknowns:
        size = math.prod(shape)
        if not torch.any(jac[:, at:at + size] != 0):
            lost.append(format_address(address))
        at += size
    return lost


def _not_invertible(proposal, path, draws, names):
    raise ProposalError(
        f"rj_proposal({proposal.name}): the proposal is not invertible in its draw "
        f"{' and '.join(names)} (run drawing {_describe(path, draws)}): what it returns does not "
        f"change when {' and '.join(names)} changes, so the reverse move cannot recover it. Make "
        f"each continuous draw determine a returned value one-to-one (e.g. kap = 0.015 * exp(u)), "
        f"or drop the draw.")
