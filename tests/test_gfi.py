"""The generative function interface holds its identities on randomized traces.

For every test model (tests/core_models.py: stochastic control flow, recursion,
sub-calls, Map, Unfold) and many seeded random traces and random constraint sets:

* ``generate`` with every choice constrained: weight == ``assess`` == ``trace.score``,
  and both agree with a hand-written scipy log-joint where one exists;
* ``update``: weight == new.score - old.score (1e-9 relative), new.score is the
  true log-joint of the new choices, the discard is exactly the old values of
  overwritten addresses plus everything no longer visited, constrained values are
  set, every other surviving value is kept, and the old trace is unchanged;
* ``regenerate``: weight == the resimulation MH weight, recomputed here as the
  sum over kept, unselected addresses of new minus old log-density.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import imcmc_lab as il
from core_models import (GP_XS, LOG_JOINTS, MODELS, branching, cov_function_prior, gp,
                         inner, log_joint_branching, log_joint_gp, log_joint_map, map_model,
                         subcalls, unfold_model)


# ---------------------------------------------------------------------------
# helpers (deliberately independent of the engine's own comparison code)
# ---------------------------------------------------------------------------
def same(a, b) -> bool:
    """Exact structural equality of values (tensors, nested tuples/lists, scalars)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    return type(a) is type(b) and a == b


def assert_close(actual, expected, what, scale=()):
    """|actual - expected| <= 1e-9 * max(1, |scores involved|); infinities must match."""
    if math.isinf(actual) or math.isinf(expected):
        assert actual == expected, f"{what}: {actual} != {expected}"
        return
    tol = 1e-9 * max([1.0, abs(expected)] + [abs(s) for s in scale if math.isfinite(s)])
    assert abs(actual - expected) <= tol, f"{what}: {actual!r} != {expected!r} (tol {tol:.1e})"


def walk(trace, prefix=()):
    """{address: (value, log-density)} read from the trace's records, bypassing the
    trace's caches (so an in-place change to the old trace's records shows)."""
    out = {}
    for address, record in trace._record_items():
        if hasattr(record, "value"):
            out[prefix + address] = (record.value, record.logpdf)
        else:
            out.update(walk(record.trace, prefix + address))
    return out


def snapshot(trace):
    return (copy.deepcopy(walk(trace)), trace.score, copy.deepcopy(trace.retval),
            copy.deepcopy(trace.args))


def assert_unchanged(trace, snap, context):
    choices, score, retval, args = snap
    now = walk(trace)
    assert list(now) == list(choices), f"{context}: the old trace's addresses changed"
    for a, v in choices.items():
        assert same(now[a][0], v[0]), f"{context}: the old trace's value at {a} changed"
        assert now[a][1] == v[1], f"{context}: the old trace's log-density at {a} changed"
        assert same(trace[a], v[0]), f"{context}: trace[{a}] changed"
    assert list(trace.get_choices().addresses()) == list(choices)
    assert trace.score == score, f"{context}: the old trace's score changed"
    assert same(trace.retval, retval), f"{context}: the old trace's return value changed"
    assert same(trace.args, args), f"{context}: the old trace's args changed"


def true_log_joint(name, model, args, choices):
    """log p(choices), from the hand-written scipy log-joint of the model."""
    return LOG_JOINTS[name](*args, choices)


def records(trace):
    return trace.flat_records()


def continuous_addresses(trace):
    return [a for a, r in records(trace).items() if not r.dist.discrete]


def discrete_addresses(trace):
    return [a for a, r in records(trace).items() if r.dist.discrete]


# ---------------------------------------------------------------------------
# random constraint sets
# ---------------------------------------------------------------------------
def constraints_continuous(model, args_fn, trace, rng):
    """Fresh values at a random subset of continuous addresses; the path is unchanged.

    Each strategy returns ``(args, constraints, the new trace's addresses if known)``.
    """
    recs = records(trace)
    return trace.args, {a: recs[a].dist.sample() for a in continuous_addresses(trace)
                        if rng.random() < 0.4}, set(recs)


def constraints_one_discrete(model, args_fn, trace, rng):
    """A new value at one discrete address (may switch branches, adding/removing
    addresses) plus continuous addresses that executed before it."""
    recs = records(trace)
    order = list(recs)
    discrete = discrete_addresses(trace)
    if not discrete:
        return constraints_continuous(model, args_fn, trace, rng)
    target = discrete[int(rng.integers(len(discrete)))]
    old = recs[target].value
    value = old
    for _ in range(50):
        value = recs[target].dist.sample()
        if value != old:
            break
    cons = {target: value}
    for a in order[:order.index(target)]:
        if not recs[a].dist.discrete and rng.random() < 0.3:
            cons[a] = recs[a].dist.sample()
    return trace.args, cons, None


def constraints_other_trace(model, args_fn, trace, rng):
    """Every discrete choice of an independent trace (with new args) fixes the new
    path; some of its continuous choices too. Branches switch wholesale."""
    args = args_fn(rng)
    other = model.simulate(*args)
    recs = records(other)
    cons = {a: r.value for a, r in recs.items() if r.dist.discrete or rng.random() < 0.5}
    return args, cons, set(recs)


def constraints_args_only(model, args_fn, trace, rng):
    """New arguments, nothing constrained: re-scores kept values, samples new addresses."""
    return args_fn(rng), {}, None


STRATEGIES = [constraints_continuous, constraints_one_discrete, constraints_other_trace,
              constraints_args_only]


# ---------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------
def check_generate_all(name, model, args, choices, context):
    expected = true_log_joint(name, model, args, choices)
    trace, weight = model.generate(args, choices)
    assessed = model.assess(args, choices)
    assert_close(weight, expected, f"{context}: generate weight vs log-joint")
    assert_close(assessed, expected, f"{context}: assess vs log-joint")
    assert_close(trace.score, expected, f"{context}: trace.score vs log-joint")
    assert trace.get_choices() == il.ChoiceMap(choices), f"{context}: generate changed choices"
    return trace


def check_update(name, model, old, args, cons, context):
    snap = snapshot(old)
    new, weight, discard = old.update(cons, args=args)
    assert_unchanged(old, snap, context)

    old_cm, new_cm = old.get_choices(), new.get_choices()
    true_new = true_log_joint(name, model, args, new_cm)
    assert_close(new.score, true_new, f"{context}: new.score vs true log-joint",
                 (old.score,))
    assert_close(weight, new.score - old.score, f"{context}: update weight vs score difference",
                 (old.score, new.score))
    assert same(tuple(new.args), tuple(args)), f"{context}: new trace has args {new.args}"

    constrained = {il.normalize_address(a) for a in cons}
    for a in constrained:
        assert a in new_cm, f"{context}: constrained {a} missing from the new trace"
        assert same(new_cm[a], records(new)[a].dist.coerce(cons[a])) or \
            same(new_cm[a], cons[a]), f"{context}: constrained value at {a} not set"
    for a, v in old_cm.items():
        if a in new_cm and a not in constrained:
            assert same(new_cm[a], v), f"{context}: unconstrained {a} did not keep its value"
    expected_discard = {a: v for a, v in old_cm.items() if a in constrained or a not in new_cm}
    assert set(discard.addresses()) == set(expected_discard), (
        f"{context}: discard has {sorted(map(str, discard.addresses()))}, "
        f"expected {sorted(map(str, expected_discard))}")
    for a, v in expected_discard.items():
        assert same(discard[a], v), f"{context}: discard holds the wrong old value at {a}"
    return new


def random_selection(trace, rng):
    picked = []
    for a in trace.get_choices().addresses():
        u = rng.random()
        if u < 0.25:
            picked.append(a)
        elif u < 0.3 and len(a) > 1:
            picked.append(a[:int(rng.integers(1, len(a)))])   # a whole namespace
    return il.select(*picked), picked


def check_regenerate(name, model, old, args, selection, context):
    snap = snapshot(old)
    new, weight = old.regenerate(selection, args=args)
    assert_unchanged(old, snap, context)
    old_recs, new_recs = records(old), records(new)
    assert_close(new.score, true_log_joint(name, model, args, new.get_choices()),
                 f"{context}: regenerated score vs true log-joint")
    expected = 0.0
    for a, old_rec in old_recs.items():
        if a in new_recs and a not in selection:
            new_rec = new_recs[a]
            assert same(new_rec.value, old_rec.value), f"{context}: unselected {a} changed"
            expected += (float(new_rec.dist.log_prob(new_rec.value))
                         - float(old_rec.dist.log_prob(old_rec.value)))
    assert_close(weight, expected, f"{context}: regenerate weight vs MH resimulation weight",
                 (old.score, new.score))
    for a, old_rec in old_recs.items():
        if a in selection and a in new_recs and not old_rec.dist.discrete:
            # Resampled from a continuous prior: equal to the old value with probability 0.
            assert not same(new_recs[a].value, old_rec.value), f"{context}: {a} not resampled"
    return new


# ---------------------------------------------------------------------------
# randomized tests
# ---------------------------------------------------------------------------
SEEDS = range(25)


@pytest.mark.parametrize("name", list(MODELS))
def test_generate_with_all_choices_constrained_equals_assess_and_score(name):
    model, args_fn = MODELS[name]
    for seed in SEEDS:
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        args = args_fn(rng)
        trace = model.simulate(*args)
        context = f"{name}, seed {seed}"
        assert_close(trace.score, true_log_joint(name, model, args, trace.get_choices()),
                     f"{context}: simulate score vs log-joint")
        check_generate_all(name, model, args, trace.get_choices(), context)


@pytest.mark.parametrize("name", list(MODELS))
def test_generate_partial_weight_is_log_density_of_constrained_choices(name):
    model, args_fn = MODELS[name]
    for seed in SEEDS:
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        args = args_fn(rng)
        source = model.simulate(*args)
        # A prefix of the execution order is always visited again.
        items = list(source.get_choices().items())
        cut = int(rng.integers(0, len(items) + 1))
        cons = dict(items[:cut])
        trace, weight = model.generate(args, cons)
        recs = records(trace)
        expected = sum(float(recs[a].dist.log_prob(recs[a].value)) for a in cons)
        assert_close(weight, expected, f"{name}, seed {seed}: generate weight")
        for a, v in cons.items():
            assert same(trace[a], v), f"{name}, seed {seed}: constraint at {a} not kept"
        assert_close(trace.score, model.assess(args, trace.get_choices()),
                     f"{name}, seed {seed}: score")


@pytest.mark.parametrize("name", list(MODELS))
def test_update_identities_on_random_constraints(name):
    model, args_fn = MODELS[name]
    switched = 0
    for seed in SEEDS:
        torch.manual_seed(seed)
        rng = np.random.default_rng(1000 + seed)
        trace = model.simulate(*args_fn(rng))
        # A chain of updates: traces produced by update must update correctly too.
        for step in range(8):
            strategy = STRATEGIES[int(rng.integers(len(STRATEGIES)))]
            args, cons, expected_addresses = strategy(model, args_fn, trace, rng)
            context = f"{name}, seed {seed}, step {step}, {strategy.__name__}"
            new = check_update(name, model, trace, args, cons, context)
            if set(new.get_choices().addresses()) != set(trace.get_choices().addresses()):
                switched += 1
            if expected_addresses is not None:
                assert set(new.get_choices().addresses()) == expected_addresses, context
            check_generate_all(name, model, args, new.get_choices(), context)
            trace = new
    assert switched >= 10, f"{name}: only {switched} updates changed the address set"


@pytest.mark.parametrize("name", list(MODELS))
def test_update_with_identical_trace_is_a_no_op(name):
    model, args_fn = MODELS[name]
    for seed in range(5):
        torch.manual_seed(seed)
        trace = model.simulate(*args_fn(np.random.default_rng(seed)))
        new, weight, discard = trace.update({})
        assert weight == 0.0
        assert len(discard) == 0
        assert new.get_choices() == trace.get_choices()
        assert new.score == trace.score


@pytest.mark.parametrize("name", list(MODELS))
def test_regenerate_weight_is_resimulation_mh_weight(name):
    model, args_fn = MODELS[name]
    nonzero = 0
    for seed in SEEDS:
        torch.manual_seed(seed)
        rng = np.random.default_rng(2000 + seed)
        trace = model.simulate(*args_fn(rng))
        for step in range(4):
            selection, picked = random_selection(trace, rng)
            args = args_fn(rng) if rng.random() < 0.3 else trace.args
            context = f"{name}, seed {seed}, step {step}, selection {picked}"
            new = check_regenerate(name, model, trace, args, selection, context)
            trace = new
            nonzero += 1
    assert nonzero == len(SEEDS) * 4


# ---------------------------------------------------------------------------
# targeted cases
# ---------------------------------------------------------------------------
def test_update_that_lowers_k_discards_the_removed_means():
    torch.manual_seed(0)
    trace, _ = branching.generate((2,), {"k": 3, "wide": False})
    new, weight, discard = trace.update({"k": 1})
    assert ("mu", 2) not in new and ("mu", 3) not in new
    assert discard == {"k": 3, ("mu", 2): trace["mu", 2], ("mu", 3): trace["mu", 3]}
    assert_close(weight, log_joint_branching(2, new.get_choices())
                 - log_joint_branching(2, trace.get_choices()), "weight")
    # And back up: the new means are sampled and their prior density enters the weight.
    back, weight2, discard2 = new.update({"k": 4})
    assert [("mu", j) in back for j in range(1, 5)] == [True] * 4
    assert discard2 == {"k": 1}
    assert_close(weight2, back.score - new.score, "weight")


def test_update_of_pcfg_node_type_replaces_its_subtree():
    torch.manual_seed(3)
    cons = {("cov_function", "node_type"): 4,
            ("cov_function", "left_node", "node_type"): 0,
            ("cov_function", "right_node", "node_type"): 5,
            ("cov_function", "right_node", "left_node", "node_type"): 2,
            ("cov_function", "right_node", "right_node", "node_type"): 1}
    trace, _ = gp.generate((GP_XS,), cons)
    assert trace["cov_function"][0] == "plus"
    new, weight, discard = trace.update({("cov_function", "right_node", "node_type"): 3})
    gone = [a for a in trace.get_choices().addresses()
            if a[:3] in {("cov_function", "right_node", "left_node"),
                         ("cov_function", "right_node", "right_node")}]
    assert gone and all(a in discard and a not in new for a in gone)
    assert ("cov_function", "right_node", "period") in new
    assert new["cov_function", "left_node", "param"] == trace["cov_function", "left_node", "param"]
    assert_close(weight, new.score - trace.score, "weight")
    assert_close(new.score, log_joint_gp(GP_XS, new.get_choices()), "score")


def test_update_replacing_the_callee_at_an_address_discards_the_old_subtrace():
    @il.gen
    def left():
        return il.normal(0.0, 1.0) @ "z"

    @il.gen
    def right():
        return il.normal(5.0, 2.0) @ "z"

    @il.gen
    def chooser(use_left):
        return (left() if use_left else right()) @ "part"

    torch.manual_seed(0)
    trace = chooser.simulate(True)
    new, weight, discard = trace.update({}, args=(False,))
    assert discard == {("part", "z"): trace["part", "z"]}
    assert_close(new.score, float(il.normal(5.0, 2.0).log_prob(new["part", "z"])), "score")
    assert_close(weight, new.score - trace.score, "weight")


def test_map_and_unfold_growing_and_shrinking_keep_score_exact():
    torch.manual_seed(1)
    trace = map_model.simulate([0.5, 1.0])
    grown, w, discard = trace.update({}, args=([0.5, 1.0, 2.0, 3.0],))
    assert len(discard) == 0 and ("data", 3, "y") in grown
    assert_close(grown.score, log_joint_map([0.5, 1.0, 2.0, 3.0], grown.get_choices()), "score")
    assert_close(w, grown.score - trace.score, "weight")
    shrunk, w, discard = grown.update({}, args=([0.5],))
    assert {a[:2] for a in discard.addresses()} == {("data", 1), ("data", 2), ("data", 3)}
    assert_close(shrunk.score, log_joint_map([0.5], shrunk.get_choices()), "score")
    assert_close(w, shrunk.score - grown.score, "weight")

    chain = unfold_model.simulate(2)
    longer, w, _ = chain.update({}, args=(6,))
    assert [("chain", t, "obs") in longer for t in range(6)] == [True] * 6
    assert_close(longer.score, LOG_JOINTS["unfold"](6, longer.get_choices()), "score")
    assert_close(w, longer.score - chain.score, "weight")
    assert len(longer["chain"]) == 6


def test_update_changing_args_rescores_kept_values():
    torch.manual_seed(2)
    trace = subcalls.simulate(0.0)
    new, weight, discard = trace.update({}, args=(2.0,))
    assert len(discard) == 0
    assert new["m"] == trace["m"]
    expected = (float(il.normal(2.0, 1.0).log_prob(trace["m"]))
                - float(il.normal(0.0, 1.0).log_prob(trace["m"])))
    assert_close(weight, expected, "weight")


def test_update_keeping_a_vector_value_of_the_wrong_length_gives_minus_inf():
    torch.manual_seed(0)
    trace = gp.simulate(GP_XS)
    xs3 = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    new, weight, _ = trace.update({}, args=(xs3,))
    assert weight == -math.inf and new.score == -math.inf
    # Constraining the observation to the right length makes the trace valid again.
    fixed, weight, _ = trace.update({"y_values": torch.zeros(3)}, args=(xs3,))
    assert math.isfinite(weight)
    assert_close(weight, fixed.score - trace.score, "weight")


def test_assess_rejects_missing_and_extra_choices():
    torch.manual_seed(0)
    trace, _ = branching.generate((1,), {"k": 2, "wide": False})
    choices = dict(trace.get_choices().items())
    assert_close(branching.assess((1,), choices), trace.score, "assess")
    missing = dict(choices)
    del missing[("mu", 2)]
    assert branching.assess((1,), missing) == -math.inf
    extra = dict(choices)
    extra[("mu", 3)] = torch.tensor(0.0)
    assert branching.assess((1,), extra) == -math.inf
    # An inner call's choices are part of "exactly a trace" too.
    full = dict(subcalls.simulate(0.0).get_choices().items())
    full[("sub2", "unused")] = 1.0
    assert subcalls.assess((0.0,), full) == -math.inf


def test_simulate_returns_the_program_return_value_and_args():
    torch.manual_seed(0)
    trace = branching.simulate(3)
    assert trace.retval == trace["k"] == trace[()]
    assert trace.args == (3,)
    m = map_model.simulate([1.0, 2.0])
    assert same(m.retval, [m["data", 0, "y"], m["data", 1, "y"]])
    assert inner.simulate(0.0).retval is not None
    node = cov_function_prior.simulate()
    assert node.retval[0] in {"constant", "linear", "squared_exp", "periodic", "plus", "times"}


def test_differentiable_score_substitutes_by_any_address_spelling():
    # "u" and ("u",) are the same address; an unknown one is an error, never ignored
    @il.gen
    def model():
        u = il.beta(2.0, 3.0) @ "u"
        il.bernoulli(u) @ "b"

    trace, _ = model.generate((), {"u": 0.3, "b": True})
    for key in ("u", ("u",)):
        v = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
        lp, _ = il.differentiable_score(trace, {key: v})
        assert float(lp.detach()) == pytest.approx(float(model.assess((), {"u": 0.4, "b": True})))
        (grad,) = torch.autograd.grad(lp, v)
        # d/du [log Beta(u; 2, 3) + log u] = 1/u - 2/(1 - u) + 1/u
        assert float(grad) == pytest.approx(2 / 0.4 - 2 / 0.6)
    with pytest.raises(il.AddressError, match="no choice at 'uu'.*Did you mean 'u'"):
        il.differentiable_score(trace, {"uu": v})
