"""Batched SMC generations (issue 19, done-when 5): a generation of an ``Unfold`` model runs its
kernel once for all particles, and must be the per-particle run.

Two kinds of differential test. (1) Bitwise, same seed, 10 particles: torch draws fewer than
16 normal values one after the other, as 10 scalar draws would, so the batched run consumes
the random numbers the per-particle run does and everything must be identical (log-weights,
log Z, ESS, ancestors, traces). (2) Independent of the random numbers, any number of
particles: every particle of a batched run is re-extended per particle from its parent with
the batched run's own draws, and must get the same log-weight increment and trace.
"""

import math
import re

import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab import Unfold, gen, normal
from imcmc_lab.errors import TraceChangedError
from imcmc_lab.examples import sequential as sq
from imcmc_lab.inference.smc import extend

from reference.kalman import kalman


def _run(steps, n, batch, seed, **kw):
    torch.manual_seed(seed)
    pf = il.ParticleFilter(steps, n, batch=batch, **kw)
    return pf, pf.run()


def _assert_same_runs(a, b):
    assert a.log_ml == b.log_ml
    np.testing.assert_array_equal(a.log_weights, b.log_weights)
    assert a.ess == b.ess and a.resampled == b.resampled
    for x, y in zip(a.ancestors[1:], b.ancestors[1:]):
        np.testing.assert_array_equal(x, y)
    for i in (0, 4, 9):
        assert a.traces[i].score == b.traces[i].score
        assert dict(a.traces[i].get_choices().items()).keys() == dict(b.traces[i].get_choices().items()).keys()
        for address, value in b.traces[i].get_choices().items():
            assert torch.equal(torch.as_tensor(a.traces[i][address]), torch.as_tensor(value)), address


def test_batched_generations_equal_the_per_particle_run_bitwise():
    _, ys = sq.simulate_linear_gaussian(30)
    steps = sq.linear_gaussian_steps(ys)
    pf, batched = _run(steps, 10, True, seed=11)
    ref_pf, per_particle = _run(steps, 10, False, seed=11)
    assert pf.batched == [True] * 30 and pf.batch_note is None
    assert ref_pf.batched == [False] * 30
    assert any(batched.resampled)
    _assert_same_runs(batched, per_particle)


def test_every_batched_particle_is_its_per_particle_extension():
    """64 particles (torch draws them differently from 64 scalar draws): each particle of each
    generation, re-extended from its parent with its own drawn state, gets the same increment
    (1e-12) and the same trace; its score is what ``assess`` gives its choices."""
    _, ys = sq.simulate_linear_gaussian(12)
    steps = sq.linear_gaussian_steps(ys)
    pf, state = _run(steps, 64, True, seed=12)
    assert all(pf.batched) and any(state.resampled)
    for t, (traces, log_weights) in enumerate(state.history):
        previous = np.zeros(64) if t == 0 or state.resampled[t] else state.history[t - 1][1]
        for i in range(0, 64, 7):
            if t == 0:
                parent = None
            else:
                a = state.ancestors[t][i]
                parent = state.history[t - 1][0][int(a)]
            x = traces[i]["states", t, "x"]
            e = extend(steps, parent, t, {("states", t, "x"): x.clone()})
            assert e.log_weight == pytest.approx(log_weights[i] - previous[i], abs=1e-12)
            assert e.trace.score == pytest.approx(traces[i].score, abs=1e-12)
            assert e.trace.args == traces[i].args
            # what PGAS reads of a batched particle without building its trace
            assert traces.score(i) == traces[i].score
            before, site, view = traces.site(i)
            real = _unfold(traces[i])
            assert site == ("states",) and before == [] and len(view) == len(real) == t + 1
            assert view.args == real.args and torch.equal(view.retval[-1], real.retval[-1])
            assert sq.linear_gaussian.assess(traces[i].args, traces[i].get_choices()) == \
                pytest.approx(traces[i].score, abs=1e-12)
    # particles share the step traces of their common ancestors, as per-particle runs do
    a, b = _unfold(state.traces[0]).subtraces, _unfold(state.traces[1]).subtraces
    shared = [s for s, (p, q) in enumerate(zip(a, b)) if p is q]
    assert shared == list(range(len(shared)))


def _unfold(trace):
    from imcmc_lab.modeling.combinators import last_unfold
    return last_unfold(trace)[2]


def test_batched_log_z_is_unbiased_for_the_kalman_evidence():
    """Z-hat (not log Z-hat) is unbiased: over 40 batched runs (T = 20, 100 particles) the mean
    of Z-hat / Z is within 4 standard errors of 1 (its SD there is about 0.4)."""
    _, ys = sq.simulate_linear_gaussian(20, seed=3)
    steps, exact = sq.linear_gaussian_steps(ys), kalman(ys)[0]
    torch.manual_seed(13)
    ratios = []
    for _ in range(40):
        pf = il.ParticleFilter(steps, 100)
        ratios.append(math.exp(pf.run().log_ml - exact))
        assert all(pf.batched)
    ratios = np.array(ratios)
    se = ratios.std(ddof=1) / math.sqrt(len(ratios))
    assert abs(ratios.mean() - 1) < 4 * se, (ratios.mean(), se)


@gen
def branching_step(t, x_prev, a):
    """A Python branch on a particle's value: the batch cannot run it (vmap refuses)."""
    x = normal(a * x_prev, 1.0) @ "x"
    if x > 0:
        normal(x, 0.5) @ "y"
    else:
        normal(x, 0.5) @ "y"
    return x


@gen
def branching_chain(T, a):
    return Unfold(branching_step)(T, 0.0, a) @ "states"


def test_value_dependent_branch_falls_back_with_the_same_answers():
    """The first generation's batch draws x, then fails at ``if x > 0``; the per-particle run
    replays those draws, so with one seed the two filters are identical."""
    _, ys = sq.simulate_linear_gaussian(8)
    steps = il.Steps(branching_chain, args=lambda t: (t + 1, 0.9),
                     observations=lambda t: {("states", t, "y"): ys[t]}, n=8)
    pf, batched = _run(steps, 10, True, seed=14)
    _, per_particle = _run(steps, 10, False, seed=14)
    assert pf.batched == [False] * 8
    assert "data-dependent control flow" in pf.batch_note
    _assert_same_runs(batched, per_particle)
    assert batched.log_ml == pytest.approx(kalman(ys, a=0.9, sigma=1.0, noise=0.5)[0], abs=4.0)


@gen
def summing_step(t, x_prev, a):
    """``x_prev.sum()`` is one particle's sum under vmap (a leading particle dimension would
    sum over the particles)."""
    x = normal(a * x_prev.sum(), 1.0) @ "x"
    normal(x, 0.5) @ "y"
    return x


@gen
def summing_chain(T, a):
    return Unfold(summing_step)(T, torch.zeros((), dtype=torch.float64), a) @ "states"


def test_reductions_in_the_kernel_are_per_particle():
    _, ys = sq.simulate_linear_gaussian(10)
    steps = il.Steps(summing_chain, args=lambda t: (t + 1, 0.9),
                     observations=lambda t: {("states", t, "y"): ys[t]}, n=10)
    pf, batched = _run(steps, 10, True, seed=15)
    _, per_particle = _run(steps, 10, False, seed=15)
    assert all(pf.batched)
    _assert_same_runs(batched, per_particle)


@gen
def with_parameter(T):
    a = normal(0.5, 0.1) @ "a"          # differs between particles: not batched
    return Unfold(sq.lg_step)(T, 0.0, a, 1.0, 0.5) @ "states"


@gen
def after_the_call(T):
    states = Unfold(sq.lg_step)(T, 0.0, 0.9, 1.0, 0.5) @ "states"
    return states


@pytest.mark.parametrize("model, note", [
    (with_parameter, "draws \\('a',\\) before its Unfold"),
    (after_the_call, "does not end in its only return"),
    (sq.hmm, "categorical at \\('z',\\) is not batchable"),
], ids=["choice-before-unfold", "code-after-call", "distribution-not-batchable"])
def test_models_the_batch_cannot_prove_run_per_particle(model, note):
    if model is sq.hmm:
        _, ys = sq.simulate_hmm(6)
        steps = sq.hmm_steps(ys)
    else:
        _, ys = sq.simulate_linear_gaussian(6)
        steps = il.Steps(model, args=lambda t: (t + 1,), observations=lambda t: {("states", t, "y"): ys[t]}, n=6)
    pf, batched = _run(steps, 10, True, seed=16)
    _, per_particle = _run(steps, 10, False, seed=16)
    assert pf.batched == [False] * 6
    assert re.search(note, pf.batch_note), pf.batch_note
    _assert_same_runs(batched, per_particle)


def test_batched_particles_are_ordinary_traces():
    """Read, update, rejuvenate; the batch's mean equals the mean over built traces; changing a
    handed-out value in place is refused on the next update, and the batch does not see it."""
    _, ys = sq.simulate_linear_gaussian(6)
    steps = sq.linear_gaussian_steps(ys)
    torch.manual_seed(17)
    state = il.smc(steps, 40)
    address = ("states", 5, "x")
    by_traces = sum(w * float(tr[address]) for w, tr in zip(state.weights, state.traces))
    assert float(state.mean(address)) == pytest.approx(by_traces, abs=1e-12)
    trace = state.traces[3]
    new, weight, _ = trace.update({address: 0.25})
    assert float(new[address]) == 0.25 and math.isfinite(weight)
    assert new.score == pytest.approx(sq.linear_gaussian.assess(new.args, new.get_choices()))
    value = trace[address]
    value += 1.0
    with pytest.raises(TraceChangedError):
        trace.update({("states", 4, "x"): 0.0})
    assert float(state.traces.values(address)[3]) == pytest.approx(float(value) - 1.0)

    # a rejuvenation move after each resampling: the next generation batches from real traces
    torch.manual_seed(18)
    pf = il.ParticleFilter(steps, 20, ess_threshold=1.0,
                           rejuvenate=il.MH(il.select(("states", 0, "x"))))
    pf.run()
    assert all(pf.batched), pf.batch_note


def test_pgas_reads_the_next_reference_from_its_sweep():
    """The reference of the returned trace, read from the sweep's genealogy, is what replaying
    that trace gives: the same choices per generation and incremental weights (1e-12); and
    batched PGAS chains equal per-particle ones from one seed (10 particles)."""
    from imcmc_lab.inference.smc.conditional import Reference
    _, ys = sq.simulate_linear_gaussian(12)
    steps = sq.linear_gaussian_steps(ys)
    torch.manual_seed(19)
    start = il.smc(steps, 10, batch=False).sample()
    chains = {}
    for batch in (True, False):
        torch.manual_seed(20)
        kernel, trace, seen = il.PGAS(steps, 10, batch=batch), start, []
        for _ in range(6):
            trace, _ = kernel.step(trace)
            seen.append([float(trace["states", t, "x"]) for t in range(12)])
            read, replayed = kernel._cache[1], Reference(steps, trace)
            assert kernel._cache[0] is trace
            for t in range(12):
                assert read.new[t].keys() == replayed.new[t].keys()
                assert all(torch.equal(read.new[t][a], replayed.new[t][a]) for a in read.new[t])
                assert read.log_weights[t] == pytest.approx(replayed.log_weights[t], abs=1e-12)
                assert read.prefixes[t].score == pytest.approx(replayed.prefixes[t].score, abs=1e-12)
        chains[batch] = seen
    assert chains[True] == chains[False]


@gen
def vector_mean_step(t, x_prev):
    """A shared 10-vector as a scalar normal's mean: invalid for one particle; with 10
    particles it must not be read as one mean per particle."""
    x = normal(torch.zeros(10, dtype=torch.float64), 1.0) @ "x"
    normal(x, 0.5) @ "y"
    return x


@gen
def vector_mean_chain(T):
    return Unfold(vector_mean_step)(T, 0.0) @ "states"


def test_a_shared_vector_parameter_is_not_taken_for_a_batch():
    from imcmc_lab.errors import DistributionError
    steps = il.Steps(vector_mean_chain, args=lambda t: (t + 1,), observations=lambda t: {("states", t, "y"): 0.1},
                     n=3)
    for batch in (False, True):
        with pytest.raises(DistributionError, match=r"mean must be a scalar"):
            il.smc(steps, 10, batch=batch)
