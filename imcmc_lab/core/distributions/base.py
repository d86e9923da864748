"""The public base class of distributions and the helpers a custom distribution uses."""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from ..effects import visit_choice
from ..values import DTYPE, as_real, format_value, values_equal
from ._arith import NEG_INF, numpy_views, scalar
from .reference import NoReferenceMap

__all__ = ["Distribution", "as_param", "as_integer_param", "where_support", "is_integer_valued", "simplex_float64"]

_CONSTANTS = {}    # float -> 0-d float64 tensor: models build distributions from the same
                   # Python constants (normal(0, 10)) on every run; never mutated in place


def as_param(x) -> torch.Tensor:
    """A parameter (a number, a list, a tensor of any dtype) as a float64 tensor.

    Python numbers map to cached 0-d tensors (never modify one in place); a float64
    tensor is returned as it is. Use it in a custom distribution's ``__init__``."""
    if type(x) is float or type(x) is int:
        key = x if x else ("zero", math.copysign(1.0, x))   # keep -0.0 apart from 0.0
        t = _CONSTANTS.get(key)
        if t is None:
            if len(_CONSTANTS) > 4096:
                _CONSTANTS.clear()
            t = _CONSTANTS[key] = torch.tensor(float(x), dtype=DTYPE)
        return t
    return as_real(x)


def as_integer_param(x):
    """An integer parameter as a Python ``int`` where it is one (``3``, ``3.0``, a 0-d
    tensor holding 3); anything else is returned unchanged, so that
    :data:`constraints.integer <imcmc_lab.core.distributions.constraints.integer>` reports
    it when the distribution is used at an address (never truncated)."""
    if type(x) is int:
        return x
    if isinstance(x, torch.Tensor) and x.ndim == 0:
        x = x.item()
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return int(x)
    return x


def where_support(ok: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
    """``lp`` where ``ok``, else ``-inf``; shapes broadcast (gradients kept on the valid part).

    Compute ``lp`` at a harmless stand-in where ``ok`` is false (``torch.where(ok, x, 1)``)
    so that no NaN reaches the gradient."""
    return torch.where(ok, lp, torch.full_like(lp, NEG_INF))


def is_integer_valued(x: torch.Tensor) -> torch.Tensor:
    """Elementwise: a finite whole number (for discrete values given as float tensors)."""
    return (torch.floor(x) == x) & torch.isfinite(x)


def simplex_float64(value):
    """``value`` unchanged, unless it is a lower-precision float tensor or array whose entries
    sum to 1 within that precision: then float64, renormalised onto the float64 simplex (a
    float32 ``[0.2, 0.3, 0.5]`` sums to 1 + 1.5e-8 once its entries are widened exactly)."""
    if not isinstance(value, torch.Tensor):
        if not hasattr(value, "dtype"):      # lists and numbers: read as float64 already
            return value
        value = torch.as_tensor(value)
    if not value.is_floating_point() or value.dtype == DTYPE or not value.ndim:
        return value
    wide = value.to(DTYPE)
    total = wide.sum(-1, keepdim=True)
    tol = 4 * value.shape[-1] * torch.finfo(value.dtype).eps
    if bool(torch.all((total - 1).abs() <= tol)):
        return wide / total
    return wide


# long: the custom-distribution contract (the docstring) and the defaults every subclass inherits
class Distribution:
    """Base class of distributions; subclass it to define your own.

    A subclass sets, as class attributes,

    * ``name`` -- shown in ``repr`` and error messages;
    * ``discrete`` -- ``True`` for counting measure (values are Python ``int``), ``False``
      for Lebesgue measure (values are float64 tensors);
    * ``arg_constraints`` -- ``{attribute name: constraint}`` from
      :mod:`~imcmc_lab.core.distributions.constraints`: :meth:`check_params` checks each
      attribute against its constraint and names what is wrong;
    * ``simplex`` -- ``True`` only for values on the probability simplex (Dirichlet);

    and implements

    * ``__init__(*params)`` -- calls ``super().__init__(*params)`` (the raw parameters,
      compared by :meth:`same_as` to reuse log-densities in ``update``), converts each
      parameter with :func:`as_param` (or :func:`as_integer_param`) into the attribute
      that ``arg_constraints`` names, and sets ``self.event_shape`` for a vector value.
      Raise nothing here for bad values: the engine calls :meth:`check_params` when the
      distribution is used at an address, so the error names the address and line;
    * :meth:`sample` -- one value: a 0-d float64 tensor (continuous scalar), a float64
      tensor of shape ``event_shape`` (continuous vector) or a Python ``int`` (discrete);
    * :meth:`log_prob` -- the log-density (log-mass if discrete) of a value, as a float64
      tensor: ``-inf`` outside the support, never an exception; it broadcasts over leading
      batch dimensions (shape ``batch_shape + event_shape`` in, ``batch_shape`` out), which
      makes ``iid`` one vectorised call; it keeps gradients (HMC and Jacobians use them);
    * optionally :meth:`check_relations` (parameters that must agree, e.g. ``lo < hi``),
      :meth:`sample_n` (``n`` values at once) and :meth:`coerce` (values given by users).

    Parameters must not be modified after construction (distributions are values).
    """

    discrete: bool = False
    #: True if values lie on the probability simplex along the last axis. The
    #: density is then with respect to Lebesgue measure on all but the last
    #: coordinate, so Jacobians use those free coordinates only.
    simplex: bool = False
    name: str = "distribution"
    #: ``{attribute: constraint}``: what each parameter must be (see the class docstring)
    arg_constraints: dict = {}
    __slots__ = ("raw_args", "event_shape")

    #: True if the class draws and scores a batch of parameter sets at once (SMC runs a
    #: generation of particles as one batch): each parameter is as usual or has one extra
    #: leading dimension of length ``n``, and :meth:`sample_batch`, :meth:`batch_problem`
    #: and :meth:`batch_log_prob` treat entry ``i`` of that dimension as particle ``i``'s
    #: own distribution. Declare it only for a class where that holds.
    batchable: bool = False

    _param_checks = ()
    #: argument tuples of Python numbers whose parameters passed :meth:`check_params`
    _valid_numbers = frozenset()
    #: built-in classes: ``() -> (sample(), logpdf(that value) or None)`` in one pass (the
    #: density from the drawn float, no tensor round trip); None: sample, then score
    _sample_logpdf = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._param_checks = tuple(cls.arg_constraints.items())   # iterated once per used choice
        # Models build their distributions from the same constants (normal(0, 10)) on every
        # run: those arguments are checked once per class (a number is a value; only a valid
        # result is kept, so every error is found and worded afresh)
        cls._valid_numbers = set()

    def __init__(self, *raw_args):
        self.raw_args = raw_args
        #: shape of one value: ``()`` for a scalar, ``(d,)`` for a vector
        self.event_shape = ()

    # -- to implement ---------------------------------------------------
    def sample(self):
        """One value, drawn with torch's global generator (see the class docstring for its type)."""
        raise NotImplementedError

    def sample_n(self, n: int) -> torch.Tensor:
        """``n`` iid values stacked into a tensor of shape ``(n,) + event_shape`` (int64 if
        discrete). The default calls :meth:`sample` ``n`` times."""
        values = [self.sample() for _ in range(n)]
        if self.discrete:
            return torch.as_tensor([int(v) for v in values], dtype=torch.int64)
        return torch.stack(values)

    def log_prob(self, value) -> torch.Tensor:
        """Log-density (log-mass if discrete) of ``value`` as a float64 tensor of shape
        ``batch_shape`` for a value of shape ``batch_shape + event_shape``; ``-inf`` off
        the support.

        The built-in distributions implement it as the fast path's float where it applies,
        else :meth:`_torch_log_prob`; a custom distribution simply overrides this method."""
        lp = self._fast_logpdf(value)
        return self._torch_log_prob(value) if lp is None else scalar(lp)

    def _torch_log_prob(self, value) -> torch.Tensor:
        """The log-density in tensor operations (batches, autograd)."""
        raise NotImplementedError

    def _fast_logpdf(self, value):
        """Optional: the log-density as a Python float, computed in Python arithmetic where
        that applies (plain scalars, short vectors, nothing in autograd), else ``None``.
        ``log_prob`` returns it as a tensor, so ``logpdf`` and ``log_prob`` agree exactly."""
        return None

    def _fast_sum_logpdf(self, values):
        """Optional: the sum of the log-densities of a batch of values (``iid``'s log-density)
        as a Python float where a fast path applies, else ``None``."""
        return None

    def check_relations(self):
        """``None`` if the parameters agree with each other, else a sentence saying how they
        do not (e.g. ``lo < hi``). Called after each parameter passed its constraint."""
        return None

    # -- optional: the N(0, 1) reference coordinate (nonparametric HMC, see reference.py) --
    def from_reference(self, z):
        """The value ``F⁻¹(Φ(z))`` of reference coordinate ``z`` (continuous: a differentiable
        tensor, so autograd gives ``dv/dz``; discrete: an ``int``)."""
        raise NoReferenceMap(f"{self.name} has no map from the N(0, 1) reference coordinate")

    def to_reference(self, value):
        """Continuous: the coordinate ``Φ⁻¹(F(value))`` of ``value`` (inverse of :meth:`from_reference`)."""
        raise NoReferenceMap(f"{self.name} has no map to the N(0, 1) reference coordinate")

    def reference_interval(self, value):
        """Discrete: ``(z_lo, z_hi)``, the coordinates ``z_lo < z <= z_hi`` that map to ``value``."""
        raise NoReferenceMap(f"{self.name} has no map to the N(0, 1) reference coordinate")

    # -- shared ---------------------------------------------------------
    def check_params(self):
        """``None`` if the parameters are valid, else a sentence saying what is wrong: each
        parameter against its declared constraint, then :meth:`check_relations`."""
        raw = self.raw_args
        numbers = True
        for a in raw:
            if type(a) is not float and type(a) is not int:
                numbers = False
                break
        if numbers and raw in self._valid_numbers:
            return None
        for name, constraint in self._param_checks:
            problem = constraint.problem(name, getattr(self, name))
            if problem is not None:
                return problem
        problem = self.check_relations()
        if problem is None and numbers:
            if len(self._valid_numbers) > 4096:
                self._valid_numbers.clear()
            self._valid_numbers.add(raw)
        return problem

    def sample_batch(self, n: int) -> torch.Tensor:
        """``batchable`` classes: ``n`` values, shape ``(n,) + event_shape``, value ``i`` drawn
        from the distribution with the parameters' entry ``i`` (or the shared parameter)."""
        raise NotImplementedError

    def batch_log_prob(self, value) -> np.ndarray:
        """``batchable`` classes: the log-densities of a batch (``value`` batched or shared) as
        a float64 NumPy array of shape ``(n,)`` or ``()``, outside autograd."""
        with torch.no_grad():
            return self.log_prob(value).numpy()

    def batch_problem(self):
        """:meth:`check_params` for parameters with a leading batch dimension (``batchable``
        classes): ``None``, or ``(i, sentence)`` for the first particle ``i`` whose parameters
        are invalid, worded as :meth:`check_params` words it for that particle alone."""
        return _batch_problem(self)

    def logpdf(self, value) -> float:
        """``log_prob(value).item()`` without the tensor where a fast path applies: the
        log-density a trace stores (the engine calls it outside autograd)."""
        lp = self._fast_logpdf(value)
        return self.log_prob(value).item() if lp is None else lp

    def coerce(self, value):
        """Convert a user-given value (constraint) to this distribution's convention; a
        ``ValueError`` saying why if it cannot be one of its values."""
        if self.discrete:
            return as_int_value(value, self.name)
        value = as_real(value)
        # torch.Size equals a tuple; tuple() for an event_shape given as a list
        if value.shape != self.event_shape and tuple(value.shape) != tuple(self.event_shape):
            raise ValueError(
                f"{self.name} values have shape {tuple(self.event_shape)}, "
                f"got a value of shape {tuple(value.shape)}"
            )
        return value

    @property
    def dim(self) -> int:
        """Number of real coordinates of one value (0 for discrete)."""
        if self.discrete:
            return 0
        return int(math.prod(self.event_shape))

    def same_as(self, other) -> bool:
        """Same family and the same argument values (enables incremental reuse)."""
        if type(self) is not type(other):
            return False
        for a, b in zip(self.raw_args, other.raw_args):
            # the hot path of update: identical objects and equal Python numbers
            if a is b or (type(a) is float and type(b) is float and a == b):
                continue
            if not values_equal(a, b):
                return False
        return len(self.raw_args) == len(other.raw_args)

    #: ``dist @ address`` inside a generative function: a traced random choice
    #: (the effect itself, not a method calling it: one call less per choice)
    __matmul__ = visit_choice

    def __repr__(self):
        return f"{self.name}({', '.join(format_value(a) for a in self.raw_args)})"


def as_int_value(value, name):
    """A discrete value given by a user as a Python ``int``; a ``ValueError`` if it is not one."""
    if type(value) is int:     # the common case
        return value
    if isinstance(value, torch.Tensor) and value.ndim == 0:
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    raise ValueError(f"{name} is discrete: its values are integers, got {value!r}")


def _batch_problem(dist):
    """:meth:`Distribution.batch_problem`."""
    batched = []
    for name, constraint in dist._param_checks:
        p = getattr(dist, name)
        if isinstance(p, torch.Tensor) and p.ndim == constraint.event_dim + 1:
            batched.append((name, constraint, p))
            continue
        problem = constraint.problem(name, p)
        if problem is not None:
            return 0, problem
    for name, constraint, p in batched:
        holds = getattr(constraint, "holds_elementwise", None)
        if holds is not None and p.ndim == 1:
            view = numpy_views(p)
            ok = np.asarray(holds(view[0] if view is not None else p))
            if ok.all():
                continue
            i = int(np.flatnonzero(~ok)[0])
            return i, constraint.problem(name, p[i])
        for i in range(p.shape[0]):
            problem = constraint.problem(name, p[i])
            if problem is not None:
                return i, problem
    if type(dist).check_relations is not Distribution.check_relations:
        raise TypeError(f"{dist.name}: batch_problem does not check relations between batched "
                        f"parameters; override it")
    return None
