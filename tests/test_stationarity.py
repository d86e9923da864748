"""check_stationarity: Geweke's prior-invariance test catches what Algorithm 4 cannot.

Each buggy kernel must be flagged with p < 1e-4 (sizes chosen from measured p-values
with a margin, fixed seeds); its correct twin must pass at the same size and seed.
The false-alarm rate over many seeds is measured in
benchmarks/stationarity_false_alarms.py (too slow for CI); here the tests' own null
behaviour is checked cheaply on NumPy samples.
"""

import matplotlib
import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples import bugs, mixture, subtle_bugs
from imcmc_lab.inference.stationarity import holm, homogeneity_p_value

matplotlib.use("Agg")

CAUGHT = 1e-4


def k_of(t):
    return t["k"]


def first_weight(t):
    return float(t["weights"][0])


def mean_of_means(t):
    return float(torch.stack([t["mu", j] for j in range(1, t["k"] + 1)]).mean())


def run(model, args, kernel, **options):
    options.setdefault("executor", "serial")
    return il.check_stationarity(model, args, kernel, **options)


def test_holm_step_down():
    assert holm([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])


@pytest.mark.parametrize("discrete", [True, False])
def test_homogeneity_tests_hold_their_level(discrete):
    # 400 pairs of independent samples from one distribution: false alarms at 0.05 are
    # Binomial(400, <= 0.05); 33 is the 0.999 quantile of Binomial(400, 0.05).
    rng = np.random.default_rng(1)
    alarms = 0
    for _ in range(400):
        draw = (lambda: rng.poisson(2.0, 300)) if discrete else (lambda: rng.gamma(2.0, size=300))
        alarms += homogeneity_p_value(draw(), draw())[0] < 0.05
    assert alarms <= 33


def test_subtle_bugs_pass_algorithm_4():
    # The transforms are involutions: Algorithm 4 cannot see what is wrong with the ratios.
    il.check_involution(subtle_bugs.mixture_prior, (0,), mixture.birth_death_aux, mixture.birth_death, trials=40)


@pytest.mark.parametrize("make", [subtle_bugs.birth_death_omitted_factor, subtle_bugs.birth_death_dirichlet_k])
def test_birth_death_ratio_bugs_are_caught_and_the_correct_kernel_passes(make):
    options = dict(statistics={"k": k_of, "w1": first_weight}, chains=1000, steps=3, seed=7)
    bad = run(subtle_bugs.mixture_prior, (0,), make(), **options)
    assert not bad.passed and bad.adjusted["k"] < CAUGHT, bad
    good = run(subtle_bugs.mixture_prior, (0,), make(correct=True), **dict(options, chains=300))
    assert good.passed, good


def test_mh_with_a_wrong_reverse_density_is_caught_with_observations():
    options = dict(observations=["y"], chains=1000, steps=6, seed=3)
    bad = run(subtle_bugs.gamma_poisson, (5,), subtle_bugs.log_walk_mh("lam", 0.5), **options)
    assert list(bad.adjusted) == ["lam"]       # the default statistics: the latent scalar only
    assert not bad.passed and bad.min_p_value < CAUGHT, bad
    good = run(subtle_bugs.gamma_poisson, (5,), subtle_bugs.log_walk_mh("lam", 0.5, correct=True),
               **dict(options, chains=300))
    assert good.passed, good


def test_section_6_merge_that_is_not_the_inverse_is_caught():
    options = dict(statistics={"k": k_of, "mean mu": mean_of_means}, chains=500, steps=10, seed=0)
    bad = run(bugs.positive_means, (), il.InvolutiveKernel(bugs.mean_split_aux, (), bugs.sqrt_merge), **options)
    assert not bad.passed and bad.adjusted["mean mu"] < CAUGHT, bad
    good = run(bugs.positive_means, (), il.InvolutiveKernel(bugs.mean_split_aux, (), bugs.arithmetic_merge),
               **dict(options, chains=200))
    assert good.passed, good


def test_section_6_birth_only_at_the_end_is_caught():
    kernel = il.InvolutiveKernel(bugs.birth_at_end_aux, (), bugs.birth_at_end)
    bad = run(subtle_bugs.mixture_prior, (0,), kernel, statistics={"k": k_of}, chains=800, steps=4, seed=0)
    assert not bad.passed and bad.adjusted["k"] < CAUGHT, bad


@pytest.mark.parametrize("kernel, model, words", [
    (il.InvolutiveKernel(bugs.mean_split_aux, (), bugs.misspelled("cluster_to_spilt")), bugs.positive_means,
     ["cluster_to_spilt"]),
    (il.InvolutiveKernel(bugs.one_or_two_aux, (), bugs.labelled(u_label=il.discrete)), bugs.one_or_two,
     ["LabelError", "aux_in['u']"]),
])
def test_section_6_address_and_label_bugs_fail_with_the_error(kernel, model, words):
    result = run(model, (), kernel, statistics={"k": k_of}, chains=20, steps=1)
    assert not result.passed and result.min_p_value == 0.0
    for word in words:
        assert word in result.error and word in repr(result)


def test_result_shows_verdict_escaped_html_and_a_picture():
    result = run(subtle_bugs.gamma_poisson, (5,), subtle_bugs.log_walk_mh("lam", 0.5, correct=True),
                 observations=["y"], statistics={"<lam>": lambda t: t["lam"], "y0": lambda t: t["y"][0]},
                 chains=60, steps=1)
    assert result.tests == {"<lam>": "Kolmogorov-Smirnov", "y0": "chi-square"}
    assert "no evidence against stationarity" in repr(result) and "60 chains x 1 steps" in repr(result)
    assert "&lt;lam&gt;" in result._repr_html_() and "<lam>" not in result._repr_html_()
    assert len(result.plot().axes) == 2


def test_default_statistics_are_named_like_the_addresses():
    """Column titles read ``lam``, not the Python literal ``'lam'``."""
    result = run(subtle_bugs.gamma_poisson, (2,), subtle_bugs.log_walk_mh("lam", 0.5, correct=True),
                 observations=["y"], chains=20, steps=1)
    assert list(result.statistics) == ["lam"]
    assert "lam: " in repr(result) and "'lam'" not in repr(result)


def test_user_random_stream_is_left_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    run(subtle_bugs.gamma_poisson, (2,), subtle_bugs.log_walk_mh("lam", 0.5, correct=True), chains=5, steps=1)
    assert torch.equal(torch.rand(3), expected)
