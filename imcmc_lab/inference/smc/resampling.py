"""Resampling: ancestor indices drawn in proportion to particle weights.

``resample(log_weights, n, method)`` returns ``n`` ancestor indices (a NumPy int array)
such that index ``i`` appears ``n * W_i`` times in expectation, ``W`` the normalised
weights. Random numbers come from torch's generator, so ``torch.manual_seed`` fixes a
run of the whole engine. The schemes (Douc, Cappé and Moulines, "Comparison of
resampling schemes for particle filtering", 2005):

==============  ==============================================================
multinomial     ``n`` independent draws (needed by conditional SMC's proof)
stratified      one uniform in each of the ``n`` strata ``[k/n, (k+1)/n)``
systematic      one uniform, shifted by ``k/n``: at least ``floor(n W_i)`` copies
residual        ``floor(n W_i)`` copies, the remainder multinomially
==============  ==============================================================
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["resample", "resample_weights", "normalized_weights", "log_sum_exp", "log_sum_exp_and_ess", "effective_sample_size", "METHODS"]


def log_sum_exp(log_weights) -> float:
    """``log(sum(exp(log_weights)))``; ``-inf`` when every weight is zero."""
    lw = np.asarray(log_weights, dtype=np.float64)
    top = lw.max() if lw.size else -np.inf
    if not np.isfinite(top):
        return float(top) if top == np.inf else -np.inf
    return float(top + np.log(np.exp(lw - top).sum()))


def normalized_weights(log_weights) -> np.ndarray:
    """Weights that sum to one; a clear error when every weight is zero (or one is NaN)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    if np.isnan(lw).any():
        raise ValueError(f"a particle's log-weight is NaN (particles {np.flatnonzero(np.isnan(lw))[:5].tolist()})")
    total = log_sum_exp(lw)
    if total == -np.inf:
        raise ValueError(
            f"all {lw.size} particles have weight zero (log-weight -inf): the observations are "
            f"impossible under every particle; use more particles or check the observations.")
    if total == np.inf:
        raise ValueError("a particle has log-weight +inf; check the model's densities")
    return np.exp(lw - total)


def effective_sample_size(log_weights) -> float:
    """``1 / sum(W_i^2)`` of the normalised weights: between 1 and the number of particles."""
    w = normalized_weights(log_weights)
    return float(1.0 / np.dot(w, w))


def log_sum_exp_and_ess(log_weights) -> tuple:
    """``(log_sum_exp, effective_sample_size, normalised weights or None)`` with one ``exp``
    pass; the ESS is 0 when every weight is zero (the errors of :func:`normalized_weights`
    otherwise)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    top = lw.max()
    if not np.isfinite(top):
        total = log_sum_exp(lw)
        return total, (effective_sample_size(lw) if total > -np.inf else 0.0), None
    e = np.exp(lw - top)
    s = e.sum()
    w = e / s
    return float(top + np.log(s)), float(1.0 / np.dot(w, w)), w


def _uniforms(n: int) -> np.ndarray:
    return torch.rand(n, dtype=torch.float64).numpy()


def _inverse_cdf(weights, points) -> np.ndarray:
    """Index of the cumulative-weight interval each (sorted or not) point in [0, 1) falls in."""
    cumulative = np.cumsum(weights)
    cumulative[-1] = 1.0                  # guard against rounding: every point lands somewhere
    return np.searchsorted(cumulative, points, side="right").astype(np.int64)


def _multinomial(weights, n):
    return _inverse_cdf(weights, _uniforms(n))


def _stratified(weights, n):
    return _inverse_cdf(weights, (np.arange(n) + _uniforms(n)) / n)


def _systematic(weights, n):
    return _inverse_cdf(weights, (np.arange(n) + _uniforms(1)[0]) / n)


def _residual(weights, n):
    copies = np.floor(n * weights).astype(np.int64)
    deterministic = np.repeat(np.arange(len(weights)), copies)
    rest = n - int(copies.sum())
    if rest == 0:
        return deterministic
    remainder = n * weights - copies
    extra = _multinomial(remainder / remainder.sum(), rest)
    return np.concatenate([deterministic, extra])


METHODS = {"multinomial": _multinomial, "stratified": _stratified,
           "systematic": _systematic, "residual": _residual}


def resample(log_weights, n: int | None = None, method: str = "systematic") -> np.ndarray:
    """``n`` ancestor indices (default: as many as there are weights), drawn by ``method``
    (``"multinomial"``, ``"systematic"``, ``"stratified"`` or ``"residual"``) in proportion
    to ``exp(log_weights)``. The indices come out sorted except for residual's remainder."""
    if method not in METHODS:       # before the weights' errors
        raise ValueError(f"unknown resampling method {method!r}; choose one of {', '.join(METHODS)}")
    return resample_weights(normalized_weights(log_weights), n, method)


def resample_weights(weights, n: int | None = None, method: str = "systematic") -> np.ndarray:
    """:func:`resample` from normalised ``weights``."""
    if method not in METHODS:
        raise ValueError(f"unknown resampling method {method!r}; choose one of {', '.join(METHODS)}")
    n = len(weights) if n is None else int(n)
    if n < 1:
        raise ValueError(f"resample: n must be a positive number of particles, got {n}")
    return METHODS[method](weights, n)
