"""Monte Carlo error for tests: batch-means standard errors of chain averages, and a
statistic of a seeded chain."""

import numpy as np
import torch


def batch_means_se(values, n_batches: int = 25) -> float:
    """Standard error of the mean of an autocorrelated chain, by batch means."""
    x = np.asarray(values, dtype=float)
    size = len(x) // n_batches
    if size < 2:
        raise ValueError("chain too short for batch means")
    means = x[: size * n_batches].reshape(n_batches, size).mean(axis=1)
    return float(means.std(ddof=1) / np.sqrt(n_batches))


def assert_close_to(values, exact, z: float = 4.0, label: str = "estimate"):
    """Assert that the chain average of ``values`` is within ``z`` batch-means SEs of ``exact``."""
    x = np.asarray(values, dtype=float)
    estimate, se = float(x.mean()), batch_means_se(x)
    assert se > 0, f"{label}: the chain did not move (zero Monte Carlo error)"
    assert abs(estimate - exact) <= z * se, (
        f"{label}: chain estimate {estimate:.5f} differs from the exact {exact:.5f} by "
        f"{abs(estimate - exact) / se:.1f} Monte Carlo standard errors (SE {se:.5f})"
    )
    return estimate, se


def chain_statistic(kernel, trace, n, stat, seed):
    """``stat(trace)`` after each of ``n`` steps of ``kernel`` from ``trace``, seeded by ``seed``."""
    torch.manual_seed(seed)
    out = []
    for _ in range(n):
        trace, _ = kernel(trace)
        out.append(stat(trace))
    return out
