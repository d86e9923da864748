"""Symbolic tracing of a transform into generated Python, generic in its discrete values.

A research prototype (not engine code). The transform runs once per *branch key* on
symbolic proxies:

* a discrete read gives a :class:`SymInt` (the concrete value and a linear form over
  the generated code's variables); ``==``/``<``/``bool()`` on it record a *guard*
  (the predicate and its outcome) unless the outcome is decided by the linear forms
  alone; ``+``/``-``/``*`` by an int build linear forms; ``__index__`` (``range(k)``,
  list indexing) *specialises*: it records the guard ``form == value``;
* a continuous scalar read gives a :class:`TF`: the concrete float, the expression
  (a variable of the generated code) and the tangent dict keyed like dual.py's, by
  *symbolic* coordinates ``("c", read number, linear form of the index)`` and a
  simplex read's ``("R", read number)`` (dual.py's IdRange). Every operation follows
  dual.py's rule for that operation (``_axpy``/``_add``/``_scale``, sqrt's
  ``0.5 / fx``, the generic ``_s_div`` of a vector's elementwise division...) and
  emits one statement per value and per tangent entry, so the generated code does
  the float backend's arithmetic operation for operation: bit-identical values;
* a continuous vector read gives an :class:`SVec`: segments that are runs of the
  read's free coordinates with symbolic bounds (``W0[a:b]``) or single elements.
  Indexing, slicing, ``torch.cat`` and ``reshape`` keep the segments symbolic
  (guards on the bounds); any other vector operation specialises the vector's
  bounds (guards ``bound == value``) and proceeds element by element.

At the end, the accounting that ``apply._account`` does for every move is done once
per key: which reads are consumed by copies, the pass-through runs of vector outputs,
the kept rows and columns of the reduced matrix in the engine's order (the new and
old traces' order, taken from the concrete traces at trace time), and each matrix
entry as an expression. The generated function of a transform is one trie of all
keys seen: statements, guards as if/else (an unseen outcome returns None, "miss"),
one return per key. See README.md for what is and is not checked.
"""

from __future__ import annotations

import math

import torch
from numpy import array as _np_array

from imcmc_lab.core.values import float64_vector
from imcmc_lab.modeling.runtime import OwnedChoices
from imcmc_lab.transform.jacobian import _block_logdets, logabsdet
from imcmc_lab.transform.language import AddressRef, continuous, discrete

MAX_VECTOR = 64


class Unsupported(BaseException):
    """The tracer cannot follow the transform here (the engine runs it). A BaseException, as
    dual.NeedsTorch: a transform's own ``except Exception`` must not swallow it."""


# ---------------------------------------------------------------------------
# linear forms over the generated code's integer variables
# ---------------------------------------------------------------------------
class Lin:
    __slots__ = ("terms", "c")

    def __init__(self, terms, c):
        self.terms = tuple(sorted((v, a) for v, a in terms if a))   # ((var, coef), ...)
        self.c = c

    @staticmethod
    def of(x):
        if type(x) is Lin:
            return x
        if isinstance(x, SymInt):
            return x.lin
        return Lin((), int(x))

    def __add__(self, o):
        o = Lin.of(o)
        d = dict(self.terms)
        for v, a in o.terms:
            d[v] = d.get(v, 0) + a
        return Lin(d.items(), self.c + o.c)

    def scale(self, a):
        return Lin(((v, a * b) for v, b in self.terms), self.c * a)

    def __sub__(self, o):
        return self + Lin.of(o).scale(-1)

    def key(self):
        return (self.terms, self.c)

    def const(self):
        return self.c if not self.terms else None

    def code(self):
        parts = []
        for v, a in self.terms:
            parts.append(v if a == 1 else f"-{v}" if a == -1 else f"{a} * {v}")
        if self.c or not parts:
            parts.append(str(self.c))
        s = " + ".join(parts).replace("+ -", "- ")
        return s if len(parts) == 1 else f"({s})"


_OPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_PY = {"lt": int.__lt__, "le": int.__le__, "gt": int.__gt__, "ge": int.__ge__, "eq": int.__eq__,
       "ne": int.__ne__}


class SymInt:
    """A discrete value: the concrete ``value`` and its linear form ``lin``."""

    __slots__ = ("value", "lin")

    def __init__(self, value, lin):
        self.value, self.lin = value, lin

    def _arith(self, o, sign=1):
        if isinstance(o, SymInt):
            return SymInt(self.value + sign * o.value, self.lin + o.lin.scale(sign))
        if type(o) in (int, bool):
            return SymInt(self.value + sign * o, self.lin + Lin((), sign * o))
        return NotImplemented

    def __add__(self, o): return self._arith(o)
    __radd__ = __add__
    def __sub__(self, o): return self._arith(o, -1)

    def __rsub__(self, o):
        if type(o) in (int, bool):
            return SymInt(o - self.value, Lin((), o) - self.lin)
        return NotImplemented

    def __neg__(self):
        return SymInt(-self.value, self.lin.scale(-1))

    def __mul__(self, o):
        if type(o) is int:
            return SymInt(self.value * o, self.lin.scale(o))
        if isinstance(o, SymInt) and o.lin.const() is not None:
            return self * o.lin.c
        if isinstance(o, SymInt) and self.lin.const() is not None:
            return o * self.lin.c
        return NotImplemented
    __rmul__ = __mul__

    def _cmp(self, o, op):
        if not isinstance(o, SymInt) and type(o) not in (int, bool):
            return NotImplemented
        ov = o.value if isinstance(o, SymInt) else o
        return T().decide(self.lin - Lin.of(o), op, _PY[op](int(self.value), int(ov)))

    def __lt__(self, o): return self._cmp(o, "lt")
    def __le__(self, o): return self._cmp(o, "le")
    def __gt__(self, o): return self._cmp(o, "gt")
    def __ge__(self, o): return self._cmp(o, "ge")
    def __eq__(self, o): return self._cmp(o, "eq")
    def __ne__(self, o): return self._cmp(o, "ne")

    def __bool__(self):
        return T().decide(self.lin, "ne", bool(self.value))

    def __index__(self):
        return T().concrete(self)
    __int__ = __index__

    def __hash__(self):
        return hash(T().concrete(self))

    def __repr__(self):
        return f"SymInt({self.value}, {self.lin.code()})"


def conc(x):
    return x.value if isinstance(x, SymInt) else x


# ---------------------------------------------------------------------------
# expressions of the generated code: (value, code, literal?)
# ---------------------------------------------------------------------------
class Ex:
    __slots__ = ("v", "code", "lit")

    def __init__(self, v, code, lit):
        self.v, self.code, self.lit = v, code, lit


def lit(v):
    v = float(v)
    return Ex(v, repr(v), True)


ONE, MINUS_ONE = lit(1.0), lit(-1.0)


def bin_ex(a, b, op):
    """``a op b`` as the engine computes it on floats; folded when both are literals, and
    ``x * 1.0`` is ``x`` (exact in IEEE arithmetic)."""
    v = _FLOAT_OPS[op](a.v, b.v)
    if a.lit and b.lit:
        return Ex(v, repr(v), True) if math.isfinite(v) else T().stmt(f"{a.code} {op} {b.code}", v, ())
    if op == "*":
        if b.lit and b.v == 1.0:
            return a
        if a.lit and a.v == 1.0:
            return b
    deps = tuple(x.code for x in (a, b) if not x.lit)
    return T().stmt(f"{a.code} {op} {b.code}", v, deps)


def neg_ex(a):
    if a.lit:
        return Ex(-a.v, repr(-a.v), True)
    return T().stmt(f"-{a.code}", -a.v, (a.code,))


_FLOAT_OPS = {"*": float.__mul__, "+": float.__add__, "-": float.__sub__, "/": float.__truediv__}


def _mul_ex(c, g):
    if c.lit and c.v == -1.0:
        return neg_ex(g)
    if g.lit and g.v == -1.0:
        return neg_ex(c)
    return bin_ex(c, g, "*")


# tangent dicts, dual.py's rules per key (keys compared symbolically: T().same_key)
def d_scale(d, c):
    return {k: _mul_ex(c, g) for k, g in d.items()} if d else {}


def d_axpy(d1, c1, d2, c2):
    if not d2:
        return d_scale(d1, c1)
    if not d1:
        return d_scale(d2, c2)
    out = {k: _mul_ex(c1, g) for k, g in d1.items()}
    for k, g in d2.items():
        k0 = T().find_key(out, k)
        if k0 is not None:
            out[k0] = bin_ex(out[k0], _mul_ex(c2, g), "+")
        else:
            out[k] = _mul_ex(c2, g)
    return out


def d_add(d1, d2, sign=1.0):
    if not d2:
        return d1
    if not d1:
        return d2 if sign == 1.0 else d_scale(d2, lit(sign))
    out = dict(d1)
    for k, g in d2.items():
        k0 = T().find_key(out, k)
        if k0 is None:
            out[k] = g if sign == 1.0 else neg_ex(g)
        else:
            out[k0] = bin_ex(out[k0], g, "+" if sign == 1.0 else "-")
    return out


# ---------------------------------------------------------------------------
# traced floats
# ---------------------------------------------------------------------------
def as_tf(x):
    if type(x) is TF:
        return x
    if isinstance(x, SymInt):
        x = T().concrete(x)
    if type(x) in (int, float, bool):
        return TF(lit(float(x)), {})
    if isinstance(x, torch.Tensor) and x.ndim == 0 and not x.requires_grad:
        return TF(lit(float(x)), {})
    raise Unsupported(f"operand {type(x).__name__}")


def _num(x):
    """A Python number operand (dual.py's fast paths), or None."""
    if type(x) in (int, float):
        return x
    return None


def _refuse(self, *args, **kwargs):
    raise Unsupported("an operation the tracer does not model (in-place, attribute...)")


class _Torchy:
    # in-place operators: the engine hands them to autograd (aliasing); so does the tracer
    __iadd__ = __isub__ = __imul__ = __itruediv__ = __ipow__ = __setitem__ = _refuse

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise Unsupported(f"attribute {name}")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        impl = _TORCH.get(func)
        if impl is None or kwargs:
            raise Unsupported(f"torch function {getattr(func, '__name__', func)}")
        return impl(*args)


class TF(_Torchy):
    """A traced float: ``x`` (an :class:`Ex`) and ``d`` (tangent dict of Ex)."""

    __slots__ = ("x", "d")

    def __init__(self, x, d):
        self.x, self.d = x, d

    @property
    def v(self):
        return self.x.v

    # dual.py's fast paths (Dual with Dual or a Python number)
    def __add__(self, o):
        if type(o) is TF:
            return TF(bin_ex(self.x, o.x, "+"), d_add(self.d, o.d))
        if _num(o) is not None:
            return TF(bin_ex(self.x, lit(o), "+"), self.d)
        return _generic("add", self, o)

    def __radd__(self, o):
        if _num(o) is not None:
            return TF(bin_ex(lit(o), self.x, "+"), self.d)
        return _generic("add", self, o, True)

    def __sub__(self, o):
        if type(o) is TF:
            return TF(bin_ex(self.x, o.x, "-"), d_add(self.d, o.d, -1.0))
        if _num(o) is not None:
            return TF(bin_ex(self.x, lit(o), "-"), self.d)
        return _generic("sub", self, o)

    def __rsub__(self, o):
        if _num(o) is not None:
            return TF(bin_ex(lit(o), self.x, "-"), d_scale(self.d, MINUS_ONE))
        return _generic("sub", self, o, True)

    def __mul__(self, o):
        if type(o) is TF:
            return TF(bin_ex(self.x, o.x, "*"), d_axpy(self.d, o.x, o.d, self.x))
        if _num(o) is not None:
            return TF(bin_ex(self.x, lit(o), "*"), d_scale(self.d, lit(float(o))))
        return _generic("mul", self, o)

    def __rmul__(self, o):
        if _num(o) is not None:
            return TF(bin_ex(lit(o), self.x, "*"), d_scale(self.d, lit(float(o))))
        return _generic("mul", self, o, True)

    def __truediv__(self, o):
        if type(o) is TF:
            if o.v != 0.0:
                v = bin_ex(self.x, o.x, "/")
                T().guard(f"{o.x.code} != 0.0", True, (o.x,))
                inv = bin_ex(ONE, o.x, "/")
                c2 = bin_ex(neg_ex(v), o.x, "/")
                return TF(v, d_axpy(self.d, inv, o.d, c2))
        elif _num(o) is not None and o != 0:
            return TF(bin_ex(self.x, lit(o), "/"), d_scale(self.d, lit(1.0 / o)))
        return _generic("truediv", self, o)

    def __rtruediv__(self, o):
        if _num(o) is not None and self.v != 0.0:
            T().guard(f"{self.x.code} != 0.0", True, (self.x,))
            v = bin_ex(lit(o), self.x, "/")
            return TF(v, d_scale(self.d, bin_ex(neg_ex(v), self.x, "/")))
        return _generic("truediv", self, o, True)

    def __pow__(self, o):
        if _num(o) == 2:
            v = T().stmt(f"pow({self.x.code}, 2.0)", pow(self.v, 2.0), (self.x.code,)) if not self.x.lit \
                else lit(pow(self.v, 2.0))
            return TF(v, d_scale(self.d, bin_ex(lit(2.0), self.x, "*")))
        raise Unsupported("** other than 2")

    def __neg__(self):
        return TF(neg_ex(self.x), d_scale(self.d, MINUS_ONE))

    def __pos__(self):
        return self

    def _cmp(self, o, op):
        o = as_tf(o)
        out = _FCMP[op](self.v, o.v)
        T().guard(f"{self.x.code} {_OPS[op]} {o.x.code}", out, (self.x, o.x))
        return out

    def __lt__(self, o): return self._cmp(o, "lt")
    def __le__(self, o): return self._cmp(o, "le")
    def __gt__(self, o): return self._cmp(o, "gt")
    def __ge__(self, o): return self._cmp(o, "ge")

    def __bool__(self):
        out = self.v != 0.0
        T().guard(f"{self.x.code} != 0.0", out, (self.x,))
        return out

    def __float__(self):
        raise Unsupported("float() of a tracked value (its derivative is lost)")
    item = __float__

    def reshape(self, *shape):
        if shape in ((1,), (-1,), ((1,),), ((-1,),)):
            return SVec([("e", self)])
        raise Unsupported("reshape")

    def sum(self):
        return self

    def clone(self):
        return self

    __hash__ = object.__hash__


_FCMP = {"lt": float.__lt__, "le": float.__le__, "gt": float.__gt__, "ge": float.__ge__}


# dual.py's generic scalar ops (_s_add, _s_sub, _s_mul, _s_div): used by vector elementwise ops
def s_op(name, a, b):
    a, b = as_tf(a), as_tf(b)
    if name == "add":
        return TF(bin_ex(a.x, b.x, "+"), d_add(a.d, b.d))
    if name == "sub":
        return TF(bin_ex(a.x, b.x, "-"), d_add(a.d, b.d, -1.0))
    if name == "mul":
        return TF(bin_ex(a.x, b.x, "*"), d_axpy(a.d, b.x, b.d, a.x))
    if name == "truediv":
        if b.v == 0.0:
            raise Unsupported("division by zero (the engine re-runs on torch)")
        if not b.x.lit:
            T().guard(f"{b.x.code} != 0.0", True, (b.x,))
        v = bin_ex(a.x, b.x, "/")
        inv = bin_ex(ONE, b.x, "/")
        return TF(v, d_axpy(a.d, inv, b.d, bin_ex(neg_ex(v), inv, "*")))
    raise Unsupported(name)


def _generic(name, self, other, reverse=False):
    if isinstance(other, SVec):
        items = other.elements()
        return SVec([("e", s_op(name, o, self) if reverse else s_op(name, self, o)) for o in items])
    return s_op(name, other, self) if reverse else s_op(name, self, other)


def unary(name, value_fn, slope):
    def scalar(x):
        x = as_tf(x)
        if x.x.lit:
            fx = lit(value_fn(x.v))
        else:
            fx = T().stmt(f"_m.{name}({x.x.code})", value_fn(x.v), (x.x.code,))
        if not x.d:
            return TF(fx, {})
        return TF(fx, d_scale(x.d, slope(x.x, fx)))

    def apply(x):
        if isinstance(x, SVec):
            return SVec([("e", scalar(e)) for e in x.elements()])
        return scalar(x)

    return apply


_sqrt = unary("sqrt", math.sqrt, lambda x, fx: bin_ex(lit(0.5), fx, "/"))
_exp = unary("exp", math.exp, lambda x, fx: fx)
_log = unary("log", math.log, lambda x, fx: bin_ex(ONE, x, "/"))


# ---------------------------------------------------------------------------
# vectors: segments ("l", read, start, stop) of free coordinates, or ("e", TF)
# ---------------------------------------------------------------------------
def seg_len(s):
    return Lin.of(s[3]) - Lin.of(s[2]) if s[0] == "l" else Lin((), 1)


def seg_len_value(s):
    return conc(s[3]) - conc(s[2]) if s[0] == "l" else 1


class SVec(_Torchy):
    __slots__ = ("segs",)

    def __init__(self, segs):
        tr = T()
        kept = []
        for s in segs:          # empty segments dropped, under a guard
            if s[0] == "l" and not tr.decide(seg_len(s), "gt", seg_len_value(s) > 0):
                continue
            kept.append(s)
        self.segs = kept

    def length(self):
        total = Lin((), 0)
        for s in self.segs:
            total = total + seg_len(s)
        return SymInt(sum(seg_len_value(s) for s in self.segs), total)

    def elements(self):
        """Every element as a TF: specialises the bounds of symbolic segments."""
        tr = T()
        out = []
        for s in self.segs:
            if s[0] == "e":
                out.append(s[1])
                continue
            a, b = tr.concrete_lin(s[2]), tr.concrete_lin(s[3])
            start = Lin.of(s[2])
            out.extend(s[1].element(SymInt(a + t, start + Lin((), t))) for t in range(b - a))
        return out

    def _index(self, i):
        tr = T()
        n = self.length()
        if type(i) is int and i < 0:
            i = n + i
        elif type(i) is int:
            i = SymInt(i, Lin((), i))
        if not (i >= 0) or not (i < n):
            raise Unsupported("index out of range")
        off = SymInt(0, Lin((), 0))
        for s in self.segs:
            end = off + SymInt(seg_len_value(s), seg_len(s))
            if i < end:
                if s[0] == "e":
                    return s[1]
                return s[1].element(s[2] + (i - off))
            off = end
        raise Unsupported("index")   # (not reached)

    def _slice(self, sl):
        if sl.step not in (None, 1):
            raise Unsupported("slice step")
        n = self.length()
        a = 0 if sl.start is None else sl.start
        b = n if sl.stop is None else sl.stop
        if type(a) is int and a < 0:
            a = n + a
        if type(b) is int and b < 0:
            b = n + b
        a = a if isinstance(a, SymInt) else SymInt(a, Lin((), a))
        b = b if isinstance(b, SymInt) else SymInt(b, Lin((), b))
        if not (a >= 0) or not (b >= 0) or not (a <= n):
            raise Unsupported("slice bounds")
        if not (b <= n):
            b = n
        if not (a < b):
            return SVec([])
        out, off = [], SymInt(0, Lin((), 0))
        for s in self.segs:
            end = off + SymInt(seg_len_value(s), seg_len(s))
            lo = a if a > off else off
            hi = b if b < end else end
            if lo < hi:
                if s[0] == "e":
                    out.append(s)
                else:
                    out.append(("l", s[1], s[2] + (lo - off), s[2] + (hi - off)))
            off = end
        return SVec(out)

    def __getitem__(self, index):
        if type(index) is tuple and len(index) == 1:
            index = index[0]
        if type(index) is slice:
            return self._slice(index)
        if isinstance(index, SymInt) or type(index) is int:
            return self._index(index)
        if type(index) is list:
            items = self.elements()
            return SVec([("e", items[conc_index(i)]) for i in index])
        raise Unsupported("vector index")

    def __len__(self):
        return T().concrete(self.length())

    def reshape(self, *shape):
        if shape in ((-1,), ((-1,),)):
            return self
        raise Unsupported("reshape of a vector")

    def _map(self, o, name, reverse=False):
        a = self.elements()
        if isinstance(o, SVec):
            b = o.elements()
            if len(a) != len(b):
                if len(b) == 1:
                    b = b * len(a)
                elif len(a) == 1:
                    a = a * len(b)
                else:
                    raise Unsupported("shapes")
            pairs = zip(b, a) if reverse else zip(a, b)
        else:
            pairs = ((o, x) for x in a) if reverse else ((x, o) for x in a)
        return SVec([("e", s_op(name, x, y)) for x, y in pairs])

    def __add__(self, o): return self._map(o, "add")
    def __radd__(self, o): return self._map(o, "add", True)
    def __sub__(self, o): return self._map(o, "sub")
    def __rsub__(self, o): return self._map(o, "sub", True)
    def __mul__(self, o): return self._map(o, "mul")
    def __rmul__(self, o): return self._map(o, "mul", True)
    def __truediv__(self, o): return self._map(o, "truediv")
    def __rtruediv__(self, o): return self._map(o, "truediv", True)

    def __neg__(self):
        return SVec([("e", -x) for x in self.elements()])

    def sum(self, dim=None):
        items = self.elements()
        if not items:
            return as_tf(0.0)
        out = items[0]
        for x in items[1:]:
            out = s_op("add", out, x)
        return out

    def exp(self):
        return _exp(self)

    def sqrt(self):
        return _sqrt(self)

    def clone(self):
        return self

    __hash__ = object.__hash__


def conc_index(i):
    return T().concrete(i) if isinstance(i, SymInt) else i


def _cat(tensors, dim=0):
    if dim not in (0, -1):
        raise Unsupported("cat dim")
    segs = []
    for t in tensors:
        if not isinstance(t, SVec):
            raise Unsupported("cat of a non-vector")
        segs.extend(t.segs)
    return SVec(segs)


def _stack(tensors, dim=0):
    return SVec([("e", as_tf(t)) for t in tensors])


def _sum_fn(x, dim=None):
    return x.sum() if isinstance(x, SVec) else as_tf(x)


_TORCH = {}
for _space in (torch, torch.Tensor):
    for _name, _impl in (("sqrt", _sqrt), ("exp", _exp), ("log", _log), ("cat", _cat), ("concat", _cat),
                         ("stack", _stack), ("sum", _sum_fn)):
        _fn = getattr(_space, _name, None)
        if _fn is not None:
            _TORCH[_fn] = _impl
_TORCH[torch.Tensor.reshape] = lambda x, *s: x.reshape(*s)
_TORCH[torch.Tensor.__getitem__] = lambda x, i: x[i]


class VecRead:
    """A continuous vector read: ``W<n>`` (its floats), ``n<n>`` (its length)."""

    def __init__(self, no, var, nvar, simplex):
        self.no, self.var, self.nvar, self.simplex = no, var, nvar, simplex
        self._last = None

    def last(self):
        if self._last is None:
            tr = T()
            values = tr.vec_values[self.no]
            v = 1.0 - sum(values[:-1])
            x = tr.stmt(f"1.0 - sum({self.var}[:-1])", v, (self.var,))
            self._last = TF(x, {("R", self.no): MINUS_ONE})
        return self._last

    def element(self, p):
        """The free coordinate at (symbolic) position ``p``."""
        tr = T()
        lin = Lin.of(p)
        v = tr.vec_values[self.no][conc(p)]
        x = tr.stmt(f"{self.var}[{lin.code()}]", v, (self.var,) + tuple(x for x, _ in lin.terms))
        return TF(x, {("c", self.no, lin.key()): ONE})


def T():
    return Tracer.current


# ---------------------------------------------------------------------------
# the tracer: the interpreter behind the four handles
# ---------------------------------------------------------------------------
MODEL, AUX = "model", "aux"
_F = {MODEL: "mf", AUX: "af"}


class _Handle:
    __slots__ = ("name", "side", "is_input", "interp")

    def __init__(self, name, side, is_input, interp):
        self.name, self.side, self.is_input, self.interp = name, side, is_input, interp

    def __getitem__(self, address):
        ref = object.__new__(AddressRef)
        ref.handle = self
        ref.address = address if type(address) is tuple else (address,)
        return ref


def addr_code(a):
    return "(" + "".join((repr(k) if type(k) in (str, int) else Lin.of(k).code()) + ", " for k in a) + ")"


def addr_deps(a):
    return tuple(v for k in a if isinstance(k, SymInt) for v, _ in k.lin.terms)


def addr_conc(a):
    return tuple(conc(k) for k in a)


class Tracer:
    current = None

    def __init__(self, x, y):
        self.flats = {MODEL: x.flat_records(), AUX: y.flat_records()}
        self.items = []
        self.n = 0
        self.decided = {}
        self.reads = []         # (side, address, label, value)
        self.cont_reads = []    # (no, side, address, VecRead or None)
        self.writes = []        # (side, address, label, value)
        self.copies = []        # (src side, src address, dst side, dst address, discrete)
        self.vec_values = {}
        self.post = []          # (address, expected membership in the new model trace)
        self.env = {}           # variable -> its concrete value

    # -- code ------------------------------------------------------------
    def name(self, prefix="t"):
        self.n += 1
        return f"{prefix}{self.n}"

    def stmt(self, code, v, deps, prefix="t"):
        name = self.name(prefix)
        self.items.append(("s", name, code, tuple(deps)))
        return Ex(v, name, False)

    def guard(self, code, outcome, deps):
        names = []
        for d in deps:
            if type(d) is Ex:
                if not d.lit:
                    names.append(d.code)
            elif type(d) is Lin:
                names.extend(v for v, _ in d.terms)
            else:
                names.append(d)
        if code in self.decided:
            if self.decided[code] != outcome:
                raise Unsupported("a guard decided two ways")
            return outcome
        self.decided[code] = outcome
        self.items.append(("g", code, outcome, tuple(names)))
        return outcome

    def decide(self, lin, op, outcome):
        c = lin.const()
        if c is not None:
            if _PY[op](c, 0) != bool(outcome):
                raise Unsupported("a static comparison disagrees with the values")
            return bool(outcome)
        return self.guard(f"{lin.code()} {_OPS[op]} 0", bool(outcome), (lin,))

    def concrete(self, s):
        """Specialise on ``s``'s value: a guard whose answer is the value (a switch in the code)."""
        if s.lin.const() is not None:
            return s.lin.c
        return self.guard(s.lin.code(), int(s.value), (s.lin,))

    def concrete_lin(self, x):
        return self.concrete(x) if isinstance(x, SymInt) else x

    def same_int(self, a, b):
        return self.decide(Lin.of(a) - Lin.of(b), "eq", conc(a) == conc(b))

    def same_addr(self, a, b):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if type(x) is str or type(y) is str:
                if x != y:
                    return False
        return all(self.same_int(x, y) for x, y in zip(a, b) if type(x) is not str)

    def find_key(self, d, k):
        if k in d:
            return k
        if k[0] != "c" or k[2] is None:
            return None
        for k2 in d:
            if k2[0] == "c" and k2[1] == k[1] and k2[2] is not None:
                if self.decide(Lin(*k[2]) - Lin(*k2[2]), "eq", _lin_value(k[2]) == _lin_value(k2[2])):
                    return k2
        return None

    # -- the language ----------------------------------------------------
    def read(self, ref, label, line):
        h = ref.handle
        if not h.is_input:
            raise Unsupported("read of an output")
        side, a = h.side, ref.address
        for s, a2, label2, value in self.reads:
            if s == side and self.same_addr(a, a2):
                if label2 is not label:
                    raise Unsupported("label")
                return value
        rec = self.flats[side].get(addr_conc(a))
        if rec is None or rec.dist.discrete != label.is_discrete:
            raise Unsupported("missing address or wrong label (the engine's error)")
        code = f"{_F[side]}[{addr_code(a)}].value"
        if label is discrete:
            v = rec.value
            if type(v) not in (int, bool):
                raise Unsupported("a discrete value that is not an int")
            x = self.stmt(code, v, addr_deps(a), "d")
            self.env[x.code] = int(v)
            value = SymInt(v, Lin(((x.code, 1),), 0))
        else:
            no = len(self.cont_reads)
            t = rec.value
            vr = None
            if t.ndim == 0:
                value = TF(self.stmt(code + ".item()", float(t), addr_deps(a)), {("c", no, None): ONE})
            elif t.ndim == 1:
                values = t.tolist()
                w = self.stmt(code + ".tolist()", values, addr_deps(a), "W")
                nx = self.stmt(f"len({w.code})", len(values), (w.code,), "n")
                n = SymInt(len(values), Lin(((nx.code, 1),), 0))
                self.env[nx.code] = len(values)
                if not (n <= MAX_VECTOR):
                    raise Unsupported("a long vector (autograd in the engine)")
                vr = VecRead(no, w.code, nx.code, bool(rec.dist.simplex))
                self.vec_values[no] = values
                if vr.simplex:      # (one weight: no free coordinate; its "R" key meets no column)
                    value = SVec([("l", vr, 0, n - 1), ("e", vr.last())])
                else:
                    value = SVec([("l", vr, 0, n)])
            else:
                raise Unsupported("a matrix read")
            self.cont_reads.append((no, side, a, vr))
        self.reads.append((side, a, label, value))
        return value

    def _check_new_output(self, side, a):
        for s, a2, *_ in self.writes:
            if s == side and self.same_addr(a, a2):
                raise Unsupported("double write (the engine's error)")
        for _, _, s, a2, _ in self.copies:
            if s == side and self.same_addr(a, a2):
                raise Unsupported("double write (the engine's error)")

    def write(self, ref, value, label, line):
        h = ref.handle
        if h.is_input or not ref.address:
            raise Unsupported("write to an input")
        self._check_new_output(h.side, ref.address)
        self.writes.append((h.side, ref.address, label, value))

    def copy(self, src, dst, line):
        if not src.handle.is_input or dst.handle.is_input:
            raise Unsupported("copy direction")
        rec = self.flats[src.handle.side].get(addr_conc(src.address))
        if rec is None:
            raise Unsupported("copy of a namespace")
        self._check_new_output(dst.handle.side, dst.address)
        self.copies.append((src.handle.side, src.address, dst.handle.side, dst.address, rec.dist.discrete))

    def exists(self, ref, line):
        raise Unsupported("exists")


def _lin_value(key):
    terms, c = key
    tr = T()
    env = tr.env
    return c + sum(a * env[v] for v, a in terms)


def S(x):
    return x if isinstance(x, SymInt) else SymInt(x, Lin((), x))


def _lin_deps(lin):
    return tuple(v for v, _ in lin.terms)


class _Accounting:
    """``apply._account`` done once per key, symbolically (a mixin of Tracer)."""

    def order_guards(self, entries):
        """Consecutive addresses ``(ns, i)`` of one side and namespace: ``i`` increasing."""
        for p, q in zip(entries, entries[1:]):
            (s1, a1), (s2, a2) = p[:2], q[:2]
            if s1 == s2 and len(a1) == len(a2) == 2 and a1[0] == a2[0] and type(a1[1]) is not str:
                if not self.decide(Lin.of(a1[1]) - Lin.of(a2[1]), "lt", conc(a1[1]) < conc(a2[1])):
                    raise Unsupported("a family out of index order")

    def finish(self, app):
        new_flat = {MODEL: app.new_model.flat_records(), AUX: app.new_aux.flat_records()}
        old_pos = {s: {a: i for i, a in enumerate(f)} for s, f in self.flats.items()}
        new_pos = {s: {a: i for i, a in enumerate(f)} for s, f in new_flat.items()}
        rank = {MODEL: 0, AUX: 1}
        outs = []
        for side, a, label, value in self.writes:
            if label is not continuous:
                continue
            rec = new_flat[side].get(addr_conc(a))
            if rec is None or rec.dist.discrete:
                raise Unsupported("a write the engine refuses")
            outs.append((side, a, value, bool(rec.dist.simplex)))
        outs.sort(key=lambda o: (rank[o[0]], new_pos[o[0]][addr_conc(o[1])]))
        self.order_guards(outs)
        cols_in = self._remaining_inputs(new_flat[MODEL])
        cols_in.sort(key=lambda c: (rank[c[0]], old_pos[c[0]][addr_conc(c[1])]))
        self.order_guards(cols_in)
        rows, runs_by_read = self._rows(outs, cols_in)
        cols = self._cols(cols_in, runs_by_read)
        if len(rows) != len(cols):
            raise Unsupported("dimension (the engine's error)")
        matrix = self._matrix(rows, cols)
        self._emit_return(matrix)

    def _remaining_inputs(self, xn):
        out = []
        for no, side, a, vr in self.cont_reads:
            consumed = any(ss == side and self.same_addr(sa, a) for ss, sa, _, _, _ in self.copies)
            if not consumed and side == MODEL:
                written = any(s == MODEL and self.same_addr(a, a2) for s, a2, _, _ in self.writes)
                copied_to = any(ds == MODEL and self.same_addr(a, da) for _, _, ds, da, _ in self.copies)
                if not written and not copied_to:
                    present = addr_conc(a) in xn
                    self.post.append((a, present))
                    consumed = present
            if not consumed:
                out.append((side, a, no, vr))
        return out

    def _rows(self, outs, cols_in):
        rows, runs_by_read = [], {}
        for side, a, value, simplex_out in outs:
            if type(value) is TF:
                rows.append(value.d)
                continue
            if not isinstance(value, SVec):
                raise Unsupported("a written constant")
            free = value
            if simplex_out:
                segs = list(value.segs)
                last = segs.pop()
                if last[0] == "l":
                    segs.append(("l", last[1], last[2], S(last[3]) - 1))
                free = SVec(segs)
            match = next((vr for s2, a2, _, vr in cols_in
                          if vr is not None and s2 == side and self.same_addr(a, a2)), None)
            runs = []
            for s in free.segs:
                if match is not None and s[0] == "l" and s[1] is match:
                    runs.append((S(s[2]), S(s[3])))
                    continue
                if match is not None and s[0] == "e" and len(s[1].d) == 1:
                    (k, g), = s[1].d.items()
                    if k[0] == "c" and k[1] == match.no and k[2] is not None:
                        if g.lit and g.v == 1.0:
                            start = SymInt(_lin_value(k[2]), Lin(*k[2]))
                            runs.append((start, start + 1))
                            continue
                        if g.v == 1.0:
                            raise Unsupported("a computed unit row")
                        self.guard(f"{g.code} != 1.0", True, (g,))
                if s[0] == "e":
                    rows.append(s[1].d)
                else:
                    rows.extend(e.d for e in SVec([s]).elements())
            for i, (a1, b1) in enumerate(runs):
                for a2, b2 in runs[i + 1:]:
                    if not (b1 <= a2) and not (b2 <= a1):
                        raise Unsupported("overlapping pass-through runs")
            if match is not None:
                runs_by_read.setdefault(match.no, []).extend(runs)
        return rows, runs_by_read

    def _cols(self, cols_in, runs_by_read):
        cols = []
        for side, a, no, vr in cols_in:
            if vr is None:
                cols.append((no, None))
                continue
            n = SymInt(self.env[vr.nvar], Lin(((vr.nvar, 1),), 0))
            nfree = n - 1 if vr.simplex else n
            runs = sorted(runs_by_read.get(no, []), key=lambda r: conc(r[0]))
            for r1, r2 in zip(runs, runs[1:]):
                if not (r1[1] <= r2[0]):
                    raise Unsupported("run order")
            pos = S(0)
            for start, stop in runs + [(nfree, None)]:
                length = self.concrete(start - pos)
                cols.extend((no, (pos + t).lin.key()) for t in range(length))
                if stop is None:
                    break
                pos = stop
        return cols

    def _matrix(self, rows, cols):
        matrix = []
        for d in rows:
            row = []
            for no, lk in cols:
                terms = []
                for k, g in d.items():
                    if k[1] != no:
                        continue
                    if k[0] == "R":
                        if lk is not None:
                            terms.append(g)
                    elif k[2] is None or lk is None:
                        if k[2] is None and lk is None:
                            terms.append(g)
                    elif self.decide(Lin(*k[2]) - Lin(*lk), "eq", _lin_value(k[2]) == _lin_value(lk)):
                        terms.append(g)
                e = terms[0] if terms else lit(0.0)
                for g in terms[1:]:
                    e = bin_ex(e, g, "+")
                row.append(e)
            matrix.append(row)
        return matrix

    def _value_code(self, label, v):
        if label is continuous:
            if type(v) is TF:
                return f"_fn(_arr({v.x.code}))", () if v.x.lit else (v.x.code,)
            if isinstance(v, SVec):
                parts, deps = [], []
                for s in v.segs:
                    if s[0] == "l":
                        lo, hi = Lin.of(s[2]), Lin.of(s[3])
                        parts.append(f"{s[1].var}[{lo.code()}:{hi.code()}]")
                        deps += [s[1].var, *_lin_deps(lo), *_lin_deps(hi)]
                    else:
                        parts.append(f"[{s[1].x.code}]")
                        if not s[1].x.lit:
                            deps.append(s[1].x.code)
                return f"_f64v({' + '.join(parts) or '[]'})", tuple(deps)
            raise Unsupported("a written constant")
        if isinstance(v, SymInt):
            return v.lin.code(), _lin_deps(v.lin)
        if type(v) in (bool, int, str, float, type(None)):
            return repr(v), ()
        raise Unsupported("a discrete write of another type")

    def _emit_return(self, matrix):
        deps = []
        rows = []
        for row in matrix:
            rows.append("[" + ", ".join(e.code for e in row) + "]")
            deps += [e.code for e in row if not e.lit]
        m = self.stmt("[" + ", ".join(rows) + "]", None, deps, "M")
        ld = self.stmt(f"_ld({m.code})", None, (m.code,), "ld")
        sides = {MODEL: [], AUX: []}
        deps = [ld.code]
        for side, a, label, value in self.writes:
            code, d = self._value_code(label, value)
            sides[side].append(f"{addr_code(a)}: {code}")
            deps += [*addr_deps(a), *d]
        for ss, sa, ds, da, _ in self.copies:
            sides[ds].append(f"{addr_code(da)}: {_F[ss]}[{addr_code(sa)}].value")
            deps += [*addr_deps(sa), *addr_deps(da)]
        post = "(" + "".join(f"({addr_code(a)}, {p}), " for a, p in self.post) + ")"
        deps += [v for a, _ in self.post for v in addr_deps(a)]
        code = (f"return (_OC({{{', '.join(sides[MODEL])}}}), _OC({{{', '.join(sides[AUX])}}}), "
                f"{ld.code}, {post})")
        self.items.append(("r", code, tuple(deps)))


for _k, _v in list(vars(_Accounting).items()):
    if callable(_v):
        setattr(Tracer, _k, _v)


def _ld(matrix):
    """``log |det|`` as ``jacobian.reduced_jacobian`` takes it (m == n here)."""
    m = len(matrix)
    if m <= 16:
        total = logabsdet(matrix)
        if math.isfinite(total):
            return total
    return _block_logdets(m, m, matrix, None)[1]


# ---------------------------------------------------------------------------
# the trie of keys, and its code
# ---------------------------------------------------------------------------
class Node:
    __slots__ = ("items", "guard", "kids")

    def __init__(self):
        self.items, self.guard, self.kids = [], None, {}


def insert(root, items):
    node, p = root, 0
    for it in items:
        if it[0] in ("s", "r"):
            if p < len(node.items):
                if node.items[p][:3] != it[:3]:
                    raise Unsupported(f"a run that differs from the last one with the same guards: "
                                      f"{node.items[p][:3]} vs {it[:3]}")
            else:
                if node.guard is not None:
                    raise Unsupported("a statement where a guard was")
                node.items.append(it)
            p += 1
        else:
            if p != len(node.items) or (node.guard is not None and node.guard[1] != it[1]):
                raise Unsupported("a guard where a statement (or another guard) was")
            node.guard = it
            node = node.kids.setdefault(it[2], Node())
            p = 0


def _emit(node, ind, out):
    """Lines of ``node``'s code, dead statements dropped; returns the names it needs. A guard
    with one outcome seen is ``if not (...): return None`` (no nesting)."""
    needed = set()
    body = []
    pad = " " * 4 * ind
    if node.guard is not None:
        needed |= set(node.guard[3])
        cond = node.guard[1]
        if set(node.kids) <= {True, False} and all(type(a) is bool for a in node.kids):
            if len(node.kids) == 1:
                (outcome, kid), = node.kids.items()
                body.append(pad + (f"if not ({cond}): return None" if outcome else f"if {cond}: return None"))
                needed |= _emit(kid, ind, body)
            else:
                inner = {}
                for outcome in (True, False):
                    lines = []
                    needed |= _emit(node.kids[outcome], ind + 1, lines)
                    inner[outcome] = lines
                body += [pad + f"if {cond}:", *inner[True], pad + "else:", *inner[False]]
        elif len(node.kids) == 1:           # a specialised value seen once
            (answer, kid), = node.kids.items()
            body.append(pad + f"if {cond} != {answer!r}: return None")
            needed |= _emit(kid, ind, body)
        else:                               # a switch on a specialised value
            q = f"q{id(node) % 100000}"
            body.append(pad + f"{q} = {cond}")
            first = True
            for answer, kid in node.kids.items():
                body.append(pad + f"{'if' if first else 'elif'} {q} == {answer!r}:")
                lines = []
                needed |= _emit(kid, ind + 1, lines)
                body += lines
                first = False
            body.append(pad + "else:")
            body.append(pad + "    return None")
    kept = []
    for it in reversed(node.items):
        if it[0] == "r":
            kept.append(pad + it[1])
            needed |= set(it[2])
        elif it[1] in needed:
            kept.append(pad + f"{it[1]} = {it[2]}")
            needed.discard(it[1])
            needed |= set(it[3])
    out += kept[::-1] + body
    return needed


def source(root, name="_compiled"):
    lines = []
    _emit(root, 2, lines)
    return "\n".join([f"def {name}(mf, af):", "    try:"] + lines + [
        "    except (KeyError, IndexError, ArithmeticError, ValueError, TypeError, AttributeError):",
        "        return None", "    return None", ""])


_NAMESPACE = {"_m": math, "_fn": torch.from_numpy, "_arr": _np_array, "_f64v": float64_vector,
              "_ld": _ld, "_OC": OwnedChoices}


def trace_once(f, x, y, app):
    """The trace items of ``f`` on ``(x, y)`` (``app``: the engine's application there)."""
    tr = Tracer(x, y)
    handles = (_Handle("model_in", MODEL, True, tr), _Handle("aux_in", AUX, True, tr),
               _Handle("model_out", MODEL, False, tr), _Handle("aux_out", AUX, False, tr))
    Tracer.current = tr
    try:
        f.run_on(handles)
        tr.finish(app)
    finally:
        Tracer.current = None
    return tr.items


class Compiled:
    """The generated code of transform ``f`` (auxiliary program ``q``): one function for every
    key seen so far. ``run(x, y)``: ``(model choices, aux choices, log|det J|, post)`` or None
    (a miss: call :meth:`learn`). ``post``: ``(address, expected)`` membership checks of the
    new model trace (the implicit copies the key assumed)."""

    def __init__(self, f, q, q_args=()):
        self.f, self.q, self.q_args = f, q, tuple(q_args)
        self.root = Node()
        self.run = lambda mf, af: None
        self.keys = 0
        self.unsupported = {}
        self.src = ""

    def __call__(self, x, y):
        return self.run(x.flat_records(), y.flat_records())

    def learn(self, x, y, app):
        try:
            items = trace_once(self.f, x, y, app)
            insert(self.root, items)
        except Unsupported as exc:
            self.unsupported[str(exc)] = self.unsupported.get(str(exc), 0) + 1
            return False
        self.keys += 1
        self.compile()
        return True

    def compile(self):
        self.src = source(self.root)
        ns = dict(_NAMESPACE)
        exec(compile(self.src, f"<symtrace {self.f.name}>", "exec"), ns)
        self.run = ns["_compiled"]
