"""Immutable execution traces.

A trace holds a generative function's arguments, its choices (each with its
distribution and cached log-density), its sub-traces, its return value and its
total score ``log p(choices)``. ``update`` and ``regenerate`` return *new*
traces; the old one stays valid, so rejecting a move costs nothing.

Immutable against in-place edits too. A trace hands out its own tensors
(``trace["mu"] is trace.get_choices()["mu"]``), and a kept value is the same tensor in
every trace ``update`` makes from it, so ``v = trace["mu"]; v += 50`` would change all of
them while their cached densities stay. Copying on every read would cost a copy per read
and break that sharing; instead a trace notes what it hands out (:class:`Loans`: ``trace[a]``,
``get_choices()``, the return value, ``trace.args``, the discard of ``update`` and
``update_detailed``) with a snapshot of its data, and the engine refuses, with
:class:`~imcmc_lab.errors.TraceChangedError`, to use a trace that holds a value changed
since (see :meth:`Trace._lineage`). The data is compared, not torch's version counter, so a
write through a NumPy view (``trace["x"].numpy()[0] = 5``: ``.numpy()`` and ``np.asarray``
share the memory but bump no counter) is caught too; the price is one ``item()`` per lent
0-d value and one ``torch.equal`` per lent vector each time a trace of the lineage is used,
and a copy of each lent vector. A program body that changes in place a value it drew, a
family's value or a sub-call's return value is refused at the end of the body
(:func:`~.tracer.check_handed`), and so is a body that changes one of its tensor
arguments in place (``runtime.run_dynamic``). Not covered: a sub-trace's own ``args``
(``trace.subtraces[i].args``, checked only when that sub-trace is used), a body changing a
NumPy argument or a tensor inside a list argument in place, return values nested more than
one level deep, and C code writing to a family's or a Map's list items directly
(``torch._foreach_add_(values, 1)``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping

import numpy as np
import torch

from ..core.address import did_you_mean, format_address, normalize_address
from ..core.choicemap import ChoiceMap, as_selection
from ..errors import AddressError, TraceChangedError

__all__ = ["ChoiceRecord", "CallRecord", "Trace", "DynamicTrace", "Loans", "FamilyRecord", "FamilySlot",
           "FamilyValues", "FlatRecords"]

_ITEM = torch.Tensor.item
_EQUAL = torch.equal
_LENDING = threading.Lock()


class ChoiceRecord:
    """One random choice: its distribution, value and log-density (a float).

    ``lent`` is set (True) when a trace first hands the value out, if it is a tensor
    (see :class:`Loans`).
    """

    __slots__ = ("dist", "value", "logpdf", "lent", "__weakref__")

    def __init__(self, dist, value, logpdf):
        self.dist, self.value, self.logpdf = dist, value, logpdf

    def __reduce__(self):           # a copy in another process has lent nothing yet
        return ChoiceRecord, (self.dist, self.value, self.logpdf)

    @property
    def discrete(self) -> bool:
        return self.dist.discrete

    def __repr__(self):
        return f"ChoiceRecord({self.dist!r}, {self.value!r}, {self.logpdf:.4g})"


class CallRecord:
    """A sub-call mounted at an address: holds the callee's trace."""

    __slots__ = ("trace",)

    def __init__(self, trace):
        self.trace = trace

    @property
    def logpdf(self) -> float:
        return self.trace.score


class ArgumentPath(tuple):
    """Where a lent argument sits in ``trace.args``: ``(0,)`` is ``trace.args[0]``, ``(0, "k")``
    is ``trace.args[0]["k"]``. A tuple of its own type, so it is never taken for an address."""

    __slots__ = ()


def _watched(value):
    """``(view, snapshot)`` for a lent value: ``view`` a tensor sharing its memory (the value
    itself, or a NumPy array's tensor view), ``snapshot`` its data now -- a Python number for
    a 0-d tensor, else a copy. ``(None, None)`` for what cannot be compared."""
    if isinstance(value, np.ndarray):
        if not value.flags.writeable:
            return None, None
        try:
            value = torch.from_numpy(value)
        except (TypeError, ValueError):       # object arrays, non-native byte order
            return None, None
    if value.requires_grad:
        value = value.detach()                # the same memory, no autograd warnings
    if not value.ndim:
        return value, value.item()
    return value, value.clone()


def _same(view, snapshot) -> bool:
    """Whether ``view`` still holds the data of ``snapshot`` (NaN equal to NaN)."""
    try:
        if type(snapshot) is not torch.Tensor:
            now = view.item()
            return now == snapshot or (now != now and snapshot != snapshot)
        if view.shape != snapshot.shape or view.dtype != snapshot.dtype:
            return False
        if _EQUAL(view, snapshot):
            return True
        return view.is_floating_point() and bool(((view == snapshot) | (view.isnan() & snapshot.isnan())).all())
    except (RuntimeError, ValueError):          # e.g. a 0-d value resized in place
        return False


def _fast_lists(lists):
    """The views and snapshots of ``lists`` split into 0-d ones (compared as numbers) and the
    others (compared with ``torch.equal``), for :meth:`Loans.check`'s C-speed comparison."""
    scalars, scalar_snaps, arrays, array_snaps = [], [], [], []
    for view, snapshot in zip(lists[1], lists[2]):
        if type(snapshot) is torch.Tensor:
            arrays.append(view)
            array_snaps.append(snapshot)
        else:
            scalars.append(view)
            scalar_snaps.append(snapshot)
    return scalars, scalar_snaps, arrays, array_snaps


class Loans:
    """What a lineage of traces has handed out: one trace and every trace that ``update``
    and ``regenerate`` made from it, or from those (they share kept values by identity).

    ``lists`` holds five parallel lists, one item per tensor (or NumPy array argument)
    handed out: the value, a tensor sharing its memory, a snapshot of its data then, a weak
    reference to its owner -- the :class:`ChoiceRecord` holding it, or the trace whose
    return value or argument it is -- and its address (an :class:`ArgumentPath` for an
    argument). Checking compares the data with the snapshots, at C speed (:meth:`check`):
    the data, not torch's version counter, because a write through a NumPy view
    (``trace["x"].numpy()[0] = 5``, ``np.asarray(v).sort()``) shares the memory but not the
    counter. A 0-d value costs one ``item()`` per check, a vector one ``torch.equal``.
    Owners are held weakly so that what is checked stays bounded by the live traces'
    choices, not by the length of a chain (the values a chain or a user keeps are tensors,
    and keeping one keeps no entry): entries whose owner died are dropped whenever the
    lists have doubled since the last pruning. Appending and pruning hold a lock (chains
    started from one trace share its Loans); pruning replaces the tuples of lists at once,
    so a check sees one consistent set.
    """

    __slots__ = ("lists", "_fast", "_ids", "_prune_at")

    def __init__(self):
        self.lists = ([], [], [], [], [])
        self._fast = ([], [], [], [])
        self._ids = set()           # id() of the values in lists[0] (held there, so unique)
        self._prune_at = 64

    def __len__(self):
        return len(self.lists[0])

    def __reduce__(self):           # a copy in another process has lent nothing yet
        return Loans, ()

    def lend(self, owner, address, value, trace=None):
        """Note that ``value`` (``owner``'s) was handed out at ``address`` by ``trace``; ``value``."""
        if isinstance(value, torch.Tensor):
            flag = "lent" if type(owner) is ChoiceRecord else "_retval_lent"
            if getattr(owner, flag, None) is None:
                setattr(owner, flag, True)
                self.add(owner, address, value, trace)
        return value

    def add(self, owner, address, value, trace=None):
        """Note ``value`` as handed out (once per value: a re-scored kept value's entry stays)."""
        if id(value) in self._ids:
            return
        view, snapshot = _watched(value)
        if view is None:
            return
        with _LENDING:
            for items, item in zip(self.lists, (value, view, snapshot, weakref.ref(owner), address)):
                items.append(item)
            fast = self._fast
            if type(snapshot) is torch.Tensor:
                fast[2].append(view)
                fast[3].append(snapshot)
            else:
                fast[0].append(view)
                fast[1].append(snapshot)
            self._ids.add(id(value))
            if len(self.lists[0]) >= self._prune_at:
                self._prune(trace)

    def _prune(self, trace):
        """Drop the entries whose owner died, unless ``trace`` still holds the value (an
        update that re-scores a kept value wraps the same tensor in a new record)."""
        values, _, _, owners, addresses = self.lists
        alive = [i for i, ref in enumerate(owners) if ref() is not None
                 or (trace is not None and _held_as(trace, addresses[i], values[i]))]
        lists = tuple([items[i] for i in alive] for items in self.lists)
        self.lists, self._fast = lists, _fast_lists(lists)
        self._ids = set(map(id, lists[0]))
        self._prune_at = 2 * len(alive) + 64

    def check(self, trace):
        """Raise :class:`TraceChangedError` if a value ``trace`` holds was changed in place
        after it was handed out."""
        scalars, scalar_snaps, arrays, array_snaps = self._fast
        try:
            if list(map(_ITEM, scalars)) == scalar_snaps and all(map(_EQUAL, arrays, array_snaps)):
                return
        except (RuntimeError, ValueError):          # a value resized in place
            pass
        dead = False
        for value, view, snapshot, ref, address in zip(*self.lists):
            if not _same(view, snapshot):
                held = _held_as(trace, address, value)
                if held:
                    _changed(trace, address, held)
                dead = dead or ref() is None
        if dead:
            with _LENDING:
                self._prune(trace)


def _held_as(trace, address, value):
    """How ``trace`` holds ``value`` at ``address`` -- "the value at" (a choice), "the return
    value at" or "argument" -- or None. By identity of the value, not of its owner: an update
    that re-scores a kept value wraps the same tensor in a new record."""
    if type(address) is ArgumentPath:
        return "argument" if _argument_at(trace._args, address) is value else None
    found = trace._resolve(address) if address else ("call", trace)
    if found is None:
        return None
    kind, target = found
    if kind == "leaf":
        return "the value at" if target.value is value else None
    return "the return value at" if target.retval is value else None


def _argument_at(args, path):
    for key in path:
        try:
            args = args[key]
        except (KeyError, IndexError, TypeError):
            return None
    return args


def _arrays_in(value, path=()):
    """``(path, tensor or array)`` for each tensor and NumPy array in ``value``, through
    tuples, lists and dicts (what :func:`~.runtime.owned` copies)."""
    kind = type(value)
    if isinstance(value, (torch.Tensor, np.ndarray)):
        yield path, value
    elif kind is tuple or kind is list:
        for i, item in enumerate(value):
            yield from _arrays_in(item, path + (i,))
    elif kind is dict:
        for key, item in value.items():
            yield from _arrays_in(item, path + (key,))


def _lend_arguments(trace):
    """Note the tensors and NumPy arrays in ``trace.args`` as handed out."""
    loans = trace._loans if trace._loans is not None else trace._lineage()
    for path, value in _arrays_in(trace._args):
        loans.add(trace, ArgumentPath(path), value, trace)


def _tensors_in(value) -> list:
    """The tensor ``value``, or the tensors in a list or tuple ``value`` (one level)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if type(value) in (list, tuple):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


_NUMPY_NOTE = ("(a write through a NumPy view counts: .numpy() and np.asarray share the memory)")


def _changed(trace, address, what):
    if what == "argument":
        where = "".join(f"[{key!r}]" for key in address)
        raise TraceChangedError(
            f"argument {address[0]} of this trace of {trace.gen_fn.name} (trace.args{where}) was "
            f"changed in place after the trace handed it out {_NUMPY_NOTE}: trace.args are the "
            f"trace's own arguments, shared with the traces made from it, so their cached "
            f"log-densities no longer match them. Traces are immutable: copy the argument before "
            f"changing it, xs = trace.args{where}.clone() (a NumPy array: .copy()); to run the "
            f"program on other arguments, use trace.update(None, new_args).")
    where = format_address(address) if address else "()"
    change = f"trace.update({{{where}: new_value}})" if what == "the value at" else "trace.update(...)"
    raise TraceChangedError(
        f"{what} {where} in this trace of {trace.gen_fn.name} was changed in place after the trace "
        f"handed it out {_NUMPY_NOTE}: trace[{where}] is the trace's own tensor, shared with the "
        f"traces made from it, so their cached log-densities no longer match their values. Traces "
        f"are immutable: clone the value before changing it, v = trace[{where}].clone() (in a "
        f"transform: v = read(...).clone()); to change a choice, use {change}.")


# long: the whole read interface a user sees (GFI methods, lending, display), one class
class Trace:
    """Base class of traces. Subclasses provide ``_records`` (address -> record)."""

    __slots__ = ("gen_fn", "_args", "retval", "score", "_choices", "_flat", "_loans", "_retval_lent",
                 "_args_lent", "__weakref__")

    def __init__(self, gen_fn, args, retval, score):
        self.gen_fn, self._args, self.retval, self.score = gen_fn, args, retval, score
        self._choices = None
        self._flat = None
        self._loans = None          # this trace's lineage's Loans, made on first need

    def __getstate__(self):
        # the slots, less the bookkeeping of what was handed out (a copy has lent nothing)
        state = {n: getattr(self, n) for c in type(self).__mro__ for n in getattr(c, "__slots__", ())
                 if n not in ("__weakref__", "_retval_lent", "_args_lent") and hasattr(self, n)}
        state["_choices"] = state["_loans"] = None       # get_choices() lends when it builds
        return None, state

    # -- what the trace hands out (see Loans) -----------------------------
    def _lineage(self) -> Loans:
        """This trace's :class:`Loans`, after checking that no value this trace holds was
        changed in place since it was handed out. The engine calls this before it uses a
        trace (update, regenerate, differentiable scoring) and gives the result's trace
        the same Loans: one attribute test when nothing was handed out."""
        loans = self._loans
        if loans is None:
            loans = self._loans = Loans()
        elif loans.lists[0]:
            loans.check(self)
        return loans

    def _lend_record(self, address, record):
        loans = self._loans if self._loans is not None else self._lineage()
        return loans.lend(record, address, record.value, self)

    def _lend_retval(self, address, owner):
        """``owner.retval`` handed out (``owner``: this trace or a sub-trace at ``address``).
        Choices holding the same tensor (``return mu``; a Map's list of its elements' return
        values) are noted too, since the traces made from this one share them."""
        value = owner.retval
        tensors = _tensors_in(value)
        if not tensors or getattr(owner, "_retval_lent", None) is not None:
            return value
        loans = self._loans if self._loans is not None else self._lineage()
        wanted = set(map(id, tensors))
        for sub, record in owner.flat_records().items():
            if id(record.value) in wanted:
                loans.lend(record, address + sub, record.value, self)
        if len(tensors) == 1 and tensors[0] is value:
            return loans.lend(owner, address, value, self)
        owner._retval_lent = True       # a list: its tensors that are choices are noted
        return value

    def _lend_addresses(self, addresses):
        """Note the values at ``addresses`` (leaves of this trace) as handed out."""
        for address in addresses:
            found = self._resolve(address)
            if found is not None and found[0] == "leaf":
                self._lend_record(address, found[1])

    # -- records --------------------------------------------------------
    def _record_items(self):
        """``(local address, record)`` pairs of this trace's own level."""
        raise NotImplementedError

    def _record_get(self, address):
        raise NotImplementedError

    def flat_records(self) -> dict:
        """Every random choice, by full address -> :class:`ChoiceRecord` (cached)."""
        if self._flat is None:
            self._flat = flatten(self._record_items())
        return self._flat

    def _resolve(self, address):
        """``(kind, target)`` for ``address``: ("leaf", ChoiceRecord), ("call", Trace) or None."""
        for i in range(1, len(address) + 1):
            record = self._record_get(address[:i])
            if record is None:
                continue
            if type(record) is ChoiceRecord:
                return ("leaf", record) if i == len(address) else None
            if i == len(address):
                return ("call", record.trace)
            return record.trace._resolve(address[i:])
        return None

    def choice_record(self, address):
        """The :class:`ChoiceRecord` at a leaf address, or ``None``."""
        found = self._resolve(normalize_address(address))
        return found[1] if found is not None and found[0] == "leaf" else None

    # -- user-facing access ---------------------------------------------
    def __getitem__(self, address):
        """Value at a leaf; a sub-call's return value; a namespace's choices as a ChoiceMap.

        ``trace[()]`` is the return value of the whole program. A tensor is the trace's own:
        clone it before changing it in place (else the next update raises TraceChangedError).
        """
        address = normalize_address(address)
        if not address:
            return self._lend_retval((), self)
        found = self._resolve(address)
        if found is not None:
            kind, target = found
            if kind == "leaf":
                return self._lend_record(address, target)
            return self._lend_retval(address, target)
        choices = self.get_choices()
        if choices.has_submap(address):
            return choices.get_submap(address)
        raise AddressError(
            f"this trace of {self.gen_fn.name} has no address {format_address(address)}."
            + did_you_mean(address, self.flat_records())
        )

    def __contains__(self, address) -> bool:
        address = normalize_address(address)
        return self._resolve(address) is not None or self.get_choices().has_submap(address)

    def get_choices(self) -> ChoiceMap:
        """All random choices as a :class:`ChoiceMap` (cached; traces are immutable)."""
        if self._choices is None:
            flat = self.flat_records()
            self._choices = ChoiceMap._from_flat({a: r.value for a, r in flat.items()})
            lend = (self._loans if self._loans is not None else self._lineage()).lend
            for address, record in flat.items():
                lend(record, address, record.value, self)
        return self._choices

    @property
    def choices(self) -> ChoiceMap:
        return self.get_choices()

    @property
    def args(self) -> tuple:
        """The arguments the program ran with: the trace's own (copied from the caller's), shared
        with the traces ``update`` makes from it. Copy one before changing it in place (else the
        next update raises TraceChangedError)."""
        if getattr(self, "_args_lent", None) is None:
            self._args_lent = True
            _lend_arguments(self)
        return self._args

    def get_args(self):
        return self.args

    def get_retval(self):
        return self._lend_retval((), self)

    def get_score(self) -> float:
        return self.score

    # -- GFI ------------------------------------------------------------
    def update(self, constraints=None, args=None):
        """``(new_trace, log_weight, discard)`` with ``log_weight = log p(new) - log p(old)``.

        ``constraints`` (a ChoiceMap or ``{address: value}``) sets new values;
        everything else keeps its value. Addresses the new execution no longer
        visits, and overwritten values, are returned in ``discard``. Choices the
        new execution needs but that are neither constrained nor in the old trace
        are sampled from their prior (and included in ``log_weight``).
        """
        return self.gen_fn.update(self, constraints, args)

    def update_detailed(self, constraints=None, args=None, *, strict=True):
        """``update`` with everything it learned, as a :class:`~imcmc_lab.modeling.Result`:
        ``.trace``, ``.weight``, ``.discard`` (``{address: old value}``: this trace's own tensors,
        checked like ``update``'s once read: clone one before changing it) and ``.fresh`` (the
        addresses sampled from their prior because nothing gave them a value). With
        ``strict=False`` a constraint at an address the new execution never visits is
        listed in ``.unvisited`` instead of raising :class:`~imcmc_lab.errors.ConstraintError`."""
        return self.gen_fn.update_detailed(self, constraints, args, strict=strict)

    def regenerate(self, selection, args=None):
        """``(new_trace, log_weight)``: resample the selected choices from their prior.

        ``selection``: a :class:`Selection`, one address (``"k"``, ``("mu", 2)``)
        or a list of addresses; a namespace selects everything under it.

        ``log_weight`` is the Metropolis-Hastings weight of resimulation (Gen's):
        the ratio of new to old densities over the choices that were kept.
        """
        return self.gen_fn.regenerate(self, selection, args)

    def project(self, selection) -> float:
        """Sum of log-densities of the selected choices."""
        sel = as_selection(selection)
        return sum(r.logpdf for a, r in self.flat_records().items() if a in sel)

    # -- display --------------------------------------------------------
    def __repr__(self):
        n = len(self.flat_records())
        return (f"<{type(self).__name__} of {self.gen_fn.name}{_format_args(self._args)}: "
                f"{n} choice{'s' if n != 1 else ''}, score {self.score:.4f}>")

    def _repr_html_(self):
        from ..core.display import trace_html

        return trace_html(self)


def _format_args(args) -> str:
    from ..core.values import format_value

    text = ", ".join(format_value(a) for a in args)
    return f"({text})" if len(text) < 60 else "(…)"


_ONLY_CHOICES = frozenset([ChoiceRecord])


class DynamicTrace(Trace):
    """Trace of a ``@gen`` function: records keyed by local address."""

    __slots__ = ("_records", "_families", "_compact")

    def __init__(self, gen_fn, args, retval, score, records, families=None, compact=None):
        # Trace.__init__ inlined: one trace per run
        self.gen_fn, self._args, self.retval, self.score = gen_fn, args, retval, score
        self._choices = self._flat = self._loans = None
        self._records = records
        # (namespace, line) -> family_update.Family: the run's indexed families held one
        # choice at a time, which the next update keeps in slices
        self._families = families
        # (namespace,) -> [FamilyRecord]: the compact families, each held in ``records`` under
        # its FamilySlot (in trace order); their elements are found here by address
        self._compact = compact

    def __getitem__(self, address):
        # the common read, trace["k"], of a choice whose value is no tensor (nothing to lend):
        # what Trace.__getitem__ returns for it, without resolving the path
        if type(address) is str:
            record = self._records.get((address,))
            if type(record) is ChoiceRecord and not isinstance(record.value, torch.Tensor):
                return record.value
        return Trace.__getitem__(self, address)

    def _record_items(self):
        return self._records.items()

    def _record_get(self, address):
        record = self._records.get(address)
        if record is None and self._compact is not None:
            return family_element(self._compact, address)
        return record

    def flat_records(self) -> dict:
        flat = self._flat
        if flat is None:
            records = self._records
            if set(map(type, records.values())) <= _ONLY_CHOICES:
                flat = self._flat = dict(records)      # no sub-calls: a copy, without a Python loop
            else:
                flat = Trace.flat_records(self)
        return flat


# ---------------------------------------------------------------------------
# compact indexed families (see family_update.py)
# ---------------------------------------------------------------------------
class FamilySlot:
    """The key under which a trace's records hold a :class:`FamilyRecord`: its namespace
    and keys (never equal to an address, so ``address in records`` is unaffected)."""

    __slots__ = ("namespace", "keys")

    def __init__(self, namespace, keys):
        self.namespace, self.keys = namespace, keys

    def __eq__(self, other):
        return type(other) is FamilySlot and self.namespace == other.namespace and self.keys == other.keys

    def __hash__(self):
        return hash(("FamilySlot", self.namespace, self.keys))

    def __reduce__(self):
        return FamilySlot, (self.namespace, self.keys)

    def __repr__(self):
        return f"FamilySlot({self.namespace!r}, {self.keys!r})"


class FamilyValues:
    """The values of a compact family: one float64 tensor ``(n,)``, and the 0-d tensors
    handed out per element (made on first use, each its own copy, so that changing one in
    place changes neither the tensor scored nor its neighbours). Shared by the families
    that keep these values, so a kept value is the same tensor in each of their traces."""

    __slots__ = ("tensor", "elements", "_floats")

    def __init__(self, tensor, elements=None, floats=None):
        self.tensor, self.elements, self._floats = tensor, elements, floats

    def __reduce__(self):           # a copy hands out fresh tensors
        return FamilyValues, (self.tensor,)

    def element(self, i):
        elements = self.elements
        if elements is None:
            elements = self.elements = [None] * len(self.tensor)
        value = elements[i]
        if value is None:
            value = elements[i] = self.tensor[i].clone()
        return value

    def all(self) -> list:
        return [self.element(i) for i in range(len(self.tensor))]

    def floats(self):
        if self._floats is None:
            self._floats = tuple(self.tensor.tolist())
        return self._floats


class FamilyRecord:
    """A compact indexed family: the choices ``dist @ (namespace, key)`` for ``key`` in
    ``keys`` (a range), all scalar continuous with one distribution, held as one values
    tensor and one tensor of log-densities; ``logpdf`` is their sum. The trace answers for
    each address ``(namespace, key)`` with a :class:`ChoiceRecord` made on first use, so
    what a user sees (``trace[a]``, ``get_choices()``, ``flat_records()``) is the same
    as for choices stored one by one."""

    __slots__ = ("namespace", "keys", "dist", "values", "logpdfs", "logpdf", "line", "_records")

    def __init__(self, namespace, keys, dist, values, logpdfs, logpdf, line):
        self.namespace, self.keys, self.dist, self.values = namespace, keys, dist, values
        self.logpdfs, self.logpdf, self.line = logpdfs, logpdf, line
        self._records = None

    def __reduce__(self):
        return FamilyRecord, (self.namespace, self.keys, self.dist, self.values, self.logpdfs,
                              self.logpdf, self.line)

    def __len__(self):
        return len(self.keys)

    def addresses(self, prefix=()):
        namespace = self.namespace
        return [prefix + (namespace, key) for key in self.keys]

    def position(self, key):
        """The index of ``key`` in the family, or None."""
        try:
            return self.keys.index(key) if key in self.keys else None
        except (TypeError, ValueError):
            return None

    def record(self, i) -> ChoiceRecord:
        records = self._records
        if records is None:
            records = self._records = {}
        rec = records.get(i)
        if rec is None:
            rec = records[i] = ChoiceRecord(self.dist, self.values.element(i), self.logpdfs[i].item())
        return rec

    def items(self, prefix=()):
        namespace, record = self.namespace, self.record
        return [(prefix + (namespace, key), record(i)) for i, key in enumerate(self.keys)]


def family_element(families, address):
    """The :class:`ChoiceRecord` at ``address`` in ``families`` (``{namespace address:
    [FamilyRecord]}``), or None."""
    found = families.get(address[:-1]) if len(address) > 1 else None
    if found:
        for family in found:
            i = family.position(address[-1])
            if i is not None:
                return family.record(i)
    return None


class FlatRecords(Mapping):
    """``flat_records()`` of a trace holding compact families: every choice by full address,
    in trace order, without making a record per family element until one is asked for.
    ``parts`` is the trace order: dicts of records and ``(prefix, FamilyRecord)`` pairs.

    ``outside``: the records outside the families, in trace order (a dict); ``layout``: the
    families' namespace addresses and keys, in trace order (two traces with equal layouts
    hold the same family addresses)."""

    __slots__ = ("_plain", "_parts", "_families", "_n", "layout")

    def __init__(self, parts):
        self._parts, self._plain, self._families, self._n = parts, {}, {}, 0
        layout = []
        for part in parts:
            if type(part) is dict:
                self._plain.update(part)
            else:
                prefix, family = part
                head = prefix + (family.namespace,)
                self._families.setdefault(head, []).append(family)
                layout.append((head, family.keys))
                self._n += len(family)
        self._n += len(self._plain)
        self.layout = tuple(layout)

    @property
    def outside(self) -> dict:
        return self._plain

    def __getitem__(self, address):
        rec = self.get(address)
        if rec is None:
            raise KeyError(address)
        return rec

    def get(self, address, default=None):
        rec = self._plain.get(address)
        if rec is None:
            rec = family_element(self._families, address)
        return default if rec is None else rec

    def __contains__(self, address):        # (get() would make an element's record)
        return address in self._plain or self._in_family(address)

    def _in_family(self, address):
        found = self._families.get(address[:-1]) if len(address) > 1 else None
        return bool(found) and any(family.position(address[-1]) is not None for family in found)

    def __len__(self):
        return self._n

    def __iter__(self):     # the addresses, without making the families' records
        for part in self._parts:
            yield from (part if type(part) is dict else part[1].addresses(part[0]))

    def items(self):
        out = []
        for part in self._parts:
            out += part.items() if type(part) is dict else part[1].items(part[0])
        return out

    def missing(self, addresses) -> list:
        """The addresses of ``addresses`` (a set) that are not here, visiting only those."""
        return [a for a in addresses.difference(self._plain) if not self._in_family(a)]

    def restricted(self, addresses) -> dict:
        """The records at ``addresses`` (a set), in trace order, visiting only those (and
        the records outside families: one scan in C)."""
        plain = self._plain
        elements = [a for a in addresses.difference(plain) if self._in_family(a)]
        if not elements:        # none in a family: the records outside them are in trace order
            return {a: plain[a] for a in filter(addresses.__contains__, plain)}
        out = {}
        for part in self._parts:
            if type(part) is dict:
                out.update((a, part[a]) for a in filter(addresses.__contains__, part))
                continue
            prefix, family = part
            head = prefix + (family.namespace,)
            mine = [(i, a) for a in elements if a[:-1] == head
                    for i in [family.position(a[-1])] if i is not None]
            out.update((a, family.record(i)) for i, a in sorted(mine))
        return out


def flatten(items):
    """The flat records of a trace's ``(address, record)`` items: a dict, or a
    :class:`FlatRecords` when a compact family is among them (or in a sub-trace)."""
    parts, chunk = [], {}
    for address, record in items:
        kind = type(record)
        if kind is ChoiceRecord:
            chunk[address] = record
        elif kind is FamilyRecord:
            parts += [chunk, ((), record)]
            chunk = {}
        else:
            sub = record.trace.flat_records()
            if type(sub) is not FlatRecords:
                chunk.update((address + a, r) for a, r in sub.items())
                continue
            for part in sub._parts:
                if type(part) is dict:
                    chunk.update((address + a, r) for a, r in part.items())
                else:
                    parts += [chunk, (address + part[0], part[1])]
                    chunk = {}
    if not parts:
        return chunk
    return FlatRecords([p for p in parts + [chunk] if type(p) is not dict or p])
