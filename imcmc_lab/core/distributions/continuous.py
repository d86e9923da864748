"""Continuous distributions: scalar (normal ... lognormal) and vector (dirichlet, mvnormal)."""

from __future__ import annotations

import math
import operator

import numpy as np
import torch

from ..values import DTYPE
from . import constraints
from ._arith import (BELOW_ONE, HUGE, LOG_2PI, NEG_INF, TINY, all_positive_finite, numpy_views, plain_scalars,
                     scalar, scalar_params, short_vector)
from ._draws import standard_gamma_pair, standard_normal
from .base import Distribution, as_param, simplex_float64, where_support
from .reference import NoReferenceMap

__all__ = ["Normal", "Gamma", "InvGamma", "Beta", "Uniform", "Exponential", "LogNormal", "Dirichlet", "MvNormal",
           "normal", "gamma", "inv_gamma", "beta", "uniform", "exponential", "lognormal", "dirichlet", "mvnormal"]


def _positive_finite(x: torch.Tensor) -> torch.Tensor:
    """Samples of a support ``(0, inf)`` that rounded to 0 or overflowed, moved just inside."""
    return x.clamp(TINY, HUGE)


# ---------------------------------------------------------------------------
# scalar
# ---------------------------------------------------------------------------
class Normal(Distribution):
    """Normal with mean ``mean`` and standard deviation ``std``; support all reals."""

    name = "normal"
    arg_constraints = {"mean": constraints.real, "std": constraints.positive}
    batchable = True
    __slots__ = ("mean", "std")

    def __init__(self, mean, std):
        # Distribution.__init__ inlined: a model builds one per choice on every run
        self.raw_args, self.event_shape = (mean, std), ()
        self.mean, self.std = as_param(mean), as_param(std)

    def from_reference(self, z):
        if type(z) is float and plain_scalars(self.mean, self.std):     # no autograd: Python arithmetic
            return scalar(self.mean.item() + self.std.item() * z)
        return self.mean + self.std * z

    def to_reference(self, value):
        return (value - self.mean) / self.std

    def sample(self):
        params = scalar_params(self.raw_args, self.mean, self.std)
        if params is not None:          # the same two roundings as in torch
            return scalar(params[0] + params[1] * standard_normal())
        return self.mean + self.std * torch.randn((), dtype=DTYPE)

    def sample_n(self, n):
        return self.mean + self.std * torch.randn((n,), dtype=DTYPE)

    def sample_batch(self, n):
        # the same two roundings per entry as sample(): mean + std * z
        z = torch.randn((n,), dtype=DTYPE)
        views = numpy_views(self.mean, self.std)
        if views is None:
            return self.mean + self.std * z
        return torch.from_numpy(views[0] + views[1] * z.numpy())

    def batch_log_prob(self, x):
        views = numpy_views(x, self.mean, self.std)
        if views is None:
            return super().batch_log_prob(x)
        x, mean, std = views
        z = (x - mean) / std
        # a shared std: math.log, as _fast_logpdf (the per-particle path) takes it
        log_std = math.log(float(std)) if std.ndim == 0 else np.log(std)
        return -0.5 * z * z - log_std - 0.5 * LOG_2PI

    def _fast_logpdf(self, x):
        params = scalar_params(self.raw_args, self.mean, self.std)
        if params is None or x.ndim or x.requires_grad:
            return None
        mean, std = params
        if not std > 0:
            return None
        z = (x.item() - mean) / std
        return -0.5 * z * z - math.log(std) - 0.5 * LOG_2PI

    def _torch_log_prob(self, x):
        z = (x - self.mean) / self.std
        return -0.5 * z * z - torch.log(self.std) - 0.5 * LOG_2PI


class Gamma(Distribution):
    """Gamma(shape, rate): density ∝ x^(shape-1) exp(-rate x) on (0, ∞)."""

    name = "gamma"
    arg_constraints = {"shape": constraints.positive, "rate": constraints.positive}
    __slots__ = ("shape", "rate")

    def __init__(self, shape, rate):
        super().__init__(shape, rate)
        self.shape, self.rate = as_param(shape), as_param(rate)

    def sample(self):
        return _positive_finite(torch._standard_gamma(self.shape) / self.rate)

    def sample_n(self, n):
        return _positive_finite(torch._standard_gamma(self.shape.expand(n).contiguous()) / self.rate)

    def log_prob(self, x):
        ok = (x > 0) & torch.isfinite(x)
        xs = torch.where(ok, x, torch.ones_like(x))
        lp = (self.shape * torch.log(self.rate) - torch.lgamma(self.shape)
              + (self.shape - 1) * torch.log(xs) - self.rate * xs)
        return where_support(ok, lp)


class InvGamma(Distribution):
    """Inverse gamma(shape, scale): density ∝ x^(-shape-1) exp(-scale / x) on (0, ∞)."""

    name = "inv_gamma"
    arg_constraints = {"shape": constraints.positive, "scale": constraints.positive}
    __slots__ = ("shape", "scale")

    def __init__(self, shape, scale):
        self.raw_args, self.event_shape = (shape, scale), ()    # as in Normal
        self.shape, self.scale = as_param(shape), as_param(scale)

    def sample(self):
        g = torch._standard_gamma(self.shape)
        params = scalar_params(self.raw_args, self.shape, self.scale)
        if params is not None:
            g = g.item()
            v = params[1] / g if g > 0 else HUGE
            return scalar(min(max(v, TINY), HUGE))
        return _positive_finite(self.scale / g)

    def sample_n(self, n):
        return _positive_finite(self.scale / torch._standard_gamma(self.shape.expand(n).contiguous()))

    def _fast_logpdf(self, x):
        params = scalar_params(self.raw_args, self.shape, self.scale)
        if params is None or x.ndim or x.requires_grad:
            return None
        (a, b), v = params, x.item()
        if not (a > 0 and b > 0):      # invalid parameters: torch's conventions apply
            return None
        if not 0 < v < math.inf:
            return NEG_INF
        return a * math.log(b) - math.lgamma(a) - (a + 1) * math.log(v) - b / v

    def _torch_log_prob(self, x):
        ok = (x > 0) & torch.isfinite(x)
        xs = torch.where(ok, x, torch.ones_like(x))
        lp = (self.shape * torch.log(self.scale) - torch.lgamma(self.shape)
              - (self.shape + 1) * torch.log(xs) - self.scale / xs)
        return where_support(ok, lp)


def _log_standard_gamma(shape: torch.Tensor) -> torch.Tensor:
    """``log G``, ``G ~ Gamma(shape, 1)``, finite even where ``G`` underflows to 0 (small
    shapes): ``G = G' U^(1/shape)`` with ``G' ~ Gamma(shape + 1)``, ``U ~ U(0, 1]``."""
    u = 1.0 - torch.rand(shape.shape, dtype=DTYPE)
    return torch.log(torch._standard_gamma(shape + 1)) + torch.log(u) / shape


class Beta(Distribution):
    """Beta(a, b): density ∝ x^(a-1) (1-x)^(b-1) on the open interval (0, 1)."""

    name = "beta"
    arg_constraints = {"a": constraints.positive, "b": constraints.positive}
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.raw_args, self.event_shape = (a, b), ()    # Distribution.__init__ inlined, as in Normal
        self.a, self.b = as_param(a), as_param(b)

    def from_reference(self, z):
        """Closed form where one parameter is 1 (stick-breaking's beta(1, a)); else no map.
        ``z`` a float (NP-DHMC's discontinuous coordinates) or a tensor."""
        z = torch.as_tensor(z, dtype=DTYPE)
        if bool(self.a == 1):          # F(x) = 1 - (1 - x)^b
            return -torch.expm1(torch.special.log_ndtr(-z) / self.b)
        if bool(self.b == 1):          # F(x) = x^a
            return torch.exp(torch.special.log_ndtr(z) / self.a)
        raise NoReferenceMap("beta has an N(0, 1) reference map only when a == 1 or b == 1")

    def to_reference(self, value):
        if bool(self.a == 1):
            return -torch.special.ndtri(torch.exp(self.b * torch.log1p(-value)))
        if bool(self.b == 1):
            return torch.special.ndtri(torch.exp(self.a * torch.log(value)))
        raise NoReferenceMap("beta has an N(0, 1) reference map only when a == 1 or b == 1")

    def sample(self):
        params = scalar_params(self.raw_args, self.a, self.b)
        if params is not None and params[0] >= 1 and params[1] >= 1:
            return scalar(_beta_draw(params))
        # Shapes below 1 put much of their mass closer to 0 or 1 than float64 resolves (and
        # their gamma draws underflow to 0): draw in log space and round into (0, 1).
        log_x, log_y = _log_standard_gamma(self.a), _log_standard_gamma(self.b)
        return torch.sigmoid(log_x - log_y).clamp(TINY, BELOW_ONE)

    def _sample_logpdf(self):
        params = scalar_params(self.raw_args, self.a, self.b) if type(self) is Beta else None
        if params is not None and params[0] >= 1 and params[1] >= 1:
            v = _beta_draw(params)      # what sample() draws, and its _fast_logpdf
            return scalar(v), _beta_logpdf(params, v)
        return self.sample(), None

    def _fast_logpdf(self, x):
        params = scalar_params(self.raw_args, self.a, self.b)
        if params is None or x.ndim or x.requires_grad:
            return None
        return _beta_logpdf(params, x.item())

    def _torch_log_prob(self, x):
        ok = (x > 0) & (x < 1)
        xs = torch.where(ok, x, torch.full_like(x, 0.5))
        lp = ((self.a - 1) * torch.log(xs) + (self.b - 1) * torch.log1p(-xs)
              + torch.lgamma(self.a + self.b) - torch.lgamma(self.a) - torch.lgamma(self.b))
        return where_support(ok, lp)


def _beta_draw(params) -> float:
    """A beta(a, b) value for float shapes ``a, b >= 1`` (a tuple): x / (x + y) of two gamma
    draws, kept inside (0, 1)."""
    x, y = standard_gamma_pair(params)      # the draws of gamma(a), then gamma(b)
    v = x / (x + y)
    return v if 0 < v < 1 else min(max(v, TINY), BELOW_ONE)


def _beta_logpdf(params, v: float):
    """Beta's log-density at the float ``v`` for float shapes ``(a, b)``; None unless both > 0."""
    a, b = params
    if not (a > 0 and b > 0):
        return None
    if not 0 < v < 1:
        return NEG_INF
    return ((a - 1) * math.log(v) + (b - 1) * math.log1p(-v)
            + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b))


class Uniform(Distribution):
    """Continuous uniform on the closed interval ``[lo, hi]``."""

    name = "uniform"
    arg_constraints = {"lo": constraints.real, "hi": constraints.real}
    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        super().__init__(lo, hi)
        self.lo, self.hi = as_param(lo), as_param(hi)

    def check_relations(self):
        if not bool(self.lo < self.hi):
            return f"needs lo < hi, got lo={self.lo.item()}, hi={self.hi.item()}"
        return None

    def from_reference(self, z):
        if type(z) is float and plain_scalars(self.lo, self.hi):       # no autograd: Python arithmetic
            lo = self.lo.item()
            return scalar(lo + (self.hi.item() - lo) * 0.5 * math.erfc(-z / math.sqrt(2.0)))
        return self.lo + (self.hi - self.lo) * torch.special.ndtr(z)

    def to_reference(self, value):
        return torch.special.ndtri((value - self.lo) / (self.hi - self.lo))

    def sample(self):
        return self.lo + (self.hi - self.lo) * torch.rand((), dtype=DTYPE)

    def sample_n(self, n):
        return self.lo + (self.hi - self.lo) * torch.rand((n,), dtype=DTYPE)

    def log_prob(self, x):
        ok = (x >= self.lo) & (x <= self.hi)
        lp = -torch.log(self.hi - self.lo) + 0 * x
        return where_support(ok, lp)


class Exponential(Distribution):
    """Exponential(rate): density rate exp(-rate x) on ``[0, ∞)``."""

    name = "exponential"
    arg_constraints = {"rate": constraints.positive}
    __slots__ = ("rate",)

    def __init__(self, rate):
        super().__init__(rate)
        self.rate = as_param(rate)

    def from_reference(self, z):
        z = torch.as_tensor(z, dtype=DTYPE)                  # a float for a discontinuous coordinate
        return -torch.special.log_ndtr(-z) / self.rate       # -log(1 - Φ(z)) / rate, exact in the tail

    def to_reference(self, value):
        return -torch.special.ndtri(torch.exp(-self.rate * value))

    def sample(self):
        return (-torch.log1p(-torch.rand((), dtype=DTYPE)) / self.rate).clamp(max=HUGE)

    def log_prob(self, x):
        ok = (x >= 0) & torch.isfinite(x)
        return where_support(ok, torch.log(self.rate) - self.rate * torch.where(ok, x, torch.zeros_like(x)))


class LogNormal(Distribution):
    """``exp(normal(mu, sigma))`` on (0, ∞)."""

    name = "lognormal"
    arg_constraints = {"mu": constraints.real, "sigma": constraints.positive}
    __slots__ = ("mu", "sigma")

    def __init__(self, mu, sigma):
        super().__init__(mu, sigma)
        self.mu, self.sigma = as_param(mu), as_param(sigma)

    def from_reference(self, z):
        return torch.exp(self.mu + self.sigma * z)

    def to_reference(self, value):
        return (torch.log(value) - self.mu) / self.sigma

    def sample(self):
        return _positive_finite(torch.exp(self.mu + self.sigma * torch.randn((), dtype=DTYPE)))

    def log_prob(self, x):
        ok = (x > 0) & torch.isfinite(x)
        xs = torch.where(ok, x, torch.ones_like(x))
        lx = torch.log(xs)
        z = (lx - self.mu) / self.sigma
        return where_support(ok, -0.5 * z * z - torch.log(self.sigma) - lx - 0.5 * LOG_2PI)


# ---------------------------------------------------------------------------
# vector
# ---------------------------------------------------------------------------
#: |sum - 1| below which a float64 vector of positive entries is on the simplex
SIMPLEX_TOL = 1e-8


class Dirichlet(Distribution):
    """Dirichlet(alpha) on the open simplex; the value is the full vector of ``k`` weights.

    The density is with respect to Lebesgue measure on the first ``k - 1``
    weights, so a value contributes ``k - 1`` coordinates to Jacobians (the last
    weight is ``1 - sum`` of the others). Gen counts ``k``, which makes
    ``|det J|`` depend on how a transform's formula behaves off the simplex.
    A value is on the simplex if its entries are > 0 and sum to 1 within 1e-8; a
    float32 value summing to 1 within float32 precision is widened and renormalised.
    """

    name = "dirichlet"
    simplex = True
    arg_constraints = {"alpha": constraints.positive_vector}
    __slots__ = ("alpha", "_constants")

    def __init__(self, alpha):
        self.raw_args = (alpha,)        # Distribution.__init__ inlined, as in Normal
        self.alpha = as_param(alpha)
        self.event_shape = tuple(self.alpha.shape)
        self._constants = None          # _dirichlet_constants of alpha, once check_params found them

    def check_params(self):
        # the common case: a short alpha outside autograd, checked by the constants that the
        # fast path needs anyway (found for a non-empty list of finite positive numbers:
        # exactly when alpha is a positive vector); else the generic check words the problem
        alpha = self.alpha
        if short_vector(alpha) and not alpha.requires_grad:
            self._constants = _dirichlet_constants(alpha.tolist())
            if self._constants is not None:
                return None
        return super().check_params()

    def sample(self):
        if self._small_alpha():     # gamma draws may underflow to 0: in log space, kept > 0
            return torch.softmax(_log_standard_gamma(self.alpha), -1).clamp(min=TINY)
        g = torch._standard_gamma(self.alpha)
        return g / g.sum()

    def _small_alpha(self) -> bool:
        alpha = self.alpha
        return bool((alpha < 1).any()) if not short_vector(alpha) else min(alpha.tolist(), default=1.0) < 1

    def coerce(self, value):
        return super().coerce(simplex_float64(value))

    def log_prob(self, x):
        if x.dtype != DTYPE:
            x = simplex_float64(x)
        return super().log_prob(x)

    def _fast_logpdf(self, x):
        alpha = self.alpha
        if not (short_vector(x) and short_vector(alpha)) or x.requires_grad or alpha.requires_grad:
            return None
        constants = self._constants
        if constants is None:
            constants = _dirichlet_constants(alpha.tolist())
        if constants is None:        # invalid alpha: torch's conventions apply
            return None
        a_minus_1, lgamma_total, lgamma_parts = constants
        w = x.tolist()
        # the same support test as log_prob's (the sum may differ from torch's in the last bit;
        # a NaN makes the sum NaN)
        if len(w) != len(a_minus_1) or not w or not min(w) > 0 or not abs(sum(w) - 1) < SIMPLEX_TOL:
            return NEG_INF
        return (sum(map(operator.mul, a_minus_1, map(math.log, w))) + lgamma_total) - lgamma_parts

    def _torch_log_prob(self, x):
        if x.shape[-1:] != self.alpha.shape:     # a vector of another length: outside the support
            return torch.full(x.shape[:-1], NEG_INF, dtype=DTYPE)
        ok = torch.all(x > 0, dim=-1) & (torch.abs(x.sum(-1) - 1) < SIMPLEX_TOL)
        xs = torch.where(x > 0, x, torch.ones_like(x))
        lp = ((self.alpha - 1) * torch.log(xs)).sum(-1) + torch.lgamma(self.alpha.sum()) \
            - torch.lgamma(self.alpha).sum()
        return where_support(ok, lp)


_DIRICHLET_CONSTANTS = {}   # tuple(alpha) -> (alpha - 1, lgamma(sum alpha), sum lgamma(alpha))


def _dirichlet_constants(a: list):
    """What a Dirichlet log-density needs of ``alpha`` besides the value; ``None`` if ``alpha``
    is not a non-empty list of finite positive numbers. Models rebuild the same alpha
    (``torch.full((k,), 2.0)``) on every run: the lgamma terms are computed once."""
    key = tuple(a)
    constants = _DIRICHLET_CONSTANTS.get(key)
    if constants is None:
        if not a or not all_positive_finite(a):
            return None
        if len(_DIRICHLET_CONSTANTS) > 256:
            _DIRICHLET_CONSTANTS.clear()
        constants = _DIRICHLET_CONSTANTS[key] = (
            [ai - 1 for ai in a], math.lgamma(sum(a)), sum(map(math.lgamma, a)))
    return constants


class MvNormal(Distribution):
    """Multivariate normal with mean ``(d,)`` and covariance ``(d, d)``; values of shape ``(d,)``."""

    name = "mvnormal"
    arg_constraints = {"mean": constraints.real_vector, "cov": constraints.positive_definite}
    __slots__ = ("mean", "cov")

    def __init__(self, mean, cov):
        super().__init__(mean, cov)
        self.mean, self.cov = as_param(mean), as_param(cov)
        self.event_shape = tuple(self.mean.shape)

    def check_relations(self):
        d = self.mean.shape[0]
        if tuple(self.cov.shape) != (d, d):
            return (f"mean must be a vector (d,) and cov a (d, d) matrix, got "
                    f"{tuple(self.mean.shape)} and {tuple(self.cov.shape)}")
        return None

    def _cholesky(self):
        factor, ok = constraints.cholesky(self.cov)
        return factor if ok else torch.linalg.cholesky(self.cov)     # raises, saying why

    def sample(self):
        return self.mean + self._cholesky() @ torch.randn(self.mean.shape, dtype=DTYPE)

    def log_prob(self, x):
        L = self._cholesky()
        diff = (x - self.mean).unsqueeze(-1)
        sol = torch.linalg.solve_triangular(L, diff, upper=False).squeeze(-1)
        d = self.mean.shape[0]
        return -0.5 * (sol * sol).sum(-1) - torch.log(torch.diagonal(L)).sum() - 0.5 * d * LOG_2PI


# ---------------------------------------------------------------------------
# constructors
# ---------------------------------------------------------------------------
def normal(mean, std) -> Normal:
    """Normal with mean ``mean`` and standard deviation ``std`` (continuous, scalar)."""
    return Normal(mean, std)


def gamma(shape, rate) -> Gamma:
    """Gamma with ``shape`` and ``rate`` (mean shape/rate), on (0, ∞)."""
    return Gamma(shape, rate)


def inv_gamma(shape, scale) -> InvGamma:
    """Inverse gamma with ``shape`` and ``scale`` (mean scale/(shape-1)), on (0, ∞)."""
    return InvGamma(shape, scale)


def beta(a, b) -> Beta:
    """Beta(a, b) on the open interval (0, 1)."""
    return Beta(a, b)


def uniform(lo, hi) -> Uniform:
    """Continuous uniform on ``[lo, hi]``."""
    return Uniform(lo, hi)


def exponential(rate) -> Exponential:
    """Exponential with ``rate`` (mean 1/rate), on ``[0, ∞)``."""
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
