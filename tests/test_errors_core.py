"""Errors of the engine core name the address involved and say what to do."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import imcmc_lab as il


def _line_of(fn, text):
    """(line number, stripped source line) of the line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset, line.strip()
    raise AssertionError(f"{text!r} not in the source of {fn}")


# ---------------------------------------------------------------------------
# the same address sampled twice
# ---------------------------------------------------------------------------
@il.gen
def sampled_twice():
    a = il.normal(0.0, 1.0) @ "x"
    b = il.normal(a, 2.0) @ "x"
    return b


@il.gen
def loop_without_index(n):
    for i in range(n):
        il.normal(0.0, 1.0) @ ("y", 0)


def test_duplicate_address_names_the_address_and_both_source_lines():
    with pytest.raises(il.DuplicateAddressError) as info:
        sampled_twice.simulate()
    message = str(info.value)
    first_no, first_text = _line_of(sampled_twice.fn, "il.normal(0.0, 1.0) @ \"x\"")
    second_no, second_text = _line_of(sampled_twice.fn, "il.normal(a, 2.0) @ \"x\"")
    assert "'x'" in message
    assert f"line {first_no}" in message and first_text in message
    assert f"line {second_no}" in message and second_text in message
    assert message.index(first_text) < message.index(second_text)


def test_duplicate_address_in_a_loop_suggests_an_index():
    with pytest.raises(il.DuplicateAddressError) as info:
        loop_without_index.simulate(3)
    message = str(info.value)
    assert "('y', 0)" in message
    assert "loop index" in message
    # The duplicate is caught in every mode, not only simulate.
    with pytest.raises(il.DuplicateAddressError):
        loop_without_index.generate((2,), {})


def test_duplicate_address_between_a_choice_and_a_sub_call():
    @il.gen
    def callee():
        return il.normal(0.0, 1.0) @ "z"

    @il.gen
    def clash():
        il.normal(0.0, 1.0) @ "part"
        return callee() @ "part"

    with pytest.raises(il.DuplicateAddressError, match="'part'"):
        clash.simulate()


def test_leaf_and_namespace_at_one_path_is_an_error_naming_it():
    @il.gen
    def leaf_then_namespace():
        il.normal(0.0, 1.0) @ "mu"
        il.normal(0.0, 1.0) @ ("mu", 1)

    with pytest.raises(il.AddressError) as info:
        leaf_then_namespace.simulate()
    assert "('mu', 1)" in str(info.value) and "'mu'" in str(info.value)


# ---------------------------------------------------------------------------
# constraints at addresses the program never visits
# ---------------------------------------------------------------------------
@il.gen
def two_means():
    k = il.uniform_discrete(1, 2) @ "k"
    for j in range(1, k + 1):
        il.normal(0.0, 1.0) @ ("mu", j)
    il.normal(0.0, 1.0) @ "slope"


def test_generate_with_unvisited_constraint_names_the_address():
    with pytest.raises(il.ConstraintError) as info:
        two_means.generate((), {"k": 1, ("mu", 2): 0.5})
    message = str(info.value)
    assert "('mu', 2)" in message and "generate" in message and "never visits" in message
    with pytest.raises(il.ConstraintError) as info:
        two_means.generate((), {"slop": 0.5})
    assert "'slop'" in str(info.value) and "Did you mean 'slope'" in str(info.value)


def test_update_with_unvisited_constraint_names_the_address():
    torch.manual_seed(0)
    trace, _ = two_means.generate((), {"k": 2})
    with pytest.raises(il.ConstraintError) as info:
        trace.update({("mu", 3): 0.0})
    assert "('mu', 3)" in str(info.value) and "update" in str(info.value)
    # The constraint that removes ("mu", 2) makes a constraint at ("mu", 2) unvisited too.
    with pytest.raises(il.ConstraintError, match=r"\('mu', 2\)"):
        trace.update({"k": 1, ("mu", 2): 0.0})
    # ... and the failed update left the trace as it was.
    assert trace["k"] == 2 and ("mu", 2) in trace


def test_unvisited_constraint_inside_a_map_names_the_full_address():
    @il.gen
    def element(x):
        return il.normal(x, 1.0) @ "y"

    @il.gen
    def mapped(xs):
        return il.Map(element)(xs) @ "data"

    with pytest.raises(il.ConstraintError, match=r"\('data', 5, 'y'\)"):
        mapped.generate(([0.0, 1.0],), {("data", 5, "y"): 1.0})
    trace = mapped.simulate([0.0, 1.0])
    with pytest.raises(il.ConstraintError, match=r"\('data', 1, 'z'\)"):
        trace.update({("data", 1, "z"): 1.0})


# ---------------------------------------------------------------------------
# reading an address that does not exist
# ---------------------------------------------------------------------------
def test_reading_a_missing_trace_address_suggests_the_nearest():
    torch.manual_seed(0)
    trace, _ = two_means.generate((), {"k": 2})
    with pytest.raises(il.AddressError) as info:
        trace["slop"]
    assert "'slop'" in str(info.value) and "Did you mean 'slope'" in str(info.value)
    with pytest.raises(il.AddressError) as info:
        trace["mu", 5]
    message = str(info.value)
    assert "('mu', 5)" in message and "('mu', 1)" in message
    # AddressError is a KeyError, but its message is readable (not a repr in quotes).
    assert isinstance(info.value, KeyError) and not message.startswith('"')


def test_reading_a_missing_choicemap_address_suggests_the_nearest():
    cm = il.choicemap({"slope": 1.0, ("mu", 1): 0.0})
    with pytest.raises(il.AddressError, match="Did you mean 'slope'"):
        cm["slope_"]
    with pytest.raises(il.AddressError, match=r"\('mu', 2\).*\('mu', 1\)"):
        cm.get_value(("mu", 2))


# ---------------------------------------------------------------------------
# invalid distribution parameters and NaN log-densities
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("make, what", [
    (lambda: il.normal(0.0, -1.0), "std"),
    (lambda: il.normal(float("nan"), 1.0), "mean"),
    (lambda: il.gamma(-1.0, 1.0), "shape"),
    (lambda: il.inv_gamma(2.0, 0.0), "scale"),
    (lambda: il.beta(1.0, -2.0), "b"),
    (lambda: il.uniform(1.0, 0.0), "lo < hi"),
    (lambda: il.exponential(-3.0), "rate"),
    (lambda: il.lognormal(0.0, 0.0), "sigma"),
    (lambda: il.bernoulli(1.5), "p"),
    (lambda: il.categorical(torch.tensor([0.5, 0.6])), "sum to 1"),
    (lambda: il.poisson(-1.0), "rate"),
    (lambda: il.geometric(0.0), "p"),
    (lambda: il.neg_binomial(2.0, 1.5), "p"),
    (lambda: il.uniform_discrete(3, 1), "lo <= hi"),
    (lambda: il.dirichlet(torch.tensor([1.0, -1.0])), "alpha"),
    (lambda: il.mvnormal(torch.zeros(2), torch.tensor([[1.0, 2.0], [2.0, 1.0]])), "positive definite"),
    (lambda: il.mixture_of_normals(torch.tensor([0.5, 0.5]), torch.zeros(2), torch.tensor([1.0, -1.0])), "variances"),
    (lambda: il.iid(il.normal(0.0, -2.0), 3), "std"),
])
def test_invalid_parameters_name_the_address_and_the_parameter(make, what):
    @il.gen
    def model():
        return make() @ "x"

    with pytest.raises(il.DistributionError) as info:
        model.simulate()
    message = str(info.value)
    assert "address 'x'" in message and what in message
    line_no, _ = _line_of(model.fn, "make() @ \"x\"")
    assert f"line {line_no}" in message
    assert isinstance(info.value, ValueError)


def test_invalid_parameters_inside_a_sub_call_name_the_local_address_and_line():
    @il.gen
    def inner(s):
        return il.normal(0.0, s) @ "noise"

    @il.gen
    def outer():
        return inner(-1.0) @ "part"

    with pytest.raises(il.DistributionError, match="'noise'.*std must be finite and > 0"):
        outer.simulate()


def test_nan_log_density_names_the_address():
    @il.gen
    def observed():
        mu = il.normal(0.0, 1.0) @ "mu"
        return il.normal(mu, 1.0) @ "x"

    with pytest.raises(il.DistributionError) as info:
        observed.generate((), {"x": float("nan")})
    message = str(info.value)
    assert "NaN" in message and "address 'x'" in message and "nan" in message
    trace = observed.simulate()
    with pytest.raises(il.DistributionError, match="address 'mu' is NaN"):
        trace.update({"mu": torch.tensor(float("nan"))})


def test_out_of_support_value_is_minus_inf_not_an_error():
    @il.gen
    def positive():
        return il.gamma(2.0, 1.0) @ "g"

    trace, weight = positive.generate((), {"g": -1.0})
    assert weight == -math.inf and trace.score == -math.inf
    assert positive.assess((), {"g": -1.0}) == -math.inf


def test_update_to_an_impossible_trace_gives_minus_inf_not_an_error():
    # A proposal that leaves the support must be rejectable: a later distribution whose
    # parameters come from the impossible value is scored -inf instead of raising.
    @il.gen
    def scale_model():
        s = il.gamma(2.0, 1.0) @ "s"
        return il.normal(0.0, s) @ "x"

    torch.manual_seed(0)
    trace = scale_model.simulate()
    new, weight, _ = trace.update({"s": -1.0})
    assert weight == -math.inf and new.score == -math.inf
    assert trace.score > -math.inf
    new, weight = trace.regenerate("x")
    assert math.isfinite(weight)


def test_constraint_of_the_wrong_kind_names_the_address():
    @il.gen
    def counts():
        return il.poisson(3.0) @ "n"

    with pytest.raises(il.DistributionError, match="'n'.*integers"):
        counts.generate((), {"n": 2.5})
    with pytest.raises(il.DistributionError, match="'v'.*shape"):
        il.gen(lambda: il.dirichlet(torch.ones(3)) @ "v").generate((), {"v": torch.ones(2) / 2})


def test_sampling_outside_a_gen_function_says_how_to_run_it():
    with pytest.raises(RuntimeError, match="simulate"):
        il.normal(0.0, 1.0) @ "x"
