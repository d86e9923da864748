"""Python-arithmetic helpers of the fast paths (private to the package).

For plain scalars and short vectors outside autograd, checking and scoring in Python
arithmetic (``.item()``, ``.tolist()`` and C-level ``sum``/``min``/``max`` passes) costs
less than the several tensor operations it replaces; a trace stores log-densities as
Python floats anyway.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import torch

from ..values import DTYPE

NEG_INF = float("-inf")
LOG_2PI = math.log(2 * math.pi)
#: the smallest positive normal float64 and the largest float64 below 1: where samplers
#: clamp values that rounded onto a support's excluded end (see the package docstring)
TINY = sys.float_info.min
BELOW_ONE = math.nextafter(1.0, 0.0)
HUGE = sys.float_info.max

#: Vectors up to this length are checked and scored in Python arithmetic: below it, a
#: ``.tolist()`` and a loop cost less than the several tensor operations they replace.
PY_MAX_LEN = 64


def plain_scalars(*tensors) -> bool:
    """All 0-d and outside autograd: log-densities can then be computed with ``math``."""
    for t in tensors:      # a loop, not all(...): this runs once per scored choice
        if t.ndim or t.requires_grad:
            return False
    return True


def scalar_params(raw, *tensors):
    """The scalar parameters ``tensors`` as Python floats, or ``None`` unless all are 0-d and
    outside autograd. Taken from ``raw`` (the arguments as given) when those are all Python
    ints or floats: :func:`~.base.as_param` made the tensors from exactly these numbers, so
    the floats are the same and no tensor is read (``.item()`` costs more than the arithmetic)."""
    for a in raw:
        if type(a) is not float and type(a) is not int:
            break
    else:
        return tuple(map(float, raw))
    for t in tensors:
        if t.ndim or t.requires_grad:
            return None
    return tuple(map(_item, tensors))


_item = torch.Tensor.item


def short_vector(t) -> bool:
    """A 1-d tensor short enough for Python arithmetic."""
    return t.ndim == 1 and t.shape[0] <= PY_MAX_LEN


def scalar(v: float) -> torch.Tensor:
    # torch.scalar_tensor costs half of torch.tensor
    return torch.scalar_tensor(v, dtype=DTYPE)


def all_positive_finite(values) -> bool:
    """Every value in (0, inf), with C-level passes instead of a generator (a NaN makes the
    sum NaN; without one, min and max are exact)."""
    total = sum(values)
    return total == total and min(values) > 0 and max(values) < math.inf


def all_nonnegative_finite(values) -> bool:
    total = sum(values)
    return total == total and min(values) >= 0 and max(values) < math.inf


def all_finite(values) -> bool:
    total = sum(values)
    return total == total and min(values) > -math.inf and max(values) < math.inf


def numpy_views(*tensors):
    """NumPy views of CPU tensors outside autograd (for batches, whose NumPy arithmetic costs
    a fifth of torch's per call at SMC's sizes), or None if one cannot be viewed."""
    out = []
    for t in tensors:
        if t.requires_grad or t.device.type != "cpu":
            return None
        out.append(t.numpy())
    return out
