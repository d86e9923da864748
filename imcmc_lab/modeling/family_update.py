"""The indexed-family fast path of ``update``: a lowered ``[dist @ (ns, j) for j in keys]``.

In ``update`` an element that is unconstrained, kept, and has the same distribution as
before reuses its record without a Python-level step of its own: the previous trace
remembers each family (:class:`Family`), so the kept elements are the slices between
the few that the tracer's ``choice`` must handle (constrained, new, changed or
erroneous elements). Every element means exactly what ``choice`` makes of it.

The functions take the running tracer (:mod:`.tracer`) as their first argument.
"""

from __future__ import annotations

import itertools
import math
import operator

import torch

from ..core.address import normalize_address
from ..core.values import ScalarList, plain_float, plain_floats
from .execution import counters
from .trace import ChoiceRecord

__all__ = ["BULK_FAMILY", "Family", "family_addresses", "remember_family", "update_family"]

#: Families shorter than this go element by element: the bulk path's set operations
#: cost about what a few kept elements cost through ``choice``.
BULK_FAMILY = 8

_NEG_INF = float("-inf")
_DIST = operator.attrgetter("dist")
_LOGPDF = operator.attrgetter("logpdf")
_VALUE = operator.attrgetter("value")


def update_family(tracer, namespace, keys, dist, line):
    """``tracer.choice_family`` of an update: the family's values, in key order."""
    choice = tracer.choice
    addresses, rest = family_addresses(namespace, keys)
    if len(addresses) < BULK_FAMILY:
        return [choice(address, dist, line) for address in addresses]
    if rest is None:
        rest = frozenset(addresses[1:])
    if (len(rest) != len(addresses) - 1 or not rest.isdisjoint(tracer.records)
            or not rest.isdisjoint(tracer.namespaces)):
        # a repeated key or an address taken already: choice() raises the right error
        return [choice(address, dist, line) for address in addresses]
    prev = tracer.prev
    old = prev._families.get((namespace, line)) if prev._families else None
    offset = _aligned_offset(old, keys, dist)
    if offset is None:
        rescored = _rescored_family(tracer, namespace, line, keys, addresses, rest, dist, old)
        if rescored is not None:
            return rescored
        values = [choice(addresses[0], dist, line)]     # claims the namespace (or raises)
        tracer.family_lines.append((rest, line))
        return _family_from_records(tracer, namespace, line, keys, addresses, rest, dist, values)
    redo = _redone_positions(tracer, addresses, rest, keys, old, offset)
    if not redo or redo[0]:
        tracer._claim(addresses[0], line, "random choice")     # a kept first element claims the namespace
    tracer.family_lines.append((rest, line))
    records, old_records, old_values = tracer.records, old.records, old.values
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
    # the old family's floats, if known, give the new one's at the cost of the redone elements
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
    redo = set()
    if constraints:
        redo = {address[1] - keys.start for address in rest.intersection(constraints)}
        if addresses[0] in constraints:
            redo.add(0)
    redo.update(range(min(n, max(0, -offset))))
    redo.update(range(max(0, len(old.keys) - offset), n))
    return sorted(redo)


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
    """Remember a family the tracer ran element by element; its values."""
    recs = list(map(tracer.records.__getitem__, addresses))
    return _store_family(tracer, namespace, line, keys, dist, recs, values, _uniform(recs, dist), None)


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
