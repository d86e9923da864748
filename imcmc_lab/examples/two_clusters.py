"""One cluster or two? The split/merge move of the paper's Sec. 4.2.1.

``k ~ uniform_discrete(1, 2)``; means ``("mu", j) ~ normal(0, 10)``; equal
weights; unit variances; the data ``"x"`` are one ``iid`` mixture choice. The
split draws ``u`` and maps ``mu -> (mu - u, mu + u)``; the merge maps
``(mu1, mu2) -> ((mu1 + mu2)/2, (mu2 - mu1)/2)``. The paper draws
``u ~ beta(2, 2)``; that kernel is valid but fails the support check of
Algorithm 4 whenever ``mu2 < mu1`` (a merge then writes ``u`` outside
(0, 1)), and can only split into close clusters. We draw ``u`` from a normal.
"""

from __future__ import annotations

import torch

from .. import (continuous, cycle, discrete, gen, iid, mixture_of_normals, normal, read, transform,
                uniform_discrete, write)
from ..inference.involutive import InvolutiveKernel
from .random_walk import random_walk_kernel

__all__ = ["two_clusters", "split_aux", "split_merge", "two_cluster_kernel", "initial_trace"]

SPLIT_STD = 1.0


@gen
def two_clusters(n):
    k = uniform_discrete(1, 2) @ "k"
    means = torch.stack([normal(0.0, 10.0) @ ("mu", j) for j in range(1, k + 1)])
    iid(mixture_of_normals(torch.full((k,), 1.0 / k), means, torch.ones(k)), n) @ "x"
    return k


@gen
def split_aux(trace):
    if trace["k"] == 1:
        normal(0.0, SPLIT_STD) @ "u"


@transform
def split_merge(model_in, aux_in, model_out, aux_out):
    if read(model_in["k"], discrete) == 1:
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["k"], 2, discrete)
        write(model_out["mu", 1], mu - u, continuous)
        write(model_out["mu", 2], mu + u, continuous)
    else:
        mu1 = read(model_in["mu", 1], continuous)
        mu2 = read(model_in["mu", 2], continuous)
        write(model_out["k"], 1, discrete)
        write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
        write(aux_out["u"], (mu2 - mu1) / 2, continuous)


def two_cluster_kernel(step=0.5, check=False):
    """Split/merge, then a random walk on each mean."""
    return cycle(
        InvolutiveKernel(split_aux, (), split_merge, check=check, name="split/merge"),
        random_walk_kernel([("mu", 1), ("mu", 2)], step, name="walk means"),
        name="two clusters",
    )


def initial_trace(data):
    data = torch.as_tensor(data, dtype=torch.float64)
    trace, _ = two_clusters.generate((len(data),), {"k": 1, ("mu", 1): 0.0, "x": data})
    return trace
