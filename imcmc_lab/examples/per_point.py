"""The example models written as the paper writes them: one choice per data point.

Fig. 1b draws its data as ``for i in 1:n {(:x, i)} ~ mixture_of_normals(weights, means,
vars)``. Written that way with ``@gen``, the loop runs as one indexed family
(:mod:`imcmc_lab.modeling.families`): one vectorised density call re-scores the data
when a move changes the weights. The traces have ``n`` choices ``("x", i)`` instead of
one ``iid`` choice ``"x"``; the kernels of :mod:`.mixture` and :mod:`.two_clusters` run
on them unchanged (they never touch the data).
"""

from __future__ import annotations

import torch

from .. import dirichlet, gen, inv_gamma, mixture_of_normals, normal, poisson_plus_one, uniform_discrete
from .mixture import DIRICHLET_ALPHA

__all__ = ["gmm_per_point", "two_clusters_per_point", "observations"]


@gen
def gmm_per_point(n):
    """:func:`imcmc_lab.examples.mixture.gmm` with one choice ``("x", i)`` per point, i = 1..n."""
    k = poisson_plus_one(1.0) @ "k"
    means = [normal(0.0, 10.0) @ ("mu", j) for j in range(1, k + 1)]
    variances = [inv_gamma(1.0, 10.0) @ ("var", j) for j in range(1, k + 1)]
    weights = dirichlet(torch.full((k,), DIRICHLET_ALPHA, dtype=torch.float64)) @ "weights"
    for i in range(1, n + 1):
        mixture_of_normals(weights, means, variances) @ ("x", i)
    return k


@gen
def two_clusters_per_point(n):
    """:func:`imcmc_lab.examples.two_clusters.two_clusters` with one choice ``("x", i)`` per point."""
    k = uniform_discrete(1, 2) @ "k"
    means = torch.stack([normal(0.0, 10.0) @ ("mu", j) for j in range(1, k + 1)])
    weights, variances = torch.full((k,), 1.0 / k), torch.ones(k)
    for i in range(1, n + 1):
        mixture_of_normals(weights, means, variances) @ ("x", i)
    return k


def observations(data) -> dict:
    """``{("x", i): data[i - 1]}``: the constraints that observe ``data`` in these models."""
    data = torch.as_tensor(data, dtype=torch.float64)
    return {("x", i): value for i, value in enumerate(data, start=1)}
