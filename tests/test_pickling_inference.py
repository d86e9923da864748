"""Issue 16, item 16 (the inference part): chains, move records and kernels travel to other
processes. Module-level objects pickle with the standard ``pickle``; notebook-defined ones
with ``cloudpickle``. Each round trip is checked by using the copy: a kernel makes the same
moves as the original under the same seed, a record has the same terms, a chain the same
samples."""

from __future__ import annotations

import pickle

import cloudpickle
import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples import two_clusters as tc

DATA = torch.tensor([-2.0, -1.5, 1.8, 2.2, 2.5], dtype=torch.float64)

@il.gen
def shift_first_mean(trace):
    """A custom MH proposal (it proposes a model address)."""
    il.normal(trace["mu", 1], 0.5) @ ("mu", 1)


def _start():
    return tc.initial_trace(DATA)


def _selection_kernels():
    return {
        "MH(select)": il.MH(il.select("k")),
        "HMC": il.HMC(il.select(("mu", 1)), step_size=0.2, n_steps=3),
        "cycle": il.cycle(il.MH(il.select(("mu", 1))), il.HMC(il.select("mu"), 0.1, 2)),
        "mixture": il.mixture([il.MH(il.select("mu")), il.MH(il.select("k"))], weights=[0.4, 0.6]),
        "repeat": il.repeat(il.MH(il.select("mu")), 3),
    }


def _model_kernels():
    return {
        "InvolutiveKernel": il.InvolutiveKernel(tc.split_aux, (), tc.split_merge, name="split/merge"),
        "MH(q, args)": il.MH(shift_first_mean, ()),
        "two_cluster_cycle": il.cycle(il.InvolutiveKernel(tc.split_aux, (), tc.split_merge),
                                      il.MH(il.select("mu"))),
    }


def _same_moves(kernel, copy, steps=30):
    """Both kernels, from the same state and seed, make the same moves."""
    runs = []
    for k in (kernel, copy):
        torch.manual_seed(3)
        chain = il.run_chain(k, _start(), steps, record=["k", ("mu", 1)], progress=False)
        runs.append((chain.values("k"), [float(v) for v in chain.values("mu_1")], chain.acceptance))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", list(_selection_kernels()))
def test_selection_kernels_round_trip_with_pickle(name):
    kernel = _selection_kernels()[name]
    _same_moves(kernel, pickle.loads(pickle.dumps(kernel)))


@pytest.mark.parametrize("name", list(_model_kernels()))
def test_model_kernels_round_trip_with_cloudpickle(name):
    kernel = _model_kernels()[name]
    il.run_chain(kernel, _start(), 5, progress=False)      # a used kernel (InvolutiveKernel keeps a record)
    _same_moves(kernel, cloudpickle.loads(cloudpickle.dumps(kernel)))


@pytest.mark.parametrize("name", list(_model_kernels()))
def test_model_kernels_round_trip_with_pickle(name):
    kernel = _model_kernels()[name]
    _same_moves(kernel, pickle.loads(pickle.dumps(kernel)))


def test_notebook_defined_kernel_round_trips_with_cloudpickle():
    def nudge(trace):                      # a local function, as a notebook cell defines one
        return il.mh(trace, il.select("mu"))

    kernel = il.repeat(nudge, 2)
    _same_moves(kernel, cloudpickle.loads(cloudpickle.dumps(kernel)))


def _record(seed=0):
    torch.manual_seed(seed)
    return il.involutive_move(_start(), tc.split_aux, (), tc.split_merge, check=True)


def _assert_same_record(a, b):
    assert (a.accepted, a.log_alpha, a.check_failure) == (b.accepted, b.log_alpha, b.check_failure)
    assert (a.q, a.q_args, a.log_q_old) == (b.q, b.q_args, b.log_q_old)
    for side in ("model_in", "aux_in", "model_out", "aux_out"):
        assert getattr(a, side).get_choices().allclose(getattr(b, side).get_choices())
    _assert_same_application(a, b)


def _assert_same_application(a, b):
    assert a.terms == b.terms
    assert (a.read, a.written, a.copied, a.copied_implicitly) == (b.read, b.written, b.copied, b.copied_implicitly)
    assert torch.equal(a.jacobian.reduced, b.jacobian.reduced)
    assert a.jacobian.logabsdet == b.jacobian.logabsdet


def test_move_record_round_trips_with_cloudpickle():
    record = _record()
    copy = cloudpickle.loads(cloudpickle.dumps(record))
    assert (record.accepted, record.log_alpha, record.check_failure) == (copy.accepted, copy.log_alpha,
                                                                         copy.check_failure)
    for side in ("model_in", "aux_in", "model_out", "aux_out"):
        assert getattr(record, side).get_choices().allclose(getattr(copy, side).get_choices())


def test_move_record_copy_reapplies_its_transform_with_cloudpickle():
    record = _record()
    _assert_same_application(record, cloudpickle.loads(cloudpickle.dumps(record)))


def test_move_record_without_auxiliary_program_keeps_the_shared_empty_trace():
    from imcmc_lab.transform.apply import EMPTY_AUX

    @il.transform
    def flip_sign(model_in, aux_in, model_out, aux_out):
        il.write(model_out["mu", 1], -il.read(model_in["mu", 1], il.continuous), il.continuous)

    record = il.involutive_move(_start(), None, (), flip_sign)
    copy = cloudpickle.loads(cloudpickle.dumps(record))
    assert copy.aux_in is EMPTY_AUX and copy.aux_out is EMPTY_AUX


def test_move_record_round_trips_with_pickle():
    record = _record()
    _assert_same_record(record, pickle.loads(pickle.dumps(record)))


def _chain():
    torch.manual_seed(5)
    return il.run_chain(tc.two_cluster_kernel(), _start(), 40, record=["k", ("mu", 1)], chains=2, progress=False)


def _assert_same_chain(a, b):
    assert a.samples == b.samples and a.scores == b.scores and a.steps_done == b.steps_done
    assert a.acceptance == b.acceptance and a.interrupted == b.interrupted
    assert [t.get_choices().allclose(u.get_choices()) for t, u in zip(a.traces, b.traces)] == [True, True]
    np.testing.assert_array_equal(a.to_arviz().posterior["k"].values, b.to_arviz().posterior["k"].values)


def test_chain_round_trips_with_cloudpickle():
    chain = _chain()
    _assert_same_chain(chain, cloudpickle.loads(cloudpickle.dumps(chain)))


def test_chain_round_trips_with_pickle():
    chain = _chain()
    _assert_same_chain(chain, pickle.loads(pickle.dumps(chain)))


def test_chain_without_traces_round_trips_with_pickle():
    # the samples alone (what a worker sends back) need nothing from other layers
    chain = _chain()
    chain.traces = [None] * chain.n_chains
    copy = pickle.loads(pickle.dumps(chain))
    assert copy.samples == chain.samples and copy.scores == chain.scores
