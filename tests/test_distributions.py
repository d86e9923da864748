"""Distributions: log-densities against scipy.stats, sampling moments, iid, value types."""

from __future__ import annotations

import math
import pickle
import warnings

import numpy as np
import pytest
import torch
from scipy import special, stats

import imcmc_lab as il

F64 = torch.float64
INF = math.inf


def t(x):
    return torch.as_tensor(x, dtype=F64)


# (name, distribution, scipy log-density of one value, values to test).
# Values cover the support, its boundary where both conventions agree, and points
# outside it (which must give -inf, never raise).
def _mixture_logpdf(w, m, v):
    return lambda x: special.logsumexp(np.log(w) + stats.norm.logpdf(x, m, np.sqrt(v)))


CONTINUOUS = [
    ("normal", il.normal(1.5, 2.0), stats.norm(1.5, 2.0).logpdf, [-30.0, -1.0, 0.0, 1.5, 7.3, INF, -INF]),
    ("normal-small", il.normal(0.0, 1e-3), stats.norm(0.0, 1e-3).logpdf, [0.0, 1e-3, 0.1]),
    ("gamma", il.gamma(2.5, 3.0), stats.gamma(2.5, scale=1 / 3.0).logpdf, [-1.0, 1e-8, 0.3, 1.0, 20.0, INF, -INF]),
    ("gamma-shape<1", il.gamma(0.5, 1.0), stats.gamma(0.5).logpdf, [-2.0, 1e-6, 0.5, 4.0]),
    ("inv_gamma", il.inv_gamma(3.0, 2.0), stats.invgamma(3.0, scale=2.0).logpdf, [-1.0, 0.05, 1.0, 9.0, INF]),
    ("beta", il.beta(2.0, 5.0), stats.beta(2.0, 5.0).logpdf, [-0.5, 0.01, 0.3, 0.99, 1.5, INF]),
    ("beta-U", il.beta(0.5, 0.5), stats.beta(0.5, 0.5).logpdf, [0.001, 0.5, 0.999, -0.1, 1.1]),
    ("uniform", il.uniform(-1.0, 3.0), stats.uniform(-1.0, 4.0).logpdf, [-1.5, -1.0, 0.0, 2.9, 3.0, 3.1, INF]),
    ("exponential", il.exponential(2.0), stats.expon(scale=0.5).logpdf, [-0.1, 0.0, 0.7, 30.0, INF]),
    ("lognormal", il.lognormal(0.5, 0.8), stats.lognorm(0.8, scale=math.exp(0.5)).logpdf, [-1.0, 0.0, 0.2, 1.0, 12.0, INF]),
    ("mixture_of_normals", il.mixture_of_normals(t([0.2, 0.8]), t([-2.0, 3.0]), t([0.5, 4.0])),
     _mixture_logpdf(np.array([0.2, 0.8]), np.array([-2.0, 3.0]), np.array([0.5, 4.0])),
     [-5.0, -2.0, 0.0, 3.0, 9.0]),
]

DISCRETE = [
    ("bernoulli", il.bernoulli(0.3), stats.bernoulli(0.3).logpmf, [0, 1, True, False, 2, -1, 0.5]),
    ("bernoulli-p=1", il.bernoulli(1.0), stats.bernoulli(1.0).logpmf, [True, False]),
    ("uniform_discrete", il.uniform_discrete(2, 5), stats.randint(2, 6).logpmf, [1, 2, 3, 5, 6, 2.5, -3]),
    ("categorical", il.categorical(t([0.1, 0.6, 0.3])),
     lambda x: math.log([0.1, 0.6, 0.3][int(x)]) if x in (0, 1, 2) else -INF, [0, 1, 2, 3, -1, 1.5]),
    ("poisson", il.poisson(3.5), stats.poisson(3.5).logpmf, [0, 1, 3, 12, 60, -1, 2.5]),
    ("poisson-rate0", il.poisson(0.0), stats.poisson(0.0).logpmf, [0, 1]),
    ("poisson_plus_one", il.poisson_plus_one(2.0), stats.poisson(2.0, loc=1).logpmf, [0, 1, 2, 9, -1, 1.5]),
    ("geometric", il.geometric(0.3), stats.geom(0.3, loc=-1).logpmf, [0, 1, 5, 40, -1, 2.5]),
    ("neg_binomial", il.neg_binomial(2.5, 0.4), stats.nbinom(2.5, 0.4).logpmf, [0, 1, 4, 30, -1, 0.5]),
]


@pytest.mark.parametrize("name, dist, ref, values", CONTINUOUS + DISCRETE,
                         ids=[c[0] for c in CONTINUOUS + DISCRETE])
def test_log_prob_matches_scipy_in_and_out_of_support(name, dist, ref, values):
    for value in values:
        arg = t(value) if not dist.discrete else value
        got = dist.log_prob(arg)
        assert isinstance(got, torch.Tensor) and got.dtype == F64, (name, value)
        # ±inf is not a real number: outside every support (scipy says nan for some).
        expected = float(ref(float(value))) if math.isfinite(float(value)) else -INF
        got = float(got)
        if expected == -INF:
            assert got == -INF, f"{name} at {value}: {got} (should be -inf, outside the support)"
        else:
            assert math.isclose(got, expected, rel_tol=1e-10, abs_tol=1e-10), f"{name} at {value}: {got} vs {expected}"


@pytest.mark.parametrize("name, dist, ref, values", CONTINUOUS + DISCRETE,
                         ids=[c[0] for c in CONTINUOUS + DISCRETE])
def test_log_prob_broadcasts_over_a_batch_of_values(name, dist, ref, values):
    batch = t([float(v) for v in values if math.isfinite(float(v))])
    got = dist.log_prob(batch)
    assert got.shape == batch.shape
    for i, v in enumerate(batch.tolist()):
        single = float(dist.log_prob(t(v) if not dist.discrete else v))
        # scalar values may take a Python-arithmetic path: equal to rounding, not bit for bit
        assert got[i].item() == single or math.isclose(got[i].item(), single, rel_tol=1e-13, abs_tol=1e-13), \
            (name, v, got[i].item(), single)


def test_vector_distributions_match_scipy():
    alpha = np.array([1.5, 2.0, 0.7])
    d = il.dirichlet(t(alpha))
    for x in ([0.2, 0.3, 0.5], [0.001, 0.009, 0.99]):
        assert math.isclose(float(d.log_prob(t(x))), stats.dirichlet(alpha).logpdf(x), rel_tol=1e-10)
    for x in ([0.5, 0.6, -0.1], [0.2, 0.2, 0.2], [0.0, 0.5, 0.5]):
        assert float(d.log_prob(t(x))) == -INF, x
    mean = np.array([1.0, -1.0])
    cov = np.array([[2.0, 0.6], [0.6, 1.0]])
    mv = il.mvnormal(t(mean), t(cov))
    for x in ([0.0, 0.0], [3.0, -2.5], [-10.0, 10.0]):
        expected = stats.multivariate_normal(mean, cov).logpdf(x)
        assert math.isclose(float(mv.log_prob(t(x))), expected, rel_tol=1e-10)
    batch = t([[0.0, 0.0], [3.0, -2.5]])
    assert torch.allclose(mv.log_prob(batch), t(stats.multivariate_normal(mean, cov).logpdf(batch.numpy())))


def test_log_prob_keeps_gradients_on_the_support():
    x = torch.tensor(0.7, dtype=F64, requires_grad=True)
    for d, expected in [(il.gamma(2.0, 3.0), 1 / 0.7 - 3.0), (il.normal(0.0, 2.0), -0.7 / 4.0),
                        (il.beta(2.0, 2.0), 1 / 0.7 - 1 / 0.3)]:
        (grad,) = torch.autograd.grad(d.log_prob(x), x)
        assert math.isclose(float(grad), expected, rel_tol=1e-10)
        assert not torch.isnan(grad)


# ---------------------------------------------------------------------------
# sampling moments: mean (and variance) within 5 Monte Carlo standard errors
# ---------------------------------------------------------------------------
MOMENTS = [
    (il.normal(1.5, 2.0), stats.norm(1.5, 2.0)),
    (il.gamma(2.5, 3.0), stats.gamma(2.5, scale=1 / 3.0)),
    (il.gamma(0.3, 1.0), stats.gamma(0.3)),
    (il.inv_gamma(6.0, 2.0), stats.invgamma(6.0, scale=2.0)),
    (il.beta(2.0, 5.0), stats.beta(2.0, 5.0)),
    (il.uniform(-1.0, 3.0), stats.uniform(-1.0, 4.0)),
    (il.exponential(2.0), stats.expon(scale=0.5)),
    (il.lognormal(0.2, 0.5), stats.lognorm(0.5, scale=math.exp(0.2))),
    (il.bernoulli(0.3), stats.bernoulli(0.3)),
    (il.uniform_discrete(2, 5), stats.randint(2, 6)),
    (il.categorical(t([0.1, 0.6, 0.3])), stats.rv_discrete(values=([0, 1, 2], [0.1, 0.6, 0.3]))),
    (il.poisson(3.5), stats.poisson(3.5)),
    (il.poisson_plus_one(2.0), stats.poisson(2.0, loc=1)),
    (il.geometric(0.3), stats.geom(0.3, loc=-1)),
    (il.neg_binomial(2.5, 0.4), stats.nbinom(2.5, 0.4)),
]


def _check_moments(samples, ref, label):
    n = len(samples)
    mean, var, _, kurt = (float(v) for v in ref.stats(moments="mvsk"))
    se_mean = math.sqrt(var / n)
    assert abs(samples.mean() - mean) < 5 * se_mean, f"{label}: mean {samples.mean()} vs {mean}"
    # Var of the sample variance is about (mu4 - sigma^4) / n, mu4 = (kurt + 3) sigma^4.
    se_var = math.sqrt((kurt + 2.0) * var * var / n)
    assert abs(samples.var(ddof=1) - var) < 5 * se_var, f"{label}: var {samples.var()} vs {var}"


@pytest.mark.parametrize("dist, ref", MOMENTS, ids=[repr(d) for d, _ in MOMENTS])
def test_sampling_moments(dist, ref):
    torch.manual_seed(1234)
    batch = dist.sample_n(20_000)          # the vectorised path (used by iid)
    _check_moments(batch.to(F64).numpy(), ref, f"{dist!r} sample_n")
    singles = np.array([float(dist.sample()) for _ in range(3_000)])   # one at a time
    _check_moments(singles, ref, f"{dist!r} sample")


def test_vector_sampling_moments():
    torch.manual_seed(99)
    n = 20_000
    alpha = t([1.0, 2.0, 3.0])
    xs = torch.stack([il.dirichlet(alpha).sample() for _ in range(n)])
    mean = alpha / alpha.sum()
    var = mean * (1 - mean) / (alpha.sum() + 1)
    assert torch.all((xs.mean(0) - mean).abs() < 5 * torch.sqrt(var / n))
    assert torch.allclose(xs.sum(1), torch.ones(n, dtype=F64))
    cov = t([[2.0, 0.6], [0.6, 1.0]])
    mv = il.mvnormal(t([1.0, -1.0]), cov)
    ys = torch.stack([mv.sample() for _ in range(n)])
    assert torch.all((ys.mean(0) - t([1.0, -1.0])).abs() < 5 * torch.sqrt(torch.diagonal(cov) / n))
    emp_cov = torch.cov(ys.T)
    # se of a covariance entry: sqrt((s_ii s_jj + s_ij^2) / n) for a Gaussian
    se = torch.sqrt((torch.outer(torch.diagonal(cov), torch.diagonal(cov)) + cov ** 2) / n)
    assert torch.all((emp_cov - cov).abs() < 5 * se)
    w, m, v = t([0.2, 0.8]), t([-2.0, 3.0]), t([0.5, 4.0])
    mix = il.mixture_of_normals(w, m, v)
    zs = mix.sample_n(n)
    mix_mean = float((w * m).sum())
    mix_var = float((w * (v + m ** 2)).sum()) - mix_mean ** 2
    assert abs(float(zs.mean()) - mix_mean) < 5 * math.sqrt(mix_var / n)


# ---------------------------------------------------------------------------
# iid
# ---------------------------------------------------------------------------
def test_iid_log_prob_is_one_vectorised_call_equal_to_the_elementwise_sum(monkeypatch):
    base = il.gamma(2.0, 1.5)
    values = torch.cat([il.gamma(2.0, 1.5).sample_n(999), t([-1.0])])
    elementwise = sum(float(base.log_prob(v)) for v in values[:-1])
    calls = []
    original = type(base).log_prob

    def counting(self, x):
        calls.append(tuple(x.shape))
        return original(self, x)

    monkeypatch.setattr(type(base), "log_prob", counting)
    d = il.iid(base, 999)
    got = float(d.log_prob(values[:-1]))
    assert calls == [(999,)]
    assert math.isclose(got, elementwise, rel_tol=1e-12)
    assert float(il.iid(base, 1000).log_prob(values)) == -INF   # one value out of support


def test_iid_of_discrete_and_vector_distributions():
    torch.manual_seed(0)
    counts = il.iid(il.poisson(2.0), 50)
    x = counts.sample()
    assert x.dtype == torch.int64 and x.shape == (50,)
    assert math.isclose(float(counts.log_prob(x)), float(stats.poisson(2.0).logpmf(x.numpy()).sum()),
                        rel_tol=1e-12)
    assert counts.discrete and counts.dim == 0
    flips = il.iid(il.bernoulli(0.25), 10).sample()
    assert flips.dtype == torch.int64 and set(flips.tolist()) <= {0, 1}
    mv = il.iid(il.mvnormal(torch.zeros(2), torch.eye(2)), 4)
    y = mv.sample()
    assert y.shape == (4, 2) and y.dtype == F64 and mv.dim == 8 and not mv.discrete
    assert math.isclose(float(mv.log_prob(y)), float(stats.multivariate_normal(np.zeros(2)).logpdf(y.numpy()).sum()),
                        rel_tol=1e-12)


def test_iid_choice_costs_one_log_density_evaluation_in_a_program():
    @il.gen
    def model(n):
        mu = il.normal(0.0, 1.0) @ "mu"
        return il.iid(il.normal(mu, 1.0), n) @ "xs"

    data = torch.randn(5000, dtype=F64)
    with il.count_work() as work:
        trace, weight = model.generate((5000,), {"xs": data})
    assert work.logpdf_evaluations == 2
    expected = stats.norm(float(trace["mu"]), 1.0).logpdf(data.numpy()).sum()
    assert math.isclose(weight, expected, rel_tol=1e-10)


# ---------------------------------------------------------------------------
# value conventions
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dist", [il.uniform_discrete(0, 3), il.categorical(t([0.5, 0.5])),
                                  il.poisson(2.0), il.poisson_plus_one(1.0), il.geometric(0.5),
                                  il.neg_binomial(1.5, 0.5)], ids=repr)
def test_discrete_values_are_python_ints(dist):
    torch.manual_seed(0)
    for _ in range(20):
        v = dist.sample()
        assert type(v) is int, (dist, v, type(v))
        assert float(dist.log_prob(v)) > -INF
    assert dist.discrete and dist.dim == 0


def test_bernoulli_values_are_bools_and_constraints_are_coerced():
    torch.manual_seed(0)
    assert {type(il.bernoulli(0.5).sample()) for _ in range(20)} == {bool}
    assert il.bernoulli(0.5).coerce(1) is True and il.bernoulli(0.5).coerce(0) is False
    assert il.bernoulli(0.5).coerce(torch.tensor(1.0)) is True
    assert il.bernoulli(0.5).coerce(2) == 2 and float(il.bernoulli(0.5).log_prob(2)) == -INF
    assert type(il.poisson(1.0).coerce(True)) is int

    @il.gen
    def flip():
        return il.bernoulli(0.5) @ "f"

    trace, _ = flip.generate((), {"f": 1})
    assert trace["f"] is True
    assert il.poisson(1.0).coerce(torch.tensor(3)) == 3 and type(il.poisson(1.0).coerce(3.0)) is int
    with pytest.raises(ValueError):
        il.poisson(1.0).coerce(2.5)


@pytest.mark.parametrize("dist", [il.normal(0.0, 1.0), il.gamma(2.0, 1.0), il.inv_gamma(3.0, 1.0),
                                  il.beta(2.0, 2.0), il.uniform(0.0, 1.0), il.exponential(1.0),
                                  il.lognormal(0.0, 1.0),
                                  il.mixture_of_normals(t([0.5, 0.5]), t([0.0, 1.0]), t([1.0, 1.0])),
                                  il.dirichlet(t([1.0, 1.0, 1.0])), il.mvnormal(torch.zeros(3), torch.eye(3))],
                         ids=repr)
def test_continuous_values_are_float64_tensors(dist):
    torch.manual_seed(0)
    v = dist.sample()
    assert isinstance(v, torch.Tensor) and v.dtype == F64
    assert tuple(v.shape) == tuple(dist.event_shape)
    assert not dist.discrete and dist.dim == max(1, v.numel())


def test_float32_and_python_float_inputs_are_promoted_to_float64():
    d = il.normal(torch.tensor(0.5, dtype=torch.float32), 2)
    assert d.mean.dtype == F64 and d.std.dtype == F64
    assert d.sample().dtype == F64
    assert d.coerce(torch.tensor(1.0, dtype=torch.float32)).dtype == F64
    assert d.coerce(1).dtype == F64
    lp = d.log_prob(d.coerce(torch.tensor(0.1, dtype=torch.float32)))
    # float64 arithmetic throughout: equals scipy on the float32 value promoted exactly
    assert lp.dtype == F64
    assert math.isclose(float(lp), stats.norm(0.5, 2.0).logpdf(float(np.float32(0.1))), rel_tol=1e-14)
    v = il.dirichlet(torch.ones(3, dtype=torch.float32)).sample()
    assert v.dtype == F64
    with pytest.raises(ValueError, match="shape"):
        il.dirichlet(torch.ones(3)).coerce(torch.ones(2))


def test_check_params_accepts_valid_and_describes_invalid():
    assert il.normal(0.0, 1.0).check_params() is None
    assert il.mvnormal(torch.zeros(2), torch.eye(2)).check_params() is None
    assert "std" in il.normal(0.0, 0.0).check_params()
    assert "lo < hi" in il.uniform(1.0, 1.0).check_params()


def test_same_as_compares_family_and_arguments():
    assert il.normal(0.0, 1.0).same_as(il.normal(0.0, 1.0))
    assert not il.normal(0.0, 1.0).same_as(il.normal(0.0, 2.0))
    assert not il.normal(0.0, 1.0).same_as(il.lognormal(0.0, 1.0))
    assert il.iid(il.normal(0.0, 1.0), 3).same_as(il.iid(il.normal(0.0, 1.0), 3))
    assert not il.iid(il.normal(0.0, 1.0), 3).same_as(il.iid(il.normal(0.0, 1.0), 4))
    assert il.normal(t(0.0), 1.0).same_as(il.normal(t(0.0), 1.0))


def test_iid_of_zero_values_samples_an_empty_tensor():
    # the mixture examples run "with no data" as iid(mixture_of_normals(...), 0)
    d = il.iid(il.mixture_of_normals(torch.tensor([0.5, 0.5]), torch.zeros(2), torch.ones(2)), 0)
    value = d.sample()
    assert value.shape == (0,) and float(d.log_prob(value)) == 0.0
    assert il.iid(il.poisson(2.0), 0).sample().dtype == torch.int64


# ---------------------------------------------------------------------------
# Python-arithmetic fast paths agree with the torch path, in, at the edge of and
# outside the support (the engine stores logpdf(); log_prob keeps its tensor)
# ---------------------------------------------------------------------------
def _torch_path(dist, value):
    """log_prob computed by the tensor formulas: a discrete value as a float tensor, a
    continuous one inside autograd (every fast path steps aside for either)."""
    if dist.discrete:
        return float(dist.log_prob(t(float(value))))
    return float(dist.log_prob(t(value).requires_grad_()).detach())


def _same(a, b, rel=1e-13):
    return a == b or (math.isfinite(a) and math.isclose(a, b, rel_tol=rel, abs_tol=rel))


DIRICHLET_VALUES = [[0.2, 0.3, 0.5], [1e-300, 0.5, 0.5], [0.0, 0.5, 0.5], [-0.1, 0.6, 0.5],
                    [0.2, 0.3, 0.5 + 1e-6], [0.2, 0.3, 0.5 + 1e-10], [0.5, 0.5], [0.25] * 4,
                    [math.nan, 0.5, 0.5], [math.inf, 0.5, 0.5], [1.0, 0.0, 0.0]]


@pytest.mark.parametrize("alpha", [[2.0, 2.0, 2.0], [0.5, 1.5, 3.0], [1.0, 1.0, 1.0]], ids=str)
def test_dirichlet_fast_path_matches_the_torch_path(alpha):
    d = il.dirichlet(t(alpha))
    ref = stats.dirichlet(np.array(alpha))
    for x in DIRICHLET_VALUES:
        fast, slow = d.logpdf(t(x)), _torch_path(d, x)
        assert type(fast) is float and _same(fast, slow), (x, fast, slow)
        assert float(d.log_prob(t(x))) == fast
        inside = len(x) == 3 and all(v > 0 for v in x) and abs(sum(x) - 1) < 1e-8
        assert (fast > -INF) == inside, x
        if inside and x[0] > 1e-200:
            assert math.isclose(fast, ref.logpdf(np.array(x) / sum(x)), rel_tol=1e-8)
    one = il.dirichlet(t([1.5]))          # k = 1: the only value is [1]
    assert one.logpdf(t([1.0])) == 0.0 and one.logpdf(t([0.5])) == -INF


def test_dirichlet_batch_and_wrong_length_never_raise():
    d = il.dirichlet(t([2.0, 2.0, 2.0]))
    batch = t([[0.2, 0.3, 0.5], [0.0, 0.5, 0.5]])
    got = d.log_prob(batch)
    assert got.shape == (2,) and got[1] == -INF and _same(float(got[0]), d.logpdf(t([0.2, 0.3, 0.5])))
    assert d.log_prob(t([[0.5, 0.5]])).tolist() == [-INF]
    assert float(d.log_prob(t(0.5))) == -INF


POISSON_CASES = [(il.poisson(3.5), [0, 1, 3, 12, 200, -1, -7]),
                 (il.poisson(0.0), [0, 1, 5, -1]),
                 (il.poisson(1e-300), [0, 1, 2]),
                 (il.poisson_plus_one(2.0), [0, 1, 2, 9, -1]),
                 (il.poisson_plus_one(0.0), [0, 1, 2])]


@pytest.mark.parametrize("dist, values", POISSON_CASES, ids=[repr(d) for d, _ in POISSON_CASES])
def test_poisson_fast_path_matches_the_torch_path(dist, values):
    rate, shift = float(dist.rate), dist.shift
    for x in values:
        fast, slow = dist.logpdf(x), _torch_path(dist, x)
        assert type(fast) is float and _same(fast, slow), (x, fast, slow)
        assert float(dist.log_prob(x)) == fast
        expected = float(stats.poisson(rate, loc=shift).logpmf(x))
        assert (fast == -INF) if expected == -INF else math.isclose(fast, expected, rel_tol=1e-12)
    for x in (2.5, -0.5, True, math.inf, math.nan):     # not ints: the torch path, never an error
        assert dist.logpdf(x) == float(dist.log_prob(x))
    assert dist.logpdf(2.5) == -INF


def test_poisson_check_params():
    assert il.poisson(0.0).check_params() is None and il.poisson(2.0).check_params() is None
    for rate in (-1.0, math.inf, math.nan):
        assert "rate must be finite and >= 0" in il.poisson(rate).check_params()


@pytest.mark.parametrize("dist, values", [
    (il.normal(1.5, 2.0), [-30.0, 1.5, 7.3, INF, -INF]),
    (il.inv_gamma(3.0, 2.0), [-1.0, 0.0, 1e-300, 0.05, 9.0, INF]),
    (il.beta(2.0, 5.0), [-0.5, 0.0, 1e-300, 0.3, 1.0, 1.5]),
    (il.bernoulli(0.3), [True, False]),
    (il.bernoulli(0.0), [True, False]),
    (il.uniform_discrete(2, 5), [1, 2, 5, 6]),
], ids=repr)
def test_scalar_fast_paths_match_the_torch_path(dist, values):
    for x in values:
        fast, slow = dist.logpdf(x if dist.discrete else t(x)), _torch_path(dist, x)
        assert type(fast) is float and _same(fast, slow), (x, fast, slow)


MIXTURE = il.mixture_of_normals(t([0.2, 0.8]), t([-2.0, 3.0]), t([0.5, 4.0]))
MIXTURE_VALUES = [-5.0, -2.0, 0.0, 3.0, 9.0, 60.0, -1e3, 1e5, 1e200, INF, -INF]


@pytest.mark.parametrize("dist", [
    MIXTURE,
    il.mixture_of_normals(t([0.0, 1.0]), t([-2.0, 3.0]), t([0.5, 4.0])),        # a zero weight
    il.mixture_of_normals(t([1.0]), t([0.5]), t([2.0])),                        # one component
    il.mixture_of_normals(t([0.3, 0.3]), t([-1.0, 1.0]), t([1e-300, 1e300])),   # extreme variances
], ids=["two", "zero-weight", "one", "extreme"])
def test_mixture_fast_paths_match_the_torch_path(dist):
    batch = t(MIXTURE_VALUES)
    fast = dist.log_prob(batch)
    slow = dist.log_prob(batch.clone().requires_grad_()).detach()
    assert fast.dtype == F64 and fast.shape == batch.shape
    for v, a, b in zip(MIXTURE_VALUES, fast.tolist(), slow.tolist()):
        assert _same(a, b, rel=1e-12), (v, a, b)                      # far points: the exact shift
        assert _same(dist.logpdf(t(v)), b, rel=1e-12), v              # one value: Python arithmetic
    both = dist.log_prob(t([[0.0, 1e5], [3.0, -INF]]))                # any batch shape
    assert _same(float(both[0, 1]), slow[7].item(), rel=1e-12) and both[1, 1] == -INF
    assert math.isnan(float(dist.log_prob(t([0.0, math.nan]))[1])) and math.isnan(dist.logpdf(t(math.nan)))


def test_mixture_of_lists_of_scalars_is_the_mixture_of_their_vectors():
    # Fig. 1 passes lists of 0-d tensors: the distribution keeps their floats and makes the
    # vectors only when asked; comparisons, repr, pickles and densities are the vectors'
    w, m, v = t([0.3, 0.7]), [t(-1.0), t(1.0)], [t(1e-300), t(1e300)]
    lists, vectors = il.mixture_of_normals(w, m, v), il.mixture_of_normals(w, torch.stack(m), torch.stack(v))
    assert lists.same_as(vectors) and vectors.same_as(lists) and repr(lists) == repr(vectors)
    assert not lists.same_as(il.mixture_of_normals(w, [t(-1.0), t(2.0)], v))
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # overflow (a tiny variance) is -inf, not a NumPy warning
        got = lists.log_prob(t(MIXTURE_VALUES))
    assert torch.equal(got, vectors.log_prob(t(MIXTURE_VALUES)))
    restored = pickle.loads(pickle.dumps(lists))
    assert restored.same_as(lists) and torch.equal(restored.means, vectors.means)


@pytest.mark.parametrize("n", [50, 20_000])        # NumPy's exp2, and torch's beyond 2^15 terms
def test_mixture_iid_log_density_is_the_sum_and_falls_back_exactly_on_underflow(n):
    torch.manual_seed(n)
    d = il.mixture_of_normals(t([0.2, 0.8]), [t(-2.0), t(3.0)], [t(0.5), t(1e-4)])
    x = 4 * torch.randn(n, dtype=F64)
    lp = il.iid(d, n).logpdf(x)
    assert lp == il.iid(d, n).log_prob(x).item() and math.isclose(lp, float(d.log_prob(x).sum()), rel_tol=1e-13)
    assert math.isclose(lp, float(d._torch_log_prob(x).sum()), rel_tol=1e-12)
    x[0] = 1e5      # far from both components: every term underflows, the torch path shifts by x's own maximum
    assert il.iid(d, n).logpdf(x) == float(d._torch_log_prob(x).sum()) > -math.inf


def test_mixture_all_zero_weights_and_empty_batch():
    d = il.mixture_of_normals(t([0.0, 0.0]), t([0.0, 1.0]), t([1.0, 1.0]))
    # issue 16, items 2 and 19: weights must sum to 1 (at an address this is a DistributionError);
    # scored directly, such a mixture still has log-density -inf everywhere, never an exception
    assert "weights must be >= 0 and sum to 1" in d.check_params()
    assert d.log_prob(t([0.0, 2.0])).tolist() == [-INF, -INF] and d.logpdf(t(0.5)) == -INF
    assert float(il.iid(MIXTURE, 0).log_prob(torch.empty(0, dtype=F64))) == 0.0


def test_mixture_iid_likelihood_equals_the_elementwise_sum_and_float64():
    torch.manual_seed(3)
    w = torch.distributions.Dirichlet(torch.full((32,), 2.0, dtype=F64)).sample()
    m, v = 5 * torch.randn(32, dtype=F64), torch.rand(32, dtype=F64) + 0.1
    x = 8 * torch.randn(10_000, dtype=F64)
    d = il.iid(il.mixture_of_normals(w, m, v), 10_000)
    got = d.log_prob(x)
    expected = special.logsumexp(np.log(w.numpy()) + stats.norm.logpdf(x.numpy()[:, None], m.numpy(),
                                                                         np.sqrt(v.numpy())), axis=1).sum()
    assert got.dtype == F64 and math.isclose(float(got), expected, rel_tol=1e-12)


def test_check_params_of_short_vectors_name_the_values():
    assert il.dirichlet(t([2.0, 2.0])).check_params() is None
    assert il.dirichlet(t([2.0, 0.0])).check_params() == "alpha must be finite and > 0, got [2.0, 0.0]"
    assert "alpha must be finite and > 0" in il.dirichlet(t([2.0, math.nan])).check_params()
    ok = il.mixture_of_normals(t([0.5, 0.5]), t([0.0, 1.0]), t([1.0, 1.0]))
    assert ok.check_params() is None
    bad = [((t([0.5, -0.5]), t([0.0, 1.0]), t([1.0, 1.0])), "weights must be >= 0, got [0.5, -0.5]"),
           ((t([0.5, 0.5]), t([0.0, math.inf]), t([1.0, 1.0])), "means must be finite, got [0.0, inf]"),
           ((t([0.5, 0.5]), t([0.0, 1.0]), t([1.0, 0.0])), "variances must be finite and > 0, got [1.0, 0.0]"),
           ((t([0.5, 0.5]), t([0.0, 1.0, 2.0]), t([1.0, 1.0])), "must be vectors of one length")]
    for args, message in bad:
        assert message in il.mixture_of_normals(*args).check_params(), args


def test_fast_paths_keep_gradients():
    x = torch.tensor(0.7, dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(MIXTURE.log_prob(x), x)
    w, m, v = np.array([0.2, 0.8]), np.array([-2.0, 3.0]), np.array([0.5, 4.0])
    r = w * stats.norm.pdf(0.7, m, np.sqrt(v))
    assert math.isclose(float(grad), float(np.sum(r * (m - 0.7) / v) / np.sum(r)), rel_tol=1e-10)
    mean = torch.tensor(0.5, dtype=F64, requires_grad=True)        # a parameter in autograd
    (grad,) = torch.autograd.grad(il.normal(mean, 2.0).log_prob(t(1.5)), mean)
    assert math.isclose(float(grad), 1.0 / 4.0, rel_tol=1e-12)
    weights = t([0.2, 0.3, 0.5]).requires_grad_()
    (grad,) = torch.autograd.grad(il.dirichlet(t([2.0, 3.0, 4.0])).log_prob(weights), weights)
    assert torch.allclose(grad, t([1 / 0.2, 2 / 0.3, 3 / 0.5]), rtol=1e-12)


@pytest.mark.parametrize("dist", [il.normal(1.0, 2.0), il.inv_gamma(2.0, 1.0), il.beta(2.0, 2.0),
                                  il.bernoulli(0.4), il.uniform_discrete(1, 6), il.poisson(2.0)], ids=repr)
def test_samples_come_from_torchs_global_generator(dist):
    torch.manual_seed(11)
    first = [dist.sample() for _ in range(20)]
    torch.manual_seed(11)
    assert [dist.sample() for _ in range(20)] == first
    assert len({float(v) for v in first}) > 1
