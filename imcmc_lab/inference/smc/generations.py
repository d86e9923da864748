"""SMC generations run as one batch (:mod:`.batched`), and particle traces built on demand.

:class:`Batcher` makes each generation: one batched kernel run when :mod:`.batched` proves it
equal to the per-particle runs, else the per-particle runs (``extend``). A batched generation
is a :class:`BatchedGeneration`: a sequence of particle traces whose storage is the batch
and the parent generation; ``generation[i]`` builds particle ``i``'s trace (an ordinary
immutable ``DynamicTrace``: the same records, scores, arguments and return values as the
per-particle run's, sharing earlier steps with its ancestors) on first read and keeps it.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np
import torch

from ...modeling.combinators import UnfoldTrace, last_unfold
from ...modeling.trace import CallRecord, ChoiceRecord, DynamicTrace
from .batched import NotBatchable, _same_values, _StepBatch, owned_args, probe, real_parents_shape, returned_site, run_step
from .steps import extend

__all__ = ["Batcher", "BatchedGeneration", "Joined", "UnfoldView"]

_LOGPDF = operator.attrgetter("logpdf")


class _Shape:
    """What every particle of a batched generation shares: the model and its ``args``, the
    records ``before`` the Unfold, the Unfold's ``site``, the ``unfold`` and its arguments."""

    __slots__ = ("model", "args", "before", "site", "unfold", "unfold_args")

    def __init__(self, model, args, before, site, unfold, unfold_args):
        self.model, self.args, self.before, self.site = model, args, before, site
        self.unfold, self.unfold_args = unfold, unfold_args


class BatchedGeneration(Sequence):
    """Generation ``t``'s particles: particle ``i`` extends ``parent[ancestors[i]]`` (``parent``:
    a list of traces or a BatchedGeneration; None at ``t = 0``) by the batched step ``step``."""

    def __init__(self, t, parent, ancestors, shape, step):
        self.t, self.parent, self.ancestors, self.shape, self.step = t, parent, ancestors, shape, step
        self.n = len(step.increments)
        self._traces, self._steps, self._unfold_scores = {}, {}, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self.n))]
        i = operator.index(i)
        if not -self.n <= i < self.n:
            raise IndexError(f"particle {i} of {self.n}")
        i %= self.n
        found = self._traces.get(i)
        return found if found is not None else self._build(i)

    def parent_index(self, i):
        return i if self.ancestors is None else int(self.ancestors[i])

    def values(self, address):
        """``(n, ...)`` values at a choice of this generation's step, or None."""
        k = len(self.shape.site)
        if tuple(address[:k + 1]) != self.shape.site + (self.t,):
            return None
        for r in self.step.records:
            if r.address == tuple(address[k + 1:]) and r.batched:
                return r.value
        return None

    def states(self, ancestors):
        """``(batched states, None)`` or ``(None, shared state)`` for the next generation."""
        kind, what = self.step.retval
        if kind == "shared":
            return None, what
        storage = self.step.records[what].value if kind == "record" else what
        if ancestors is None:
            return storage.clone(), None
        index = np.asarray(ancestors, dtype=np.int64)
        if storage.requires_grad:
            return storage[torch.from_numpy(index)], None
        return torch.from_numpy(storage.numpy()[index]), None      # NumPy's gather: a fifth of torch's cost

    # -- what a particle's trace would say, without building it -------------------------
    def unfold_scores(self):
        """The score of every particle's ``Unfold`` (as its trace would have it), cached."""
        chain, g = [], self
        while isinstance(g, BatchedGeneration) and g._unfold_scores is None:
            chain.append(g)
            g = g.parent
        for g in reversed(chain):
            parent, base = g.parent, None
            if isinstance(parent, BatchedGeneration):
                base = parent._unfold_scores
            elif isinstance(parent, Joined):
                base = np.r_[last_unfold(parent.first)[2].score, parent.batch.unfold_scores()]
            elif parent is not None:
                base = np.array([last_unfold(tr)[2].score for tr in parent], dtype=np.float64)
            if base is None:        # generation 0: the step's score, as Unfold sums one step
                g._unfold_scores = np.array(g.step.scores, dtype=np.float64)
            else:                   # the parent's plus the step's, as Unfold adds them
                index = np.arange(g.n) if g.ancestors is None else np.asarray(g.ancestors, dtype=np.int64)
                g._unfold_scores = base[index] + g.step.scores
        return self._unfold_scores

    def score(self, i):
        """Particle ``i``'s score (``self[i].score``, without building the trace)."""
        return sum(map(_LOGPDF, self.shape.before.values()), 0.0) + float(self.unfold_scores()[i])

    def site(self, i):
        """``last_unfold(self[i])`` without building the trace: the records before the Unfold,
        its address and an :class:`UnfoldView` of particle ``i``'s Unfold."""
        kind, what = self.step.retval
        state = what if kind == "shared" else (self.step.records[what].value if kind == "record" else what)[i]
        return list(self.shape.before.items()), self.shape.site, UnfoldView(self.shape, state)

    # -- building a particle's trace -------------------------------------------------
    def _build(self, i):
        chain, g, j = [], self, i
        while True:
            chain.append((g, j))
            parent, p = g.parent, g.parent_index(j)
            if isinstance(parent, Joined):
                if p == 0:
                    base = parent.first
                    break
                parent, p = parent.batch, p - 1
            if not isinstance(parent, BatchedGeneration):
                base = parent[p] if parent is not None else None
                break
            base = parent._traces.get(p)
            if base is not None:
                break
            g, j = parent, p
        if base is None:
            steps, score, state = [], None, self.shape.unfold_args[1]
        else:
            unfold = last_unfold(base)[2]
            steps, score = list(unfold.subtraces), unfold.score
            state = steps[-1].retval if steps else unfold._args[1]
        for g, j in reversed(chain):
            step = g._steps.get(j)
            if step is None:
                step = g._steps[j] = g._step_trace(j, state)
            score = step.score if score is None else score + step.score   # as Unfold adds it
            steps.append(step)
            state = step.retval
        trace = self._trace(steps, score)
        self._traces[i] = trace
        return trace

    def _step_trace(self, j, state):
        records = {}
        for r in self.step.records:
            v = r.value
            v = v[j].clone() if r.batched else (v.clone() if isinstance(v, torch.Tensor) else v)
            records[r.address] = ChoiceRecord(r.dist(j), v, float(r.logpdf[j]))
        kind, what = self.step.retval
        if kind == "record":
            retval = records[self.step.records[what].address].value
        else:
            retval = what[j].clone() if kind == "tensor" else what
        args = (self.t, state) + tuple(self.shape.unfold_args[2:])
        return DynamicTrace(self.shape.unfold.kernel, args, retval, sum(map(_LOGPDF, records.values()), 0.0),
                            records)

    def _trace(self, steps, score):
        shape = self.shape
        retval = [s.retval for s in steps]
        unfold = UnfoldTrace(shape.unfold, shape.unfold_args, retval, score, steps)
        records = dict(shape.before)
        records[shape.site] = CallRecord(unfold)
        return DynamicTrace(shape.model, shape.args, retval, sum(map(_LOGPDF, records.values()), 0.0), records)

    def __repr__(self):
        return f"<BatchedGeneration {self.t}: {self.n} particles, {len(self._traces)} built>"


class UnfoldView:
    """What ``Unfold`` comparisons read of a batched particle's Unfold trace: ``gen_fn``,
    ``args``, its number of steps (``len``) and its last state (``retval[-1]``)."""

    __slots__ = ("gen_fn", "_args", "retval")

    def __init__(self, shape, state):
        self.gen_fn, self._args, self.retval = shape.unfold, shape.unfold_args, (state,)

    @property
    def args(self):
        return self._args

    def __len__(self):
        return int(self._args[0])


class Joined(Sequence):
    """Conditional SMC's generation: the retained particle's trace ``first`` (index 0), then
    the particles of ``batch`` (a :class:`BatchedGeneration`)."""

    def __init__(self, first, batch):
        self.first, self.batch = first, batch
        self._every = None      # every particle's state, (n, ...): PGAS's ancestor weights use it too

    def __len__(self):
        return 1 + len(self.batch)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n, i = len(self), operator.index(i)
        if not -n <= i < n:
            raise IndexError(f"particle {i} of {n}")
        i %= n
        return self.first if i == 0 else self.batch[i - 1]

    def states(self, ancestors):
        """As :meth:`BatchedGeneration.states`, index 0 being the retained particle's state."""
        if self._every is None:
            self._every = self._states()
        every, shared = self._every
        if every is None or ancestors is None:
            return (None if every is None else every.clone()), shared
        return torch.from_numpy(every.numpy()[np.asarray(ancestors, dtype=np.int64)]), None

    def _states(self):
        rest, shared = self.batch.states(None)
        state = _last_state(self.first)
        if rest is None:
            if state is shared:
                return None, shared
            raise NotBatchable("the retained particle's state differs from the others'")
        if type(state) is not torch.Tensor or state.dtype != rest.dtype or state.shape != rest.shape[1:]:
            raise NotBatchable("the retained particle's state is not a tensor like the others'")
        if state.requires_grad or rest.requires_grad:
            raise NotBatchable("a state is differentiable")
        return torch.cat([state.reshape((1,) + tuple(state.shape)), rest]), None


def _last_state(trace):
    unfold = last_unfold(trace)[2]
    return unfold.retval[-1] if len(unfold) else unfold._args[1]


class Batcher:
    """Makes the generations of one SMC run (see the module docstring). ``note``: why the run
    went per particle (None while it batches); ``batched``: per generation, whether it ran
    as one batch. ``enabled=False``: always per particle."""

    def __init__(self, steps, n, enabled=True):
        self.steps, self.n, self.note, self.batched = steps, n, None, []
        self.site = None
        if not enabled:
            self.note = "batching turned off"
            return
        try:
            self.site = returned_site(steps.model)
        except NotBatchable as exc:
            self.note = str(exc)

    def generation(self, parents, ancestors, t, given=None):
        """``(particles, log-weight increments)`` of generation ``t``: particle ``i`` extends
        ``parents[ancestors[i]]`` (``ancestors`` None: ``parents[i]``; ``parents`` None at t = 0).
        ``given``: values of particle 0's new choices (conditional SMC's retained particle, as
        ``extend``'s ``proposed``: their densities leave its weight as drawn ones do)."""
        drawn = None
        if self.note is None:
            handler = None
            try:
                shape, kernel_args, state = self._plan(parents, ancestors, t)
                n = self.n if ancestors is None else len(ancestors)
                handler = _StepBatch(n, self._constraints(t), given=self._step_values(given, t))
                step = run_step(handler, shape.unfold.kernel, kernel_args, state)
            except Exception as exc:    # noqa: BLE001 - the per-particle run below redoes it
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                self.note = f"generation {t} runs per particle from here on: {first[:200]}"
                drawn = handler.drawn() if handler is not None else None
            else:
                self.batched.append(True)
                return BatchedGeneration(t, parents, ancestors, shape, step), step.increments
        self.batched.append(False)
        return self._per_particle(parents, ancestors, t, drawn, given)

    def _step_values(self, values, t):
        """``values`` (full addresses) by their address inside step ``t``; NotBatchable if one
        is not in that step."""
        if not values:
            return None
        k, prefix = len(self.site), self.site + (t,)
        if any(a[:k + 1] != prefix or len(a) <= k + 1 for a in values):
            raise NotBatchable(f"a retained choice is not in step {t} of the Unfold")
        return {a[k + 1:]: v for a, v in values.items()}

    def _constraints(self, t):
        site, k = self.site, len(self.site)
        constraints = {}
        for address, value in self.steps.observations(t).items():
            if address[:k] != site or len(address) <= k + 1 or address[k] != t:
                raise NotBatchable(f"the observation at {address!r} is not in step {t} of the Unfold")
            constraints[address[k + 1:]] = value.clone() if isinstance(value, torch.Tensor) else value
        return constraints

    def _plan(self, parents, ancestors, t):
        """``(shape, kernel arguments, batched states or None)`` of generation ``t``."""
        args = owned_args(self.steps, t)
        if t == 0:
            before, previous = {}, None
        elif isinstance(parents, BatchedGeneration):
            before, previous = parents.shape.before, (parents.shape.args, parents.shape.unfold_args)
        elif isinstance(parents, Joined):
            shape = parents.batch.shape
            before, previous = shape.before, (shape.args, shape.unfold_args)
            mine = real_parents_shape([parents.first], self.site)
            if len(mine[0]) != len(before) or any(before.get(a) is not r for a, r in mine[0].items()) \
                    or not _same_values(mine[1], shape.args) or not _same_values(mine[2][1:], shape.unfold_args[1:]):
                raise NotBatchable("the retained particle differs from the others before its Unfold")
        else:
            used = [parents[a] for a in (range(len(parents)) if ancestors is None else np.unique(ancestors))]
            before, old_args, old_unfold_args = real_parents_shape(used, self.site)
            previous = (old_args, old_unfold_args)
        unfold, call_args = probe(self.steps.model, self.site, args, before, previous)
        shape = _Shape(self.steps.model, args, before, self.site, unfold, call_args)
        state, shared = (None, call_args[1]) if t == 0 else self._states(parents, ancestors)
        return shape, (t, shared) + tuple(call_args[2:]), state

    def _states(self, parents, ancestors):
        if isinstance(parents, (BatchedGeneration, Joined)):
            return parents.states(ancestors)
        index = range(len(parents)) if ancestors is None else ancestors
        states = [_last_state(parents[a]) for a in index]
        if all(s is states[0] for s in states):
            return None, states[0]
        if all(type(s) is torch.Tensor and s.dtype == torch.float64 and s.shape == states[0].shape for s in states):
            return torch.stack(states), None
        raise NotBatchable("the particles' states are not float64 tensors of one shape")

    def _per_particle(self, parents, ancestors, t, drawn, given=None):
        """The per-particle runs; ``drawn``: values a failed batch drew, replayed as theirs."""
        index = range(self.n) if ancestors is None else ancestors
        prefix = (self.site or ()) + (t,)
        traces, increments = [], []
        for i, a in enumerate(index):
            proposed = {prefix + address: v[i].clone() for address, v in drawn.items()} if drawn else None
            if i == 0 and given:
                proposed = {**given, **(proposed or {})}
            extension = extend(self.steps, parents[a] if parents is not None else None, t, proposed)
            traces.append(extension.trace)
            increments.append(extension.log_weight)
        return traces, np.asarray(increments, dtype=np.float64)
