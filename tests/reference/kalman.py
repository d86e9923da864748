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
