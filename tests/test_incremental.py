"""Incremental update, shown by counting work (``il.count_work``), not by timing.

``logpdf_evaluations`` counts log-densities actually computed (a cached one
reused is not counted); ``executions`` counts ``@gen`` bodies run, combinator
kernels included.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

import imcmc_lab as il
from imcmc_lab.examples import mixture

N = 10_000


@il.gen
def obs(x):
    if il.bernoulli(0.1) @ "outlier":
        return il.normal(0.0, 10.0) @ "y"
    return il.normal(2.0 * x, 1.0) @ "y"


@il.gen
def big(xs):
    il.normal(0.0, 1.0) @ "slope"          # not an input of the Map
    return il.Map(obs)(xs) @ "data"


@pytest.fixture(scope="module")
def big_trace():
    torch.manual_seed(0)
    xs = torch.linspace(-1.0, 1.0, N, dtype=torch.float64)
    with il.count_work() as work:
        trace = big.simulate(xs)
    # The counters see everything a full run does (so a small count below is real).
    assert work.executions == N + 1
    assert work.logpdf_evaluations == 2 * N + 1
    return trace


def _y_logpdf(trace, i):
    x = float(trace.args[0][i])
    if trace["data", i, "outlier"]:
        return il.normal(0.0, 10.0), x
    return il.normal(2.0 * x, 1.0), x


def test_map_update_of_one_element_rescores_one_choice_and_reruns_one_element(big_trace):
    old_score = big_trace.score
    with il.count_work() as work:
        new, weight, discard = big_trace.update({("data", 5000, "y"): 0.25})
    assert work.executions == 2            # the model body and element 5000, nothing else
    assert work.logpdf_evaluations == 1    # only the constrained choice
    dist, _ = _y_logpdf(big_trace, 5000)
    expected = float(dist.log_prob(torch.tensor(0.25))) - float(dist.log_prob(big_trace["data", 5000, "y"]))
    assert math.isclose(weight, expected, rel_tol=1e-12, abs_tol=1e-12)
    assert math.isclose(new.score, old_score + expected, rel_tol=1e-12)
    assert discard == {("data", 5000, "y"): big_trace["data", 5000, "y"]}
    assert big_trace.score == old_score
    # The other 9,999 element traces are shared, not copied or re-run.
    old_map, new_map = big_trace._record_get(("data",)).trace, new._record_get(("data",)).trace
    shared = sum(a is b for a, b in zip(old_map.subtraces, new_map.subtraces))
    assert shared == N - 1


def test_map_update_of_one_argument_element_reruns_only_that_element(big_trace):
    xs = big_trace.args[0].clone()
    xs[1234] += 0.5
    with il.count_work() as work:
        new, weight, discard = big_trace.update({}, args=(xs,))
    assert work.executions == 2
    # "y" has a new distribution when the element is not an outlier; "outlier" is unchanged.
    assert work.logpdf_evaluations == (0 if big_trace["data", 1234, "outlier"] else 1)
    assert len(discard) == 0
    assert math.isclose(weight, new.score - big_trace.score, rel_tol=1e-9, abs_tol=1e-9)

    # The same with a plain Python list as the argument.
    as_list = [float(v) for v in big_trace.args[0]]
    trace_l, _ = big.generate((as_list,), big_trace.get_choices())
    changed = list(as_list)
    changed[7] = 3.0
    with il.count_work() as work:
        trace_l.update({}, args=(changed,))
    assert work.executions == 2


def test_update_outside_the_map_does_not_touch_it(big_trace):
    with il.count_work() as work:
        new, weight, _ = big_trace.update({"slope": 0.3})
    assert work.executions == 1 and work.logpdf_evaluations == 1
    assert new._record_get(("data",)).trace is big_trace._record_get(("data",)).trace


def test_map_regenerate_of_one_element_reruns_one_element(big_trace):
    with il.count_work() as work:
        new, weight = big_trace.regenerate(il.select(("data", 42, "y")))
    assert work.executions == 2 and work.logpdf_evaluations == 1
    assert weight == 0.0
    assert new["data", 42, "y"] != big_trace["data", 42, "y"]


def test_full_reexecution_baseline_does_all_the_work(big_trace):
    # The comparison the benchmark times: generate with every choice constrained.
    with il.count_work() as work:
        trace, weight = big.generate(big_trace.args, big_trace.get_choices())
    assert work.executions == N + 1 and work.logpdf_evaluations == 2 * N + 1
    assert math.isclose(weight, big_trace.score, rel_tol=1e-9)


# ---------------------------------------------------------------------------
# Unfold
# ---------------------------------------------------------------------------
@il.gen
def counter_step(t, state):
    if il.bernoulli(0.5) @ "reset":
        new_state = 0
    else:
        new_state = state + 1
    il.normal(float(new_state), 1.0) @ "obs"
    return new_state


@il.gen
def counter_chain(T):
    return il.Unfold(counter_step)(T, 0) @ "chain"


@il.gen
def walk_step(t, state, drift):
    x = il.normal(state + drift, 1.0) @ "x"
    il.normal(x, 0.5) @ "obs"
    return x


@il.gen
def walk(T, drift):
    return il.Unfold(walk_step)(T, torch.tensor(0.0, dtype=torch.float64), drift) @ "chain"


def test_unfold_change_at_step_t_reruns_only_while_states_differ():
    T = 300
    torch.manual_seed(0)
    resets = {("chain", t, "reset"): False for t in range(T)}
    resets[("chain", 102, "reset")] = True   # the state is 0 after step 102 either way
    trace, _ = counter_chain.generate((T,), resets)
    with il.count_work() as work:
        new, weight, discard = trace.update({("chain", 100, "reset"): True})
    # Step 100 (changed), 101 (its incoming state changed), 102 (incoming state changed;
    # its outgoing state is again 0), then nothing: 3 kernel runs plus the model body.
    assert work.executions == 1 + 3
    assert work.logpdf_evaluations == 1 + 2   # "reset" at 100; "obs" at 100 and 101
    assert new["chain"][100:103] == [0, 1, 0] and new["chain"][103:] == trace["chain"][103:]
    assert math.isclose(weight, new.score - trace.score, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(new.score, counter_chain.assess((T,), new.get_choices()), rel_tol=1e-9)


def test_unfold_change_that_keeps_the_state_reruns_one_step():
    torch.manual_seed(1)
    trace = walk.simulate(200, 0.1)
    with il.count_work() as work:
        new, weight, _ = trace.update({("chain", 50, "obs"): 0.0})
    assert work.executions == 2 and work.logpdf_evaluations == 1


def test_unfold_state_change_propagates_while_states_differ():
    T, t = 200, 190
    torch.manual_seed(2)
    trace, _ = counter_chain.generate((T,), {("chain", s, "reset"): False for s in range(T)})
    with il.count_work() as work:
        new, weight, _ = trace.update({("chain", t, "reset"): True})
    # Every later state is shifted, so every later step re-runs (and re-scores its "obs").
    assert work.executions == 1 + (T - t)
    assert work.logpdf_evaluations == 1 + (T - t)
    assert new["chain"][t:] == list(range(T - t))
    assert math.isclose(weight, new.score - trace.score, rel_tol=1e-9, abs_tol=1e-9)


def test_unfold_kept_value_stops_propagation():
    # The state is the choice "x"; changing x at step t changes step t+1's distribution,
    # but x at t+1 keeps its value, so the state after t+1 is unchanged: 2 steps re-run.
    T, t = 200, 150
    torch.manual_seed(2)
    trace = walk.simulate(T, 0.1)
    with il.count_work() as work:
        new, weight, _ = trace.update({("chain", t, "x"): 5.0})
    assert work.executions == 1 + 2
    assert work.logpdf_evaluations == 3     # x and obs at t, x at t + 1
    assert math.isclose(weight, new.score - trace.score, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(new.score, walk.assess((T, 0.1), new.get_choices()), rel_tol=1e-9)


def test_unfold_growing_runs_only_the_new_steps():
    torch.manual_seed(3)
    trace = walk.simulate(100, 0.1)
    with il.count_work() as work:
        new, weight, _ = trace.update({}, args=(103, 0.1))
    assert work.executions == 1 + 3 and work.logpdf_evaluations == 6
    assert math.isclose(weight, new.score - trace.score, rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------------------
# sub-calls inside a @gen function
# ---------------------------------------------------------------------------
@il.gen
def heavy():
    return [il.normal(0.0, 1.0) @ i for i in range(50)]


@il.gen
def light(mu):
    return il.normal(mu, 1.0) @ "a"


@il.gen
def outer():
    m = il.normal(0.0, 1.0) @ "m"
    light(m) @ "light"
    heavy() @ "heavy"


def test_sub_call_with_unchanged_args_is_not_rerun():
    torch.manual_seed(0)
    trace = outer.simulate()
    with il.count_work() as work:
        new, weight, _ = trace.update({"m": 0.5})
    # outer's body and light (whose argument changed); heavy() is reused as is.
    assert work.executions == 2
    assert work.logpdf_evaluations == 2          # "m" and ("light", "a")
    assert new._record_get(("heavy",)).trace is trace._record_get(("heavy",)).trace
    assert math.isclose(weight, new.score - trace.score, rel_tol=1e-9, abs_tol=1e-9)


def test_constraint_inside_a_sub_call_rescores_only_that_choice():
    torch.manual_seed(0)
    trace = outer.simulate()
    with il.count_work() as work:
        new, weight, _ = trace.update({("heavy", 7): 1.5})
    assert work.executions == 2                  # outer and heavy; light's args unchanged
    assert work.logpdf_evaluations == 1
    assert new["heavy", 8] is trace["heavy", 8]


# ---------------------------------------------------------------------------
# the bookkeeping shortcuts of update: kept records, nothing removed
# ---------------------------------------------------------------------------
@il.gen
def switch(as_call):
    il.normal(0.0, 1.0) @ "m"
    if as_call:
        return obs(0.5) @ "a"          # a sub-call where the other branch has a choice
    return il.normal(1.0, 2.0) @ "a"


def test_update_turning_a_choice_into_a_sub_call_discards_it():
    torch.manual_seed(0)
    trace = switch.simulate(False)
    new, weight, discard = trace.update({}, args=(True,))
    assert discard == {"a": trace["a"]}                  # the same number of addresses as before
    assert math.isclose(weight, new.score - trace.score, rel_tol=1e-12, abs_tol=1e-12)
    back, weight, discard = new.update({}, args=(False,))
    assert set(discard.addresses()) == {("a", "outlier"), ("a", "y")}
    assert math.isclose(weight, back.score - new.score, rel_tol=1e-12, abs_tol=1e-12)


def test_update_renaming_an_address_discards_the_old_one():
    @il.gen
    def named(name):
        il.normal(0.0, 1.0) @ "m"
        return il.normal(0.0, 1.0) @ name

    torch.manual_seed(0)
    trace = named.simulate("b")
    new, weight, discard = trace.update({"c": 0.25}, args=("c",))
    assert discard == {"b": trace["b"]} and "b" not in new
    assert math.isclose(weight, float(il.normal(0.0, 1.0).log_prob(torch.tensor(0.25, dtype=torch.float64)))
                        - trace.choice_record("b").logpdf, rel_tol=1e-12)


def test_unchanged_choices_keep_their_records():
    torch.manual_seed(0)
    trace = switch.simulate(False)
    with il.count_work() as work:
        new, weight, discard = trace.update({"m": 0.3})
    assert work.logpdf_evaluations == 1 and len(discard) == 1
    assert new.choice_record("a") is trace.choice_record("a")      # records are immutable: shared
    assert new.score == new.choice_record("m").logpdf + new.choice_record("a").logpdf


def _gmm_log_joint(trace, x):
    """log p of the Fig. 1 mixture model in scipy (independent of the engine's fast paths)."""
    k = trace["k"]
    mu = np.array([float(trace["mu", j]) for j in range(1, k + 1)])
    var = np.array([float(trace["var", j]) for j in range(1, k + 1)])
    w = trace["weights"].numpy()
    lp = stats.poisson(1.0, loc=1).logpmf(k) + stats.norm(0.0, 10.0).logpdf(mu).sum()
    lp += stats.invgamma(1.0, scale=10.0).logpdf(var).sum() + stats.dirichlet(np.full(k, 2.0)).logpdf(w)
    return lp + special.logsumexp(np.log(w) + stats.norm.logpdf(x[:, None], mu, np.sqrt(var)), axis=1).sum()


@pytest.mark.parametrize("n, k", [(100, 2), (1000, 8)])
def test_split_merge_model_update_weight_is_exact(n, k):
    torch.manual_seed(n + k)
    data = mixture.synthetic_data(n, seed=k)
    trace = mixture.initial_trace(data, k=k)
    x = data.numpy()
    # a split of cluster 1 (new last cluster) and a merge of cluster 1 with the last
    w = trace["weights"]
    split = {"k": k + 1, "weights": torch.cat([w[:1] * 0.3, w[1:], w[:1] * 0.7]),
             ("mu", 1): trace["mu", 1] - 0.5, ("mu", k + 1): trace["mu", 1] + 0.5,
             ("var", 1): trace["var", 1] * 0.8, ("var", k + 1): trace["var", 1] * 1.2}
    merge = {"k": k - 1, "weights": torch.cat([w[:1] + w[-1:], w[1:-1]]),
             ("mu", 1): (trace["mu", 1] + trace["mu", k]) / 2, ("var", 1): trace["var", 1] + 1.0}
    for constraints in (split, merge):
        new, weight, _ = trace.update(constraints)
        expected = _gmm_log_joint(new, x) - _gmm_log_joint(trace, x)
        assert math.isclose(weight, expected, rel_tol=1e-12, abs_tol=1e-12 * abs(_gmm_log_joint(trace, x)))
        assert math.isclose(new.score, _gmm_log_joint(new, x), rel_tol=1e-12)
