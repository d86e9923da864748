"""A generation of SMC as one batched run of an ``Unfold`` kernel, when that is provably the
per-particle run.

Per particle, generation ``t`` of a state-space model is ``trace.update(observations(t),
args(t))``: the model body runs again, keeps what it made before, and its ``Unfold`` grows
by one step, ``kernel(t, state, *params)``. Here the kernel's body runs ONCE for all N
particles: under a vmap level (:mod:`.vmapped`) each particle's state is one batched
tensor, so every ``dist @ address`` draws or scores N values in one torch call. Particle
traces are built from that storage only when read (:mod:`.generations`).

Why this is the per-particle run, given the same draws:

* **The model body** (checked every generation by :func:`probe`, in update mode with the
  ``Unfold`` call intercepted): every particle has the very same records before the
  ``Unfold`` (the same objects) and the same arguments, so its body does the same up to the
  call, whose arguments it returns; the call must be the value of the body's only
  ``return`` (its source is read once, :func:`returned_site`), so nothing that could depend
  on a particle runs after it. The call must grow the ``Unfold`` by one step with the same
  initial state and parameters: ``Unfold`` then keeps steps ``0..t-1`` and runs step ``t``.
* **The kernel body** runs under vmap: a batched tensor behaves as one particle's value
  (``x.sum()``, ``A @ x`` are per particle), and a Python branch on a particle's value
  (``bool``, ``float``, ``int``, ``.item()``) raises. Such a failure does not depend on the
  drawn values, so falling back to the per-particle run is exact; the values drawn before
  it are replayed as that run's values (:meth:`Batcher.generation`), which keeps it exact
  for a failure that does depend on them (an invalid parameter, a NaN density).
* **Distributions** take part only if they declare ``batchable`` (per-entry parameters in
  ``sample_batch``, ``batch_problem`` and ``log_prob``); a sub-call in the kernel, a value
  that is not a float tensor, a changed-in-place value: per-particle run.
"""

from __future__ import annotations

import ast
import weakref

import numpy as np
import torch

from ...core.address import normalize_address
from ...core.effects import pop_handler, push_handler
from ...core.values import values_equal
from ...modeling.combinators import Unfold, last_unfold
from ...modeling.execution import Execution
from ...modeling.families import _function_def
from ...modeling.gen import DynamicGenFunction
from ...modeling.runtime import owned
from ...modeling.trace import DynamicTrace
from ...modeling.tracer import Generate, Update
from . import vmapped

__all__ = ["NotBatchable", "returned_site", "probe", "run_step", "StepBatch", "BatchRecord"]


class NotBatchable(Exception):
    """The generation cannot run as one batch; the message says why (shown in ``batch_note``)."""


_SITE_VALUE = object()      # what the intercepted ``Unfold`` call returns to the model body


# ---------------------------------------------------------------------------------------
# the model body: read once from its source, then probed every generation
# ---------------------------------------------------------------------------------------
_SITES = weakref.WeakKeyDictionary()      # model -> its returned site, or the NotBatchable


def returned_site(model):
    """The address of ``return callee(...) @ address``, the last statement of ``model``'s
    body and its only ``return``; NotBatchable otherwise (read once per model)."""
    try:
        found = _SITES.get(model)
    except TypeError:
        found = None
    if found is None:
        try:
            found = _read_site(model)
        except NotBatchable as exc:
            found = exc
        try:
            _SITES[model] = found
        except TypeError:
            pass
    if isinstance(found, NotBatchable):
        raise NotBatchable(str(found))
    return found


def _read_site(model):
    if not isinstance(model, DynamicGenFunction) or not hasattr(model.__wrapped__, "__code__"):
        raise NotBatchable(f"{getattr(model, 'name', model)!s} is not a plain @gen function")
    node = _function_def(model.__wrapped__)
    if node is None:
        raise NotBatchable(f"the source of {model.name} cannot be read")
    last = node.body[-1]
    returns = [n for n in _walk_body(node) if isinstance(n, ast.Return)]
    if not (isinstance(last, ast.Return) and returns == [last] and isinstance(last.value, ast.BinOp)
            and isinstance(last.value.op, ast.MatMult)):
        raise NotBatchable(f"the body of {model.name} does not end in its only return, "
                           f"`return Unfold(kernel)(...) @ address`")
    try:
        return normalize_address(ast.literal_eval(last.value.right))
    except (ValueError, TypeError):
        raise NotBatchable(f"the address of {model.name}'s last call is not a constant") from None


def _walk_body(node):
    """The nodes of a function's body, not entering nested functions or classes."""
    todo = list(node.body)
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))


def _intercepted_call(self, address, gen_fn, args, line):
    if address != self.site or self.captured is not None:
        raise NotBatchable(f"the model makes the call at {address!r} besides the Unfold")
    self._claim(address, line, "sub-call")
    self.captured = (gen_fn, args)
    return _SITE_VALUE


def _refused_draw(self, dist, address, line):
    # a choice the particles would draw each for itself: refused before it draws (the probe
    # leaves torch's random numbers as the per-particle run finds them)
    raise NotBatchable(f"the model draws {address!r} before its Unfold")


class _ProbeGenerate(Generate):
    __slots__ = ("site", "captured")
    call = _intercepted_call
    _unconstrained = _refused_draw


class _ProbeUpdate(Update):
    __slots__ = ("site", "captured")
    call = _intercepted_call
    _fresh = _refused_draw


def probe(model, site, args, before=None, previous=None):
    """Run ``model``'s body with ``args`` up to its ``Unfold`` call at ``site``; the call's
    ``(Unfold, its arguments)``. ``before``: the records every particle has before the call;
    ``previous``: ``(model args, Unfold args)`` of the last generation, None at the first.
    NotBatchable unless the body kept exactly ``before`` and grows the Unfold by one step."""
    if previous is None:
        tracer = _ProbeGenerate(model, Execution(_ProbeGenerate, args))
    else:
        skeleton = DynamicTrace(model, previous[0], None, 0.0, before)
        tracer = _ProbeUpdate(model, Execution(_ProbeUpdate, args, skeleton))
    tracer.site, tracer.captured = site, None
    saved = push_handler(tracer)
    try:
        retval = model.fn(*args)
    finally:
        pop_handler(saved)
    records = tracer.records
    if retval is not _SITE_VALUE or tracer.captured is None or tracer.fresh or tracer.discard \
            or tracer.weight != 0.0 or tracer.families is not None or len(records) != len(before or ()) \
            or any(records.get(a) is not r for a, r in (before or {}).items()):
        raise NotBatchable(f"{model.name} does something besides growing its Unfold at {site!r}")
    unfold, call_args = tracer.captured
    if not isinstance(unfold, Unfold) or not isinstance(unfold.kernel, DynamicGenFunction) \
            or len(call_args) < 2:
        raise NotBatchable(f"the call at {site!r} is not an Unfold of a @gen kernel")
    if previous is not None:
        old = previous[1]
        if int(call_args[0]) != int(old[0]) + 1 or not _same_values(call_args[1:], old[1:]):
            raise NotBatchable(f"generation {int(call_args[0]) - 1} changes the Unfold's initial state "
                               f"or parameters, or does not grow it by one step")
    elif int(call_args[0]) != 1:
        raise NotBatchable("the first generation's Unfold does not have one step")
    return unfold, call_args


def _same_values(a, b):
    """The same objects (the usual case: the body passes its arguments on), else equal values."""
    if len(a) == len(b) and all(x is y for x, y in zip(a, b)):
        return True
    return values_equal(tuple(a), tuple(b))


def real_parents_shape(parents, site):
    """``(records before the Unfold, model args, Unfold args)`` shared by every trace in
    ``parents`` (real traces); NotBatchable if they differ."""
    first = last_unfold(parents[0])
    if first is None or first[1] != site:
        raise NotBatchable("the traces do not end in the Unfold")
    before = dict(first[0])
    args, unfold_args = parents[0]._args, first[2]._args
    for trace in parents:
        found = last_unfold(trace)
        if found is None or found[1] != site or trace._families is not None \
                or len(found[0]) != len(before) or any(before.get(a) is not r for a, r in found[0]) \
                or not _same_values(trace._args, args) or not _same_values(found[2]._args[1:], unfold_args[1:]):
            raise NotBatchable("the particles differ before their Unfold")
    return before, args, unfold_args


def owned_args(steps, t):
    return owned(steps.args(t))


# ---------------------------------------------------------------------------------------
# the kernel body under vmap
# ---------------------------------------------------------------------------------------
class BatchRecord:
    """One choice of a batched step: ``dist_class`` and its ``raw`` arguments as ``(value,
    batched)`` pairs; ``value`` (``(n,) + event_shape`` if ``batched``, else shared);
    ``logpdf`` (a float64 NumPy array ``(n,)``); whether it was ``constrained``."""

    __slots__ = ("address", "dist_class", "raw", "value", "batched", "logpdf", "constrained")

    def __init__(self, address, dist_class, raw, value, batched, logpdf, constrained):
        self.address, self.dist_class, self.raw, self.value = address, dist_class, raw, value
        self.batched, self.logpdf, self.constrained = batched, logpdf, constrained

    def dist(self, i):
        """Particle ``i``'s distribution."""
        return self.dist_class(*[v[i].clone() if b else v for v, b in self.raw])


class _StepBatch:
    """The handler of a batched kernel body: ``dist @ address`` draws or scores all particles."""

    __slots__ = ("level", "n", "constraints", "records", "addresses", "wrappers", "handed", "may_draw", "given")

    def __init__(self, n, constraints, may_draw=True, given=None):
        # ``given``: values of particle 0's choices that the others draw (conditional SMC)
        self.level, self.n, self.constraints, self.may_draw, self.given = None, n, constraints, may_draw, given
        self.records, self.addresses, self.wrappers, self.handed = [], set(), {}, []

    def choice(self, address, dist, line):
        if not getattr(dist, "batchable", False) or address in self.addresses:
            raise NotBatchable(f"{dist.name} at {address!r} is not batchable")
        raw = []
        for a in dist.raw_args:
            u = self.level.unwrap(a)
            if u is None or not (u[1] or type(a) in (int, float) or isinstance(a, torch.Tensor)):
                raise NotBatchable(f"an argument of {dist.name} at {address!r} is not a number or tensor")
            raw.append(u)
        n = self.n
        with vmapped.outside():
            if any(not b and isinstance(v, torch.Tensor) and v.ndim for v, b in raw):
                # a shared vector must not pass for a batch: check one particle's shapes
                if type(dist)(*[v[0] if b else v for v, b in raw]).check_params() is not None:
                    raise NotBatchable(f"invalid parameters at {address!r}")
            batch = type(dist)(*[v for v, _ in raw])
            if batch.batch_problem() is not None:
                raise NotBatchable(f"invalid parameters at {address!r}")
            constrained = address in self.constraints
            if not (constrained or self.may_draw):
                raise NotBatchable(f"the step would draw {address!r}")
            if constrained:
                value = batch.coerce(self.constraints[address])
            elif self.given is not None and address in self.given:
                value = self._given_first(dist, raw, batch, address)
            else:
                value = batch.sample_batch(n)
            logpdf = batch.batch_log_prob(value)          # NaN: checked in StepBatch
            if logpdf.shape != (n,):
                logpdf = np.broadcast_to(logpdf, (n,))
            handed = value if constrained else value.clone()
        self.addresses.add(address)
        self.records.append(BatchRecord(address, type(dist), tuple(raw), value, not constrained, logpdf,
                                        constrained))
        self.handed.append((handed, handed._version))
        if constrained:
            return handed
        wrapped = self.level.wrap(handed)
        self.wrappers[id(wrapped)] = (wrapped, len(self.records) - 1)
        return wrapped

    def _given_first(self, dist, raw, batch, address):
        """Particle 0's given value, then the others' draws (as many draws as they make alone)."""
        first = batch.coerce(self.given[address])
        if self.n == 1:
            return first.reshape((1,) + tuple(first.shape))
        rest = type(dist)(*[v[1:] if b else v for v, b in raw]).sample_batch(self.n - 1)
        if first.shape != rest.shape[1:] or first.dtype != rest.dtype:
            raise NotBatchable(f"the retained value at {address!r} does not fit the batch")
        return torch.cat([first.reshape((1,) + tuple(first.shape)), rest])

    def call(self, address, gen_fn, args, line):
        raise NotBatchable(f"the kernel calls {gen_fn.name} at {address!r}")

    def choice_family(self, namespace, keys, dist, line):
        raise NotBatchable(f"the kernel draws a family at {namespace!r}")

    def retval_spec(self, retval):
        """``("record", k)``, ``("tensor", (n, ...) tensor)`` or ``("shared", value)``."""
        found = self.wrappers.get(id(retval))
        if found is not None and found[0] is retval:
            return "record", found[1]
        u = self.level.unwrap(retval)
        if u is not None and u[1]:
            return "tensor", u[0]
        if type(retval) in (int, float) or (u is not None and isinstance(retval, torch.Tensor)):
            return "shared", retval
        raise NotBatchable("the kernel returns something other than a number or a tensor")

    def drawn(self):
        """``{address: (n, ...) values}`` drawn so far (replayed by a per-particle run)."""
        return {r.address: r.value for r in self.records if not r.constrained}


class StepBatch:
    """What a batched kernel run made: ``records`` (:class:`BatchRecord`), ``retval`` (see
    :meth:`_StepBatch.retval_spec`), ``scores`` (the step's log-density per particle, summed
    in the order the records were made) and ``increments`` (the log-weight increments)."""

    __slots__ = ("records", "retval", "scores", "increments")

    def __init__(self, records, retval, first):
        self.records, self.retval = records, retval
        score = fresh = constrained = None
        for r in records:           # in order, as the per-particle run sums them
            score = r.logpdf if score is None else score + r.logpdf
            if r.constrained:
                constrained = r.logpdf if constrained is None else constrained + r.logpdf
            else:
                fresh = r.logpdf if fresh is None else fresh + r.logpdf
        n = len(records[0].logpdf) if records else 0
        if score is not None and np.isnan(score).any():
            raise NotBatchable("a log-density is NaN")
        self.scores = score
        if first:       # generate's weight: the constrained choices' densities
            inc = constrained
        else:           # update's weight (the whole new step) less the fresh choices' densities
            inc = score if fresh is None else score - fresh
        self.increments = np.zeros(n) if inc is None else np.array(inc, dtype=np.float64)


def run_step(handler, kernel, args, state):
    """Run ``kernel(*args)`` once with ``state`` (``(n, ...)``, or None: ``args[1]`` is
    shared) as the batched incoming state; a :class:`StepBatch`. Raises whatever stops it."""
    if not vmapped.AVAILABLE:
        raise NotBatchable("this torch has no vmap primitives")
    if state is not None and (state.dtype != torch.float64 or state.shape[0] != handler.n):
        raise NotBatchable("the states are not float64 tensors")
    with vmapped.Level(handler.n) as level:
        handler.level = level
        call_args = list(args)
        if state is not None:
            version = state._version
            call_args[1] = level.wrap(state)
        saved = push_handler(handler)
        try:
            retval = kernel.fn(*call_args)
        finally:
            pop_handler(saved)
        spec = handler.retval_spec(retval)
    if handler.given is not None and not handler.addresses.issuperset(handler.given):
        raise NotBatchable("a retained choice is not made by the step")
    if (state is not None and state._version != version) or any(v._version != k for v, k in handler.handed):
        raise NotBatchable("the kernel changed a value in place")
    return StepBatch(handler.records, spec, first=int(args[0]) == 0)


def restep_batch(step, states):
    """:func:`~imcmc_lab.modeling.combinators.restep` for a batch: ``log p(step re-run from
    state l) - log p(step)`` for each row of ``states`` (``(n, ...)``), the step's choices
    kept; None where ``restep`` could give None (the re-run would draw, or return a state
    that differs from the step's) or the batch cannot run it (then ask ``restep`` per state)."""
    constraints = {a: r.value for a, r in step.flat_records().items()}
    handler = _StepBatch(len(states), constraints, may_draw=False)
    try:
        batch = run_step(handler, step.gen_fn, tuple(step._args), states)
    except Exception:       # noqa: BLE001 - the per-state restep decides
        return None
    kind, value = batch.retval
    if kind != "shared" or not (value is step.retval or values_equal(value, step.retval)) \
            or len(handler.records) != len(constraints):
        return None
    old = step.flat_records()
    delta = 0.0
    for r in handler.records:       # as update sums them: new - old per choice, in order
        delta = delta + (r.logpdf - old[r.address].logpdf)
    return np.broadcast_to(delta, (len(states),))
