"""Value conventions and comparisons.

Convention (kept everywhere in the engine):

* a **continuous** choice's value is a ``torch.float64`` tensor: 0-d for a
  scalar, shape ``(d,)`` for a vector (Dirichlet, multivariate normal), shape
  ``(n,) + event_shape`` for ``iid(dist, n)``;
* a **discrete** scalar choice's value is a Python ``int`` (``bool`` for
  ``bernoulli``); ``iid`` of a discrete distribution gives an ``int64`` tensor.

Python floats, float32 tensors and NumPy arrays given as constraints are
converted to ``float64`` tensors.
"""

from __future__ import annotations

import math
import numbers
import operator
from array import array

import torch

DTYPE = torch.float64

__all__ = ["DTYPE", "as_real", "float64_vector", "values_equal", "values_close", "format_value", "is_tensor",
           "ScalarList"]


_LIST_GETITEM = list.__getitem__
_LIST_ITER = list.__iter__


def is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


class ScalarList(list):
    """A list of values that may also know them as Python floats, without converting the
    values one by one.

    An indexed family of choices (``[normal(0, 10) @ ("mu", j) for j in keys]``, see
    :mod:`imcmc_lab.modeling.families`) returns one: its values are 0-d float64 tensors,
    most of them kept from the previous trace, which already knew their floats.
    :func:`as_real` (which every distribution applies to its parameters) makes a vector
    from :meth:`floats` instead of stacking the tensors. Otherwise it is an ordinary list;
    changing it forgets the floats, and a copy or a pickle is a plain list.

    While a program body runs, the list is *watched* (:meth:`watch`): each tensor that Python
    code takes out of it (indexing, slicing, iterating, ``copy``) is noted with its version
    counter, so that the engine can refuse a body that changed a trace's value in place (see
    :mod:`imcmc_lab.core.effects`). What is never taken out costs nothing: a body that hands the
    whole list to a distribution reads no version counter. (C code that reads the items directly,
    as ``torch.stack`` does, makes new tensors; only ``torch._foreach_*_`` would escape.)
    """

    __slots__ = ("_floats", "_handed")

    def __init__(self, values=(), floats=None):
        super().__init__(values)
        # A function giving the values as a tuple of floats (None if they are not all
        # float64 0-d tensors outside autograd), or None: not known.
        self._floats = floats
        self._handed = None

    def watch(self, handed):
        """Note each tensor taken out from now on in ``handed`` as ``(tensor, version)``
        (``None``: stop). ``self``."""
        self._handed = handed
        return self

    def _note(self, values):
        handed = self._handed
        if handed is not None:
            handed.extend([(v, v._version) for v in values if type(v) is torch.Tensor])
        return values

    def __getitem__(self, index):
        value = _LIST_GETITEM(self, index)
        if self._handed is not None:
            self._note(value if type(index) is slice else (value,))
        return value

    def __iter__(self):
        return _LIST_ITER(self) if self._handed is None else iter(self._note(list(_LIST_ITER(self))))

    def __reversed__(self):
        return reversed(self._note(list(_LIST_ITER(self))))

    def copy(self):
        return self._note(list(_LIST_ITER(self)))

    def __add__(self, other):
        return list.__add__(self._note(list(_LIST_ITER(self))), other)

    def pop(self, index=-1):
        self._floats = None
        return self._note((list.pop(self, index),))[0]

    def floats(self):
        """The values as a tuple of Python floats, or ``None`` if that is not known cheaply
        (or the values are not all float64 0-d tensors outside autograd)."""
        return None if self._floats is None else self._floats()

    def __reduce__(self):
        return list, (list(self),)


def _forgetting(name):
    method = getattr(list, name)

    def change(self, *args, **kwargs):
        self._floats = None
        return method(self, *args, **kwargs)

    change.__name__ = change.__qualname__ = name
    return change


for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert",
              "remove", "clear", "sort", "reverse"):
    setattr(ScalarList, _name, _forgetting(_name))
del _name


def plain_float(value):
    """``value`` as a Python float if it is a float64 0-d tensor outside autograd, else ``None``."""
    if type(value) is torch.Tensor and value.dtype is DTYPE and not value.ndim and not value.requires_grad:
        return value.item()
    return None


def plain_floats(values):
    """``values`` as a tuple of Python floats if they are all float64 0-d tensors outside
    autograd, else ``None`` (checked with C-level passes, not a Python loop)."""
    if not values or set(map(type, values)) != {torch.Tensor}:
        return None
    if (set(map(_DTYPE_OF, values)) != {DTYPE} or max(map(_NDIM_OF, values))
            or any(map(_REQUIRES_GRAD_OF, values))):
        return None
    return tuple(map(torch.Tensor.item, values))


def known_floats(values):
    """A list or tuple of parameters as a tuple of Python floats where that is known cheaply
    (a :class:`ScalarList` that knows its floats, or float64 0-d tensors outside autograd),
    else ``None``."""
    if type(values) is ScalarList:
        floats = values.floats()
        if floats:
            return floats
    if isinstance(values, (list, tuple)) and values and isinstance(values[0], torch.Tensor):
        return plain_floats(values)
    return None


_DTYPE_OF = operator.attrgetter("dtype")
_NDIM_OF = operator.attrgetter("ndim")
_REQUIRES_GRAD_OF = operator.attrgetter("requires_grad")


def float64_vector(values) -> torch.Tensor:
    """A sequence of Python floats as a float64 vector, through a buffer: a few times
    faster than ``torch.tensor`` for dozens of values."""
    if not values:
        return torch.zeros(0, dtype=DTYPE)
    return torch.frombuffer(array("d", values), dtype=DTYPE)


def as_real(x) -> torch.Tensor:
    """``x`` as a float64 tensor (no copy when it already is one). A :class:`ScalarList`
    that knows its floats becomes one vector made from them, not a stack of its tensors."""
    if isinstance(x, torch.Tensor):
        return x if x.dtype == DTYPE else x.to(DTYPE)
    floats = known_floats(x)            # float64 scalars outside autograd (Fig. 1's lists):
    if floats is not None:              # one vector from their floats, not K conversions + stack
        return float64_vector(floats)
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], torch.Tensor):
        return torch.stack([as_real(v) for v in x])
    return torch.as_tensor(x, dtype=DTYPE)


def values_equal(a, b) -> bool:
    """Exact equality of two values or argument tuples (tensors, lists, scalars)."""
    if a is b:
        return True
    ta, tb = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
    if ta or tb:
        if not (ta and tb):
            if ta and a.ndim == 0 and isinstance(b, numbers.Number):
                return a.item() == b
            if tb and b.ndim == 0 and isinstance(a, numbers.Number):
                return b.item() == a
            return False
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            return False
        return all(values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return False
        return all(values_equal(a[k], b[k]) for k in a)
    try:
        result = a == b
        return bool(result)
    except Exception:  # objects whose __eq__ is not a boolean
        return False


def values_close(a, b, rtol: float = 1e-6, atol: float = 1e-8) -> bool:
    """Equality up to a tolerance for reals; exact for discrete values."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        try:
            a, b = as_real(a), as_real(b)
        except Exception:
            return False
        if a.shape != b.shape:
            return False
        return bool(torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=False))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=rtol, abs_tol=atol)
    return values_equal(a, b)


def format_value(value, precision: int = 4) -> str:
    """A short readable rendering of a value for messages and reprs."""
    if isinstance(value, torch.Tensor):
        if value.ndim == 0:
            v = value.item()
            return f"{v:.{precision}g}" if isinstance(v, float) else repr(v)
        flat = value.detach().reshape(-1)
        items = flat.tolist()
        shown = items if len(items) <= 6 else items[:3] + ["…"] + items[-2:]
        text = ", ".join(f"{x:.{precision}g}" if isinstance(x, float) else str(x) for x in shown)
        return f"[{text}]" if value.ndim == 1 else f"tensor(shape={tuple(value.shape)}, [{text}])"
    if isinstance(value, float):
        return f"{value:.{precision}g}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
