"""Issue 16, item 16 (the modeling and transform part): generative functions, transforms,
traces, Map/Unfold and the engine's identity-compared singletons travel to other processes.

Module-level objects pickle with the standard ``pickle`` (and come back as the very object
in this process); objects defined in a notebook cell or a function body pickle with
``cloudpickle``. Each round trip is checked by using the copy: the same draws under the
same seed, the same scores and update weights, the same moves.
"""

from __future__ import annotations

import pickle
import sys

import cloudpickle
import pytest
import torch

import imcmc_lab as il
from imcmc_lab import continuous, discrete
from imcmc_lab.examples import two_clusters as tc
from imcmc_lab.transform.apply import EMPTY_AUX
from imcmc_lab.transform.jacobian import Coordinate, CoordinateGroup

DATA = torch.tensor([-2.0, -1.5, 1.8, 2.2, 2.5], dtype=torch.float64)


@il.gen
def step(t, state, drift):
    return il.normal(state + drift, 1.0) @ "x"


@il.gen
def point(mean):
    return il.normal(mean, 1.0) @ "y"


walk = il.Unfold(step)
points = il.Map(point)


@il.gen
def hierarchy(n):
    """A comprehension family, a Map and an Unfold in one model."""
    drift = il.normal(0.0, 1.0) @ "drift"
    means = [il.normal(0.0, 3.0) @ ("mu", j) for j in range(n)]
    points(means) @ "points"
    walk(n, 0.0, drift) @ "walk"
    return drift


def _draws(gen_fn, args, seed=4):
    torch.manual_seed(seed)
    trace = gen_fn.simulate(*args)
    return {a: float(v) for a, v in trace.choices.items()}, float(trace.score)


def _update(trace):
    new, weight, _ = trace.update({"drift": 0.7, ("mu", 1): -1.0, ("walk", 2, "x"): 3.0})
    return float(weight), float(new.score), {a: float(v) for a, v in new.choices.items()}


def _move(q, f, seed=1):
    torch.manual_seed(seed)
    record = il.involutive_move(tc.initial_trace(DATA), q, (), f)
    return float(record.log_alpha), record.accepted, float(record.logabsdet)


# ---------------------------------------------------------------------------
# module-level objects, standard pickle
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("obj", [hierarchy, point, walk, points, tc.two_clusters, tc.split_aux, tc.split_merge,
                                 il.discrete, il.continuous, EMPTY_AUX],
                         ids=lambda o: getattr(o, "name", None) or repr(o))
def test_module_level_objects_unpickle_as_themselves(obj):
    copy = pickle.loads(pickle.dumps(obj))
    assert copy is obj or (isinstance(obj, (il.Map, il.Unfold)) and copy == obj and copy.kernel is obj.kernel)


def test_module_level_map_and_unfold_round_trip_with_pickle_and_run_the_same():
    for gen_fn, args in ((walk, (4, 0.5, 0.2)), (points, ([0.0, 1.0, 2.0],))):
        assert _draws(pickle.loads(pickle.dumps(gen_fn)), args) == _draws(gen_fn, args)


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_trace_with_families_map_and_unfold_round_trips_and_updates_the_same(dumps):
    torch.manual_seed(0)
    trace = hierarchy.simulate(4)
    copy = pickle.loads(dumps(trace))
    assert copy.gen_fn is hierarchy and copy.args == trace.args
    assert float(copy.score) == float(trace.score) and copy.choices.allclose(trace.choices)
    assert _update(copy) == _update(trace)
    with il.count_work() as original:
        trace.update({("mu", 1): -1.0})
    with il.count_work() as copied:
        copy.update({("mu", 1): -1.0})
    assert copied.logpdf_evaluations == original.logpdf_evaluations      # still incremental


def test_coordinates_round_trip_with_their_type():
    group = CoordinateGroup("model_in", ("w",), il.dirichlet(torch.ones(3)), torch.full((3,), 1 / 3))
    for obj in (group, group.coordinate(1), Coordinate("aux_out", ("u",))):
        copy = pickle.loads(pickle.dumps(obj))
        assert type(copy) is type(obj) and copy == obj
    assert pickle.loads(pickle.dumps(group)).size == 2


# ---------------------------------------------------------------------------
# notebook-defined objects, cloudpickle
# ---------------------------------------------------------------------------
def _local_model_and_move():
    @il.gen
    def model(n):
        k = il.uniform_discrete(1, 3) @ "k"
        return [il.normal(0.0, 2.0) @ ("mu", j) for j in range(k)], n

    @il.gen
    def aux(trace):
        il.normal(0.0, 1.0) @ "u"

    @il.transform
    def swap(model_in, aux_in, model_out, aux_out):      # the bare names are copied by value
        k = il.read(model_in["k"], discrete)
        il.write(model_out["k"], k, discrete)
        x = il.read(model_in["mu", 0], continuous)
        u = il.read(aux_in["u"], continuous)
        il.write(model_out["mu", 0], u, continuous)
        il.write(aux_out["u"], x, continuous)

    return model, aux, swap


def test_notebook_defined_gen_function_and_transform_round_trip_with_cloudpickle():
    model, aux, swap = _local_model_and_move()
    model2, aux2, swap2 = cloudpickle.loads(cloudpickle.dumps((model, aux, swap)))
    assert _draws(model2, (2,)) == _draws(model, (2,))

    def move(p, q, f):
        torch.manual_seed(7)
        trace = p.simulate(2)
        record = il.involutive_move(trace, q, (), f, check=True)
        return float(record.log_alpha), record.accepted, record.check_failure, record.read

    assert move(model2, aux2, swap2) == move(model, aux, swap)


def test_a_copied_transform_still_reads_discrete_choices_as_discrete():
    """Label copies were new objects: the copy read "k" as continuous (silently, on the
    float path; with an unrelated error on torch)."""
    _, _, swap = _local_model_and_move()
    copy = cloudpickle.loads(cloudpickle.dumps(swap))
    assert copy.fn.__globals__["discrete"] is discrete and copy.fn.__globals__["continuous"] is continuous
    assert pickle.loads(cloudpickle.dumps(discrete)) is discrete


def test_a_top_level_notebook_gen_function_travels_by_value(monkeypatch):
    """A notebook cell's function lives in ``__main__``: another process has no such name,
    so it must travel by value even though ``__main__.name`` finds it here."""
    model, _, swap = _local_model_and_move()
    for obj, name in ((model, "nb_model"), (swap, "nb_swap")):
        obj.__module__, obj.__qualname__ = "__main__", name
        monkeypatch.setattr(sys.modules["__main__"], name, obj, raising=False)
    payload = cloudpickle.dumps((model, swap))
    monkeypatch.delattr(sys.modules["__main__"], "nb_model")
    monkeypatch.delattr(sys.modules["__main__"], "nb_swap")
    model2, swap2 = pickle.loads(payload)
    assert model2 is not model and _draws(model2, (2,)) == _draws(model, (2,))
    assert swap2 is not swap and swap2.one_trace == swap.one_trace


def test_registering_a_module_for_pickling_by_value_is_respected():
    import imcmc_lab.examples.two_clusters as module

    cloudpickle.register_pickle_by_value(module)
    try:
        copy = pickle.loads(cloudpickle.dumps(module.split_merge))
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert copy is not module.split_merge
    assert _move(tc.split_aux, copy) == _move(tc.split_aux, tc.split_merge)
