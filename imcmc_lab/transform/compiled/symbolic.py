"""Symbolic values a transform computes with while it is traced once per branch key.

* a discrete read gives a :class:`SymInt`: its concrete value and a linear form over the
  generated code's integer variables; ``==``/``<``/``bool()`` record a *guard* (predicate and
  outcome) unless the linear forms decide it; ``+``/``-``/``*`` by an int build linear forms;
  ``__index__`` (``range(k)``, list indexing) *specialises*: a guard answered by the value;
* a continuous scalar read gives a :class:`TF`: the concrete float, its expression in the
  generated code and a tangent dict keyed like :mod:`..dual`'s, by *symbolic* coordinates
  ``("c", read number, linear form of the index)`` and a simplex read's ``("R", read number)``.
  Every operation follows dual.py's rule for it and emits one statement per value and per
  tangent entry, so the generated code does the float backend's arithmetic operation for
  operation: bit-identical values, derivatives and (with the same LU) log |det J|;
* a continuous vector read gives an :class:`SVec`: segments that are runs of the read's free
  coordinates with symbolic bounds, or single elements. Indexing, slicing, ``torch.cat`` and
  ``reshape`` stay symbolic (guards on the bounds); any other vector operation specialises the
  bounds and goes on element by element.

Anything else (an in-place operator, an unknown attribute or torch function, ``float()`` of a
traced value, ``**`` other than 2) raises :class:`Unsupported`: the key is not compiled and the
interpreter runs it. The tracer of the running thread is :func:`T` (a thread-local: chains in
threads never see each other's tracing).
"""

from __future__ import annotations

import math
import sys
import threading

import torch

from ..dual import broadcast_pairs

MAX_VECTOR = 64
_state = threading.local()


def T():
    """The tracer of this thread (set by :func:`.tracer.trace_once` while it traces)."""
    return _state.tracer


def set_tracer(tracer):
    _state.tracer = tracer


class Unsupported(BaseException):
    """The tracer cannot follow the transform here (the engine runs it). A BaseException, as
    dual.NeedsTorch: a transform's own ``except Exception`` must not swallow it; one raised
    while a tracer runs marks it, so a bare ``except:`` that swallows it still refuses the key."""

    def __init__(self, *args):
        super().__init__(*args)
        tracer = getattr(_state, "tracer", None)
        if tracer is not None:
            tracer.refused = str(args[0]) if args else "unsupported"


# ---------------------------------------------------------------------------
# linear forms over the generated code's integer variables
# ---------------------------------------------------------------------------
class Lin:
    """A linear form ``sum(coef * var) + c`` over the generated code's integer variables
    (discrete reads, vector lengths): how a discrete value is known generically."""

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
        if type(o) is float:
            return self.specialised() + sign * o
        return NotImplemented

    def specialised(self):
        """The concrete value (its type too: a read's type is guarded), under a guard on it."""
        T().concrete(self)
        return self.value

    def __add__(self, o): return self._arith(o)
    __radd__ = __add__
    def __sub__(self, o): return self._arith(o, -1)

    def __rsub__(self, o):
        if type(o) in (int, bool):
            return SymInt(o - self.value, Lin((), o) - self.lin)
        if type(o) is float:
            return o - self.specialised()
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
        if isinstance(o, SymInt):
            return self.specialised() * o.specialised()
        if type(o) in (float, bool):
            return self.specialised() * o
        return NotImplemented
    __rmul__ = __mul__

    def _cmp(self, o, op):
        if type(o) is float:
            return getattr(self.specialised(), f"__{op}__")(o)
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

    def __getattr__(self, name):        # (int's methods: bit_length, real...) on the value
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.specialised(), name)


def _on_value(name):
    """An int operation the linear forms do not model: done on the concrete value, under a
    guard on it (exact: the generated code checks the value)."""
    def op(self, *args):
        args = [a.specialised() if isinstance(a, SymInt) else a for a in args]
        return getattr(self.specialised(), name)(*args)
    op.__name__ = name
    return op


for _name in ("__mod__", "__rmod__", "__floordiv__", "__rfloordiv__", "__truediv__", "__rtruediv__", "__pow__",
              "__rpow__", "__divmod__", "__rdivmod__", "__abs__", "__and__", "__rand__", "__or__", "__ror__",
              "__xor__", "__rxor__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__invert__",
              "__float__", "__round__", "__trunc__", "__floor__", "__ceil__", "__pos__", "__format__", "__str__",
              "__repr__", "__complex__"):
    setattr(SymInt, _name, _on_value(_name))


def conc(x):
    return x.value if isinstance(x, SymInt) else x


# ---------------------------------------------------------------------------
# expressions of the generated code: (value, code, literal?)
# ---------------------------------------------------------------------------
class Ex:
    """A float of the generated code: its trace-time value ``v``, its ``code`` (a variable
    name or a literal) and whether it is a literal (folded, never guarded)."""

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
    if type(x) is torch.Tensor and x.ndim == 0 and not x.requires_grad:       # (exact type: no user code)
        return TF(lit(float(x)), {})
    raise Unsupported(f"operand {type(x).__name__}")


def _num(x):
    """A Python number operand (dual.py's fast paths), or None."""
    if type(x) in (int, float):
        return x
    return None


class TooCostly(Unsupported):
    """A trace too long or too slow to be worth compiling: the transform stops learning."""


def _refuse(self, *args, **kwargs):
    raise Unsupported("an operation the tracer does not model (in-place, attribute...)")


class _Torchy:
    # in-place operators: the engine hands them to autograd (aliasing); so does the tracer.
    # Operations the tracer does not model raise Unsupported (a BaseException), never the
    # TypeError Python would raise, which a transform's own ``except TypeError`` could catch.
    __iadd__ = __isub__ = __imul__ = __itruediv__ = __ipow__ = __setitem__ = _refuse
    __abs__ = __mod__ = __rmod__ = __floordiv__ = __rfloordiv__ = __rpow__ = __matmul__ = __rmatmul__ = _refuse
    __divmod__ = __rdivmod__ = __round__ = __trunc__ = __floor__ = __ceil__ = __int__ = __index__ = _refuse
    __and__ = __or__ = __xor__ = __invert__ = __lshift__ = __rshift__ = __complex__ = _refuse
    __str__ = __repr__ = __format__ = __contains__ = __iter__ = __len__ = _refuse

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

    def __eq__(self, o):        # (dual.py's Dual compares values: so does the generated code)
        if type(o) is TF or _num(o) is not None or isinstance(o, SymInt):
            return self._cmp(o, "eq")
        raise Unsupported(f"== between a traced value and a {type(o).__name__}")

    def __ne__(self, o):
        if type(o) is TF or _num(o) is not None or isinstance(o, SymInt):
            return self._cmp(o, "ne")
        raise Unsupported(f"!= between a traced value and a {type(o).__name__}")

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


_FCMP = {"lt": float.__lt__, "le": float.__le__, "gt": float.__gt__, "ge": float.__ge__, "eq": float.__eq__,
         "ne": float.__ne__}


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
    """A traced vector: segments ``("l", read, start, stop)`` (a run of a vector read's free
    coordinates, symbolic bounds) or ``("e", TF)`` (one element)."""

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

    def __iter__(self):
        return iter(self.elements())

    # (DualVector's truth value and comparisons are value-based; Python's defaults here would
    # not be: len() for bool, identity for ==)
    __eq__ = __ne__ = __bool__ = __lt__ = __le__ = __gt__ = __ge__ = __pow__ = __float__ = _refuse

    def reshape(self, *shape):
        if shape in ((-1,), ((-1,),)):
            return self
        raise Unsupported("reshape of a vector")

    def _map(self, o, name, reverse=False):
        a = self.elements()
        if isinstance(o, SVec):
            pairs = broadcast_pairs(a, o.elements(), reverse, lambda: Unsupported("shapes"))
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




def addr_code(a):
    return "(" + "".join((repr(k) if type(k) in (str, int) else Lin.of(k).code()) + ", " for k in a) + ")"


def addr_deps(a):
    return tuple(v for k in a if isinstance(k, SymInt) for v, _ in k.lin.terms)


def addr_conc(a):
    return tuple(conc(k) for k in a)




def _lin_value(key):
    terms, c = key
    tr = T()
    env = tr.env
    return c + sum(a * env[v] for v, a in terms)


def S(x):
    return x if isinstance(x, SymInt) else SymInt(x, Lin((), x))


def _lin_deps(lin):
    return tuple(v for v, _ in lin.terms)


# ---------------------------------------------------------------------------
# the profile hook (environment.py) is off while the tracer's own code runs
# ---------------------------------------------------------------------------
def quiet(fn):
    """``fn`` with the trace's profile hook off while it runs (entered from the transform's
    code; the hook vets the transform's calls, and the tracer never calls the transform's
    code): most of a trace's calls are the tracer's own, and each costs a hook call."""
    def entry(*args, **kwargs):
        hook = getattr(_state, "hook", None)
        if hook is None:
            return fn(*args, **kwargs)
        _state.hook = None
        sys.setprofile(None)
        try:
            return fn(*args, **kwargs)
        finally:
            _state.hook = hook
            sys.setprofile(hook)
    entry.__name__, entry.__qualname__, entry.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return entry


def set_hook(hook):
    """The profile hook of this thread's trace (None: none), for :func:`quiet`."""
    _state.hook = hook


for _cls in (SymInt, TF, SVec, _Torchy):
    for _name, _value in list(vars(_cls).items()):
        if isinstance(_value, classmethod):
            setattr(_cls, _name, classmethod(quiet(_value.__func__)))
        elif callable(_value) and not isinstance(_value, type) and _name not in ("__init__", "__new__"):
            setattr(_cls, _name, quiet(_value))
