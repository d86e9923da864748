"""The nonparametric programs of "Nonparametric Hamiltonian Monte Carlo" (C. Mak, F. Zaiser,
L. Ong, ICML 2021) and Ch. 7 of "Nonparametric Involutive Markov Chain Monte Carlo" (C. Mak),
as ordinary ``@gen`` programs for :class:`~imcmc_lab.inference.nphmc.NPHMC`.

* :func:`geometric`: flip ``u_i ~ uniform(0, 1)`` until ``u_i < p``; the number of flips
  ``N`` is geometric, ``E[N] = 1 / p`` (5 for ``p = 0.2``). Latent ``("u", i)``, discontinuous.
* :func:`walk`: start ``~ uniform(0, 3)``, steps ``("step", i) ~ uniform(-1, 1)`` until the
  position passes 0; the total distance is observed as ``normal(distance, 0.1)`` at
  ``"distance"`` (1.1). Posterior of the start: mean 0.590964, P(start < 1) = 0.89977.
  As in the thesis's experiments (its published code), the walk also stops once it has
  travelled ``distance_limit`` (10): a symmetric walk's time to pass 0 has infinite mean, and
  a trajectory's proposals would otherwise now and then run walks of 10⁵ steps. The
  likelihood there is below e^-3900 of its peak, so the posterior is the same in float64.
* :func:`gmm`: ``K = poisson(10) + 1`` components with means ``("mean", k, d) ~ uniform(0, 100)``
  in 3-D, the data a uniform mixture of ``normal(mean_k, 10)`` (one vector choice ``"data"``).
* :func:`dpmm`: stick-breaking weights ``("stick", k) ~ beta(1, 5)`` until the remaining
  stick is below 0.01, means as in :func:`gmm`.

The GMM/DPMM data (9 cluster means, 200 training and 50 test points, drawn as the
reference code of that paper does from its seed) are :func:`gmm_data`.
"""

from __future__ import annotations

import math
from importlib import resources

import torch

from .. import Distribution, beta, gen, normal, poisson, uniform
from ..core.distributions import as_param, constraints
from ..core.values import DTYPE

__all__ = ["geometric", "walk", "gmm", "dpmm", "gmm_data", "MixtureData", "lppd",
           "GEOMETRIC_MEAN", "WALK_START_MEAN", "WALK_START_BELOW_ONE", "GMM_STD"]

GEOMETRIC_MEAN = 5.0                # E[N] for p = 0.2
WALK_START_MEAN = 0.590964          # exact posterior mean of the walk's start (the thesis, Sec. 7.5.2)
WALK_START_BELOW_ONE = 0.89977      # exact posterior P(start < 1)
GMM_STD = 10.0


@gen
def geometric(p=0.2):
    """Number of uniform flips until one falls below ``p``."""
    n = 1
    while uniform(0.0, 1.0) @ ("u", n) >= p:
        n += 1
    return n


@gen
def walk(distance_limit=10.0):
    """A one-sided random walk from ``start`` until it passes 0 (or has travelled
    ``distance_limit``); the distance is observed."""
    start = uniform(0.0, 3.0) @ "start"
    position, distance, i = start, 0.0, 0
    while position > 0 and distance < distance_limit:
        i += 1
        step = uniform(-1.0, 1.0) @ ("step", i)
        position = position + step
        distance = distance + abs(step)
    normal(distance, 0.1) @ "distance"
    return start


class MixtureData(Distribution):
    """``n`` points in ``d`` dimensions, each from the mixture ``Σ_k w_k N(means[k], std² I)``
    (one vectorised log-density; the value is an ``(n, d)`` tensor)."""

    name = "mixture_data"
    arg_constraints = {"weights": constraints.simplex}
    __slots__ = ("weights", "means", "std")

    def __init__(self, weights, means, std):
        super().__init__(weights, means, std)
        self.weights, self.means, self.std = as_param(weights), torch.stack(list(means)), as_param(std)

    def sample(self):
        raise NotImplementedError("mixture_data is for observed data only")

    def log_prob(self, data):
        per_point = self.pointwise(data)
        return per_point.sum()

    def pointwise(self, data):
        """Log-density of each point (the LPPD's terms)."""
        comp = torch.distributions.Normal(self.means.unsqueeze(0), self.std).log_prob(data.unsqueeze(1)).sum(-1)
        return torch.logsumexp(comp + torch.log(self.weights), dim=1)

    def coerce(self, value):
        return torch.as_tensor(value, dtype=DTYPE)


def _means(k, dims):
    return [torch.stack([uniform(0.0, 100.0) @ ("mean", j, d) for d in range(dims)]) for j in range(k)]


@gen
def gmm(data):
    """Gaussian mixture with ``poisson(10) + 1`` components (uniform weights)."""
    k = poisson(10.0) @ "k"
    means = _means(k + 1, data.shape[1])
    weights = torch.full((k + 1,), 1.0 / (k + 1), dtype=DTYPE)
    MixtureData(weights, means, GMM_STD) @ "data"
    return means


@gen
def dpmm(data, alpha=5.0):
    """Dirichlet-process mixture by stick breaking, truncated when less than 0.01 is left."""
    remaining, weights, j = 1.0, [], 0
    while remaining > 0.01:
        b = beta(1.0, alpha) @ ("stick", j)
        weights.append(remaining * b)
        remaining = remaining * (1 - b)
        j += 1
    means = _means(j, data.shape[1])
    w = torch.stack([torch.as_tensor(x, dtype=DTYPE) for x in weights])
    MixtureData(w / w.sum(), means, GMM_STD) @ "data"
    return weights, means


def gmm_data():
    """``(means, training, test)``: float64 tensors (9 x 3, 200 x 3, 50 x 3)."""
    folder = resources.files(__package__).joinpath("data/nonparametric")

    def load(name):
        rows = folder.joinpath(name).read_text().split()
        return torch.tensor([[float(x) for x in row.split(",")] for row in rows], dtype=DTYPE)

    return load("gmm_data_means.txt"), load("gmm_training_data.txt"), load("gmm_test_data.txt")


def lppd(trace, test):
    """Log pointwise predictive density of ``test`` under one GMM/DPMM trace's mixture."""
    record = trace.flat_records()[("data",)]
    return float(MixtureData(record.dist.weights, record.dist.means, GMM_STD).pointwise(test).sum())
