"""A distribution defined by a user: the ``Laplace`` of the ``imcmc_lab.core.distributions``
docstring, which subclasses the public base, declares its parameters' constraints and
implements ``sample`` and ``log_prob``. It works in every generative-function operation, and a bad parameter
is an error naming the address and the line."""

from __future__ import annotations

import inspect
import math
import textwrap

import pytest
import torch
from scipy import stats

import imcmc_lab as il
from imcmc_lab.core.distributions import Distribution, constraints

F64 = torch.float64


def _documented_laplace():
    """The ``Laplace`` class of the package docstring's example, run as written there."""
    import imcmc_lab.core.distributions as package

    source = package.__doc__.split("A distribution of your own.")[1].split("::", 1)[1]
    namespace = {}
    exec(textwrap.dedent(source.split("``Laplace(0.0, 1.0)")[0].strip("\n")), namespace)
    return namespace["Laplace"]


Laplace = _documented_laplace()


@il.gen
def robust(n):
    loc = il.normal(0.0, 5.0) @ "loc"
    scale = il.gamma(2.0, 1.0) @ "scale"
    return il.iid(Laplace(loc, scale), n) @ "ys"


@il.gen
def one_choice(scale):
    return Laplace(1.0, scale) @ "x"


def test_simulate_generate_update_score_with_the_custom_distribution():
    torch.manual_seed(5)
    trace = robust.simulate(20)
    assert trace["ys"].shape == (20,) and trace["ys"].dtype == F64
    loc, scale = float(trace["loc"]), float(trace["scale"])
    expected = (stats.norm(0, 5).logpdf(loc) + stats.gamma(2.0).logpdf(scale)
                + stats.laplace(loc, scale).logpdf(trace["ys"].numpy()).sum())
    assert math.isclose(trace.score, expected, rel_tol=1e-10)

    ys = torch.linspace(-3.0, 3.0, 20, dtype=F64)
    observed, weight = robust.generate((20,), {"ys": ys, "loc": 0.5})
    scale = float(observed["scale"])
    assert math.isclose(weight, stats.norm(0, 5).logpdf(0.5) + stats.laplace(0.5, scale).logpdf(ys.numpy()).sum(),
                        rel_tol=1e-10)

    moved, update_weight, discard = observed.update({"loc": -0.25})
    assert math.isclose(update_weight, moved.score - observed.score, rel_tol=1e-9, abs_tol=1e-9)
    assert float(discard["loc"]) == 0.5 and float(observed["loc"]) == 0.5
    assert math.isclose(robust.assess((20,), moved.choices), moved.score, rel_tol=1e-12)


def test_sampling_the_custom_distribution_through_iid_matches_its_law():
    torch.manual_seed(1)
    ys = il.iid(Laplace(2.0, 0.5), 4000).sample().numpy()
    assert stats.kstest(ys, stats.laplace(2.0, 0.5).cdf).pvalue > 1e-3


def test_a_bad_parameter_of_the_custom_distribution_names_the_address_and_line():
    line = next(i for i, text in enumerate(inspect.getsource(one_choice.fn).splitlines())
                if '@ "x"' in text) + one_choice.fn.__code__.co_firstlineno
    with pytest.raises(il.DistributionError) as info:
        one_choice.simulate(-1.0)
    message = str(info.value)
    assert "address 'x'" in message and f"line {line}" in message
    assert "scale must be finite and > 0, got -1.0" in message
    with pytest.raises(il.DistributionError, match="'x'.*scale must be a scalar"):
        one_choice.simulate(torch.ones(2, dtype=F64))


def test_the_documented_class_uses_the_public_helpers():
    assert issubclass(Laplace, Distribution) and Laplace.arg_constraints["scale"] is constraints.positive
    assert Laplace(0.0, 1.0).check_params() is None
    assert math.isclose(float(Laplace(0.0, 1.0).log_prob(torch.tensor(0.5, dtype=F64))),
                        stats.laplace().logpdf(0.5), rel_tol=1e-12)
