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
    """Scoring a particle by re-running only step t of the retained trajectory's ``Unfold`` from
    the particle's last state gives the same normalised ancestor weights as splicing the suffix
    onto it, to 1e-9; and not only after normalisation: each weight is ``log gamma_N(x^l + x') -
    log gamma_{t-1}(x^l)`` itself, as PGAS carries ``log gamma_N`` of the new retained trajectory
    forward from it when it switches to a particle the fast path scored. The particles are a
    filter's generation t - 1, so most of them have a finite ancestor weight."""
    steps, _ = _lgss()
    torch.manual_seed(13)
    reference = Reference(steps, il.smc(steps, 10).sample())
    pf = il.ParticleFilter(il.Steps(steps.model, args=steps.args, observations=steps.observations, n=30), 8)
    for t in range(1, 6):
        state = pf.step()                  # generation t - 1
        traces = [reference.prefixes[t - 1]] + state.traces[1:]
        suffix = {a: v for s in range(t, steps.n) for a, v in {**reference.new[s], **steps.observations(s)}.items()}
        lw = np.r_[reference.log_weights[t - 1], state.log_weights[1:]]
        fast, spliced = ancestor_log_weights(steps, traces, lw, t, suffix, reference.prefixes[-1], fast=True)
        general, spliced_general = ancestor_log_weights(steps, traces, lw, t, suffix, None, fast=False)
        assert np.isfinite(fast).all() and all(s is None for s in spliced)
        np.testing.assert_allclose(normalized_weights(fast), normalized_weights(general), atol=1e-9, rtol=0)
        np.testing.assert_allclose(fast, general, atol=1e-9, rtol=0)
        np.testing.assert_allclose([tr.score + w - w0 for tr, w, w0 in zip(traces, fast, lw)],
                                   [s.score for s in spliced_general], atol=1e-9, rtol=0)


def _lds_small():
    C, _, ys = sq.simulate_lds(D=2, T=8, q=0.1, r=0.01, seed=3)
    return sq.lds_steps(ys, C, r=0.01)


@pytest.mark.parametrize("make_steps", [
    lambda: sq.linear_gaussian_steps(sq.simulate_linear_gaussian(20)[1]),
    lambda: sq.hmm_steps(sq.simulate_hmm(12)[1]),
    _lds_small,
], ids=["linear-gaussian", "hmm", "lds"])
def test_pgas_fast_path_gives_the_general_forms_chain(make_steps):
    """Whole PGAS sweeps with the fast ancestor weights (an ``Unfold``'s step re-run from each
    particle's last state, and the retained trajectory's score carried across switches) draw the
    same chain as with every weight computed by splicing with ``update``, from the same seed:
    the same values, scores and number of ancestor switches. In the LDS, particles whose
    parameters (g, q) are not the retained one's take the general form inside a fast sweep."""
    steps = make_steps()
    torch.manual_seed(3)
    start = il.smc(steps, 6).sample()
    chains = {}
    for fast in (True, False):
        torch.manual_seed(5)
        kernel, trace, seen = il.PGAS(steps, 6, fast=fast), start, []
        for _ in range(8):
            trace, _ = kernel.step(trace)
            seen.append(({a: r.value for a, r in trace.flat_records().items()}, trace.score))
        chains[fast] = seen, kernel.switches
    (fast_chain, fast_switches), (general_chain, general_switches) = chains[True], chains[False]
    assert fast_switches == general_switches > 0
    for (values, score), (values_general, score_general) in zip(fast_chain, general_chain):
        assert values.keys() == values_general.keys()
        assert all(torch.equal(torch.as_tensor(values[a]), torch.as_tensor(values_general[a])) for a in values)
        assert score == pytest.approx(score_general, abs=1e-9)


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
