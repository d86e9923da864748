"""Dynamic checks for bugs in involutions (paper Algorithm 4 and Sec. 6).

Three checks on a pair of traces ``(x, y)`` with ``(x', y') = f(x, y)``:

* **support**: ``p(x') > 0`` and ``q_{x'}(y') > 0``;
* **dimension**: as many continuous coordinates in as out, after copies;
* **involution**: ``f(x', y') == (x, y)`` up to a tolerance, reporting the
  addresses missing after, added after, and the values that differ.

:func:`check_involution` runs them on randomized cases drawn from ``p`` and
``q``; :func:`involution_problem` runs the involution check on one move
(``involutive_mcmc(check=True)``).
:func:`check_involution` also checks the engine itself: where the Jacobian came
from the float path (:mod:`.dual`), torch autograd must give the same one.
"""

from __future__ import annotations

import torch

from ..core.address import format_address
from ..core.choicemap import as_choicemap
from ..core.values import format_value, values_close
from ..errors import ImcmcError, InvolutionCheckError
from .apply import _IN, EMPTY_AUX, apply_transform
from .interpreter import AUX, MODEL, _where, run_transform
from .jacobian import free_part
from .language import Transform

__all__ = ["check_involution", "compare_choices", "ChoiceDifference", "InvolutionReport", "involution_problem",
           "round_trip", "autodiff_disagreement", "derivative_problem"]


class ChoiceDifference:
    """How two choice maps differ: addresses missing after, added after, values that differ."""

    def __init__(self, missing, added, differ):
        self.missing, self.added, self.differ = missing, added, differ

    def __bool__(self):
        return bool(self.missing or self.added or self.differ)

    def describe(self, name: str) -> str:
        lines = []
        if self.missing:
            lines.append(f"  {name} addresses missing after applying f twice: "
                         + ", ".join(format_address(a) for a in self.missing))
        if self.added:
            lines.append(f"  {name} addresses added after applying f twice: "
                         + ", ".join(format_address(a) for a in self.added))
        for a, before, after in self.differ:
            lines.append(f"  {name} value at {format_address(a)} differs: before {format_value(before, 8)}, "
                         f"after f(f(·)) {format_value(after, 8)}")
        return "\n".join(lines)


def compare_choices(before, after, rtol=1e-6, atol=1e-8) -> ChoiceDifference:
    before, after = as_choicemap(before), as_choicemap(after)
    b, a = before.to_dict(), after.to_dict()
    missing = [k for k in b if k not in a]
    added = [k for k in a if k not in b]
    differ = [(k, b[k], a[k]) for k in b if k in a and not values_close(b[k], a[k], rtol, atol)]
    return ChoiceDifference(missing, added, differ)


def round_trip(f, app, q, q_args, undo=None):
    """The second application of the involution check: ``undo`` (default ``f`` itself)
    applied to the outputs ``(x', y')`` of ``app``. An :class:`Application` whose
    ``new_model``/``new_aux`` should equal the original pair (paper Algorithm 4;
    the involution schematic of Figs. 1f and 2f draws it)."""
    return apply_transform(undo or f, app.new_model, app.new_aux, q, q_args, check_dimension=False)


def involution_problem(f, app, model_trace, aux_trace, q, q_args, rtol, atol, undo=None):
    """Apply ``undo`` (default ``f`` itself) to the outputs of ``app``; describe how it
    fails to return to ``(model_trace, aux_trace)``, or return None."""
    back = round_trip(f, app, q, q_args, undo)
    model_diff = compare_choices(model_trace.get_choices(), back.new_model.get_choices(), rtol, atol)
    aux_before = aux_trace.get_choices() if aux_trace is not EMPTY_AUX else as_choicemap(None)
    aux_after = back.new_aux.get_choices() if back.new_aux is not None else as_choicemap(None)
    aux_diff = compare_choices(aux_before, aux_after, rtol, atol)
    if not model_diff and not aux_diff:
        return None
    parts = [p for p in (model_diff.describe("model"), aux_diff.describe("auxiliary")) if p]
    return "involution: f(f(x, y)) != (x, y):\n" + "\n".join(parts)


def autodiff_disagreement(f, app, model_trace, aux_trace, q, q_args, rtol=1e-8):
    """The engine's own check of its float path (:mod:`.dual`): the same application with
    torch autograd must give the same ``log |det J|`` and the same new values. Returns a
    description of the difference, or None."""
    ref = apply_transform(f, model_trace, aux_trace, q, q_args, check_dimension=False, autodiff="torch")
    a, b = app.logabsdet, ref.logabsdet
    lines = []
    if not (a == b or abs(a - b) <= rtol * max(1.0, abs(b))):
        lines.append(f"  log |det J|: float path {a!r}, torch autograd {b!r}")
    diff = compare_choices(ref.new_model.get_choices(), app.new_model.get_choices(), 1e-12, 1e-300)
    lines += [f"  model_out[{format_address(k)}]: float path {format_value(after, 17)}, torch autograd "
              f"{format_value(before, 17)}" for k, before, after in diff.differ]
    lines += [f"  model_out[{format_address(k)}]: written on one path only" for k in diff.missing + diff.added]
    if not lines:
        return None
    return ("imcmc-lab's float-path derivatives and torch autograd disagree on this move:\n"
            + "\n".join(lines) + "\nThis is a bug in imcmc-lab unless the transform treats its values "
            f"differently by type (e.g. isinstance(x, torch.Tensor)). Set {f.name}.autodiff = \"torch\" "
            f"to use autograd only, and please report it.")


# -- the Jacobian against finite differences ------------------------------------------
# A derivative lost on the way from a read to a write (float(x), x.item(), math.*, NumPy,
# x.detach() on a value il.read returned) leaves the move running: only where every path
# is lost is the Jacobian singular. Where another input still reaches the write, log |det J|
# is merely wrong, and so is every acceptance probability. Central differences of the
# transform itself, at two step sizes, find it.
_FD_CHECKS_PER_BRANCH = 2
_FD_RTOL, _FD_ATOL = 1e-4, 1e-6


def _perturbed(trace, address, index, step):
    """``trace`` with free coordinate ``index`` of its continuous choice at ``address``
    moved by ``step`` (a simplex keeps its sum: its last weight moves by ``-step``)."""
    record = trace.flat_records()[address]
    value = record.value.detach().clone()
    if not value.ndim:
        return trace.update({address: value + step})[0]
    if record.dist.simplex:
        rows = value.view(-1, value.shape[-1])
        k = value.shape[-1] - 1
        rows[index // k, index % k] += step
        rows[index // k, k] -= step
    else:
        value.view(-1)[index] += step
    return trace.update({address: value})[0]


def _branch(app):
    """Which path through the transform a move took: the addresses it read and wrote."""
    run = app.run
    return tuple(sorted(map(repr, run.reads))), tuple(sorted(map(repr, run.writes)))


def _outcome(run):
    """What must not change for a difference quotient to make sense: the addresses
    written and copied, and the discrete values written."""
    return ({k: (w.value if w.label.is_discrete else None) for k, w in run.writes.items()},
            sorted(map(repr, run.copied_to)))


def _written_coordinate(run, coordinate, dists):
    side = MODEL if coordinate.trace == "model_out" else AUX
    value = run.writes[(side, coordinate.address)].value
    value = value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    value = free_part(dists[coordinate.trace][coordinate.address].dist, value)
    return float(value.reshape(-1)[coordinate.index or 0])


def _difference_column(f, app, col, rows, step):
    """Central differences of the written coordinates ``rows`` in the input ``col``, or
    None where a step changes the move's discrete outcome or leaves the support."""
    x, y = app.run.model_in, app.run.aux_in
    dists = {"model_out": app.new_model.flat_records(),
             "aux_out": app.new_aux.flat_records() if app.new_aux is not None else {}}
    sides = []
    for sign in (1.0, -1.0):
        try:
            if col.trace == "model_in":
                run = run_transform(f, _perturbed(x, col.address, col.index or 0, sign * step), y)
            else:
                run = run_transform(f, x, _perturbed(y, col.address, col.index or 0, sign * step))
        except ImcmcError:
            return None
        if _outcome(run) != _outcome(app.run):
            return None
        sides.append([_written_coordinate(run, r, dists) for r in rows])
    return [(a - b) / (2 * step) for a, b in zip(*sides)]


def derivative_problem(f, app):
    """Compare the Jacobian the engine took (``app.jacobian.reduced``) with central
    finite differences of ``f``; describe a derivative that differs (a lost
    derivative), or return None."""
    jac = app.jacobian
    if jac is None or not jac.rows or not jac.cols:
        return None
    reduced = jac.reduced
    for j, col in enumerate(jac.cols):
        source = app.run.model_in if col.trace == "model_in" else app.run.aux_in
        v = source.flat_records()[col.address].value.detach().reshape(-1)
        step = 1e-6 * max(abs(float(v[col.index or 0])), 1e-2)
        coarse = _difference_column(f, app, col, jac.rows, step)
        fine = _difference_column(f, app, col, jac.rows, step / 10) if coarse is not None else None
        if fine is None:
            continue
        for i, row in enumerate(jac.rows):
            ad = float(reduced[i, j])
            tol = _FD_ATOL + _FD_RTOL * max(abs(ad), abs(fine[i]))
            if abs(coarse[i] - ad) > tol and abs(fine[i] - ad) > tol and abs(coarse[i] - fine[i]) <= tol:
                return _lost_derivative(app, row, col, ad, fine[i])
    return None


def _lost_derivative(app, row, col, ad, fd):
    side = MODEL if row.trace == "model_out" else AUX
    write = app.run.writes[(side, row.address)]
    return (f"jacobian: d {row.label()} / d {col.label()} is {ad:.6g} by the transform's derivatives but "
            f"{fd:.6g} by finite differences ({_where(write.line)}): a derivative was lost between the "
            f"read and the write, so log |det J| and every acceptance probability would be wrong. "
            f"float(x), x.item(), x.tolist(), x.detach(), x.data, math.* functions, NumPy calls and "
            f"torch.tensor(...) on a value il.read returned give a constant; compute with torch "
            f"functions and operators on it instead.")


class InvolutionReport:
    """What :func:`check_involution` tested (returned when every trial passed)."""

    def __init__(self, transform, trials, moves, jacobian_sizes):
        self.transform, self.trials, self.moves, self.jacobian_sizes = transform, trials, moves, jacobian_sizes

    def __repr__(self):
        kinds = ", ".join(f"{k}: {n}" for k, n in sorted(self.moves.items(), key=lambda kv: -kv[1]))
        sizes = sorted(set(self.jacobian_sizes))
        return (f"check_involution({self.transform.name}): {self.trials} randomized trials passed "
                f"(support, dimension, involution). Moves by discrete outcome: {kinds}. "
                f"Reduced Jacobian sizes seen: {sizes}.")

    def _repr_html_(self):
        import html

        return f"<div style='color:#1a7f37'>✔ {html.escape(repr(self))}</div>"


def _move_kind(app):
    """A short description of the move's discrete outcome (which addresses were written)."""
    run = app.run
    written = sorted(format_address(a) for (s, a), w in run.writes.items() if w.label.is_discrete)
    return ", ".join(written) if written else "(no discrete writes)"


def _discrete_reads(app):
    """The discrete values the transform read, e.g. ``model_in['k'] = 3, aux_in['idx'] = 1``."""
    shown = [f"{_IN[s]}[{format_address(a)}] = {format_value(r.value)}"
             for (s, a), r in app.run.reads.items() if r.leaf is None and a]
    return ", ".join(shown) if shown else "(none)"


def _check_programs(p, q, f):
    """A TypeError naming the argument of ``check_involution(p, p_args, q, f)`` that is not
    the kind of program it must be (arguments given in another order, a plain function)."""
    for name, value, ok, kind in (
            ("p", p, hasattr(p, "simulate") and hasattr(p, "generate"), "the model (a @gen function or a %%gen def)"),
            ("q", q, q is None or hasattr(q, "simulate"), "the auxiliary program (a @gen function, or None)"),
            ("f", f, isinstance(f, Transform), "the transform (@il.transform or %%transform)")):
        if not ok:
            raise TypeError(f"check_involution(p, p_args, q, f): {name} must be {kind}, got {value!r}. "
                            f"Are the arguments in this order?")


def check_involution(p, p_args, q, f, trials: int = 100, q_args=(), observations=None,
                     rtol: float = 1e-6, atol: float = 1e-8, seed=None) -> InvolutionReport:
    """Algorithm 4: check ``f`` on ``trials`` randomized cases ``x ~ p``, ``y ~ q_x``.

    ``observations`` (a choice map) are fixed in every ``x``. Raises
    :class:`~imcmc_lab.errors.InvolutionCheckError` at the first failed check
    (support, dimension or involution), with a report of the addresses involved;
    transform-language errors (unknown address, wrong label, ...) propagate with
    their own messages. A Jacobian that is singular or not finite (a lost or NaN
    derivative) fails the check, naming the coordinates; so does one that differs
    from central finite differences of ``f`` (a derivative lost on one path of
    several; checked on the first trials of each path through ``f``). Returns an :class:`InvolutionReport` if every trial passes.
    For a transform paired with its inverse by :func:`pair_bijections`, checks
    that the inverse undoes it.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"check_involution(trials={trials!r}): trials is the number of randomized "
                         f"cases to check, an integer at least 1 (no trial would check nothing)")
    _check_programs(p, q, f)
    if seed is not None:
        torch.manual_seed(seed)
    p_args = p_args if isinstance(p_args, tuple) else (p_args,)
    moves, sizes, differenced = {}, [], {}
    for trial in range(1, trials + 1):
        if observations is not None:
            x, _ = p.generate(p_args, observations)
        else:
            x = p.simulate(*p_args)
        y = q.simulate(x, *q_args) if q is not None else EMPTY_AUX
        try:
            app = apply_transform(f, x, y, q, q_args, check_dimension=False)
            # (the second application can raise too: say which trial it was)
            problem = app.problem or involution_problem(f, app, x, y, q, q_args, rtol, atol,
                                                        undo=getattr(f, "inverse", None))
            if problem is None and app.run.floats:
                problem = autodiff_disagreement(f, app, x, y, q, q_args)
            branch = _branch(app)
            if problem is None and differenced.get(branch, 0) < _FD_CHECKS_PER_BRANCH:
                differenced[branch] = differenced.get(branch, 0) + 1
                problem = derivative_problem(f, app)
        except ImcmcError as exc:
            exc.args = (f"check_involution trial {trial}: {exc.args[0]}",) + exc.args[1:]
            raise
        if problem is not None:
            context = (f"check_involution({f.name}) failed on trial {trial} of {trials} "
                       f"(move: {_move_kind(app)}; discrete inputs read: {_discrete_reads(app)}):"
                       f"\n{problem}")
            raise InvolutionCheckError(context, report={"trial": trial, "model": x, "aux": y,
                                                        "application": app, "problem": problem})
        kind = _move_kind(app)
        moves[kind] = moves.get(kind, 0) + 1
        sizes.append(app.jacobian.reduced_size)
    return InvolutionReport(f, trials, moves, sizes)
