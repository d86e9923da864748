"""Sequential Monte Carlo over traces: a particle filter with resampling and rejuvenation.

Particles are immutable traces, so forking one (resampling) shares a reference and
extending one is an incremental ``update`` (see :mod:`.steps`). The log marginal
likelihood estimate accumulates ``lse(prev + inc) - lse(prev)`` per generation, which is
right whether or not the previous generation was resampled.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...core.address import format_address, normalize_address
from ...core.values import values_equal
from ...errors import ConstraintError
from ..kernels import as_kernel
from .resampling import log_sum_exp_and_ess, normalized_weights, resample, resample_weights
from .generations import Batcher, BatchedGeneration
from .steps import Steps

__all__ = ["ParticleState", "ParticleFilter", "smc"]


class ParticleState:
    """The particles after some generations.

    ``traces`` and ``log_weights`` (unnormalised) of the current generation; ``log_ml``:
    the log marginal likelihood estimate of the observations so far; per generation
    ``ess`` (after reweighting), ``resampled`` (whether the particles were resampled
    before it) and ``ancestors`` (for each particle, the index of its parent in the
    previous generation: ``None`` at generation 0). ``history``: per generation, the
    ``(traces, log_weights)`` it ended with (references to immutable traces: cheap), which
    the particle view (``imcmc_lab.widgets.ParticleView``) draws.
    """

    def __init__(self, traces, log_weights):
        # a batched generation builds a particle's trace when it is read (see .generations)
        self.traces = traces if isinstance(traces, BatchedGeneration) else list(traces)
        self.log_weights = np.asarray(log_weights, dtype=np.float64)
        # the log-weights' log-sum-exp and normalised weights, kept for the next generation
        self._log_total, ess, self._normalized = log_sum_exp_and_ess(self.log_weights)
        self.log_ml = self._log_total - math.log(len(self.traces))
        self.ess = [ess]
        self.ancestors = [None]
        self.resampled = [False]
        self.history = [(self.traces, self.log_weights)]

    @property
    def generation(self) -> int:
        """Index of the current generation."""
        return len(self.ess) - 1

    @property
    def weights(self) -> np.ndarray:
        """Normalised weights of the current particles."""
        return normalized_weights(self.log_weights)

    def mean(self, what):
        """Weighted mean of ``trace[address]`` or of ``what(trace)`` over the particles."""
        batch = None
        if not callable(what) and isinstance(self.traces, BatchedGeneration):
            batch = self.traces.values(normalize_address(what))     # the batch's own storage
        if batch is not None:
            values = batch
        else:
            fn = what if callable(what) else (lambda tr, a=normalize_address(what): tr[a])
            values = torch.stack([torch.as_tensor(fn(tr), dtype=torch.float64) for tr in self.traces])
        w = torch.as_tensor(self.weights)
        return (values * w.reshape((-1,) + (1,) * (values.ndim - 1))).sum(0)

    def sample(self):
        """One trace drawn in proportion to the weights (an approximate posterior sample)."""
        return self.traces[int(resample(self.log_weights, 1, "multinomial")[0])]

    def __repr__(self):
        return (f"<ParticleState: {len(self.traces)} particles, generation {self.generation}, "
                f"log_ml {self.log_ml:.4f}, ess {self.ess[-1]:.1f}>")


class ParticleFilter:
    """``ParticleFilter(steps, n_particles, ...)``: ``.step()`` runs one generation,
    ``.run()`` the rest; ``.state`` is the :class:`ParticleState` (None before the first).

    Before each generation after the first the particles are resampled (by ``resample``)
    when their ESS is below ``ess_threshold * n_particles`` (1.0: always; 0: never); after a
    resampling, each takes ``n_rejuvenate`` steps of the kernel ``rejuvenate`` (which must
    leave the current target invariant and never change an observed value).

    ``batch`` (default True): run a generation of an ``Unfold`` state-space model as one
    batched kernel run where that is provably the per-particle run (:mod:`.batched`);
    ``batched`` lists, per generation, whether it did, and ``batch_note`` says why not.
    """

    def __init__(self, steps: Steps, n_particles: int, resample="systematic", ess_threshold=0.5,
                 rejuvenate=None, n_rejuvenate=1, batch=True):
        if not isinstance(steps, Steps):
            raise TypeError(f"ParticleFilter needs an il.Steps(model, args=..., observations=..., n=...), "
                            f"got {type(steps).__name__}")
        if int(n_particles) < 1:
            raise ValueError(f"n_particles must be positive, got {n_particles!r}")
        self.steps, self.n_particles = steps, int(n_particles)
        self.method, self.ess_threshold = resample, float(ess_threshold)
        self.rejuvenate = as_kernel(rejuvenate) if rejuvenate is not None else None
        self.n_rejuvenate = int(n_rejuvenate)
        self.state = None
        self._batcher = Batcher(steps, self.n_particles, enabled=batch)

    @property
    def batched(self) -> list:
        """Per generation so far: whether it ran as one batch."""
        return self._batcher.batched

    @property
    def batch_note(self):
        """Why generations ran per particle (None if every one so far was batched)."""
        return self._batcher.note

    @property
    def done(self) -> bool:
        return self.state is not None and self.state.generation == self.steps.n - 1

    def step(self) -> ParticleState:
        """Run the next generation; the state."""
        if self.done:
            raise RuntimeError(f"the particle filter has run all {self.steps.n} generations")
        if self.state is None:
            self.state = ParticleState(*self._batcher.generation(None, None, 0))
            return self.state
        state, t = self.state, self.state.generation + 1
        previous, previous_total = state.log_weights, state._log_total
        parents, ancestors, index = state.traces, None, None
        if state.ess[-1] < self.ess_threshold * self.n_particles:
            weights = state._normalized if state._normalized is not None else normalized_weights(previous)
            ancestors = index = resample_weights(weights, self.n_particles, self.method)
            previous, previous_total = np.zeros(self.n_particles), math.log(self.n_particles)
            if self.rejuvenate is not None:
                parents, index = [self._rejuvenated(parents[a], t - 1) for a in ancestors], None
        state.traces, increments = self._batcher.generation(parents, index, t)
        state.log_weights = previous + increments
        state._log_total, ess, state._normalized = log_sum_exp_and_ess(state.log_weights)
        state.log_ml += state._log_total - previous_total
        state.ess.append(ess)
        state.ancestors.append(ancestors if ancestors is not None else np.arange(self.n_particles))
        state.resampled.append(ancestors is not None)
        state.history.append((state.traces, state.log_weights))
        return state

    def run(self) -> ParticleState:
        """Run every remaining generation; the final state."""
        while not self.done:
            self.step()
        return self.state

    def _rejuvenated(self, trace, t):
        observed = self.steps.observed_until(t)
        for _ in range(self.n_rejuvenate):
            new, _ = self.rejuvenate(trace)
            if new is not trace:
                _check_observed_kept(trace, new, observed, self.rejuvenate.name)
            trace = new
        return trace


def _check_observed_kept(old, new, observed, name):
    for address in observed:
        before, after = old.choice_record(address), new.choice_record(address)
        if before is after:
            continue
        if after is None or not values_equal(before.value, after.value):
            raise ConstraintError(
                f"the rejuvenation kernel {name} changed the observed address "
                f"{format_address(address)}; a rejuvenation move may only change unobserved "
                f"choices (select or propose only latent addresses).")


def smc(steps: Steps, n_particles: int, resample="systematic", ess_threshold=0.5, rejuvenate=None,
        n_rejuvenate=1, batch=True) -> ParticleState:
    """Run a particle filter over all generations of ``steps``; the final :class:`ParticleState`
    (``.log_ml`` estimates the log marginal likelihood of all the observations). ``batch``: see
    :class:`ParticleFilter`."""
    return ParticleFilter(steps, n_particles, resample, ess_threshold, rejuvenate, n_rejuvenate, batch).run()
