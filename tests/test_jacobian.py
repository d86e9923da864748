"""The Jacobian of trace transforms against central finite differences.

The reference is computed without the engine's Jacobian code: the transform is
re-run with ``il.apply_transform`` on traces in which one continuous input
coordinate is moved by ``±h`` (``trace.update``), and the output coordinates are
read back from the new traces. This gives the *full* Jacobian over every
continuous coordinate (copies included), so both ``logabsdet`` (after the
engine's copy / implicit-copy / pass-through elimination and block split) and
the reduced matrix are checked against it.
"""

from __future__ import annotations

import math

import pytest
import torch

import imcmc_lab as il
from imcmc_lab import continuous, copy, discrete, read, write

H = 1e-6          # central differences in float64: truncation ~h^2, rounding ~1e-16/h
TOL = 1e-6


# ---------------------------------------------------------------------------
# the finite-difference reference
# ---------------------------------------------------------------------------
def _value(trace, coord):
    v = torch.as_tensor(trace[coord.address], dtype=torch.float64)
    return v.reshape(-1)[coord.index] if coord.index is not None else v.reshape(())


def _moved(trace, coord, delta):
    old = torch.as_tensor(trace[coord.address], dtype=torch.float64)
    new = old.clone().reshape(-1)
    new[0 if coord.index is None else coord.index] += delta
    if trace.choice_record(coord.address).dist.simplex:
        new[-1] -= delta      # free coordinates of a simplex: the last weight is 1 - sum
    moved, _, _ = trace.update({coord.address: new.reshape(old.shape)})
    return moved


def fd_jacobian(f, x, y, q, record, h=H):
    """Full Jacobian d outputs / d inputs (coordinates of ``record``) by central differences."""
    J = torch.zeros(len(record.outputs), len(record.inputs), dtype=torch.float64)
    for j, c in enumerate(record.inputs):
        sides = []
        for sign in (1.0, -1.0):
            xp = _moved(x, c, sign * h) if c.trace == "model_in" else x
            yp = _moved(y, c, sign * h) if c.trace == "aux_in" else y
            app = il.apply_transform(f, xp, yp, q)
            sides.append(torch.stack([
                _value(app.new_model if o.trace == "model_out" else app.new_aux, o)
                for o in record.outputs]))
        J[:, j] = (sides[0] - sides[1]) / (2 * h)
    return J


def check_against_fd(f, x, y, q, record):
    """logabsdet, reduced matrix and dense() of ``record`` against finite differences."""
    F = fd_jacobian(f, x, y, q, record)
    sign, ref_logdet = torch.linalg.slogdet(F)
    assert float(sign) != 0
    assert record.logabsdet == pytest.approx(float(ref_logdet), abs=TOL)
    rows = [record.outputs.index(r) for r in record.rows]
    cols = [record.inputs.index(c) for c in record.cols]
    assert torch.allclose(record.reduced, F[rows][:, cols], atol=TOL, rtol=TOL)
    assert torch.allclose(record.dense(), F, atol=TOL, rtol=TOL)
    # each block's determinant is that of the same rows/cols of the reference
    for block in record.blocks:
        bi = [record.outputs.index(r) for r in block.rows]
        bj = [record.inputs.index(c) for c in block.cols]
        assert block.logabsdet == pytest.approx(float(torch.linalg.slogdet(F[bi][:, bj])[1]), abs=TOL)
    # and the eliminated rows/cols really are unit rows of the reference
    for cin, cout, _kind in record.eliminated:
        row = F[record.outputs.index(cout)]
        unit = torch.zeros_like(row)
        unit[record.inputs.index(cin)] = 1.0
        assert torch.allclose(row, unit, atol=TOL)
    return F


# ---------------------------------------------------------------------------
# randomized transforms: vector choices, every kind of copy, several blocks
# ---------------------------------------------------------------------------
@il.gen
def vec_model():
    il.normal(0.0, 1.0) @ "a"
    il.normal(0.0, 1.0) @ "b"
    il.gamma(2.0, 1.0) @ "c"                                  # implicit copy
    il.dirichlet(torch.full((4,), 2.0)) @ "w"                # 3 free coordinates
    il.mvnormal(torch.zeros(3), torch.eye(3) + 0.3) @ "m"
    for i in (1, 2, 3):
        il.normal(0.0, 1.0) @ ("ns", i)                      # two swapped (leaf copies), one implicit
    il.normal(0.0, 1.0) @ ("grp", "x")                       # namespace copied to aux_out
    il.normal(0.0, 1.0) @ ("grp", "y")
    il.uniform_discrete(1, 3) @ "k"


@il.gen
def vec_aux(trace):
    il.normal(0.0, 1.0) @ "u"
    il.mvnormal(torch.zeros(2), torch.eye(2)) @ "v"
    il.normal(0.0, 1.0) @ ("grp", "x")                       # namespace copied to model_out
    il.normal(0.0, 1.0) @ ("grp", "y")


def random_transform(seed):
    """A transform with random smooth maps and a random choice of which coordinates
    of ``w`` mix and which two ``ns`` leaves are swapped."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(3, 3, generator=g, dtype=torch.float64)
    B = torch.randn(5, 5, generator=g, dtype=torch.float64)
    alpha = float(torch.randn((), generator=g, dtype=torch.float64))
    i, j = (int(t) for t in torch.randperm(4, generator=g)[:2])
    s1, s2 = (int(t) + 1 for t in torch.randperm(3, generator=g)[:2])
    coupling = float(torch.randn((), generator=g, dtype=torch.float64))

    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        # block 1: (a, b, u) -> (a', b', u'), also using ns[s1], which is copied
        a = read(model_in["a"], continuous)
        b = read(model_in["b"], continuous)
        u = read(aux_in["u"], continuous)
        ns = read(model_in["ns", s1], continuous)
        z = torch.stack([a, b, u])
        z = 2.0 * z + A @ torch.sin(z) + coupling * ns
        write(model_out["a"], z[0], continuous)
        write(model_out["b"], z[1], continuous)
        write(aux_out["u"], z[2], continuous)
        # block 2: the mvnormal vector and the aux vector, mixed
        m = read(model_in["m"], continuous)
        v = read(aux_in["v"], continuous)
        mv = torch.cat([m, v])
        mv = B @ mv + torch.tanh(mv)
        write(model_out["m"], mv[:3], continuous)
        write(aux_out["v"], mv[3:], continuous)
        # block 3: two of the dirichlet weights move mass (the sum stays 1); the free
        # coordinates w[0..2] not among them pass through
        w = read(model_in["w"], continuous)
        gate = torch.sigmoid(alpha * w[j] + 0.1)
        new = w.clone()
        new[i] = w[i] * gate
        new[j] = w[j] + w[i] * (1 - gate)
        write(model_out["w"], new, continuous)
        # explicit copies: two leaves swapped, a namespace each way between model and aux
        copy(model_in["ns", s1], model_out["ns", s2])
        copy(model_in["ns", s2], model_out["ns", s1])
        copy(model_in["grp"], aux_out["grp"])
        copy(aux_in["grp"], model_out["grp"])
        write(model_out["k"], read(model_in["k"], discrete), discrete)

    return f, (i, j), (s1, s2)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_transform_matches_finite_differences(seed):
    torch.manual_seed(seed)
    f, (i, j), (s1, s2) = random_transform(seed)
    x = vec_model.simulate()
    y = vec_aux.simulate(x)
    app = il.apply_transform(f, x, y, vec_aux)
    J = app.jacobian
    check_against_fd(f, x, y, vec_aux, J)

    # w has 3 free coordinates; the last weight is 1 - sum of them. If it is one of the
    # two moved weights, the one moved free weight forms a 1x1 block.
    moved_free = sorted({i, j} - {3})
    assert J.full_size == (19, 19)
    assert J.reduced_size == (8 + len(moved_free),) * 2
    assert sorted(b.size for b in J.blocks) == sorted([(len(moved_free),) * 2, (3, 3), (5, 5)])
    kinds = {(cin.label(), cout.label()): kind for cin, cout, kind in J.eliminated}
    s3 = ({1, 2, 3} - {s1, s2}).pop()
    passed = sorted({0, 1, 2} - {i, j})
    assert kinds == {
        (f"model_in[('ns', {s1})]", f"model_out[('ns', {s2})]"): "copy",
        (f"model_in[('ns', {s2})]", f"model_out[('ns', {s1})]"): "copy",
        ("model_in[('grp', 'x')]", "aux_out[('grp', 'x')]"): "copy",
        ("model_in[('grp', 'y')]", "aux_out[('grp', 'y')]"): "copy",
        ("aux_in[('grp', 'x')]", "model_out[('grp', 'x')]"): "copy",
        ("aux_in[('grp', 'y')]", "model_out[('grp', 'y')]"): "copy",
        ("model_in['c']", "model_out['c']"): "implicit",
        (f"model_in[('ns', {s3})]", f"model_out[('ns', {s3})]"): "implicit",
        **{(f"model_in['w'][{p}]", f"model_out['w'][{p}]"): "pass-through" for p in passed},
    }
    # the weights block is exactly the moved free coordinates
    wblock = next(b for b in J.blocks if any(c.address == ("w",) for c in b.cols))
    assert sorted(c.label() for c in wblock.cols) == [f"model_in['w'][{m}]" for m in moved_free]


# ---------------------------------------------------------------------------
# independent blocks
# ---------------------------------------------------------------------------
@il.gen
def four_normals():
    for name in ("a", "b", "c", "d"):
        il.normal(0.0, 1.0) @ name
    il.mvnormal(torch.zeros(2), torch.eye(2)) @ "m"


@il.transform
def two_bijections(model_in, aux_in, model_out, aux_out):
    # (a, b): a rotation-and-scale; (c, d): a nonlinear shear. Nothing links them.
    a, b = read(model_in["a"], continuous), read(model_in["b"], continuous)
    write(model_out["a"], 2.0 * a - b, continuous)
    write(model_out["b"], a + 3.0 * b, continuous)
    c, d = read(model_in["c"], continuous), read(model_in["d"], continuous)
    write(model_out["c"], c * torch.exp(d), continuous)
    write(model_out["d"], d + torch.sin(c), continuous)


@il.transform
def split_vector(model_in, aux_in, model_out, aux_out):
    # the two coordinates of one vector choice land in different blocks
    m = read(model_in["m"], continuous)
    a, b = read(model_in["a"], continuous), read(model_in["b"], continuous)
    write(model_out["m"], torch.stack([m[0] * torch.exp(a), m[1] + b ** 3]), continuous)
    write(model_out["a"], a + m[0], continuous)
    write(model_out["b"], 2.0 * b - m[1], continuous)


def test_two_unrelated_bijections_give_two_blocks():
    torch.manual_seed(1)
    x = four_normals.simulate()
    J = il.apply_transform(two_bijections, x).jacobian
    check_against_fd(two_bijections, x, None, None, J)
    assert J.reduced_size == (4, 4)
    assert len(J.blocks) == 2
    groups = sorted(sorted(c.address[0] for c in b.cols) for b in J.blocks)
    assert groups == [["a", "b"], ["c", "d"]]
    for b in J.blocks:
        assert sorted(c.address[0] for c in b.rows) == sorted(c.address[0] for c in b.cols)
    assert J.logabsdet == pytest.approx(sum(b.logabsdet for b in J.blocks))
    assert any(b.logabsdet == pytest.approx(math.log(7.0)) for b in J.blocks)   # det [[2,-1],[1,3]]
    # the untouched vector choice is an implicit copy of both its coordinates
    assert sorted(c.label() for c, _, k in J.eliminated if k == "implicit") == ["model_in['m'][0]", "model_in['m'][1]"]


def test_coordinates_of_one_vector_in_different_blocks():
    torch.manual_seed(2)
    x = four_normals.simulate()
    J = il.apply_transform(split_vector, x).jacobian
    check_against_fd(split_vector, x, None, None, J)
    blocks = sorted(sorted(c.label() for c in b.cols) for b in J.blocks)
    assert blocks == [["model_in['a']", "model_in['m'][0]"], ["model_in['b']", "model_in['m'][1]"]]


# ---------------------------------------------------------------------------
# Richardson-Green split/merge (Fig. 1 of the paper): reduced size independent of K
# ---------------------------------------------------------------------------
@il.gen
def rg_model(n):
    k = il.poisson_plus_one(1.0) @ "k"
    means = [il.normal(0.0, 10.0) @ ("mu", j) for j in range(1, k + 1)]
    variances = [il.inv_gamma(1.0, 10.0) @ ("var", j) for j in range(1, k + 1)]
    weights = il.dirichlet(torch.full((k,), 2.0)) @ "weights"
    il.iid(il.mixture_of_normals(weights, torch.stack(means), torch.stack(variances)), n) @ "x"


@il.gen
def rg_aux(trace):
    k = trace["k"]
    split = True if k == 1 else il.bernoulli(0.5) @ "split"
    if split:
        il.uniform_discrete(1, k) @ "cluster_to_split"
        il.beta(2.0, 2.0) @ "u1"
        # u2 on (-1, 1) rather than Fig. 1's beta(2, 2) on (0, 1): merging cluster j with
        # the last one does not order their means, so u2 = (mu - mu_j) / ... can be negative
        il.uniform(-1.0, 1.0) @ "u2"
        il.beta(1.0, 1.0) @ "u3"
    else:
        il.uniform_discrete(1, k - 1) @ "cluster_to_merge"


@il.transform
def rg_split_merge(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    split = True if k == 1 else bool(read(aux_in["split"], discrete))
    w = read(model_in["weights"], continuous)
    if split:
        j = read(aux_in["cluster_to_split"], discrete)
        write(model_out["k"], k + 1, discrete)
        copy(aux_in["cluster_to_split"], aux_out["cluster_to_merge"])
        write(aux_out["split"], False, discrete)
        u1 = read(aux_in["u1"], continuous)
        u2 = read(aux_in["u2"], continuous)
        u3 = read(aux_in["u3"], continuous)
        mu = read(model_in["mu", j], continuous)
        var = read(model_in["var", j], continuous)
        wj = w[j - 1]
        w1, w2 = wj * u1, wj * (1 - u1)
        new_w = torch.cat([w[:j - 1], w1.reshape(1), w[j:], w2.reshape(1)])
        mu1 = mu - u2 * torch.sqrt(var * w2 / w1)
        mu2 = mu + u2 * torch.sqrt(var * w1 / w2)
        var1 = u3 * (1 - u2 ** 2) * var * wj / w1
        var2 = (1 - u3) * (1 - u2 ** 2) * var * wj / w2
        write(model_out["weights"], new_w, continuous)
        write(model_out["mu", j], mu1, continuous)
        write(model_out["mu", k + 1], mu2, continuous)
        write(model_out["var", j], var1, continuous)
        write(model_out["var", k + 1], var2, continuous)
    else:
        j = read(aux_in["cluster_to_merge"], discrete)
        write(model_out["k"], k - 1, discrete)
        copy(aux_in["cluster_to_merge"], aux_out["cluster_to_split"])
        if k - 1 > 1:
            write(aux_out["split"], True, discrete)
        mu1, mu2 = read(model_in["mu", j], continuous), read(model_in["mu", k], continuous)
        var1, var2 = read(model_in["var", j], continuous), read(model_in["var", k], continuous)
        w1, w2 = w[j - 1], w[k - 1]
        wj = w1 + w2
        new_w = torch.cat([w[:j - 1], wj.reshape(1), w[j:k - 1]])
        mu = (w1 * mu1 + w2 * mu2) / wj
        var = (w1 * (mu1 ** 2 + var1) + w2 * (mu2 ** 2 + var2)) / wj - mu ** 2
        u2 = (mu - mu1) / torch.sqrt(var * w2 / w1)
        write(model_out["weights"], new_w, continuous)
        write(model_out["mu", j], mu, continuous)
        write(model_out["var", j], var, continuous)
        write(aux_out["u1"], w1 / wj, continuous)
        write(aux_out["u2"], u2, continuous)
        write(aux_out["u3"], w1 * var1 / (wj * var * (1 - u2 ** 2)), continuous)


RG_DATA = torch.tensor([-3.1, -2.4, 0.2, 0.9, 4.4, 5.0])


def rg_log_jacobian(w, mu1, mu2, var, var1, var2, u2, u3):
    """Richardson & Green (1997), eq. (12): |J| of (w, mu, var, u1, u2, u3) -> (w1, w2, mu1, mu2, var1, var2)."""
    return math.log(w * abs(mu1 - mu2) * var1 * var2 / (abs(u2) * (1 - u2 ** 2) * u3 * (1 - u3) * var))


def rg_trace(K, seed):
    torch.manual_seed(seed)
    x, _ = rg_model.generate((len(RG_DATA),), {"k": K, "x": RG_DATA})
    return x


@pytest.mark.parametrize("K", [2, 8, 32])
def test_split_merge_reduced_size_does_not_grow_with_K(K):
    x = rg_trace(K, seed=K)
    j = K // 2
    u1, u2, u3 = 0.3, -0.45, 0.6
    y, _ = rg_aux.generate((x,), {"split": True, "cluster_to_split": j, "u1": u1, "u2": u2, "u3": u3})
    app = il.apply_transform(rg_split_merge, x, y, rg_aux)
    J = app.jacobian
    n = len(RG_DATA)   # the observed data are model coordinates too, implicitly copied
    # mu and var of each cluster, k - 1 free weights (the last is 1 - sum), u1..u3, data
    assert J.full_size == (2 * K + (K - 1) + 3 + n,) * 2
    assert J.reduced_size == (6, 6)
    assert len(J.blocks) == 1
    assert sorted(c.label() for c in J.cols) == sorted([
        f"model_in['weights'][{j - 1}]", f"model_in[('mu', {j})]", f"model_in[('var', {j})]",
        "aux_in['u1']", "aux_in['u2']", "aux_in['u3']"])
    kinds = [k for _, _, k in J.eliminated]
    # the untouched free weights (all but w_j; the old last weight becomes free in the
    # output and is a row of the reduced matrix, 1 - sum of the others)
    assert kinds.count("pass-through") == K - 2
    assert kinds.count("implicit") == 2 * (K - 1) + n     # mu, var of the other clusters; data
    new = app.new_model
    ref = rg_log_jacobian(float(x["weights"][j - 1]), float(new["mu", j]), float(new["mu", K + 1]),
                          float(x["var", j]), float(new["var", j]), float(new["var", K + 1]), u2, u3)
    assert J.logabsdet == pytest.approx(ref, abs=1e-9)

    # the merge that undoes it: reduced 6x6 too, and log|det| is the negative
    y2, _ = rg_aux.generate((new,), {"split": False, "cluster_to_merge": j})
    back = il.apply_transform(rg_split_merge, new, y2, rg_aux)
    assert back.jacobian.reduced_size == (6, 6)
    assert back.jacobian.logabsdet == pytest.approx(-ref, abs=1e-9)
    assert float(back.new_aux["u2"]) == pytest.approx(u2)


def test_split_merge_jacobian_matches_finite_differences():
    x = rg_trace(5, seed=7)
    y, _ = rg_aux.generate((x,), {"split": True, "cluster_to_split": 2, "u1": 0.7, "u2": 0.35, "u3": 0.2})
    J = il.apply_transform(rg_split_merge, x, y, rg_aux).jacobian
    check_against_fd(rg_split_merge, x, y, rg_aux, J)
    # merge direction (cluster 3 with the last one)
    y2, _ = rg_aux.generate((x,), {"split": False, "cluster_to_merge": 3})
    J2 = il.apply_transform(rg_split_merge, x, y2, rg_aux).jacobian
    assert J2.reduced_size == (6, 6)
    check_against_fd(rg_split_merge, x, y2, rg_aux, J2)


def test_split_merge_is_an_involution():
    report = il.check_involution(rg_model, (len(RG_DATA),), rg_aux, rg_split_merge, trials=40,
                                 observations={"x": RG_DATA}, seed=3)
    assert report.trials == 40
    # 6x6, or 5x5 when the last cluster is split or merged: its weight is not a free
    # coordinate (1 - sum of the others), so it is no row or column of its own
    assert set(report.jacobian_sizes) == {(5, 5), (6, 6)}


# ---------------------------------------------------------------------------
# pass-through candidates are verified, not trusted by value
# ---------------------------------------------------------------------------
@il.gen
def weights_and_scalar():
    il.dirichlet(torch.full((3,), 2.0)) @ "w"
    il.normal(0.0, 1.0) @ "a"


def equal_value_not_a_copy(a0):
    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        w = read(model_in["w"], continuous)
        a = read(model_in["a"], continuous)
        new = w.clone()
        # at a == a0, new[0] has exactly the value of w[0], but it depends on a: not a unit row
        new[0] = w[0] * torch.exp(a - a0)
        new[1], new[2] = w[2], w[1]
        write(model_out["w"], new, continuous)
        write(model_out["a"], a + w[0], continuous)
    return f


def test_equal_values_that_are_not_copies_are_not_eliminated():
    torch.manual_seed(4)
    x = weights_and_scalar.simulate()
    f = equal_value_not_a_copy(float(x["a"]))
    J = il.apply_transform(f, x).jacobian
    F = check_against_fd(f, x, None, None, J)
    # d new[0] / d a = w[0] != 0, so new[0] must not be treated as a copy of w[0]
    col_a = [c.label() for c in J.inputs].index("model_in['a']")
    assert F[0, col_a] == pytest.approx(float(x["w"][0]), abs=TOL)
    assert ("model_in['w'][0]", "model_out['w'][0]") not in {(a.label(), b.label()) for a, b, _ in J.eliminated}


# ---------------------------------------------------------------------------
# simplex-valued choices: the Jacobian should not depend on how a formula
# behaves off the simplex
# ---------------------------------------------------------------------------
@il.gen
def simplex_model():
    k = il.uniform_discrete(2, 3) @ "k"
    il.dirichlet(torch.full((k,), 2.0)) @ "w"


@il.gen
def simplex_aux(trace):
    if trace["k"] == 2:
        il.beta(1.0, 2.0) @ "new_w"


def add_weight(sum_preserving):
    """Birth of a third weight v (the others scaled by 1 - v) and the matching death.

    Both versions compute the same values on the simplex; the sum-preserving one
    also keeps ``w.sum()`` fixed off the simplex."""

    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        w = read(model_in["w"], continuous)
        s = w.sum()
        if k == 2:
            write(model_out["k"], 3, discrete)
            v = read(aux_in["new_w"], continuous)
            rest = w * (1 - v / s) if sum_preserving else w * (1 - v)
            write(model_out["w"], torch.cat([rest, v.reshape(1)]), continuous)
        else:
            write(model_out["k"], 2, discrete)
            v = w[2]
            write(aux_out["new_w"], v / s if sum_preserving else v, continuous)
            write(model_out["w"], w[:2] * s / (s - v) if sum_preserving else w[:2] / (1 - v), continuous)

    return f


def _birth_logabsdet(f):
    torch.manual_seed(6)
    x, _ = simplex_model.generate((), {"k": 2})
    y, _ = simplex_aux.generate((x,), {"new_w": 0.4})
    return il.apply_transform(f, x, y, simplex_aux).jacobian.logabsdet


def test_simplex_birth_with_sum_preserving_formula_has_the_manifold_jacobian():
    # on the simplex, (w1, v) -> (w1 (1 - v), w2 (1 - v), v) in free coordinates
    # (w1; w1', w2') has |det| = (1 - v)^(k - 1) = 0.6 for k = 2
    for f in (add_weight(True), add_weight(False)):
        il.check_involution(simplex_model, (), simplex_aux, f, trials=20, seed=0)
    assert _birth_logabsdet(add_weight(True)) == pytest.approx(math.log(0.6), abs=1e-12)


def test_simplex_jacobian_does_not_depend_on_the_off_simplex_extension():
    assert _birth_logabsdet(add_weight(False)) == pytest.approx(math.log(0.6), abs=1e-12)


@pytest.mark.parametrize("sum_preserving", [True, False])
def test_simplex_birth_death_leaves_the_prior_invariant(sum_preserving):
    # Start N independent chains at exact prior draws and take a few moves: under an
    # invariant kernel the states are still exact prior draws, so k is Bernoulli(1/2)
    # (binomial standard error) and E[w_0 | k = 3] = 1/3. A Jacobian that counts k
    # coordinates for the weights gives the second formula (1 - v)^3 instead of
    # (1 - v)^2 and fails this test.
    torch.manual_seed(11)
    kernel = il.InvolutiveKernel(simplex_aux, (), add_weight(sum_preserving))
    n_chains, steps = 1500, 3
    ks, w0_given_3 = [], []
    for _ in range(n_chains):
        trace = simplex_model.simulate()
        for _ in range(steps):
            trace, _ = kernel(trace)
        ks.append(trace["k"] == 3)
        if trace["k"] == 3:
            w0_given_3.append(float(trace["w"][0]))
    frac = sum(ks) / n_chains
    assert abs(frac - 0.5) <= 4 * math.sqrt(0.25 / n_chains), f"P(k = 3) = {frac:.3f}, prior 0.5"
    w0 = torch.tensor(w0_given_3)
    se = float(w0.std()) / math.sqrt(len(w0))
    assert abs(float(w0.mean()) - 1 / 3) <= 4 * se, f"E[w_0 | k = 3] = {float(w0.mean()):.4f}, prior 1/3"


def test_explicit_copy_to_the_same_address_is_recorded_as_a_copy():
    @il.gen
    def three():
        for name in ("a", "b", "c"):
            il.normal(0.0, 1.0) @ name

    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        copy(model_in["a"], model_out["a"])
        write(model_out["b"], -read(model_in["b"], continuous), continuous)

    torch.manual_seed(0)
    app = il.apply_transform(f, three.simulate())
    kinds = {(i.label(), o.label()): k for i, o, k in app.jacobian.eliminated}
    assert kinds == {("model_in['a']", "model_out['a']"): "copy",
                     ("model_in['c']", "model_out['c']"): "implicit"}
    assert app.copied_implicitly == [("c",)]
    assert app.jacobian.full_size == (3, 3) and app.jacobian.reduced_size == (1, 1)


def test_group_of_is_the_coordinate_group_of_every_kind_of_value():
    """The accounting makes scalar groups without CoordinateGroup's own constructor: the
    groups must be the same (size, vector flag, type) for scalars, vectors, simplex values,
    0-d float32 tensors and Python numbers."""
    from imcmc_lab.transform.jacobian import CoordinateGroup, group_of

    dirichlet = il.dirichlet(torch.ones(3, dtype=torch.float64))
    normal = il.normal(0.0, 1.0)
    cases = [(normal, torch.tensor(0.5, dtype=torch.float64)), (normal, torch.tensor(0.5)),
             (normal, 0.5), (normal, torch.tensor([0.5, 1.0], dtype=torch.float64)),
             (dirichlet, torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)),
             (dirichlet, torch.tensor([1.0], dtype=torch.float64))]
    for dist, value in cases:
        made, expected = group_of("model_in", ("mu", 1), dist, value), CoordinateGroup("model_in", ("mu", 1), dist, value)
        assert type(made) is CoordinateGroup and tuple(made) == tuple(expected), (dist, value)


def test_metropolis_accept_draws_what_torch_rand_draws():
    """The decision's uniform comes from torch's global generator, draw for draw as
    torch.rand((), dtype=float64) gives it: a seeded chain decides as it always did."""
    from imcmc_lab.inference.acceptance import metropolis_accept

    log_alphas = [math.log(p) for p in (0.1, 0.5, 0.9, 0.3, 0.7) * 40]
    torch.manual_seed(7)
    decisions = [metropolis_accept(a) for a in log_alphas]
    torch.manual_seed(7)
    expected = [math.log(float(torch.rand((), dtype=torch.float64))) < a for a in log_alphas]
    assert decisions == expected and 0 < sum(decisions) < len(decisions)
    assert metropolis_accept(0.0) and not metropolis_accept(-math.inf) and not metropolis_accept(math.nan)
