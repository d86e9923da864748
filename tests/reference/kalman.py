"""Exact answers for the sequential examples, in plain NumPy (independent of the engine).

``kalman(ys, a, sigma, noise)``: log marginal likelihood, and smoothed means and variances
(Rauch-Tung-Striebel) of ``x_0 ~ N(0, sigma^2)``, ``x_t = a x_{t-1} + N(0, sigma^2)``,
``y_t ~ N(x_t, noise^2)``. ``forward_backward(ys, initial, transition, emission)``: log
marginal likelihood and smoothed state probabilities of a discrete HMM.
"""

import numpy as np


def kalman(ys, a=0.9, sigma=1.0, noise=0.5):
    ys = np.asarray(ys, dtype=float)
    T = len(ys)
    q, r = sigma ** 2, noise ** 2
    m_pred, p_pred = np.zeros(T), np.zeros(T)
    m_filt, p_filt = np.zeros(T), np.zeros(T)
    log_ml, m, p = 0.0, 0.0, 0.0
    for t in range(T):
        mp, pp = a * m, a * a * p + q
        s = pp + r
        log_ml += -0.5 * (np.log(2 * np.pi * s) + (ys[t] - mp) ** 2 / s)
        k = pp / s
        m, p = mp + k * (ys[t] - mp), (1 - k) * pp
        m_pred[t], p_pred[t], m_filt[t], p_filt[t] = mp, pp, m, p
    m_smooth, p_smooth = m_filt.copy(), p_filt.copy()
    for t in range(T - 2, -1, -1):
        g = p_filt[t] * a / p_pred[t + 1]
        m_smooth[t] = m_filt[t] + g * (m_smooth[t + 1] - m_pred[t + 1])
        p_smooth[t] = p_filt[t] + g * g * (p_smooth[t + 1] - p_pred[t + 1])
    return log_ml, m_smooth, p_smooth


def forward_backward(ys, initial, transition, emission):
    initial, transition, emission = (np.asarray(x, dtype=float) for x in (initial, transition, emission))
    T, K = len(ys), len(initial)
    alpha, scale = np.zeros((T, K)), np.zeros(T)
    prior = initial
    for t, y in enumerate(ys):
        joint = prior * emission[:, y]
        scale[t] = joint.sum()
        alpha[t] = joint / scale[t]
        prior = alpha[t] @ transition
    beta = np.ones((T, K))
    for t in range(T - 2, -1, -1):
        beta[t] = transition @ (emission[:, ys[t + 1]] * beta[t + 1]) / scale[t + 1]
    posterior = alpha * beta
    return float(np.log(scale).sum()), posterior / posterior.sum(axis=1, keepdims=True)


def lds_log_likelihood(ys, C, omegas, qs, r, x_init=(1.0, 0.0)):
    """Log p(y_0..y_{T-1} | omega, q) of the 2-D rotation model ``x_t ~ N(A(omega) x_{t-1}, q I)``
    (``x_{-1} = x_init``), ``y_t ~ N(C x_t, r I)``, by a Kalman filter vectorised over the
    parameter pairs ``(omegas[k], qs[k])``."""
    ys, C = np.asarray(ys, dtype=float), np.asarray(C, dtype=float)
    omegas, qs = np.asarray(omegas, dtype=float), np.asarray(qs, dtype=float)
    K, D = len(omegas), C.shape[0]
    c, s = np.cos(omegas), np.sin(omegas)
    A = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)             # K x 2 x 2
    m = np.tile(np.asarray(x_init, dtype=float), (K, 1))
    P = np.zeros((K, 2, 2))
    eye2, eyeD = np.eye(2), np.eye(D)
    log_l = np.zeros(K)
    for y in ys:
        m = np.einsum("kij,kj->ki", A, m)
        P = A @ P @ A.transpose(0, 2, 1) + qs[:, None, None] * eye2
        S = C @ P @ C.T + r * eyeD
        resid = y - m @ C.T
        S_inv = np.linalg.inv(S)
        log_l -= 0.5 * (np.linalg.slogdet(S)[1] + np.einsum("ki,kij,kj->k", resid, S_inv, resid)
                        + D * np.log(2 * np.pi))
        gain = P @ C.T @ S_inv                                                  # K x 2 x D
        m = m + np.einsum("kij,kj->ki", gain, resid)
        P = P - gain @ C @ P
    return log_l


def lds_parameter_posterior_means(ys, C, r, T_total, n_grid=400):
    """Posterior means of ``omega = g pi / T_total`` and ``q`` for the LDS of
    ``imcmc_lab.examples.sequential.lds`` (``g ~ gamma(10, rate 2.5)``, ``q ~ gamma(10, rate 100)``)
    by midpoint quadrature on a ``n_grid`` x ``n_grid`` grid of (g, q) covering the prior's mass."""
    from scipy import stats
    g = (np.arange(n_grid) + 0.5) * (14.0 / n_grid)
    q = (np.arange(n_grid) + 0.5) * (0.4 / n_grid)
    G, Q = (a.ravel() for a in np.meshgrid(g, q, indexing="ij"))
    log_post = (stats.gamma.logpdf(G, 10.0, scale=1 / 2.5) + stats.gamma.logpdf(Q, 10.0, scale=1 / 100.0)
                + lds_log_likelihood(ys, C, G * np.pi / T_total, Q, r))
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    return float(w @ (G * np.pi / T_total)), float(w @ Q)
