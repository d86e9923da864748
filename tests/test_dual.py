"""The float path's forward-mode numbers (imcmc_lab.transform.dual) against torch autograd.

A transform runs first on :class:`Dual` numbers (a float and a sparse dict of
partial derivatives) and :class:`DualVector` s; whatever that path computes must
be what the same code computes on float64 autograd tensors -- values and
derivatives -- and whatever it does not model must raise :class:`NeedsTorch` (so
the interpreter re-runs the transform on tensors), never give a different answer.

What is checked, each against torch (float64, ``torch.autograd``):

* every supported elementwise function, as ``torch.fn(x)`` and ``x.fn()``, on
  scalars and vectors, at several points of its domain;
* ``+ - * / **`` (and ``torch.add/sub/mul/div/pow``) for every operand combination
  (Dual, DualVector with and without length-1 broadcasting, Python float and int,
  0-d and 1-d constant tensors), and the full Jacobian of composite programs
  (Richardson-Green split/merge, Green's birth/death, weight moves);
* vector operations: indexing, ``cat``/``stack``, ``reshape``, reductions,
  ``len``/iteration/``shape``/``ndim``/``numel``/``tolist``/``item``;
* torch semantics: ``float(x)``/``x.item()`` drop the derivative, comparisons and
  ``bool`` give Python bools;
* domain edges and unsupported operations raise ``NeedsTorch``;
* derivative dicts are never mutated in place.
"""

from __future__ import annotations

import copy
import math
import operator
import random

import pytest
import torch

from imcmc_lab.examples import coal, mixture
from imcmc_lab.transform import dual
from imcmc_lab.transform.dual import Dual, DualVector, NeedsTorch

F64 = torch.float64
RTOL = 1e-12


# ---------------------------------------------------------------------------
# helpers: run one program on Duals and on autograd tensors
# ---------------------------------------------------------------------------
def dual_inputs(spec):
    """Duals for ``spec`` (a list of floats and lists of floats): input coordinate ids
    0..n-1 in order, each input ``Dual(v, {id: 1.0})``. Returns ``(inputs, n)``."""
    inputs, n = [], 0
    for s in spec:
        if isinstance(s, list):
            inputs.append(DualVector([Dual(float(v), {n + i: 1.0}) for i, v in enumerate(s)]))
            n += len(s)
        else:
            inputs.append(Dual(float(s), {n: 1.0}))
            n += 1
    return inputs, n


def tensor_inputs(spec):
    return tuple(torch.tensor(s, dtype=F64) for s in spec)


def flat_duals(result):
    """A program's result (Dual, DualVector or a tuple/list of them) as a list of Duals."""
    if type(result) is Dual:
        return [result]
    if type(result) is DualVector:
        return list(result.items)
    if isinstance(result, (tuple, list)):
        return [d for r in result for d in flat_duals(r)]
    raise AssertionError(f"the float path returned {type(result).__name__}: {result!r}")


def flat_tensor(result):
    if isinstance(result, torch.Tensor):
        return result.reshape(-1)
    return torch.cat([flat_tensor(r) for r in result])


def float_path(program, spec):
    """``(values, Jacobian)`` of ``program`` run on Duals."""
    inputs, n = dual_inputs(spec)
    out = flat_duals(program(*inputs))
    values = torch.tensor([d.v for d in out], dtype=F64)
    jac = torch.tensor([[d.d.get(i, 0.0) for i in range(n)] for d in out], dtype=F64).reshape(len(out), n)
    return values, jac


def autograd_path(program, spec):
    """``(values, Jacobian)`` of ``program`` run on float64 tensors, by torch.autograd."""
    inputs = tensor_inputs(spec)
    values = flat_tensor(program(*inputs)).detach()
    if values.numel() == 0:
        return values, torch.zeros((0, sum(x.numel() for x in inputs)), dtype=F64)
    parts = torch.autograd.functional.jacobian(lambda *xs: flat_tensor(program(*xs)), inputs)
    jac = torch.cat([p.reshape(len(values), -1) for p in parts], dim=1)
    return values, jac


def assert_close(got, expected, rtol=RTOL, what=""):
    """Equal to ``rtol`` relative to the largest entry (an exact 0 on one side may be
    rounding noise on the other)."""
    assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    err = float((got - expected).abs().max()) if expected.numel() else 0.0
    assert err <= rtol * max(scale, 1e-300), f"{what}: max error {err:.3g} (scale {scale:.3g})\n{got}\n{expected}"


def assert_same_as_torch(program, spec, what=""):
    v_got, j_got = float_path(program, spec)
    v_exp, j_exp = autograd_path(program, spec)
    assert_close(v_got, v_exp, what=f"{what} values")
    assert_close(j_got, j_exp, what=f"{what} Jacobian")


# ---------------------------------------------------------------------------
# elementwise functions
# ---------------------------------------------------------------------------
POINTS = {
    "sqrt": [1e-6, 0.01, 0.5, 2.0, 1e6],
    "rsqrt": [1e-6, 0.01, 0.5, 2.0, 1e6],
    "exp": [-50.0, -1.0, 0.0, 0.5, 30.0],
    "expm1": [-5.0, -1e-8, 0.0, 1e-8, 3.0],
    "log": [1e-8, 0.5, 1.0, 7.0, 1e10],
    "log1p": [-0.9, -1e-9, 0.0, 1e-9, 5.0],
    "log2": [0.1, 1.0, 3.0, 1e5],
    "log10": [0.1, 1.0, 3.0, 1e5],
    "sin": [-3.0, 0.0, 1.0, 10.0],
    "cos": [-3.0, 0.0, 1.0, 10.0],
    "tan": [-1.2, 0.0, 0.5, 1.5],
    "tanh": [-20.0, -1.0, 0.0, 0.3, 20.0],
    "sinh": [-5.0, 0.0, 2.0],
    "cosh": [-5.0, 0.0, 2.0],
    "atan": [-100.0, -1.0, 0.0, 2.0],
    "asinh": [-100.0, -1.0, 0.0, 2.0],
    "sigmoid": [-800.0, -40.0, -20.0, -5.0, 0.0, 3.0, 20.0, 40.0, 800.0],
    "expit": [-800.0, -40.0, -5.0, 0.0, 3.0, 40.0, 800.0],
    "square": [-3.0, 0.0, 2.5],
    "reciprocal": [-3.0, 0.2, 4.0],
    "abs": [-2.0, 0.0, 3.0],
    "neg": [-1.0, 0.0, 2.0],
    "negative": [-1.0, 2.0],
    "absolute": [-2.0, 3.0],
}
METHODS = ["sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "tanh",
           "sinh", "cosh", "atan", "asinh", "sigmoid", "square", "reciprocal", "abs", "neg"]


def torch_function(name):
    return getattr(torch, name, None) or getattr(torch.special, name)


def test_every_supported_elementwise_function_is_tested():
    """The table of elementwise functions has no entry these tests forget."""
    assert set(dual._ELEMENTWISE) == set(POINTS)


@pytest.mark.parametrize("name", sorted(POINTS))
def test_elementwise_function_matches_torch(name):
    """``torch.fn(x)`` on a Dual gives torch's value and derivative at every point tested."""
    fn = torch_function(name)
    for p in POINTS[name]:
        assert_same_as_torch(lambda x: fn(x), [p], what=f"torch.{name}({p})")


@pytest.mark.parametrize("name", METHODS)
def test_elementwise_method_matches_torch(name):
    """``x.fn()`` on a Dual gives torch's value and derivative (the method form a tensor has)."""
    assert hasattr(torch.Tensor, name)
    for p in POINTS[name]:
        assert_same_as_torch(lambda x: getattr(x, name)(), [p], what=f"x.{name}() at {p}")


def test_expit_is_sigmoid():
    """``torch.special.expit`` and ``torch.sigmoid`` are the same function on the float path."""
    for p in POINTS["sigmoid"]:
        a, b = torch.special.expit(Dual(p, {0: 1.0})), torch.sigmoid(Dual(p, {0: 1.0}))
        assert (a.v, a.d) == (b.v, b.d)
        assert a.v == pytest.approx(float(torch.sigmoid(torch.tensor(p, dtype=F64))), rel=1e-15, abs=0)


@pytest.mark.parametrize("name", METHODS)
def test_elementwise_function_on_a_vector_matches_torch(name):
    """``torch.fn(v)`` and ``v.fn()`` on a DualVector work entry by entry, like torch."""
    points = POINTS[name][:4]
    fn = torch_function(name)
    assert_same_as_torch(lambda v: fn(v), [points], what=f"torch.{name}(vector)")
    assert_same_as_torch(lambda v: getattr(v, name)(), [points], what=f"vector.{name}()")
    assert type(fn(dual_inputs([points])[0][0])) is DualVector


def test_python_abs_neg_pos_match_torch():
    """``abs(x)``, ``-x`` and ``+x`` on Duals and DualVectors give torch's values and derivatives."""
    for p in (-2.0, 0.0, 1.5):
        assert_same_as_torch(lambda x: (abs(x), -x, +x), [p])
    assert_same_as_torch(lambda v: (abs(v), -v, +v), [[-2.0, 0.0, 1.5]])


def test_elementwise_function_of_a_constant_has_no_derivative():
    """A function of a constant Dual (empty derivative dict) is a constant."""
    y = torch.exp(Dual(1.0, {}))
    assert y.v == math.e and y.d == {}
    # sqrt at 0 is fine for a constant (only its derivative is infinite)
    z = torch.sqrt(Dual(0.0, {}))
    assert z.v == 0.0 and z.d == {}


# ---------------------------------------------------------------------------
# binary operators, every operand combination
# ---------------------------------------------------------------------------
# Operand kinds: an input (0-d or 1-d, tracked) or a constant. Constants are the same
# object in both runs; the values keep every operation (** included) in its domain.
INPUT_VALUES = {"dual": 1.7, "vec": [0.8, 1.3, 2.1], "vec1": [1.4]}
CONSTANTS = {
    "float": 1.6,
    "int": 3,
    "t0": torch.tensor(0.9, dtype=F64),
    "t1": torch.tensor([1.2, 0.7, 1.9], dtype=F64),
}
COMBOS = [
    ("dual", "dual"), ("dual", "float"), ("float", "dual"), ("dual", "int"), ("int", "dual"),
    ("dual", "t0"), ("t0", "dual"),
    ("dual", "vec"), ("vec", "dual"), ("vec", "vec"), ("vec", "vec1"), ("vec1", "vec"),
    ("vec1", "vec1"), ("vec", "t1"), ("t1", "vec"), ("vec", "float"), ("float", "vec"),
    ("vec", "int"), ("int", "vec"), ("vec", "t0"), ("t0", "vec"), ("dual", "t1"), ("t1", "dual"),
]
OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "**": operator.pow,
    "torch.add": torch.add, "torch.sub": torch.sub, "torch.mul": torch.mul, "torch.div": torch.div,
    "torch.pow": torch.pow,
}


def _binary_program(op, left, right):
    kinds = [k for k in (left, right) if k in INPUT_VALUES]
    spec = [INPUT_VALUES[k] for k in kinds]

    def program(*inputs):
        it = iter(inputs)
        a = next(it) if left in INPUT_VALUES else CONSTANTS[left]
        b = next(it) if right in INPUT_VALUES else CONSTANTS[right]
        return op(a, b)

    return program, spec


def _torch_accepts(op, left, right):
    """Whether torch itself takes these operand types (torch.add(1.6, tensor) does not)."""
    program, spec = _binary_program(op, left, right)
    try:
        program(*tensor_inputs(spec))
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("left, right", COMBOS, ids=[f"{a}-{b}" for a, b in COMBOS])
@pytest.mark.parametrize("name", list(OPERATORS))
def test_binary_operator_matches_torch(name, left, right):
    """``a <op> b`` for every operand combination: torch's value, shape and Jacobian."""
    op = OPERATORS[name]
    if not _torch_accepts(op, left, right):
        pytest.skip(f"torch itself rejects {name}({left}, {right})")
    program, spec = _binary_program(op, left, right)
    inputs, _ = dual_inputs(spec)
    result = program(*inputs)
    expected = program(*tensor_inputs(spec))
    assert type(result) is (DualVector if expected.ndim == 1 else Dual)
    assert result.shape == expected.shape
    assert_same_as_torch(program, spec, what=f"{left} {name} {right}")


def test_zero_d_tensor_operand_goes_through_torch_function():
    """``tensor <op> Dual`` is answered by Dual.__torch_function__ with a Dual (not a tensor)."""
    t = torch.tensor(0.9, dtype=F64)
    x = Dual(1.7, {0: 1.0})
    for op in (operator.add, operator.sub, operator.mul, operator.truediv, operator.pow):
        assert type(op(t, x)) is Dual


def test_pow_special_exponents_match_torch():
    """``x ** 2`` (its own fast path), ``x ** 0``, ``x ** 1``, ``x ** -1``, ``x ** 0.5``,
    ``2 ** x`` and ``x ** y`` at a negative base with an integer constant exponent."""
    for p in (-1.5, 0.0, 2.0):
        assert_same_as_torch(lambda x: (x ** 2, x ** 2.0, x ** 0, x ** 1, x ** 3), [p], what=f"x={p}")
    assert_same_as_torch(lambda x: (x ** -1, x ** 0.5, x ** -2.5, 2 ** x, 0.5 ** x), [1.3])
    assert_same_as_torch(lambda x: x ** torch.tensor(3.0, dtype=F64), [-2.0])
    # torch: the derivative of x**0 is 0 even at x = 0
    assert_same_as_torch(lambda x: x ** 0.0, [0.0])


def test_pow_with_zero_base_and_tracked_exponent_matches_torch():
    """``0 ** y`` with a tracked exponent ``y > 0``: value 0 and derivative 0, as torch."""
    assert_same_as_torch(lambda x, y: x * 0.0 ** y, [1.0, 2.0])


# ---------------------------------------------------------------------------
# composite programs: full Jacobians
# ---------------------------------------------------------------------------
def test_mixture_split_and_merge_formulas_match_autograd():
    """The example's split_params/merge_params (Richardson & Green's formulas) and
    split_weights/merge_weights on Duals."""
    assert_same_as_torch(mixture.split_params, [0.3, 2.2, 0.4, 0.7, 0.35, 0.15])
    assert_same_as_torch(mixture.split_params, [-4.0, 0.05, -0.9, 0.01, 0.01, 0.8])
    assert_same_as_torch(lambda mu1, mu2, v1, v2, w1, w2: mixture.merge_params(mu1, mu2, v1, v2, w1, w2, w1 + w2),
                         [-1.0, 2.0, 0.5, 1.5, 0.3, 0.2])
    for j in (1, 2, 3):
        assert_same_as_torch(lambda w, u1: mixture.split_weights(w, j, u1), [[0.2, 0.5, 0.3], 0.4])
        assert_same_as_torch(lambda w: mixture.merge_weights(w, j), [[0.2, 0.4, 0.1, 0.3]])


def test_green_birth_death_formulas_match_autograd():
    """The coal example's green_split/green_merge (log1p, stack, exp of a vector) on Duals."""
    assert_same_as_torch(coal.green_split, [0.004, 1000.0, 1500.0, 4000.0, 0.3])
    assert_same_as_torch(coal.green_merge, [0.004, 0.002, 1000.0, 1500.0, 4000.0])
    zero = torch.zeros((), dtype=F64)
    assert_same_as_torch(lambda h, x, u: coal.green_split(h, zero, x, torch.tensor(40907.0, dtype=F64), u),
                         [0.003, 12000.0, 0.8])


def test_vector_program_matches_autograd():
    """A weight move and a mix of vector operations: values and Jacobian equal autograd's."""
    def move_weights(w, d):
        moved = w * torch.exp(d)
        return moved / moved.sum()

    def mixed(v, a, b):
        head = torch.cat([v[:1] * a, (v[1:] - b) ** 2, torch.stack([a * b, a / b])])
        s = head.sum() + v.mean() * v.prod() - torch.sum(v)
        return head / s, s.reshape(1), torch.add(a, v[-1]), torch.tensor([2.0, 3.0, 4.0], dtype=F64) * v

    assert_same_as_torch(move_weights, [[0.2, 0.5, 0.3], [0.1, -0.4, 0.25]])
    assert_same_as_torch(mixed, [[0.7, 1.9, -0.4], 1.3, 0.6])


def test_random_programs_match_autograd():
    """Random compositions of the supported operations: full Jacobians equal autograd's."""
    rng = random.Random(0)
    unary = [torch.exp, torch.tanh, torch.sin, torch.atan, torch.sigmoid, torch.square, torch.asinh,
             lambda x: x.cos(), lambda x: torch.log1p(x * x), lambda x: torch.sqrt(1 + x * x)]
    binary = [operator.add, operator.sub, operator.mul, lambda a, b: a / (1 + b * b),
              lambda a, b: torch.exp(a - b), lambda a, b: (1 + a * a) ** (0.5 * b)]

    for trial in range(25):
        ops = [(rng.randrange(3), rng.randrange(len(unary)), rng.randrange(len(binary)),
                rng.randrange(10), rng.randrange(10)) for _ in range(12)]

        def program(*xs, ops=ops):
            values = list(xs)
            for kind, u, b, i, j in ops:
                a, c = values[i % len(values)], values[j % len(values)]
                values.append(unary[u](a) if kind == 0 else binary[b](a, c) if kind == 1 else a * 0.5 + 2.0)
            return tuple(values[-4:])

        spec = [rng.uniform(-1.5, 1.5) for _ in range(4)]
        assert_same_as_torch(program, spec, what=f"random program {trial}")


# ---------------------------------------------------------------------------
# vector operations
# ---------------------------------------------------------------------------
V = [0.7, -1.2, 2.5, 0.4]


@pytest.mark.parametrize("index", [
    0, 2, -1, -4, slice(1, 3), slice(None, None, 2), slice(None, -1), slice(3, 1), [2, 0, 2], [-1],
    "t0", "t1", "t1_single",
], ids=str)
def test_vector_indexing_matches_torch(index):
    """Indexing a DualVector by int, negative int, slice, list, 0-d and 1-d integer tensors
    gives torch's values, shape and derivatives."""
    index = {"t0": torch.tensor(2), "t1": torch.tensor([3, 1, 1]), "t1_single": torch.tensor([1])}.get(
        index, index) if isinstance(index, str) else index
    v, _ = dual_inputs([V])
    got = v[0][index]
    expected = torch.tensor(V, dtype=F64)[index]
    assert type(got) is (Dual if expected.ndim == 0 else DualVector)
    assert got.shape == expected.shape
    assert_same_as_torch(lambda w: w[index], [V], what=f"v[{index!r}]")


def test_cat_stack_reshape_match_torch():
    """``torch.cat``, ``torch.stack`` and ``reshape(1)``/``reshape(-1)``/``reshape(())``/``view``."""
    def program(v, a, b):
        return (torch.cat([v, a.reshape(1), v[1:]]), torch.stack([a, b, v[0]]), torch.concat([b.reshape(-1), v]),
                v[2:3].reshape(()) * a, v.reshape(-1), v.reshape(4), a.view(1), torch.reshape(v, (-1,)),
                torch.cat([v, torch.tensor([5.0], dtype=F64)]))

    assert_same_as_torch(program, [V, 1.5, -0.5])
    v, a, b = dual_inputs([V, 1.5, -0.5])[0]
    assert type(a.reshape(())) is Dual and type(a.reshape(1)) is DualVector
    assert type(v[1:2].reshape(())) is Dual and type(torch.stack([a, b])) is DualVector
    assert torch.cat([v, v]).shape == torch.Size([8])


def test_reductions_match_torch():
    """``sum`` (method, torch.sum, Python sum, dim=0, keepdim), ``mean`` and ``prod``."""
    def program(v):
        return (v.sum(), torch.sum(v), sum(v), v.sum(0), v.sum(-1, keepdim=True), torch.sum(v, dim=0),
                v.mean(), v.prod(), v[:1].sum())

    assert_same_as_torch(program, [V])
    v = dual_inputs([V])[0][0]
    assert type(v.sum(0, keepdim=True)) is DualVector and type(v.sum()) is Dual


def test_vector_container_protocol_matches_torch():
    """``len``, iteration, ``shape``, ``ndim``, ``numel``, ``dim``, ``size``, ``tolist``,
    and ``item``/``float`` on a one-element vector behave like a tensor's."""
    v = dual_inputs([V])[0][0]
    t = torch.tensor(V, dtype=F64)
    assert len(v) == len(t) == 4
    assert v.shape == t.shape and v.ndim == t.ndim == 1 and v.dim() == 1
    assert v.numel() == t.numel() and v.size() == t.size() and v.size(0) == t.size(0) == 4
    assert v.tolist() == t.tolist()
    items = list(v)
    assert all(type(x) is Dual for x in items)
    assert [x.v for x in items] == V and [x.d for x in items] == [{i: 1.0} for i in range(4)]
    one = v[2:3]
    assert one.item() == float(one) == t[2:3].item() == 2.5
    assert type(one.item()) is float and type(float(one)) is float
    assert_same_as_torch(lambda w: torch.stack([x * x for x in w]), [V], what="iteration")
    x = Dual(1.5, {0: 1.0})
    assert x.shape == torch.Size([]) and x.ndim == 0 and x.dim() == 0 and x.numel() == 1
    assert x.tolist() == 1.5 and x.size() == torch.Size([])


def test_one_d_constant_tensor_becomes_a_vector():
    """``lift`` turns a short constant 1-d tensor into a constant DualVector, a 0-d one into a float."""
    c = dual.lift(torch.tensor([1.0, 2.0], dtype=F64))
    assert type(c) is DualVector and c.tolist() == [1.0, 2.0] and all(x.d == {} for x in c)
    assert dual.lift(torch.tensor(2.5, dtype=F64)) == 2.5 and type(dual.lift(torch.tensor(2.5))) is float
    assert dual.lift(3) == 3.0 and type(dual.lift(True)) is float


# ---------------------------------------------------------------------------
# torch's semantics
# ---------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")
def test_float_and_item_drop_the_derivative():
    """``float(x)`` and ``x.item()`` give the value without its derivative, as they detach a tensor."""
    x = Dual(1.5, {0: 1.0})
    assert float(x) == 1.5 and type(float(x)) is float
    assert x.item() == 1.5 and type(x.item()) is float
    assert_same_as_torch(lambda x: x * float(x) + x.item() ** 2 + math.sqrt(x), [1.5])
    assert_same_as_torch(lambda v: v * float(v[1:2]) + v[0].item(), [[0.5, 2.0]])
    d = x.detach()
    assert isinstance(d, torch.Tensor) and not d.requires_grad and d.dtype == F64 and float(d) == 1.5


def test_comparisons_return_python_bools_with_torchs_answers():
    """``< <= > >= == !=`` between Duals, numbers and 0-d tensors are Python bools equal to
    ``bool()`` of torch's comparison."""
    values = [-1.0, 0.0, 1.5]
    ops = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]
    for a in values:
        for b in values:
            x, y = Dual(a, {0: 1.0}), Dual(b, {1: 1.0})
            ta, tb = torch.tensor(a, dtype=F64), torch.tensor(b, dtype=F64)
            for op in ops:
                expected = bool(op(ta, tb))
                for got in (op(x, y), op(x, b), op(x, int(b) if b == int(b) else b), op(x, tb), op(a, y)):
                    assert type(got) is bool and got == expected, (op, a, b)


def test_bool_of_a_dual_is_torchs():
    """``bool(x)`` is ``x != 0`` (nan is true), as for a 0-d tensor; a 1-element vector too."""
    for p in (0.0, -0.0, 1e-300, -2.0, math.nan, math.inf):
        assert bool(Dual(p, {0: 1.0})) == bool(torch.tensor(p, dtype=F64))
    assert bool(DualVector([Dual(0.0, {})])) is False
    assert bool(DualVector([Dual(3.0, {0: 1.0})])) is True
    assert int(Dual(2.7, {0: 1.0})) == int(torch.tensor(2.7, dtype=F64)) == 2


# ---------------------------------------------------------------------------
# domain edges and unsupported operations: NeedsTorch
# ---------------------------------------------------------------------------
def _x(v, i=0):
    return Dual(v, {i: 1.0})


EDGES = {
    "log(0)": lambda: torch.log(_x(0.0)),
    "log(-1)": lambda: torch.log(_x(-1.0)),
    "x.log() at 0": lambda: _x(0.0).log(),
    "log1p(-1)": lambda: torch.log1p(_x(-1.0)),
    "log2(0)": lambda: torch.log2(_x(0.0)),
    "sqrt(-1)": lambda: torch.sqrt(_x(-1.0)),
    "sqrt'(0)": lambda: torch.sqrt(_x(0.0)),
    "rsqrt(0)": lambda: torch.rsqrt(_x(0.0)),
    "reciprocal(0)": lambda: torch.reciprocal(_x(0.0)),
    "Dual/Dual(0)": lambda: _x(1.0) / _x(0.0, 1),
    "Dual/0": lambda: _x(1.0) / 0,
    "Dual/0.0 tensor": lambda: _x(1.0) / torch.tensor(0.0, dtype=F64),
    "float/Dual(0)": lambda: 1.0 / _x(0.0),
    "tensor/Dual(0)": lambda: torch.tensor(1.0, dtype=F64) / _x(0.0),
    "torch.div(Dual, 0)": lambda: torch.div(_x(1.0), 0.0),
    "exp(1000)": lambda: torch.exp(_x(1000.0)),
    "expm1(1000)": lambda: torch.expm1(_x(1000.0)),
    "cosh(1000)": lambda: torch.cosh(_x(1000.0)),
    "(-8)**(1/3)": lambda: _x(-8.0) ** (1 / 3),
    "(-8)**Dual": lambda: _x(-8.0) ** _x(1 / 3, 1),
    "(-2)**y (log of a negative base)": lambda: _x(-2.0) ** _x(2.0, 1),
    "0**-1": lambda: _x(0.0) ** -1,
    "0**-0.5": lambda: _x(0.0) ** -0.5,
    "0**Dual(-1)": lambda: _x(0.0) ** _x(-1.0, 1),
    "0**0.5 (infinite derivative)": lambda: _x(0.0) ** 0.5,
    "10**400": lambda: _x(10.0) ** 400,
    "vector log(0)": lambda: torch.log(DualVector([_x(1.0), _x(0.0, 1)])),
    "vector / 0": lambda: DualVector([_x(1.0)]) / 0.0,
}


@pytest.mark.parametrize("name", list(EDGES))
def test_domain_edges_raise_needs_torch(name):
    """Where torch gives inf/nan, the float path raises NeedsTorch (the transform re-runs on tensors)."""
    with pytest.raises(NeedsTorch):
        EDGES[name]()


def test_needs_torch_is_not_an_exception():
    """NeedsTorch is a BaseException: a transform's own ``except Exception`` cannot swallow it."""
    assert issubclass(NeedsTorch, BaseException) and not issubclass(NeedsTorch, Exception)


def _vec():
    return DualVector([_x(1.0, 0), _x(2.0, 1)])


UNSUPPORTED = {
    "torch.logsumexp": lambda: torch.logsumexp(_vec(), 0),
    "torch.where": lambda: torch.where(torch.tensor(True), _x(1.0), _x(2.0, 1)),
    "torch.clamp": lambda: torch.clamp(_x(1.0), min=0.0),
    "torch.softmax": lambda: torch.softmax(_vec(), 0),
    "torch.zeros_like": lambda: torch.zeros_like(_x(1.0)),
    "kwargs to torch.add": lambda: torch.add(_x(1.0), _x(2.0, 1), alpha=2.0),
    "exp with out=": lambda: torch.exp(_x(1.0), out=torch.empty((), dtype=F64)),
    "setitem": lambda: _vec().__setitem__(0, _x(5.0)),
    "vector < vector": lambda: _vec() < _vec(),
    "vector == vector": lambda: _vec() == _vec(),
    "vector > float": lambda: _vec() > 0.5,
    "Dual < vector": lambda: _x(1.0) < _vec(),
    "tensor < Dual": lambda: torch.tensor(0.5, dtype=F64) < _x(1.0),
    "bool(vector)": lambda: bool(_vec()),
    "float(vector)": lambda: float(_vec()),
    "Dual + grad tensor": lambda: _x(1.0) + torch.tensor(1.0, dtype=F64, requires_grad=True),
    "grad tensor * Dual": lambda: torch.tensor(1.0, dtype=F64, requires_grad=True) * _x(1.0),
    "vector + grad tensor": lambda: _vec() + torch.ones(2, dtype=F64, requires_grad=True),
    "Dual + 2-d tensor": lambda: _x(1.0) + torch.ones(2, 2, dtype=F64),
    "Dual + long vector": lambda: _x(1.0) + torch.ones(dual.MAX_VECTOR + 1, dtype=F64),
    "Dual + complex": lambda: _x(1.0) + torch.tensor(1j),
    "Dual + list": lambda: _x(1.0) + [1.0],
    "vector.reshape(2, 1)": lambda: _vec().reshape(2, 1),
    "vector.reshape(1, -1)": lambda: _vec().reshape(1, -1),
    "Dual.reshape(1, 1)": lambda: _x(1.0).reshape(1, 1),
    "vector.reshape(())": lambda: _vec().reshape(()),
    "vector[...]": lambda: _vec()[...],
    "vector[None]": lambda: _vec()[None],
    "vector[bool list]": lambda: _vec()[[True, False]],
    "vector[float tensor]": lambda: _vec()[torch.tensor([0.0])],
    "vector[bool tensor]": lambda: _vec()[torch.tensor([True, False])],
    "cat of a 0-d": lambda: torch.cat([_x(1.0), _vec()]),
    "stack of vectors": lambda: torch.stack([_vec(), _vec()]),
    "cat along dim 1": lambda: torch.cat([_vec(), _vec()], dim=1),
    "sum(dim=1)": lambda: _vec().sum(1),
    "mean of empty": lambda: DualVector([]).mean(),
    "size(1)": lambda: _vec().size(1),
    "Dual.size(0)": lambda: _x(1.0).size(0),
    "Dual.unsqueeze(1)": lambda: _x(1.0).unsqueeze(1),
    "vector + vector of another length": lambda: _vec() + DualVector([_x(1.0), _x(2.0), _x(3.0)]),
    "Dual @ vector": lambda: torch.matmul(_x(1.0), _vec()),
    "vector @ vector of another length": lambda: _vec() @ DualVector([_x(1.0), _x(2.0), _x(3.0)]),
    "matrix @ vector of another length": lambda: torch.ones(2, 3, dtype=F64) @ _vec(),
    "float32 matrix @ vector": lambda: torch.ones(2, 2) @ _vec(),
    "grad matrix @ vector": lambda: torch.ones(2, 2, dtype=F64, requires_grad=True) @ _vec(),
    "huge matrix @ vector": lambda: torch.ones(dual.MAX_MATRIX, 2, dtype=F64) @ _vec(),
    "3-d tensor @ vector": lambda: torch.ones(2, 2, 2, dtype=F64) @ _vec(),
    "matmul with out=": lambda: torch.matmul(_vec(), _vec(), out=torch.empty((), dtype=F64)),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_operations_raise_needs_torch(name):
    """An operation the float path does not model raises NeedsTorch (never a wrong answer)."""
    with pytest.raises(NeedsTorch):
        UNSUPPORTED[name]()


@pytest.mark.parametrize("name", ["Dual @ Dual", "Dual.clamp", "Dual // 2", "Dual.pow method",
                                  "Dual.negative method", "round(Dual)"])
def test_unmodeled_operators_and_methods_raise_needs_torch(name):
    """Operators and tensor methods the float path lacks raise NeedsTorch, like unknown torch functions."""
    x = _x(1.5)
    calls = {"Dual @ Dual": lambda: x @ x, "Dual.clamp": lambda: x.clamp(min=0.0),
             "Dual // 2": lambda: x // 2, "Dual.pow method": lambda: x.pow(2),
             "Dual.negative method": lambda: x.negative(), "round(Dual)": lambda: round(x)}
    with pytest.raises(NeedsTorch):
        calls[name]()


MATRIX = torch.tensor([[1.5, -2.0, 0.25], [0.0, 3.0, -1.0]], dtype=F64)

MATMUL_PROGRAMS = {
    "matrix @ vector": lambda v: MATRIX @ v,
    "vector @ matrix": lambda v: v[:2] @ MATRIX,
    "vector @ vector": lambda v: v @ torch.exp(v),
    "constant vector @ vector": lambda v: torch.tensor([2.0, -1.0, 0.5], dtype=F64) @ v,
    "torch.matmul(matrix, vector)": lambda v: torch.matmul(MATRIX, v),
    "torch.mv": lambda v: torch.mv(MATRIX, torch.exp(v)),
    "torch.dot": lambda v: torch.dot(v, v * 2.0),
    "matrix.T @ vector": lambda v: MATRIX.T @ v[1:],
    "a linear map and a nonlinearity (jacobian_sparsity.py's h)":
        lambda v: MATRIX @ v + 0.2 * torch.tanh(v[:2]),
}


@pytest.mark.parametrize("name", list(MATMUL_PROGRAMS))
def test_matmul_with_a_vector_matches_autograd(name):
    """``@``, ``torch.matmul``, ``torch.mv`` and ``torch.dot`` with a vector of Duals and a
    constant float64 vector or matrix: values and Jacobian as autograd's."""
    assert_same_as_torch(MATMUL_PROGRAMS[name], [[0.7, -1.2, 2.5]], name)


def test_tuple_index_is_not_a_list_index():
    """``v[1, 0]`` on a 1-d vector is an error in torch; ``v[(0,)]`` is ``v[0]``."""
    v = _vec()
    with pytest.raises((NeedsTorch, IndexError)):
        v[1, 0]
    got = v[(0,)]
    assert type(got) is Dual


def test_zero_d_bool_tensor_index_is_not_an_integer():
    """``v[torch.tensor(True)]`` is torch's mask indexing (shape (1, n)), never ``v[1]``."""
    v = _vec()
    with pytest.raises(NeedsTorch):
        v[torch.tensor(True)]


def test_float32_constant_vector_is_not_lifted_to_float64():
    """A Dual times a float32 1-d constant is float32 arithmetic in torch: not modeled, so NeedsTorch."""
    x = _x(1.5409961082440433)
    c = torch.tensor([1.0, 3.0])            # float32, torch's default dtype
    expected = (torch.tensor(x.v, dtype=F64) * c)
    assert expected.dtype == torch.float32
    try:
        got = x * c
    except NeedsTorch:
        return
    assert got.tolist() == expected.tolist()


# ---------------------------------------------------------------------------
# derivative dicts are immutable
# ---------------------------------------------------------------------------
def test_derivative_dicts_are_never_mutated():
    """After many operations the inputs' derivative dicts are unchanged and the shared
    empty dict stays empty (results may share dicts, so no one may write into them)."""
    xs = [Dual(v, {i: 1.0}) for i, v in enumerate([0.7, 1.3, -0.4, 2.2])]
    consts = [Dual(0.5, dual._EMPTY), Dual(-1.5, {})]
    vec = DualVector([Dual(v, {10 + i: 1.0}) for i, v in enumerate([0.3, 0.6, 0.1])])
    before = copy.deepcopy([x.d for x in xs] + [c.d for c in consts] + [x.d for x in vec])
    rng = random.Random(1)
    values = xs + consts
    ops = [operator.add, operator.sub, operator.mul, lambda a, b: a / (b * b + 1), lambda a, b: (a * a + 1) ** b,
           lambda a, b: torch.add(a, b), lambda a, b: torch.mul(b, a), lambda a, b: a - 0.0, lambda a, b: 0.0 + a,
           lambda a, b: a * 1, lambda a, b: -a, lambda a, b: abs(a), lambda a, b: torch.tanh(a) + b]
    results = []
    for _ in range(400):
        a, b = rng.choice(values), rng.choice(values)
        r = rng.choice(ops)(a, b)
        values.append(r)
        results.append(r)
    vector_results = [vec + xs[0], vec * vec, torch.cat([vec, vec[:1] * xs[1]]), vec.sum(), vec.mean(), vec.prod(),
                      torch.exp(vec) / vec.sum(), torch.stack([xs[0], xs[1]]) - vec[1:], vec[[0, 0]] * 2.0]
    # mutate nothing through the results either: the engine only reads them
    after = [x.d for x in xs] + [c.d for c in consts] + [x.d for x in vec]
    assert after == before
    assert dual._EMPTY == {}
    assert results and vector_results
