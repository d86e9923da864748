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


# -- issue 16, item 5: selections and record entries must name addresses of the model ----------

@il.gen
def maybe_y():
    if il.bernoulli(0.5) @ "b":
        il.normal(0.0, 1.0) @ "y"


def test_selection_of_an_address_that_exists_only_in_some_states_is_legitimate():
    # "y" exists only when b is true; the kernel has seen it, so states without it are fine
    torch.manual_seed(11)
    trace, _ = maybe_y.generate((), {"b": True, "y": 0.5})
    chain = il.run_chain(il.cycle(il.MH(il.select("b")), il.MH(il.select("y"))), trace, 200,
                         record={"b": "b", "y": "y"}, progress=False)
    b = np.array(chain.values("b"), dtype=bool)
    y = np.array(chain.values("y"), dtype=float)
    assert b.any() and (~b).any()
    assert np.isnan(y[~b]).all() and not np.isnan(y[b]).any()   # NaN padding where "y" is absent


def test_hmc_on_a_choice_that_exists_only_in_some_states_does_nothing_in_the_others():
    torch.manual_seed(16)
    trace, _ = maybe_y.generate((), {"b": True, "y": 0.5})
    chain = il.run_chain(il.cycle(il.MH(il.select("b")), il.HMC(il.select("y"), 0.3, 3)), trace, 200,
                         record={"b": "b", "y": "y"}, progress=False)
    b = np.array(chain.values("b"), dtype=bool)
    assert b.any() and (~b).any()
    y = np.array(chain.values("y"), dtype=float)[b]
    assert len(np.unique(y)) > 10            # HMC moved "y" whenever it existed


def test_an_index_missing_in_an_existing_namespace_is_legitimate():
    # ("mu", 2) with k = 1: the namespace "mu" exists, the index only in other states
    torch.manual_seed(12)
    start = two_clusters.initial_trace(torch.tensor([-2.0, 2.0], dtype=torch.float64))
    chain = il.run_chain(il.MH(il.select(("mu", 2))), start, 5, record=["k"], progress=False)
    assert chain.values("k") == [1] * 5
    trace, _ = il.mh(start, il.select(("mu", 2)))
    assert trace.get_choices() == start.get_choices()


def test_a_record_entry_in_some_samples_only_is_nan_padded():
    torch.manual_seed(13)
    start = two_clusters.initial_trace(torch.tensor([-2.0, -1.5, 1.8, 2.2], dtype=torch.float64))
    chain = il.run_chain(two_clusters.two_cluster_kernel(), start, 200, record=["k", ("mu", 2)], progress=False)
    k = np.array(chain.values("k"))
    mu2 = np.array(chain.values("mu_2"), dtype=float)
    assert (k == 2).any() and np.isnan(mu2[k == 1]).all() and not np.isnan(mu2[k == 2]).any()


def test_a_record_entry_in_no_sample_raises_and_keeps_the_chain():
    with pytest.raises(il.AddressError) as info:
        il.run_chain(il.MH(il.select("mu")), _start(), 30, record=["mu", "muu"], progress=False)
    chain = info.value.chain
    assert len(chain) == 30 and not np.isnan(np.array(chain.values("mu"), dtype=float)).any()


# -- issue 16, items 12 and 15: nothing a user computed is lost ---------------------------------

def _failing_after(n_calls, exc):
    calls = {"n": 0}

    def kernel(trace):
        calls["n"] += 1
        if calls["n"] == n_calls:
            raise exc
        return il.mh(trace, il.select("mu"))

    return kernel


def test_an_exception_mid_chain_keeps_the_samples_on_the_exception():
    torch.manual_seed(14)
    with pytest.raises(ZeroDivisionError) as info:
        il.run_chain(_failing_after(40, ZeroDivisionError("in the user's kernel")), _start(), 100,
                     record=["mu"], progress=False)
    chain = info.value.chain
    assert len(chain) == 39 and chain.steps_done == [39] and chain.interrupted
    assert chain.trace is not None and "mu" in chain.trace
    assert any("err.chain" in note and "39" in note for note in info.value.__notes__)


def _interrupted_two_chains(at_call):
    torch.manual_seed(15)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return il.run_chain(_failing_after(at_call, KeyboardInterrupt), _start(), 100, record=["mu"],
                            chains=2, progress=False)


def test_interrupting_the_second_of_two_chains_converts_both_truncated_to_the_shorter():
    chain = _interrupted_two_chains(150)      # chain 0: 100 samples, chain 1: 49
    assert chain.interrupted and [len(s) for s in chain.samples] == [100, 49]
    assert "[100, 49] samples" in repr(chain)
    with pytest.warns(UserWarning, match="truncat"):
        idata = chain.to_arviz()
    mu = idata.posterior["mu"].values
    assert mu.shape == (2, 49)
    assert np.array_equal(mu[0], np.array(chain.values("mu", chain=0)[:49], dtype=float))
    assert np.array_equal(mu[1], np.array(chain.values("mu", chain=1), dtype=float))
    assert idata.sample_stats["lp"].shape == (2, 49)
    assert len(chain.samples[0]) == 100                   # nothing dropped from the chain itself


def test_interrupting_the_first_of_two_chains_converts_what_it_finished():
    chain = _interrupted_two_chains(60)       # chain 0: 59 samples, chain 1 never started
    assert [len(s) for s in chain.samples] == [59, 0]
    assert "[59, 0] samples" in repr(chain) and "x 0 samples" not in repr(chain)
    with pytest.warns(UserWarning, match="chain 1"):
        idata = chain.to_arviz()
    assert idata.posterior["mu"].values.shape == (1, 59)


# -- issue 20: thread hygiene -------------------------------------------------------------------

def _threads_seen():
    seen = []

    def kernel(trace):
        seen.append(torch.get_num_threads())
        return trace, False

    return kernel, seen


@pytest.fixture
def three_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    yield
    torch.set_num_threads(before)


def test_run_chain_uses_one_thread_by_default_and_restores_the_setting(three_threads):
    kernel, seen = _threads_seen()
    il.run_chain(kernel, _start(), 3, progress=False)
    assert seen == [1, 1, 1] and torch.get_num_threads() == 3


def test_run_chain_threads_argument_and_restoring_after_an_error(three_threads):
    kernel, seen = _threads_seen()
    il.run_chain(kernel, _start(), 2, progress=False, threads=2)
    assert seen == [2, 2] and torch.get_num_threads() == 3
    il.run_chain(kernel, _start(), 1, progress=False, threads=None)    # None: leave torch's setting
    assert seen[-1] == 3
    with pytest.raises(ZeroDivisionError):
        il.run_chain(_failing_after(2, ZeroDivisionError()), _start(), 5, progress=False)
    assert torch.get_num_threads() == 3
