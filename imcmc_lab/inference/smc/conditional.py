"""Particle Gibbs and particle Gibbs with ancestor sampling, as kernels on whole traces.

A sweep is conditional SMC (Andrieu, Doucet and Holenstein 2010): particle 0 is the
retained trajectory (the kernel's input trace, cut into generations), the others are
extended from ancestors drawn multinomially; the output is one final particle drawn by
weight. PGAS (Lindsten, Jordan and Schön 2012; for programs: van de Meent, Yang,
Mansinghka and Wood 2015) also redraws the retained particle's ancestor at each
generation ``t`` with weights

    log w_{t-1}^l + log gamma_N(x^l + x' from t on) - log gamma_{t-1}(x^l)

computed with ``update``; strict regeneration: ``-inf`` when the spliced program would
sample something fresh, leave a retained choice unused, or drop a choice of ``x^l``.
"""

from __future__ import annotations

import math

import numpy as np

from ...core.address import format_address
from ...core.values import values_equal
from ...errors import ConstraintError
from ...modeling.combinators import last_unfold, restep
from ..kernels import Kernel
from .resampling import (effective_sample_size, log_sum_exp, log_sum_exp_and_ess, normalized_weights, resample,
                         resample_weights)
from .batched import NotBatchable, restep_batch
from .generations import Batcher, BatchedGeneration, Joined
from .steps import Steps, extend

__all__ = ["PG", "PGAS", "Reference", "SweepRecord", "conditional_smc"]

_NEG_INF = -math.inf


class Reference:
    """The retained trace cut into generations: ``prefixes[t]`` (its trace at generation ``t``),
    ``new[t]`` (``{address: value}`` of the latent choices first made at ``t``) and
    ``log_weights[t]`` (its incremental weight at ``t``)."""

    def __init__(self, steps: Steps, trace):
        observed = steps.observed_until(steps.n - 1)
        remaining = {a: r.value for a, r in trace.flat_records().items() if a not in observed}
        self.prefixes, self.new, self.log_weights = [], [], []
        prefix = None
        for t in range(steps.n):
            result = _replay(steps, prefix, t, remaining)
            new = {a: remaining.pop(a) for a in list(remaining) if a not in result.unvisited}
            extension = extend(steps, prefix, t, new)
            prefix = extension.trace
            self.prefixes.append(prefix)
            self.new.append(new)
            self.log_weights.append(extension.log_weight)
        if remaining:
            raise ConstraintError(
                f"the trace has choices that no generation of {steps!r} makes: "
                f"{', '.join(format_address(a) for a in list(remaining)[:5])}; is it a trace of the "
                f"last generation's program?")


    @classmethod
    def from_sweep(cls, steps: Steps, record, k: int):
        """The reference of particle ``k`` of a sweep's last generation, read from the sweep's
        genealogy (``record``: its :class:`SweepRecord`) instead of replayed: its ancestor at
        generation ``t`` is its trace of generation ``t``, and that ancestor's weight its
        incremental weight (conditional SMC resamples every generation)."""
        self = cls.__new__(cls)
        n = steps.n
        index = [k] * n
        for t in range(n - 1, 0, -1):
            index[t - 1] = int(record.ancestors[t][index[t]])
        # built oldest first: each particle's trace then extends the one built just before
        self.prefixes = [record.history[t][0][index[t]] for t in range(n)]
        self.log_weights = [float(record.history[t][1][index[t]]) for t in range(n)]
        self.new = [_new_choices(steps, t, self.prefixes[t - 1] if t else None, self.prefixes[t])
                    for t in range(n)]
        return self


def _new_choices(steps, t, before, trace):
    """``{address: value}`` of the unobserved choices ``trace`` (generation ``t``) made that
    ``before`` (generation ``t - 1``) did not: for an Unfold grown by one step, that step's."""
    observed = steps.observations(t)
    mine, theirs = last_unfold(trace), last_unfold(before) if before is not None else None
    if mine is not None and theirs is not None and mine[1] == theirs[1] \
            and len(mine[2]) == len(theirs[2]) + 1 and len(mine[0]) == len(theirs[0]) \
            and all(a == b and r is q for (a, r), (b, q) in zip(mine[0], theirs[0])) \
            and all(a is b for a, b in zip(mine[2].subtraces, theirs[2].subtraces)):
        prefix = mine[1] + (len(theirs[2]),)
        return {prefix + a: r.value for a, r in mine[2].subtraces[-1].flat_records().items()
                if prefix + a not in observed}
    known = before.flat_records() if before is not None else {}
    return {a: r.value for a, r in trace.flat_records().items() if a not in known and a not in observed}


def _replay(steps, prefix, t, remaining):
    """Generation ``t`` run with every remaining retained choice offered (unused ones are fine)."""
    constraints = {**remaining, **steps.observations(t)}
    if prefix is None:
        result = steps.model.generate_detailed(steps.args(0), constraints, strict=False)
    else:
        result = prefix.update_detailed(constraints, steps.args(t), strict=False)
    if result.fresh:
        raise ConstraintError(
            f"generation {t} of {steps!r} makes the choice {format_address(result.fresh[0])}, which the "
            f"trace given to the particle Gibbs kernel does not have; pass a trace of the last "
            f"generation's program with its observations.")
    return result


def _spliced_weight(steps, trace, suffix):
    """``log gamma_N(trace + suffix) - log gamma_{t-1}(trace)`` by update; -inf if not strict."""
    result = trace.update_detailed(suffix, steps.args(steps.n - 1), strict=False)
    if result.fresh or result.unvisited or result.discard:
        return _NEG_INF, None
    return result.weight, result.trace


def _prefix_difference(trace, retained):
    """``{address: value}`` where ``trace`` differs from ``retained`` (same addresses), or None
    if their addresses differ."""
    mine, theirs = trace.flat_records(), retained.flat_records()
    if len(mine) != len(theirs):
        return None
    diff = {}
    for address, record in mine.items():
        other = theirs.get(address)
        if other is None:
            return None
        if record is not other and not values_equal(record.value, other.value):
            diff[address] = record.value
    return diff


class _UnfoldSplice:
    """The ancestor weights of generation ``t`` for a program whose last top-level record is an
    ``Unfold`` that each generation grows by one step, in O(1) steps per particle.

    When particle ``l`` and the retained particle agree on every record made before the
    ``Unfold`` (the same record objects) and on its initial state and parameters, splicing
    changes only the ``Unfold``'s steps ``< t`` (their scores cancel against ``log gamma_{t-1}``)
    and step ``t``'s incoming state, so

        log gamma_N(x^l + x') - log gamma_{t-1}(x^l) = full_score - log gamma_{t-1}(x^0) + delta_l

    with ``delta_l`` step ``t``'s score change from re-running it from ``x^l``'s last state
    (:func:`~imcmc_lab.modeling.combinators.restep`). ``full``: a trace whose records before
    the ``Unfold`` and whose steps from ``t`` on are the retained trajectory's; ``full_score``:
    ``log gamma_N`` of the retained trajectory. Particles outside these conditions get None
    (the caller scores them by ``update``)."""

    def __init__(self, mine, retained_score, full, t, full_score):
        # mine: last_unfold of the retained particle's trace, retained_score: that trace's score
        self.t, self.ok = t, False
        theirs = last_unfold(full)
        if mine is None or theirs is None or mine[1] != theirs[1] or len(theirs[2]) <= t:
            return
        self.before, self.unfold = mine[0], theirs[2]
        if not self._agrees(mine) or not self._agrees(theirs, len(theirs[2])):
            return
        self.offset = full_score - retained_score
        self.ok = restep(self.unfold, t, mine[2].retval[-1]) == 0.0

    def _agrees(self, site, n_steps=None):
        before, _, unfold = site
        return (len(before) == len(self.before)
                and all(a == b and r is q for (a, r), (b, q) in zip(before, self.before))
                and unfold.gen_fn == self.unfold.gen_fn and len(unfold) == (n_steps or self.t)
                and values_equal(tuple(unfold._args[1:]), tuple(self.unfold._args[1:])))

    def batch_weights(self, joined):
        """:meth:`weight` of the particles after the retained one in ``joined`` (a
        :class:`~.generations.Joined` or a :class:`~.generations.BatchedGeneration`) in one
        batched re-run of step ``t``, or None (then ask :meth:`weight` per particle)."""
        shape = (joined.batch if isinstance(joined, Joined) else joined).shape
        if len(shape.before) != len(self.before) or any(
                a != b or r is not q for (a, r), (b, q) in zip(shape.before.items(), self.before)) \
                or shape.unfold != self.unfold.gen_fn or int(shape.unfold_args[0]) != self.t \
                or not values_equal(tuple(shape.unfold_args[1:]), tuple(self.unfold._args[1:])):
            return None
        try:
            states, _ = joined.states(None)
        except NotBatchable:
            return None
        deltas = None if states is None else restep_batch(self.unfold.subtraces[self.t], states[1:])
        return None if deltas is None else self.offset + deltas

    def weight(self, trace):
        """``log gamma_N(trace + x') - log gamma_{t-1}(trace)``, or None (see the class docstring)."""
        return self.site_weight(last_unfold(trace))

    def site_weight(self, site):
        """:meth:`weight` of the trace whose ``last_unfold`` is ``site``."""
        if site is None or not self._agrees(site):
            return None
        delta = restep(self.unfold, self.t, site[2].retval[-1])
        return None if delta is None else self.offset + delta


def _site_and_score(traces, i):
    """``(last_unfold(traces[i]), traces[i].score)``, without building a batched particle's trace."""
    if isinstance(traces, Joined):
        if i:
            return _site_and_score(traces.batch, i - 1)
        traces, i = [traces.first], 0
    return (traces.site(i) if isinstance(traces, BatchedGeneration) else last_unfold(traces[i])), _score(traces, i)


def _score(traces, i):
    """``traces[i].score``, without building a batched particle's trace."""
    if isinstance(traces, Joined):
        traces, i = ([traces.first], 0) if i == 0 else (traces.batch, i - 1)
    return traces.score(i) if isinstance(traces, BatchedGeneration) else traces[i].score


def ancestor_log_weights(steps, traces, log_weights, t, suffix, full=None, fast=True, full_score=None):
    """PGAS ancestor log-weights of the particles ``traces`` (generation ``t - 1``; particle 0 is
    the retained one) for the retained suffix ``suffix`` (its choices and observations from ``t``
    on; a dict, or a function that makes it when it is needed). ``full``: the retained
    trajectory as a trace of the last generation (``full_score``: its score, if it differs);
    with ``fast``, an ``Unfold`` program's particles are scored in O(1) steps
    (:class:`_UnfoldSplice`), and another program's particle with the retained prefix's
    addresses by updating ``full`` with the values where it differs: the same number as the
    general form. Returns (weights, spliced traces); a spliced trace is None where the fast
    ``Unfold`` path scored the particle."""
    weights, spliced = np.full(len(traces), _NEG_INF), [None] * len(traces)
    mine = _site_and_score(traces, 0) if fast and full is not None else None
    splice = _UnfoldSplice(*mine, full, t, full.score if full_score is None else full_score) \
        if mine is not None else None
    splice = splice if splice is not None and splice.ok else None
    # updating ``full`` where a particle differs needs ``full`` itself, not only its score
    by_difference = fast and full is not None and splice is None and full_score is None
    get_suffix = suffix if callable(suffix) else (lambda: suffix)
    particles = enumerate(traces)
    if splice is not None and isinstance(traces, (Joined, BatchedGeneration)):
        batched = splice.batch_weights(traces)
        if batched is not None:     # the others at once; the retained particle below
            rest = log_weights[1:]
            weights[1:] = np.where(rest == _NEG_INF, _NEG_INF, rest + batched)
            w = splice.site_weight(mine[0]) if log_weights[0] != _NEG_INF else None
            if w is not None or log_weights[0] == _NEG_INF:
                weights[0] = log_weights[0] + w if w is not None else _NEG_INF
                return weights, spliced
            particles = [(0, traces[0])]
    for l, trace in particles:
        if log_weights[l] == _NEG_INF:
            continue
        w = splice.weight(trace) if splice is not None else None
        if w is not None:
            weights[l] = log_weights[l] + w
            continue
        diff = _prefix_difference(trace, traces[0]) if by_difference else None
        if diff is None:
            w, new = _spliced_weight(steps, trace, get_suffix())
        else:
            result = full.update_detailed(diff, strict=False) if diff else None
            if result is not None and (result.fresh or result.unvisited or set(result.discard) - set(diff)):
                continue
            new = full if result is None else result.trace
            w = (0.0 if result is None else result.weight) + full.score - trace.score
        weights[l], spliced[l] = log_weights[l] + w, new
    return weights, spliced


def _suffix_maker(steps, reference, t):
    """A function making the retained suffix from generation ``t`` on (choices and observations)."""
    return lambda: {a: v for s in range(t, steps.n) for a, v in {**reference.new[s], **steps.observations(s)}.items()}


class SweepRecord:
    """What one conditional SMC sweep did, for views: per generation ``traces``,
    ``log_weights`` and ``ancestors`` (parent indices; ``None`` at generation 0) as in a
    :class:`~.filter.ParticleState`'s ``history``; ``ancestor_choice[t]``: the ancestor drawn
    for the retained particle (index 0) at ``t`` (0 = its own; always 0 without ancestor
    sampling); ``chosen``: the index of the returned particle in the last generation."""

    def __init__(self):
        self.history, self.ancestors, self.ancestor_choice, self.chosen = [], [None], [None], None

    @property
    def ess(self):
        return [effective_sample_size(w) for _, w in self.history]


def _multinomial(log_weights, n):
    """``resample(log_weights, n, "multinomial")`` with one ``exp`` pass for the weights."""
    weights = log_sum_exp_and_ess(log_weights)[2]
    return resample_weights(normalized_weights(log_weights) if weights is None else weights, n, "multinomial")


def _joined(first, rest):
    """The retained particle's trace, then the others (a batched generation or a list)."""
    return Joined(first, rest) if isinstance(rest, BatchedGeneration) else [first] + list(rest)


def conditional_smc(steps, n_particles, reference: Reference, ancestor_sampling, fast=True, record=None,
                    batch=True):
    """One conditional SMC sweep; returns (final traces, final log-weights, ancestor switches).
    ``record``: a :class:`SweepRecord` to fill. ``batch``: the other particles' generations run
    as one batch where that is the per-particle run (see :class:`~.filter.ParticleFilter`)."""
    n = steps.n
    batcher = Batcher(steps, n_particles - 1, enabled=batch)
    rest, increments = batcher.generation(None, None, 0)
    traces = _joined(reference.prefixes[0], rest)
    log_weights = np.r_[reference.log_weights[0], increments]
    # the retained trajectory as a trace of the last generation; after a switch scored by the
    # fast Unfold path, ``full`` keeps the old steps before t and ``full_score`` is its score
    full, full_score, on_reference, switches = reference.prefixes[-1], None, True, 0
    if record is not None:
        record.history.append((traces, log_weights))
    for t in range(1, n):
        ancestors = _multinomial(log_weights, n_particles - 1)
        a0 = 0
        if ancestor_sampling:
            suffix = _suffix_maker(steps, reference, t)
            weights, spliced = ancestor_log_weights(steps, traces, log_weights, t, suffix, full, fast, full_score)
            a0 = int(_multinomial(weights, 1)[0])
            if a0 != 0:
                on_reference, switches = False, switches + 1
                if spliced[a0] is not None:
                    full, full_score = spliced[a0], None
                else:
                    full_score = _score(traces, a0) + weights[a0] - log_weights[a0]
        if on_reference:
            rest, increments = batcher.generation(traces, ancestors, t)
            traces = _joined(reference.prefixes[t], rest)
            log_weights = np.r_[reference.log_weights[t], increments]
        else:       # the retained particle extends its new ancestor with its own choices
            traces, log_weights = batcher.generation(traces, np.r_[a0, ancestors], t, given=reference.new[t])
            if not isinstance(traces, BatchedGeneration):
                traces = list(traces)
        if record is not None:
            record.history.append((traces, log_weights))
            record.ancestors.append(np.r_[a0, ancestors])
            record.ancestor_choice.append(a0)
    return traces, log_weights, switches


class PG(Kernel):
    """Particle Gibbs: ``PG(steps, n_particles)`` is a :class:`Kernel` on traces of the last
    generation's program (``steps.model`` with ``steps.args(n - 1)`` and every observation).
    It leaves the posterior invariant; usable in ``cycle`` and ``run_chain``. ``last_log_z``
    is the log of the conditional sweep's mean weight product: not an evidence estimate."""

    ancestor_sampling = False

    def __init__(self, steps: Steps, n_particles: int, fast: bool = True, name=None, batch: bool = True):
        if not isinstance(steps, Steps):
            raise TypeError(f"{type(self).__name__} needs an il.Steps, got {type(steps).__name__}")
        if int(n_particles) < 2:
            raise ValueError(f"{type(self).__name__} needs at least 2 particles, got {n_particles!r}")
        super().__init__(name or f"{type(self).__name__.lower()}({steps.model.name}, {n_particles})")
        self.steps, self.n_particles, self.fast, self.batch = steps, int(n_particles), fast, batch
        self._cache = (None, None)   # (trace this kernel returned, its Reference)
        self.switches = 0
        self.last_log_z = None
        self.last_sweep = None       # the SweepRecord of the latest sweep

    def step(self, trace):
        cached, reference = self._cache
        if trace is not cached:
            reference = Reference(self.steps, trace)
        self.last_sweep = SweepRecord()
        traces, log_weights, switches = conditional_smc(self.steps, self.n_particles, reference,
                                                        self.ancestor_sampling, self.fast, self.last_sweep,
                                                        self.batch)
        self.switches += switches
        self.last_log_z = log_sum_exp(log_weights) - math.log(self.n_particles)
        k = int(resample(log_weights, 1, "multinomial")[0])
        new = traces[k]
        self.last_sweep.chosen = k
        # the next sweep starts from ``new``: its generations are this sweep's genealogy
        if k != 0 or switches:
            reference = Reference.from_sweep(self.steps, self.last_sweep, k)
        self._cache = (new, reference)
        return new, (k != 0 or switches > 0)


class PGAS(PG):
    """Particle Gibbs with ancestor sampling (see the module docstring); ``PGAS(steps, n_particles)``."""

    ancestor_sampling = True
