"""Loops of independent choices as one indexed family (issue 22).

``for i in keys: dist(args) @ ("x", i)`` (the paper's Fig. 1 spelling of the data) runs as
one family: the same trace, the same random stream, the same errors as the loop run as
written (``@gen(lower=False)``); a move that changes the distribution re-scores the
family with one vectorised density call. Log-densities of a mixture computed in one
vectorised call agree with the per-choice ones to rounding (1e-15), so the differential
tests compare values and accept decisions exactly and scores to 1e-9.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import random
import re

import pytest
import torch

import imcmc_lab as il
from imcmc_lab.core.distributions import as_param, constraints
from imcmc_lab.core.distributions.mixtures import MixtureOfNormals
from imcmc_lab.examples import mixture, per_point, two_clusters
from imcmc_lab.modeling.execution import count_work

# Compact families are exercised from 8 elements on (the default threshold is 64).
pytestmark = pytest.mark.usefixtures("compact_families_from_8")


@contextlib.contextmanager
def _mixture_log_prob_calls():
    """``(calls, work)``: the shapes ``MixtureOfNormals.log_prob`` was called on, and the
    engine's work counters, inside the block."""
    calls, original = [], MixtureOfNormals.log_prob

    def counting(self, x):
        calls.append(tuple(x.shape))
        return original(self, x)

    MixtureOfNormals.log_prob = counting
    try:
        with count_work() as work:
            yield calls, work
    finally:
        MixtureOfNormals.log_prob = original


def _values(trace):
    out = []
    for address, rec in trace.flat_records().items():
        value = rec.value.reshape(-1).tolist() if isinstance(rec.value, torch.Tensor) else rec.value
        out.append((address, value))
    return out


def _same(a, b):
    assert _values(a) == _values(b)
    assert math.isclose(a.score, b.score, rel_tol=1e-12, abs_tol=1e-9)
    for (address, ra), rb in zip(a.flat_records().items(), b.flat_records().values()):
        assert math.isclose(ra.logpdf, rb.logpdf, rel_tol=1e-12, abs_tol=1e-12), address


def _chains(model, kernel, data, k, steps):
    plain = il.gen(model.__wrapped__, lower=False)
    assert model.lowered and not plain.lowered
    constraints = {**per_point.observations(data), "k": k}
    torch.manual_seed(0)
    a = model.generate((len(data),), constraints)[0]
    torch.manual_seed(0)
    b = plain.generate((len(data),), constraints)[0]
    _same(a, b)
    accepted = 0
    for step in range(steps):
        torch.manual_seed(step)
        a, accepted_a = kernel(a)
        torch.manual_seed(step)
        b, accepted_b = kernel(b)
        assert accepted_a == accepted_b, step
        _same(a, b)
        accepted += accepted_a
    return accepted


def test_fig1_split_merge_per_point_is_identical_lowered_and_as_written():
    kernel = il.InvolutiveKernel(mixture.split_merge_aux, (), mixture.split_merge)
    accepted = _chains(per_point.gmm_per_point, kernel, mixture.synthetic_data(40, seed=3), 3, 80)
    assert accepted >= 5


def test_two_clusters_split_merge_per_point_is_identical_lowered_and_as_written():
    kernel = two_clusters.two_cluster_kernel()
    data = torch.cat([torch.randn(20, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + s
                      for s in (-3.0, 3.0)])
    accepted = _chains(per_point.two_clusters_per_point, kernel, data, 1, 80)
    assert accepted >= 5


def test_per_point_and_iid_spellings_have_the_same_density():
    data = mixture.synthetic_data(50, seed=4)
    torch.manual_seed(0)
    trace = mixture.gmm.generate((50,), {"x": data, "k": 3})[0]
    choices = {a: trace[a] for a in ["k", "weights"] + [(n, j) for n in ("mu", "var") for j in (1, 2, 3)]}
    iid = mixture.gmm.assess((50,), {**choices, "x": data})
    loop = per_point.gmm_per_point.assess((50,), {**choices, **per_point.observations(data)})
    assert math.isclose(iid, loop, rel_tol=1e-12)


def test_a_changed_distribution_is_rescored_by_one_call():
    data = mixture.synthetic_data(200, seed=5)
    torch.manual_seed(0)
    trace = per_point.two_clusters_per_point.generate((200,), {**per_point.observations(data), "k": 1})[0]
    plain = il.gen(per_point.two_clusters_per_point.__wrapped__, lower=False)
    trace_plain = plain.generate((200,), {**per_point.observations(data), "k": 1, ("mu", 1): trace["mu", 1]})[0]
    new, weight, _ = trace.update({("mu", 1): 0.7})
    new_plain, weight_plain, _ = trace_plain.update({("mu", 1): 0.7})
    assert math.isclose(weight, weight_plain, rel_tol=1e-12) and _values(new) == _values(new_plain)
    # the data are held as one compact record (values and log-densities as tensors)
    assert [type(r).__name__ for r in new._records.values()] == ["ChoiceRecord", "ChoiceRecord", "FamilyRecord"]
    with _mixture_log_prob_calls() as (calls, work):
        newer, _, _ = new.update({("mu", 1): -0.2})
    assert calls == [(200,)] and work.logpdf_evaluations == 201     # the data in one call, and mu


def test_the_loop_variable_is_bound_as_the_loop_binds_it(tmp_path):
    source = ("def model(keys):\n    for i in keys:\n        il.normal(0.0, 1.0) @ ('x', i)\n"
              "    return i\n")
    lowered, plain = _from_source(source, tmp_path)
    assert lowered.simulate(list(range(3, 20))).retval == plain.simulate(list(range(3, 20))).retval == 19
    for gen_fn in (lowered, plain):
        with pytest.raises(UnboundLocalError):
            gen_fn.simulate([])


def test_the_lowering_report_says_what_was_lowered_and_why_not():
    report = per_point.gmm_per_point.lowering_report
    assert len(report) == 3 and all("runs as one indexed family" in line for line in report)
    assert any(line.startswith("line ") and "loop" in line for line in report)

    @il.gen
    def model(mu):
        for i in range(3):
            il.normal(mu[i], 1.0) @ ("y", i)
        return [il.normal(0.0, 1.0) @ ("z", i) for i in range(2) if i]

    report = model.lowering_report
    assert not model.lowered and len(report) == 2
    assert "may change from one key to the next" in report[0] and "`if`" in report[1]
    assert "lowering is off" in il.gen(per_point.gmm_per_point.__wrapped__, lower=False).lowering_report[0]


def _from_source(source, tmp_path, name="model"):
    path = tmp_path / f"{name}_{abs(hash(source))}.py"
    path.write_text(source)
    namespace = {"il": il, "torch": torch}
    exec(compile(source, str(path), "exec"), namespace)
    return il.gen(namespace["model"]), il.gen(namespace["model"], lower=False)


_ARGS = ["0.5", "mu", "mu + 1.0", "box.value", "float(i)", "mu * 2.0 - 1.0", "scale", "-scale"]
_KEYS = ["range(1, n + 1)", "list(range(n))", "[3, 1, 2][:n]", "range(0)"]


def _random_program(rng):
    """A model with one loop or comprehension of random shape (issue 16 item 6: only what is
    provably the same is lowered; the rest must still give identical traces)."""
    mean, std = rng.choice(_ARGS), rng.choice(["1.0", "scale", "box.value", "scale + 0.5"])
    keys = rng.choice(_KEYS)
    dist = rng.choice([f"il.normal({mean}, {std})", f"il.gamma({std}, 2.0)"])
    lines = ["class Box:", "    def __init__(self):", "        self.n = 0",
             "    @property", "    def value(self):", "        self.n += 1", "        return float(self.n)",
             "def model(n, scale):", "    box = Box()", "    mu = il.normal(0.0, 1.0) @ 'mu'"]
    if rng.random() < 0.5:
        lines += [f"    for i in {keys}:", f"        {dist} @ ('x', i)", "    return box.n"]
    else:
        lines += [f"    xs = [{dist} @ ('x', i) for i in {keys}]", "    return box.n, len(xs)"]
    return "\n".join(lines) + "\n"


def test_random_loop_shapes_are_identical_lowered_and_as_written(tmp_path):
    rng = random.Random(22)
    for case in range(40):
        source = _random_program(rng)
        lowered, plain = _from_source(source, tmp_path)
        for n, scale in ((12, 1.5), (3, 0.75)):
            torch.manual_seed(case)
            a = lowered.simulate(n, scale)
            torch.manual_seed(case)
            b = plain.simulate(n, scale)
            assert a.retval == b.retval and _values(a) == _values(b), source
            # a compact family's log-densities enter the score as one sum (rounding apart)
            assert math.isclose(a.score, b.score, rel_tol=1e-12, abs_tol=1e-12), source
            for args in ((n, scale * 1.25), (n + 2, scale)):
                torch.manual_seed(case)
                ua, wa, _ = a.update({"mu": 0.25}, args=args)
                torch.manual_seed(case)
                ub, wb, _ = b.update({"mu": 0.25}, args=args)
                assert _values(ua) == _values(ub) and ua.retval == ub.retval, source
                assert wa == wb or math.isclose(wa, wb, rel_tol=1e-12), source


def _error(call):
    try:
        call()
    except Exception as exc:        # noqa: BLE001 -- the test compares what each spelling raises
        return type(exc).__name__, str(exc)
    return None


def _per_point_pair(n=30):
    model = per_point.two_clusters_per_point
    plain = il.gen(model.__wrapped__, lower=False)
    given = {**per_point.observations(mixture.synthetic_data(n, seed=1)), "k": 1, ("mu", 1): 0.3}
    return model.generate((n,), given)[0], plain.generate((n,), given)[0]


def test_a_compact_family_answers_every_address_as_the_choices_one_by_one():
    a, b = _per_point_pair()
    assert [type(r).__name__ for r in a._records.values()] == ["ChoiceRecord", "ChoiceRecord", "FamilyRecord"]
    assert a.get_choices() == b.get_choices() and list(a.get_choices()) == list(b.get_choices())
    assert list(a.flat_records()) == list(b.flat_records()) and len(a.flat_records()) == len(b.flat_records())
    assert a["x"] == b["x"] and ("x", 5) in a and ("x",) in a and ("x", 31) not in a
    assert torch.equal(a["x", 5], b["x", 5]) and a["x", 5] is a.get_choices()["x", 5]
    assert _error(lambda: a["x", 31]) == _error(lambda: b["x", 31]) is not None
    for constraints, args in (({("x", 4): 0.3, ("mu", 1): 0.2}, None), ({}, (26,)), ({"k": 2, ("mu", 2): 1.0}, None)):
        (ta, wa, da), (tb, wb, db) = a.update(constraints, args=args), b.update(constraints, args=args)
        _same(ta, tb)
        assert math.isclose(wa, wb, rel_tol=1e-12) and da == db
    assert _error(lambda: a.update({("x", 4): "a"})) == _error(lambda: b.update({("x", 4): "a"})) is not None
    restored = pickle.loads(pickle.dumps(a.update({("x", 4): 0.3})[0]))
    _same(restored, b.update({("x", 4): 0.3})[0])
    assert math.isclose(restored.update({("mu", 1): 1.0})[1], b.update({("x", 4): 0.3})[0].update({("mu", 1): 1.0})[1],
                        rel_tol=1e-12)


def test_values_of_a_compact_family_changed_in_place_are_refused_as_before():
    """Issue 16's rule holds for family elements: a value handed out (trace[a], get_choices())
    and changed in place makes the traces holding it refuse to be used, naming the address."""
    errors = []
    for side in (0, 1):         # lowered (compact), then as written
        trace = _per_point_pair()[side]
        rescored = trace.update({("mu", 1): 0.5})[0]        # holds the same data tensors
        value = trace["x", 3]
        value.add_(1.0)
        errors += [_error(lambda t=t: t.update({("mu", 1): 0.1})) for t in (trace, rescored)]
        other = _per_point_pair()[side]
        other.get_choices()["x", 7].mul_(2.0)
        errors.append(_error(lambda: other.update({("mu", 1): 0.1})))
    assert errors[:3] == errors[3:]
    assert [e[0] for e in errors[:3]] == ["TraceChangedError"] * 3
    assert "('x', 3)" in errors[0][1] and "('x', 3)" in errors[1][1] and "('x', 7)" in errors[2][1]


def test_observations_are_copied_at_entry_into_a_compact_family():
    data = mixture.synthetic_data(20, seed=2)
    given = {**per_point.observations(data), "k": 1}
    trace = per_point.two_clusters_per_point.generate((20,), given)[0]
    given[("x", 2)].add_(5.0)
    data.add_(5.0)
    assert trace["x", 2].item() == mixture.synthetic_data(20, seed=2)[1].item()
    assert trace.update({("mu", 1): 0.0})[0]["x", 2].item() == trace["x", 2].item()


def test_regenerate_keeps_or_rescores_a_compact_family_the_selection_does_not_reach():
    a, b = _per_point_pair()
    for selection in (il.select(("mu", 1)), il.select(("x", 4), "k"), il.select("x"), il.select_all()):
        torch.manual_seed(5)
        ta, wa = a.regenerate(selection)
        torch.manual_seed(5)
        tb, wb = b.regenerate(selection)
        _same(ta, tb)
        assert math.isclose(wa, wb, rel_tol=1e-12, abs_tol=1e-12), selection
    with _mixture_log_prob_calls() as (calls, work):
        new, _ = a.regenerate(il.select(("mu", 1)))
    assert calls == [(30,)] and work.logpdf_evaluations == 31      # the data in one call, and mu
    assert [type(r).__name__ for r in new._records.values()][-1] == "FamilyRecord"


# -- Map over data with a single-choice kernel (issue 22) ------------------------------
@il.gen
def _point(mu, s):
    return il.normal(mu * 2.0 - 1.0, s) @ "y"


@il.gen
def _point_run(mu, s):          # the same kernel in two statements: run element by element
    y = il.normal(mu * 2.0 - 1.0, s) @ "y"
    return y


@il.gen
def _positive(rate, unused):
    return il.gamma(2.0, rate) @ "y"


@il.gen
def _positive_run(rate, unused):
    y = il.gamma(2.0, rate) @ "y"
    return y


def _map_model(kernel):
    @il.gen
    def model(n):
        mu = il.normal(0.0, 10.0) @ "mu"
        s = il.gamma(2.0, 1.0) @ "s"
        half = n // 2       # the first half's arguments follow mu and s, the second's are fixed
        mus = torch.cat([mu.expand(half), torch.full((n - half,), 0.5, dtype=torch.float64)])
        return il.Map(kernel)(mus, torch.cat([s.expand(half), torch.ones(n - half, dtype=torch.float64)])) @ "data"
    return model


def _strip_lines(text):
    return re.sub(r"\(line \d+: [^)]*\)", "(line)", text)


def _elements(trace):
    return trace._records[("data",)].trace.subtraces


_MOVES = [{"mu": 0.25}, {"s": 2.5, "mu": 0.5}, {"mu": 1.0, ("data", 3, "y"): 0.9}, {"s": 1.5}]


@pytest.mark.parametrize("kernels, bad", [((_point, _point_run), {"s": -1.0}),
                                          ((_positive, _positive_run), {"mu": -0.5})])
def test_map_of_a_single_choice_kernel_scores_its_changed_elements_together(kernels, bad):
    """The same traces, weights, discards and errors as the kernel run element by element;
    the changed elements' kept values are re-scored in one ``log_prob`` call."""
    fast, slow = (_map_model(k) for k in kernels)
    ys = torch.rand(40, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.5
    given = {**{("data", i, "y"): ys[i] for i in range(40)}, "mu": 0.75, "s": 1.5}
    a, b = fast.generate((40,), given)[0], slow.generate((40,), given)[0]
    _same(a, b)
    kind = type(a.choice_record(("data", 0, "y")).dist)
    calls, original = [], kind.log_prob

    def counting(self, x):
        calls.append(tuple(x.shape))
        return original(self, x)

    for constraints in _MOVES:
        kind.log_prob = counting
        try:
            ta, wa, da = a.update(constraints)
        finally:
            kind.log_prob = original
        tb, wb, db = b.update(constraints)
        _same(ta, tb)
        assert math.isclose(wa, wb, rel_tol=1e-12, abs_tol=1e-12) and da == db
        assert all(len(x.args) == len(y.args) and all(map(torch.equal, x.args, y.args))
                   for x, y in zip(_elements(ta), _elements(tb)))
        changed = 19 if ("data", 3, "y") in constraints else 20     # the half that follows mu and s
        rescored = "mu" in constraints or kernels[0] is _point          # _positive ignores s
        assert [c for c in calls if c] == ([(changed,)] if rescored else []), constraints   # (): "s" itself
        calls.clear()
        a, b = ta, tb
    errors = [_error(lambda t=t: t.update(bad)) for t in (a, b)]
    assert errors[0][0] == errors[1][0] == "DistributionError"
    assert _strip_lines(errors[0][1]) == _strip_lines(errors[1][1])


class _Box:
    scale = 2.0


def _attribute(mu):
    return il.normal(mu, _Box.scale) @ "y"


def _called(mu):
    return il.normal(abs(mu), 1.0) @ "y"


def _default(mu, s=1.0):
    return il.normal(mu, s) @ "y"


def _nested_address(mu):
    return il.normal(mu, 1.0) @ ("y", 1)


def _global_arithmetic(mu):
    return il.normal(mu + _Box.scale, 1.0) @ "y"


def test_only_provably_single_choice_kernels_are_scored_together():
    from imcmc_lab.modeling.families import single_choice_kernel

    make, address = single_choice_kernel(_point.fn)
    assert address == ("y",) and make(torch.tensor(1.0), 0.5)[1][0].item() == 1.0
    assert single_choice_kernel(_positive.fn) is not None
    scale = 2.0

    def closure(mu):
        return il.normal(mu, scale) @ "y"

    for fn in (_point_run.fn, _attribute, _called, _default, _nested_address, _global_arithmetic, closure):
        assert single_choice_kernel(fn) is None, fn.__name__


class _Faulty(il.Distribution):
    """normal(center, 1), except that from ``center >= 1`` on its density is +inf above 0.5 and
    0 below -0.5, and from ``center <= -1`` on it is NaN above 0.5 (a user's distribution
    gone wrong)."""

    name = "faulty"
    arg_constraints = {"center": constraints.real}
    __slots__ = ("center",)

    def __init__(self, center):
        super().__init__(center)
        self.center = as_param(center)

    def sample(self):
        return self.center + torch.randn((), dtype=torch.float64)

    def log_prob(self, x):
        z = x - self.center
        lp = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
        if self.center >= 1:
            lp = torch.where(x > 0.5, math.inf, torch.where(x < -0.5, -math.inf, lp))
        if self.center <= -1:
            lp = torch.where(x > 0.5, math.nan, lp)
        return lp


@il.gen
def _faulty_points(n):
    c = il.normal(0.0, 1.0) @ "c"
    for i in range(n):
        _Faulty(c) @ ("x", i)


def test_nan_and_infinite_densities_in_a_rescored_compact_family_are_as_written():
    """A NaN density raises the error naming the first element, as the loop run as written
    does; +inf and -inf densities together (a NaN sum with no NaN element) are a NaN weight."""
    plain = il.gen(_faulty_points.__wrapped__, lower=False)
    given = {"c": 0.0, **{("x", i): v for i, v in enumerate(torch.linspace(-1, 1, 12, dtype=torch.float64))}}
    a, b = _faulty_points.generate((12,), given)[0], plain.generate((12,), given)[0]
    assert _faulty_points.lowered and type(a._records[next(reversed(a._records))]).__name__ == "FamilyRecord"
    error = _error(lambda: a.update({"c": -1.0}))
    assert error == _error(lambda: b.update({"c": -1.0})) and error[0] == "DistributionError"
    assert "('x', 9)" in error[1] and "NaN" in error[1]
    (ta, wa, _), (tb, wb, _) = a.update({"c": 1.0}), b.update({"c": 1.0})
    assert math.isnan(wa) and math.isnan(wb) and _values(ta) == _values(tb)
    assert [r.logpdf for r in ta.flat_records().values()] == [r.logpdf for r in tb.flat_records().values()]
