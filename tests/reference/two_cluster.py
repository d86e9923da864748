"""Exact reference answers for the one-vs-two cluster model.

Source: Sec. 4.2.1 ("Constructing an Involution") of *Automating Involutive
MCMC using Probabilistic and Differentiable Programming* (Marco Cusumano-Towner,
Alexander K. Lew and Vikash K. Mansinghka).  The paper's program uses 100 data points; here a
fixed 20-point data set ``DATA`` is used instead so that the posterior over
``k`` is moderate.

Model (exactly what the engine's model must be)
-----------------------------------------------
    k        ~ uniform_discrete(1, 2)            P(k=1) = P(k=2) = 1/2
    mu_j     ~ Normal(mean 0, std 10)            j = 1..k, independent
                                                 (variance 100)
    weights  = (1/k, ..., 1/k)                   fixed, not random
    vars     = (1, ..., 1)                       every component variance 1
    x_i      ~ sum_j (1/k) Normal(x_i; mu_j, std 1)   i = 1..n, iid given mu
                                                 (no latent assignments)

Latent trace: ``k``, ``(mu, 1)`` and, when k = 2, ``(mu, 2)``.  The
observations are ``(x, i)`` = ``DATA[i-1]``, n = len(DATA) = 20.

Reference quantities
--------------------
``log_marginal_k1()``   log p(DATA | k=1) = log int N(mu1; 0, 10^2) prod_i N(x_i; mu1, 1) dmu1
``log_marginal_k2()``   log p(DATA | k=2) = log int int N(mu1;0,10^2) N(mu2;0,10^2)
                                         prod_i [0.5 N(x_i; mu1, 1) + 0.5 N(x_i; mu2, 1)] dmu1 dmu2
``posterior_k2()``      P(k = 2 | DATA) = 1 / (1 + exp(lm1 - lm2))   (prior odds 1)
``posterior_mean_mu_k1()``  E[mu_1 | k=1, DATA]
``posterior_mean_sorted_mu_k2()``  (E[min(mu1,mu2) | k=2, DATA], E[max(mu1,mu2) | k=2, DATA])
                        (label-switching-invariant summary of the k=2 posterior)

All densities are Lebesgue densities of the real-valued x's (log N includes the
-0.5 log(2 pi) terms), so log marginals are comparable with an engine's
log-evidence estimates if it uses the same conventions.

Method: the k = 1 marginal is computed by 1-D adaptive quadrature
(``scipy.integrate.quad``) and the k = 2 marginal by a 2-D tensor-product
composite Gauss-Legendre rule on [-100, 100]^2 (10 prior standard deviations),
with fine panels around the data and coarse panels in the prior tails; all in
log space.  For E[min]/E[max] the kink of |mu1 - mu2| on the diagonal is
handled by integrating the diagonal panels with a collapsed (triangle) rule.
Everything is cross-checked in ``test_references.py`` against closed forms: k = 1 is a Gaussian linear model (x ~ N(0, I + 100 11^T)); k = 2 equals
an exact sum over all 2^n assignments of points to components, each term a
product of two Gaussian marginals (``log_marginal_k2_enumeration``; likewise
``posterior_mean_sorted_mu_k2_enumeration`` via Clark's formula for E[max]).

Values (see ``__main__``): log p(DATA|k=1) = -39.1927420366,
log p(DATA|k=2) = -39.3182385081, P(k=2 | DATA) = 0.4686669942,
E[mu_1 | k=1] = 0.4709195402, E[min mu | k=2] = -0.2655839407,
E[max mu | k=2] = 1.3666885911.

Note for kernel tests: the paper's split move draws u ~ beta(2, 2), so u is in
(0, 1) and a split only produces states with 0 < mu2 - mu1 < 2; a merge from a
k = 2 state outside that set has zero auxiliary density and is always
rejected.  Only P(0 < mu2 - mu1 < 2 | k=2, DATA) = 0.3557 of the k = 2 posterior
mass is directly connected to k = 1, so the kernel needs within-model moves on
(mu1, mu2) (random walk and/or label swap) to be ergodic.  The stationary
distribution is still the exact posterior above.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy import integrate
from scipy.special import logsumexp

# Generated once with numpy.random.default_rng(6): z_i ~ Bernoulli(1/2),
# x_i = 0.5 + (+1 if z_i else -1) + N(0,1), rounded to 4 decimals.  Hard-coded.
DATA = [
    -0.2100, 2.0513, 1.6787, -1.5739, 0.6534, -0.1204, 0.9198, 0.7716,
    0.7924, 3.2988, -0.5261, 2.8837, -1.4058, 0.6837, 1.5813, -0.2186,
    -0.0990, -0.2307, -0.1449, -1.3622,
]

PRIOR_STD = 10.0          # std of mu_j ~ Normal(0, 10)
NOISE_STD = 1.0           # every component has variance 1
LOG_2PI = math.log(2.0 * math.pi)


def _x(data=None) -> np.ndarray:
    return np.asarray(DATA if data is None else data, dtype=float)


def _log_normal(x, mean, std):
    z = (x - mean) / std
    return -0.5 * z * z - math.log(std) - 0.5 * LOG_2PI


# --------------------------------------------------------------------------
# k = 1
# --------------------------------------------------------------------------
def _log_lik_k1(mu, x):
    return float(np.sum(_log_normal(x, mu, NOISE_STD)))


def _k1_integrand_scaled(mu, x, shift):
    return math.exp(_log_normal(mu, 0.0, PRIOR_STD) + _log_lik_k1(mu, x) - shift)


def _k1_mode(x):
    tau2 = PRIOR_STD ** 2
    n = len(x)
    post_var = 1.0 / (n + 1.0 / tau2)
    return post_var * x.sum(), math.sqrt(post_var)


@functools.lru_cache(maxsize=None)
def _k1_quad(data_key=None):
    x = _x(data_key)
    m, s = _k1_mode(x)
    shift = _log_normal(m, 0.0, PRIOR_STD) + _log_lik_k1(m, x)
    lo, hi = m - 40 * s, m + 40 * s   # integrand < exp(-800) relative outside
    z0, _ = integrate.quad(_k1_integrand_scaled, lo, hi, args=(x, shift),
                           points=[m], epsabs=0, epsrel=1e-13, limit=200)
    z1, _ = integrate.quad(lambda mu: mu * _k1_integrand_scaled(mu, x, shift),
                           lo, hi, points=[m], epsabs=1e-14 * z0, epsrel=1e-13, limit=200)
    return shift + math.log(z0), z1 / z0


def log_marginal_k1(data=None) -> float:
    """log p(data | k=1) by 1-D adaptive quadrature over mu_1."""
    return _k1_quad(None if data is None else tuple(map(float, data)))[0]


def posterior_mean_mu_k1(data=None) -> float:
    """E[mu_1 | k=1, data] by 1-D quadrature (closed form: 100 S / (1 + 100 n))."""
    return _k1_quad(None if data is None else tuple(map(float, data)))[1]


def log_marginal_k1_closed_form(data=None) -> float:
    """Closed form: x ~ N(0, I + tau^2 11^T), tau = 10."""
    x = _x(data)
    return float(_log_group_marginal(len(x), x.sum(), np.sum(x * x)))


def _log_group_marginal(m, S, Q):
    """log int N(mu; 0, tau^2) prod_{i in group} N(x_i; mu, 1) dmu for a group of
    m points with sum S and sum of squares Q (vectorised; m = 0 gives 0)."""
    tau2 = PRIOR_STD ** 2
    m = np.asarray(m, dtype=float)
    return (-0.5 * m * LOG_2PI - 0.5 * np.log1p(m * tau2)
            - 0.5 * (Q - tau2 * S * S / (1.0 + m * tau2)))


# --------------------------------------------------------------------------
# k = 2
# --------------------------------------------------------------------------
def _composite_gl(edges, order):
    """Nodes/weights (and panel index of every node) of a composite
    Gauss-Legendre rule over consecutive panels."""
    t, w = np.polynomial.legendre.leggauss(order)
    a, b = np.asarray(edges[:-1]), np.asarray(edges[1:])
    half = 0.5 * (b - a)
    mid = 0.5 * (a + b)
    nodes = (mid[:, None] + half[:, None] * t[None, :]).ravel()
    weights = (half[:, None] * w[None, :]).ravel()
    panel = np.repeat(np.arange(len(a)), order)
    return nodes, weights, panel, a, b


def _mu_rule(x, inner_width=0.25, outer_width=5.0, order=10, bound=100.0, pad=10.0):
    """1-D rule on [-bound, bound]: fine panels on [min x - pad, max x + pad]
    (posterior of a mean given >= 1 point has std <= 1), coarse panels outside
    (there the integrand is only the smooth Normal(0, 10) prior times a factor
    that is essentially constant in that coordinate)."""
    lo = math.floor(x.min() - pad)
    hi = math.ceil(x.max() + pad)
    n_in = int(math.ceil((hi - lo) / inner_width))
    inner = np.linspace(lo, hi, n_in + 1)
    n_left = max(1, int(math.ceil((lo + bound) / outer_width)))
    n_right = max(1, int(math.ceil((bound - hi) / outer_width)))
    left = np.linspace(-bound, lo, n_left + 1)
    right = np.linspace(hi, bound, n_right + 1)
    edges = np.concatenate([left[:-1], inner, right[1:]])
    return _composite_gl(edges, order)


def _log_joint_k2(m1, m2, x):
    """log [N(m1;0,10^2) N(m2;0,10^2) prod_i (0.5 N(x_i;m1,1) + 0.5 N(x_i;m2,1))]
    for arrays m1, m2 of equal shape."""
    out = _log_normal(m1, 0.0, PRIOR_STD) + _log_normal(m2, 0.0, PRIOR_STD)
    for xi in x:
        out = out + np.logaddexp(math.log(0.5) + _log_normal(xi, m1, NOISE_STD),
                                 math.log(0.5) + _log_normal(xi, m2, NOISE_STD))
    return out


@functools.lru_cache(maxsize=None)
def _k2_grid(data_key=None, inner_width=0.25, outer_width=5.0, order=10):
    x = _x(data_key)
    nodes, weights, panel, pa, pb = _mu_rule(x, inner_width, outer_width, order)
    # per-node, per-datum log(0.5 N(x_i; mu, 1))
    a = math.log(0.5) + _log_normal(x[None, :], nodes[:, None], NOISE_STD)
    loglik = np.zeros((len(nodes), len(nodes)))
    for i in range(len(x)):
        loglik += np.logaddexp(a[:, i][:, None], a[:, i][None, :])
    lp = _log_normal(nodes, 0.0, PRIOR_STD) + np.log(weights)
    logw = loglik + lp[:, None] + lp[None, :]      # log(integrand * weight)
    logz = logsumexp(logw)
    post = np.exp(logw - logz)                      # normalised grid posterior
    e_sum = float(np.sum(post * (nodes[:, None] + nodes[None, :])))
    # E|mu1 - mu2|: |.| has a kink on the diagonal, so the tensor rule is used
    # only off the diagonal panels; each diagonal panel square is split into
    # two triangles (equal by symmetry) integrated with a collapsed GL rule:
    # t = a + h xi, s = a + h xi eta, ds dt = h^2 xi dxi deta.
    off = panel[:, None] != panel[None, :]
    e_abs = float(np.sum(post[off] * np.abs(nodes[:, None] - nodes[None, :])[off]))
    g, gw = np.polynomial.legendre.leggauss(order)
    g, gw = 0.5 * (g + 1.0), 0.5 * gw
    XI, ETA = np.meshgrid(g, g, indexing="ij")
    WW = np.outer(gw, gw)
    h = (pb - pa)[:, None, None]
    t = pa[:, None, None] + h * XI
    s_ = pa[:, None, None] + h * XI * ETA
    wt = h * h * XI * WW
    lj = _log_joint_k2(s_, t, x)
    e_abs += float(2.0 * np.sum(wt * (t - s_) * np.exp(lj - logz)))
    return float(logz), 0.5 * (e_sum - e_abs), 0.5 * (e_sum + e_abs)


def log_marginal_k2(data=None, inner_width=0.25, outer_width=5.0, order=10) -> float:
    """log p(data | k=2) by 2-D tensor-product composite Gauss-Legendre quadrature."""
    key = None if data is None else tuple(map(float, data))
    return _k2_grid(key, inner_width, outer_width, order)[0]


def posterior_mean_sorted_mu_k2(data=None, inner_width=0.25, outer_width=5.0, order=10):
    """(E[min(mu1,mu2) | k=2, data], E[max(mu1,mu2) | k=2, data]) by 2-D quadrature."""
    key = None if data is None else tuple(map(float, data))
    _, a, b = _k2_grid(key, inner_width, outer_width, order)
    return a, b


def _enumerate_assignments(x):
    n = len(x)
    if n > 24:
        raise ValueError("enumeration is only feasible for n <= 24")
    idx = np.arange(1 << n, dtype=np.int64)
    m = np.zeros(1 << n)
    S = np.zeros(1 << n)
    Q = np.zeros(1 << n)
    for i in range(n):
        bit = ((idx >> i) & 1).astype(float)
        m += bit
        S += bit * x[i]
        Q += bit * x[i] ** 2
    return m, S, Q


def log_marginal_k2_enumeration(data=None) -> float:
    """Exact closed form for log p(data | k=2): sum over all 2^n assignments z of
    (1/2)^n * G(group 1) * G(group 2), G = Gaussian group marginal.  O(2^n)."""
    x = _x(data)
    n = len(x)
    m, S, Q = _enumerate_assignments(x)
    terms = (_log_group_marginal(m, S, Q)
             + _log_group_marginal(n - m, x.sum() - S, np.sum(x * x) - Q))
    return float(logsumexp(terms) - n * math.log(2.0))


def posterior_mean_sorted_mu_k2_enumeration(data=None):
    """Exact (E[min mu | k=2], E[max mu | k=2]) by enumerating assignments: given
    z, mu1 and mu2 are independent Gaussians N(tau^2 S/(1+m tau^2), tau^2/(1+m tau^2)),
    and E[max] of two independent Gaussians is Clark's formula
    m1 Phi(al) + m2 Phi(-al) + th phi(al), th^2 = v1 + v2, al = (m1 - m2)/th."""
    from scipy.stats import norm
    x = _x(data)
    n = len(x)
    tau2 = PRIOR_STD ** 2
    m, S, Q = _enumerate_assignments(x)
    S2, Q2, m2 = x.sum() - S, np.sum(x * x) - Q, n - m
    logw = _log_group_marginal(m, S, Q) + _log_group_marginal(m2, S2, Q2)
    w = np.exp(logw - logsumexp(logw))
    mu_a, v_a = tau2 * S / (1 + m * tau2), tau2 / (1 + m * tau2)
    mu_b, v_b = tau2 * S2 / (1 + m2 * tau2), tau2 / (1 + m2 * tau2)
    th = np.sqrt(v_a + v_b)
    al = (mu_a - mu_b) / th
    e_max = mu_a * norm.cdf(al) + mu_b * norm.cdf(-al) + th * norm.pdf(al)
    e_sum = mu_a + mu_b
    emax = float(np.sum(w * e_max))
    return float(np.sum(w * e_sum)) - emax, emax


def posterior_k2(data=None) -> float:
    """P(k = 2 | data), prior P(k=1) = P(k=2) = 1/2."""
    d = log_marginal_k1(data) - log_marginal_k2(data)
    return float(1.0 / (1.0 + math.exp(d)))


if __name__ == "__main__":
    x = _x()
    print(f"n = {len(x)}, mean = {x.mean():.6f}")
    l1, l2 = log_marginal_k1(), log_marginal_k2()
    print(f"log p(DATA | k=1)            = {l1:.10f}   (closed form {log_marginal_k1_closed_form():.10f})")
    print(f"log p(DATA | k=2)            = {l2:.10f}   (enumeration {log_marginal_k2_enumeration():.10f})")
    print(f"P(k=2 | DATA)                = {posterior_k2():.10f}")
    print(f"E[mu_1 | k=1, DATA]          = {posterior_mean_mu_k1():.10f}")
    a, b = posterior_mean_sorted_mu_k2()
    ae, be = posterior_mean_sorted_mu_k2_enumeration()
    print(f"E[min mu | k=2], E[max mu | k=2] = {a:.10f}, {b:.10f}")
    print(f"  (enumeration)                  = {ae:.10f}, {be:.10f}")
