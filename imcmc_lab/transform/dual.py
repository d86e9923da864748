"""Forward-mode derivatives on Python floats: the fast path of a transform's Jacobian.

Most transforms compute a handful of scalar formulas (split/merge, birth/death,
reparametrisations). On autograd tensors each operation costs microseconds of
torch dispatch, and the Jacobian a batched backward pass. On :class:`Dual`
numbers -- a float value and its partial derivatives as a sparse
``{input coordinate: derivative}`` dict -- the same transform costs a fraction
of that, and the Jacobian's rows are the written values' derivative dicts.

A :class:`Dual` behaves like a 0-d float64 tensor under Python arithmetic and
the torch functions in ``_FUNCTIONS``; a :class:`DualVector` like a short 1-d
tensor (indexing, slicing, ``torch.cat``/``torch.stack``, elementwise functions
and arithmetic, ``sum``, ``@`` with a vector or a constant float64 matrix). Anything else raises :class:`NeedsTorch`, and the
interpreter re-runs the transform on autograd tensors: an operation this module
does not know costs time, never a wrong derivative. Domain and overflow errors
(``log(0)``, ``sqrt`` of a negative number, ``exp(1000)``, division by zero)
re-run in torch too, where they give the IEEE ``-inf``/``nan``/``inf`` a tensor
would.

Conversions keep torch's semantics: ``float(x)`` and ``x.item()`` give the value
without its derivative, exactly as they detach a tensor (a written value that lost
its derivative this way makes the Jacobian singular, which the move and
``check_involution`` report; where another input still reaches it, the Jacobian is
only wrong, and ``check_involution``'s finite differences report it). In-place operators (``x *= 2``) raise
:class:`NeedsTorch`: on a tensor they are seen through every alias and view.
"""

from __future__ import annotations

import math
import numbers
import threading

import torch

__all__ = ["Dual", "DualVector", "NeedsTorch", "lift", "MAX_VECTOR", "unit_derivatives", "IdRange"]

#: Vectors longer than this are read as autograd tensors: elementwise Python
#: arithmetic is only faster than torch for short vectors.
MAX_VECTOR = 64

_EMPTY = {}     # the derivative of a constant; dicts are never mutated once built

# The derivative of input coordinate i itself, {i: 1.0}, as one shared dict per i: a
# vector read makes no dict per coordinate, and the Jacobian finds the coordinates a
# transform passes through unchanged by identity (jacobian._pass_through_runs).
_UNITS = []
_MAX_SHARED_UNITS = 1024
_GROW_UNITS = threading.Lock()


def unit_derivatives(ids):
    """``{i: 1.0}`` for each id in the range ``ids``: shared dicts, or fresh ones past the
    first 1024 ids (so that a transform with very many reads leaves no large table)."""
    if ids.stop > len(_UNITS):
        if ids.stop > _MAX_SHARED_UNITS:
            return [{i: 1.0} for i in ids]
        with _GROW_UNITS:
            _UNITS.extend({i: 1.0} for i in range(len(_UNITS), ids.stop))
    return _UNITS[ids.start:ids.stop]


class IdRange:
    """A derivative-dict key standing for every input coordinate id in ``ids`` (a range):
    ``{IdRange(ids): g}`` is the derivative ``g`` with respect to each of them. Hashed
    and compared by identity (as fast as an int key); one is made per simplex read."""

    __slots__ = ("ids",)

    def __init__(self, ids):
        self.ids = ids

    def __repr__(self):
        return f"IdRange({self.ids.start}, {self.ids.stop})"


class NeedsTorch(BaseException):
    """Internal: the transform did something the float path does not model.

    A ``BaseException`` so that a transform's own ``except Exception`` cannot
    swallow it and carry on down a branch the torch run would not take."""


# ---------------------------------------------------------------------------
# derivative dicts
# ---------------------------------------------------------------------------
# (Loops, not comprehensions: on Python 3.11 a comprehension is a call of its own, and
# these run for every arithmetic operation of a transform.)
def _scale(d, c):
    if not d:
        return _EMPTY
    out = {}
    for k, g in d.items():
        out[k] = c * g
    return out


def _axpy(d1, c1, d2, c2):
    """``c1 * d1 + c2 * d2``."""
    if not d2:
        return _scale(d1, c1)
    if not d1:
        return _scale(d2, c2)
    out = {}
    for k, g in d1.items():
        out[k] = c1 * g
    for k, g in d2.items():
        if k in out:
            out[k] += c2 * g
        else:
            out[k] = c2 * g
    return out


def _add(d1, d2, sign=1.0):
    if not d2:
        return d1
    if not d1:
        return d2 if sign == 1.0 else _scale(d2, sign)
    out = dict(d1)
    for k, g in d2.items():
        prev = out.get(k)
        out[k] = sign * g if prev is None else prev + sign * g
    return out


def _guard(fn, *args):
    """``fn(*args)`` in float arithmetic, or NeedsTorch where torch gives inf/nan instead."""
    try:
        out = fn(*args)
    except (ArithmeticError, ValueError):
        raise NeedsTorch from None
    if type(out) is complex:
        raise NeedsTorch
    return out


# ---------------------------------------------------------------------------
# scalars
# ---------------------------------------------------------------------------
def lift(x):
    """A Dual, a DualVector or a float for an operand; NeedsTorch if it has no float form."""
    t = type(x)
    if t is Dual or t is DualVector or t is float:
        return x
    if t is int or t is bool:
        return float(x)
    if isinstance(x, torch.Tensor):
        if x.requires_grad or x.is_complex() or x.ndim > 1 or x.numel() > MAX_VECTOR:
            raise NeedsTorch
        if x.ndim == 0:
            return float(x)     # a 0-d operand never lowers a float64 result's precision
        if x.dtype != torch.float64:
            raise NeedsTorch    # torch computes with a float32 (or integer) vector in its dtype
        return DualVector([Dual(v, _EMPTY) for v in x.tolist()])
    if isinstance(x, numbers.Real):
        return float(x)
    raise NeedsTorch


def _s_generic(name, self, other, reverse=False):
    """``self <op> other`` (or ``other <op> self``) for any operand: a vector operand
    makes the result a vector."""
    scalar_op = _SCALAR_OPS[name]
    other = lift(other)
    if type(other) is DualVector:
        if reverse:
            return DualVector([scalar_op(o, self) for o in other._items])
        return DualVector([scalar_op(self, o) for o in other._items])
    return scalar_op(other, self) if reverse else scalar_op(self, other)


def _as_dual(x):
    return x if type(x) is Dual else Dual(x, _EMPTY)


def _s_add(a, b):
    a, b = _as_dual(a), _as_dual(b)
    return _dual(a.v + b.v, _add(a.d, b.d))


def _s_sub(a, b):
    a, b = _as_dual(a), _as_dual(b)
    return _dual(a.v - b.v, _add(a.d, b.d, -1.0))


def _s_mul(a, b):
    a, b = _as_dual(a), _as_dual(b)
    return _dual(a.v * b.v, _axpy(a.d, b.v, b.d, a.v))


def _s_div(a, b):
    a, b = _as_dual(a), _as_dual(b)
    v = _guard(float.__truediv__, a.v, b.v)
    inv = _guard(float.__truediv__, 1.0, b.v)
    return _dual(v, _axpy(a.d, inv, b.d, -v * inv))


def _s_pow(a, b):
    a, b = _as_dual(a), _as_dual(b)
    v = _guard(pow, a.v, b.v)
    if b.d:                 # d/db a**b = a**b log a
        d_exp = _scale(b.d, v * _guard(math.log, a.v)) if v else _scale(b.d, 0.0)
    else:
        d_exp = _EMPTY
    if not a.d:
        return _dual(v, d_exp)
    if b.v == 0.0:
        d_base = _EMPTY      # torch: the derivative of x**0 is 0, even at x = 0
    elif b.v == 2.0:
        d_base = _scale(a.d, 2.0 * a.v)
    else:
        d_base = _scale(a.d, b.v * _guard(pow, a.v, b.v - 1.0))
    return _dual(v, _add(d_base, d_exp))


_SCALAR_OPS = {"add": _s_add, "sub": _s_sub, "mul": _s_mul, "truediv": _s_div, "pow": _s_pow}


def _compare(op):
    def cmp(self, other):
        other = lift(other)
        if type(other) is DualVector:
            raise NeedsTorch        # a bool tensor: let torch handle it
        return op(self.v, other.v if type(other) is Dual else other)

    return cmp


def _unsupported(self, *args, **kwargs):
    raise NeedsTorch


class _TensorLike:
    """What a Dual and a DualVector share: any tensor attribute or operator they do not
    model raises NeedsTorch, never the AttributeError or TypeError that a transform's
    own ``try``/``except`` could catch and carry on from."""

    __slots__ = ()

    def __getattr__(self, name):
        # protocol probes (copy, pickle, NumPy) and unset slots get the usual answer
        if name.startswith("__") or name in ("v", "d", "_items"):
            raise AttributeError(name)
        raise NeedsTorch

    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __divmod__ = __rdivmod__ = _unsupported
    __matmul__ = __rmatmul__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _unsupported
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __invert__ = _unsupported
    __round__ = __trunc__ = __floor__ = __ceil__ = __index__ = __complex__ = _unsupported
    __contains__ = __setitem__ = __delitem__ = _unsupported
    __array__ = _unsupported     # NumPy: torch says it cannot carry the derivative
    # In-place operators change a tensor in place, so its aliases and views see the change;
    # without these, Python would rebind the name to a new value instead: hand it to torch.
    __iadd__ = __isub__ = __imul__ = __itruediv__ = __ifloordiv__ = __imod__ = __ipow__ = _unsupported
    __imatmul__ = __iand__ = __ior__ = __ixor__ = __ilshift__ = __irshift__ = _unsupported

    # what both are, as a tensor: float64, tracked, immutable
    dtype = torch.float64
    requires_grad = True

    def clone(self):
        return self

    def reshape(self, *shape):
        return _reshape(self, shape)

    view = reshape

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        impl = _FUNCTIONS.get(func)         # (the table is built below, from the functions here)
        if impl is None:
            raise NeedsTorch
        return impl(*args, **kwargs) if kwargs else impl(*args)


class Dual(_TensorLike):
    """A real number with its partial derivatives with respect to a transform's inputs.

    ``v``: the value (float); ``d``: ``{input coordinate id: ∂v/∂input}``. A key may
    also be an :class:`IdRange`, standing for that derivative with respect to each id
    in its range (added to the id's own entry, if any): a simplex read's last weight,
    ``1 - sum`` of the free ones, is ``{IdRange(their ids): -1.0}``, so arithmetic
    with it costs the same for any number of weights. Derivative dicts are only
    ever scaled and added, which treats an IdRange key as one more coordinate; the
    Jacobian (:mod:`.jacobian`) expands it."""

    __slots__ = ("v", "d")

    # a 0-d tensor has no length, items or iteration: torch's errors, via the torch path
    __len__ = __getitem__ = __iter__ = _unsupported

    def __init__(self, v, d):
        self.v, self.d = v, d

    # The hot cases -- a Dual with a Dual or a Python number -- without the generic
    # dispatch above (the transform's arithmetic is most of a move's float-path time).
    def __add__(self, other):
        t = type(other)
        if t is Dual:
            return _dual(self.v + other.v, _add(self.d, other.d))
        if t is float or t is int:
            return _dual(self.v + other, self.d)
        return _s_generic("add", self, other)

    def __radd__(self, other):
        t = type(other)
        if t is float or t is int:
            return _dual(other + self.v, self.d)
        return _s_generic("add", self, other, True)

    def __sub__(self, other):
        t = type(other)
        if t is Dual:
            return _dual(self.v - other.v, _add(self.d, other.d, -1.0))
        if t is float or t is int:
            return _dual(self.v - other, self.d)
        return _s_generic("sub", self, other)

    def __rsub__(self, other):
        t = type(other)
        if t is float or t is int:
            return _dual(other - self.v, _scale(self.d, -1.0))
        return _s_generic("sub", self, other, True)

    def __mul__(self, other):
        t = type(other)
        if t is Dual:
            return _dual(self.v * other.v, _axpy(self.d, other.v, other.d, self.v))
        if t is float or t is int:
            return _dual(self.v * other, _scale(self.d, float(other)))
        return _s_generic("mul", self, other)

    def __rmul__(self, other):
        t = type(other)
        if t is float or t is int:
            return _dual(other * self.v, _scale(self.d, float(other)))
        return _s_generic("mul", self, other, True)

    def __truediv__(self, other):
        t = type(other)
        if t is Dual:
            b = other.v
            if b != 0.0:        # (zero: the generic path hands it to torch)
                v = self.v / b
                return _dual(v, _axpy(self.d, 1.0 / b, other.d, -v / b))
        elif (t is float or t is int) and other != 0:
            return _dual(self.v / other, _scale(self.d, 1.0 / other))
        return _s_generic("truediv", self, other)

    def __rtruediv__(self, other):
        t = type(other)
        if (t is float or t is int) and self.v != 0.0:
            v = other / self.v
            return _dual(v, _scale(self.d, -v / self.v))
        return _s_generic("truediv", self, other, True)

    def __pow__(self, other):
        t = type(other)
        if t is float or t is int:
            if other == 2:
                return _dual(_guard(pow, self.v, 2.0), _scale(self.d, 2.0 * self.v))
            return _s_pow(self, float(other))
        return _s_generic("pow", self, other)

    def __rpow__(self, other):
        return _s_generic("pow", self, other, True)

    def __neg__(self):
        return _dual(-self.v, _scale(self.d, -1.0))

    def __pos__(self):
        return self

    def __abs__(self):
        return _unary_abs(self)

    __lt__ = _compare(float.__lt__)
    __le__ = _compare(float.__le__)
    __gt__ = _compare(float.__gt__)
    __ge__ = _compare(float.__ge__)
    __eq__ = _compare(float.__eq__)
    __ne__ = _compare(float.__ne__)
    __hash__ = object.__hash__

    def __bool__(self):
        return self.v != 0.0

    def __float__(self):
        return self.v          # like float(tensor): the value, without derivative

    def __int__(self):
        return int(self.v)

    def item(self):
        return self.v

    def tolist(self):
        return self.v

    def detach(self):
        return torch.tensor(self.v, dtype=torch.float64)

    # -- tensor-like attributes -------------------------------------------
    shape = torch.Size([])
    ndim = 0

    def dim(self):
        return 0

    def numel(self):
        return 1

    def size(self, dim=None):
        if dim is not None:
            raise NeedsTorch
        return torch.Size([])

    def flatten(self):
        return DualVector([self])

    def unsqueeze(self, dim):
        if dim not in (0, -1):
            raise NeedsTorch
        return DualVector([self])

    def expand(self, *shape):
        shape = _shape_arg(shape)
        if len(shape) != 1 or shape[0] < 0 or shape[0] > MAX_VECTOR:
            raise NeedsTorch
        return DualVector([self] * shape[0])

    def sum(self, *args, **kwargs):
        if args or kwargs:
            raise NeedsTorch
        return self

    def __repr__(self):
        return f"Dual({self.v!r}, {self.d!r})"


_new_object = object.__new__


def _dual(v, d):
    """``Dual(v, d)`` without a call of ``__init__`` (every arithmetic operation makes one)."""
    x = _new_object(Dual)
    x.v = v
    x.d = d
    return x


# ---------------------------------------------------------------------------
# vectors
# ---------------------------------------------------------------------------
def broadcast_pairs(a, b, reverse, mismatch):
    """Element pairs of two vectors (``(b_i, a_i)`` if ``reverse``), a length-1 one repeated
    (NumPy's broadcasting of vectors); raises ``mismatch()`` for any other pair of lengths (made
    only then: the symbolic tracer notes every refusal it makes)."""
    if len(a) != len(b):
        if len(b) == 1:
            b = b * len(a)
        elif len(a) == 1:
            a = a * len(b)
        else:
            raise mismatch()
    return zip(b, a) if reverse else zip(a, b)


class DualVector(_TensorLike):
    """A short 1-d vector of :class:`Dual` entries (read from a vector choice, or built
    by ``torch.cat``/``torch.stack``/``reshape``)."""

    __slots__ = ("_items",)

    def __init__(self, items):
        self._items = items

    @property
    def items(self):
        return self._items

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def __getitem__(self, index):
        items = self._items
        t = type(index)
        if t is tuple:          # one index per dimension: a 1-d vector takes one
            if len(index) != 1:
                raise NeedsTorch
            index = index[0]
            t = type(index)
        if t is int:
            return items[index]
        if t is slice:
            return DualVector(items[index])
        if isinstance(index, torch.Tensor):
            if index.dtype == torch.bool or index.is_floating_point() or index.is_complex() or index.ndim > 1:
                raise NeedsTorch    # masks and 0-d bools add or select dimensions: torch's rules
            index = index.tolist() if index.ndim else int(index)
            if type(index) is int:
                return items[index]
        if type(index) is list and all(type(i) is int for i in index):   # (or a tensor's, above)
            return DualVector([items[i] for i in index])
        if isinstance(index, numbers.Integral) and not isinstance(index, bool):
            return items[int(index)]
        raise NeedsTorch

    def _map2(self, other, op, reverse=False):
        other = lift(other)
        if type(other) is DualVector:
            pairs = broadcast_pairs(self._items, other._items, reverse, NeedsTorch)
        else:
            pairs = ((other, x) for x in self._items) if reverse else ((x, other) for x in self._items)
        return DualVector([op(x, y) for x, y in pairs])

    def __add__(self, o): return self._map2(o, _s_add)
    def __radd__(self, o): return self._map2(o, _s_add, True)
    def __sub__(self, o): return self._map2(o, _s_sub)
    def __rsub__(self, o): return self._map2(o, _s_sub, True)
    def __mul__(self, o): return self._map2(o, _s_mul)
    def __rmul__(self, o): return self._map2(o, _s_mul, True)
    def __truediv__(self, o): return self._map2(o, _s_div)
    def __rtruediv__(self, o): return self._map2(o, _s_div, True)
    def __pow__(self, o): return self._map2(o, _s_pow)
    def __rpow__(self, o): return self._map2(o, _s_pow, True)

    def __matmul__(self, other):
        return _matmul(self, other)

    def __rmatmul__(self, other):
        return _matmul(other, self)

    def __neg__(self):
        return DualVector([-x for x in self._items])

    def __pos__(self):
        return self

    def __abs__(self):
        return DualVector([_unary_abs(x) for x in self._items])

    def _no_compare(self, other):
        raise NeedsTorch

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _no_compare
    __hash__ = object.__hash__

    def __bool__(self):
        if len(self._items) != 1:
            raise NeedsTorch    # torch raises "ambiguous"; let it say so
        return bool(self._items[0])

    def __float__(self):
        if len(self._items) != 1:
            raise NeedsTorch
        return self._items[0].v

    def item(self):
        return self.__float__()

    def tolist(self):
        return [x.v for x in self._items]

    def detach(self):
        return torch.tensor(self.tolist(), dtype=torch.float64)

    @property
    def shape(self):
        return torch.Size([len(self._items)])

    ndim = 1

    def dim(self):
        return 1

    def numel(self):
        return len(self._items)

    def size(self, dim=None):
        if dim is None:
            return self.shape
        if dim in (0, -1):
            return len(self._items)
        raise NeedsTorch

    def flatten(self):
        return self

    def sum(self, dim=None, keepdim=False):
        if dim not in (None, 0, -1):
            raise NeedsTorch
        total = _sum(self._items)
        return DualVector([total]) if keepdim else total

    def mean(self, dim=None):
        if dim not in (None, 0, -1) or not self._items:
            raise NeedsTorch
        return _s_div(_sum(self._items), float(len(self._items)))

    def prod(self, dim=None):
        if dim not in (None, 0, -1):
            raise NeedsTorch
        out = Dual(1.0, _EMPTY)
        for x in self._items:
            out = _s_mul(out, x)
        return out

    def __repr__(self):
        return f"DualVector({[x.v for x in self._items]!r})"


def _sum(items):
    if not items:
        return Dual(0.0, _EMPTY)
    out = items[0]
    for x in items[1:]:
        out = _s_add(out, x)
    return out


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    for s in shape:             # (a loop: all() of a generator costs more, per reshape)
        if type(s) is not int:
            raise NeedsTorch
    return shape


def _reshape(x, shape):
    items = [x] if type(x) is Dual else x._items
    if len(shape) == 1 and type(shape[0]) is int and (shape[0] == -1 or shape[0] == len(items)):
        return DualVector(list(items))      # (the common case, as below, without _shape_arg)
    shape = _shape_arg(shape)
    if shape == ():
        if len(items) != 1:
            raise NeedsTorch
        return items[0]
    if len(shape) == 1 and shape[0] in (-1, len(items)):
        return DualVector(list(items))
    raise NeedsTorch


# ---------------------------------------------------------------------------
# elementwise functions
# ---------------------------------------------------------------------------
def _unary(value_fn, slope_fn):
    """An elementwise function from its float form and its derivative ``slope(x, fx)``."""

    def scalar(x):
        x = _as_dual(lift(x)) if type(x) is not Dual else x
        fx = _guard(value_fn, x.v)
        if not x.d:
            return _dual(fx, _EMPTY)
        return _dual(fx, _scale(x.d, _guard(slope_fn, x.v, fx)))

    def apply(x, *rest, **kwargs):
        if rest or kwargs:
            raise NeedsTorch
        if type(x) is Dual:
            return scalar(x)
        x = lift(x)
        if type(x) is DualVector:
            return DualVector([scalar(e) for e in x._items])
        return scalar(x)

    return apply


def _sign(v):
    return 1.0 if v > 0 else (-1.0 if v < 0 else 0.0)


def _unary_abs(x):
    return Dual(abs(x.v), _scale(x.d, _sign(x.v)) if x.d else _EMPTY)


def _sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))


_ELEMENTWISE = {
    "sqrt": _unary(math.sqrt, lambda x, fx: 0.5 / fx),
    "rsqrt": _unary(lambda x: 1.0 / math.sqrt(x), lambda x, fx: -0.5 * fx / x),
    "exp": _unary(math.exp, lambda x, fx: fx),
    "expm1": _unary(math.expm1, lambda x, fx: fx + 1.0),
    "log": _unary(math.log, lambda x, fx: 1.0 / x),
    "log1p": _unary(math.log1p, lambda x, fx: 1.0 / (1.0 + x)),
    "log2": _unary(math.log2, lambda x, fx: 1.0 / (x * math.log(2.0))),
    "log10": _unary(math.log10, lambda x, fx: 1.0 / (x * math.log(10.0))),
    "sin": _unary(math.sin, lambda x, fx: math.cos(x)),
    "cos": _unary(math.cos, lambda x, fx: -math.sin(x)),
    "tan": _unary(math.tan, lambda x, fx: 1.0 + fx * fx),
    "tanh": _unary(math.tanh, lambda x, fx: 1.0 - fx * fx),
    "sinh": _unary(math.sinh, lambda x, fx: math.cosh(x)),
    "cosh": _unary(math.cosh, lambda x, fx: math.sinh(x)),
    "atan": _unary(math.atan, lambda x, fx: 1.0 / (1.0 + x * x)),
    "asinh": _unary(math.asinh, lambda x, fx: 1.0 / math.sqrt(x * x + 1.0)),
    "sigmoid": _unary(_sigmoid, lambda x, fx: fx * (1.0 - fx)),
    "square": _unary(lambda x: x * x, lambda x, fx: 2.0 * x),
    "reciprocal": _unary(lambda x: 1.0 / x, lambda x, fx: -fx * fx),
    "abs": _unary(abs, lambda x, fx: _sign(x)),
    "neg": _unary(lambda x: -x, lambda x, fx: -1.0),
}
_ELEMENTWISE["negative"] = _ELEMENTWISE["neg"]
_ELEMENTWISE["expit"] = _ELEMENTWISE["sigmoid"]
_ELEMENTWISE["absolute"] = _ELEMENTWISE["abs"]

for _name in ("sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tanh", "sigmoid", "square",
              "reciprocal", "rsqrt", "log2", "log10", "tan", "sinh", "cosh", "atan", "asinh"):
    setattr(Dual, _name, _ELEMENTWISE[_name])
    setattr(DualVector, _name, _ELEMENTWISE[_name])
Dual.abs = DualVector.abs = _ELEMENTWISE["abs"]
Dual.neg = DualVector.neg = _ELEMENTWISE["neg"]


def _binary_fn(name, reverse=False):
    method = "__r%s__" % name if reverse else "__%s__" % name

    def apply(a, b, **kwargs):
        if kwargs:
            raise NeedsTorch        # alpha=, out=, rounding_mode=: torch's business
        a, b = lift(a), lift(b)
        if type(a) is float:
            a = Dual(a, _EMPTY)
        return getattr(a, method)(b)

    return apply


def _cat(tensors, dim=0, **kwargs):
    if kwargs or dim not in (0, -1):
        raise NeedsTorch
    items = []
    for t in tensors:
        if type(t) is not DualVector:
            t = lift(t)
            if type(t) is not DualVector:
                raise NeedsTorch    # torch.cat of a 0-d tensor is an error; let torch say so
        items.extend(t._items)
    return DualVector(items)


def _stack(tensors, dim=0, **kwargs):
    if kwargs or dim not in (0, -1):
        raise NeedsTorch
    items = []
    for t in tensors:
        t = lift(t)
        if type(t) is DualVector:
            raise NeedsTorch        # a matrix
        items.append(_as_dual(t))
    return DualVector(items)


def _sum_fn(x, dim=None, keepdim=False, **kwargs):
    if kwargs:
        raise NeedsTorch
    x = lift(x)
    if type(x) is DualVector:
        return x.sum(dim, keepdim)
    if dim is not None or keepdim:
        raise NeedsTorch
    return _as_dual(x)


#: A constant matrix in ``A @ v`` has at most this many entries on the float path.
MAX_MATRIX = 1024


def _constant_matrix(a):
    """Rows of a constant 2-d float64 tensor, or NeedsTorch."""
    if not isinstance(a, torch.Tensor) or a.ndim != 2 or a.requires_grad or a.dtype != torch.float64 \
            or a.numel() > MAX_MATRIX:
        raise NeedsTorch
    return a.tolist()


def _linear(rows, items):
    """``[sum_j rows[i][j] * items[j]]``: constant coefficients times Duals, one Dual per row."""
    out = []
    for row in rows:
        v, d = 0.0, {}
        for c, x in zip(row, items):
            v += c * x.v
            for k, g in x.d.items():
                d[k] = d.get(k, 0.0) + c * g
        out.append(Dual(v, d))
    return out


def _matmul(a, b, **kwargs):
    """``a @ b`` with a vector operand: a dot product, a constant matrix times a vector
    or a vector times a constant matrix (torch.matmul's 1-d and 2-d cases)."""
    if kwargs:
        raise NeedsTorch
    if isinstance(a, torch.Tensor) and a.ndim == 2:
        x = lift(b)
        rows = _constant_matrix(a)
        if type(x) is not DualVector or len(rows[0]) != len(x):
            raise NeedsTorch        # a shape error: torch's message
        return DualVector(_linear(rows, x._items))
    if isinstance(b, torch.Tensor) and b.ndim == 2:
        x = lift(a)
        rows = _constant_matrix(b)
        if type(x) is not DualVector or len(rows) != len(x):
            raise NeedsTorch
        return DualVector(_linear([list(col) for col in zip(*rows)], x._items))
    x, y = lift(a), lift(b)
    if type(x) is not DualVector or type(y) is not DualVector or len(x) != len(y) or not len(x):
        raise NeedsTorch            # 0-d operands and mismatched lengths are torch errors
    return _sum([_s_mul(p, q) for p, q in zip(x._items, y._items)])


def _method(name):
    def call(self, *args, **kwargs):
        return getattr(lift(self), name)(*args, **kwargs)

    return call


_BY_NAME = dict(_ELEMENTWISE)
_BY_NAME.update({
    "add": _binary_fn("add"), "__add__": _binary_fn("add"), "__radd__": _binary_fn("add", True),
    "sub": _binary_fn("sub"), "subtract": _binary_fn("sub"), "__sub__": _binary_fn("sub"),
    "__rsub__": _binary_fn("sub", True),
    "mul": _binary_fn("mul"), "multiply": _binary_fn("mul"), "__mul__": _binary_fn("mul"),
    "__rmul__": _binary_fn("mul", True),
    "div": _binary_fn("truediv"), "divide": _binary_fn("truediv"), "true_divide": _binary_fn("truediv"),
    "__truediv__": _binary_fn("truediv"), "__rtruediv__": _binary_fn("truediv", True),
    "__rdiv__": _binary_fn("truediv", True),
    "pow": _binary_fn("pow"), "__pow__": _binary_fn("pow"), "__rpow__": _binary_fn("pow", True),
    "cat": _cat, "concat": _cat, "concatenate": _cat, "stack": _stack, "sum": _sum_fn,
    "reshape": _method("reshape"), "flatten": _method("flatten"),
    "matmul": _matmul, "__matmul__": _matmul, "__rmatmul__": lambda a, b: _matmul(b, a),
    "mv": _matmul, "dot": _matmul,
})


def _build_table():
    """Map torch's function objects (``torch.sqrt``, ``Tensor.sqrt``, ``torch.special.expit``,
    the operator methods a tensor hands over) to the implementations above."""
    table = {}
    spaces = (torch, torch.Tensor, torch._C.TensorBase, torch.special)
    for name, impl in _BY_NAME.items():
        for space in spaces:
            fn = getattr(space, name, None)
            if fn is not None:
                table[fn] = impl
    return table


_FUNCTIONS = _build_table()

