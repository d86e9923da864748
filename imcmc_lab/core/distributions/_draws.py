"""Scalar draws from torch's global generator without a new tensor per draw (private).

``torch.rand((), dtype=float64)`` is ``torch.empty(()).uniform_()``, ``torch.randn`` is
``.normal_()`` and ``torch.randint(lo, hi, ())`` is ``.random_(lo, hi)`` on a new tensor:
the same kernel, so drawing into a kept 0-d tensor gives the same numbers in the same
order (``torch.manual_seed`` reproduces a run exactly) at about half the cost, since
allocating the tensor and parsing the factory's arguments is most of it. Each thread has
its own tensors (two threads drawing at once must not read each other's value), made
outside inference mode (an inference tensor cannot be changed in place outside it).
Where the kept tensor cannot be changed in place -- inside a ``torch.func`` transform,
which refuses to change a tensor it did not make -- the factory itself draws (the refusal
comes before any number is drawn).

``torch._standard_gamma`` draws element by element, in order, from the same generator
(a serial kernel), so one call on ``[a, b]`` gives the two draws of two calls.
"""

from __future__ import annotations

import threading

import torch

from ..values import DTYPE

__all__ = ["uniform01", "standard_normal", "randint", "standard_gamma_pair"]

_local = threading.local()
_PAIRS = {}         # (a, b) -> float64 tensor [a, b] (never changed in place)


def _kept(name, dtype):
    """This thread's kept 0-d tensor ``name``, made on first use."""
    buffer = getattr(_local, name, None)
    if buffer is None:
        with torch.inference_mode(False):
            buffer = torch.empty((), dtype=dtype, device="cpu")
        setattr(_local, name, buffer)
    return buffer


def uniform01() -> float:
    """``torch.rand((), dtype=float64).item()``."""
    try:
        return _kept("uniform", DTYPE).uniform_().item()
    except RuntimeError:
        return torch.rand((), dtype=DTYPE).item()


def standard_normal() -> float:
    """``torch.randn((), dtype=float64).item()``."""
    try:
        return _kept("normal", DTYPE).normal_().item()
    except RuntimeError:
        return torch.randn((), dtype=DTYPE).item()


def randint(lo: int, hi: int) -> int:
    """``torch.randint(lo, hi, ()).item()`` for Python ints ``lo`` and ``hi`` (``hi`` excluded)."""
    try:
        return _kept("integer", torch.int64).random_(lo, hi).item()
    except RuntimeError:
        return torch.randint(lo, hi, ()).item()


def standard_gamma_pair(shapes: tuple) -> list:
    """``[torch._standard_gamma(a).item(), torch._standard_gamma(b).item()]`` for float64
    shapes ``(a, b)`` (a tuple of two Python floats), in one call."""
    pair = _PAIRS.get(shapes)
    if pair is None:
        if len(_PAIRS) > 4096:
            _PAIRS.clear()
        pair = _PAIRS[shapes] = torch.tensor(shapes, dtype=DTYPE)
    return torch._standard_gamma(pair).tolist()
