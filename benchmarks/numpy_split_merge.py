"""The paper's Fig. 1 split/merge kernel written by hand in NumPy: the reference
that ``benchmarks/split_merge.py`` measures the engine against.

Exactly the kernel of :mod:`imcmc_lab.examples.mixture` (model ``gmm``, auxiliary
program ``split_merge_aux``, transform ``split_merge``): the same proposal, the
Richardson & Green (1997) Jacobian derived by hand, and the log joint of the
current state cached between moves, so each move scores only the proposed state.
Nothing here imports the engine.

State: ``(k, mu[k], var[k], w[k])`` as NumPy arrays, clusters 1-based in the
text and 0-based in the arrays.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

LOG_2PI = math.log(2 * math.pi)
ALPHA = 2.0          # dirichlet concentration of the weights


class State:
    __slots__ = ("mu", "var", "w", "log_joint")

    def __init__(self, mu, var, w, log_joint=None):
        self.mu, self.var, self.w, self.log_joint = mu, var, w, log_joint

    @property
    def k(self):
        return len(self.mu)


def log_joint(state, x):
    """log p(k, mu, var, w, x) of the model ``gmm`` (Fig. 1b), with n data points x."""
    k, mu, var, w = state.k, state.mu, state.var, state.w
    if np.any(var <= 0) or np.any(w <= 0):
        return -math.inf
    lp = -1.0 - special.gammaln(k)                                  # poisson_plus_one(1): k - 1 ~ Poisson(1)
    lp += np.sum(-0.5 * (mu / 10.0) ** 2 - math.log(10.0) - 0.5 * LOG_2PI)      # normal(0, 10)
    lp += np.sum(math.log(10.0) - 2.0 * np.log(var) - 10.0 / var)              # inv_gamma(1, 10)
    lp += special.gammaln(ALPHA * k) - k * special.gammaln(ALPHA) + (ALPHA - 1) * np.sum(np.log(w))
    # mixture likelihood: one (n, k) array, log-sum-exp over clusters
    comp = np.log(w) - 0.5 * (np.log(var) + LOG_2PI) - 0.5 * (x[:, None] - mu) ** 2 / var
    m = comp.max(axis=1, keepdims=True)
    lp += float(np.sum(m[:, 0] + np.log(np.exp(comp - m).sum(axis=1))))
    return float(lp)


def log_beta_pdf(u, a, b):
    if not 0.0 < u < 1.0:
        return -math.inf
    return (a - 1) * math.log(u) + (b - 1) * math.log1p(-u) - special.betaln(a, b)


def split(state, j, u1, b2, u3):
    """Split 0-based cluster j into j and a new last cluster; returns (new state, log|J|)."""
    u2 = 2 * b2 - 1
    wj, mu, var = state.w[j], state.mu[j], state.var[j]
    w1, w2 = wj * u1, wj * (1 - u1)
    mu1 = mu - u2 * math.sqrt(var * w2 / w1)
    mu2 = mu + u2 * math.sqrt(var * w1 / w2)
    var1 = u3 * (1 - u2 ** 2) * var * wj / w1
    var2 = (1 - u3) * (1 - u2 ** 2) * var * wj / w2
    w = np.append(state.w, w2)
    w[j] = w1
    new = State(np.append(state.mu, mu2), np.append(state.var, var2), w)
    new.mu[j], new.var[j] = mu1, var1
    # Richardson & Green (1997), eq. (12), times 2 for u2 = 2 b2 - 1
    log_jac = math.log(2 * wj * abs(mu1 - mu2) * var1 * var2
                       / (abs(u2) * (1 - u2 ** 2) * u3 * (1 - u3) * var))
    return new, log_jac


def merge(state, j):
    """Merge 0-based cluster j with the last one; returns (new state, (u1, b2, u3), log|J|)."""
    w1, w2 = state.w[j], state.w[-1]
    mu1, mu2, var1, var2 = state.mu[j], state.mu[-1], state.var[j], state.var[-1]
    w = w1 + w2
    mu = (w1 * mu1 + w2 * mu2) / w
    var = (w1 * (mu1 ** 2 + var1) + w2 * (mu2 ** 2 + var2)) / w - mu ** 2
    u2 = (mu - mu1) / math.sqrt(var * w2 / w1)
    u3 = w1 * var1 / (w * var * (1 - u2 ** 2))
    new = State(state.mu[:-1].copy(), state.var[:-1].copy(), state.w[:-1].copy())
    new.mu[j], new.var[j], new.w[j] = mu, var, w
    log_jac = -math.log(2 * w * abs(mu1 - mu2) * var1 * var2
                        / (abs(u2) * (1 - u2 ** 2) * u3 * (1 - u3) * var))
    return new, (w1 / w, (u2 + 1) / 2, u3), log_jac


def log_q_split(k, u1, b2, u3):
    """log q of a split at a state with k clusters: the choice to split, which cluster, u's."""
    return ((0.0 if k == 1 else math.log(0.5)) - math.log(k)
            + log_beta_pdf(u1, 2, 2) + log_beta_pdf(b2, 2, 2) + log_beta_pdf(u3, 1, 1))


def log_q_merge(k):
    """log q of a merge at a state with k > 1 clusters."""
    return math.log(0.5) - math.log(k - 1)


def log_alpha(state, x, aux):
    """``(log alpha, proposed state)`` for a given auxiliary choice ``aux``:
    ``("split", j, u1, b2, u3)`` or ``("merge", j)`` with 1-based ``j``."""
    k = state.k
    if aux[0] == "split":
        _, j, u1, b2, u3 = aux
        new, log_jac = split(state, j - 1, u1, b2, u3)
        log_q_old, log_q_new = log_q_split(k, u1, b2, u3), log_q_merge(k + 1)
    else:
        new, (u1, b2, u3), log_jac = merge(state, aux[1] - 1)
        log_q_old, log_q_new = log_q_merge(k), log_q_split(k - 1, u1, b2, u3)
    new.log_joint = log_joint(new, x)
    return new.log_joint - state.log_joint + log_q_new - log_q_old + log_jac, new


def sample_aux(state, rng):
    k = state.k
    if k == 1 or rng.random() < 0.5:
        return ("split", int(rng.integers(1, k + 1)), rng.beta(2, 2), rng.beta(2, 2), rng.random())
    return ("merge", int(rng.integers(1, k)))


def move(state, x, rng):
    """One split/merge move: ``(next state, accepted)``."""
    la, new = log_alpha(state, x, sample_aux(state, rng))
    if la >= 0 or math.log(rng.random()) < la:
        return new, True
    return state, False
