"""Reversible jump for the infinite Gaussian mixture: the paper's Fig. 1.

The model (Fig. 1b) draws the number of clusters ``k ~ poisson_plus_one(1)``,
means ``("mu", j) ~ normal(0, 10)``, variances ``("var", j) ~ inv_gamma(1, 10)``,
``weights ~ dirichlet(2, ..., 2)`` and the ``n`` data points as one vectorised
choice ``"x"`` (Fig. 1b has one choice per point; one ``iid`` choice is the same
density in one torch call).

Moves, each an involutive MCMC kernel the engine checks and differentiates:

* :data:`split_merge` with :data:`split_merge_aux` (Figs. 1c, 1d): Richardson &
  Green's split of cluster ``j`` into ``j`` and ``k + 1`` (``split_weights``,
  ``split_params``) and the merge of ``j`` with the last cluster
  (``merge_weights``, ``merge_params``);
* :data:`swap_last` with :data:`swap_aux`: swap a random cluster with the last
  one, so that any pair can be merged (ergodicity, paper Sec. 7.1);
* :data:`birth_death` with :data:`birth_death_aux`: the corrected birth-death
  move of paper Sec. 6 (birth inserts at any index);
* within-model moves: :data:`move_cluster` (random walk on one cluster's mean
  and log-variance) and :data:`move_weights` (multiplicative random walk on the
  weights).

:func:`mixture_kernel` cycles them; :func:`synthetic_data` and
:func:`initial_trace` start a run.

One change from Fig. 1c: ``u2`` is drawn from ``beta(2, 2)`` as there, but used
as ``2 u2 - 1`` on ``(-1, 1)``. Fig. 1 merges cluster ``j`` with the *last*
cluster, whose mean may lie on either side, so the merge's ``u2`` can be
negative; with ``u2`` on ``(0, 1)`` those merges have ``q = 0`` (always
rejected, and flagged by Algorithm 4's support check) and a split can only put
the new cluster on one side.
"""

from __future__ import annotations

import torch

from .. import (beta, bernoulli, continuous, copy, cycle, dirichlet, discrete, gen, iid, inv_gamma,
                mixture_of_normals, normal, poisson_plus_one, read, repeat, transform,
                uniform_discrete, write)
from ..inference.involutive import InvolutiveKernel

__all__ = [
    "gmm", "split_merge_aux", "split_merge", "split_weights", "merge_weights", "split_params",
    "merge_params", "swap_aux", "swap_last", "birth_death_aux", "birth_death", "move_cluster_aux",
    "move_cluster", "move_weights_aux", "move_weights", "mixture_kernel", "synthetic_data",
    "initial_trace", "cluster_summary",
]

DIRICHLET_ALPHA = 2.0


@gen
def gmm(n):
    """The infinite Gaussian mixture of Fig. 1b with ``n`` data points at ``"x"``."""
    k = poisson_plus_one(1.0) @ "k"
    means = [normal(0.0, 10.0) @ ("mu", j) for j in range(1, k + 1)]
    variances = [inv_gamma(1.0, 10.0) @ ("var", j) for j in range(1, k + 1)]
    weights = dirichlet(torch.full((k,), DIRICHLET_ALPHA, dtype=torch.float64)) @ "weights"
    iid(mixture_of_normals(weights, means, variances), n) @ "x"      # lists, as in Fig. 1b
    return k


# ---------------------------------------------------------------------------
# split / merge (Figs. 1c and 1d)
# ---------------------------------------------------------------------------
@gen
def split_merge_aux(trace):
    """Fig. 1c: split (always when k = 1) or merge with probability 1/2 each."""
    k = trace["k"]
    split = True if k == 1 else bernoulli(0.5) @ "split"
    if split:
        uniform_discrete(1, k) @ "cluster_to_split"
        beta(2.0, 2.0) @ "u1"
        beta(2.0, 2.0) @ "u2"      # used as 2 u2 - 1: see the module docstring
        beta(1.0, 1.0) @ "u3"
    else:
        uniform_discrete(1, k - 1) @ "cluster_to_merge"


def split_weights(weights, j, u1):
    """Weight ``w_j`` becomes ``w_j u1`` at ``j`` and ``w_j (1 - u1)`` at the end (1-based ``j``)."""
    wj = weights[j - 1]
    w1, w2 = wj * u1, wj * (1 - u1)
    return torch.cat([weights[:j - 1], w1.reshape(1), weights[j:], w2.reshape(1)])


def merge_weights(weights, j):
    """Inverse of :func:`split_weights`: ``(new_weights, u1)``, merging ``j`` with the last weight."""
    w1, w2 = weights[j - 1], weights[-1]
    w = w1 + w2
    return torch.cat([weights[:j - 1], w.reshape(1), weights[j:-1]]), w1 / w


def split_params(mu, var, u2, u3, w1, w2):
    """Richardson & Green (1997): match the merged cluster's weight, mean and variance."""
    w = w1 + w2
    mu1 = mu - u2 * torch.sqrt(var * w2 / w1)
    mu2 = mu + u2 * torch.sqrt(var * w1 / w2)
    var1 = u3 * (1 - u2 ** 2) * var * w / w1
    var2 = (1 - u3) * (1 - u2 ** 2) * var * w / w2
    return mu1, mu2, var1, var2


def merge_params(mu1, mu2, var1, var2, w1, w2, w):
    """Inverse of :func:`split_params`: ``(mu, var, u2, u3)``."""
    mu = (w1 * mu1 + w2 * mu2) / w
    var = (w1 * (mu1 ** 2 + var1) + w2 * (mu2 ** 2 + var2)) / w - mu ** 2
    u2 = (mu - mu1) / torch.sqrt(var * w2 / w1)
    u3 = w1 * var1 / (w * var * (1 - u2 ** 2))
    return mu, var, u2, u3


@transform
def split_merge(model_in, aux_in, model_out, aux_out):
    """Fig. 1d: (1) the discrete involution, (2) the split bijection, (3) its inverse."""
    k = read(model_in["k"], discrete)
    split = True if k == 1 else read(aux_in["split"], discrete)
    weights = read(model_in["weights"], continuous)
    if split:
        j = read(aux_in["cluster_to_split"], discrete)
        write(model_out["k"], k + 1, discrete)
        copy(aux_in["cluster_to_split"], aux_out["cluster_to_merge"])
        write(aux_out["split"], False, discrete)
        u1 = read(aux_in["u1"], continuous)
        u2 = 2 * read(aux_in["u2"], continuous) - 1
        u3 = read(aux_in["u3"], continuous)
        mu = read(model_in["mu", j], continuous)
        var = read(model_in["var", j], continuous)
        new_weights = split_weights(weights, j, u1)
        w1, w2 = new_weights[j - 1], new_weights[k]
        mu1, mu2, var1, var2 = split_params(mu, var, u2, u3, w1, w2)
        write(model_out["weights"], new_weights, continuous)
        write(model_out["mu", j], mu1, continuous)
        write(model_out["mu", k + 1], mu2, continuous)
        write(model_out["var", j], var1, continuous)
        write(model_out["var", k + 1], var2, continuous)
    else:
        j = read(aux_in["cluster_to_merge"], discrete)
        write(model_out["k"], k - 1, discrete)
        copy(aux_in["cluster_to_merge"], aux_out["cluster_to_split"])
        if k > 2:
            write(aux_out["split"], True, discrete)
        mu1, mu2 = read(model_in["mu", j], continuous), read(model_in["mu", k], continuous)
        var1, var2 = read(model_in["var", j], continuous), read(model_in["var", k], continuous)
        new_weights, u1 = merge_weights(weights, j)
        mu, var, u2, u3 = merge_params(mu1, mu2, var1, var2, weights[j - 1], weights[k - 1],
                                       new_weights[j - 1])
        write(model_out["weights"], new_weights, continuous)
        write(model_out["mu", j], mu, continuous)
        write(model_out["var", j], var, continuous)
        write(aux_out["u1"], u1, continuous)
        write(aux_out["u2"], (u2 + 1) / 2, continuous)
        write(aux_out["u3"], u3, continuous)


# ---------------------------------------------------------------------------
# swap a random cluster with the last one (Sec. 7.1: ergodicity)
# ---------------------------------------------------------------------------
@gen
def swap_aux(trace):
    k = trace["k"]
    if k > 1:
        uniform_discrete(1, k - 1) @ "cluster"


@transform
def swap_last(model_in, aux_in, model_out, aux_out):
    """Relabel cluster ``j`` as ``k`` and ``k`` as ``j``. The prior is exchangeable, so
    this is always accepted; the engine derives that (|det J| = 1, equal densities)."""
    k = read(model_in["k"], discrete)
    if k == 1:
        return
    j = read(aux_in["cluster"], discrete)
    copy(aux_in["cluster"], aux_out["cluster"])
    for name in ("mu", "var"):
        copy(model_in[name, j], model_out[name, k])
        copy(model_in[name, k], model_out[name, j])
    weights = read(model_in["weights"], continuous)
    order = list(range(k))
    order[j - 1], order[k - 1] = k - 1, j - 1
    write(model_out["weights"], weights[order], continuous)


# ---------------------------------------------------------------------------
# birth / death (paper Sec. 6, corrected: a birth may insert at any index)
# ---------------------------------------------------------------------------
def _birth_death_aux(insert_anywhere):
    @gen
    def birth_death_aux(trace):
        """Birth (always when k = 1) or death with probability 1/2 each; a birth draws the
        new cluster's mean, variance and weight (and, unless buggy, its index)."""
        k = trace["k"]
        if bernoulli(1.0 if k == 1 else 0.5) @ "is_birthing":
            normal(0.0, 10.0) @ "new_mu"
            inv_gamma(1.0, 10.0) @ "new_var"
            beta(1.0, k) @ "new_w"
            if insert_anywhere:
                uniform_discrete(1, k + 1) @ "birth_idx"
        else:
            uniform_discrete(1, k) @ "deletion_idx"

    return birth_death_aux


def _birth_death(insert_anywhere):
    @transform(name="birth_death" if insert_anywhere else "birth_at_end")
    def birth_death(model_in, aux_in, model_out, aux_out):
        """Birth: a new cluster from the auxiliary choices, inserted at ``birth_idx``
        (the others scaled by ``1 - new_w``). Death: remove ``deletion_idx``."""
        is_birthing = read(aux_in["is_birthing"], discrete)
        write(aux_out["is_birthing"], not is_birthing, discrete)
        k = read(model_in["k"], discrete)
        weights = read(model_in["weights"], continuous)
        if is_birthing:
            b = read(aux_in["birth_idx"], discrete) if insert_anywhere else k + 1
            write(model_out["k"], k + 1, discrete)
            for i in range(b, k + 1):               # shift clusters b..k up by one
                copy(model_in["mu", i], model_out["mu", i + 1])
                copy(model_in["var", i], model_out["var", i + 1])
            copy(aux_in["new_mu"], model_out["mu", b])
            copy(aux_in["new_var"], model_out["var", b])
            new_w = read(aux_in["new_w"], continuous)
            rest = weights * (1 - new_w)
            write(model_out["weights"], torch.cat([rest[:b - 1], new_w.reshape(1), rest[b - 1:]]),
                  continuous)
            write(aux_out["deletion_idx"], b, discrete)
        else:
            idx = read(aux_in["deletion_idx"], discrete)
            write(model_out["k"], k - 1, discrete)
            copy(model_in["mu", idx], aux_out["new_mu"])
            copy(model_in["var", idx], aux_out["new_var"])
            for i in range(idx + 1, k + 1):         # shift clusters idx+1..k down by one
                copy(model_in["mu", i], model_out["mu", i - 1])
                copy(model_in["var", i], model_out["var", i - 1])
            w = weights[idx - 1]
            write(aux_out["new_w"], w, continuous)
            write(model_out["weights"], torch.cat([weights[:idx - 1], weights[idx:]]) / (1 - w),
                  continuous)
            if insert_anywhere:
                write(aux_out["birth_idx"], idx, discrete)

    return birth_death


birth_death_aux = _birth_death_aux(insert_anywhere=True)
birth_death = _birth_death(insert_anywhere=True)


# ---------------------------------------------------------------------------
# within-model moves
# ---------------------------------------------------------------------------
@gen
def move_cluster_aux(trace, mean_step, log_var_step):
    uniform_discrete(1, trace["k"]) @ "cluster"
    normal(0.0, mean_step) @ "d_mu"
    normal(0.0, log_var_step) @ "d_log_var"


@transform
def move_cluster(model_in, aux_in, model_out, aux_out):
    """Random walk on one cluster's mean and log-variance; the steps are negated, so
    applying it twice returns to the start (|det J| = var'/var, derived by autodiff)."""
    j = read(aux_in["cluster"], discrete)
    copy(aux_in["cluster"], aux_out["cluster"])
    d_mu, d_lv = read(aux_in["d_mu"], continuous), read(aux_in["d_log_var"], continuous)
    write(model_out["mu", j], read(model_in["mu", j], continuous) + d_mu, continuous)
    write(model_out["var", j], read(model_in["var", j], continuous) * torch.exp(d_lv), continuous)
    write(aux_out["d_mu"], -d_mu, continuous)
    write(aux_out["d_log_var"], -d_lv, continuous)


@gen
def move_weights_aux(trace, step):
    k = trace["k"]
    if k > 1:
        iid(normal(0.0, step), k) @ "d_log_w"


@transform
def move_weights(model_in, aux_in, model_out, aux_out):
    """``w' = normalize(w * exp(d))`` and ``d' = -d``: an involution on (simplex, R^k)."""
    if read(model_in["k"], discrete) == 1:
        return
    w = read(model_in["weights"], continuous)
    d = read(aux_in["d_log_w"], continuous)
    moved = w * torch.exp(d)
    write(model_out["weights"], moved / moved.sum(), continuous)
    write(aux_out["d_log_w"], -d, continuous)


def mixture_kernel(mean_step=0.5, log_var_step=0.3, log_weight_step=0.3, cluster_moves=3,
                   birth_death_moves=True, check=False):
    """One sweep: swap, split/merge, (birth/death), ``cluster_moves`` cluster moves, weights."""
    kernels = [
        InvolutiveKernel(swap_aux, (), swap_last, check=check, name="swap"),
        InvolutiveKernel(split_merge_aux, (), split_merge, check=check, name="split/merge"),
    ]
    if birth_death_moves:
        kernels.append(InvolutiveKernel(birth_death_aux, (), birth_death, check=check, name="birth/death"))
    kernels += [
        repeat(InvolutiveKernel(move_cluster_aux, (mean_step, log_var_step), move_cluster, check=check,
                                name="move cluster"), cluster_moves),
        InvolutiveKernel(move_weights_aux, (log_weight_step,), move_weights, check=check,
                         name="move weights"),
    ]
    return cycle(*kernels, name="infinite GMM")


def synthetic_data(n=150, means=(-6.0, 0.0, 6.0), std=1.0, seed=0):
    """``n`` points from well-separated clusters (equal shares), shuffled; float64 tensor."""
    g = torch.Generator().manual_seed(seed)
    means_t = torch.as_tensor(means, dtype=torch.float64)
    labels = torch.arange(n) % len(means)
    x = means_t[labels] + std * torch.randn(n, generator=g, dtype=torch.float64)
    return x[torch.randperm(n, generator=g)]


def initial_trace(data, k=1):
    """A trace of :func:`gmm` with ``data`` observed at ``"x"``, ``k`` clusters, the rest from the prior."""
    data = torch.as_tensor(data, dtype=torch.float64)
    trace, _ = gmm.generate((len(data),), {"x": data, "k": k})
    return trace


def cluster_summary(trace):
    """``[(weight, mean, variance), ...]`` sorted by mean: a quick look at a state."""
    k = trace["k"]
    rows = [(float(trace["weights"][j - 1]), float(trace["mu", j]), float(trace["var", j]))
            for j in range(1, k + 1)]
    return sorted(rows, key=lambda r: r[1])
