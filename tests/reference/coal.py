"""Exact-up-to-discretisation reference answers for the coal-mining-disaster
change-point model (Green 1995) as written in Stochaskell.

Source: Sec. 5.2 and Fig. 3 of *Reversible Jump Probabilistic Programming*
(David A. Roberts, Marcus Gallagher and Thomas Taimre, AISTATS 2019;
Stochaskell).  The constants (lam = 3, nMax = 30, a = 1, b = 200) are in
Fig. 3; the interval length t = 40907 and the data conversion are taken
from the Stochaskell source that accompanies the paper
(davidar/stochaskell, stochaskell/app/rj/Main.hs: ``mainCoal`` uses
``let t = 40907`` and ``coalData' = subtract (head days) <$> days where days =
[365.2425 * yr | yr <- coalData]``).
Data: the package's ``imcmc_lab/examples/data/coal_disasters.json``, key "dates"
(191 decimal years, 1851.203 ... 1962.220).

Data and interval
-----------------
    y_i = 365.2425 * date_i - 365.2425 * date_1            (days; y_1 = 0,
                                                            y_191 = 40548.1)
    observation window [0, L] with L = 40907 days.
L = 40907 is Green's (1995) window length (112 years = 1 Jan 1851 .. 31 Dec
1962 in days, 112 * 365.2425 = 40907.2); the paper text only calls it ``t``,
and the accompanying code uses t = 40907 with the data shifted so that the
FIRST EVENT is at day 0.  So the window used here (and by Stochaskell) ends
358.9 days after the last event, whereas in Green's original calendar window
it would start ~74 days before the first event.  Use ``L=`` to change it.

Model (exactly what the engine's model must be)
-----------------------------------------------
Stochaskell's ``gamma a b`` is shape a, RATE b (checked in the source).

    n   ~ Poisson(3) truncated to {1, ..., 30}:
              P(n) = (3^n / n!) / sum_{j=1}^{30} 3^j / j!,   n = 1..30
          (``truncated 1 nMax (poisson lam)``; n = 0 has prior probability 0.
           Green's original allowed n = 0; pass ``n_min=0`` for that variant.)
    s'  = the 2n+1 order statistics of iid Uniform(0, L) draws
    s_i = s'_(2i), i = 1..n  (even-numbered order statistics), so that
          p(s_1..s_n | n) = (2n+1)! / L^(2n+1) * prod_{j=0}^{n} (s_{j+1} - s_j)
          on 0 < s_1 < ... < s_n < L, with s_0 = 0, s_{n+1} = L
    g_j ~ Gamma(shape 1, rate 200), j = 1..n+1, iid   (= Exponential(rate 200),
          mean 0.005 events/day); a = 1 and b = 200 are FIXED constants
          in Fig. 3 / the source (no hyperprior on b), so heights are
          conjugate and are integrated out exactly)
    y   ~ Poisson process on [0, L] with rate(x) = g_j for s_{j-1} <= x < s_j:
          log p(y | n, s, g) = sum_i log rate(y_i) - sum_j g_j (s_j - s_{j-1})
          (an event at exactly s_j belongs to segment j+1, matching
          ``findSortedInsertIndex``; irrelevant with probability 1).

Method
------
Heights are integrated out analytically (Poisson-Gamma conjugacy): a segment
[u, v) with c events and width w = v - u contributes
    M(c, w) = b^a Gamma(a + c) / (Gamma(a) (b + w)^(a + c)),
so p(y, s | n) = (2n+1)!/L^(2n+1) prod_j (s_{j+1}-s_j) M(c_j, s_{j+1}-s_j), a
product over consecutive change points.  The integral over
0 < s_1 < ... < s_n < L is done by a forward/backward dynamic programme over
quadrature nodes: [0, L] is cut at a uniform grid of G cells AND at every
distinct event time (so segment counts are constant inside each cell and the
integrand is smooth there), with an ``order``-point Gauss-Legendre rule per
cell.  Ordered tuples of distinct nodes approximate the ordered integral; the
only discretisation errors are the quadrature error and the neglected region
where two change points share a cell (both O(cell width^2) relative, because
the (s_{j+1} - s_j) factor vanishes on the diagonal).  To keep all numbers in
floating-point range, each segment factor is multiplied by the telescoping
factor exp(phi(u) - phi(v)), phi(x) = C(x) log rho - rho x (C = number of events
before x, rho = 191/L), which leaves every path product unchanged up to the
constant exp(phi(L) - phi(0)); forward/backward vectors are renormalised at every
step with their log scales kept.  E[rate(t) | y] is obtained from the posterior
probability of every candidate segment [u, v) (forward x backward x prior
weights) times its posterior mean height (a + c)/(b + w); the query times t are
added as extra cell boundaries so that "change point before t" is integrated
without a first-order node-rounding error.

Defaults: G = 1000 uniform cells, 2-point Gauss-Legendre per cell (~2380
nodes), ~1.5 s and ~0.4 GB for P(n | y).  Discretisation error (checked in
test_references.py): total-variation distance between G = 500 and G = 1000 is
~4e-6, between 1-point (midpoint) and 2-point rules at G = 1000 ~2.5e-4; log p(y
| n = 1) agrees with adaptive scipy quadrature to ~1e-6.

Reference quantities
--------------------
``posterior_num_changepoints()`` -> array P(n = j | y), j = 0..30 (entry 0 is 0
                                    for the default n_min = 1)
``posterior_mean_rate(t_grid)``  -> E[rate(t) | y] (events/day) at times t (days)
``log_evidence()``               -> log p(y) (Poisson-process density w.r.t. the
                                    unit-rate process: prod rate(y_i) exp(-area))
``log_marginal_given_n(n)``      -> log p(y | n)
``segment_coverage(t_grid)``     -> must be 1 (check of the segment posterior)
"""
from __future__ import annotations

import functools
import json
import math

from importlib import resources

import numpy as np
from scipy.special import gammaln, logsumexp

DATA_PATH = str(resources.files("imcmc_lab.examples") / "data" / "coal_disasters.json")
DAYS_PER_YEAR = 365.2425
L_DEFAULT = 40907.0
LAM, N_MAX, ALPHA, BETA = 3.0, 30, 1.0, 200.0
N_MIN_DEFAULT = 1
G_DEFAULT = 1000
ORDER_DEFAULT = 2


@functools.lru_cache(maxsize=None)
def load_event_days(path: str = DATA_PATH) -> tuple:
    """Event times in days: 365.2425 * date - 365.2425 * date_1 (first event at 0)."""
    with open(path) as fh:
        dates = json.load(fh)["dates"]
    days = [DAYS_PER_YEAR * d for d in dates]
    return tuple(x - days[0] for x in days)


def log_prior_n(n_min: int = N_MIN_DEFAULT, n_max: int = N_MAX, lam: float = LAM) -> np.ndarray:
    """log P(n), n = 0..n_max, Poisson(lam) truncated to {n_min..n_max} (-inf outside)."""
    n = np.arange(n_max + 1)
    lp = n * math.log(lam) - gammaln(n + 1.0)
    lp[n < n_min] = -np.inf
    return lp - logsumexp(lp[n >= n_min])


def _log_segment_marginal(c, w, a=ALPHA, b=BETA):
    """log int Gamma(g; a, rate b) g^c exp(-g w) dg."""
    return a * math.log(b) - math.lgamma(a) + gammaln(a + c) - (a + c) * np.log(b + w)


def _nodes(y, L, G, order, extra_cuts=()):
    """Quadrature nodes/weights on (0, L): cells cut at a uniform G-grid, at
    every distinct event time and at any extra cut points."""
    pts = np.concatenate([np.asarray(y, dtype=float), np.asarray(extra_cuts, dtype=float)])
    cuts = np.unique(np.concatenate([np.linspace(0.0, L, G + 1), pts[(pts > 0) & (pts < L)]]))
    a, b = cuts[:-1], cuts[1:]
    keep = b - a > 1e-9 * L
    a, b = a[keep], b[keep]
    t, wq = np.polynomial.legendre.leggauss(order)
    half, mid = 0.5 * (b - a), 0.5 * (a + b)
    nodes = (mid[:, None] + half[:, None] * t).ravel()
    weights = (half[:, None] * wq).ravel()
    return nodes, weights


class _CoalDP:
    """Forward/backward DP over positions p_0 = 0, p_1..p_N (nodes), p_{N+1} = L."""

    def __init__(self, y, L, G, order, n_min, n_max, lam, a, b, likelihood=True, extra_cuts=()):
        y = np.sort(np.asarray(y, dtype=float))
        self.L, self.n_min, self.n_max, self.a, self.b = L, n_min, n_max, a, b
        nodes, weights = _nodes(y, L, G, order, extra_cuts)
        self.pos = np.concatenate([[0.0], nodes, [L]])
        self.logw = np.concatenate([[0.0], np.log(weights / L), [0.0]])  # weights in x = p/L units
        cnt = np.searchsorted(y, self.pos, side="left").astype(float)     # C(x) = #{y_i < x}
        cnt[0] = 0.0
        cnt[-1] = np.sum(y < L)
        self.cnt = cnt
        width = self.pos[None, :] - self.pos[:, None]
        valid = width > 0
        wsafe = np.where(valid, width, 1.0)
        c = cnt[None, :] - cnt[:, None]
        if likelihood:
            rho = max(cnt[-1], 1.0) / L
            phi = cnt * math.log(rho) - rho * self.pos
            self.log_const = phi[-1] - phi[0]
            logF = (np.log(wsafe / L) + _log_segment_marginal(c, wsafe, a, b)
                    - phi[None, :] + phi[:, None])
        else:  # prior-only check: segment factor = (s_{j+1} - s_j)/L
            self.log_const = 0.0
            logF = np.log(wsafe / L)
        logF[~valid] = -np.inf
        self.F = np.exp(logF)
        self.logF_first_row = logF[0].copy()      # segments starting at 0
        self.logF_last_col = logF[:, -1].copy()   # segments ending at L
        del logF, width, wsafe, c, valid
        self._forward_backward()
        lpn = log_prior_n(n_min, n_max, lam)
        n = np.arange(n_max + 1)
        # c_n = P(n) (2n+1)! in x = p/L units (the L^-(2n+1) is absorbed by x-units)
        self.log_cn = lpn + gammaln(2 * n + 2.0)
        self.log_joint_n = self.log_cn + self.logZ[: n_max + 1]
        self.log_evidence_x = logsumexp(self.log_joint_n)

    def _step(self, vec_scaled, forward):
        # vec is exp(log) with max 1; returns new log vector
        if forward:
            s = vec_scaled @ self.F
        else:
            s = self.F @ vec_scaled
        with np.errstate(divide="ignore"):
            return np.log(s)

    def _forward_backward(self):
        P = len(self.pos)
        K = self.n_max + 1
        logA = np.full((K + 1, P), -np.inf)
        logA[0, 0] = 0.0
        interior = np.zeros(P, bool)
        interior[1:-1] = True
        for k in range(1, K + 1):
            prev = logA[k - 1]
            m = prev.max()
            new = self._step(np.exp(prev - m), True) + m + self.logw
            new[~interior] = -np.inf
            logA[k] = new
        logB = np.full((K + 1, P), -np.inf)   # B'_m(v)
        logB[0, -1] = 0.0
        for mm in range(1, K + 1):
            prev = logB[mm - 1]
            m = prev.max()
            new = self._step(np.exp(prev - m), False) + m + self.logw
            new[~interior] = -np.inf
            logB[mm] = new
        self.logA, self.logB = logA, logB
        # Z_n = sum_u A_n(u) f(u, L) = sum_v f(0, v) B'_n(v)  (x-units, telescoped)
        self.logZ = np.array([logsumexp(logA[n] + self.logF_last_col) for n in range(K)])
        self.logZ_backward = np.array([logsumexp(self.logF_first_row + logB[n]) for n in range(K)])

    # ------------------------------------------------------------------
    def posterior_n(self):
        return np.exp(self.log_joint_n - self.log_evidence_x)

    def log_marginal_given_n(self, n):
        """log p(y | n) in days units (integral over s and g)."""
        return float(self.logZ[n] + gammaln(2 * n + 2.0) + self.log_const)

    def _erate(self):
        """Posterior mean height (a + c)/(b + w) of every candidate segment."""
        width = self.pos[None, :] - self.pos[:, None]
        c = self.cnt[None, :] - self.cnt[:, None]
        return np.where(width > 0, (self.a + c) / (self.b + np.maximum(width, 0.0)), 0.0)

    def segment_posterior(self):
        """P[u, v] = posterior probability that [p_u, p_v) is a segment (u < v)."""
        K = self.n_max + 1
        sA = self.logA.max(axis=1)
        sB = self.logB.max(axis=1)
        At = np.exp(self.logA[:K] - sA[:K, None])        # (K, P)
        Bt = np.exp(self.logB[:K] - sB[:K, None])
        kk, mm = np.meshgrid(np.arange(K), np.arange(K), indexing="ij")
        nn = kk + mm
        logG = np.full((K, K), -np.inf)
        ok = nn <= self.n_max
        logG[ok] = self.log_cn[nn[ok]] + sA[kk[ok]] + sB[mm[ok]] - self.log_evidence_x
        Gm = np.exp(logG)
        H = At.T @ (Gm @ Bt)                               # (P, P)
        H *= self.F
        return H

    def posterior_mean_rate(self, t):
        R = self.segment_posterior()
        cover = R.copy()
        R *= self._erate()
        # Q[i, j] = sum_{u <= i} sum_{v >= j} R[u, v]
        def corner(M):
            M = np.cumsum(M, axis=0)
            return np.cumsum(M[:, ::-1], axis=1)[:, ::-1]
        t = np.atleast_1d(np.asarray(t, dtype=float))
        if np.any((t < 0) | (t > self.L)):
            raise ValueError("t must lie in [0, L]")
        idx = np.searchsorted(self.pos, t, side="right")      # u in [0, idx-1], v in [idx, P-1]
        idx = np.clip(idx, 1, len(self.pos) - 1)
        Qr = corner(R)
        Qc = corner(cover)
        return Qr[idx - 1, idx], Qc[idx - 1, idx]


@functools.lru_cache(maxsize=4)
def _dp(G=G_DEFAULT, order=ORDER_DEFAULT, n_min=N_MIN_DEFAULT, L=L_DEFAULT, likelihood=True,
        extra_cuts=()):
    return _CoalDP(load_event_days(), L, G, order, n_min, N_MAX, LAM, ALPHA, BETA, likelihood,
                   extra_cuts)


def posterior_num_changepoints(G=G_DEFAULT, order=ORDER_DEFAULT, n_min=N_MIN_DEFAULT, L=L_DEFAULT) -> np.ndarray:
    """P(n = j | y) for j = 0..30 (numpy array of length 31)."""
    return _dp(G, order, n_min, L).posterior_n()


def log_evidence(G=G_DEFAULT, order=ORDER_DEFAULT, n_min=N_MIN_DEFAULT, L=L_DEFAULT) -> float:
    """log p(y) = log sum_n P(n) int p(s|n) prod_j M(c_j, w_j) ds (days units)."""
    dp = _dp(G, order, n_min, L)
    # Substituting s = L x: (2n+1)!/L^(2n+1) ds * prod (s_{j+1}-s_j) = (2n+1)! dx *
    # prod (x_{j+1}-x_j), which is what the DP integrates (weights w/L, segment
    # factors (v-u)/L); only the telescoping constant has to be added back.
    return float(dp.log_evidence_x + dp.log_const)


def log_marginal_given_n(n, G=G_DEFAULT, order=ORDER_DEFAULT, L=L_DEFAULT) -> float:
    """log p(y | n) = log int p(s | n) prod_j M(c_j, w_j) ds for a fixed n."""
    return _dp(G, order, N_MIN_DEFAULT, L).log_marginal_given_n(n)


def posterior_mean_rate(t_grid, G=G_DEFAULT, order=ORDER_DEFAULT, n_min=N_MIN_DEFAULT, L=L_DEFAULT) -> np.ndarray:
    """E[rate(t) | y] in events per day at the given times t (days, in [0, L]).

    The times are added as extra cell boundaries of the quadrature grid, so the
    posterior probability that a change point lies before t is integrated
    exactly up to the (second-order) quadrature error."""
    t = np.atleast_1d(np.asarray(t_grid, dtype=float))
    return _dp(G, order, n_min, L, True, tuple(np.unique(t).tolist())).posterior_mean_rate(t)[0]


def segment_coverage(t_grid, G=G_DEFAULT, order=ORDER_DEFAULT, n_min=N_MIN_DEFAULT, L=L_DEFAULT) -> np.ndarray:
    """Posterior probability that t lies in some segment (must be 1; a check)."""
    t = np.atleast_1d(np.asarray(t_grid, dtype=float))
    return _dp(G, order, n_min, L, True, tuple(np.unique(t).tolist())).posterior_mean_rate(t)[1]


if __name__ == "__main__":
    import time
    t0 = time.time()
    p = posterior_num_changepoints()
    t1 = time.time()
    y = np.asarray(load_event_days())
    print(f"{len(y)} events, last at day {y[-1]:.1f}; window [0, {L_DEFAULT:g}]")
    print(f"log evidence = {log_evidence():.6f}")
    print("P(n = j | y):")
    for j, pj in enumerate(p):
        if pj > 1e-12 or j < 2:
            print(f"  n = {j:2d}: {pj:.8f}")
    print(f"  E[n | y] = {np.dot(np.arange(len(p)), p):.6f}")
    years = np.array([1851.5, 1860, 1870, 1880, 1885, 1890, 1895, 1900, 1920, 1940, 1960])
    t = (years - 1851.203) * DAYS_PER_YEAR
    t = t[(t >= 0) & (t <= L_DEFAULT)]
    r = posterior_mean_rate(t)
    print("E[rate(t) | y]  (per day; per year):")
    for yr, tt, rr in zip(years, t, r):
        print(f"  {yr:7.1f}  t = {tt:8.1f}  {rr:.6e}  {rr * DAYS_PER_YEAR:.4f}")
    print(f"time: {t1 - t0:.2f} s for P(n|y), {time.time() - t0:.2f} s total")
