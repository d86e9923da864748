"""Property-based test of ``update`` (Hypothesis): random programs with sub-calls, Map and
Unfold, changing arguments and disappearing addresses.

For every drawn program, trace and change: the update weight equals the difference of full
re-scores (``assess`` of the new and the old choices), the new trace's score equals its
re-score, and the old trace is unchanged afterwards (same choices, same score).
"""

from __future__ import annotations

import math

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import imcmc_lab as il  # noqa: E402


@il.gen
def _point(mu):
    return il.normal(mu, 1.0) @ "y"


@il.gen
def _step(t, state, drift):
    return il.normal(state + drift, 0.5) @ "z"


@il.gen
def _leaf(scale):
    a = il.normal(0.0, scale) @ "a"
    if a > 0:
        il.exponential(1.0) @ "b"          # an address that appears and disappears
    return a


def _program(shape):
    """A model built from ``shape``: which parts it has (drawn by Hypothesis)."""
    use_sub, use_map, use_unfold, use_branch = shape

    @il.gen
    def model(n, scale):
        k = il.uniform_discrete(1, 3) @ "k"
        mu = il.normal(0.0, scale) @ "mu"
        if use_branch and k > 1:
            il.gamma(2.0, 1.0) @ ("extra", int(k))      # address depends on k
        if use_sub:
            _leaf(scale) @ "leaf"
        if use_map:
            il.Map(_point)([mu] * (n + int(k) - 1)) @ "points"     # its length follows k
        if use_unfold:
            il.Unfold(_step)(n, mu, 0.1) @ "chain"
        return mu

    return model


def _snapshot(trace):
    return ({a: (r.value.tolist() if isinstance(r.value, torch.Tensor) else r.value, r.logpdf)
             for a, r in trace.flat_records().items()}, trace.score, trace.args)


shapes = st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans())


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes, seed=st.integers(0, 2**16), n=st.integers(1, 4), new_n=st.integers(1, 4),
       new_k=st.integers(1, 3), new_mu=st.floats(-3, 3), new_scale=st.sampled_from([1.0, 2.0]),
       change_args=st.booleans(), constrain_mu=st.booleans())
def test_update_weight_is_the_difference_of_full_rescores(shape, seed, n, new_n, new_k, new_mu, new_scale,
                                                          change_args, constrain_mu):
    model = _program(shape)
    torch.manual_seed(seed)
    old = model.simulate(n, 1.0)
    before = _snapshot(old)
    constraints = {"k": new_k}
    if constrain_mu:
        constraints["mu"] = new_mu
    args = (new_n, new_scale) if change_args else None
    new, weight, discard = old.update(constraints, args)
    # fresh choices (sampled from the prior) enter the weight with their density too
    old_score = model.assess(old.args, old.get_choices())
    new_score = model.assess(new.args, new.get_choices())
    assert math.isclose(old_score, old.score, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(new_score, new.score, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(weight, new_score - old_score, rel_tol=1e-9, abs_tol=1e-9)
    assert _snapshot(old) == before                    # the old trace is unchanged
    old_records = old.flat_records()
    for address, value in discard.items():          # the discard holds old values only
        assert address in old_records
        assert torch.equal(torch.as_tensor(value), torch.as_tensor(old_records[address].value))
