"""Silently wrong numbers at the edges of distributions (issue 16, items 9, 10 and 11):
samples on an excluded end of the support, a float32 simplex scored -inf, parameters
that were truncated or that turned a scalar choice into a vector."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import imcmc_lab as il

F64 = torch.float64
INF = math.inf


def t(x, dtype=F64):
    return torch.as_tensor(x, dtype=dtype)


# ---------------------------------------------------------------------------
# item 9: the documented convention for the ends of a support, and samplers that keep it
# ---------------------------------------------------------------------------
def test_support_ends_follow_the_documented_convention():
    # included where the density formula is finite for every parameter value
    assert float(il.uniform(0.0, 2.0).log_prob(t(0.0))) == pytest.approx(-math.log(2.0))
    assert float(il.uniform(0.0, 2.0).log_prob(t(2.0))) == pytest.approx(-math.log(2.0))
    assert float(il.exponential(2.0).log_prob(t(0.0))) == pytest.approx(math.log(2.0))
    # excluded otherwise, even where this parameter's formula happens to be finite
    for dist, end in [(il.beta(1.0, 1.0), 0.0), (il.beta(1.0, 1.0), 1.0), (il.gamma(1.0, 2.0), 0.0),
                      (il.inv_gamma(1.0, 1.0), 0.0), (il.lognormal(0.0, 1.0), 0.0)]:
        assert float(dist.log_prob(t(end))) == -INF, (dist, end)
        assert dist.logpdf(t(end)) == -INF, (dist, end)
    assert float(il.dirichlet(t([1.0, 1.0])).log_prob(t([0.0, 1.0]))) == -INF


@pytest.mark.parametrize("dist", [il.beta(0.01, 0.01), il.beta(0.002, 0.5), il.beta(0.5, 0.002),
                                  il.gamma(0.01, 1.0), il.gamma(0.005, 1e-3), il.inv_gamma(0.01, 1.0),
                                  il.lognormal(0.0, 300.0)], ids=repr)
def test_samples_never_have_density_minus_inf(dist):
    torch.manual_seed(2024)
    singles = [dist.sample() for _ in range(3000)]
    assert all(math.isfinite(dist.logpdf(v)) for v in singles), dist
    batch = il.iid(dist, 3000).sample()
    assert torch.all(torch.isfinite(dist.log_prob(batch))), dist


def test_dirichlet_with_small_alpha_samples_inside_the_simplex():
    torch.manual_seed(7)
    d = il.dirichlet(t([0.01, 0.01, 0.01]))
    for _ in range(2000):
        w = d.sample()
        assert torch.all(w > 0) and math.isfinite(d.logpdf(w)), w


def test_traces_of_small_shape_models_are_possible():
    @il.gen
    def model():
        p = il.beta(0.01, 0.01) @ "p"
        return il.bernoulli(p) @ "flip"

    torch.manual_seed(0)
    scores = [model.simulate().score for _ in range(1000)]
    assert all(math.isfinite(s) for s in scores)


def test_beta_with_small_shapes_keeps_its_distribution():
    # beta(0.01, 0.01) is symmetric with P(x < 1/2) = 1/2 and variance ab / ((a+b)^2 (a+b+1))
    torch.manual_seed(11)
    n = 20_000
    xs = np.array([float(il.beta(0.01, 0.01).sample()) for _ in range(n)])
    below = (xs < 0.5).mean()
    assert abs(below - 0.5) < 5 * math.sqrt(0.25 / n)
    var = 0.01 * 0.01 / (0.02 ** 2 * 1.02)
    assert abs(xs.mean() - 0.5) < 5 * math.sqrt(var / n)
    # an asymmetric small-shape beta against scipy's CDF (Kolmogorov-Smirnov, fixed seed)
    ys = np.array([float(il.beta(0.05, 0.2).sample()) for _ in range(5000)])
    assert stats.kstest(ys, stats.beta(0.05, 0.2).cdf).pvalue > 1e-3


# ---------------------------------------------------------------------------
# item 10: a float32 point of the simplex
# ---------------------------------------------------------------------------
def test_float32_simplex_has_the_dirichlet_density():
    alpha = np.array([2.0, 3.0, 4.0])
    d = il.dirichlet(t(alpha))
    w32 = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float32)
    expected = stats.dirichlet(alpha).logpdf(np.array([0.2, 0.3, 0.5]))
    assert math.isclose(float(d.log_prob(w32)), expected, rel_tol=1e-6)
    value = d.coerce(w32)
    assert value.dtype == F64 and math.isclose(d.logpdf(value), expected, rel_tol=1e-6)

    @il.gen
    def model():
        return il.dirichlet(t(alpha)) @ "w"

    trace, weight = model.generate((), {"w": w32})
    assert math.isclose(weight, expected, rel_tol=1e-6) and trace["w"].dtype == F64
    trace, weight = model.generate((), {"w": np.array([0.2, 0.3, 0.5], dtype=np.float32)})
    assert math.isclose(weight, expected, rel_tol=1e-6)


def test_float32_vector_off_the_simplex_stays_outside():
    d = il.dirichlet(t([2.0, 3.0, 4.0]))
    assert float(d.log_prob(torch.tensor([0.2, 0.3, 0.4], dtype=torch.float32))) == -INF
    assert d.logpdf(d.coerce(torch.tensor([0.2, 0.3, 0.4], dtype=torch.float32))) == -INF
    assert d.logpdf(t([0.2, 0.3, 0.5 + 1e-6])) == -INF       # float64: the 1e-8 tolerance stays


# ---------------------------------------------------------------------------
# item 11: integers and shapes are kept, never truncated or broadcast
# ---------------------------------------------------------------------------
def test_integer_valued_parameters_are_still_accepted():
    @il.gen
    def model():
        k = il.uniform_discrete(1.0, torch.tensor(3)) @ "k"
        return il.iid(il.normal(0.0, 1.0), float(k)) @ "xs"

    torch.manual_seed(0)
    trace = model.simulate()
    assert 1 <= trace["k"] <= 3 and trace["xs"].shape == (trace["k"],)
    assert il.uniform_discrete(1.0, 3.0).check_params() is None
    assert il.uniform_discrete(0.5, 2.7).check_params() == "lo must be an integer, got 0.5"
    assert il.iid(il.normal(0.0, 1.0), 2.5).check_params() == "n must be an integer, got 2.5"


def test_scalar_distributions_reject_vector_parameters():
    assert il.normal(0.0, 1.0).check_params() is None
    assert il.normal(torch.tensor(0.0), torch.tensor(1.0)).check_params() is None
    assert "mean must be a scalar" in il.normal(torch.zeros(1), 1.0).check_params()
    assert "std must be a scalar" in il.normal(0.0, torch.ones(4)).check_params()
