"""The infinite Gaussian mixture of paper Fig. 1 (imcmc_lab.examples.mixture).

* every move passes Algorithm 4 (support, dimension, involution);
* with no data every move leaves the prior invariant: chains started at exact
  prior draws are still exact prior draws after some moves, so the number of
  clusters follows 1 + Poisson(1) (chi-square) and the first mean follows
  normal(0, 10) (Kolmogorov-Smirnov);
* on three well-separated clusters the chain finds k = 3 and the means.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

import imcmc_lab as il
from imcmc_lab.examples import mixture as m

MOVES = {
    "split/merge": (m.split_merge_aux, (), m.split_merge),
    "swap": (m.swap_aux, (), m.swap_last),
    "birth/death": (m.birth_death_aux, (), m.birth_death),
    "move cluster": (m.move_cluster_aux, (0.5, 0.3), m.move_cluster),
    "move weights": (m.move_weights_aux, (0.3,), m.move_weights),
}
K_CELLS = [1, 2, 3]            # and a last cell for k >= 4


def _prior_k_probs():
    probs = [stats.poisson.pmf(k - 1, 1.0) for k in K_CELLS]
    return probs + [1.0 - sum(probs)]


def _k_cell(k):
    return min(k, 4) - 1


@pytest.mark.parametrize("name", list(MOVES))
def test_every_move_is_an_involution(name):
    q, q_args, f = MOVES[name]
    data = m.synthetic_data(30, seed=1)
    report = il.check_involution(m.gmm, (len(data),), q, f, trials=40, q_args=q_args,
                                 observations={"x": data}, seed=2)
    assert report.trials == 40


def test_split_merge_reduced_jacobian_is_at_most_6x6_for_any_k():
    report = il.check_involution(m.gmm, (0,), m.split_merge_aux, m.split_merge, trials=60, seed=4)
    # 6x6, or 5x5 when the split or merged cluster is the last (its weight is 1 - sum)
    assert set(report.jacobian_sizes) <= {(5, 5), (6, 6)}
    assert max(report.moves) and sum(report.moves.values()) == 60


def _end_states(kernel, n_chains, steps, seed):
    torch.manual_seed(seed)
    ks, mu1 = [], []
    for _ in range(n_chains):
        trace = m.gmm.simulate(0)
        for _ in range(steps):
            trace, _ = kernel(trace)
        ks.append(trace["k"])
        mu1.append(float(trace["mu", 1]))
    return ks, mu1


@pytest.mark.parametrize("name, n_chains, steps, seed", [
    ("split/merge", 1200, 3, 21),
    ("birth/death", 1200, 3, 22),
    ("full sweep", 400, 1, 23),
])
def test_moves_leave_the_prior_invariant(name, n_chains, steps, seed):
    # Independent chains from exact prior draws: their end states are exact prior draws
    # if the kernel is invariant, so the p-values below are uniform (threshold 1e-3).
    if name == "full sweep":
        kernel = m.mixture_kernel()
    else:
        q, q_args, f = MOVES[name]
        kernel = il.InvolutiveKernel(q, q_args, f)
    ks, mu1 = _end_states(kernel, n_chains, steps, seed)
    counts = [0] * 4
    for k in ks:
        counts[_k_cell(k)] += 1
    expected = [n_chains * p for p in _prior_k_probs()]
    assert min(expected) > 20
    p_k = stats.chisquare(counts, expected).pvalue
    assert p_k > 1e-3, f"{name}: k counts {counts}, expected {[round(e) for e in expected]}"
    p_mu = stats.kstest(mu1, stats.norm(0.0, 10.0).cdf).pvalue
    assert p_mu > 1e-3, f"{name}: mu_1 is not normal(0, 10) (KS p = {p_mu:.2g})"
    # the moves were really made
    if name != "full sweep":
        assert kernel.accepted > 0.1 * kernel.proposed


def test_three_separated_clusters_are_found():
    torch.manual_seed(5)
    data = m.synthetic_data(150, means=(-6.0, 0.0, 6.0), seed=5)
    chain = il.run_chain(m.mixture_kernel(), m.initial_trace(data), 250, record={"k": "k"},
                         progress=False)
    ks = chain.values("k")[100:]
    share3 = sum(1 for k in ks if k == 3) / len(ks)
    assert share3 > 0.8, f"P(k = 3 | data) estimated as {share3:.2f}"
    rows = m.cluster_summary(chain.traces[0])
    assert len(rows) == 3
    for (weight, mean, var), true_mean in zip(rows, (-6.0, 0.0, 6.0)):
        # each cluster has 50 points of unit variance: the posterior sd of its mean is ~0.15
        assert abs(mean - true_mean) < 0.6 and 0.2 < weight < 0.5 and 0.3 < var < 3.0
    rates = chain.acceptance_rates()
    assert rates["swap"] == 1.0                      # relabelling never changes the density
    assert 0 < rates["move cluster"] < 1


def test_swap_is_always_accepted_with_unit_jacobian():
    torch.manual_seed(6)
    data = m.synthetic_data(40, seed=6)
    trace = m.initial_trace(data, k=4)
    for _ in range(10):
        record = il.involutive_move(trace, m.swap_aux, (), m.swap_last)
        assert record.accepted and record.logabsdet == pytest.approx(0.0, abs=1e-12)
        assert record.log_alpha == pytest.approx(0.0, abs=1e-9)
        j = record.aux_in["cluster"]
        assert float(record.model_out["mu", 4]) == float(trace["mu", j])
        assert float(record.model_out["weights"][j - 1]) == pytest.approx(float(trace["weights"][3]))
        trace = record.trace
    assert math.isclose(float(trace["weights"].sum()), 1.0, rel_tol=1e-12)


def test_headless_demo_prints_the_summary(capsys):
    from imcmc_lab.examples.__main__ import main

    main(["--sweeps", "40", "--points", "60", "--no-progress"])
    out = capsys.readouterr().out
    assert "split/merge     passed 50 trials" in out
    assert "log |det J|" in out and "log alpha" in out
    assert "acceptance split/merge" in out and "acceptance move cluster" in out
    assert "posterior over the number of clusters" in out and "k = " in out
