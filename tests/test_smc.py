"""SMC on traces (issue 19): resampling, extension weights, particle filters against exact answers.

Exact answers: the two programs of "Particle Gibbs with Ancestor Sampling for Probabilistic
Programs" (Sec. 4.1), computed independently (issue 19); Kalman filter and forward-backward in
``tests/reference/kalman.py``.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats

import imcmc_lab as il
from imcmc_lab.errors import ConstraintError
from imcmc_lab.examples import sequential as sq
from imcmc_lab.inference.smc import extend

from reference.kalman import forward_backward, kalman

BRANCH_P_R, BRANCH_LOG_ML = 0.4148202939, -1.0812494
GEOM_MEAN, GEOM_LOG_ML = 2.3556164592, -2.1010890


# --- resampling --------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["multinomial", "systematic", "stratified", "residual"])
def test_resampling_counts_pass_chi_square(method):
    """1e5 draws from 6 weights: the counts' chi-square statistic (5 degrees of freedom) is below
    its 0.999 quantile (systematic/stratified/residual have far less variance than multinomial,
    so their statistic is small; a wrong scheme is off by thousands)."""
    torch.manual_seed(0)
    w = np.array([0.05, 0.3, 0.01, 0.24, 0.15, 0.25])
    n = 100_000
    counts = np.bincount(il.resample(np.log(w), n, method), minlength=len(w))
    assert counts.sum() == n
    chi2 = ((counts - n * w) ** 2 / (n * w)).sum()
    assert chi2 < stats.chi2.ppf(0.999, len(w) - 1), (method, counts)


@pytest.mark.parametrize("method", ["systematic", "residual"])
def test_low_variance_schemes_keep_floor_copies(method):
    """Systematic and residual resampling give every particle at least floor(n W) copies."""
    torch.manual_seed(1)
    for trial in range(200):
        w = torch.distributions.Dirichlet(torch.ones(7, dtype=torch.float64)).sample().numpy()
        n = 7 + trial % 13
        counts = np.bincount(il.resample(np.log(w), n, method), minlength=7)
        assert (counts >= np.floor(n * w)).all(), (w, counts)


def test_resample_rejects_impossible_weights():
    with pytest.raises(ValueError, match="all 3 particles have weight zero"):
        il.resample([-math.inf] * 3, 3)
    with pytest.raises(ValueError, match="unknown resampling method 'sorted'"):
        il.resample([0.0, 0.0], 2, "sorted")


# --- extension ---------------------------------------------------------------------------
def test_extension_weight_is_the_observation_density():
    """Extending by one generation weighs by the new observation's log-density alone (the fresh
    state's prior density leaves the weight), to 1e-12."""
    torch.manual_seed(2)
    xs, ys = sq.simulate_linear_gaussian(6)
    steps = sq.linear_gaussian_steps(ys)
    e = extend(steps, None, 0)
    for t in range(1, 6):
        e = extend(steps, e.trace, t)
        x = float(e.trace["states", t, "x"])
        expected = -0.5 * math.log(2 * math.pi * 0.25) - (ys[t] - x) ** 2 / (2 * 0.25)
        assert e.fresh == [("states", t, "x")]
        assert abs(e.log_weight - expected) < 1e-12


def test_generation_that_discards_choices_is_an_error():
    """Observing an address an earlier generation sampled would discard its value: an error
    naming it."""
    steps = il.Steps(sq.branching, [((True,), {}), ((True,), {"y": 0.1})])
    with pytest.raises(ConstraintError, match="would discard the choices at 'y'"):
        il.smc(steps, 5)


def test_rejuvenation_that_changes_an_observation_raises():
    steps = sq.branching_steps()
    with pytest.raises(ConstraintError, match="changed the observed address 'y'"):
        il.smc(il.Steps(sq.branching, [((True,), {"y": 0.1}), ((True,), {})]), 20, ess_threshold=1.0,
               rejuvenate=il.MH(il.select("y")))
    torch.manual_seed(3)
    state = il.smc(steps, 20, ess_threshold=1.0, rejuvenate=il.MH(il.select("r")))
    assert state.resampled == [False, True]


# --- the paper's programs, 20,000 particles ------------------------------------------------
def _weighted_se(state, fn):
    w = state.weights
    f = np.array([float(fn(tr)) for tr in state.traces])
    mean = float(w @ f)
    return mean, float(np.sqrt((w ** 2 * (f - mean) ** 2).sum()))


@pytest.mark.parametrize("steps, fn, exact, exact_log_ml", [
    (sq.branching_steps(0.1), lambda tr: tr["r"], BRANCH_P_R, BRANCH_LOG_ML),
    (sq.geometric_steps(3), lambda tr: tr[()], GEOM_MEAN, GEOM_LOG_ML),
], ids=["branching", "geometric"])
def test_micro_programs_with_20000_particles(steps, fn, exact, exact_log_ml):
    """Posterior expectation within 4 importance-sampling SEs (SE about 0.005 and 0.015), and
    log Z within 0.02 (its SE is about 0.007 at 20,000 particles)."""
    torch.manual_seed(4)
    state = il.smc(steps, 20_000)
    mean, se = _weighted_se(state, fn)
    assert abs(mean - exact) < 4 * se, (mean, se)
    assert abs(state.log_ml - exact_log_ml) < 0.02


# --- state-space models ------------------------------------------------------------------
def test_linear_gaussian_log_z_matches_kalman():
    """T = 50, 200 particles: over 10 repeated runs (seeds 100-109) log Z - Kalman had mean
    mean -0.52 and standard deviation 0.82 (log Z-hat is biased low by about var/2); one run
    must be within 4 SD = 3.3 of the Kalman value."""
    xs, ys = sq.simulate_linear_gaussian(50)
    exact = kalman(ys)[0]
    torch.manual_seed(5)
    state = il.smc(sq.linear_gaussian_steps(ys), 200)
    assert abs(state.log_ml - exact) < 4 * 0.82, (state.log_ml, exact)
    assert len(state.ess) == 50 and any(state.resampled)


def test_hmm_log_z_and_filtering_match_forward_backward():
    """16-step HMM, 2,000 particles: log Z within 0.1 (SE about 0.02) and the final filtered
    state probabilities within 4 SEs (SE of a probability <= 0.5/sqrt(ESS))."""
    zs, ys = sq.simulate_hmm(16)
    p = sq.HMM_PARAMETERS
    exact_log_ml, smoothed = forward_backward(ys, p["initial"], p["transition"], p["emission"])
    torch.manual_seed(6)
    state = il.smc(sq.hmm_steps(ys), 2000)
    assert abs(state.log_ml - exact_log_ml) < 0.1
    for k in range(3):
        est = float(state.mean(lambda tr: float(tr["states", 15, "z"] == k)))
        se = math.sqrt(smoothed[-1, k] * (1 - smoothed[-1, k]) / state.ess[-1])
        assert abs(est - smoothed[-1, k]) < 4 * se + 1e-3, (k, est, smoothed[-1, k])


def test_particle_filter_steps_one_generation_at_a_time():
    xs, ys = sq.simulate_linear_gaussian(4)
    torch.manual_seed(7)
    pf = il.ParticleFilter(sq.linear_gaussian_steps(ys), 30)
    state = pf.step()
    assert state.generation == 0 and len(state.traces) == 30
    state = pf.run()
    assert state.generation == 3 and pf.done and len(state.ancestors) == 4
    assert state.sample()["states", 3, "y"] == pytest.approx(ys[3])
    with pytest.raises(RuntimeError, match="all 4 generations"):
        pf.step()
