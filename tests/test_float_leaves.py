"""The float path's reuse of leaves across runs (``Transform.float_leaves``).

A continuous read of the same record as in the transform's last run (an unchanged
choice: the same object, its tensor not changed in place since), at the same
coordinate ids, gets the last run's Dual or DualVector again. Each test here fails
if one of the three conditions of that reuse were dropped.
"""

from __future__ import annotations

import torch

import imcmc_lab as il
from imcmc_lab.transform.apply import apply_transform
from imcmc_lab.transform.dual import IdRange
from imcmc_lab.transform.interpreter import run_transform

F64 = torch.float64


@il.gen
def model():
    il.dirichlet(torch.ones(4, dtype=F64)) @ "w"
    il.normal(0.0, 1.0) @ "a"
    il.normal(1.0, 2.0) @ "b"


@il.transform
def scale(t_in, t_out):
    """Reads ``b`` right after ``a`` when ``a`` > 0, else after ``a`` and ``w``: ``b``'s ids move."""
    w = il.read(t_in["w"], il.continuous) if il.read(t_in["a"], il.continuous) <= 0.0 else None
    b = il.read(t_in["b"], il.continuous)
    if w is None:
        w = il.read(t_in["w"], il.continuous)
    il.write(t_out["b"], b * 3.0, il.continuous)
    il.write(t_out["w"], w, il.continuous)


def _fresh(f, x):
    """The run, and the same run without any reuse (the cache emptied first)."""
    run = run_transform(f, x, None)
    saved = dict(f.float_leaves)
    f.float_leaves.clear()
    try:
        ref = run_transform(f, x, None)
    finally:
        f.float_leaves.clear()
        f.float_leaves.update(saved)
    return run, ref


def _assert_same_run(run, ref):
    assert run.floats and ref.floats
    assert run.reads.keys() == ref.reads.keys()
    for key, r in run.reads.items():
        assert r.leaf == ref.reads[key].leaf, key
    for key, w in run.writes.items():
        assert torch.equal(w.value, ref.writes[key].value), key
        assert _plain(w.tangent) == _plain(ref.writes[key].tangent), key


def _plain(tangent):
    """Tangents with each IdRange key spelled as its range (IdRange compares by identity)."""
    return [{(k.ids if isinstance(k, IdRange) else k): g for k, g in d.items()} for d in tangent]


def _with(x, address, value):
    return x.update(il.choicemap({address: value}))[0]


def test_unchanged_record_is_reused_and_gives_the_same_run():
    torch.manual_seed(1)
    x = model.simulate()
    first = run_transform(scale, x, None)
    again, ref = _fresh(scale, x)
    for key in first.reads:
        assert again.reads[key].tracked is first.reads[key].tracked       # reused
    _assert_same_run(again, ref)
    a1 = apply_transform(scale, x)
    a2 = apply_transform(scale, x)
    assert a1.logabsdet == a2.logabsdet == ref_logdet(x)


def ref_logdet(x):
    saved = dict(scale.float_leaves)
    scale.float_leaves.clear()
    try:
        return apply_transform(scale, x).logabsdet
    finally:
        scale.float_leaves.clear()
        scale.float_leaves.update(saved)


def test_a_new_record_at_the_address_is_read_anew():
    torch.manual_seed(2)
    x = model.simulate()
    run_transform(scale, x, None)
    y = _with(x, "b", torch.tensor(0.25, dtype=F64))
    run, ref = _fresh(scale, y)
    assert float(run.writes["model", ("b",)].value) == 0.75
    _assert_same_run(run, ref)


def test_a_tensor_changed_in_place_is_read_anew():
    torch.manual_seed(3)
    x = model.simulate()
    run_transform(scale, x, None)
    value = x.flat_records()[("b",)].value
    value.fill_(0.5)                # the same record, its tensor changed in place
    run = run_transform(scale, x, None)
    assert float(run.writes["model", ("b",)].value) == 1.5


def test_a_read_at_other_ids_is_not_reused():
    """``b`` is read at id 1 when ``a`` > 0 and at id 4 after ``a`` and ``w`` otherwise: its
    write's tangent names the id of this run's read, never the last run's."""
    torch.manual_seed(4)
    x = model.simulate()
    for a in (0.5, -0.5, 0.5, -0.5):
        x = _with(x, "a", torch.tensor(a, dtype=F64))
        run, ref = _fresh(scale, x)
        _assert_same_run(run, ref)
        ids = run.reads["model", ("b",)].leaf
        assert run.writes["model", ("b",)].tangent == [{ids.start: 3.0}]
        assert ids.start == (1 if a > 0 else 4)


def test_a_written_vector_is_a_new_float64_tensor_of_its_values():
    from imcmc_lab.transform.dual import Dual, DualVector
    from imcmc_lab.transform.float_backend import float_write
    for n in (0, 1, 5):
        items = [Dual(1.0 / (i + 3), {i: 1.0 + i}) for i in range(n)]
        value, tangent = float_write(DualVector(items), il.continuous)
        assert value.dtype == F64 and value.shape == (n,) and not value.requires_grad
        assert value.tolist() == [x.v for x in items]          # bit for bit
        assert tangent == [x.d for x in items]
        other, _ = float_write(DualVector(items), il.continuous)
        other.add_(1.0)
        assert value.tolist() == [x.v for x in items]          # two writes share no memory


def test_reshape_and_cat_fast_paths_keep_the_general_rules():
    """``reshape`` to one dimension and ``torch.cat`` of DualVectors take shortcuts: a shape that
    is not an int, a length that does not fit and a 0-d part still go to torch."""
    import pytest

    from imcmc_lab.transform.dual import Dual, DualVector, NeedsTorch
    a, v = Dual(0.5, {0: 1.0}), DualVector([Dual(1.0, {1: 1.0}), Dual(2.0, {2: 1.0})])
    assert type(a.reshape(1)) is DualVector and a.reshape(-1).items == [a]
    assert v.reshape(2).items == v.items and v.reshape(-1).items == v.items
    for bad in (lambda: a.reshape(1.0), lambda: a.reshape(2), lambda: v.reshape(1), lambda: v.reshape(True),
                lambda: torch.cat([v, a]), lambda: a.reshape(True)):
        with pytest.raises(NeedsTorch):
            bad()
    joined = torch.cat([v, torch.tensor([3.0], dtype=F64), a.reshape(1)])
    assert joined.tolist() == [1.0, 2.0, 3.0, 0.5] and joined.items[3] is a
