"""The buggy kernels of the paper's Sec. 6, each beside its corrected twin.

Run ``il.check_involution`` on a buggy one to see how the check points at the
bug; the twin passes the same check.

=====================================  =====================================  ==========================
bug                                    buggy                                  corrected
=====================================  =====================================  ==========================
merge that is not the split's inverse  :data:`sqrt_merge`                     :data:`arithmetic_merge`
birth that only appends at the end     :data:`birth_at_end` (+ its aux)       :data:`mixture.birth_death`
misspelled address (read, copy)        :func:`misspelled`                     ``misspelled()``
wrong discrete/continuous label        :func:`labelled`                       ``labelled()``
=====================================  =====================================  ==========================

The square-root merge (Sec. 6, "incorrectly transformed continuous
variables"): the split maps ``mu -> (mu - u, mu + u)``; a merge ``sqrt(mu1 mu2)``
does not undo it, ``(mu1 + mu2) / 2`` does. The birth-death move (Sec. 6,
"discrete logic errors") is the mixture's of :mod:`.mixture`: the buggy birth
always inserts the new cluster at index ``k + 1`` while death removes any index.
"""

from __future__ import annotations

import torch

from .. import (bernoulli, continuous, copy, discrete, gamma, gen, normal, poisson_plus_one, read,
                transform, uniform, uniform_discrete, write)
from .mixture import _birth_death, _birth_death_aux

__all__ = [
    "positive_means", "mean_split_aux", "mean_split_merge", "sqrt_merge", "arithmetic_merge",
    "birth_at_end_aux", "birth_at_end", "misspelled", "one_or_two", "one_or_two_aux", "labelled",
]


# ---------------------------------------------------------------------------
# 1. the square-root merge
# ---------------------------------------------------------------------------
@gen
def positive_means():
    """``k ~ poisson_plus_one(1)`` cluster means, positive (so the square root is defined)."""
    k = poisson_plus_one(1.0) @ "k"
    for j in range(1, k + 1):
        gamma(4.0, 1.0) @ ("mu", j)


@gen
def mean_split_aux(trace):
    k = trace["k"]
    split = True if k == 1 else bernoulli(0.5) @ "split"
    if split:
        j = uniform_discrete(1, k) @ "cluster_to_split"
        mu = trace["mu", j]
        uniform(-mu, mu) @ "u"          # keeps mu - u and mu + u positive
    else:
        uniform_discrete(1, k - 1) @ "cluster_to_merge"


def mean_split_merge(merge_mean, name=None, read_address="cluster_to_split", copy_to="cluster_to_merge"):
    """Split cluster ``j`` into ``(j, k+1)`` as ``mu -/+ u``; merge ``(j, k)`` with ``merge_mean``.
    (``read_address`` and ``copy_to`` are the auxiliary addresses of the split's read
    and copy, for :func:`misspelled`.)"""

    @transform(name=name)
    def f(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        split = True if k == 1 else read(aux_in["split"], discrete)
        if split:
            j = read(aux_in[read_address], discrete)
            write(model_out["k"], k + 1, discrete)
            write(aux_out["split"], False, discrete)
            copy(aux_in["cluster_to_split"], aux_out[copy_to])
            mu = read(model_in["mu", j], continuous)
            u = read(aux_in["u"], continuous)
            write(model_out["mu", j], mu - u, continuous)
            write(model_out["mu", k + 1], mu + u, continuous)
        else:
            j = read(aux_in["cluster_to_merge"], discrete)
            write(model_out["k"], k - 1, discrete)
            if k > 2:
                write(aux_out["split"], True, discrete)
            copy(aux_in["cluster_to_merge"], aux_out["cluster_to_split"])
            mu1 = read(model_in["mu", j], continuous)
            mu2 = read(model_in["mu", k], continuous)
            write(model_out["mu", j], merge_mean(mu1, mu2), continuous)
            write(aux_out["u"], (mu2 - mu1) / 2, continuous)

    return f


sqrt_merge = mean_split_merge(lambda a, b: torch.sqrt(a * b), name="sqrt_merge")          # the bug
arithmetic_merge = mean_split_merge(lambda a, b: (a + b) / 2, name="arithmetic_merge")    # the fix


# ---------------------------------------------------------------------------
# 2. the birth that only appends at the end (model: mixture.gmm)
# ---------------------------------------------------------------------------
birth_at_end_aux = _birth_death_aux(insert_anywhere=False)
birth_at_end = _birth_death(insert_anywhere=False)


# ---------------------------------------------------------------------------
# 3. misspelled addresses (model: positive_means, aux: mean_split_aux)
# ---------------------------------------------------------------------------
def misspelled(read_address="cluster_to_split", copy_to="cluster_to_merge"):
    """The split/merge of :func:`mean_split_merge` (arithmetic merge) reading
    ``aux_in[read_address]`` and copying to ``aux_out[copy_to]``; the defaults are the
    correct spellings."""
    right = read_address == "cluster_to_split" and copy_to == "cluster_to_merge"
    return mean_split_merge(lambda a, b: (a + b) / 2, "split_merge" if right else "misspelled_split_merge",
                            read_address, copy_to)


# ---------------------------------------------------------------------------
# 4. wrong discrete/continuous labels
# ---------------------------------------------------------------------------
@gen
def one_or_two():
    k = uniform_discrete(1, 2) @ "k"
    for j in range(1, k + 1):
        normal(0.0, 10.0) @ ("mu", j)


@gen
def one_or_two_aux(trace):
    if trace["k"] == 1:
        normal(0.0, 2.0) @ "u"


def labelled(u_label=continuous, k_label=discrete):
    """Split/merge of :func:`one_or_two` reading ``u`` and ``k`` with the given labels
    (the defaults are right; ``u_label=discrete`` is the bug Gen does not catch:
    the derivative in ``u`` would silently be lost)."""

    right = u_label is continuous and k_label is discrete

    @transform(name="split_merge" if right else "mislabelled_split_merge")
    def f(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], k_label)
        if k == 1:
            write(model_out["k"], 2, discrete)
            mu = read(model_in["mu", 1], continuous)
            u = read(aux_in["u"], u_label)
            write(model_out["mu", 1], mu - u, continuous)
            write(model_out["mu", 2], mu + u, continuous)
        else:
            write(model_out["k"], 1, discrete)
            mu1 = read(model_in["mu", 1], continuous)
            mu2 = read(model_in["mu", 2], continuous)
            write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
            write(aux_out["u"], (mu2 - mu1) / 2, continuous)

    return f
