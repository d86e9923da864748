"""Running a program as simulate / generate / assess / update / regenerate.

One :class:`Execution` request describes which of these a run is; a
:class:`_Tracer` (the handler active while a ``@gen`` function's body runs)
answers every ``dist @ address`` and ``callee(args) @ address`` the body makes.
This mirrors Pyro's effect handlers and Gen's per-operation state objects, with
one handler parameterised by the mode instead of five near-copies.

Incremental update lives here: a choice whose value and distribution arguments
are unchanged keeps its cached log-density; a sub-call with unchanged arguments
and nothing constrained or selected under it keeps its whole sub-trace without
re-running.
"""

from __future__ import annotations

import linecache
import math
import operator
import threading

from ..core.address import format_address, normalize_address, did_you_mean
from ..core.choicemap import ChoiceMap, as_choicemap, as_selection
from ..core.effects import pop_handler, push_handler
from ..core.values import ScalarList, format_value, plain_float, plain_floats, values_equal
from ..errors import (AddressError, ConstraintError, DistributionError,
                      DuplicateAddressError)
from .trace import CallRecord, ChoiceRecord

SIMULATE, GENERATE, ASSESS, UPDATE, REGENERATE = "simulate", "generate", "assess", "update", "regenerate"
_NEG_INF = float("-inf")


class WorkCounters:
    """Counts of engine work, for tests and benchmarks that measure by counting.

    ``logpdf_evaluations``: log-densities computed for choices (cached reuse not
    counted). ``executions``: bodies of ``@gen`` functions run (including
    combinator kernels).
    """

    __slots__ = ("logpdf_evaluations", "executions")

    def __init__(self):
        self.logpdf_evaluations = 0
        self.executions = 0

    def snapshot(self):
        return (self.logpdf_evaluations, self.executions)


counters = WorkCounters()


class WorkCount:
    """Result of :func:`count_work`: work done inside the ``with`` block."""

    def __init__(self):
        self.logpdf_evaluations = 0
        self.executions = 0

    def __repr__(self):
        return f"WorkCount(logpdf_evaluations={self.logpdf_evaluations}, executions={self.executions})"


class count_work:
    """``with il.count_work() as work: ...`` then read ``work.logpdf_evaluations``."""

    def __enter__(self):
        self._start = counters.snapshot()
        self.result = WorkCount()
        return self.result

    def __exit__(self, *exc):
        lp, ex = counters.snapshot()
        self.result.logpdf_evaluations = lp - self._start[0]
        self.result.executions = ex - self._start[1]
        return False


class _AssessFailure(Exception):
    """Internal: assess met an address the given choices do not have."""


class Result:
    """What one run returns to its caller."""

    __slots__ = ("trace", "weight", "discard", "fresh", "n_used")

    def __init__(self, trace, weight, discard, fresh, n_used):
        self.trace, self.weight, self.discard, self.fresh, self.n_used = trace, weight, discard, fresh, n_used


# ---------------------------------------------------------------------------
# the active handler lives in core.effects (the lowest layer owns the mechanism)
# ---------------------------------------------------------------------------
_local = threading.local()      # grad_terms of differentiable_score


def _describe_line(line) -> str:
    filename, lineno = line
    text = linecache.getline(filename, lineno).strip()
    where = f"line {lineno}"
    return f"{where}: {text}" if text else f"{where} of {filename}"


def _group_by_prefix(flat: dict) -> dict:
    """{prefix: {rest: value}} for every proper prefix of every address."""
    groups = {}
    for address, value in flat.items():
        for i in range(1, len(address)):
            groups.setdefault(address[:i], {})[address[i:]] = value
    return groups


# ---------------------------------------------------------------------------
# running a child (sub-call or combinator element) -- shared by all traces
# ---------------------------------------------------------------------------
def run_child(gen_fn, args, prev_sub, sub_constraints, sub_selection, mode):
    """Run a callee under ``mode`` given its previous trace (or None).

    Returns ``(Result, weight_contribution)``; reuses ``prev_sub`` untouched when
    nothing under it changed (the incremental fast path).
    """
    __tracebackhide__ = True
    if mode in (UPDATE, REGENERATE) and prev_sub is not None and prev_sub.gen_fn == gen_fn:
        selected = sub_selection is not None and not sub_selection.is_empty()
        if not sub_constraints and not selected and (args is prev_sub.args or values_equal(args, prev_sub.args)):
            return Result(prev_sub, 0.0, None, None, 0), 0.0
        result = gen_fn._execute(args, prev_sub, sub_constraints, sub_selection, mode)
        return result, result.weight
    if mode == UPDATE:
        # A new sub-call inside an update: its whole score enters log p(new) - log p(old).
        result = gen_fn._execute(args, None, sub_constraints, None, GENERATE)
        return result, result.trace.score
    if mode == REGENERATE:
        result = gen_fn._execute(args, None, None, None, SIMULATE)
        return result, 0.0
    result = gen_fn._execute(args, None, sub_constraints, None, mode)
    return result, result.weight


# ---------------------------------------------------------------------------
# the tracer of @gen functions
# ---------------------------------------------------------------------------
class _Tracer:
    __slots__ = ("gen_fn", "mode", "prev", "constraints", "selection", "records", "lines",
                 "family_lines", "namespaces", "weight", "discard", "fresh", "n_used", "_groups",
                 "impossible", "grad_terms", "n_kept", "families")

    def __init__(self, gen_fn, mode, prev, constraints, selection):
        self.gen_fn, self.mode, self.prev = gen_fn, mode, prev
        self.constraints = constraints or None
        self.selection = selection
        self.records = {}
        self.lines = {}
        # (addresses, line) of the families whose elements were not entered in ``lines``
        # one by one (error messages look them up there)
        self.family_lines = []
        self.namespaces = set()
        self.weight = 0.0
        self.discard = {}
        self.fresh = []
        self.n_used = 0
        self._groups = None
        # Set once some choice has log-density -inf: later invalid parameters are then
        # a consequence (a kept value outside its new support), not a user error.
        self.impossible = False
        # differentiable_score collects the log-density tensors of the run here
        self.grad_terms = getattr(_local, "grad_terms", None)
        # addresses of ``prev`` visited again with a record of the same kind (and callee):
        # when that is all of them, finish_removed has nothing to do
        self.n_kept = 0
        # (namespace, line) -> _Family: the indexed families of this run, for the next update
        self.families = None

    # -- address bookkeeping ---------------------------------------------
    def _claim(self, address, line, what):
        records = self.records
        if address in records or address in self.namespaces or not address:
            self._claim_error(address, line, what)      # raises (kept out of the hot path)
        if len(address) > 1:
            namespaces = self.namespaces
            for i in range(1, len(address)):
                prefix = address[:i]
                if prefix in namespaces:     # checked when added (a namespace is never a leaf)
                    continue
                if prefix in records:
                    raise AddressError(
                        f"address {format_address(address)} in {self.gen_fn.name} "
                        f"({_describe_line(line)}) lies under {format_address(prefix)}, which "
                        f"already holds a value; a path is a leaf or a namespace, never both."
                    )
                namespaces.add(prefix)
        self.lines[address] = line

    def _claim_error(self, address, line, what):
        if not address:
            raise AddressError(f"the empty address () cannot hold a {what}; give it a name")
        if address in self.records:
            first = self.lines.get(address) or next(
                line for addresses, line in self.family_lines if address in addresses)
            raise DuplicateAddressError(
                f"address {format_address(address)} is sampled twice in one execution of "
                f"{self.gen_fn.name}: first at {_describe_line(first)}; again at "
                f"{_describe_line(line)}. Give each random choice its own address "
                f"(e.g. add a loop index: (\"x\", i))."
            )
        if address in self.namespaces:
            raise AddressError(
                f"address {format_address(address)} in {self.gen_fn.name} "
                f"({_describe_line(line)}) is already a namespace holding other choices; "
                f"a path is a leaf or a namespace, never both."
            )

    def _sub_constraints(self, address):
        if self.constraints is None:
            return None
        if self._groups is None:
            self._groups = _group_by_prefix(self.constraints)
        return self._groups.get(address)

    # -- dist @ address ---------------------------------------------------
    def choice(self, address, dist, line):
        self._claim(address, line, "random choice")
        mode = self.mode
        prev_rec = None
        if self.prev is not None:
            prev_rec = self.prev._records.get(address)
            if type(prev_rec) is ChoiceRecord:
                self.n_kept += 1
            else:
                prev_rec = None
        constraints = self.constraints
        if constraints is not None and address in constraints:
            valid = self._validate(dist, address, line, may_be_impossible=True)
            try:
                value = dist.coerce(constraints[address])
            except (ValueError, TypeError) as exc:
                raise DistributionError(
                    f"the value given for address {format_address(address)} does not fit "
                    f"{dist!r}: {exc}"
                ) from None
            logpdf = self._score(dist, value, address, valid)
            self.n_used += 1
            if mode == UPDATE:
                if prev_rec is not None:
                    self.weight += logpdf - prev_rec.logpdf
                    self.discard[address] = prev_rec.value
                else:
                    self.weight += logpdf
            else:
                self.weight += logpdf
        elif prev_rec is not None and not (mode == REGENERATE and address in self.selection):
            value = prev_rec.value
            # A finite cached log-density means these same parameters were valid: the
            # hot path of update reuses it (and its record: the same value, density and
            # distribution arguments) without validating or re-scoring.
            if prev_rec.logpdf != _NEG_INF and dist.same_as(prev_rec.dist):
                self.records[address] = prev_rec
                return value
            else:
                valid = self._validate(dist, address, line, may_be_impossible=True)
                if valid and dist.same_as(prev_rec.dist):
                    logpdf = prev_rec.logpdf
                else:
                    logpdf = self._score(dist, value, address, valid)
                    self.weight += logpdf - prev_rec.logpdf
        else:
            if mode == ASSESS:
                raise _AssessFailure(address)
            self._validate(dist, address, line, may_be_impossible=False)
            value = dist.sample()
            logpdf = self._score(dist, value, address, True)
            if mode == UPDATE:
                self.weight += logpdf
            if mode in (UPDATE, REGENERATE, GENERATE):
                self.fresh.append(address)
        self.records[address] = ChoiceRecord(dist, value, logpdf)
        return value

    # -- [dist @ (namespace, key) for key in keys] (see families.py) --------
    def choice_family(self, namespace, keys, dist, line):
        """The choices ``dist @ (namespace, key)``, one per key, in order; their values.

        Each element means exactly what :meth:`choice` makes of it. In ``update`` an
        element that is unconstrained, kept, and has the same distribution as before
        reuses its record here without a Python-level step of its own: the previous
        trace remembers each family (:class:`_Family`), so the kept elements are the
        slices between the few that :meth:`choice` must handle (constrained, new, changed
        or erroneous elements).
        """
        choice = self.choice
        addresses, rest = _family_addresses(namespace, keys)
        if len(addresses) < _BULK_FAMILY or self.mode == ASSESS:
            return [choice(address, dist, line) for address in addresses]
        if self.mode != UPDATE or self.prev is None:
            values = [choice(address, dist, line) for address in addresses]
            return self._remember_family(namespace, line, keys, addresses, dist, values)
        if rest is None:
            rest = frozenset(addresses[1:])
        if (len(rest) != len(addresses) - 1 or not rest.isdisjoint(self.records)
                or not rest.isdisjoint(self.namespaces)):
            # a repeated key or an address taken already: choice() raises the right error
            return [choice(address, dist, line) for address in addresses]
        old = self.prev._families.get((namespace, line)) if self.prev._families else None
        offset = _aligned_offset(old, keys, dist)
        if offset is None:
            values = [choice(addresses[0], dist, line)]     # claims the namespace (or raises)
            self.family_lines.append((rest, line))
            return self._family_from_records(namespace, line, keys, addresses, rest, dist, values)
        # Element i is old element i + offset. Redone (by choice()): the constrained ones and
        # those outside the old family; the slices between them are kept as they were.
        n, constraints = len(addresses), self.constraints
        redo = set()
        if constraints:
            redo = {address[1] - keys.start for address in rest.intersection(constraints)}
            if addresses[0] in constraints:
                redo.add(0)
        redo.update(range(min(n, max(0, -offset))))
        redo.update(range(max(0, len(old.keys) - offset), n))
        redo = sorted(redo)
        if not redo or redo[0]:
            self._claim(addresses[0], line, "random choice")     # a kept first element claims the namespace
        self.family_lines.append((rest, line))
        records, old_records, old_values = self.records, old.records, old.values
        values, recs, uniform, start = [], [], True, 0
        for i in redo + [n]:
            if start < i:
                kept = old_records[start + offset:i + offset]
                records.update(zip(addresses[start:i], kept))
                recs += kept
                values += old_values[start + offset:i + offset]
                self.n_kept += i - start
            if i < n:
                values.append(choice(addresses[i], dist, line))
                rec = records[addresses[i]]
                recs.append(rec)
                uniform = uniform and type(rec) is ChoiceRecord and rec.logpdf != _NEG_INF
            start = i + 1
        # the old family's floats, if known, give the new one's at the cost of the redone elements
        floats_from = (old._floats, offset, redo) if type(old._floats) is tuple else None
        return self._store_family(namespace, line, keys, dist, recs, values, uniform, floats_from)

    def _family_from_records(self, namespace, line, keys, addresses, rest, dist, values):
        """The bulk update of a family the previous trace does not remember (or not as
        one uniform family with the same keys' alignment): kept elements found with
        set operations on the previous trace's records."""
        choice = self.choice
        prev_recs = list(map(self.prev._records.get, addresses))
        records = self.records
        start = 1
        for i in self._family_redo(addresses, prev_recs, rest, dist) + [len(addresses)]:
            if start < i:
                recs = prev_recs[start:i]
                records.update(zip(addresses[start:i], recs))
                values += map(_VALUE, recs)
                self.n_kept += i - start
            if i < len(addresses):
                values.append(choice(addresses[i], dist, line))
            start = i + 1
        return self._remember_family(namespace, line, keys, addresses, dist, values)

    def _family_redo(self, addresses, prev_recs, rest, dist):
        """Positions (after the first) of the family elements that :meth:`choice` must handle:
        constrained, new, or not a kept choice with the same distribution and a finite
        log-density. Found with set operations when all the kept ones qualify."""
        constrained = rest.intersection(self.constraints) if self.constraints else frozenset()
        present = list(filter(None, prev_recs[1:]))
        if _uniform(present, dist):
            position = {address: i for i, address in enumerate(addresses)}.__getitem__ \
                if len(addresses) > 64 else addresses.index
            return sorted(map(position, constrained | rest.difference(self.prev._records)))
        redo, same = [], None     # ``same``: a previous distribution object known to equal dist
        for i in range(1, len(addresses)):
            rec = prev_recs[i]
            if (type(rec) is ChoiceRecord and rec.logpdf != _NEG_INF and addresses[i] not in constrained
                    and (rec.dist is same or (same is None and dist.same_as(rec.dist)))):
                same = rec.dist
                continue
            redo.append(i)
        return redo

    def _remember_family(self, namespace, line, keys, addresses, dist, values):
        recs = list(map(self.records.__getitem__, addresses))
        return self._store_family(namespace, line, keys, dist, recs, values, _uniform(recs, dist), None)

    def _store_family(self, namespace, line, keys, dist, recs, values, uniform, floats_from):
        """Remember the family for the next update; its values, as the program gets them."""
        if self.families is None:
            self.families = {}
        # tuples: the program gets ``values`` as a list it may change; the trace keeps its own
        family = _Family(keys, tuple(recs), tuple(values), dist, uniform, floats_from)
        self.families[(namespace, line)] = family
        return ScalarList(values, family.floats)

    def _validate(self, dist, address, line, may_be_impossible):
        """Whether ``dist``'s parameters are valid. Invalid parameters raise, unless the
        value is given (constraint or kept value) and the trace is already impossible:
        then they are a consequence of a kept value outside its support, scored -inf."""
        problem = dist.check_params()
        if problem is None:
            return True
        if may_be_impossible and self.impossible:
            return False
        raise DistributionError(
            f"invalid parameters for {dist.name} at address {format_address(address)} "
            f"({_describe_line(line)}): {problem}."
        )

    def _score(self, dist, value, address, valid=True):
        counters.logpdf_evaluations += 1
        if not valid:
            return _NEG_INF
        shape = getattr(value, "shape", ())
        if dist.event_shape and shape != dist.event_shape and tuple(shape) != tuple(dist.event_shape):
            self.impossible = True
            return _NEG_INF  # a kept value of the wrong length is outside the support
        terms = self.grad_terms
        if terms is None:
            logpdf = dist.logpdf(value)     # a Python float: no tensor round trip on fast paths
        else:
            logpdf_tensor = dist.log_prob(value)
            terms.append(logpdf_tensor)
            logpdf = logpdf_tensor.item()
        if logpdf == _NEG_INF:
            self.impossible = True
        if math.isnan(logpdf):
            raise DistributionError(
                f"the log-density of {dist!r} at address {format_address(address)} is NaN "
                f"for value {format_value(value)}; check the distribution's arguments "
                f"(a NaN or an infinity usually comes from an earlier computation)."
            )
        return logpdf

    # -- callee(args) @ address ------------------------------------------
    def call(self, address, gen_fn, args, line):
        self._claim(address, line, "sub-call")
        prev_sub = None
        if self.prev is not None:
            prev_rec = self.prev._records.get(address)
            if type(prev_rec) is CallRecord:
                prev_sub = prev_rec.trace
        sub_sel = self.selection.subselection(address) if self.selection is not None else None
        result, weight = run_child(gen_fn, args, prev_sub, self._sub_constraints(address), sub_sel, self.mode)
        if prev_sub is not None and result.trace.gen_fn == prev_sub.gen_fn:
            self.n_kept += 1
        self.weight += weight
        self.n_used += result.n_used
        if result.discard:
            for sub, value in result.discard.items():
                self.discard[address + sub] = value
        if result.fresh:
            self.fresh.extend(address + sub for sub in result.fresh)
        self.records[address] = CallRecord(result.trace)
        return result.trace.retval

    # -- the end of an update: what the new run no longer visits -------------
    def finish_removed(self):
        if self.prev is None or self.mode not in (UPDATE, REGENERATE):
            return
        prev_records = self.prev._records
        if self.n_kept == len(prev_records):     # every old address is still there
            return
        records = self.records
        removed = prev_records.keys() - records.keys()
        if self.n_kept + len(removed) == len(prev_records):
            # nothing changed kind: only the removed addresses (in their old order) remain
            candidates = list(filter(removed.__contains__, prev_records)) if len(removed) > 1 else removed
        else:
            candidates = prev_records
        for address in candidates:
            old = prev_records[address]
            new = records.get(address)
            if new is not None and type(new) is type(old) and (
                    type(old) is ChoiceRecord or new.trace.gen_fn == old.trace.gen_fn):
                continue
            if self.mode == UPDATE:
                self.weight -= old.logpdf
            if type(old) is ChoiceRecord:
                self.discard[address] = old.value
            else:
                for sub, value in old.trace.get_choices().items():
                    self.discard[address + sub] = value


#: Families shorter than this go element by element: the bulk path's set operations
#: cost about what a few kept elements cost through ``choice``.
_BULK_FAMILY = 8

_DIST = operator.attrgetter("dist")
_LOGPDF = operator.attrgetter("logpdf")
_VALUE = operator.attrgetter("value")


def _uniform(recs, dist):
    """Whether every record in ``recs`` is a choice with a finite log-density whose
    distribution equals ``dist``, checked without a Python loop over the records (a
    family's elements share one or two distribution objects)."""
    if not recs:
        return True
    try:
        dists = set(map(_DIST, recs))     # AttributeError: a sub-call's record
    except AttributeError:
        return False
    return (all(d is dist or dist.same_as(d) for d in dists)
            and min(map(_LOGPDF, recs)) != _NEG_INF)


class _Family:
    """What a trace remembers of one indexed family (``choice_family``) for the next update:
    its keys, records and values in key order, its distribution, and whether it is
    *uniform* (every record a choice with a finite log-density and that distribution,
    so an unconstrained element kept with the same distribution keeps its record).

    :meth:`floats` gives the values as Python floats, computed on first use: from the
    previous family's floats and the few elements redone (``floats_from``, ``(floats,
    offset, redone positions)``) when those were known, else one by one.
    """

    __slots__ = ("keys", "records", "values", "dist", "uniform", "_floats", "_floats_from")

    def __init__(self, keys, records, values, dist, uniform, floats_from=None):
        self.keys, self.records, self.values, self.dist, self.uniform = keys, records, values, dist, uniform
        self._floats = None         # not computed yet; False: the values are not all plain floats
        self._floats_from = floats_from

    def floats(self):
        if self._floats is None:
            self._floats = self._compute_floats() or False
            self._floats_from = None
        return self._floats or None

    def _compute_floats(self):
        values = self.values
        if self._floats_from is None:
            return plain_floats(values)
        base, offset, redone = self._floats_from
        floats, start, n = [], 0, len(values)
        for i in redone + [n]:
            if start < i:
                floats += base[start + offset:i + offset]
            if i < n:
                value = plain_float(values[i])
                if value is None:
                    return None
                floats.append(value)
            start = i + 1
        return tuple(floats)


def _aligned_offset(old, keys, dist):
    """``i + offset`` is the old family's index of element ``i`` of a new family over ``keys``,
    when both are ranges with step 1, the old one is uniform and the distribution is the
    same; else ``None``."""
    if (old is None or not old.uniform or type(keys) is not range or type(old.keys) is not range
            or keys.step != 1 or old.keys.step != 1 or not (dist is old.dist or dist.same_as(old.dist))):
        return None
    return keys.start - old.keys.start


#: (namespace, range) -> (addresses, frozenset of all but the first): a family's addresses
#: are the same tuples from one run to the next. Cleared when it holds more addresses than this.
_FAMILY_ADDRESSES = {}
_FAMILY_ADDRESSES_LIMIT = 1 << 20
_family_addresses_held = 0


def _family_addresses(namespace, keys):
    """``(addresses, rest)``: the family's addresses in key order, and a frozenset of all
    but the first (cached for ranges; ``None`` for other keys, computed when needed)."""
    global _family_addresses_held
    if type(keys) is not range:
        return tuple([normalize_address((namespace, key)) for key in keys]), None
    cached = _FAMILY_ADDRESSES.get((namespace, keys))
    if cached is None:
        addresses = tuple([(namespace, key) for key in keys])
        cached = (addresses, frozenset(addresses[1:]))
        if _family_addresses_held + len(addresses) > _FAMILY_ADDRESSES_LIMIT:
            _FAMILY_ADDRESSES.clear()
            _family_addresses_held = 0
        _FAMILY_ADDRESSES[(namespace, keys)] = cached
        _family_addresses_held += len(addresses)
    return cached


def _dynamic_trace():
    # gen imports this module: bound on first use (an import statement per run costs)
    global _DynamicTrace
    if _DynamicTrace is None:
        from .gen import DynamicTrace
        _DynamicTrace = DynamicTrace
    return _DynamicTrace


_DynamicTrace = None


def run_dynamic(gen_fn, args, prev, constraints, selection, mode):
    """Run a ``@gen`` function's body under a tracer (see :class:`_Tracer`)."""
    __tracebackhide__ = True  # IPython and pytest hide engine frames in user tracebacks
    tracer = _Tracer(gen_fn, mode, prev, constraints, selection)
    saved = push_handler(tracer)
    counters.executions += 1
    try:
        retval = gen_fn.fn(*args)
    finally:
        pop_handler(saved)
    tracer.finish_removed()
    score = sum(map(_LOGPDF, tracer.records.values()), 0.0)     # in order, as a loop would
    trace = _dynamic_trace()(gen_fn, args, retval, score, tracer.records, tracer.families)
    return Result(trace, tracer.weight, tracer.discard, tracer.fresh, tracer.n_used)


# ---------------------------------------------------------------------------
# public entry points (constraint accounting happens once, at the top)
# ---------------------------------------------------------------------------
def _as_args(args):
    if args is None:
        return ()
    return args if isinstance(args, tuple) else (args,)


def _unused_constraints(trace, flat_constraints):
    have = trace.flat_records()
    return [a for a in flat_constraints if a not in have]


def _raise_unused(gen_fn, trace, flat_constraints, what):
    unused = _unused_constraints(trace, flat_constraints)
    shown = ", ".join(format_address(a) for a in unused[:5])
    more = f" (and {len(unused) - 5} more)" if len(unused) > 5 else ""
    hint = did_you_mean(unused[0], trace.flat_records()) if unused else ""
    raise ConstraintError(
        f"{what} of {gen_fn.name} got a constraint at {shown}{more}, but the program never "
        f"visits {'that address' if len(unused) == 1 else 'those addresses'} in this execution."
        f"{hint} Remove the constraint or fix its address."
    )


def public_generate(gen_fn, args, constraints):
    flat = as_choicemap(constraints)._leaves
    result = gen_fn._execute(_as_args(args), None, flat or None, None, GENERATE)
    if result.n_used != len(flat):
        _raise_unused(gen_fn, result.trace, flat, "generate")
    return result.trace, result.weight


def public_assess(gen_fn, args, choices):
    flat = as_choicemap(choices)._leaves
    try:
        result = gen_fn._execute(_as_args(args), None, flat or None, None, ASSESS)
    except _AssessFailure:
        return _NEG_INF
    if result.n_used != len(flat):
        return _NEG_INF
    return result.weight


def assess_trace(gen_fn, args, choices):
    """Like assess but also returns the trace (``None`` when the choices do not fit)."""
    flat = as_choicemap(choices)._leaves
    try:
        result = gen_fn._execute(_as_args(args), None, flat or None, None, ASSESS)
    except _AssessFailure:
        return None, _NEG_INF
    if result.n_used != len(flat):
        return None, _NEG_INF
    return result.trace, result.weight


def update_full(trace, constraints, args=None):
    """Internal update returning the full :class:`Result` (with fresh addresses)."""
    flat = as_choicemap(constraints)._leaves
    args = trace.args if args is None else _as_args(args)
    result = trace.gen_fn._execute(args, trace, flat or None, None, UPDATE)
    if result.n_used != len(flat):
        _raise_unused(trace.gen_fn, result.trace, flat, "update")
    return result


def public_update(trace, constraints, args=None):
    result = update_full(trace, constraints, args)
    return result.trace, result.weight, ChoiceMap._from_flat(result.discard or {})


def public_regenerate(trace, selection, args=None):
    selection = as_selection(selection)
    args = trace.args if args is None else _as_args(args)
    result = trace.gen_fn._execute(args, trace, None, selection, REGENERATE)
    return result.trace, result.weight


# ---------------------------------------------------------------------------
# differentiable scoring (for gradients: HMC, MALA)
# ---------------------------------------------------------------------------
def differentiable_score(trace, values: dict):
    """``log p`` of ``trace`` with ``values`` (address -> tensor) substituted, as a
    differentiable tensor. Re-scores every choice (no caching), so gradients with
    respect to the substituted tensors flow through every density they affect."""
    import torch

    flat = dict(trace.get_choices().items())
    for address, value in values.items():
        address = normalize_address(address)
        if address not in flat:
            raise AddressError(f"differentiable_score: the trace has no choice at "
                               f"{format_address(address)} to substitute."
                               + did_you_mean(address, flat))
        flat[address] = value
    terms = []
    saved = getattr(_local, "grad_terms", None)
    _local.grad_terms = terms
    try:
        result = trace.gen_fn._execute(trace.args, None, flat, None, ASSESS)
    except _AssessFailure as exc:
        raise AddressError(f"differentiable_score: the program needs address {exc.args[0]!r}, "
                           f"which the trace does not have") from None
    finally:
        _local.grad_terms = saved
    if not terms:
        return torch.zeros((), dtype=torch.float64), result.trace
    return torch.stack([t.reshape(()) for t in terms]).sum(), result.trace
