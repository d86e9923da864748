"""The indexed-family fast path of ``update``: a lowered ``[dist @ (ns, j) for j in keys]``.

A family of at least :data:`COMPACT_FAMILY` (64) scalar continuous choices over a ``range``,
one distribution and finite log-densities, is held *compact* in the trace
(:class:`~.trace.FamilyRecord`: values and log-densities as two tensors). ``update``
keeps it whole when its distribution is unchanged and nothing in it is constrained,
else re-scores it with ONE vectorised ``log_prob`` call, visiting only the constrained
elements in Python (:func:`_compact_update`); so a move that changes the weights of
``for i in ...: mixture_of_normals(weights, ...) @ ("x", i)`` costs one tensor pass,
not n records.

Other families are remembered as :class:`Family`: an element that is unconstrained,
kept, and has the same distribution as before reuses its record without a Python-level
step of its own, the kept elements being the slices between the few that the tracer's
``choice`` must handle; where those few are constrained values of a scalar distribution
(a split/merge move's new means and variances), they are scored here, as ``choice`` would
score them, and the family's records are laid down in one dict update
(:func:`_given_elements`). Anything the fast paths cannot do exactly as ``choice`` would
(a constrained value that is not a scalar float, a NaN density, changed keys, invalid
parameters) runs element by element. Every element means exactly what ``choice``
makes of it.

The functions take the running tracer (:mod:`.tracer`) as their first argument.
"""

from __future__ import annotations

import itertools
import math
import operator

import torch

from ..core.address import normalize_address
from ..core.values import ScalarList, float64_vector, plain_float, plain_floats
from .execution import counters
from .trace import ChoiceRecord, FamilyRecord, FamilySlot, FamilyValues

__all__ = ["BULK_FAMILY", "Family", "family_addresses", "remember_family", "update_family"]

#: Families shorter than this go element by element: the bulk path's set operations
#: cost about what a few kept elements cost through ``choice`` (Fig. 1's split/merge at
#: n = 100, K = 8, whose merges leave families of 7, ran 2% fewer instructions per move
#: with 4 than with 8).
BULK_FAMILY = 4
#: Families shorter than this are remembered element by element even when they could be
#: compact: building and re-scoring a FamilyRecord costs more than a few element records
#: (Fig. 1's split/merge at n = 100, K = 8, whose per-cluster families have 7 to 9 elements,
#: ran 13% slower per move with compact families from 8 elements on).
COMPACT_FAMILY = 64

_NEG_INF = float("-inf")
_DIST = operator.attrgetter("dist")
_LOGPDF = operator.attrgetter("logpdf")
_VALUE = operator.attrgetter("value")


def update_family(tracer, namespace, keys, dist, line, values=True):
    """``tracer.choice_family`` of an update: the family's values, in key order (None if
    not ``values`` and the family is compact)."""
    choice = tracer.choice
    addresses, rest = family_addresses(namespace, keys)
    if len(addresses) < BULK_FAMILY:
        return [choice(address, dist, line) for address in addresses]
    if rest is None:
        rest = frozenset(addresses[1:])
    if (len(rest) != len(addresses) - 1 or not rest.isdisjoint(tracer.records)
            or not rest.isdisjoint(tracer.namespaces) or _overlaps(tracer, namespace, keys)):
        # a repeated key or an address taken already: choice() raises the right error
        return [choice(address, dist, line) for address in addresses]
    prev = tracer.prev
    if prev._compact is not None and (namespace,) in prev._compact:
        family = _compact_update(tracer, namespace, keys, dist, line, addresses)
        if family is not None:
            return _handed(family, values)
        # element by element: choice() finds the old family's elements one by one
        found = [choice(address, dist, line) for address in addresses]
        return remember_family(tracer, namespace, line, keys, addresses, dist, found)
    old = prev._families.get((namespace, line)) if prev._families else None
    offset = _aligned_offset(old, keys, dist)
    if offset is None:
        rescored = _rescored_family(tracer, namespace, line, keys, addresses, rest, dist, old)
        if rescored is not None:
            return rescored
        values = [choice(addresses[0], dist, line)]     # claims the namespace (or raises)
        tracer.family_lines.append((rest, line))
        return _family_from_records(tracer, namespace, line, keys, addresses, rest, dist, values)
    return _aligned_update(tracer, namespace, line, keys, addresses, rest, dist, old, offset)


def _aligned_update(tracer, namespace, line, keys, addresses, rest, dist, old, offset):
    """The update of a family that the previous trace remembers uniform, with the same
    distribution, element ``i`` being its element ``i + offset``: the kept elements are the
    old records, the redone ones (constrained, or outside the old family) are scored here
    when ``choice`` would only score their given values (:func:`_given_elements`), so the
    Python steps are O(redone); else the redone ones run through ``choice``. The family's values."""
    redo = _redone_positions(tracer, addresses, rest, keys, old, offset)
    if not redo or redo[0]:
        tracer._claim(addresses[0], line, "random choice")     # a kept first element claims the namespace
    tracer.family_lines.append((rest, line))
    given = _given_elements(tracer, addresses, redo, dist, line) if redo else ()
    if given is None:
        return _slices_update(tracer, namespace, line, keys, addresses, dist, old, offset, redo)
    n, old_records = len(addresses), old.records
    low = -offset if offset < 0 else 0            # new positions the old family covers: [low, high)
    high = len(old_records) - offset
    if high > n:
        high = n
    if low > n:
        low = n
    if high < low:
        high = low
    recs = old_records[low + offset:high + offset]
    values = old.values[low + offset:high + offset]
    recs, values = ([None] * low + list(recs), [None] * low + list(values)) if low else (list(recs), list(values))
    uniform, n_kept, weight, discard = True, n - len(redo), tracer.weight, tracer.discard
    for i, address, value, logpdf, prev_rec in given:     # in key order, as choice() would run them
        if logpdf == _NEG_INF:
            tracer.impossible, uniform = True, False
        if prev_rec is not None:
            n_kept += 1
            weight += logpdf - prev_rec.logpdf
            discard[address] = prev_rec.value
        else:
            weight += logpdf
        tracer.lines[address] = line
        rec = ChoiceRecord(dist, value, logpdf)
        if i < high:
            recs[i], values[i] = rec, value
        else:
            recs.append(rec)
            values.append(value)
    tracer.weight = weight
    tracer.n_kept += n_kept
    tracer.n_used += len(given)
    counters.logpdf_evaluations += len(given)
    tracer.records.update(zip(addresses, recs))
    # the old family's floats, if known, give the new one's at the cost of the redone elements
    floats_from = (old._floats, offset, redo) if type(old._floats) is tuple else None
    return _store_family(tracer, namespace, line, keys, dist, recs, values, uniform, floats_from)


def _given_elements(tracer, addresses, redo, dist, line):
    """``[(i, address, value, logpdf, previous record or None)]`` for the redone elements,
    computed as ``choice`` computes them, when each is a constrained value of a scalar
    distribution with valid parameters outside autograd, coerces, has a density that is not
    NaN and replaces a plain choice (or nothing); else None (nothing done but the first
    element's claim, which ``choice`` makes again): ``choice`` then runs them, raising its errors."""
    constraints = tracer.constraints
    if constraints is None or tracer.grad_terms is not None or dist.event_shape or dist.check_params() is not None:
        return None
    prev = tracer.prev
    get, compact, given = prev._records.get, prev._compact, []
    for i in redo:
        address = addresses[i]
        if address not in constraints:
            return None
        prev_rec = get(address)
        if type(prev_rec) is not ChoiceRecord and (prev_rec is not None or compact is not None):
            return None
        if not i:
            tracer._claim(address, line, "random choice")       # as choice() claims it first
        try:
            value = dist.coerce(constraints[address])
        except (ValueError, TypeError):
            return None
        logpdf = dist.logpdf(value)
        if logpdf != logpdf:
            return None
        given.append((i, address, value, logpdf, prev_rec))
    return given


def _slices_update(tracer, namespace, line, keys, addresses, dist, old, offset, redo):
    """:func:`_aligned_update` with the redone elements run through ``choice``: the kept
    elements as slices between them."""
    choice, records, old_records, old_values = tracer.choice, tracer.records, old.records, old.values
    values, recs, uniform, start, n = [], [], True, 0, len(addresses)
    for i in redo + [n]:
        if start < i:
            kept = old_records[start + offset:i + offset]
            records.update(zip(addresses[start:i], kept))
            recs += kept
            values += old_values[start + offset:i + offset]
            tracer.n_kept += i - start
        if i < n:
            values.append(choice(addresses[i], dist, line))
            rec = records[addresses[i]]
            recs.append(rec)
            uniform = uniform and type(rec) is ChoiceRecord and rec.logpdf != _NEG_INF
        start = i + 1
    floats_from = (old._floats, offset, redo) if type(old._floats) is tuple else None
    return _store_family(tracer, namespace, line, keys, dist, recs, values, uniform, floats_from)


def _rescored_family(tracer, namespace, line, keys, addresses, rest, dist, old):
    """A family whose elements all keep their values under a changed distribution (the
    data of ``for i in ...: mixture_of_normals(weights, ...) @ ("x", i)`` after a move
    changed ``weights``), re-scored with ONE vectorised ``dist.log_prob`` call; its values.
    ``None`` (nothing done) unless that is exactly what ``choice`` would do element by
    element: the same keys, nothing constrained in the family, a scalar continuous
    distribution with valid parameters, finite (or -inf) log-densities, no autograd terms.
    The log-densities are ``log_prob``'s: equal to ``logpdf``'s for the engine's scalar
    distributions (bit for bit for normal, gamma, inv_gamma; to rounding for a mixture)."""
    if (old is None or not old.uniform or tracer.grad_terms is not None or dist.discrete
            or dist.event_shape or type(dist) is not type(old.dist) or keys != old.keys
            or dist.same_as(old.dist)
            or (tracer.constraints and (addresses[0] in tracer.constraints
                                        or not rest.isdisjoint(tracer.constraints)))):
        return None
    stacked = old.stacked()
    if stacked is None or dist.check_params() is not None:
        return None         # element by element: the errors (and -inf rules) of choice()
    logpdfs = dist.log_prob(stacked)
    if logpdfs.shape != stacked.shape:
        return None
    logpdfs = logpdfs.tolist()
    low = min(logpdfs)
    if math.isnan(low) or math.isnan(max(logpdfs)):
        return None         # choice() names the first element whose density is NaN
    tracer._claim(addresses[0], line, "random choice")      # claims the namespace
    tracer.family_lines.append((rest, line))
    counters.logpdf_evaluations += len(logpdfs)
    if low == _NEG_INF:
        tracer.impossible = True
    # the per-element sum ``weight += new - old`` in the same order, in C
    tracer.weight = sum(map(operator.sub, logpdfs, map(_LOGPDF, old.records)), tracer.weight)
    values = old.values
    recs = list(map(ChoiceRecord, itertools.repeat(dist), values, logpdfs))
    tracer.records.update(zip(addresses, recs))
    tracer.n_kept += len(recs)
    floats_from = (old._floats, 0, []) if type(old._floats) is tuple else None
    family = _store_family(tracer, namespace, line, keys, dist, recs, values, low != _NEG_INF,
                           floats_from)
    tracer.families[(namespace, line)]._stacked = stacked
    return family


def _redone_positions(tracer, addresses, rest, keys, old, offset):
    """Element ``i`` is old element ``i + offset``. Redone (by ``choice``): the constrained
    ones and those outside the old family; sorted."""
    n, constraints = len(addresses), tracer.constraints
    low = -offset if offset < 0 else 0              # the old family covers [low, high)
    high = len(old.records) - offset
    if low > n:
        low = n
    redo = list(range(low)) if low else []
    if constraints:
        if not low and high > 0 and addresses[0] in constraints:
            redo.append(0)
        hit = rest.intersection(constraints)
        if hit:
            start, inside = keys.start, []
            for address in hit:
                position = address[1] - start
                if low <= position < high:
                    inside.append(position)
            if inside:
                inside.sort()
                redo += inside
    if high < n:
        redo += range(high if high > 0 else 0, n)
    return redo


def _family_from_records(tracer, namespace, line, keys, addresses, rest, dist, values):
    """The bulk update of a family the previous trace does not remember (or not as one
    uniform family with the same keys' alignment): kept elements found with set
    operations on the previous trace's records."""
    choice = tracer.choice
    prev_recs = list(map(tracer.prev._records.get, addresses))
    records = tracer.records
    start = 1
    for i in _family_redo(tracer, addresses, prev_recs, rest, dist) + [len(addresses)]:
        if start < i:
            recs = prev_recs[start:i]
            records.update(zip(addresses[start:i], recs))
            values += map(_VALUE, recs)
            tracer.n_kept += i - start
        if i < len(addresses):
            values.append(choice(addresses[i], dist, line))
        start = i + 1
    return remember_family(tracer, namespace, line, keys, addresses, dist, values)


def _family_redo(tracer, addresses, prev_recs, rest, dist):
    """Positions (after the first) of the family elements that ``choice`` must handle:
    constrained, new, or not a kept choice with the same distribution and a finite
    log-density. Found with set operations when all the kept ones qualify."""
    constrained = rest.intersection(tracer.constraints) if tracer.constraints else frozenset()
    present = list(filter(None, prev_recs[1:]))
    if _uniform(present, dist):
        position = {address: i for i, address in enumerate(addresses)}.__getitem__ \
            if len(addresses) > 64 else addresses.index
        return sorted(map(position, constrained | rest.difference(tracer.prev._records)))
    redo, same = [], None     # ``same``: a previous distribution object known to equal dist
    for i in range(1, len(addresses)):
        rec = prev_recs[i]
        if (type(rec) is ChoiceRecord and rec.logpdf != _NEG_INF and addresses[i] not in constrained
                and (rec.dist is same or (same is None and dist.same_as(rec.dist)))):
            same = rec.dist
            continue
        redo.append(i)
    return redo


def remember_family(tracer, namespace, line, keys, addresses, dist, values):
    """Remember a family the tracer ran element by element; its values. Held compact
    (one :class:`~.trace.FamilyRecord`) when it can be: keys a range, scalar continuous
    float64 values, one distribution, finite log-densities, no autograd terms."""
    recs = list(map(tracer.records.__getitem__, addresses))
    uniform = _uniform(recs, dist)
    if uniform and type(keys) is range and len(keys) >= COMPACT_FAMILY and tracer.grad_terms is None \
            and not dist.discrete \
            and not dist.event_shape:
        floats = plain_floats(values)
        if floats is not None:
            records = tracer.records
            for address in addresses:
                del records[address]
            logpdfs = list(map(_LOGPDF, recs))
            family = FamilyRecord(namespace, keys, dist, FamilyValues(float64_vector(floats), list(values), floats),
                                  float64_vector(logpdfs), sum(logpdfs), line)
            _hold(tracer, family)
            return ScalarList(values, family.values.floats)
    return _store_family(tracer, namespace, line, keys, dist, recs, values, uniform, None)


def _hold(tracer, family):
    """Enter ``family`` in the run's records (under its slot) and compact families."""
    tracer.records[FamilySlot(family.namespace, family.keys)] = family
    if tracer.compact is None:
        tracer.compact = {}
    tracer.compact.setdefault((family.namespace,), []).append(family)


def _handed(family, values):
    return ScalarList(family.values.all(), family.values.floats) if values else None


def _overlaps(tracer, namespace, keys):
    """Whether a compact family of this run on ``namespace`` may share a key with ``keys``."""
    found = tracer.compact.get((namespace,)) if tracer.compact is not None else None
    if not found:
        return False
    if type(keys) is not range or keys.step != 1:
        return True
    return any(f.keys.step != 1 or max(f.keys.start, keys.start) < min(f.keys.stop, keys.stop) for f in found)


def _constrained_positions(tracer, namespace, keys):
    """Sorted positions of the constrained elements of a family over the range ``keys``."""
    constraints = tracer.constraints
    if not constraints:
        return []
    found = [keys.index(a[1]) for a in constraints
             if len(a) == 2 and a[0] == namespace and type(a[1]) is int and a[1] in keys]
    return sorted(found)


def _compact_update(tracer, namespace, keys, dist, line, addresses):
    """The update of a family the previous trace holds compact, over the same keys: kept
    whole when its distribution is the same and nothing in it is constrained, else
    re-scored with ONE vectorised ``dist.log_prob`` call; the new :class:`FamilyRecord`.
    ``None`` (nothing done) unless that is exactly what ``choice`` would do element by
    element: valid parameters, constrained values that are scalar float64 and have a
    density that is not NaN, finite old log-densities where they are kept, no autograd
    terms. Costs O(constrained elements) in Python and one tensor pass."""
    old = tracer.prev._records.get(FamilySlot(namespace, keys))
    if (old is None or tracer.grad_terms is not None or type(dist) is not type(old.dist)
            or (tracer.constraints and any(len(a) > 1 and a[0] == namespace and (len(a) > 2 or type(a[1]) is not int)
                                           for a in tracer.constraints))):
        return None
    same = dist is old.dist or dist.same_as(old.dist)
    redo = _constrained_positions(tracer, namespace, keys)
    if (redo or not same) and dist.check_params() is not None:
        return None             # element by element: the errors (and -inf rules) of choice()
    if same and not math.isfinite(old.logpdf):
        return None
    given = _given_values(tracer, dist, addresses, redo)
    if given is None:
        return None
    if same and not redo:
        family = old
        new_logpdfs = None
    else:
        tensor = old.values.tensor
        if redo:
            tensor = tensor.clone()
            tensor[redo] = torch.stack(given)
        new_logpdfs = dist.log_prob(tensor) if not same else old.logpdfs.clone()
        if new_logpdfs.shape != tensor.shape:
            return None
        if same:
            new_logpdfs[redo] = float64_vector([dist.logpdf(v) for v in given])
        total = float(new_logpdfs.sum())
        if math.isnan(total):   # a NaN density (or +inf and -inf ones): element by element,
            return None         # where choice() names the first element whose density is NaN
        values = old.values if not redo else FamilyValues(tensor, _kept_elements(old.values, redo, given))
        family = FamilyRecord(namespace, keys, dist, values, new_logpdfs, total, line)
    _commit(tracer, family, old, addresses, redo, new_logpdfs, same)
    return family


def _given_values(tracer, dist, addresses, redo):
    """The constrained elements' values, coerced as ``choice`` coerces them; None if one
    does not coerce or is not a scalar float64 (``choice`` handles those)."""
    given = []
    for i in redo:
        try:
            value = dist.coerce(tracer.constraints[addresses[i]])
        except (ValueError, TypeError):
            return None
        if plain_float(value) is None:
            return None
        given.append(value)
    return given


def _kept_elements(values, redo, given):
    """The handed-out elements of ``values`` that a new family keeps, and the given ones."""
    elements = list(values.elements) if values.elements is not None else [None] * len(values.tensor)
    for i, value in zip(redo, given):
        elements[i] = value
    return elements


def _commit(tracer, family, old, addresses, redo, new_logpdfs, same):
    """The bookkeeping of :func:`_compact_update`: claims, weight, discard, counters."""
    tracer._claim(addresses[0], family.line, "random choice")      # claims the namespace
    _hold(tracer, family)
    tracer.n_kept += 1
    tracer.n_used += len(redo)
    if new_logpdfs is None:
        return
    evaluated = len(redo) if same else len(addresses)
    counters.logpdf_evaluations += evaluated
    if family.logpdf == _NEG_INF:
        tracer.impossible = True
    tracer.weight += float((new_logpdfs - old.logpdfs).sum())
    discard = tracer.discard
    for i in redo:
        discard[addresses[i]] = old.values.element(i)


def _store_family(tracer, namespace, line, keys, dist, recs, values, uniform, floats_from):
    """Remember the family for the next update; its values, as the program gets them."""
    if tracer.families is None:
        tracer.families = {}
    # tuples: the program gets ``values`` as a list it may change; the trace keeps its own
    family = Family(keys, tuple(recs), tuple(values), dist, uniform, floats_from)
    tracer.families[(namespace, line)] = family
    return ScalarList(values, family.floats)


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


class Family:
    """What a trace remembers of one indexed family for the next update: its keys,
    records and values in key order, its distribution, and whether it is *uniform*
    (every record a choice with a finite log-density and that distribution, so an
    unconstrained element kept with the same distribution keeps its record).

    :meth:`floats` gives the values as Python floats, computed on first use: from the
    previous family's floats and the few elements redone (``floats_from``, ``(floats,
    offset, redone positions)``) when those were known, else one by one.
    """

    __slots__ = ("keys", "records", "values", "dist", "uniform", "_floats", "_floats_from", "_stacked")

    def __init__(self, keys, records, values, dist, uniform, floats_from=None):
        self.keys, self.records, self.values, self.dist, self.uniform = keys, records, values, dist, uniform
        self._floats = None         # not computed yet; False: the values are not all plain floats
        self._floats_from = floats_from
        self._stacked = None        # the values as one float64 tensor, made on first use

    def stacked(self):
        """The values as one float64 tensor of shape ``(n,)`` (scalar continuous values),
        made once and shared by the families that keep these values; else ``None``."""
        if self._stacked is None:
            floats = self.floats()
            self._stacked = torch.tensor(floats, dtype=torch.float64) if floats else False
        return self._stacked if self._stacked is not False else None

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
        # the old floats where the old family has the element; the redone positions (all the
        # others among them) are filled in below
        n = len(values)
        low = min(n, max(0, -offset))
        high = max(low, min(n, len(base) - offset))
        floats = list(base[low + offset:high + offset])
        if low or high < n:
            floats = [0.0] * low + floats + [0.0] * (n - high)
        for i in redone:
            value = plain_float(values[i])
            if value is None:
                return None
            floats[i] = value
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


def family_addresses(namespace, keys):
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
