"""The float path (imcmc_lab.transform.dual) against torch autograd on whole transforms.

``apply_transform(..., autodiff="auto")`` runs a transform on Dual numbers and
falls back to autograd tensors for what that path does not model;
``autodiff="torch"`` always uses autograd. Whatever path ran, the user sees the
same move. What is checked:

* the library's example transforms (mixture, GP structure, coal, the Sec. 6 bugs
  and their fixes, random walk, two clusters, soccer), ~30 random ``(trace, aux)``
  pairs each: the same ``log |det J|``, reduced matrix, row/column labels,
  eliminated coordinates, dense Jacobian and new model trace; and the float path
  really ran (no fallback). HMC takes gradients inside its transform: it runs
  on autograd, and its Jacobian is still right;
* a transform that falls back part-way gives exactly the autograd result; a
  genuine user error raises the usual imcmc-lab error;
* ``check_involution`` still passes on a correct involution and catches a
  transform whose float and torch runs disagree;
* ``@il.transform(autodiff="torch")`` never runs the float path.
"""

from __future__ import annotations

import math

import pytest
import torch

import imcmc_lab as il
from imcmc_lab.errors import AddressError, LabelError, TransformError
from imcmc_lab.examples import bugs, coal, gp_structure as gp, mixture as m, random_walk, soccer, two_clusters
from imcmc_lab.examples.hmc_involution import hmc_involution_kernel
from imcmc_lab.transform import checks
from imcmc_lab.transform.apply import apply_transform

F64 = torch.float64
N_PAIRS = 30


# ---------------------------------------------------------------------------
# comparing the two paths
# ---------------------------------------------------------------------------
def _matrix_close(got, expected, what):
    """Equal to 1e-12 relative to the largest entry: the float path can give an exact 0
    where autograd leaves 1e-16 of rounding."""
    assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
    if expected.numel() == 0:
        return
    scale = float(expected.abs().max())
    err = float((got - expected).abs().max())
    assert err <= 1e-12 * max(scale, 1e-300), f"{what}: error {err:.3g} (scale {scale:.3g})\n{got}\n{expected}"


def _same_value(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        a, b = torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64)
        return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-12, atol=0.0, equal_nan=True))
    return a == b


def assert_paths_agree(f, x, y, q, q_args=()):
    """Apply ``f`` with the float path (auto) and with autograd; assert the user sees the
    same move. Returns ``(auto application, torch application)``."""
    auto = apply_transform(f, x, y, q, q_args, autodiff="auto")
    ref = apply_transform(f, x, y, q, q_args, autodiff="torch")
    assert ref.run.floats is False
    assert (auto.problem is None) == (ref.problem is None), (auto.problem, ref.problem)
    ja, jr = auto.jacobian, ref.jacobian
    assert (ja is None) == (jr is None)
    if jr is not None:
        la, lr = ja.logabsdet, jr.logabsdet
        assert la == lr or abs(la - lr) <= 1e-10 * max(1.0, abs(lr)), (la, lr)
        assert ja.rows == jr.rows and ja.cols == jr.cols, (ja.rows, jr.rows, ja.cols, jr.cols)
        assert ja.eliminated == jr.eliminated
        _matrix_close(ja.reduced, jr.reduced, "reduced Jacobian")
        _matrix_close(ja.dense(), jr.dense(), "dense Jacobian")
        assert ja.full_size == jr.full_size
    new_auto, new_ref = auto.new_model.get_choices().to_dict(), ref.new_model.get_choices().to_dict()
    assert new_auto.keys() == new_ref.keys()
    for address in new_ref:
        assert _same_value(new_auto[address], new_ref[address]), (address, new_auto[address], new_ref[address])
    assert auto.model_log_ratio == pytest.approx(ref.model_log_ratio, rel=1e-10, abs=1e-10)
    assert auto.log_q_new == pytest.approx(ref.log_q_new, rel=1e-10, abs=1e-10)
    return auto, ref


# ---------------------------------------------------------------------------
# the example transforms
# ---------------------------------------------------------------------------
MIXTURE_DATA = m.synthetic_data(30, seed=1)


def _mixture_trace(k):
    trace, _ = m.gmm.generate((len(MIXTURE_DATA),), {"x": MIXTURE_DATA, "k": k})
    return trace


def _pairs(make_trace, q, q_args=()):
    out = []
    for i in range(N_PAIRS):
        x = make_trace(i)
        out.append((x, q.simulate(x, *q_args)))
    return out


GP_XS = torch.linspace(0.0, 1.0, 6, dtype=F64)
COAL_EVENTS = coal.load_coal()
COAL_KERNEL = coal.coal_kernel()
SOCCER_GOALS = soccer.load_goals()[:60]
RANDOM_WALK = random_walk.random_walk_kernel(["lam", "kap"], 0.1)


def _coal_trace(i):
    trace, _ = coal.coal.generate((coal.LENGTH,), {"y": COAL_EVENTS})    # n, s, g from the prior
    return trace


def _soccer_trace(i):
    trace, _ = soccer.soccer.generate((len(SOCCER_GOALS),), {"y": SOCCER_GOALS, "model": 1 + i % 2})
    return trace


def _gp_pairs():
    out = []
    for i in range(N_PAIRS):
        walk = gp.walk_tree if i % 2 else gp.walk_tree_uniform
        x = gp.gp_model.simulate(GP_XS)
        out.append((x, gp.subtree_aux.simulate(x, walk), (walk,)))
    return out


# name: (transform, aux program, aux args, pairs builder, expect the float path)
EXAMPLES = {
    "mixture split/merge": (m.split_merge, m.split_merge_aux, (), lambda i: _mixture_trace(1 + i % 5)),
    "mixture swap": (m.swap_last, m.swap_aux, (), lambda i: _mixture_trace(1 + i % 5)),
    "mixture birth/death": (m.birth_death, m.birth_death_aux, (), lambda i: _mixture_trace(1 + i % 5)),
    "mixture move cluster": (m.move_cluster, m.move_cluster_aux, (0.5, 0.3), lambda i: _mixture_trace(1 + i % 5)),
    "mixture move weights": (m.move_weights, m.move_weights_aux, (0.3,), lambda i: _mixture_trace(1 + i % 5)),
    "mixture initial_trace split/merge": (m.split_merge, m.split_merge_aux, (),
                                          lambda i: m.initial_trace(MIXTURE_DATA, k=1 + i % 5)),
    "coal (Green's four moves)": (COAL_KERNEL.f, COAL_KERNEL.q, COAL_KERNEL.q_args, _coal_trace),
    "bugs sqrt_merge": (bugs.sqrt_merge, bugs.mean_split_aux, (), lambda i: bugs.positive_means.simulate()),
    "bugs arithmetic_merge": (bugs.arithmetic_merge, bugs.mean_split_aux, (),
                              lambda i: bugs.positive_means.simulate()),
    "bugs birth_at_end": (bugs.birth_at_end, bugs.birth_at_end_aux, (), lambda i: _mixture_trace(1 + i % 5)),
    "bugs labelled": (bugs.labelled(), bugs.one_or_two_aux, (), lambda i: bugs.one_or_two.simulate()),
    "two clusters split/merge": (two_clusters.split_merge, two_clusters.split_aux, (),
                                 lambda i: two_clusters.two_clusters.generate(
                                     (len(MIXTURE_DATA),), {"x": MIXTURE_DATA, "k": 1 + i % 2})[0]),
    "soccer jump": (soccer.jump, soccer.jump_aux, (), _soccer_trace),
    "random walk": (RANDOM_WALK.f, RANDOM_WALK.q, (), _soccer_trace),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_transform_float_path_equals_autograd(name):
    """On the library's example moves the float path runs (no fallback) and gives the same
    Jacobian, labels, eliminated coordinates and new trace as autograd."""
    f, q, q_args, make_trace = EXAMPLES[name]
    torch.manual_seed(sum(map(ord, name)))
    pairs = _pairs(make_trace, q, q_args)
    fallbacks = f.torch_fallbacks
    for x, y in pairs:
        auto, _ = assert_paths_agree(f, x, y, q, q_args)
        assert auto.run.floats, f"{name} fell back to autograd: {f.last_fallback}"
    assert f.torch_fallbacks == fallbacks, f"{name} fell back to autograd: {f.last_fallback}"


def test_example_gp_subtree_swap_float_path_equals_autograd():
    """The GP subtree swap (namespace copies only) runs on the float path with both walks."""
    torch.manual_seed(11)
    fallbacks = gp.swap_subtree.torch_fallbacks
    for x, y, q_args in _gp_pairs():
        auto, _ = assert_paths_agree(gp.swap_subtree, x, y, gp.subtree_aux, q_args)
        assert auto.run.floats
    assert gp.swap_subtree.torch_fallbacks == fallbacks, gp.swap_subtree.last_fallback


def test_coal_pairs_cover_all_four_moves():
    """The coal comparison above sees height, position, birth and death moves."""
    torch.manual_seed(sum(map(ord, "coal (Green's four moves)")))
    moves = {y["move"] for _, y in _pairs(_coal_trace, COAL_KERNEL.q, COAL_KERNEL.q_args)}
    assert moves == {coal.HEIGHT, coal.POSITION, coal.BIRTH, coal.DEATH}


def test_mixture_pairs_cover_split_and_merge_at_every_k():
    """The split/merge comparison sees splits and merges, and k = 1..5."""
    torch.manual_seed(sum(map(ord, "mixture split/merge")))
    pairs = _pairs(lambda i: _mixture_trace(1 + i % 5), m.split_merge_aux)
    assert {x["k"] for x, _ in pairs} == {1, 2, 3, 4, 5}
    kinds = {("cluster_to_split",) in y.get_choices().to_dict() for _, y in pairs}
    assert kinds == {True, False}


def test_coal_initial_trace_repeated_values_same_determinant():
    """From coal.initial_trace (every height equal) both paths give the same log |det J| and
    new traces. The labels may differ: the torch path finds pass-through coordinates by value
    and skips repeated values, the float path finds them from their unit derivatives, so its
    reduced matrix is never larger."""
    torch.manual_seed(5)
    for i in range(12):
        x = coal.initial_trace(n=1 + i % 4)
        y = COAL_KERNEL.q.simulate(x, *COAL_KERNEL.q_args)
        auto = apply_transform(COAL_KERNEL.f, x, y, COAL_KERNEL.q, COAL_KERNEL.q_args, autodiff="auto")
        ref = apply_transform(COAL_KERNEL.f, x, y, COAL_KERNEL.q, COAL_KERNEL.q_args, autodiff="torch")
        assert auto.run.floats
        assert auto.logabsdet == pytest.approx(ref.logabsdet, rel=1e-10, abs=1e-10)
        assert auto.jacobian.reduced_size[0] <= ref.jacobian.reduced_size[0]
        assert auto.new_model.get_choices().to_dict().keys() == ref.new_model.get_choices().to_dict().keys()


@il.gen
def banana():
    a = il.normal(0.0, 1.0) @ "a"
    il.normal(a * a, 0.5) @ "b"


def test_hmc_transform_runs_on_autograd_and_keeps_volume():
    """HMC's transform takes gradients inside: it falls back to autograd, and its Jacobian is
    still the leapfrog's (volume preserving, every entry nonzero, equal to autodiff="torch")."""
    kernel = hmc_involution_kernel(["a", "b"], 0.1, 8)
    f = kernel.f
    torch.manual_seed(3)
    for _ in range(5):
        x = banana.simulate()
        y = kernel.q.simulate(x)
        before = f.torch_fallbacks
        auto = apply_transform(f, x, y, kernel.q, autodiff="auto")
        ref = apply_transform(f, x, y, kernel.q, autodiff="torch")
        assert auto.run.floats is False
        assert f.torch_fallbacks == before + 1 and f.last_fallback.startswith("NeedsTorch")
        assert auto.jacobian.reduced_size == (4, 4)
        assert bool(torch.all(auto.jacobian.reduced.abs() > 1e-6))
        assert abs(auto.logabsdet) < 1e-10
        assert abs(float(torch.linalg.det(auto.jacobian.reduced)) - 1.0) < 1e-10
        assert auto.logabsdet == ref.logabsdet and torch.equal(auto.jacobian.reduced, ref.jacobian.reduced)
        for address in ("a", "b"):
            assert float(auto.new_model[address]) == float(ref.new_model[address])


# ---------------------------------------------------------------------------
# fallbacks and errors
# ---------------------------------------------------------------------------
@il.gen
def two_normals():
    il.normal(0.0, 1.0) @ "mu"
    il.normal(1.0, 2.0) @ "nu"


@il.transform
def logsumexp_move(t_in, t_out):
    mu = il.read(t_in["mu"], il.continuous)
    nu = il.read(t_in["nu"], il.continuous)
    half = mu * 0.5                                              # float path so far
    il.write(t_out["mu"], torch.logsumexp(torch.stack([half, nu]), 0), il.continuous)   # not modeled
    il.write(t_out["nu"], nu * torch.exp(mu), il.continuous)


def _exactly_equal(auto, ref):
    assert auto.logabsdet == ref.logabsdet
    assert auto.jacobian.rows == ref.jacobian.rows and auto.jacobian.cols == ref.jacobian.cols
    assert torch.equal(auto.jacobian.reduced, ref.jacobian.reduced)
    assert torch.equal(auto.jacobian.dense(), ref.jacobian.dense())
    for address in ("mu", "nu"):
        assert torch.equal(auto.new_model[address], ref.new_model[address])


def test_fallback_midway_gives_exactly_the_autograd_result():
    """A transform using torch.logsumexp part-way falls back and gives autograd's result, bit for bit."""
    torch.manual_seed(0)
    for _ in range(3):
        x = two_normals.simulate()
        before = logsumexp_move.torch_fallbacks
        auto = apply_transform(logsumexp_move, x, autodiff="auto")
        assert auto.run.floats is False
        assert logsumexp_move.torch_fallbacks == before + 1
        assert logsumexp_move.last_fallback.startswith("NeedsTorch")
        _exactly_equal(auto, apply_transform(logsumexp_move, x, autodiff="torch"))


@il.transform
def guarded_logsumexp(t_in, t_out):
    mu = il.read(t_in["mu"], il.continuous)
    nu = il.read(t_in["nu"], il.continuous)
    try:
        top = torch.logsumexp(torch.stack([mu, nu]), 0)
    except Exception:       # the transform's own handler must not see the float path's NeedsTorch
        top = mu * 100.0
    il.write(t_out["mu"], top, il.continuous)
    il.write(t_out["nu"], nu, il.continuous)


def test_transforms_own_except_does_not_swallow_the_fallback():
    """``except Exception`` in a transform cannot catch NeedsTorch and take a branch torch would not."""
    torch.manual_seed(1)
    x = two_normals.simulate()
    auto = apply_transform(guarded_logsumexp, x, autodiff="auto")
    assert auto.run.floats is False
    _exactly_equal(auto, apply_transform(guarded_logsumexp, x, autodiff="torch"))


@il.gen
def long_vector():
    il.iid(il.normal(0.0, 1.0), 70) @ "v"


@il.transform
def scale_long_vector(t_in, t_out):
    v = il.read(t_in["v"], il.continuous)
    il.write(t_out["v"], -v * 2.0, il.continuous)


def test_long_vector_read_falls_back_and_agrees():
    """A vector choice longer than MAX_VECTOR is read as a tensor (fallback), with the same result."""
    torch.manual_seed(2)
    x = long_vector.simulate()
    before = scale_long_vector.torch_fallbacks
    auto = apply_transform(scale_long_vector, x, autodiff="auto")
    assert auto.run.floats is False and scale_long_vector.torch_fallbacks == before + 1
    ref = apply_transform(scale_long_vector, x, autodiff="torch")
    assert auto.logabsdet == ref.logabsdet == pytest.approx(70 * math.log(2.0))
    assert torch.equal(auto.new_model["v"], ref.new_model["v"])


@il.transform
def log_of_zero(t_in, t_out):
    mu = il.read(t_in["mu"], il.continuous)
    nu = il.read(t_in["nu"], il.continuous)
    il.write(t_out["mu"], mu + torch.log(nu - nu), il.continuous)      # log(0): -inf in torch
    il.write(t_out["nu"], nu, il.continuous)


def test_domain_edge_in_a_transform_gives_torchs_inf():
    """log(0) inside a transform re-runs on tensors: the move sees torch's -inf (a support problem),
    not an exception."""
    torch.manual_seed(3)
    x = two_normals.simulate()
    before = log_of_zero.torch_fallbacks
    auto = apply_transform(log_of_zero, x, autodiff="auto")
    ref = apply_transform(log_of_zero, x, autodiff="torch")
    assert auto.run.floats is False and log_of_zero.torch_fallbacks == before + 1
    assert float(auto.new_model["mu"]) == -math.inf == float(ref.new_model["mu"])
    assert auto.problem is not None and auto.problem == ref.problem


def test_misspelled_address_raises_the_usual_address_error():
    """A misspelled read raises AddressError with its suggestion, identical to the autograd run's."""
    f = bugs.misspelled(read_address="cluster_to_splt")
    torch.manual_seed(0)
    x, _ = bugs.positive_means.generate((), {"k": 1})        # k = 1: always a split, which reads the address
    y = bugs.mean_split_aux.simulate(x)
    errors = {}
    for mode in ("auto", "torch"):
        with pytest.raises(AddressError) as info:
            apply_transform(f, x, y, bugs.mean_split_aux, autodiff=mode)
        errors[mode] = str(info.value)
    assert "cluster_to_splt" in errors["auto"] and "Did you mean 'cluster_to_split'" in errors["auto"]
    assert errors["auto"] == errors["torch"]


def test_language_errors_are_unchanged_by_the_float_path():
    """A wrong label and a write to an input trace raise the same errors with autodiff="auto"."""
    @il.transform
    def wrong_label(t_in, t_out):
        il.write(t_out["mu"], il.read(t_in["mu"], il.discrete), il.continuous)

    @il.transform
    def writes_input(t_in, t_out):
        il.write(t_in["mu"], il.read(t_in["mu"], il.continuous), il.continuous)

    torch.manual_seed(4)
    x = two_normals.simulate()
    for f, cls in ((wrong_label, LabelError), (writes_input, TransformError)):
        messages = []
        for mode in ("auto", "torch"):
            with pytest.raises(cls) as info:
                apply_transform(f, x, autodiff=mode)
            messages.append(str(info.value))
        assert messages[0] == messages[1]


# ---------------------------------------------------------------------------
# check_involution compares the float path with autograd
# ---------------------------------------------------------------------------
def test_check_involution_passes_for_mixture_split_merge(monkeypatch):
    """check_involution still passes for the mixture's split/merge, comparing with autograd each trial."""
    calls = []
    original = checks.autodiff_disagreement

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(checks, "autodiff_disagreement", counting)
    report = il.check_involution(m.gmm, (len(MIXTURE_DATA),), m.split_merge_aux, m.split_merge, trials=25,
                                 observations={"x": MIXTURE_DATA}, seed=2)
    assert report.trials == 25
    assert len(calls) == 25


@il.gen
def one_normal():
    il.normal(0.0, 1.0) @ "x"


@il.gen
def step_program(trace):
    il.normal(0.0, 1.0) @ "eps"


def _typed_walk(autodiff):
    @il.transform(name="typed_walk", autodiff=autodiff)
    def typed_walk(model_in, aux_in, model_out, aux_out):
        """x -> x + scale eps, eps -> -eps: an involution for any fixed scale, but the scale
        depends on the value's type, so the float and torch runs disagree."""
        x = il.read(model_in["x"], il.continuous)
        eps = il.read(aux_in["eps"], il.continuous)
        scale = 2.0 if isinstance(eps, torch.Tensor) else 3.0
        il.write(model_out["x"], x + scale * eps, il.continuous)
        il.write(aux_out["eps"], -eps, il.continuous)

    return typed_walk


def test_check_involution_catches_float_and_torch_runs_that_disagree(monkeypatch):
    """A transform that behaves differently on tensors is caught by check_involution's autograd
    comparison (and only by it: each path alone is a valid involution)."""
    with pytest.raises(il.InvolutionCheckError) as info:
        il.check_involution(one_normal, (), step_program, _typed_walk("auto"), trials=5, seed=0)
    message = str(info.value)
    assert "autograd" in message and "typed_walk" in message
    # each path on its own is a valid involution
    il.check_involution(one_normal, (), step_program, _typed_walk("torch"), trials=5, seed=0)
    monkeypatch.setattr(checks, "autodiff_disagreement", lambda *args, **kwargs: None)
    il.check_involution(one_normal, (), step_program, _typed_walk("auto"), trials=5, seed=0)


def test_autodiff_disagreement_message_names_the_two_paths():
    """The autograd-comparison message names the float and torch values, not 'f(f(·))'."""
    with pytest.raises(il.InvolutionCheckError) as info:
        il.check_involution(one_normal, (), step_program, _typed_walk("auto"), trials=2, seed=0)
    assert "f(f(" not in str(info.value)


def test_torch_transforms_never_run_the_float_path():
    """``@il.transform(autodiff="torch")`` (or ``apply_transform(autodiff="torch")``) uses autograd
    only, with no fallback counted, and gives the auto path's result on a path-independent move."""
    @il.transform(autodiff="torch")
    def shift(model_in, aux_in, model_out, aux_out):
        x = il.read(model_in["x"], il.continuous)
        eps = il.read(aux_in["eps"], il.continuous)
        il.write(model_out["x"], x + torch.sinh(eps), il.continuous)
        il.write(aux_out["eps"], -eps, il.continuous)

    assert shift.autodiff == "torch"
    torch.manual_seed(6)
    x = one_normal.simulate()
    y = step_program.simulate(x)
    app = apply_transform(shift, x, y, step_program)
    assert app.run.floats is False and shift.torch_fallbacks == 0 and shift.last_fallback is None
    auto = apply_transform(shift, x, y, step_program, autodiff="auto")     # the override runs floats
    assert auto.run.floats is True
    assert auto.logabsdet == pytest.approx(app.logabsdet, rel=1e-12, abs=1e-15)
    assert apply_transform(m.move_cluster, *_move_cluster_pair(), m.move_cluster_aux, (0.5, 0.3),
                           autodiff="torch").run.floats is False
    il.check_involution(one_normal, (), step_program, shift, trials=3, seed=0)
    assert shift.torch_fallbacks == 0
    with pytest.raises(TransformError, match="autodiff"):
        il.transform(lambda t_in, t_out: None, autodiff="jax")


def _move_cluster_pair():
    torch.manual_seed(7)
    x = _mixture_trace(3)
    return x, m.move_cluster_aux.simulate(x, 0.5, 0.3)


# ---------------------------------------------------------------------------
# the float path must behave as autograd does, even around a transform's own error handling
# ---------------------------------------------------------------------------
@il.gen
def positive_scale():
    il.gamma(2.0, 1.0) @ "s"


def _safe_log(v):
    """log(max(v, 1e-12)) for a tensor or a Python number (duck typing)."""
    try:
        return torch.log(v.clamp(min=1e-12))
    except AttributeError:          # a Python number has no .clamp
        return math.log(max(v, 1e-12))


@il.transform
def shift_by_log(t_in, t_out):
    s = il.read(t_in["s"], il.continuous)
    il.write(t_out["s"], s + _safe_log(s), il.continuous)


def test_unmodeled_tensor_method_inside_except_gives_autograds_jacobian():
    """A transform that catches the error of a tensor method the float path lacks still gets
    autograd's Jacobian."""
    torch.manual_seed(0)
    x = positive_scale.simulate()
    auto = apply_transform(shift_by_log, x, autodiff="auto")
    ref = apply_transform(shift_by_log, x, autodiff="torch")
    assert ref.logabsdet == pytest.approx(math.log(1 + 1 / float(x["s"])), rel=1e-12)
    assert auto.logabsdet == pytest.approx(ref.logabsdet, rel=1e-10)


OFFSETS = torch.tensor([1.0, 3.0])          # float32: torch's default dtype


@il.transform
def float32_walk(model_in, aux_in, model_out, aux_out):
    x = il.read(model_in["x"], il.continuous)
    eps = il.read(aux_in["eps"], il.continuous)
    il.write(model_out["x"], x + (eps * OFFSETS)[1], il.continuous)    # torch: float32 arithmetic
    il.write(aux_out["eps"], -eps, il.continuous)


def test_float32_constant_vector_gives_autograds_values():
    """A valid involution using a float32 constant vector passes check_involution (both paths agree)."""
    il.check_involution(one_normal, (), step_program, float32_walk, trials=3, seed=0)


def test_tuple_index_user_error_is_raised_on_the_float_path():
    """``w[1, 0]`` on a 1-d choice raises IndexError whatever the autodiff path."""
    @il.gen
    def pair():
        il.mvnormal(torch.zeros(2, dtype=F64), torch.eye(2, dtype=F64)) @ "w"

    @il.transform
    def tuple_index(t_in, t_out):
        w = il.read(t_in["w"], il.continuous)
        il.write(t_out["w"], 2 * w[1, 0], il.continuous)

    torch.manual_seed(0)
    x = pair.simulate()
    with pytest.raises(IndexError):
        apply_transform(tuple_index, x, autodiff="torch")
    with pytest.raises(IndexError):
        apply_transform(tuple_index, x, autodiff="auto")
