"""Combinators for iid/indexed structure (:class:`Map`) and sequences (:class:`Unfold`).

Both mount element ``i`` of their trace at the integer address ``i``, so inside
a model ``Map(point)(xs) @ "data"`` puts the choices of element 3 under
``("data", 3, ...)``. Their ``update`` re-runs only the elements whose inputs or
constraints changed, which is what makes a local change to a large model cost
O(1) log-density evaluations. A ``Map`` whose kernel is one choice (``return
normal(mu, s) @ "y"``) does not run the kernel for the changed elements of an update:
it builds each element's distribution as the body does and re-scores the kept values
with one ``log_prob`` call (:func:`_scored_together`); the traces are the same.
"""

from __future__ import annotations

import weakref

import torch

from ..core.distributions import Distribution
from ..core.values import DTYPE, plain_float, values_equal
from .execution import Result, counters
from .families import pure_call, single_choice_kernel
from .gen import DynamicGenFunction, GenerativeFunction
from .trace import CallRecord, ChoiceRecord, DynamicTrace, Trace
from .tracer import Update

__all__ = ["Map", "Unfold", "MapTrace", "UnfoldTrace", "last_unfold", "restep"]

#: A Map update re-scores its changed elements with one vectorised ``log_prob`` call from
#: this many on (fewer run their kernels one by one)
BULK_MAP = 8


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
        self.kind_changed = None    # (see Result.kind_changed)
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
        if result.kind_changed:
            self.kind_changed = (self.kind_changed or []) + [(i,) + sub for sub in result.kind_changed]
        if prev_sub is None:
            self.delta_score += result.trace.score  # a new element (the sequence grew)
        elif result.trace is not prev_sub:
            self.delta_score += result.trace.score - prev_sub.score
        self.subtraces.append(result.trace)
        return result.trace

    def adopt(self, trace, prev_sub, weight):
        """An element trace made without running the kernel (:func:`_scored_together`)."""
        self.weight += weight
        if trace is not prev_sub:
            self.delta_score += trace.score - prev_sub.score
        self.subtraces.append(trace)

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
        result = Result(trace, self.weight, self.discard, self.fresh, self.n_used)
        result.kind_changed = self.kind_changed
        return result


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
        together = _scored_together(self.kernel, request, args, old, changed, run) if changed and sel_empty else None
        for i in range(n):
            if incremental and i < len(old) and i not in changed and run.reusable(i, sel_empty):
                run.subtraces.append(old[i])
                continue
            if together is not None and i in together:
                run.adopt(*together[i])
                continue
            element_args = tuple(a[i] for a in args)
            run.element(i, self.kernel, element_args, old[i] if i < len(old) else None)
        return run.finish(MapTrace, self, args, old)

    def __repr__(self):
        return f"<generative function {self.name}>"


#: kernel function -> (make, address) of families.single_choice_kernel, or False
_SINGLE_CHOICE = weakref.WeakKeyDictionary()
#: distributions whose log-density is elementwise in vector parameters of scalar values
_BATCHED = ("normal", "gamma", "inv_gamma", "lognormal", "exponential")
_NEG_INF = float("-inf")


def _single_choice(kernel):
    fn = kernel.fn if type(kernel) is DynamicGenFunction else None
    if fn is None or not hasattr(fn, "__code__"):
        return None
    spec = _SINGLE_CHOICE.get(fn)
    if spec is None:
        spec = _SINGLE_CHOICE[fn] = single_choice_kernel(fn) or False
    return spec or None


def _scored_together(kernel, request, args, old, changed, run):
    """``{i: (new element trace, previous one, weight)}`` for the changed elements of an
    update of a ``Map`` whose kernel is one choice (``return dist(args) @ "y"``, see
    :func:`~.families.single_choice_kernel`): each element's distribution is built as its
    body builds it, and the kept values whose distribution changed are re-scored with ONE
    ``log_prob`` call. None (the elements run one by one) unless that is exactly what running
    the kernel would do: nothing constrained or selected, plain number or tensor arguments,
    one of the engine's distributions, valid parameters, no NaN density."""
    spec = _single_choice(kernel)
    if spec is None or request.mode is not Update or request.grad_terms is not None:
        return None
    make, address = spec
    idx = sorted(i for i in changed if i < len(old) and i not in run.groups)
    if len(idx) < BULK_MAP:
        return None
    elements = []
    for i in idx:
        prev_sub, element_args = old[i], tuple(a[i] for a in args)
        rec = prev_sub._records.get(address) if type(prev_sub) is DynamicTrace else None
        if (type(rec) is not ChoiceRecord or len(prev_sub._records) != 1 or prev_sub.gen_fn != kernel
                or prev_sub.retval is not rec.value or rec.logpdf == _NEG_INF):
            return None
        dist = pure_call(*make(*element_args)) if _plain(element_args) else None
        if not isinstance(dist, Distribution) or type(dist).__matmul__ is not Distribution.__matmul__:
            return None
        elements.append((i, element_args, rec, dist, prev_sub))
    return _elements_scored(kernel, address, elements)


def _plain(values) -> bool:
    return all(type(v) in (int, float, bool) or type(v) is torch.Tensor for v in values)


def _elements_scored(kernel, address, elements):
    """The element traces of :func:`_scored_together`, or None."""
    rescore = [e for e in elements if not e[3].same_as(e[2].dist)]
    logpdfs = _rescored([e[3] for e in rescore], [e[2].value for e in rescore])
    if logpdfs is None or any(lp != lp for lp in logpdfs):
        return None         # the kernel, run, names the invalid parameters or the NaN density
    new = dict(zip((e[0] for e in rescore), logpdfs))
    counters.executions += len(elements)
    counters.logpdf_evaluations += len(rescore)
    out = {}
    for i, element_args, rec, dist, prev_sub in elements:
        lp = new.get(i)
        kept = rec if lp is None else ChoiceRecord(dist, rec.value, lp)
        trace = DynamicTrace(kernel, element_args, rec.value, 0.0 + kept.logpdf, {address: kept})
        out[i] = (trace, prev_sub, 0.0 if lp is None else lp - rec.logpdf)
    return out


def _rescored(dists, values):
    """The log-densities of ``values`` under ``dists``: one ``log_prob`` call when the
    distributions batch (:func:`_batched`), else one ``logpdf`` each; None if some
    parameters are invalid (each checked as a scalar distribution checks them)."""
    if not dists or any(d.check_params() is not None for d in dists):
        return None if dists else []
    batched = _batched(dists, values)
    if batched is not None:
        logpdfs = batched.log_prob(torch.stack(values))
        if logpdfs.shape == (len(values),):
            return logpdfs.tolist()
    return [d.logpdf(v) for d, v in zip(dists, values)]


def _batched(dists, values):
    """One distribution with vector parameters standing for ``dists`` (all of one kind in
    :data:`_BATCHED`, whose densities are elementwise, with scalar parameters checked
    valid) at scalar float64 ``values``, for ``log_prob`` only; else None."""
    kind = type(dists[0])
    if (dists[0].name not in _BATCHED or not all(type(d) is kind for d in dists)
            or not all(plain_float(v) is not None for v in values)):
        return None
    columns = [torch.stack([torch.as_tensor(r, dtype=DTYPE) for r in column])
               for column in zip(*(d.raw_args for d in dists))]
    return kind(*columns) if all(c.ndim == 1 for c in columns) else None


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
