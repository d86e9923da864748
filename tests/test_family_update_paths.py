"""The update of a remembered indexed family scores its constrained elements itself
(``family_update._given_elements``) instead of running ``choice`` for each: the result must be
the slow path's, bit for bit -- records in order, values, log-densities, weight, discard,
counters -- and its errors must be the slow path's too. Each case runs both: the fast path,
and the same update with ``_given_elements`` switched off (every redone element through
``choice``). An update's constraints built by the engine (``OwnedChoices``) are checked for a
leaf that is also a namespace without building a ChoiceMap; the error is the same.
"""

from __future__ import annotations

import math

import pytest
import torch

import imcmc_lab as il
from imcmc_lab.core.address import normalize_address
from imcmc_lab.errors import AddressError, DistributionError
from imcmc_lab.modeling import family_update
from imcmc_lab.modeling.runtime import OwnedChoices


@il.gen
def _clusters(lo):
    k = il.uniform_discrete(3, 9) @ "k"
    means = [il.normal(0.0, 2.0) @ ("mu", j) for j in range(lo, lo + k)]      # offset follows lo
    variances = [il.inv_gamma(2.0, 1.0) @ ("var", j) for j in range(1, k + 1)]
    weights = il.dirichlet(torch.full((k,), 2.0, dtype=torch.float64)) @ "weights"
    il.iid(il.mixture_of_normals(weights, means, variances), 5) @ "x"
    return k


def _snapshot(trace):
    return [(a, tuple(r.value.reshape(-1).tolist()) if isinstance(r.value, torch.Tensor) else r.value, r.logpdf)
            for a, r in trace.flat_records().items()], trace.score


def _run(trace, constraints, args, slow, monkeypatch):
    with monkeypatch.context() as patch:
        if slow:
            patch.setattr(family_update, "_given_elements", lambda *a: None)
        with il.count_work() as work:
            result = trace.update_detailed(_owned(constraints), args)
    discard = [(a, tuple(torch.as_tensor(v).reshape(-1).tolist())) for a, v in result.discard.items()]
    return _snapshot(result.trace), result.weight, discard, work.logpdf_evaluations, result.trace


def _owned(constraints):
    """Constraints as the engine hands them (a transform's outputs): normalised addresses."""
    return OwnedChoices({normalize_address(a): v for a, v in constraints.items()})


def _trace(lo=1, k=6, seed=0):
    torch.manual_seed(seed)
    return _clusters.generate((lo,), {"k": k, "x": torch.linspace(-2.0, 2.0, 5, dtype=torch.float64)})[0]


def _weights(k):
    return torch.full((k,), 1.0 / k, dtype=torch.float64)


def _t(v):
    return torch.tensor(v, dtype=torch.float64)


CASES = {
    "inside": lambda t: ({("mu", 3): _t(0.5), ("var", 2): _t(1.5), ("var", 5): _t(0.2)}, None),
    "first element": lambda t: ({("mu", 1): _t(-1.0), ("var", 1): _t(3.0)}, None),
    "split": lambda t: ({"k": 7, "weights": _weights(7), ("mu", 2): _t(0.1), ("mu", 7): _t(0.3),
                         ("var", 2): _t(0.4), ("var", 7): _t(0.6)}, None),
    "merge": lambda t: ({"k": 5, "weights": _weights(5), ("mu", 2): _t(0.7), ("var", 2): _t(0.9)}, None),
    "offset": lambda t: ({("mu", 0): _t(0.25), ("mu", -1): _t(1.25), ("mu", 3): _t(2.0)}, (-1,)),
    "outside the support": lambda t: ({("var", 4): _t(-1.0), ("mu", 4): _t(0.0)}, None),
    "an int and a float": lambda t: ({("mu", 2): 1, ("var", 3): 0.5}, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_path_gives_the_slow_path_bit_for_bit(case, monkeypatch):
    spy = []
    given = family_update._given_elements

    def counted(*args):
        found = given(*args)
        spy.append(found is not None)
        return found

    old = _trace()
    constraints, args = CASES[case](old)
    monkeypatch.setattr(family_update, "_given_elements", counted)
    fast = _run(old, constraints, args, False, monkeypatch)
    assert spy and all(spy), "the fast path was not taken"
    slow = _run(old, constraints, args, True, monkeypatch)
    assert fast[:4] == slow[:4]          # exact: records, weight, discard, logpdf evaluations
    if fast[4].score == -math.inf:
        return      # (a next update re-scores the data at -inf both sides: a NaN weight, != itself)
    # and the next update through the families the new traces remember is the same too
    follow = {("mu", 2): _t(-0.3), ("var", 3): _t(2.5)}
    assert _run(fast[4], follow, None, False, monkeypatch)[:4] == _run(slow[4], follow, None, True, monkeypatch)[:4]


def test_outside_the_support_is_minus_infinity_in_both(monkeypatch):
    _, weight, _, _, trace = _run(_trace(), {("var", 4): _t(-1.0)}, None, False, monkeypatch)
    assert weight == -math.inf and trace.score == -math.inf


@pytest.mark.parametrize("value, error, words", [
    ("abc", DistributionError, "does not fit"),
    (torch.ones(2, dtype=torch.float64), DistributionError, "does not fit"),
    (_t(float("nan")), DistributionError, "is NaN"),
])
def test_errors_are_the_slow_paths(value, error, words, monkeypatch):
    old = _trace()
    messages = []
    for slow in (False, True):
        with pytest.raises(error) as caught:
            _run(old, {("mu", 2): _t(0.5), ("mu", 4): value}, None, slow, monkeypatch)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and words in messages[0] and "('mu', 4)" in messages[0].replace('"', "'")


def test_engine_constraints_with_a_leaf_that_is_a_namespace_raise_as_before():
    old = _trace()
    for constraints in ({"k": 5, ("k", 1): 2.0}, {("mu", 2): _t(0.1), ("mu",): 1.0},
                        {("mu", 2, "a"): 1.0, ("mu", 2): _t(0.1)}):
        with pytest.raises(AddressError) as owned:
            old.update_detailed(_owned(constraints))
        with pytest.raises(AddressError) as plain:
            old.update_detailed(dict(constraints))
        assert "both as a value and as a namespace" in str(owned.value)
        assert str(owned.value) == str(plain.value)
