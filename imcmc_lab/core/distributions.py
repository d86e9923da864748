"""Primitive distributions, torch-backed.

Each distribution is a small immutable object built by a constructor such as
``normal(0.0, 1.0)`` and used at an address inside a generative function as
``normal(0.0, 1.0) @ "x"``. It declares

* ``discrete`` -- counting measure (``True``) or Lebesgue measure (``False``);
* ``event_shape`` -- ``()`` for a scalar, ``(d,)`` for a vector value, whose
  ``d`` coordinates each enter a Jacobian.

Values follow :mod:`imcmc_lab.core.values`: float64 tensors for continuous
choices, Python ``int`` (``bool`` for :func:`bernoulli`) for discrete scalars.
A value outside the support has log-density ``-inf`` -- never an exception.
``log_prob`` broadcasts over leading batch dimensions (it reduces only the
event dimension), which is what makes :func:`iid` one vectorised call.
A trace stores log-densities as Python floats (:meth:`Distribution.logpdf`):
for plain scalars and short vectors outside autograd they are computed with
``math``, which costs less than the tensor operations it replaces.

Invalid parameters are reported by :meth:`Distribution.check_params`, which the
engine calls when the distribution is used at an address, so the error can name
that address.
"""

from __future__ import annotations

import math
import numbers
import operator

import torch

from .effects import visit_choice
from .values import DTYPE, as_real, float64_vector as _vector, values_equal

__all__ = [
    "Distribution", "normal", "gamma", "inv_gamma", "beta", "uniform", "uniform_discrete",
    "bernoulli", "categorical", "poisson", "poisson_plus_one", "geometric", "exponential",
    "lognormal", "dirichlet", "mvnormal", "neg_binomial", "mixture_of_normals", "iid",
]

_NEG_INF = float("-inf")
_LOG_2PI = math.log(2 * math.pi)
_LOG2_E = 1 / math.log(2)
_SQRT_HALF_LOG2_E = math.sqrt(0.5 * _LOG2_E)


_CONSTANTS = {}    # float -> 0-d float64 tensor: models build distributions from the same
                   # Python constants (normal(0, 10)) on every run; never mutated in place


def _real(x):
    if type(x) is float or type(x) is int:
        key = x if x else ("zero", math.copysign(1.0, x))   # keep -0.0 apart from 0.0
        t = _CONSTANTS.get(key)
        if t is None:
            if len(_CONSTANTS) > 4096:
                _CONSTANTS.clear()
            t = _CONSTANTS[key] = torch.tensor(float(x), dtype=DTYPE)
        return t
    return as_real(x)


def _plain_scalars(*tensors):
    """All 0-d and outside autograd: log-densities can then be computed with ``math``."""
    for t in tensors:      # a loop, not all(...): this runs once per scored choice
        if t.ndim or t.requires_grad:
            return False
    return True


#: Vectors up to this length are checked and scored in Python arithmetic: below it, a
#: ``.tolist()`` and a loop cost less than the several tensor operations they replace.
_PY_MAX_LEN = 64


def _short_vector(t):
    """A 1-d tensor short enough for Python arithmetic."""
    return t.ndim == 1 and t.shape[0] <= _PY_MAX_LEN


def _all_positive_finite(values) -> bool:
    """Every value in (0, inf), with C-level passes instead of a generator (a NaN makes the
    sum NaN; without one, min and max are exact)."""
    total = sum(values)
    return total == total and min(values) > 0 and max(values) < math.inf


def _all_nonnegative(values) -> bool:
    total = sum(values)
    return not values or (total == total and min(values) >= 0)


def _all_nonnegative_finite(values) -> bool:
    total = sum(values)
    return total == total and min(values) >= 0 and max(values) < math.inf


def _all_finite(values) -> bool:
    total = sum(values)
    return total == total and min(values) > -math.inf and max(values) < math.inf


def _scalar(v: float) -> torch.Tensor:
    # torch.scalar_tensor costs half of torch.tensor
    return torch.scalar_tensor(v, dtype=DTYPE)


def _where_support(ok, lp):
    """``lp`` where ``ok``, else ``-inf`` (keeps gradients on the valid part)."""
    return torch.where(ok, lp, torch.full_like(lp, _NEG_INF))


class Distribution:
    """Base class. Subclasses set ``discrete`` and implement the methods below."""

    discrete: bool = False
    #: True if values lie on the probability simplex along the last axis. The
    #: density is then with respect to Lebesgue measure on all but the last
    #: coordinate, so Jacobians use those free coordinates only.
    simplex: bool = False
    name: str = "distribution"
    __slots__ = ("raw_args", "event_shape")

    def __init__(self, *raw_args):
        self.raw_args = raw_args
        self.event_shape = ()

    # -- to implement ---------------------------------------------------
    def sample(self):
        """One value (see the module docstring for its type)."""
        raise NotImplementedError

    def sample_n(self, n: int) -> torch.Tensor:
        """``n`` iid values stacked into a tensor of shape ``(n,) + event_shape``."""
        values = [self.sample() for _ in range(n)]
        if self.discrete:
            return torch.as_tensor([int(v) for v in values], dtype=torch.int64)
        return torch.stack(values)

    def log_prob(self, value) -> torch.Tensor:
        """Log-density (log-mass if discrete) as a float64 tensor; ``-inf`` off support.

        The fast path's float where it applies, else :meth:`_torch_log_prob`; a
        subclass implements those two, or overrides this method whole."""
        lp = self._fast_logpdf(value)
        return self._torch_log_prob(value) if lp is None else _scalar(lp)

    def _torch_log_prob(self, value) -> torch.Tensor:
        """The log-density in tensor operations (batches, autograd)."""
        raise NotImplementedError

    def _fast_logpdf(self, value):
        """Optional: the log-density as a Python float, computed in Python arithmetic where
        that applies (plain scalars, short vectors, nothing in autograd), else ``None``.
        ``log_prob`` returns it as a tensor, so ``logpdf`` and ``log_prob`` agree exactly."""
        return None

    def check_params(self):
        """``None`` if the parameters are valid, else a sentence saying what is wrong."""
        return None

    # -- shared ---------------------------------------------------------
    def logpdf(self, value) -> float:
        """``log_prob(value).item()`` without the tensor where a fast path applies: the
        log-density a trace stores (the engine calls it outside autograd)."""
        lp = self._fast_logpdf(value)
        return self.log_prob(value).item() if lp is None else lp

    def coerce(self, value):
        """Convert a user-given value (constraint) to this distribution's convention."""
        if self.discrete:
            return _as_int(value, self)
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

    def __matmul__(self, address):
        # ``dist @ address`` inside a generative function: a traced random choice.
        return visit_choice(self, address)

    def __repr__(self):
        from .values import format_value

        return f"{self.name}({', '.join(format_value(a) for a in self.raw_args)})"


def _as_int(value, dist):
    if type(value) is int and dist.name != "bernoulli":     # the common case
        return value
    if isinstance(value, bool):
        return value if dist.name == "bernoulli" else int(value)
    if isinstance(value, torch.Tensor) and value.ndim == 0:
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, numbers.Integral):
        # bernoulli values are bools; another integer stays one (outside the support: -inf)
        if dist.name == "bernoulli" and value in (0, 1):
            return bool(value)
        return int(value)
    raise ValueError(f"{dist.name} is discrete: its values are integers, got {value!r}")


def _check_positive(name, x):
    if x.ndim == 0:                    # the common case, without four tensor operations
        v = x.item()
        return None if 0 < v < math.inf else f"{name} must be finite and > 0, got {v}"
    if _short_vector(x) and x.shape[0]:
        values = x.tolist()
        return None if _all_positive_finite(values) else f"{name} must be finite and > 0, got {values}"
    if not bool(torch.all(torch.isfinite(x))) or not bool(torch.all(x > 0)):
        return f"{name} must be finite and > 0, got {x.tolist()}"
    return None


def _check_finite(name, x):
    if x.ndim == 0:
        v = x.item()
        return None if math.isfinite(v) else f"{name} must be finite, got {v}"
    if _short_vector(x) and x.shape[0]:
        values = x.tolist()
        return None if _all_finite(values) else f"{name} must be finite, got {values}"
    if not bool(torch.all(torch.isfinite(x))):
        return f"{name} must be finite, got {x.tolist()}"
    return None


def _check_prob(name, p):
    if p.ndim == 0:
        v = p.item()
        return None if 0 <= v <= 1 else f"{name} must be a probability in [0, 1], got {v}"
    if not bool(torch.all((p >= 0) & (p <= 1))):
        return f"{name} must be a probability in [0, 1], got {p.tolist()}"
    return None


# ---------------------------------------------------------------------------
# continuous, scalar
# ---------------------------------------------------------------------------
class Normal(Distribution):
    name = "normal"
    __slots__ = ("mean", "std")

    def __init__(self, mean, std):
        # Distribution.__init__ inlined: a model builds one per choice on every run
        self.raw_args, self.event_shape = (mean, std), ()
        self.mean, self.std = _real(mean), _real(std)

    def check_params(self):
        return _check_finite("mean", self.mean) or _check_positive("std", self.std)

    def sample(self):
        z = torch.randn((), dtype=DTYPE)
        if _plain_scalars(self.mean, self.std):   # the same two roundings as in torch
            return _scalar(self.mean.item() + self.std.item() * z.item())
        return self.mean + self.std * z

    def sample_n(self, n):
        return self.mean + self.std * torch.randn((n,), dtype=DTYPE)

    def _fast_logpdf(self, x):
        if _plain_scalars(x, self.mean, self.std) and self.std.item() > 0:
            z = (x.item() - self.mean.item()) / self.std.item()
            return -0.5 * z * z - math.log(self.std.item()) - 0.5 * _LOG_2PI
        return None

    def _torch_log_prob(self, x):
        z = (x - self.mean) / self.std
        return -0.5 * z * z - torch.log(self.std) - 0.5 * _LOG_2PI


class Gamma(Distribution):
    """Gamma(shape, rate): density ∝ x^(shape-1) exp(-rate x) on (0, ∞)."""

    name = "gamma"
    __slots__ = ("shape", "rate")

    def __init__(self, shape, rate):
        super().__init__(shape, rate)
        self.shape, self.rate = _real(shape), _real(rate)

    def check_params(self):
        return _check_positive("shape", self.shape) or _check_positive("rate", self.rate)

    def sample(self):
        return torch._standard_gamma(self.shape) / self.rate

    def sample_n(self, n):
        return torch._standard_gamma(self.shape.expand(n).contiguous()) / self.rate

    def log_prob(self, x):
        ok = (x > 0) & torch.isfinite(x)
        xs = torch.where(ok, x, torch.ones_like(x))
        lp = (self.shape * torch.log(self.rate) - torch.lgamma(self.shape)
              + (self.shape - 1) * torch.log(xs) - self.rate * xs)
        return _where_support(ok, lp)


class InvGamma(Distribution):
    """Inverse gamma(shape, scale): density ∝ x^(-shape-1) exp(-scale / x) on (0, ∞)."""

    name = "inv_gamma"
    __slots__ = ("shape", "scale")

    def __init__(self, shape, scale):
        self.raw_args, self.event_shape = (shape, scale), ()    # as in Normal
        self.shape, self.scale = _real(shape), _real(scale)

    def check_params(self):
        return _check_positive("shape", self.shape) or _check_positive("scale", self.scale)

    def sample(self):
        g = torch._standard_gamma(self.shape)
        if _plain_scalars(self.shape, self.scale):
            return _scalar(self.scale.item() / g.item())
        return self.scale / g

    def sample_n(self, n):
        return self.scale / torch._standard_gamma(self.shape.expand(n).contiguous())

    def _fast_logpdf(self, x):
        if not _plain_scalars(x, self.shape, self.scale):
            return None
        v, a, b = x.item(), self.shape.item(), self.scale.item()
        if not (a > 0 and b > 0):      # invalid parameters: torch's conventions apply
            return None
        if not v > 0:
            return _NEG_INF
        return a * math.log(b) - math.lgamma(a) - (a + 1) * math.log(v) - b / v

    def _torch_log_prob(self, x):
        ok = x > 0
        xs = torch.where(ok, x, torch.ones_like(x))
        lp = (self.shape * torch.log(self.scale) - torch.lgamma(self.shape)
              - (self.shape + 1) * torch.log(xs) - self.scale / xs)
        return _where_support(ok, lp)


class Beta(Distribution):
    name = "beta"
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        super().__init__(a, b)
        self.a, self.b = _real(a), _real(b)

    def check_params(self):
        return _check_positive("a", self.a) or _check_positive("b", self.b)

    def sample(self):
        x = torch._standard_gamma(self.a)
        y = torch._standard_gamma(self.b)
        if _plain_scalars(self.a, self.b):
            x, y = x.item(), y.item()
            return _scalar(x / (x + y))
        return x / (x + y)

    def _fast_logpdf(self, x):
        if not _plain_scalars(x, self.a, self.b):
            return None
        v, a, b = x.item(), self.a.item(), self.b.item()
        if not (a > 0 and b > 0):
            return None
        if not 0 < v < 1:
            return _NEG_INF
        return ((a - 1) * math.log(v) + (b - 1) * math.log1p(-v)
                + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b))

    def _torch_log_prob(self, x):
        ok = (x > 0) & (x < 1)
        xs = torch.where(ok, x, torch.full_like(x, 0.5))
        lp = ((self.a - 1) * torch.log(xs) + (self.b - 1) * torch.log1p(-xs)
              + torch.lgamma(self.a + self.b) - torch.lgamma(self.a) - torch.lgamma(self.b))
        return _where_support(ok, lp)


class Uniform(Distribution):
    name = "uniform"
    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        super().__init__(lo, hi)
        self.lo, self.hi = _real(lo), _real(hi)

    def check_params(self):
        err = _check_finite("lo", self.lo) or _check_finite("hi", self.hi)
        if err is None and not bool(self.lo < self.hi):
            err = f"needs lo < hi, got lo={self.lo.item()}, hi={self.hi.item()}"
        return err

    def sample(self):
        return self.lo + (self.hi - self.lo) * torch.rand((), dtype=DTYPE)

    def sample_n(self, n):
        return self.lo + (self.hi - self.lo) * torch.rand((n,), dtype=DTYPE)

    def log_prob(self, x):
        ok = (x >= self.lo) & (x <= self.hi)
        lp = -torch.log(self.hi - self.lo) + 0 * x
        return _where_support(ok, lp)


class Exponential(Distribution):
    name = "exponential"
    __slots__ = ("rate",)

    def __init__(self, rate):
        super().__init__(rate)
        self.rate = _real(rate)

    def check_params(self):
        return _check_positive("rate", self.rate)

    def sample(self):
        return -torch.log1p(-torch.rand((), dtype=DTYPE)) / self.rate

    def log_prob(self, x):
        ok = x >= 0
        return _where_support(ok, torch.log(self.rate) - self.rate * x)


class LogNormal(Distribution):
    name = "lognormal"
    __slots__ = ("mu", "sigma")

    def __init__(self, mu, sigma):
        super().__init__(mu, sigma)
        self.mu, self.sigma = _real(mu), _real(sigma)

    def check_params(self):
        return _check_finite("mu", self.mu) or _check_positive("sigma", self.sigma)

    def sample(self):
        return torch.exp(self.mu + self.sigma * torch.randn((), dtype=DTYPE))

    def log_prob(self, x):
        ok = x > 0
        xs = torch.where(ok, x, torch.ones_like(x))
        lx = torch.log(xs)
        z = (lx - self.mu) / self.sigma
        return _where_support(ok, -0.5 * z * z - torch.log(self.sigma) - lx - 0.5 * _LOG_2PI)


# ---------------------------------------------------------------------------
# continuous, vector
# ---------------------------------------------------------------------------
class Dirichlet(Distribution):
    """Dirichlet(alpha) on the simplex; the value is the full vector of ``k`` weights.

    The density is with respect to Lebesgue measure on the first ``k - 1``
    weights, so a value contributes ``k - 1`` coordinates to Jacobians (the last
    weight is ``1 - sum`` of the others). Gen counts ``k``, which makes
    ``|det J|`` depend on how a transform's formula behaves off the simplex.
    """

    name = "dirichlet"
    simplex = True
    __slots__ = ("alpha",)

    def __init__(self, alpha):
        super().__init__(alpha)
        self.alpha = _real(alpha)
        self.event_shape = tuple(self.alpha.shape)

    def check_params(self):
        if self.alpha.ndim != 1 or self.alpha.shape[0] < 1:
            return f"alpha must be a non-empty vector, got shape {tuple(self.alpha.shape)}"
        return _check_positive("alpha", self.alpha)

    def sample(self):
        g = torch._standard_gamma(self.alpha)
        return g / g.sum()

    def _fast_logpdf(self, x):
        alpha = self.alpha
        if not (_short_vector(x) and _short_vector(alpha)) or x.requires_grad or alpha.requires_grad:
            return None
        constants = _dirichlet_constants(alpha.tolist())
        if constants is None:        # invalid alpha: torch's conventions apply
            return None
        a_minus_1, lgamma_total, lgamma_parts = constants
        w = x.tolist()
        # the same support test as log_prob's (the sum may differ from torch's in the last bit;
        # a NaN makes the sum NaN)
        if len(w) != len(a_minus_1) or not w or not min(w) > 0 or not abs(sum(w) - 1) < 1e-8:
            return _NEG_INF
        return (sum(map(operator.mul, a_minus_1, map(math.log, w))) + lgamma_total) - lgamma_parts

    def _torch_log_prob(self, x):
        if x.shape[-1:] != self.alpha.shape:     # a vector of another length: outside the support
            return torch.full(x.shape[:-1], _NEG_INF, dtype=DTYPE)
        ok = torch.all(x > 0, dim=-1) & (torch.abs(x.sum(-1) - 1) < 1e-8)
        xs = torch.where(x > 0, x, torch.ones_like(x))
        lp = ((self.alpha - 1) * torch.log(xs)).sum(-1) + torch.lgamma(self.alpha.sum()) \
            - torch.lgamma(self.alpha).sum()
        return _where_support(ok, lp)


_DIRICHLET_CONSTANTS = {}   # tuple(alpha) -> (alpha - 1, lgamma(sum alpha), sum lgamma(alpha))


def _dirichlet_constants(a: list):
    """What a Dirichlet log-density needs of ``alpha`` besides the value; ``None`` if ``alpha``
    is not a non-empty list of finite positive numbers. Models rebuild the same alpha
    (``torch.full((k,), 2.0)``) on every run: the lgamma terms are computed once."""
    key = tuple(a)
    constants = _DIRICHLET_CONSTANTS.get(key)
    if constants is None:
        if not a or not _all_positive_finite(a):
            return None
        if len(_DIRICHLET_CONSTANTS) > 256:
            _DIRICHLET_CONSTANTS.clear()
        constants = _DIRICHLET_CONSTANTS[key] = (
            [ai - 1 for ai in a], math.lgamma(sum(a)), sum(map(math.lgamma, a)))
    return constants


class MvNormal(Distribution):
    name = "mvnormal"
    __slots__ = ("mean", "cov", "_chol")

    def __init__(self, mean, cov):
        super().__init__(mean, cov)
        self.mean, self.cov = _real(mean), _real(cov)
        self.event_shape = tuple(self.mean.shape)
        self._chol = None

    def check_params(self):
        d = self.mean.shape[0] if self.mean.ndim == 1 else -1
        if self.mean.ndim != 1 or tuple(self.cov.shape) != (d, d):
            return (f"mean must be a vector (d,) and cov a (d, d) matrix, got "
                    f"{tuple(self.mean.shape)} and {tuple(self.cov.shape)}")
        chol, info = torch.linalg.cholesky_ex(self.cov)
        if int(info) != 0:
            return "cov is not symmetric positive definite (Cholesky failed)"
        self._chol = chol
        return None

    def _cholesky(self):
        if self._chol is None:
            self._chol = torch.linalg.cholesky(self.cov)
        return self._chol

    def sample(self):
        return self.mean + self._cholesky() @ torch.randn(self.mean.shape, dtype=DTYPE)

    def log_prob(self, x):
        L = self._cholesky()
        diff = (x - self.mean).unsqueeze(-1)
        sol = torch.linalg.solve_triangular(L, diff, upper=False).squeeze(-1)
        d = self.mean.shape[0]
        return -0.5 * (sol * sol).sum(-1) - torch.log(torch.diagonal(L)).sum() - 0.5 * d * _LOG_2PI


# ---------------------------------------------------------------------------
# discrete
# ---------------------------------------------------------------------------
def _is_int_tensor(x):
    return (torch.floor(x) == x) & torch.isfinite(x)


class Bernoulli(Distribution):
    """Bernoulli(p): values ``True`` (probability p) and ``False``."""

    discrete = True
    name = "bernoulli"
    __slots__ = ("p",)

    def __init__(self, p):
        super().__init__(p)
        self.p = _real(p)

    def check_params(self):
        return _check_prob("p", self.p)

    def sample(self):
        return torch.rand((), dtype=DTYPE).item() < self.p.item()

    def sample_n(self, n):
        return (torch.rand((n,), dtype=DTYPE) < self.p).to(torch.int64)

    def _fast_logpdf(self, x):
        if type(x) is bool and self.p.ndim == 0 and not self.p.requires_grad:
            p = self.p.item()
            q = p if x else 1.0 - p
            return math.log(q) if q > 0 else _NEG_INF
        return None

    def _torch_log_prob(self, x):
        x = _real(x)
        ok = (x == 0) | (x == 1)
        lp = torch.where(x == 1, torch.log(self.p), torch.log1p(-self.p))
        return _where_support(ok, lp)


class UniformDiscrete(Distribution):
    """Uniform on the integers ``lo, lo+1, ..., hi`` (both ends included)."""

    discrete = True
    name = "uniform_discrete"
    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        super().__init__(lo, hi)
        self.lo, self.hi = int(lo), int(hi)

    def check_params(self):
        if self.lo > self.hi:
            return f"needs lo <= hi, got lo={self.lo}, hi={self.hi}"
        return None

    def sample(self):
        return torch.randint(self.lo, self.hi + 1, ()).item()

    def sample_n(self, n):
        return torch.randint(self.lo, self.hi + 1, (n,))

    def _fast_logpdf(self, x):
        if type(x) is int:
            return -math.log(self.hi - self.lo + 1) if self.lo <= x <= self.hi else _NEG_INF
        return None

    def log_prob(self, x):
        if type(x) is int:
            return _real(self._fast_logpdf(x))    # few distinct values: cached tensors
        x = _real(x)
        ok = (x >= self.lo) & (x <= self.hi) & _is_int_tensor(x)
        return _where_support(ok, torch.full_like(x, -math.log(self.hi - self.lo + 1)))


class Categorical(Distribution):
    """Categorical(probs): values ``0, ..., len(probs) - 1`` (0-based, like Python)."""

    discrete = True
    name = "categorical"
    __slots__ = ("probs",)

    def __init__(self, probs):
        super().__init__(probs)
        self.probs = _real(probs)

    def check_params(self):
        if self.probs.ndim != 1 or self.probs.shape[0] < 1:
            return f"probs must be a non-empty vector, got shape {tuple(self.probs.shape)}"
        if not bool(torch.all(self.probs >= 0)) or abs(float(self.probs.sum()) - 1) > 1e-6:
            return f"probs must be >= 0 and sum to 1, got {self.probs.tolist()}"
        return None

    def sample(self):
        return int(torch.multinomial(self.probs, 1))

    def sample_n(self, n):
        return torch.multinomial(self.probs, n, replacement=True)

    def log_prob(self, x):
        x = _real(x)
        k = self.probs.shape[0]
        ok = (x >= 0) & (x < k) & _is_int_tensor(x)
        idx = torch.where(ok, x, torch.zeros_like(x)).to(torch.int64)
        return _where_support(ok, torch.log(self.probs)[idx])


class Poisson(Distribution):
    discrete = True
    name = "poisson"
    __slots__ = ("rate", "shift")

    def __init__(self, rate, shift=0):
        super().__init__(rate)
        self.rate = _real(rate)
        self.shift = shift

    def check_params(self):
        if self.rate.ndim == 0:
            ok = 0 <= self.rate.item() < math.inf
        else:
            ok = bool(torch.all(torch.isfinite(self.rate))) and bool(torch.all(self.rate >= 0))
        return None if ok else f"rate must be finite and >= 0, got {self.rate.tolist()}"

    def sample(self):
        return int(torch.poisson(self.rate).item()) + self.shift

    def sample_n(self, n):
        return torch.poisson(self.rate.expand(n)).to(torch.int64) + self.shift

    def _fast_logpdf(self, x):
        if type(x) is not int or self.rate.ndim != 0 or self.rate.requires_grad:
            return None
        k, r = x - self.shift, self.rate.item()
        if not 0 <= r < math.inf:        # invalid rate: torch's conventions apply
            return None
        if k < 0:
            return _NEG_INF
        if r == 0:                       # xlogy's convention: 0 log 0 = 0
            return 0.0 if k == 0 else _NEG_INF
        return k * math.log(r) - r - math.lgamma(k + 1)

    def _torch_log_prob(self, x):
        x = _real(x) - self.shift
        ok = (x >= 0) & _is_int_tensor(x)
        xs = torch.where(ok, x, torch.zeros_like(x))
        lp = torch.xlogy(xs, self.rate) - self.rate - torch.lgamma(xs + 1)
        return _where_support(ok, lp)


class PoissonPlusOne(Poisson):
    """``1 + Poisson(rate)``: support ``1, 2, ...`` (Gen's, for numbers of clusters)."""

    name = "poisson_plus_one"
    __slots__ = ()

    def __init__(self, rate):
        super().__init__(rate, shift=1)


class Geometric(Distribution):
    """Number of failures before the first success: ``P(x) = p (1-p)^x``, ``x = 0, 1, ...``."""

    discrete = True
    name = "geometric"
    __slots__ = ("p",)

    def __init__(self, p):
        super().__init__(p)
        self.p = _real(p)

    def check_params(self):
        if not bool((self.p > 0) & (self.p <= 1)):
            return f"p must be in (0, 1], got {self.p.tolist()}"
        return None

    def sample(self):
        u = torch.rand((), dtype=DTYPE)
        if float(self.p) == 1.0:
            return 0
        return int(torch.floor(torch.log1p(-u) / torch.log1p(-self.p)))

    def log_prob(self, x):
        x = _real(x)
        ok = (x >= 0) & _is_int_tensor(x)
        xs = torch.where(ok, x, torch.zeros_like(x))
        return _where_support(ok, torch.log(self.p) + torch.xlogy(xs, 1 - self.p))


class NegBinomial(Distribution):
    """Number of failures before the ``r``-th success, success probability ``p``.

    ``P(y) = C(y + r - 1, y) p^r (1 - p)^y``, ``y = 0, 1, ...``, real ``r > 0``.
    Mean ``r (1 - p) / p``. (For mean ``λ`` and overdispersion ``κ`` as in
    Green & Hastie's soccer model: ``r = 1/κ``, ``p = 1 / (1 + κ λ)``.)
    """

    discrete = True
    name = "neg_binomial"
    __slots__ = ("r", "p")

    def __init__(self, r, p):
        super().__init__(r, p)
        self.r, self.p = _real(r), _real(p)

    def check_params(self):
        err = _check_positive("r", self.r)
        if err is None and not bool((self.p > 0) & (self.p <= 1)):
            err = f"p must be in (0, 1], got {self.p.tolist()}"
        return err

    def sample(self):
        rate = torch._standard_gamma(self.r) * (1 - self.p) / self.p
        return int(torch.poisson(rate))

    def sample_n(self, n):
        rate = torch._standard_gamma(self.r.expand(n).contiguous()) * (1 - self.p) / self.p
        return torch.poisson(rate).to(torch.int64)

    def log_prob(self, y):
        y = _real(y)
        ok = (y >= 0) & _is_int_tensor(y)
        ys = torch.where(ok, y, torch.zeros_like(y))
        lp = (torch.lgamma(ys + self.r) - torch.lgamma(self.r) - torch.lgamma(ys + 1)
              + self.r * torch.log(self.p) + torch.xlogy(ys, 1 - self.p))
        return _where_support(ok, lp)


# ---------------------------------------------------------------------------
# mixtures and iid
# ---------------------------------------------------------------------------
class MixtureOfNormals(Distribution):
    """Gen's ``mixture_of_normals(weights, means, variances)`` (note: variances, not stds)."""

    name = "mixture_of_normals"
    __slots__ = ("weights", "means", "variances", "_params")

    def __init__(self, weights, means, variances):
        # Means and variances may be lists of 0-d tensors, as in Fig. 1. The vectors are
        # the distribution's arguments: same_as then compares two tensors, not two lists.
        self.weights, self.means, self.variances = _real(weights), _real(means), _real(variances)
        super().__init__(self.weights, self.means, self.variances)
        self._params = False        # _python_params() not computed yet

    def check_params(self):
        if self._python_params() is not None:       # already checked there
            return None
        k = self.weights.shape[0] if self.weights.ndim == 1 else -1
        if self.weights.ndim != 1 or self.means.shape != (k,) or self.variances.shape != (k,):
            return (f"weights, means and variances must be vectors of one length, got shapes "
                    f"{tuple(self.weights.shape)}, {tuple(self.means.shape)}, {tuple(self.variances.shape)}")
        w = self.weights
        weights_ok = _all_nonnegative(w.tolist()) if _short_vector(w) else bool(torch.all(w >= 0))
        return (_check_positive("variances", self.variances)
                or _check_finite("means", self.means)
                or (None if weights_ok else f"weights must be >= 0, got {w.tolist()}"))

    def sample(self):
        j = int(torch.multinomial(self.weights, 1))
        return self.means[j] + torch.sqrt(self.variances[j]) * torch.randn((), dtype=DTYPE)

    def sample_n(self, n):
        j = torch.multinomial(self.weights, n, replacement=True)
        return self.means[j] + torch.sqrt(self.variances[j]) * torch.randn((n,), dtype=DTYPE)

    def _python_params(self):
        """``(a, means, variances)`` as Python lists with ``a_j = log w_j - (log v_j + log 2π) / 2``
        (component ``j`` at ``x`` is ``a_j - (x - m_j)² / (2 v_j)``), when the parameters are
        short vectors of valid values outside autograd; else ``None`` (the torch path)."""
        if self._params is False:      # computed once: check_params and log_prob both use it
            self._params = self._compute_python_params()
        return self._params

    def _compute_python_params(self):
        w, m, v = self.weights, self.means, self.variances
        if not (_short_vector(w) and _short_vector(m) and _short_vector(v)) \
                or w.requires_grad or m.requires_grad or v.requires_grad:
            return None
        ws, ms, vs = w.tolist(), m.tolist(), v.tolist()
        if not ws or not len(ws) == len(ms) == len(vs) or not _all_positive_finite(vs) \
                or not _all_nonnegative_finite(ws) or not _all_finite(ms):
            return None
        log_ws = map(math.log, ws) if min(ws) > 0 else \
            [math.log(wi) if wi > 0 else _NEG_INF for wi in ws]
        a = [lw - 0.5 * (lv + _LOG_2PI) for lw, lv in zip(log_ws, map(math.log, vs))]
        return (a, ms, vs) if max(a) > _NEG_INF else None

    def _fast_logpdf(self, x):
        # one value (Fig. 1b's model has one choice per data point)
        if x.ndim or x.requires_grad:
            return None
        params = self._python_params()
        return None if params is None else self._scalar_logpdf(x.item(), params)

    @staticmethod
    def _scalar_logpdf(xv, params):
        if not math.isfinite(xv):
            return None
        terms = [aj - 0.5 * ((xv - mj) * (xv - mj) / vj) for aj, mj, vj in zip(*params)]
        top = max(terms)
        if top == _NEG_INF:
            return _NEG_INF
        return top + math.log(sum(math.exp(t - top) for t in terms))

    def log_prob(self, x):
        params = None if x.requires_grad else self._python_params()
        if params is not None:
            lp = self._scalar_logpdf(x.item(), params) if x.ndim == 0 else self._batch_log_prob(x, params)
            if lp is not None:
                return _scalar(lp) if x.ndim == 0 else lp
        return self._torch_log_prob(x)

    def _batch_log_prob(self, x, params):
        # Component j at x is a_j - (x - m_j)² / (2 v_j) <= a_j: with s = max_j a_j subtracted,
        # no term of the log-sum-exp exceeds 1, so one shift serves every x (instead of the
        # maximum over each x's components: two passes less over a (k,) + x.shape array).
        # That array is filled in place (each extra full-size temporary costs an allocation,
        # page faults included, and memory traffic), with the components on the leading axis
        # so that the sum over them runs across x (torch reduces a short last axis several
        # times slower).
        a, _, variances = params
        s = max(a)
        column = (-1,) + (1,) * x.ndim
        # exp(t) as exp2(t log2 e), log2 e folded into the constants: torch's float64 exp is
        # not vectorised on CPU (about 3x slower than exp2). The extra rounding is a relative
        # error of |t| 2^-53 on a term, t <= 0 the log of that term's share. The scale
        # sqrt(log2 e / 2) / sqrt(v_j) is finite for every v_j in (0, inf).
        shifted = _vector([(aj - s) * _LOG2_E for aj in a]).view(column)
        scale = _vector([_SQRT_HALF_LOG2_E / math.sqrt(vj) for vj in variances]).view(column)
        comp = x - self.means.view(column)
        comp.mul_(scale).square_()
        total = torch.sub(shifted, comp, out=comp).exp2_().sum(0)
        # A tiny sum means x is far from every component, and terms that matter may have
        # underflowed: then None, and the caller shifts by each x's own maximum. (A NaN x
        # makes min() NaN, which is no reason by itself.)
        if total.numel() and not total.min().item() >= _MIN_SUM and bool((total < _MIN_SUM).any()):
            return None
        return total.log_().add_(s)

    def _torch_log_prob(self, x):
        x = x.unsqueeze(-1)
        z2 = (x - self.means) ** 2 / self.variances
        comp = torch.log(self.weights) - 0.5 * (z2 + torch.log(self.variances) + _LOG_2PI)
        return torch.logsumexp(comp, dim=-1)


#: Below this, a sum of shifted mixture terms may have lost terms that matter to underflow
#: (each lost term is below 2.3e-308: at most k of them, relative error k * 1e-28 here).
_MIN_SUM = 1e-280


class IID(Distribution):
    """``n`` independent values of ``base`` as one choice (one vectorised log-density call)."""

    name = "iid"
    __slots__ = ("base", "n")

    def __init__(self, base: Distribution, n: int):
        super().__init__(base, n)
        if not isinstance(base, Distribution):
            raise TypeError(f"iid(dist, n) needs a distribution, got {base!r}")
        self.base, self.n = base, int(n)
        self.event_shape = (self.n,) + tuple(base.event_shape)

    @property
    def discrete(self):
        return self.base.discrete

    @property
    def simplex(self):
        return self.base.simplex

    def check_params(self):
        if self.n < 0:
            return f"n must be >= 0, got {self.n}"
        return self.base.check_params()

    def same_as(self, other):
        return type(other) is IID and self.n == other.n and self.base.same_as(other.base)

    def coerce(self, value):
        if self.base.discrete:
            value = torch.as_tensor(value, dtype=torch.int64) if not isinstance(value, torch.Tensor) else value
            if value.shape != self.event_shape:
                raise ValueError(f"iid values have shape {self.event_shape}, got {tuple(value.shape)}")
            return value
        value = as_real(value)
        if value.shape != self.event_shape:
            raise ValueError(f"iid values have shape {self.event_shape}, got {tuple(value.shape)}")
        return value

    def sample(self):
        if self.n == 0:      # some torch samplers refuse n = 0 (torch.multinomial)
            dtype = torch.int64 if self.base.discrete else torch.float64
            return torch.empty((0,) + tuple(self.base.event_shape), dtype=dtype)
        return self.base.sample_n(self.n)

    def log_prob(self, x):
        x = _real(x) if self.base.discrete else x
        return self.base.log_prob(x).sum()

    def __repr__(self):
        return f"iid({self.base!r}, {self.n})"


# ---------------------------------------------------------------------------
# public constructors (documented in DESIGN.md's contract)
# ---------------------------------------------------------------------------
def normal(mean, std) -> Normal:
    """Normal with mean ``mean`` and standard deviation ``std`` (continuous, scalar)."""
    return Normal(mean, std)


def gamma(shape, rate) -> Gamma:
    """Gamma with ``shape`` and ``rate`` (mean shape/rate)."""
    return Gamma(shape, rate)


def inv_gamma(shape, scale) -> InvGamma:
    """Inverse gamma with ``shape`` and ``scale`` (mean scale/(shape-1))."""
    return InvGamma(shape, scale)


def beta(a, b) -> Beta:
    return Beta(a, b)


def uniform(lo, hi) -> Uniform:
    """Continuous uniform on ``[lo, hi]``."""
    return Uniform(lo, hi)


def uniform_discrete(lo, hi) -> UniformDiscrete:
    """Uniform on the integers ``lo..hi``, both included."""
    return UniformDiscrete(lo, hi)


def bernoulli(p) -> Bernoulli:
    """``True`` with probability ``p``."""
    return Bernoulli(p)


def categorical(probs) -> Categorical:
    """An index ``0..len(probs)-1`` with the given probabilities."""
    return Categorical(probs)


def poisson(rate) -> Poisson:
    return Poisson(rate)


def poisson_plus_one(rate) -> PoissonPlusOne:
    """``1 + Poisson(rate)``."""
    return PoissonPlusOne(rate)


def geometric(p) -> Geometric:
    """Failures before the first success (support 0, 1, ...)."""
    return Geometric(p)


def exponential(rate) -> Exponential:
    return Exponential(rate)


def lognormal(mu, sigma) -> LogNormal:
    """``exp(normal(mu, sigma))``."""
    return LogNormal(mu, sigma)


def dirichlet(alpha) -> Dirichlet:
    """Dirichlet over the simplex; the value is the vector of ``len(alpha)`` weights."""
    return Dirichlet(alpha)


def mvnormal(mean, cov) -> MvNormal:
    """Multivariate normal with mean vector ``(d,)`` and covariance ``(d, d)``."""
    return MvNormal(mean, cov)


def neg_binomial(r, p) -> NegBinomial:
    """Failures before the ``r``-th success with success probability ``p`` (real ``r > 0``)."""
    return NegBinomial(r, p)


def mixture_of_normals(weights, means, variances) -> MixtureOfNormals:
    """Finite mixture of normals; ``variances`` are variances (Gen's convention)."""
    return MixtureOfNormals(weights, means, variances)


def iid(dist: Distribution, n: int) -> IID:
    """``n`` iid values of ``dist`` as one choice of shape ``(n,) + dist.event_shape``."""
    return IID(dist, n)
