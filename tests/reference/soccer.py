"""Exact reference answers for the soccer-goals model choice (Poisson vs
negative binomial).

Source: Sec. 5.1 and Fig. 2 of
*Reversible Jump Probabilistic Programming* (David A. Roberts, Marcus
Gallagher and Thomas Taimre, AISTATS 2019; Stochaskell), following Green & Hastie (2009, Sec. 3.1).
Data: the package's ``imcmc_lab/examples/data/soccer_goals.json``, key "goals"
(n = 1140 games, sum = 2877 goals).

Model (exactly what the engine's model must be)
-----------------------------------------------
Stochaskell conventions (checked in the Stochaskell source,
Data/Random/Distribution/Abstract.hs): ``gamma a b`` is shape a, RATE b
(density b^a x^(a-1) e^(-b x) / Gamma(a), mean a/b); ``negBinomial a b`` has pmf
Gamma(a+y)/(Gamma(a) y!) (b/(1+b))^a (1/(1+b))^y (Stan's neg_binomial(alpha,
beta); mean a/b).

    model indicator:  k ~ bernoulli(0.5);   P(model 1) = P(model 2) = 1/2

    Model 1 (soccer1):
        lam ~ Gamma(shape 25, rate 10)             (mean 2.5, sd 0.5)
        y_i ~ Poisson(lam),  i = 1..n, iid

    Model 2 (soccer2):
        lam ~ Gamma(shape 25, rate 10)             (same prior as model 1)
        kap ~ Gamma(shape 1, rate 10)              (= Exponential(rate 10), mean 0.1)
        a = 1/kap,  b = a/lam
        y_i ~ negBinomial(a, b),  i = 1..n, iid
            i.e. mean lam, variance lam (1 + kap lam)   (kap = overdispersion;
            kap -> 0 recovers Poisson(lam)); equivalently
            y_i | g_i ~ Poisson(g_i),  g_i ~ Gamma(shape 1/kap, rate 1/(kap lam)).

    In the NB(r, p) parametrisation used by the engine's ``neg_binomial(r, p)``
    (number of failures before the r-th success, success probability p,
    pmf C(y+r-1, y) p^r (1-p)^y, mean r(1-p)/p):
            r = 1/kap,      p = b/(1+b) = 1/(1 + kap*lam).

    Parameters of the two models are separate (lam is not shared in the prior;
    each model draws its own).  The trans-dimensional state is (1, lam) or
    (2, lam, kap).

Reference quantities
--------------------
``log_marginal_model1()``  log p(y | M1) (pmf of the data, including the
                           -sum log y_i! terms); closed form by Poisson-Gamma
                           conjugacy, also computed by 1-D quadrature
                           (``log_marginal_model1_quadrature``):
        log p(y|M1) = 25 log 10 - lgamma(25) + lgamma(25 + S) - (25 + S) log(10 + n)
                      - sum_i log y_i!,            S = sum_i y_i.
``log_marginal_model2()``  log p(y | M2) by 2-D tensor-product composite
                           Gauss-Legendre quadrature over (lam, kap)
                           (kap on [0, 1.5], lam on [1.6, 3.6]; the integrand is
                           below 1e-100 of its maximum outside), cross-checked
                           with scipy.integrate.dblquad in the tests.
``posterior_model1()``     P(M1 | y) = 1 / (1 + exp(lm2 - lm1)).
``posterior_mean_lambda_model1()``  E[lam | M1, y] = (25 + S)/(10 + n).
``posterior_means_model2()``        (E[lam | M2, y], E[kap | M2, y]).

Comparison with the paper
-------------------------
The exact value is P(M1 | y) = 0.70711 (0.7071073856; log Bayes factor
log p(y|M1) - log p(y|M2) = 0.88138).  Roberts et al. report 70.76 % from a
single 5000-iteration RJMCMC run (started in model 1, HMC within-model
moves).  The difference, 0.0005, is far inside the Monte Carlo error of such a
run (the binomial standard error for 5000 *independent* draws is already
0.0064, and the RJ chain's model indicator is autocorrelated), so the exact
value agrees with the paper and there is no sign of a prior mismatch.  The
priors above are transcribed from Fig. 2 and agree with Green & Hastie (2009):
lam ~ Gamma(25, 10), kap ~ Gamma(1, 10), shape/rate.  (Reading the second
gamma argument as a SCALE would give lam a prior mean of 250 goals per game,
which is clearly not intended.)  Note that the data file is the "total goals"
series the Stochaskell source uses (n = 1140, sum 2877).
"""
from __future__ import annotations

import functools
import json
import math

from importlib import resources

import numpy as np
from scipy import integrate
from scipy.special import gammaln, logsumexp

DATA_PATH = str(resources.files("imcmc_lab.examples") / "data" / "soccer_goals.json")

LAM_SHAPE, LAM_RATE = 25.0, 10.0      # lam ~ Gamma(shape 25, rate 10)
KAP_SHAPE, KAP_RATE = 1.0, 10.0       # kap ~ Gamma(shape 1, rate 10)
PRIOR_MODEL1 = 0.5                    # k ~ bernoulli(0.5)

LAM_RANGE = (1.6, 3.6)
KAP_RANGE = (0.0, 1.5)


@functools.lru_cache(maxsize=None)
def load_goals(path: str = DATA_PATH) -> tuple:
    with open(path) as fh:
        return tuple(int(v) for v in json.load(fh)["goals"])


def _counts(goals=None):
    y = np.asarray(load_goals() if goals is None else goals, dtype=np.int64)
    vals, cnt = np.unique(y, return_counts=True)
    return y, vals, cnt.astype(float)


def nb_r_p(lam, kap):
    """(r, p) of the engine's NB(r, p) (failures before r-th success) for
    Stochaskell's negBinomial(1/kap, 1/(kap*lam))."""
    lam = np.asarray(lam, dtype=float)
    kap = np.asarray(kap, dtype=float)
    return 1.0 / kap, 1.0 / (1.0 + kap * lam)


def nb_logpmf(y, lam, kap):
    """log NB pmf with mean lam and overdispersion kap, evaluated stably.

    Uses lgamma(y + 1/kap) - lgamma(1/kap) = -y log kap + sum_{j<y} log1p(j kap)
    (y is an integer), which is exact and has a clean kap -> 0 limit
    (Poisson(lam)).  Broadcasts over y, lam, kap.
    """
    y = np.asarray(y, dtype=np.int64)
    lam = np.asarray(lam, dtype=float)
    kap = np.asarray(kap, dtype=float)
    ymax = int(np.max(y)) if y.size else 0
    # sum_{j<y} log1p(j kap), built cumulatively over j
    poch = np.zeros(np.broadcast(y, lam, kap).shape)
    for j in range(1, ymax):
        poch = poch + np.where(y > j, np.log1p(j * kap), 0.0)
    kl = kap * lam
    # -log1p(kap lam)/kap, with the kap -> 0 limit -lam
    with np.errstate(divide="ignore", invalid="ignore"):
        r_logp = np.where(kap > 0, -np.log1p(kl) / np.where(kap > 0, kap, 1.0), -lam)
    return poch - gammaln(y + 1.0) + r_logp + y * np.log(lam) - y * np.log1p(kl)


def _log_gamma_pdf(x, shape, rate):
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore"):
        logx_term = 0.0 if shape == 1.0 else (shape - 1.0) * np.log(x)
    return shape * math.log(rate) + logx_term - rate * x - math.lgamma(shape)


# --------------------------------------------------------------------------
# Model 1
# --------------------------------------------------------------------------
def log_marginal_model1(goals=None) -> float:
    """Closed form log p(y | M1) (Poisson-Gamma conjugacy)."""
    y, _, _ = _counts(goals)
    n, S = len(y), float(y.sum())
    a, b = LAM_SHAPE, LAM_RATE
    return float(a * math.log(b) - math.lgamma(a) + math.lgamma(a + S)
                 - (a + S) * math.log(b + n) - gammaln(y + 1.0).sum())


def _loglik_model1(lam, vals, cnt):
    lam = np.asarray(lam, dtype=float)[..., None]
    return np.sum(cnt * (vals * np.log(lam) - lam - gammaln(vals + 1.0)), axis=-1)


@functools.lru_cache(maxsize=None)
def _model1_quad(goals=None):
    _, vals, cnt = _counts(goals)
    f = lambda lam: float(_log_gamma_pdf(lam, LAM_SHAPE, LAM_RATE) + _loglik_model1(lam, vals, cnt))
    y, _, _ = _counts(goals)
    mode = (LAM_SHAPE - 1 + y.sum()) / (LAM_RATE + len(y))
    shift = f(mode)
    g = lambda lam: math.exp(f(lam) - shift)
    lo, hi = LAM_RANGE
    z0, _ = integrate.quad(g, lo, hi, points=[mode], epsabs=0, epsrel=1e-12, limit=200)
    z1, _ = integrate.quad(lambda l: l * g(l), lo, hi, points=[mode], epsabs=0, epsrel=1e-12, limit=200)
    return shift + math.log(z0), z1 / z0


def log_marginal_model1_quadrature(goals=None) -> float:
    """log p(y | M1) by 1-D adaptive quadrature (check of the closed form)."""
    return _model1_quad(None if goals is None else tuple(goals))[0]


def posterior_mean_lambda_model1(goals=None) -> float:
    """E[lam | M1, y] = (25 + S) / (10 + n) (posterior Gamma(25 + S, 10 + n))."""
    y, _, _ = _counts(goals)
    return float((LAM_SHAPE + y.sum()) / (LAM_RATE + len(y)))


# --------------------------------------------------------------------------
# Model 2
# --------------------------------------------------------------------------
def _loglik_model2(lam, kap, vals, cnt):
    lam = np.asarray(lam, dtype=float)[..., None]
    kap = np.asarray(kap, dtype=float)[..., None]
    return np.sum(cnt * nb_logpmf(vals, lam, kap), axis=-1)


def _composite_gl(edges, order):
    t, w = np.polynomial.legendre.leggauss(order)
    a, b = np.asarray(edges[:-1]), np.asarray(edges[1:])
    half, mid = 0.5 * (b - a), 0.5 * (a + b)
    return ((mid[:, None] + half[:, None] * t).ravel(), (half[:, None] * w).ravel())


@functools.lru_cache(maxsize=None)
def _model2_grid(goals=None, lam_panels=100, kap_fine_panels=100, order=12):
    _, vals, cnt = _counts(goals)
    lam_nodes, lam_w = _composite_gl(np.linspace(*LAM_RANGE, lam_panels + 1), order)
    # fine panels on [0, 0.15] (posterior mass), coarse on [0.15, 1.5]
    kap_edges = np.concatenate([np.linspace(0.0, 0.15, kap_fine_panels + 1),
                                np.linspace(0.15, KAP_RANGE[1], 28)[1:]])
    kap_nodes, kap_w = _composite_gl(kap_edges, order)
    L, K = np.meshgrid(lam_nodes, kap_nodes, indexing="ij")
    logf = (_log_gamma_pdf(L, LAM_SHAPE, LAM_RATE) + _log_gamma_pdf(K, KAP_SHAPE, KAP_RATE)
            + _loglik_model2(L, K, vals, cnt))
    logw = logf + np.log(lam_w)[:, None] + np.log(kap_w)[None, :]
    logz = float(logsumexp(logw))
    post = np.exp(logw - logz)
    return logz, float(np.sum(post * L)), float(np.sum(post * K))


def log_marginal_model2(goals=None, lam_panels=100, kap_fine_panels=100, order=12) -> float:
    """log p(y | M2) by 2-D composite Gauss-Legendre quadrature over (lam, kap)."""
    key = None if goals is None else tuple(goals)
    return _model2_grid(key, lam_panels, kap_fine_panels, order)[0]


def posterior_means_model2(goals=None, lam_panels=100, kap_fine_panels=100, order=12):
    """(E[lam | M2, y], E[kap | M2, y]) by 2-D quadrature."""
    key = None if goals is None else tuple(goals)
    _, el, ek = _model2_grid(key, lam_panels, kap_fine_panels, order)
    return el, ek


def _scalar_log_joint_model2(lam, kap, vals, cnt):
    """Scalar (pure-Python) log prior x likelihood of model 2, for dblquad."""
    out = (LAM_SHAPE * math.log(LAM_RATE) + (LAM_SHAPE - 1) * math.log(lam) - LAM_RATE * lam
           - math.lgamma(LAM_SHAPE) + KAP_SHAPE * math.log(KAP_RATE) - KAP_RATE * kap
           - math.lgamma(KAP_SHAPE))
    if KAP_SHAPE != 1.0:
        out += (KAP_SHAPE - 1) * math.log(kap)
    kl = kap * lam
    r_logp = -math.log1p(kl) / kap if kap > 0 else -lam
    l1p = math.log1p(kl)
    loglam = math.log(lam)
    poch = 0.0
    j = 0
    for v, c in zip(vals, cnt):
        while j < v:            # poch = sum_{j < v} log1p(j kap); vals are sorted
            poch += math.log1p(j * kap)
            j += 1
        out += c * (poch - math.lgamma(v + 1.0) + r_logp + v * loglam - v * l1p)
    return out


def log_marginal_model2_dblquad(goals=None, epsrel=1e-8) -> float:
    """log p(y | M2) by scipy.integrate.dblquad (adaptive; independent check).

    Box lam in [2.0, 3.1], kap in [0, 0.4]: the integrand is below e^-60 of its
    maximum on and outside the box edges."""
    _, vals, cnt = _counts(goals)
    vals = [int(v) for v in vals]
    cnt = [float(c) for c in cnt]
    el, ek = posterior_means_model2(goals)
    shift = _scalar_log_joint_model2(el, ek, vals, cnt)
    g = lambda kap, lam: math.exp(_scalar_log_joint_model2(lam, kap, vals, cnt) - shift)
    val, _ = integrate.dblquad(g, 2.0, 3.1, 0.0, 0.4, epsabs=0, epsrel=epsrel)
    return shift + math.log(val)


def posterior_model1(goals=None) -> float:
    """P(M1 | y) with prior P(M1) = 1/2."""
    d = log_marginal_model2(goals) - log_marginal_model1(goals)
    d += math.log((1 - PRIOR_MODEL1) / PRIOR_MODEL1)
    return float(1.0 / (1.0 + math.exp(d)))


if __name__ == "__main__":
    y, _, _ = _counts()
    print(f"n = {len(y)}, sum = {y.sum()}, mean = {y.mean():.6f}, var = {y.var(ddof=1):.6f}")
    print(f"log p(y | M1) closed form = {log_marginal_model1():.10f}")
    print(f"log p(y | M1) quadrature  = {log_marginal_model1_quadrature():.10f}")
    print(f"log p(y | M2) GL grid     = {log_marginal_model2():.10f}")
    print(f"P(M1 | y)                 = {posterior_model1():.10f}   (paper, MCMC: 0.7076)")
    print(f"E[lam | M1, y]            = {posterior_mean_lambda_model1():.10f}")
    el, ek = posterior_means_model2()
    print(f"E[lam | M2, y]            = {el:.10f}")
    print(f"E[kap | M2, y]            = {ek:.10f}")
