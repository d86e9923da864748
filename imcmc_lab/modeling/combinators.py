"""Combinators for iid/indexed structure (:class:`Map`) and sequences (:class:`Unfold`).

Both mount element ``i`` of their trace at the integer address ``i``, so inside
a model ``Map(point)(xs) @ "data"`` puts the choices of element 3 under
``("data", 3, ...)``. Their ``update`` re-runs only the elements whose inputs or
constraints changed, which is what makes a local change to a large model cost
O(1) log-density evaluations.
"""

from __future__ import annotations

import torch

from ..core.values import values_equal
from .gen import GenerativeFunction
from .execution import Result
from .trace import CallRecord, Trace

__all__ = ["Map", "Unfold", "MapTrace", "UnfoldTrace", "last_unfold", "restep"]


def _split_constraints(constraints):
    """``{i: {rest: value}}`` from flat constraints whose first key is the element index."""
    if not constraints:
        return {}
    groups = {}
    for address, value in constraints.items():
        head = address[0]
        if len(address) == 1 or not isinstance(head, int):
            # A constraint that names no element's choice: leave it unused, so the
            # caller reports it as an address the program never visits.
            continue
        groups.setdefault(head, {})[address[1:]] = value
    return groups


def _changed_indices(old_seq, new_seq, n):
    """Indices ``i < n`` at which two argument sequences differ (vectorised for tensors)."""
    if old_seq is new_seq:
        return set()
    if isinstance(old_seq, torch.Tensor) and isinstance(new_seq, torch.Tensor) \
            and old_seq.shape[1:] == new_seq.shape[1:]:
        m = min(len(old_seq), len(new_seq), n)
        diff = old_seq[:m] != new_seq[:m]
        if diff.ndim > 1:
            diff = diff.reshape(m, -1).any(dim=1)
        return set(torch.nonzero(diff).flatten().tolist())
    m = min(len(old_seq), len(new_seq), n)
    return {i for i in range(m) if not values_equal(old_seq[i], new_seq[i])}


def _same_value(a, b) -> bool:
    return a is b or values_equal(a, b)


class _ElementTrace(Trace):
    """Shared by Map and Unfold traces: a list of element sub-traces."""

    __slots__ = ("subtraces",)

    def __init__(self, gen_fn, args, retval, score, subtraces):
        super().__init__(gen_fn, args, retval, score)
        self.subtraces = subtraces

    def _record_items(self):
        return (((i,), CallRecord(t)) for i, t in enumerate(self.subtraces))

    def _record_get(self, address):
        if len(address) == 1 and isinstance(address[0], int) and 0 <= address[0] < len(self.subtraces):
            return CallRecord(self.subtraces[address[0]])
        return None

    def __len__(self):
        return len(self.subtraces)


class MapTrace(_ElementTrace):
    __slots__ = ()


class UnfoldTrace(_ElementTrace):
    __slots__ = ()


class _ElementRun:
    """Accumulates one combinator run: element traces, weight, discard, fresh."""

    def __init__(self, request):
        self.request = request
        self.groups = _split_constraints(request.constraints)
        self.selection = request.selection
        self.subtraces = []
        self.weight = 0.0
        self.delta_score = 0.0
        self.discard = {}
        self.fresh = []
        self.n_used = 0
        self.kept_prefix = 0      # leading elements kept wholesale from the previous trace

    def element(self, i, kernel, args, prev_sub):
        sub_sel = self.selection.subselection((i,)) if self.selection is not None else None
        result, weight = self.request.child(kernel, args, prev_sub, self.groups.get(i), sub_sel)
        self.weight += weight
        self.n_used += result.n_used
        if result.discard:
            for sub, value in result.discard.items():
                self.discard[(i,) + sub] = value
        if result.fresh:
            self.fresh.extend((i,) + sub for sub in result.fresh)
        if prev_sub is None:
            self.delta_score += result.trace.score  # a new element (the sequence grew)
        elif result.trace is not prev_sub:
            self.delta_score += result.trace.score - prev_sub.score
        self.subtraces.append(result.trace)
        return result.trace

    def reusable(self, i, selection_empty):
        return i not in self.groups and selection_empty

    def remove(self, i, old):
        if self.request.mode.weighs_removed:
            self.weight -= old.score
        self.delta_score -= old.score
        for sub, value in old.get_choices().items():
            self.discard[(i,) + sub] = value

    def score(self, prev):
        if prev is None:
            return sum(t.score for t in self.subtraces)
        return prev.score + self.delta_score

    def finish(self, trace_class, gen_fn, args, old):
        """Remove the old elements past the new length; the run's :class:`Result` with a
        new ``trace_class`` trace of the elements."""
        for i in range(len(self.subtraces), len(old)):
            self.remove(i, old[i])
        prev = self.request.prev if self.request.incremental else None
        kept = self.kept_prefix
        retval = list(self.request.prev.retval[:kept]) if kept else []
        retval.extend(t.retval for t in self.subtraces[kept:])
        trace = trace_class(gen_fn, args, retval, self.score(prev), self.subtraces)
        return Result(trace, self.weight, self.discard, self.fresh, self.n_used)


class Map(GenerativeFunction):
    """``Map(kernel)(xs, ys, ...)``: element ``i`` is ``kernel(xs[i], ys[i], ...)`` at address ``i``.

    Like Gen's ``Map``. Each argument is a sequence (list, tuple or tensor whose
    first dimension indexes elements); all have the same length. The return
    value is the list of the elements' return values.
    """

    def __init__(self, kernel: GenerativeFunction):
        self.kernel = kernel
        self.name = f"Map({kernel.name})"

    # ``Map(kernel)`` written inline in a model body is a new object on every run;
    # equal kernels make it the same generative function, so update stays incremental.
    def __eq__(self, other):
        return type(other) is type(self) and other.kernel == self.kernel

    def __hash__(self):
        return hash((type(self), self.kernel))

    def _execute(self, request):
        args, prev, selection = request.args, request.prev, request.selection
        if not args:
            raise TypeError(f"{self.name} needs at least one argument sequence")
        n = len(args[0])
        for a in args[1:]:
            if len(a) != n:
                raise ValueError(f"{self.name}: argument sequences differ in length ({n} vs {len(a)})")
        run = _ElementRun(request)
        incremental = request.incremental
        changed = set()
        if incremental:
            for old_seq, new_seq in zip(prev._args, args):
                changed |= _changed_indices(old_seq, new_seq, n)
        sel_empty = selection is None or selection.is_empty()
        old = prev.subtraces if prev is not None else ()
        for i in range(n):
            if incremental and i < len(old) and i not in changed and run.reusable(i, sel_empty):
                run.subtraces.append(old[i])
                continue
            element_args = tuple(a[i] for a in args)
            run.element(i, self.kernel, element_args, old[i] if i < len(old) else None)
        return run.finish(MapTrace, self, args, old)

    def __repr__(self):
        return f"<generative function {self.name}>"


class Unfold(GenerativeFunction):
    """``Unfold(kernel)(n, init_state, *params)``: a chain ``state_t = kernel(t, state_{t-1}, *params)``.

    Like Gen's ``Unfold``. Step ``t`` (``0 <= t < n``) is mounted at address
    ``t``; the return value is the list of states. ``update`` re-runs a step
    only if its constraints changed or its arguments (incoming state, parameters) differ;
    growing ``n`` (as SMC does) runs only the new steps.
    """

    def __init__(self, kernel: GenerativeFunction):
        self.kernel = kernel
        self.name = f"Unfold({kernel.name})"

    def __eq__(self, other):  # see Map.__eq__
        return type(other) is type(self) and other.kernel == self.kernel

    def __hash__(self):
        return hash((type(self), self.kernel))

    def _execute(self, request):
        args, prev, selection = request.args, request.prev, request.selection
        if len(args) < 2:
            raise TypeError(f"{self.name} is called as {self.name}(n, init_state, *params)")
        n, state, params = int(args[0]), args[1], tuple(args[2:])
        run = _ElementRun(request)
        incremental = request.incremental
        old = prev.subtraces if prev is not None else ()
        params_changed = not incremental or not values_equal(params, tuple(prev._args[2:]))
        sel_empty = selection is None or selection.is_empty()
        start = 0
        if not params_changed and sel_empty and _same_value(state, prev._args[1]):
            # The steps before the first constrained one keep their arguments (the same
            # initial state, parameters and, one after the other, incoming states), so they
            # are kept wholesale: growing the chain by one step (SMC) costs O(1) steps, not O(n).
            start = min(len(old), n, min(run.groups, default=n))
            run.subtraces.extend(old[:start])
            run.kept_prefix = start
            state = old[start - 1].retval if start else state
        for t in range(start, n):
            prev_sub = old[t] if t < len(old) else None
            # a kept step is reused when its own arguments (incoming state, parameters) are
            # unchanged, whatever happened to the steps before it (PGAS splices traces)
            if prev_sub is not None and incremental and not params_changed \
                    and run.reusable(t, sel_empty) and _same_value(state, prev_sub._args[1]):
                run.subtraces.append(prev_sub)
                state = prev_sub.retval
                continue
            state = run.element(t, self.kernel, (t, state) + params, prev_sub).retval
        return run.finish(UnfoldTrace, self, args, old)

    def __repr__(self):
        return f"<generative function {self.name}>"


def last_unfold(trace):
    """``(records before it, address, UnfoldTrace)`` when the last record at the top level of
    ``trace`` (a ``@gen`` function's trace) is an ``Unfold`` call, else None. Records are kept
    in the order the program made them, so nothing before the ``Unfold`` depends on its states."""
    items = getattr(trace, "_records", None)
    if not items:
        return None
    *before, (address, record) = items.items()
    if type(record) is not CallRecord or type(record.trace) is not UnfoldTrace:
        return None
    return before, address, record.trace


def restep(unfold_trace, t, state):
    """``log p(step t with incoming state) - log p(step t)`` for step ``t`` of ``unfold_trace``
    re-run from ``state`` with its choices kept; None when that run would sample or drop a
    choice, or return a different state (then the later steps would change too)."""
    step = unfold_trace.subtraces[t]
    if _same_value(state, step._args[1]):
        return 0.0
    result = step.update_detailed({}, (step._args[0], state) + tuple(step._args[2:]))
    if result.fresh or result.discard or not _same_value(result.trace.retval, step.retval):
        return None
    return result.weight
