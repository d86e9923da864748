"""MH, custom-proposal MH, HMC and kernel combinators against a conjugate posterior;
the chain runner (several chains, interrupts, acceptance statistics, ArviZ)."""

import warnings

import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples import two_clusters
from imcmc_lab.examples.random_walk import random_walk_kernel
from mcmc_stats import assert_close_to

X = torch.tensor([0.3, 1.9, 2.4, 0.7, 1.1, 2.8, 1.5, 0.2, 2.2, 1.6], dtype=torch.float64)
PRIOR_MEAN, PRIOR_VAR = 1.0, 4.0
POST_VAR = 1.0 / (1.0 / PRIOR_VAR + len(X))
POST_MEAN = POST_VAR * (PRIOR_MEAN / PRIOR_VAR + float(X.sum()))


@il.gen
def normal_mean(n):
    mu = il.normal(PRIOR_MEAN, PRIOR_VAR ** 0.5) @ "mu"
    il.iid(il.normal(mu, 1.0), n) @ "x"


@il.gen
def walk_proposal(trace, scale):
    il.normal(trace["mu"], scale) @ "mu"


def _start():
    trace, _ = normal_mean.generate((len(X),), {"x": X, "mu": 0.0})
    return trace


def _check_posterior(kernel, steps, seed):
    torch.manual_seed(seed)
    chain = il.run_chain(kernel, _start(), steps, record={"mu": "mu"}, progress=False)
    mu = np.array(chain.values("mu"))[100:]
    assert_close_to(mu, POST_MEAN, label="E[mu | x]")
    assert_close_to((mu - POST_MEAN) ** 2, POST_VAR, label="Var[mu | x]")
    return chain


def test_resimulation_mh_targets_the_posterior():
    _check_posterior(il.MH(il.select("mu")), 8000, seed=1)


def test_custom_proposal_mh_targets_the_posterior():
    _check_posterior(il.MH(walk_proposal, (0.5,)), 6000, seed=2)


def test_hmc_targets_the_posterior():
    chain = _check_posterior(il.HMC(il.select("mu"), step_size=0.1, n_steps=5), 3000, seed=3)
    rate = chain.acceptance_rates()
    assert 0.5 < list(rate.values())[0] <= 1.0


def test_mixture_and_repeat_of_kernels_target_the_posterior():
    kernel = il.mixture([il.repeat(il.MH(walk_proposal, (0.3,)), 2), random_walk_kernel(["mu"], 1.0)],
                        weights=[0.3, 0.7])
    chain = _check_posterior(kernel, 6000, seed=4)
    assert set(chain.acceptance) == {"mh(walk_proposal)", "random_walk('mu')"}
    proposed = {k: p for k, (a, p) in chain.acceptance.items()}
    # repeat(…, 2) proposes twice per pick; mixture weights 0.3 / 0.7 of 6000 steps
    assert abs(proposed["mh(walk_proposal)"] / 2 - 1800) < 4 * (6000 * 0.3 * 0.7) ** 0.5


def test_custom_proposal_must_propose_every_new_address():
    @il.gen
    def branchy():
        if il.bernoulli(0.5) @ "b":
            il.normal(0, 1) @ "y"

    @il.gen
    def flip(trace):
        il.bernoulli(0.5) @ "b"

    trace, _ = branchy.generate((), {"b": False})
    torch.manual_seed(0)
    with pytest.raises(il.TransformError, match="'y'"):
        for _ in range(50):
            trace, _ = il.mh(trace, flip, ())


def test_several_chains_and_arviz_with_nan_padding_for_varying_dimension():
    torch.manual_seed(7)
    data = torch.tensor([-2.0, -1.5, 1.8, 2.2, 2.5], dtype=torch.float64)
    start = two_clusters.initial_trace(data)
    kernel = two_clusters.two_cluster_kernel()
    means = lambda t: torch.stack([t["mu", j] for j in range(1, t["k"] + 1)])
    chain = il.run_chain(kernel, start, 300, record={"k": "k", "mu": means}, chains=3, progress=False)
    assert chain.n_chains == 3 and len(chain) == 300
    idata = chain.to_arviz()
    mu = idata.posterior["mu"].values
    k = idata.posterior["k"].values
    assert mu.shape == (3, 300, 2)
    assert np.isnan(mu[..., 1][k == 1]).all()          # one cluster: the second slot is padding
    assert not np.isnan(mu[..., 1][k == 2]).any()
    assert not np.isnan(mu[..., 0]).any()
    assert idata.sample_stats["lp"].shape == (3, 300)
    assert chain.acceptance["split/merge"][1] == 900


def test_interrupting_a_chain_keeps_the_samples():
    calls = {"n": 0}

    def kernel(trace):
        calls["n"] += 1
        if calls["n"] == 40:
            raise KeyboardInterrupt
        return il.mh(trace, il.select("mu"))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chain = il.run_chain(kernel, _start(), 100, record=["mu"], progress=False)
    assert chain.interrupted
    assert len(chain) == 39 and chain.steps_done == [39]
    assert chain.trace is not None and "mu" in chain.trace
    assert any("interrupted" in str(w.message) for w in caught)


def test_progress_bar_and_callback():
    seen = []
    chain = il.run_chain(il.MH(il.select("mu")), _start(), 20, thin=5, progress=True,
                         callback=lambda c, step, tr: seen.append(step))
    assert seen == list(range(1, 21))
    assert len(chain) == 4
