"""Parameter constraints, declared by each distribution (like ``torch.distributions``'
``arg_constraints``) and checked by one routine, :meth:`Distribution.check_params`.

A constraint says what one parameter must be: its number of dimensions
(``event_dim``: 0 a scalar, 1 a vector, 2 a matrix) and its values. Its
:meth:`Constraint.problem` returns ``None`` for a valid parameter, else a sentence
naming the parameter and what it got; the engine adds the address and the line::

    from imcmc_lab.core.distributions import Distribution, constraints

    class Laplace(Distribution):
        arg_constraints = {"loc": constraints.real, "scale": constraints.positive}

A parameter may be a tensor (what :func:`as_param` makes of a number or a list) or a
plain Python number.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from ._arith import PY_MAX_LEN

__all__ = ["Constraint", "Interval", "Integer", "Simplex", "PositiveDefinite", "interval", "real", "positive",
           "nonnegative", "probability", "positive_probability", "real_vector", "positive_vector",
           "integer", "nonnegative_integer", "simplex", "positive_definite", "cholesky"]

_SHAPE_WORDS = {0: "a scalar (a number or a 0-d tensor)", 1: "a vector", 2: "a matrix"}


class Constraint:
    """What one parameter must be. Subclasses implement :meth:`values_problem`."""

    #: dimensions of the parameter: 0 a scalar, 1 a vector, 2 a matrix
    event_dim: int = 0
    #: a vector or matrix parameter must have at least one entry
    nonempty: bool = False

    def problem(self, name: str, value):
        """``None`` if ``value`` satisfies the constraint, else a sentence saying what is wrong."""
        if type(value) is int or type(value) is float:     # before the isinstance tests: cheaper
            return self.shape_problem(name, ()) if self.event_dim else self.scalar_problem(name, value)
        if isinstance(value, torch.Tensor):
            if value.ndim != self.event_dim or (self.nonempty and value.numel() == 0):
                return self.shape_problem(name, tuple(value.shape))
            if not self.event_dim:
                return self.scalar_problem(name, value.item())
            return self.values_problem(name, value)
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            if self.event_dim:
                return self.shape_problem(name, ())
            return self.scalar_problem(name, value)
        return f"{name} must be {_SHAPE_WORDS[self.event_dim]}, got {value!r}"

    def shape_problem(self, name, shape):
        words = _SHAPE_WORDS[self.event_dim]
        if self.nonempty:
            words = "a non-empty " + words[2:]
        return f"{name} must be {words}, got shape {shape}"

    def scalar_problem(self, name, v):
        """A 0-d parameter as a Python number."""
        raise NotImplementedError

    def values_problem(self, name, x: torch.Tensor):
        """A tensor of the right number of dimensions."""
        raise NotImplementedError


class Interval(Constraint):
    """Every entry in an interval; ``description`` completes "``name`` must be ...".

    ``real`` (finite) is the interval ``(-inf, inf)``, ``positive`` is ``(0, inf)``."""

    def __init__(self, lo, hi, lo_closed, hi_closed, description, event_dim=0, nonempty=False):
        self.lo, self.hi, self.lo_closed, self.hi_closed = lo, hi, lo_closed, hi_closed
        self.description, self.event_dim, self.nonempty = description, event_dim, nonempty

    def holds(self, v) -> bool:
        """One Python number (``False`` for a NaN)."""
        return (v > self.lo or (self.lo_closed and v == self.lo)) and \
            (v < self.hi or (self.hi_closed and v == self.hi))

    def holds_elementwise(self, x: torch.Tensor) -> torch.Tensor:
        """Whether each entry of ``x`` (a tensor or a NumPy array) lies in the interval (False
        for NaN), as a bool array of the same kind."""
        if self.lo == -math.inf and self.hi == math.inf and not (self.lo_closed or self.hi_closed):
            return torch.isfinite(x) if isinstance(x, torch.Tensor) else np.isfinite(x)
        return (x >= self.lo if self.lo_closed else x > self.lo) & (x <= self.hi if self.hi_closed else x < self.hi)

    def problem(self, name, value):
        # the common cases inlined (this runs for every parameter of every new choice)
        if type(value) is torch.Tensor and value.ndim == self.event_dim:
            if not value.ndim:
                v = value.item()
                if (v > self.lo or (self.lo_closed and v == self.lo)) and \
                        (v < self.hi or (self.hi_closed and v == self.hi)):
                    return None
                return f"{name} must be {self.description}, got {v}"
            if value.ndim == 1 and 0 < value.shape[0] <= PY_MAX_LEN:
                values = value.tolist()
                total = sum(values)     # a NaN makes it NaN; without one, min and max are exact
                if total == total and self.holds(min(values)) and self.holds(max(values)):
                    return None
                return f"{name} must be {self.description}, got {values}"
        return super().problem(name, value)

    def scalar_problem(self, name, v):
        return None if self.holds(v) else f"{name} must be {self.description}, got {v}"

    def values_problem(self, name, x):
        # short vectors are handled by problem(); here matrices, long and empty vectors
        ok = bool(torch.all((x >= self.lo if self.lo_closed else x > self.lo)
                            & (x <= self.hi if self.hi_closed else x < self.hi)))
        return None if ok else f"{name} must be {self.description}, got {x.tolist()}"

    def vector(self, nonempty=False) -> Interval:
        """The same interval for every entry of a vector parameter."""
        return Interval(self.lo, self.hi, self.lo_closed, self.hi_closed, self.description, 1, nonempty)


def interval(lo, hi, lo_closed=True, hi_closed=True, description=None) -> Interval:
    """A scalar parameter in an interval, e.g. ``interval(0, 1, lo_closed=False)`` for (0, 1]."""
    if description is None:
        description = f"in {'[' if lo_closed else '('}{lo}, {hi}{']' if hi_closed else ')'}"
    return Interval(lo, hi, lo_closed, hi_closed, description)


class Integer(Constraint):
    """A whole number at least ``lo`` (an integer-valued float or 0-d tensor counts; use
    :func:`~imcmc_lab.core.distributions.as_integer_param` to keep it as an ``int``)."""

    def __init__(self, lo=-math.inf):
        self.lo = lo

    def scalar_problem(self, name, v):
        if isinstance(v, float) and not v.is_integer():
            return f"{name} must be an integer, got {v}"
        if not v >= self.lo:
            return f"{name} must be an integer >= {self.lo}, got {v}"
        return None


class Simplex(Constraint):
    """A non-empty vector of probabilities: entries ``>= 0`` summing to 1 (within ``tol``)."""

    event_dim, nonempty = 1, True

    def __init__(self, tol=1e-6):
        self.tol = tol

    def values_problem(self, name, x):
        values = x.tolist()
        total = sum(values)
        if not (total == total and min(values) >= 0 and max(values) < math.inf):
            return f"{name} must be >= 0, got {values}"
        if not abs(total - 1) <= self.tol:
            return f"{name} must be >= 0 and sum to 1, got {values} (sum {total!r})"
        return None


_LAST_FACTOR = (None, None, False)   # (matrix, factor, ok): see cholesky()


def cholesky(matrix: torch.Tensor):
    """``(L, ok)``: the lower Cholesky factor of ``matrix`` and whether it exists.

    Remembers the last matrix by identity, so checking a covariance and then using it
    (check_params, then sample or log_prob) factors it once."""
    global _LAST_FACTOR
    last = _LAST_FACTOR
    if last[0] is matrix:
        return last[1], last[2]
    factor, info = torch.linalg.cholesky_ex(matrix)
    ok = int(info) == 0
    _LAST_FACTOR = (matrix, factor, ok)
    return factor, ok


class PositiveDefinite(Constraint):
    """A symmetric positive definite square matrix (its Cholesky factor exists)."""

    event_dim = 2

    def values_problem(self, name, x):
        if x.shape[0] != x.shape[1]:
            return f"{name} must be a square matrix, got shape {tuple(x.shape)}"
        if not cholesky(x)[1]:
            return f"{name} is not symmetric positive definite (Cholesky failed)"
        return None


real = Interval(-math.inf, math.inf, False, False, "finite")
positive = Interval(0, math.inf, False, False, "finite and > 0")
nonnegative = Interval(0, math.inf, True, False, "finite and >= 0")
probability = Interval(0, 1, True, True, "a probability in [0, 1]")
positive_probability = interval(0, 1, lo_closed=False)          # (0, 1]
real_vector = real.vector()
positive_vector = positive.vector(nonempty=True)
integer = Integer()
nonnegative_integer = Integer(0)
simplex = Simplex()
positive_definite = PositiveDefinite()
