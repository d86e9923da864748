"""The handlers that run a ``@gen`` body: one class per mode.

While a body runs, one handler is installed on the stack of :mod:`imcmc_lab.core.effects`;
it answers ``dist @ address`` (:meth:`choice`), ``callee(args) @ address``
(:meth:`call`) and a lowered comprehension (:meth:`choice_family`). As in Pyro's
poutine and Gen's per-operation state objects, the rules of a mode live in its class:

=============  =============================================================
``Simulate``   sample every choice
``Generate``   constrained choices take the given value (and weigh), others are sampled
``Assess``     every choice must be given; a missing one ends the run (``AssessFailure``)
``Update``     constrained choices change, kept ones reuse their cached log-density,
               new ones are sampled; the weight is ``log p(new) - log p(old)``
``Regenerate`` selected choices are resampled, the others are kept
=============  =============================================================

The shared parts are in :class:`Tracer`: address claiming (``_claim``), validating and
scoring (``_validate``, ``_score``), sub-calls (``call``). The indexed-family fast path
of ``Update`` is in :mod:`.family_update`; what an incremental run no longer visits is
removed at its end (:meth:`Incremental.finish`).
"""

from __future__ import annotations

import linecache
import math
import operator

from ..core.address import format_address
from ..core.effects import resolve_line
from ..core.values import format_value, values_equal
from ..errors import AddressError, DistributionError, DuplicateAddressError, TraceChangedError
from .execution import Execution, Result, counters
from .family_update import BULK_FAMILY, family_addresses, remember_family, update_family
from .trace import CallRecord, ChoiceRecord, FamilyRecord, family_element

__all__ = ["Tracer", "Simulate", "Generate", "Assess", "Update", "Regenerate", "AssessFailure", "check_handed"]

_NEG_INF = float("-inf")
_VERSION = operator.attrgetter("_version")


class AssessFailure(Exception):
    """Assess met an address the given choices do not have (``args[0]``)."""


def describe_line(line) -> str:
    filename, lineno = resolve_line(line)
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


def compact_line(compact, address):
    """The line of the compact family (of ``compact``, ``{(namespace,): [FamilyRecord]}``)
    holding ``address``, or None."""
    found = compact.get(address[:-1]) if len(address) == 2 else None
    if found:
        for family in found:
            if family.position(address[-1]) is not None:
                return family.line
    return None


def _handed_changed(tracer, value):
    """Raise the TraceChangedError of a body that changed ``value`` (handed to it) in place."""
    address, call = _find_handed(tracer.records, value)
    where = format_address(address) if address is not None else "a random choice"
    name = next((key for key in reversed(address or ()) if isinstance(key, str)), "x")
    line = tracer.lines.get(call or address) or next(
        (line for addresses, line in tracer.family_lines if address in addresses), None)
    at = f" ({describe_line(line)})" if line else ""
    if call is None:
        what = f"the value of {where} in place after drawing it{at}"
    elif call == address:
        what = f"the return value of the call at {where} in place{at}"
    else:
        what = f"the value of {where} in place after the call at {format_address(call)} returned it{at}"
    raise TraceChangedError(
        f"the body of {tracer.gen_fn.name} changed {what}: the trace would keep the changed value "
        f"with the density of the drawn one. Use an out-of-place operation, which makes a new "
        f"tensor: `{name} = {name} - ...` instead of `{name} -= ...`, `{name}[i] = ...` or "
        f"`{name}.sub_(...)`; or copy first with `{name} = {name}.clone()`.")


def _find_handed(records, value):
    """``(address, call address or None)`` of a tensor the body received, or ``(None, None)``."""
    for address, record in records.items():
        if type(record) is ChoiceRecord:
            if record.value is value:
                return address, None
            continue
        if type(record) is FamilyRecord:
            elements = record.values.elements or ()
            for i, element in enumerate(elements):
                if element is value:
                    return (record.namespace, record.keys[i]), None
            continue
        sub = record.trace
        for inner, rec in sub.flat_records().items():
            if rec.value is value:
                return address + inner, address
        retval = sub.retval
        if retval is value or (type(retval) in (list, tuple) and any(v is value for v in retval)):
            return address, address
    return None, None


def _claim_error(tracer, address, line, what):
    """Raise the error for an address :meth:`Tracer._claim` refuses (taken, empty, a namespace)."""
    if not address:
        raise AddressError(f"the empty address () cannot hold a {what}; give it a name")
    in_family = tracer.compact is not None and compact_line(tracer.compact, address)
    if address in tracer.records or in_family:
        first = tracer.lines.get(address) or in_family or next(
            line for addresses, line in tracer.family_lines if address in addresses)
        raise DuplicateAddressError(
            f"address {format_address(address)} is sampled twice in one execution of "
            f"{tracer.gen_fn.name}: first at {describe_line(first)}; again at "
            f"{describe_line(line)}. Give each random choice its own address "
            f"(e.g. add a loop index: (\"x\", i))."
        )
    if address in tracer.namespaces:
        raise AddressError(
            f"address {format_address(address)} in {tracer.gen_fn.name} "
            f"({describe_line(line)}) is already a namespace holding other choices; "
            f"a path is a leaf or a namespace, never both."
        )


def check_handed(tracer, retval):
    """Raise if the body changed in place a value the trace keeps (drawn, or returned by a
    sub-call): the trace would hold the changed value with the density of the drawn one.
    Stops watching the lists handed to the body (see :mod:`imcmc_lab.core.effects`);
    ``retval``, or the plain list of which the body returns a watched copy."""
    changed = None
    for value, version in tracer.handed:
        kind = type(version)
        if kind is int:
            if value._version != version and changed is None:
                changed = value
        elif kind is tuple:         # the tensors of a list handed whole, and their versions
            if changed is None and tuple(map(_VERSION, value)) != version:
                changed = next(v for v, n in zip(value, version) if v._version != n)
        else:
            value.watch(None)
            if version is not None and retval is value:
                retval = version
    if changed is not None:
        _handed_changed(tracer, changed)
    return retval


class Tracer:
    """What every mode shares: address bookkeeping, scoring, sub-calls."""

    __slots__ = ("gen_fn", "request", "prev", "constraints", "selection", "records", "lines",
                 "family_lines", "namespaces", "weight", "discard", "fresh", "n_used", "_groups",
                 "impossible", "grad_terms", "n_kept", "families", "handed", "compact", "expanded",
                 "kind_changed")

    #: whether the mode starts from a previous trace (update, regenerate)
    incremental = False
    #: whether what the run no longer visits leaves the weight (update's log p(new) - log p(old))
    weighs_removed = False

    def __init__(self, gen_fn, request):
        self.gen_fn, self.request, self.prev = gen_fn, request, request.prev
        self.constraints = request.constraints or None
        self.selection = request.selection
        self.grad_terms = request.grad_terms
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
        # addresses of ``prev`` visited again with a record of the same kind (and callee):
        # when that is all of them, ``finish`` has nothing to remove
        self.n_kept = 0
        # (namespace, line) -> family_update.Family: this run's indexed families, for the next update
        self.families = None
        # (tensor, its version) for each tensor value the body received (core.effects.visit_choice)
        self.handed = []
        self.compact = None     # (namespace,) -> [FamilyRecord]: compact families (records hold their slots)
        self.expanded = False   # an element of prev's compact family was taken alone: finish checks all
        # kept values now under a distribution of the other kind (see Result.kind_changed)
        self.kind_changed = None

    # -- the mode's rules for a child (sub-call or combinator element) ----------
    @classmethod
    def run_child(cls, request, gen_fn, args, prev_sub, constraints, selection):
        result = gen_fn._execute(Execution(cls, args, None, constraints, None, request.grad_terms))
        return result, result.weight

    def finish(self):
        """End of the run (incremental modes remove what the run no longer visits)."""

    # -- address bookkeeping ---------------------------------------------
    def _claim(self, address, line, what):
        records = self.records
        if address in records or address in self.namespaces or not address or (
                self.compact is not None and compact_line(self.compact, address) is not None):
            _claim_error(self, address, line, what)      # raises (kept out of the hot path)
        if len(address) > 1:
            namespaces = self.namespaces
            for i in range(1, len(address)):
                prefix = address[:i]
                if prefix in namespaces:     # checked when added (a namespace is never a leaf)
                    continue
                if prefix in records:
                    raise AddressError(
                        f"address {format_address(address)} in {self.gen_fn.name} "
                        f"({describe_line(line)}) lies under {format_address(prefix)}, which "
                        f"already holds a value; a path is a leaf or a namespace, never both."
                    )
                namespaces.add(prefix)
        self.lines[address] = line

    def _sub_constraints(self, address):
        if self.constraints is None:
            return None
        if self._groups is None:
            self._groups = _group_by_prefix(self.constraints)
        return self._groups.get(address)

    # -- validating and scoring -------------------------------------------
    def _validate(self, dist, address, line, may_be_impossible):
        """Whether ``dist``'s parameters are valid. Invalid parameters raise, unless the
        value is given (constraint or kept value) and the trace is already impossible:
        then they are a consequence of a kept value outside its support, scored -inf.
        (The hot paths call ``dist.check_params()`` themselves and this only when it finds
        a problem: ``dist.check_params() is None or self._validate(...)``.)"""
        problem = dist.check_params()
        if problem is None:
            return True
        if may_be_impossible and self.impossible:
            return False
        raise DistributionError(
            f"invalid parameters for {dist.name} at address {format_address(address)} "
            f"({describe_line(line)}): {problem}."
        )

    def _score(self, dist, value, address, valid=True):
        counters.logpdf_evaluations += 1
        if not valid:
            return _NEG_INF
        if dist.event_shape and (shape := getattr(value, "shape", ())) != dist.event_shape \
                and tuple(shape) != tuple(dist.event_shape):
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

    def _sampled(self, dist, address, line):
        """``(value, logpdf)`` of a choice drawn from its prior."""
        if dist.check_params() is not None:
            self._validate(dist, address, line, may_be_impossible=False)     # raises
        fused = dist._sample_logpdf
        if fused is None or self.grad_terms is not None:
            value = dist.sample()
        else:
            # a built-in class draws and scores in one pass (the same value and log-density);
            # no density there, or -inf or NaN: _score says what it says of any value
            value, logpdf = fused()
            if logpdf is not None and logpdf > _NEG_INF:
                counters.logpdf_evaluations += 1
                return value, logpdf
        return value, self._score(dist, value, address, True)

    def _fresh(self, dist, address, line):
        """A choice drawn from its prior where the mode reports such draws in ``fresh``."""
        self.fresh.append(address)
        return self._sampled(dist, address, line)

    def _constrained(self, dist, address, line):
        """``(value, logpdf)`` of a constrained choice."""
        valid = dist.check_params() is None or self._validate(dist, address, line, may_be_impossible=True)
        try:
            value = dist.coerce(self.constraints[address])
        except (ValueError, TypeError) as exc:
            raise DistributionError(
                f"the value given for address {format_address(address)} does not fit "
                f"{dist!r}: {exc}"
            ) from None
        self.n_used += 1
        return value, self._score(dist, value, address, valid)

    # -- callee(args) @ address ------------------------------------------
    def _previous_call(self, address):
        return None

    def call(self, address, gen_fn, args, line):
        self._claim(address, line, "sub-call")
        prev_sub = self._previous_call(address)
        sub_sel = self.selection.subselection(address) if self.selection is not None else None
        result, weight = self.run_child(self.request, gen_fn, args, prev_sub,
                                        self._sub_constraints(address), sub_sel)
        if prev_sub is not None and result.trace.gen_fn == prev_sub.gen_fn:
            self.n_kept += 1
        self.weight += weight
        self.n_used += result.n_used
        if result.discard:
            for sub, value in result.discard.items():
                self.discard[address + sub] = value
        if result.fresh:
            self.fresh.extend(address + sub for sub in result.fresh)
        if result.kind_changed:
            self._kind_changed(address + sub for sub in result.kind_changed)
        self.records[address] = CallRecord(result.trace)
        return result.trace.retval

    def _kind_changed(self, addresses):
        if self.kind_changed is None:
            self.kind_changed = []
        self.kind_changed.extend(addresses)

    # -- [dist @ (namespace, key) for key in keys] (see families.py) --------
    def choice_family(self, namespace, keys, dist, line, values=True):
        """The choices ``dist @ (namespace, key)``, one per key, in order; their values (None
        may be returned with ``values=False``). Each element means exactly what :meth:`choice`
        makes of it; a long family is remembered in the trace (compact where it can be)."""
        choice = self.choice
        addresses, _ = family_addresses(namespace, keys)
        values = [choice(address, dist, line) for address in addresses]
        if len(addresses) < BULK_FAMILY:
            return values
        return remember_family(self, namespace, line, keys, addresses, dist, values)


class Simulate(Tracer):
    __slots__ = ()

    def choice(self, address, dist, line):
        self._claim(address, line, "random choice")
        value, logpdf = self._sampled(dist, address, line)
        self.records[address] = ChoiceRecord(dist, value, logpdf)
        return value


class Generate(Tracer):
    __slots__ = ()

    def choice(self, address, dist, line):
        self._claim(address, line, "random choice")
        constraints = self.constraints
        if constraints is not None and address in constraints:
            value, logpdf = self._constrained(dist, address, line)
            self.weight += logpdf
        else:
            value, logpdf = self._unconstrained(dist, address, line)
        self.records[address] = ChoiceRecord(dist, value, logpdf)
        return value

    _unconstrained = Tracer._fresh


class Assess(Generate):
    __slots__ = ()

    def _unconstrained(self, dist, address, line):
        raise AssessFailure(address)

    def choice_family(self, namespace, keys, dist, line, values=True):
        choice = self.choice
        return [choice(address, dist, line) for address in family_addresses(namespace, keys)[0]]


class Incremental(Tracer):
    """What update and regenerate share: the previous trace's records are kept where the
    mode allows; at the end, what the new run no longer visits is removed."""

    __slots__ = ()
    incremental = True
    weighs_removed = True

    @classmethod
    def run_child(cls, request, gen_fn, args, prev_sub, constraints, selection):
        if prev_sub is None or prev_sub.gen_fn != gen_fn:
            return cls.run_new_child(request, gen_fn, args, constraints)
        selected = selection is not None and not selection.is_empty()
        if not constraints and not selected and (args is prev_sub._args or values_equal(args, prev_sub._args)):
            return Result(prev_sub, 0.0, None, None, 0), 0.0      # nothing under it changed
        result = gen_fn._execute(Execution(cls, args, prev_sub, constraints, selection, request.grad_terms))
        return result, result.weight

    def _previous_choice(self, address):
        """The previous trace's :class:`ChoiceRecord` at ``address`` (counted as kept), or None."""
        prev_rec = self.prev._records.get(address)
        if type(prev_rec) is ChoiceRecord:
            self.n_kept += 1
            return prev_rec
        return self._previous_element(address) if prev_rec is None else None

    def _previous_element(self, address):
        """The :class:`ChoiceRecord` at ``address`` in a compact family of the previous trace, or None."""
        compact = self.prev._compact
        if compact is None:
            return None
        prev_rec = family_element(compact, address)
        if prev_rec is not None:
            self.expanded = True
        return prev_rec

    def _kept(self, prev_rec, dist, address, line, same=None):
        """A choice that keeps its value; the value. ``same``: whether ``dist`` is the same as
        the previous record's distribution, if the caller knows it already."""
        if same is None:
            same = dist.same_as(prev_rec.dist)
        # A finite cached log-density means these same parameters were valid: the hot
        # path keeps the record (same value, density and distribution arguments).
        if same and prev_rec.logpdf != _NEG_INF:
            self.records[address] = prev_rec
            return prev_rec.value
        if same:
            # (so its cached log-density is -inf) The same value under the same distribution:
            # still outside the support, or under the same invalid parameters, as the previous
            # run found (it raised otherwise). The run is impossible, as _score marks it, and
            # this term does not change (-inf - -inf would make the weight NaN).
            self.impossible = True
            logpdf = prev_rec.logpdf
        else:
            value = prev_rec.value
            if dist.discrete != prev_rec.dist.discrete:
                # kept under a distribution of the other kind: scored as a value of that kind
                # (whether keeping it is allowed is the caller's: a transform must write it)
                self._kind_changed((address,))
                try:
                    value = dist.coerce(value)
                except (ValueError, TypeError):
                    pass        # it does not fit: its density is what _score finds
            valid = dist.check_params() is None or self._validate(dist, address, line, may_be_impossible=True)
            logpdf = self._score(dist, value, address, valid)
            self.weight += logpdf - prev_rec.logpdf
            self.records[address] = ChoiceRecord(dist, value, logpdf)
            return value
        self.records[address] = ChoiceRecord(dist, prev_rec.value, logpdf)
        return prev_rec.value

    def _previous_call(self, address):
        prev_rec = self.prev._records.get(address)
        return prev_rec.trace if type(prev_rec) is CallRecord else None

    def finish(self):
        prev_records = self.prev._records
        expanded = self.expanded
        if self.n_kept == len(prev_records) and not expanded:     # every old address is still there
            return
        records = self.records
        removed = prev_records.keys() - records.keys()
        if self.n_kept + len(removed) == len(prev_records) and not expanded:
            # nothing changed kind: only the removed addresses (in their old order) remain
            candidates = list(filter(removed.__contains__, prev_records)) if len(removed) > 1 else removed
        else:
            candidates = prev_records
        for address in candidates:
            old = prev_records[address]
            if type(old) is FamilyRecord:       # a compact family not kept whole: its elements one by one
                if type(records.get(address)) is not FamilyRecord:
                    for element, rec in old.items():
                        self._remove(element, rec)
                continue
            self._remove(address, old)

    def _remove(self, address, old):
        """Remove ``old`` (the previous trace's record at ``address``) unless the new run
        has a record of the same kind there."""
        new = self.records.get(address)
        if new is None and self.compact is not None and compact_line(self.compact, address) is not None:
            new = old if type(old) is ChoiceRecord else None        # an element of a compact family
        if new is not None and type(new) is type(old) and (
                type(old) is ChoiceRecord or new.trace.gen_fn == old.trace.gen_fn):
            return
        if self.weighs_removed:
            self.weight -= old.logpdf
        if type(old) is ChoiceRecord:
            self.discard[address] = old.value
        else:
            for sub, value in old.trace.get_choices().items():
                self.discard[address + sub] = value


class Update(Incremental):
    __slots__ = ()

    @classmethod
    def run_new_child(cls, request, gen_fn, args, constraints):
        # a new sub-call inside an update: its whole score enters log p(new) - log p(old)
        result = gen_fn._execute(Execution(Generate, args, None, constraints, None, request.grad_terms))
        return result, result.trace.score

    def choice(self, address, dist, line):
        self._claim(address, line, "random choice")
        prev_rec = self.prev._records.get(address)       # _previous_choice, inlined (hot path)
        if type(prev_rec) is ChoiceRecord:
            self.n_kept += 1
        else:
            prev_rec = self._previous_element(address) if prev_rec is None else None
        constraints = self.constraints
        if constraints is not None and address in constraints:
            value, logpdf = self._constrained(dist, address, line)
            if prev_rec is not None:
                self.weight += logpdf - prev_rec.logpdf
                self.discard[address] = prev_rec.value
            else:
                self.weight += logpdf
        elif prev_rec is not None:
            same = dist.same_as(prev_rec.dist)
            if same and prev_rec.logpdf != _NEG_INF:
                self.records[address] = prev_rec      # the hot path of _kept, inlined
                return prev_rec.value
            return self._kept(prev_rec, dist, address, line, same)
        else:
            value, logpdf = self._fresh(dist, address, line)
            self.weight += logpdf
        self.records[address] = ChoiceRecord(dist, value, logpdf)
        return value

    def choice_family(self, namespace, keys, dist, line, values=True):
        return update_family(self, namespace, keys, dist, line, values)


class Regenerate(Incremental):
    __slots__ = ()
    weighs_removed = False

    @classmethod
    def run_new_child(cls, request, gen_fn, args, constraints):
        return gen_fn._execute(Execution(Simulate, args, None, None, None, request.grad_terms)), 0.0

    def choice(self, address, dist, line):
        self._claim(address, line, "random choice")
        prev_rec = self._previous_choice(address)
        if prev_rec is not None and address not in self.selection:
            return self._kept(prev_rec, dist, address, line)
        value, logpdf = self._fresh(dist, address, line)
        self.records[address] = ChoiceRecord(dist, value, logpdf)
        return value

    def choice_family(self, namespace, keys, dist, line, values=True):
        """A family the selection does not reach keeps or re-scores its values exactly as in
        an update with no constraints (kept whole, or one ``log_prob`` call if compact)."""
        selection, head = self.selection, (namespace,)
        if head in selection or any(a[:1] == head for a in selection.addresses()):
            return Tracer.choice_family(self, namespace, keys, dist, line, values)
        return update_family(self, namespace, keys, dist, line, values)
