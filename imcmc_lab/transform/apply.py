"""Applying a transform to a pair of traces: new traces, densities and Jacobian.

``apply_transform`` runs the transform, builds the new model trace through the
incremental ``update`` (paper Sec. 5.2: ``x' = x.update(written and copied)``,
untouched addresses keep their values), scores the new auxiliary choices under
``q`` at the new model trace, accounts for every continuous coordinate, and
computes ``log |det J|`` on what copies leave over.
"""

from __future__ import annotations

import copy as copy_module
import math
from itertools import chain, islice
from operator import attrgetter, itemgetter

import torch

from ..core.address import did_you_mean, format_address
from ..core.choicemap import ChoiceMap
from ..errors import ConstraintError, DimensionError, LabelError, TransformError
from .compiled.cache import CompiledTransform
from .interpreter import AUX, MODEL, TransformRun, run_transform, _where
from .jacobian import CoordinateGroup, JacobianRecord, group_of, reduced_jacobian
from .language import Transform

__all__ = ["apply_transform", "Application", "EmptyAuxTrace"]

# Above this many addresses in the old and new model traces together, _account visits
# only the touched ones: choosing them costs about as much as visiting 20 addresses.
_RESTRICT_ABOVE = 40

_IN = {MODEL: "model_in", AUX: "aux_in"}
_OUT = {MODEL: "model_out", AUX: "aux_out"}


class EmptyAuxTrace:
    """The auxiliary trace of a move with no auxiliary program."""

    score = 0.0
    args = ()
    retval = None

    def flat_records(self):
        return {}

    def choice_record(self, address):
        return None

    def get_choices(self):
        return ChoiceMap._from_flat({})

    def __contains__(self, address):
        return False

    def __getitem__(self, address):
        if address == ():
            return None
        raise KeyError(address)

    def __reduce__(self):
        return "EMPTY_AUX"      # the engine tests `aux is EMPTY_AUX`: copies are the one object


EMPTY_AUX = EmptyAuxTrace()


class Application:
    """The result of applying a transform to ``(model_trace, aux_trace)``.

    ``new_model``: the new model trace; ``model_log_ratio``: ``log p(x') - log p(x)``
    from the incremental update; ``new_aux``: trace of ``q`` at ``x'`` with the new
    auxiliary choices (None if they do not fit ``q``); ``log_q_new``: ``log q_{x'}(y')``;
    ``jacobian``: a :class:`JacobianRecord` (None if the dimensions differ);
    ``problem``: why the move cannot be accepted (dimension, support or a Jacobian that
    is singular or not finite: ``jacobian.problem``), or None.
    """

    def __init__(self):
        self.run = None
        self.transform = None
        self.new_model = None
        self.model_log_ratio = 0.0
        self._model_update = None
        self.new_aux = None
        self.log_q_new = 0.0
        self.jacobian = None
        self.problem = None
        self._consumed = dict   # () -> {input key: output key using it as a copy}; set by _account

    @property
    def discard(self):
        """``{address: old value}`` of the model choices the move overwrote or removed: the old
        trace's own tensors (clone one before changing it in place)."""
        return self._model_update.discard if self._model_update is not None else None

    @property
    def copied_implicitly(self):
        """Model addresses left as they were (continuous ones; Gen's implicit copies)."""
        copied_to = self.run.copied_to if self.run is not None else {}
        return [src[1] for src, dst in self._consumed().items()
                if src == dst and src[0] == MODEL and dst not in copied_to]

    @property
    def logabsdet(self) -> float:
        return self.jacobian.logabsdet if self.jacobian is not None else -math.inf

    def raise_jacobian_problem(self):
        """Raise :class:`~imcmc_lab.errors.TransformError` if the move cannot be scored
        because ``log |det J|`` is not finite: for an involution that is always a lost
        or NaN derivative, never a rejection."""
        if self.problem is not None and self.jacobian is not None and self.problem == self.jacobian.problem:
            raise TransformError(f"the transform {self.run.transform.name}: {self.problem}")


def _model_update(run: TransformRun, model_trace, result=None):
    """The new model trace's update result (``result``: the same update, made already by the
    compiled path); raises for an address the transform did not provide or a kind change."""
    if result is None:
        constraints = run.output_choices(MODEL)
        try:
            result = model_trace.update_detailed(constraints)
        except ConstraintError:
            raise _unvisited_model_write(run, model_trace, constraints) from None
    if result.fresh:
        shown = ", ".join(format_address(a) for a in result.fresh[:5])
        raise TransformError(
            f"the new model trace needs {shown}, which the transform {run.transform.name} did not "
            f"provide (neither written nor copied to model_out). Gen would silently sample "
            f"{'it' if len(result.fresh) == 1 else 'them'} from the prior, which makes the "
            f"acceptance probability wrong. Write or copy a value for "
            f"{'it' if len(result.fresh) == 1 else 'each'} in the transform."
        )
    if result.kind_changed:
        _check_kind_changes(run, model_trace, result)
    return result


def _check_kind_changes(run, model_trace, result):
    """A model address whose distribution changed kind (discrete <-> continuous) in the new
    trace must get its value from the transform: kept as it was, one value would count
    once as a point of a density and once as a probability mass."""
    for address in result.kind_changed:
        key = (MODEL, address)
        if key in run.writes or key in run.copied_to:
            continue        # its label is checked against the new distribution
        old = model_trace.flat_records()[address].dist
        new = result.trace.flat_records()[address].dist
        kinds = ("discrete" if old.discrete else "continuous", "discrete" if new.discrete else "continuous")
        raise TransformError(
            f"model address {format_address(address)} is {kinds[0]} ({old!r}) in the old model "
            f"trace and {kinds[1]} ({new!r}) in the new one, but the transform "
            f"{run.transform.name} neither writes nor copies model_out[{format_address(address)}]: "
            f"its old value would be kept as a {kinds[1]} value, which makes the acceptance "
            f"probability wrong. Read it and write its new value (il.{kinds[1]}) in the transform."
        )


def _unvisited_model_write(run, model_trace, constraints):
    # Run the same update without the unvisited-constraint check (strict=False) and see
    # which written addresses the new trace lacks.
    flat = dict(constraints)
    result = model_trace.update_detailed(flat, strict=False)
    have = result.trace.flat_records()
    unvisited = [a for a in flat if a not in have]
    a = unvisited[0] if unvisited else next(iter(flat))
    entry = run.writes.get((MODEL, a)) or run.copied_to.get((MODEL, a))
    where = f" ({_where(entry.line)})" if entry is not None else ""
    return TransformError(
        f"the transform {run.transform.name} writes model_out[{format_address(a)}]{where}, but the "
        f"model does not have that address in the new trace." + did_you_mean(a, have)
        + " Check the address spelling, or that the discrete writes select the branch that uses it."
    )


def _aux_generate(q, q_args, new_model, aux_choices, run, result=None):
    """Trace of q at the new model trace holding exactly ``aux_choices``; log q of them
    (``result``: the same generate, made already by the compiled path)."""
    if result is None:
        result = q.generate_detailed((new_model,) + tuple(q_args), aux_choices, strict=False)
    have = result.trace.flat_records()
    extra = [a for a in aux_choices if a not in have]
    if extra:
        a = extra[0]
        entry = run.writes.get((AUX, a)) or run.copied_to.get((AUX, a))
        where = f" ({_where(entry.line)})" if entry is not None else ""
        return None, f"aux_out[{format_address(a)}]{where} is not an address that {q.name} visits at the new model trace." + did_you_mean(a, have)
    if result.fresh:
        shown = ", ".join(format_address(a) for a in result.fresh[:5])
        return None, (f"{q.name} at the new model trace needs {shown}, which the transform did not "
                      f"write or copy to aux_out")
    return result.trace, None


def _check_output_labels(run, side, new_trace):
    records = new_trace.flat_records()      # cached on the trace; _account uses it too
    for (s, address), w in run.writes.items():
        if s != side:
            continue
        record = records.get(address)
        if record is not None and record.dist.discrete != w[2].is_discrete:     # (w[2]: w.label)
            kind = "discrete" if record.dist.discrete else "continuous"
            raise LabelError(
                f"{_OUT[side]}[{format_address(address)}] is written as {w.label} ({_where(w.line)}) "
                f"but its distribution {record.dist!r} is {kind}. Use il.{kind}."
            )
    for c in run.copies:
        if c.dst_side != side:
            continue
        record = records.get(c.dst_address)
        if record is not None and record.dist.discrete != c.is_discrete:
            raise LabelError(
                f"copy from {_IN[c.src_side]}[{format_address(c.src_address)}] to "
                f"{_OUT[side]}[{format_address(c.dst_address)}] ({_where(c.line)}) moves a "
                f"{'discrete' if c.is_discrete else 'continuous'} value into a "
                f"{'discrete' if record.dist.discrete else 'continuous'} choice."
            )


def _account(run: TransformRun, model_trace, aux_trace, new_model, new_aux, app):
    """Match every continuous coordinate; compute the Jacobian of what is left.

    A model address the transform leaves alone (does not read, write, copy from or
    to, or remove) is an implicit copy: its own unit row and column, which can
    neither raise an error here nor enter the Jacobian. So in large traces the hot
    path visits the touched model addresses (in trace order) and the auxiliary ones
    only, and its cost does not grow with the model; the implicit copies and the
    per-coordinate lists a view shows are built on demand (:func:`_match_outputs`
    over every address, :func:`_coordinate_groups`).
    """
    x_flat = model_trace.flat_records()
    y_flat = aux_trace.flat_records()
    xn_flat = new_model.flat_records()
    yn_flat = new_aux.flat_records() if new_aux is not None else {}
    x_part, xn_part = _outside_untouched_families(run, x_flat, xn_flat)
    if len(x_part) + len(xn_part) > _RESTRICT_ABOVE:
        touched = _touched_model_addresses(run, x_part, xn_part)
        x_part, xn_part = _restricted(x_part, touched), _restricted(xn_part, touched)
    consumed, written_outputs = _match_outputs(run, ((MODEL, xn_part), (AUX, yn_flat)))
    remaining_inputs, read_inputs = _match_inputs(run, ((MODEL, x_part), (AUX, y_flat)), consumed, xn_flat)
    _check_dimension(run, remaining_inputs, written_outputs)
    (layout, matrix, logdet), pass_through, rows_source = reduced_jacobian(
        written_outputs, remaining_inputs, run.backend)

    found = []

    def every_copy():       # consumed, implicit copies of untouched addresses included: once, on demand
        if not found:       # (a list, not functools.cache: that costs a wrapper per move)
            found.append(_match_outputs(run, ((MODEL, xn_flat), (AUX, yn_flat)))[0])
        return found[0]

    # dense() differentiates with respect to every continuous read, including reads of
    # copied coordinates (their columns are not unit columns when a written value uses them).
    graph = rows_source + (read_inputs,)
    flats = (x_flat, y_flat, xn_flat, yn_flat)
    app.jacobian = JacobianRecord(lambda: _coordinate_groups(flats, every_copy(), run.copied_to), pass_through,
                                  layout, matrix, logdet, graph)
    app._consumed = every_copy


def _match_inputs(run, sides, consumed, xn_flat):
    """``(remaining inputs, every continuous read)`` as ``(CoordinateGroup, leaf)`` lists:
    the continuous reads of ``sides`` (``(side, flat records)`` pairs) that no copy
    consumed, and all of them (for ``dense()``). Raises if a continuous input is
    neither read nor consumed: its information would be lost."""
    reads = run.reads
    remaining_inputs, read_inputs = [], []
    for side, flat in sides:
        trace = _IN[side]
        for address, rec in flat.items():
            dist = rec.dist
            if dist.discrete:
                continue
            key = (side, address)
            read = reads.get(key)
            if read is not None and read[4] is not None:        # (read[4]: read.leaf)
                entry = (group_of(trace, address, dist, rec.value), read[4])
                read_inputs.append(entry)
                if key not in consumed:
                    remaining_inputs.append(entry)
            elif key not in consumed:
                raise _lost_input(side, address, xn_flat)
    return remaining_inputs, read_inputs


def _lost_input(side, address, xn_flat):
    if side == MODEL and address in xn_flat:
        what = (f"model address {format_address(address)} is overwritten in the new model trace "
                f"without its old value having been read or copied")
    elif side == MODEL:
        what = (f"continuous model address {format_address(address)} disappears from the new "
                f"model trace without having been read or copied")
    else:
        what = (f"auxiliary choice {format_address(address)} (sampled by the auxiliary program) "
                f"is neither read nor copied by the transform")
    return TransformError(
        f"{what}: its information would be lost, so the transform cannot be a bijection. "
        f"Read it (il.read(..., il.continuous)) and use it, or copy it to an output."
    )


def _check_dimension(run, remaining_inputs, written_outputs):
    n_in = sum(map(_size, map(_group, remaining_inputs)))
    n_out = sum(map(_size, map(_group, written_outputs)))
    if n_in != n_out:
        ins = ", ".join(c.label() for g, _ in remaining_inputs for c in g.expand()) or "(none)"
        outs = ", ".join(c.label() for g, _ in written_outputs for c in g.expand()) or "(none)"
        raise DimensionError(
            f"the transform {run.transform.name} maps {n_in} continuous input coordinate(s) to "
            f"{n_out} output coordinate(s) (after removing copies); a bijection needs equal numbers. "
            f"Inputs read: {ins}. Outputs written: {outs}. Add auxiliary choices on the smaller "
            f"side (e.g. sample them in the auxiliary program) or write the missing outputs."
        )


_group, _size = itemgetter(0), itemgetter(2)        # (group, source) -> group; group -> its size


def _outside_untouched_families(run, x_flat, xn_flat):
    """``(x_flat, xn_flat)``, without their compact families when both traces hold the same
    ones (addresses) and the transform touches no address under them (one of a per-point
    loop's data, say): every element is then an implicit copy of itself, which _account
    need not visit (as it need not visit any untouched address)."""
    if type(x_flat) is dict or type(xn_flat) is dict:       # (no compact family in one)
        return x_flat, xn_flat
    layout = x_flat.layout
    if layout != xn_flat.layout:
        return x_flat, xn_flat
    heads = {head for head, _ in layout}
    if any(key[1][:-1] in heads for key in chain(run.reads, run.writes, run.copied_to)) or \
            any(c.src_address[:-1] in heads for c in run.copies):
        return x_flat, xn_flat
    return x_flat.outside, xn_flat.outside


def _touched_model_addresses(run, x_flat, xn_flat):
    """The model addresses a transform read, wrote, copied from or to, or removed (and
    any auxiliary address it used: as a model address, it would only cost time)."""
    touched = set(map(itemgetter(1), chain(run.reads, run.writes, run.copied_to)))
    touched.update(map(attrgetter("src_address"), run.copies))
    # Every address the new trace adds was written or copied (_model_update raises
    # otherwise), so the sizes say how many old addresses are gone; usually the
    # transform used them all. (set.difference with a dict hashes no address.)
    added = [a for a in _missing(touched, x_flat) if a in xn_flat]
    removed = [a for a in _missing(touched, xn_flat) if a in x_flat]
    if len(removed) != len(x_flat) - len(xn_flat) + len(added):
        removed = set(x_flat).difference(xn_flat)       # some were not touched: find them all
    touched.update(removed)
    return touched


def _missing(addresses, flat):
    """The addresses (a set) that ``flat`` lacks, visiting only those addresses."""
    if type(flat) is dict:
        return addresses.difference(flat)
    return flat.missing(addresses)      # a trace's FlatRecords (compact families)


def _restricted(flat, addresses):
    """The records of ``flat`` at ``addresses``, in trace order."""
    if type(flat) is not dict:
        return flat.restricted(addresses)       # a trace's FlatRecords: visits only those
    return {a: flat[a] for a in filter(addresses.__contains__, flat)}     # the scan in C


def _match_outputs(run, sides):
    """Match the continuous output addresses of ``sides`` (``(side, flat records)`` pairs, in
    trace order) to what fills them: ``(consumed, written outputs)``. ``consumed`` maps each
    input key used as a copy (explicit, or an unwritten model address keeping its value) to
    the output key using it; written outputs are ``(CoordinateGroup, derivative source)``
    (the backend's: tangents, or autograd values). Raises if one input reaches two outputs."""
    writes, copied_to, derivative_source = run.writes, run.copied_to, run.backend.derivative_source
    consumed = {}
    claim = consumed.setdefault     # (one lookup: the key given back is another when taken)
    written_outputs = []
    for side, flat in sides:
        out = _OUT[side]
        for address, rec in flat.items():
            dist = rec.dist
            if dist.discrete:
                continue
            key = (side, address)
            write = writes.get(key)
            if write is not None:
                group = group_of(out, address, dist, rec.value)
                written_outputs.append((group, derivative_source(write, dist)))
                continue
            copy = copied_to.get(key) if copied_to else None
            src = (copy.src_side, copy.src_address) if copy is not None else key
            if claim(src, key) is not key:       # (each output key is a new tuple, made once)
                raise _two_outputs(src, consumed[src], key)
    return consumed, written_outputs


def _two_outputs(src, first, key):
    side, address = key
    return TransformError(
        f"the value of {_IN[src[0]]}[{format_address(src[1])}] reaches two outputs "
        f"({_OUT[first[0]]}[{format_address(first[1])}] and "
        f"{_OUT[side]}[{format_address(address)}]): a continuous value cannot be "
        f"duplicated by an involution. If the model keeps it, do not copy it too."
    )


def _coordinate_groups(flats, consumed, copied_to):
    """``(inputs, outputs, eliminated)`` as :class:`CoordinateGroup` lists, one entry per
    continuous address, in trace order; eliminated entries are ``(source, destination, kind)``."""
    x_flat, y_flat, xn_flat, yn_flat = flats
    inputs = [CoordinateGroup(_IN[side], a, r.dist, r.value)
              for side, flat in ((MODEL, x_flat), (AUX, y_flat))
              for a, r in flat.items() if not r.dist.discrete]
    outputs, eliminated = [], []
    by_destination = {dst: src for src, dst in consumed.items()}
    for side, flat in ((MODEL, xn_flat), (AUX, yn_flat)):
        for address, rec in flat.items():
            if rec.dist.discrete:
                continue
            group = CoordinateGroup(_OUT[side], address, rec.dist, rec.value)
            outputs.append(group)
            src = by_destination.get((side, address))
            if src is not None:
                src_rec = (x_flat if src[0] == MODEL else y_flat)[src[1]]
                kind = "copy" if (side, address) in copied_to else "implicit"
                eliminated.append((CoordinateGroup(_IN[src[0]], src[1], src_rec.dist, src_rec.value),
                                   group, kind))
    return inputs, outputs, eliminated


def apply_transform(f, model_trace, aux_trace=None, q=None, q_args=(), check_dimension=True,
                    autodiff=None):
    """Apply transform ``f`` to ``(model_trace, aux_trace)``; return an :class:`Application`.

    ``q`` (the auxiliary program, called as ``q(trace, *q_args)``) is needed to
    score the new auxiliary choices; without it the new auxiliary trace must be empty.
    ``autodiff`` overrides ``f.autodiff`` for this application (``"torch"`` or ``"auto"``).
    Raises :class:`~imcmc_lab.errors.TransformError` subclasses for broken rules;
    records support failures, and a Jacobian whose ``log |det J|`` is not finite (a
    lost or NaN derivative), in ``Application.problem``.

    With ``f.compile`` (and ``autodiff="auto"``, ``check_dimension``), generated code may
    serve the move (:mod:`.compiled`, :func:`.apply_compiled.apply_compiled`): the same
    results bit for bit, and the same errors, since anything it cannot decide runs here.
    """
    aux_trace = EMPTY_AUX if aux_trace is None else aux_trace
    cache = compiled_cache(f, check_dimension, autodiff)
    if cache is None:
        return interpret(f, model_trace, aux_trace, q, q_args, check_dimension, autodiff)
    app = apply_compiled(cache, f, model_trace, aux_trace, q, q_args)
    if app is not None:
        if type(app) is not CompiledApplication:
            cache.report.misses += 1        # (finished on the interpreter past the model update)
        return app
    cache.report.misses += 1
    fallbacks = f.torch_fallbacks
    app = interpret(f, model_trace, aux_trace, q, q_args, check_dimension, autodiff)
    if f.torch_fallbacks == fallbacks:      # (a key the float path hands to torch is not compiled)
        cache.learn(model_trace, aux_trace, app)
    return app


def _continue(f, model_trace, aux_trace, q, q_args, update, generate=None):
    """The interpreter's path from a model update (and auxiliary generate) the compiled path
    made already: it touched the random stream, so they are used, not made again."""
    return interpret(f, model_trace, aux_trace, q, q_args, True, None, update, generate)


def interpret(f, model_trace, aux_trace, q, q_args, check_dimension, autodiff, update=None, generate=None):
    """``apply_transform`` on the interpreter (``update``/``generate``: see :func:`_continue`)."""
    app = Application()
    run = app.run = run_transform(f, model_trace, aux_trace if aux_trace is not EMPTY_AUX else None,
                                  autodiff=autodiff)
    app.transform = f
    result = _model_update(run, model_trace, update)
    app.new_model, app.model_log_ratio = result.trace, result.weight
    app._model_update = result        # its discard is lent to the user only when read
    _check_output_labels(run, MODEL, app.new_model)
    aux_choices = run.output_choices(AUX)
    if q is None:
        if aux_choices:
            a = next(iter(aux_choices))
            raise TransformError(
                f"the transform writes aux_out[{format_address(a)}] but the move has no auxiliary program")
        app.new_aux, app.log_q_new = EMPTY_AUX, 0.0
    else:
        new_aux, problem = _aux_generate(q, q_args, app.new_model, aux_choices, run, generate)
        if new_aux is None:
            raise TransformError(
                f"the new auxiliary choices do not form a trace of {q.name}: {problem}"
                f"{'' if problem.endswith('?') else '.'} The transform must write (or copy) exactly "
                f"the choices {q.name} makes at the new model trace."
            )
        app.new_aux, app.log_q_new = new_aux, new_aux.score
        _check_output_labels(run, AUX, new_aux)
    try:
        _account(run, model_trace, aux_trace, app.new_model, app.new_aux, app)
    except DimensionError as exc:
        if check_dimension:
            raise
        app.problem = f"dimension: {exc}"
        return app
    app.problem = support_problem(app) or (app.jacobian.problem if not math.isfinite(app.jacobian.logabsdet)
                                           else None)
    return app


def support_problem(app):
    """Why the new traces have probability zero (a support failure), or None."""
    if app.model_log_ratio == -math.inf or math.isnan(app.model_log_ratio):
        return ("support: the new model trace has probability zero (p(x') = 0)"
                + _zero_density_addresses(app.new_model, "model_out"))
    if app.log_q_new == -math.inf:
        return ("support: the new auxiliary choices have probability zero under q at the "
                "new model trace (q_{x'}(y') = 0)" + _zero_density_addresses(app.new_aux, "aux_out"))
    return None


def _zero_density_addresses(trace, name):
    from ..core.values import format_value

    bad = [(a, r) for a, r in trace.flat_records().items() if r.logpdf == -math.inf]
    if not bad:
        return ""
    return ": " + "; ".join(f"{name}[{format_address(a)}] = {format_value(r.value)} is outside the "
                            f"support of {r.dist!r}" for a, r in bad[:3])


# ---------------------------------------------------------------------------
# the compiled path (see compiled/): generated code per branch key of a transform
# ---------------------------------------------------------------------------
def compiled_cache(f, check_dimension, autodiff):
    """``f``'s :class:`~.compiled.cache.CompiledTransform` when this application may use it:
    ``f.compile``, autodiff "auto" (the float path, which the code reproduces) and the
    dimension check on (a checked move needs the interpreter's record anyway)."""
    if not (check_dimension and autodiff in (None, "auto") and type(f) is Transform and f.compile
            and f.autodiff == "auto"):
        return None
    cache = f._compiled_cache
    if cache is None:
        cache = f._compiled_cache = CompiledTransform(f)
    return cache


class CompiledApplication(Application):
    """An :class:`Application` whose transform ran as generated code. The new traces, the
    log-density terms, ``logabsdet`` and ``problem`` are the move's own; the interpreter's
    record (``run``, ``jacobian``, the implicit copies) is made on first access by running the
    transform interpreted on the same two input traces (a deterministic function of them) and
    the interpreter's accounting on the move's own update and generate results (so no model
    or auxiliary program runs again): the record the interpreter would have made."""

    run = jacobian = None       # (class level: the properties below replace them)

    def __init__(self, f, inputs, update, generate, new_aux, answer):
        self.transform, self._inputs, self._fn, self._generate = f, inputs, f.fn, generate
        self.new_model, self.model_log_ratio, self._model_update = update.trace, update.weight, update
        self.new_aux = new_aux
        self.log_q_new = new_aux.score if new_aux is not EMPTY_AUX else 0.0
        self._answer, self._logabsdet, self._interpreted = answer, answer[2], None
        self.problem = support_problem(self)

    def _detail(self):
        """The interpreter's application on the move's traces, with the move's function; it
        must reproduce the move's written values and log |det J| bit for bit (it does unless
        something the transform reads was changed since the move: then this says so)."""
        if self._interpreted is None:
            f, (x, y, q, q_args) = self.transform, self._inputs
            if f.fn is not self._fn:
                f = copy_module.copy(f)
                f.fn = self._fn
            app = interpret(f, x, y, q, q_args, True, None, self._model_update, self._generate)
            if not agrees(app, self._answer):
                raise TransformError(
                    f"the record of this move of {f.name} cannot be rebuilt: the move's reads, writes and "
                    f"Jacobian are rebuilt on first access, and rebuilt now they differ from the move's "
                    f"(the transform, a global, closure or module attribute it reads, or a value of one of "
                    f"the move's traces was changed since the move). Read a record before changing what "
                    f"its move used, or make the transform with compile=False.")
            self._interpreted = app
        return self._interpreted

    run = property(lambda self: self._detail().run)
    jacobian = property(lambda self: self._detail().jacobian)
    _consumed = property(lambda self: self._detail()._consumed)

    @property
    def logabsdet(self) -> float:
        return self._logabsdet

    def raise_jacobian_problem(self):
        """Nothing to raise: the generated code serves only moves whose log |det J| is finite."""


def apply_compiled(cache, f, x, y, q, q_args):
    """The move on ``f``'s generated code, or None (a miss: nothing was drawn, the
    interpreter runs the move). Past the model update every fact the interpreter would check
    is checked here; one that fails hands the move to the interpreter with the update (and
    generate) made already, so it raises or records exactly what it would have."""
    x_flat, y_flat = x.flat_records(), y.flat_records()
    found = cache.lookup(x_flat, y_flat)
    if found is None:
        return None
    out, (kinds_m, kinds_a, n_aux) = found
    mo, ao, ld, post, inputs, rows_m, rows_a, cols_m, cols_a, _ = out
    if not math.isfinite(ld) or len(y_flat) != n_aux or (q is None and ao):
        return None         # the interpreter records the Jacobian problem / raises
    try:
        update = x.update_detailed(mo)
    except ConstraintError:
        run = run_transform(f, x, y if y is not EMPTY_AUX else None)
        raise _unvisited_model_write(run, x, run.output_choices(MODEL)) from None
    xn_flat = update.trace.flat_records()
    if not _model_side_holds(update, x_flat, xn_flat, mo, kinds_m, post, inputs, rows_m, cols_m):
        return _continue(f, x, y, q, q_args, update)
    generate = None
    if q is None:
        new_aux = EMPTY_AUX
    else:
        generate = q.generate_detailed((update.trace,) + tuple(q_args), ao, strict=False)
        new_aux = generate.trace
        yn_flat = new_aux.flat_records()
        if generate.fresh or len(yn_flat) != len(ao) or not _labels_hold(yn_flat, ao, kinds_a) or \
                not _in_order(yn_flat, rows_a) or not _in_order(y_flat, cols_a):
            return _continue(f, x, y, q, q_args, update, generate)
    if cache.should_check(out[-1]):         # (the interpreter on the same update and generate)
        app = _continue(f, x, y, q, q_args, update, generate)
        if not agrees(app, out):
            # The update and generate came from wrong values: the interpreter's own move, from
            # the start (they drew nothing: no address was fresh, so neither did anything here).
            cache.disagreed()
            app = interpret(f, x, y, q, q_args, True, None)
        return app
    cache.report.hits += 1
    return CompiledApplication(f, (x, y, q, q_args), update, generate, new_aux, out)


def _model_side_holds(update, x_flat, xn_flat, mo, kinds, post, inputs, rows, cols):
    """The interpreter's model-side checks, for this move, in what the key did not fix:

    * no address sampled from the prior (``fresh``) and no kind change (both its errors);
    * ``post``: membership in the new model trace of the read (or copied) addresses the key
      took as implicit copies or not (it decides columns and the "two outputs" error);
    * the output labels (and a written vector's simplex flag) against the new records;
    * lost inputs: a continuous old address the transform did not read or copy from is lost
      exactly when it is overwritten or removed, and the update's discard lists every
      overwritten or removed address (an untouched one that stays keeps its value: an
      implicit copy); so checking the discard's addresses is exact;
    * the rows' order in the new trace and the columns' order in the old one.
    """
    if update.fresh or update.kind_changed:
        return False
    for a, want in post:
        if (a in xn_flat) is not want:
            return False
    if not _labels_hold(xn_flat, mo, kinds):
        return False
    discard = update._discard       # (read without lending it: nothing is handed out here)
    if discard:
        touched = set(inputs)
        for a in discard:
            if a not in touched:
                rec = x_flat.get(a)
                if rec is not None and not rec.dist.discrete:
                    return False
    return _in_order(xn_flat, rows) and _in_order(x_flat, cols)


def _labels_hold(flat, choices, kinds):
    """Each output's new record has the kind (and simplex flag) the key was traced with."""
    for a, (is_discrete, simplex) in zip(choices, kinds):
        rec = flat.get(a)
        if rec is None:
            continue        # (an address the new trace lacks: ConstraintError or "extra" already)
        dist = rec.dist
        if bool(dist.discrete) is not is_discrete or (simplex is not None and bool(dist.simplex) is not simplex):
            return False
    return True


def _in_order(flat, addresses):
    """Whether ``addresses`` come in this order in ``flat`` (trace order)."""
    if len(addresses) < 2:
        return True
    wanted = set(addresses)
    plain = flat if type(flat) is dict else flat.outside
    if plain is not flat and not wanted.issubset(plain):
        return tuple(_restricted(flat, wanted)) == addresses
    # (the records outside families are in trace order: FlatRecords.restricted reads them so)
    return tuple(islice(filter(wanted.__contains__, plain), len(addresses))) == addresses


def agrees(app, out):
    """Whether a candidate key's answer ``out`` on the move of ``app`` is the interpreter's:
    every written value (type, dtype, shape, every bit) and log |det J|."""
    if out is None or not math.isfinite(app.logabsdet):
        return False
    run = app.run
    return (_same_choices(out[0], run.output_choices(MODEL)) and _same_choices(out[1], run.output_choices(AUX))
            and float(out[2]).hex() == float(app.logabsdet).hex())


def _same_choices(a, b):
    if list(a) != list(b):
        return False
    for k, v in a.items():
        w = b[k]
        if type(v) is not type(w):
            return False
        if isinstance(v, torch.Tensor):
            if v.dtype != w.dtype or v.shape != w.shape or v.detach().numpy().tobytes() != w.detach().numpy().tobytes():
                return False
        elif v != w:
            return False
    return True
