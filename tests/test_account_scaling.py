"""What keeps a move's transform side from growing with the number of clusters, checked
against what it replaces.

* ``_account`` visits only the model addresses a transform touches when the traces
  are large (``apply._RESTRICT_ABOVE``): with the threshold forced either way, every
  transform-error and Jacobian test gives the same result, and on a large mixture
  the two give the same record, field by field.
* The float path keys the derivative of a simplex's last weight by one
  :class:`~imcmc_lab.transform.dual.IdRange` and finds pass-through coordinates by
  runs of shared unit dicts: on large mixtures and on vectors written back
  permuted, repeated, rescaled or in pieces, it agrees with torch autograd.
"""

from __future__ import annotations

import math

import pytest
import torch

import imcmc_lab as il
import test_jacobian
import test_transform_errors
from imcmc_lab import continuous, read, write
from imcmc_lab.examples import mixture as m
from imcmc_lab.transform import apply as apply_module
from imcmc_lab.transform.interpreter import _float_write
from imcmc_lab.transform.dual import DualVector

ALWAYS, NEVER = 0, 10 ** 9


def _tests_without_arguments(module):
    return [name for name in dir(module)
            if name.startswith("test_") and not getattr(module, name).__code__.co_argcount]


# ---------------------------------------------------------------------------
# the restricted _account against visiting every address
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [ALWAYS, NEVER])
@pytest.mark.parametrize("name", _tests_without_arguments(test_transform_errors))
def test_transform_errors_either_way(name, threshold, monkeypatch):
    """Every error (a value reaching two outputs, an input lost, the dimension check) has
    the same message whether ``_account`` visits every address or the touched ones."""
    monkeypatch.setattr(apply_module, "_RESTRICT_ABOVE", threshold)
    getattr(test_transform_errors, name)()


@pytest.mark.parametrize("threshold", [ALWAYS, NEVER])
@pytest.mark.parametrize("name", _tests_without_arguments(test_jacobian))
def test_jacobians_either_way(name, threshold, monkeypatch):
    monkeypatch.setattr(apply_module, "_RESTRICT_ABOVE", threshold)
    getattr(test_jacobian, name)()


@pytest.mark.parametrize("threshold", [ALWAYS, NEVER])
@pytest.mark.parametrize("K", [2, 32])
def test_split_merge_jacobian_either_way(K, threshold, monkeypatch):
    monkeypatch.setattr(apply_module, "_RESTRICT_ABOVE", threshold)
    test_jacobian.test_split_merge_reduced_size_does_not_grow_with_K(K)


DATA = m.synthetic_data(12, seed=3)


def _mixture(K, seed):
    torch.manual_seed(seed)
    trace, _ = m.gmm.generate((len(DATA),), {"x": DATA, "k": K})
    return trace


def _aux(trace, case):
    if case[0] == "split":
        constraints = {"cluster_to_split": case[1], "u1": 0.3, "u2": 0.8, "u3": 0.55}
        if trace["k"] > 1:
            constraints["split"] = True
    else:
        constraints = {"split": False, "cluster_to_merge": case[1]}
    aux, _ = m.split_merge_aux.generate((trace,), constraints)
    return aux


def _record(app):
    """Everything a view or test can see of an application's accounting."""
    J = app.jacobian
    return {
        "logabsdet": J.logabsdet, "rows": J.rows, "cols": J.cols, "reduced": J.reduced.tolist(),
        "blocks": [(b.rows, b.cols, b.matrix.tolist(), b.logabsdet) for b in J.blocks],
        "inputs": J.inputs, "outputs": J.outputs, "eliminated": J.eliminated,
        "full_size": J.full_size, "copied_implicitly": app.copied_implicitly,
        "dense": J.dense().tolist(),
    }


@pytest.mark.parametrize("case", [("split", 1), ("split", 12), ("split", 24), ("merge", 1), ("merge", 23)])
def test_large_mixture_records_are_the_same_either_way(case, monkeypatch):
    x = _mixture(24, seed=1)
    y = _aux(x, case)
    records = []
    for threshold in (ALWAYS, NEVER):
        monkeypatch.setattr(apply_module, "_RESTRICT_ABOVE", threshold)
        records.append(_record(il.apply_transform(m.split_merge, x, y, m.split_merge_aux)))
    assert records[0] == records[1]


@il.gen
def _latent_points(n):
    mu = il.normal(0.0, 1.0) @ "mu"
    for i in range(n):
        il.normal(mu, 1.0) @ ("z", i)


@il.gen
def _shift_aux(trace):
    il.normal(0.0, 0.5) @ "u"


@il.transform
def _shift_one(model_in, aux_in, model_out, aux_out):
    z, u = read(model_in["z", 5], continuous), read(aux_in["u"], continuous)
    write(model_out["z", 5], z + u, continuous)
    write(aux_out["u"], -u, continuous)


@il.transform
def _shift_mean(model_in, aux_in, model_out, aux_out):
    mu, u = read(model_in["mu"], continuous), read(aux_in["u"], continuous)
    write(model_out["mu"], mu + u, continuous)
    write(aux_out["u"], -u, continuous)


@il.transform
def _swap_two(model_in, aux_in, model_out, aux_out):
    il.copy(model_in["z", 3], model_out["z", 7])
    il.copy(model_in["z", 7], model_out["z", 3])
    il.copy(aux_in["u"], aux_out["u"])


@il.transform
def _loses_one(model_in, aux_in, model_out, aux_out):
    u = read(aux_in["u"], continuous)
    write(model_out["z", 5], u, continuous)     # the old z5 is neither read nor copied
    write(aux_out["u"], u, continuous)


@il.transform
def _duplicates_one(model_in, aux_in, model_out, aux_out):
    il.copy(model_in["z", 3], model_out["z", 7])
    il.copy(aux_in["u"], aux_out["u"])          # z3 keeps its value and reaches z7 too


@pytest.mark.usefixtures("compact_families_from_8")
@pytest.mark.parametrize("f", [_shift_mean, _shift_one, _swap_two, _loses_one, _duplicates_one])
def test_compact_family_elements_are_accounted_the_same_either_way(f, monkeypatch):
    """A transform that reads, writes or copies elements of a compact family (the model's
    ``for i in ...: normal(mu, 1) @ ("z", i)``), or leaves them alone: the same record, or
    the same error, whether ``_account`` visits every address, the touched ones, or those
    outside the family when the transform touches none of its elements."""
    torch.manual_seed(2)
    x = _latent_points.simulate(30)
    assert type(x._records[next(reversed(x._records))]).__name__ == "FamilyRecord"
    y = _shift_aux.simulate(x)
    results = []
    for threshold, skip_families in ((ALWAYS, True), (NEVER, True), (NEVER, False)):
        monkeypatch.setattr(apply_module, "_RESTRICT_ABOVE", threshold)
        if not skip_families:
            monkeypatch.setattr(apply_module, "_outside_untouched_families", lambda run, x, xn: (x, xn))
        try:
            results.append(_record(il.apply_transform(f, x, y, _shift_aux)))
        except il.TransformError as exc:
            results.append((type(exc), str(exc)))
    assert results[0] == results[1] == results[2]
    assert (type(results[0]) is tuple) == (f in (_loses_one, _duplicates_one))


# ---------------------------------------------------------------------------
# the float path against torch autograd
# ---------------------------------------------------------------------------
def _close(a, b):
    scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
    return a.shape == b.shape and (a.numel() == 0 or float((a - b).abs().max()) <= 1e-12 * scale)


def assert_float_path_agrees(f, x, y, q=None):
    auto = il.apply_transform(f, x, y, q, autodiff="auto")
    ref = il.apply_transform(f, x, y, q, autodiff="torch")
    assert auto.run.floats, f.last_fallback
    ja, jr = auto.jacobian, ref.jacobian
    if math.isinf(jr.logabsdet):
        assert ja.logabsdet == jr.logabsdet
    else:
        assert ja.logabsdet == pytest.approx(jr.logabsdet, rel=1e-12, abs=1e-12)
    assert ja.rows == jr.rows and ja.cols == jr.cols
    assert ja.eliminated == jr.eliminated
    assert _close(ja.reduced, jr.reduced)
    assert _close(ja.dense(), jr.dense())
    return ja


@pytest.mark.parametrize("K", [3, 20, 40])
def test_large_mixture_split_merge_float_path_equals_autograd(K):
    x = _mixture(K, seed=K)
    for case in [("split", 1), ("split", K // 2), ("split", K), ("merge", 1), ("merge", K // 2), ("merge", K - 1)]:
        J = assert_float_path_agrees(m.split_merge, x, _aux(x, case), m.split_merge_aux)
        assert J.reduced_size[0] <= 6


@il.gen
def vector_model(d):
    il.mvnormal(torch.zeros(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64)) @ "v"


@il.gen
def one_aux(trace):
    il.normal(0.0, 1.0) @ "u"


def _vector_move(arrange):
    """Writes ``arrange(v, u)`` back to ``v`` and ``u`` to ``u``."""

    @il.transform
    def move(model_in, aux_in, model_out, aux_out):
        v = read(model_in["v"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["v"], arrange(v, u), continuous)
        write(aux_out["u"], u, continuous)

    return move


D = 24
ARRANGEMENTS = {
    "pieces": lambda v, u: torch.cat([v[:5], (v[5] + u).reshape(1), v[6:17], (v[17] * 2).reshape(1), v[18:]]),
    "rotated": lambda v, u: torch.cat([v[7:], v[:7]]),
    "reversed": lambda v, u: v[list(range(D - 1, -1, -1))],
    "interleaved": lambda v, u: v[[i for i in range(0, D, 2)] + [i for i in range(1, D, 2)]],
    "repeated": lambda v, u: v[[0, 1, 2, 1, 2, 3] + list(range(6, D))],   # singular
    "rescaled by one": lambda v, u: torch.cat([v[:4] * 1.0, v[4:]]),      # unit rows, fresh dicts
}


@pytest.mark.parametrize("name", list(ARRANGEMENTS))
def test_vector_written_back_rearranged_float_path_equals_autograd(name):
    torch.manual_seed(7)
    x = vector_model.simulate(D)
    y = one_aux.simulate(x)
    assert_float_path_agrees(_vector_move(ARRANGEMENTS[name]), x, y, one_aux)


@il.gen
def simplex_model(k):
    il.dirichlet(torch.full((k,), 2.0, dtype=torch.float64)) @ "w"


@il.transform
def move_last_weight(model_in, aux_in, model_out, aux_out):
    """Rewrites w with its last weight (1 - sum of the free ones) moved to the front:
    every output row depends on the dependent weight."""
    w = read(model_in["w"], continuous)
    write(model_out["w"], torch.cat([w[-1:], w[:-1]]), continuous)


@pytest.mark.parametrize("k", [2, 3, 30])
def test_dependent_weight_rows_float_path_equals_autograd(k):
    torch.manual_seed(k)
    x = simplex_model.simulate(k)
    J = assert_float_path_agrees(move_last_weight, x, None)
    assert J.logabsdet == pytest.approx(0.0, abs=1e-12)    # a permutation of the simplex


def test_empty_vector_write_is_a_float64_tensor():
    value, tangents = _float_write(DualVector([]), continuous)
    assert value.dtype == torch.float64 and value.shape == (0,) and tangents == []


def test_merge_tangents_stay_small():
    """The merged weight's derivative holds the dependent weight's as one range entry, not
    one entry per weight."""
    x = _mixture(40, seed=2)
    app = il.apply_transform(m.split_merge, x, _aux(x, ("merge", 5)), m.split_merge_aux)
    written = app.run.writes[("model", ("weights",))]
    assert max(len(d) for d in written.tangent) <= 3
