"""Particle Gibbs and PGAS kernels (issue 19) against exact answers, and PGAS's mixing advantage.

Standard errors are batch means (``tests/mcmc_stats.py``, 25 batches); tolerances 4 SE.
"""

import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples import sequential as sq
from imcmc_lab.inference.smc.conditional import Reference, ancestor_log_weights
from imcmc_lab.inference.smc.resampling import normalized_weights

from mcmc_stats import assert_close_to
from reference.kalman import kalman, lds_parameter_posterior_means

BRANCH_P_R, GEOM_MEAN = 0.4148202939, 2.3556164592


@pytest.mark.parametrize("kernel", [il.PG, il.PGAS], ids=["PG", "PGAS"])
@pytest.mark.parametrize("steps, fn, exact", [
    (sq.branching_steps(0.1), lambda tr: float(tr["r"]), BRANCH_P_R),
    (sq.geometric_steps(3), lambda tr: float(tr[()]), GEOM_MEAN),
], ids=["branching", "geometric"])
def test_particle_gibbs_on_the_papers_programs(kernel, steps, fn, exact):
    """10 particles, 1,500 sweeps: the chain mean is within 4 batch-means SEs (SE about 0.01 for
    P(r | y), 0.03 for E[geom | y])."""
    torch.manual_seed(11)
    start = il.smc(steps, 10).sample()
    chain = il.run_chain(kernel(steps, 10), start, 1500, record={"f": fn}, progress=False)
    assert_close_to([s["f"] for s in chain.samples[0]], exact, label=kernel.__name__)


def _lgss():
    xs, ys = sq.simulate_linear_gaussian(50)
    return sq.linear_gaussian_steps(ys), kalman(ys)


def test_pgas_smoothed_means_and_update_rates_on_linear_gaussian_model():
    """T = 50, 10 particles. PGAS, 80 sweeps: the smoothed means at t = 1, T/2, T (Python steps 0,
    24, 49) within 4 batch-means SEs of the Kalman smoother's (SE about 0.1), and the first state
    changes in at least 10% of sweeps (it changed in about 70%); PG, 40 sweeps: the first state
    changes in at most 2% (path degeneracy: its lineage coalesces onto the retained one)."""
    steps, (_, smoothed, _) = _lgss()
    torch.manual_seed(12)
    start = il.smc(steps, 10).sample()
    record = {f"x{t}": ("states", t, "x") for t in (0, 24, 49)}
    chain = il.run_chain(il.PGAS(steps, 10), start, 80, record=record, progress=False)
    for t in (0, 24, 49):
        assert_close_to([float(s[f"x{t}"]) for s in chain.samples[0]], smoothed[t], label=f"x{t}")
    first = np.array([float(s["x0"]) for s in chain.samples[0]])
    assert np.mean(first[1:] != first[:-1]) >= 0.10
    pg = il.run_chain(il.PG(steps, 10), start, 40, record=record, progress=False)
    first = np.array([float(s["x0"]) for s in pg.samples[0]])
    assert np.mean(first[1:] != first[:-1]) <= 0.02


def test_fast_ancestor_weights_agree_with_the_general_form():
    """Scoring a particle by updating the retained trajectory where it differs gives the same
    normalised ancestor weights as splicing the suffix onto it, to 1e-9."""
    steps, _ = _lgss()
    torch.manual_seed(13)
    reference = Reference(steps, il.smc(steps, 10).sample())
    pf = il.ParticleFilter(il.Steps(steps.model, args=steps.args, observations=steps.observations, n=30), 8)
    pf.step()
    for t in range(1, 6):
        state = pf.step()
        traces = [reference.prefixes[t - 1]] + state.traces[1:]
        suffix = {a: v for s in range(t, steps.n) for a, v in {**reference.new[s], **steps.observations(s)}.items()}
        lw = np.r_[reference.log_weights[t - 1], state.log_weights[1:]]
        fast, _ = ancestor_log_weights(steps, traces, lw, t, suffix, reference.prefixes[-1], fast=True)
        general, _ = ancestor_log_weights(steps, traces, lw, t, suffix, None, fast=False)
        np.testing.assert_allclose(normalized_weights(fast), normalized_weights(general), atol=1e-9, rtol=0)


def test_pgas_in_a_cycle_with_mh_on_a_parameter():
    """PGAS composes with MH in ``cycle`` and ``run_chain`` (branching program: MH on r)."""
    steps = sq.branching_steps()
    torch.manual_seed(14)
    kernel = il.cycle(il.PGAS(steps, 5), il.MH(il.select("r")))
    chain = il.run_chain(kernel, il.smc(steps, 5).sample(), 50, record=["r"], progress=False)
    assert len(chain.samples[0]) == 50
    assert set(chain.acceptance) == {"pgas(branching, 5)", "mh(select('r'))"}


def test_pgas_cycled_with_mh_recovers_lds_parameter_posterior_means():
    """Done-when 4 of issue 19: ``cycle(PGAS, MH on omega, MH on q)`` on a small LDS (2-D state,
    D = 2, T = 6, r = 0.01; the paper's priors) gets the posterior means of ``omega = g pi / T`` and
    ``q`` within 4 batch-means SEs of a 200 x 200 grid quadrature over (g, q) with a Kalman
    likelihood per grid point (``tests/reference/kalman.py``). The data move q's mean to 0.084
    from the prior's 0.1, about 6 SEs (SE about 0.0025), so a kernel that ignored them would fail."""
    T, r = 6, 0.01
    C, _, ys = sq.simulate_lds(D=2, T=T, q=0.1, r=r, seed=3)
    omega_mean, q_mean = lds_parameter_posterior_means(np.stack([y.numpy() for y in ys]), C.numpy(), r, T,
                                                       n_grid=200)
    steps = sq.lds_steps(ys, C, r=r)
    torch.manual_seed(15)
    kernel = il.cycle(il.PGAS(steps, 5), il.MH(il.select("g")), il.MH(il.select("q")))
    chain = il.run_chain(kernel, il.smc(steps, 5).sample(), 400, record=["g", "q"], progress=False)
    omegas = [float(s["g"]) * np.pi / T for s in chain.samples[0]]
    assert_close_to(omegas, omega_mean, label="omega")
    assert_close_to([float(s["q"]) for s in chain.samples[0]], q_mean, label="q")
