"""Discrete distributions: values are Python ``int`` (``bool`` for :func:`bernoulli`)."""

from __future__ import annotations

import math

import torch

from ..values import DTYPE
from . import constraints
from ._arith import NEG_INF, scalar_params
from ._draws import randint, uniform01
from .base import Distribution, as_integer_param, as_param, is_integer_valued, where_support
from .reference import DiscreteReference

__all__ = ["Bernoulli", "UniformDiscrete", "Categorical", "Poisson", "PoissonPlusOne", "Geometric", "NegBinomial",
           "bernoulli", "uniform_discrete", "categorical", "poisson", "poisson_plus_one", "geometric",
           "neg_binomial"]


class Bernoulli(DiscreteReference, Distribution):
    """Bernoulli(p): values ``True`` (probability p) and ``False``."""

    discrete = True
    name = "bernoulli"
    arg_constraints = {"p": constraints.probability}
    __slots__ = ("p",)

    def __init__(self, p):
        self.raw_args, self.event_shape = (p,), ()      # Distribution.__init__ inlined (one per choice)
        self.p = as_param(p)

    def coerce(self, value):
        """``True``/``False`` (and 1/0 as them); another integer stays one (outside the support)."""
        if isinstance(value, bool):
            return value
        value = super().coerce(value)
        return bool(value) if value in (0, 1) else value

    def _cdf_sf(self, k):
        if k < 0:
            return 0.0, 1.0
        return (1.0 - self.p.item(), self.p.item()) if k == 0 else (1.0, 0.0)

    def _reference_guess(self, z):
        return 0

    def from_reference(self, z):
        return bool(DiscreteReference.from_reference(self, z))

    def sample(self):
        params = scalar_params(self.raw_args, self.p)
        return uniform01() < (self.p.item() if params is None else params[0])

    def sample_n(self, n):
        return (torch.rand((n,), dtype=DTYPE) < self.p).to(torch.int64)

    def _sample_logpdf(self):
        params = scalar_params(self.raw_args, self.p) if type(self) is Bernoulli else None
        if params is None:
            return self.sample(), None
        value = uniform01() < params[0]     # what sample() draws, and its _fast_logpdf
        return value, _bernoulli_logpdf(params[0], value)

    def _fast_logpdf(self, x):
        params = scalar_params(self.raw_args, self.p) if type(x) is bool else None
        return None if params is None else _bernoulli_logpdf(params[0], x)

    def _torch_log_prob(self, x):
        x = as_param(x)
        ok = (x == 0) | (x == 1)
        lp = torch.where(x == 1, torch.log(self.p), torch.log1p(-self.p))
        return where_support(ok, lp)


def _bernoulli_logpdf(p: float, x: bool) -> float:
    q = p if x else 1.0 - p
    return math.log(q) if q > 0 else NEG_INF


class UniformDiscrete(DiscreteReference, Distribution):
    """Uniform on the integers ``lo, lo+1, ..., hi`` (both ends included)."""

    discrete = True
    name = "uniform_discrete"
    arg_constraints = {"lo": constraints.integer, "hi": constraints.integer}
    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        self.raw_args, self.event_shape = (lo, hi), ()  # Distribution.__init__ inlined (one per choice)
        self.lo, self.hi = as_integer_param(lo), as_integer_param(hi)

    def check_relations(self):
        if self.lo > self.hi:
            return f"needs lo <= hi, got lo={self.lo}, hi={self.hi}"
        return None

    def _cdf_sf(self, k):
        n = self.hi - self.lo + 1
        below = min(max(k - self.lo + 1, 0), n)
        return below / n, (n - below) / n

    def _reference_guess(self, z):
        return self.lo

    def sample(self):
        lo, hi = self.lo, self.hi
        if type(lo) is int and type(hi) is int:
            return randint(lo, hi + 1)
        return torch.randint(lo, hi + 1, ()).item()

    def sample_n(self, n):
        return torch.randint(self.lo, self.hi + 1, (n,))

    def _sample_logpdf(self):
        value = self.sample()
        return value, (self._fast_logpdf(value) if type(self) is UniformDiscrete else None)

    def _fast_logpdf(self, x):
        if type(x) is int:
            return -math.log(self.hi - self.lo + 1) if self.lo <= x <= self.hi else NEG_INF
        return None

    def log_prob(self, x):
        if type(x) is int:
            return as_param(self._fast_logpdf(x))    # few distinct values: cached tensors
        x = as_param(x)
        ok = (x >= self.lo) & (x <= self.hi) & is_integer_valued(x)
        return where_support(ok, torch.full_like(x, -math.log(self.hi - self.lo + 1)))


class Categorical(DiscreteReference, Distribution):
    """Categorical(probs): values ``0, ..., len(probs) - 1`` (0-based, like Python)."""

    discrete = True
    name = "categorical"
    arg_constraints = {"probs": constraints.simplex}
    __slots__ = ("probs",)

    def __init__(self, probs):
        super().__init__(probs)
        self.probs = as_param(probs)

    def _cdf_sf(self, k):
        probs = self.probs.tolist()
        k = min(k, len(probs) - 1)
        return (sum(probs[:k + 1]), sum(probs[k + 1:])) if k >= 0 else (0.0, 1.0)

    def _reference_guess(self, z):
        return 0

    def sample(self):
        return int(torch.multinomial(self.probs, 1))

    def sample_n(self, n):
        return torch.multinomial(self.probs, n, replacement=True)

    def log_prob(self, x):
        x = as_param(x)
        k = self.probs.shape[0]
        ok = (x >= 0) & (x < k) & is_integer_valued(x)
        idx = torch.where(ok, x, torch.zeros_like(x)).to(torch.int64)
        return where_support(ok, torch.log(self.probs)[idx])


class Poisson(DiscreteReference, Distribution):
    """Poisson(rate) on ``shift, shift + 1, ...`` (``shift`` 0 by default)."""

    discrete = True
    name = "poisson"
    arg_constraints = {"rate": constraints.nonnegative}
    __slots__ = ("rate", "shift")

    def __init__(self, rate, shift=0):
        super().__init__(rate)
        self.rate = as_param(rate)
        self.shift = shift

    def _cdf_sf(self, k):
        k -= self.shift
        if k < 0:
            return 0.0, 1.0
        a = torch.tensor(k + 1.0, dtype=DTYPE)     # P(N <= k) = Q(k + 1, rate)
        return float(torch.special.gammaincc(a, self.rate)), float(torch.special.gammainc(a, self.rate))

    def _reference_guess(self, z):
        r = self.rate.item()
        return self.shift + max(0, int(r + z * math.sqrt(r)))

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
            return NEG_INF
        if r == 0:                       # xlogy's convention: 0 log 0 = 0
            return 0.0 if k == 0 else NEG_INF
        return k * math.log(r) - r - math.lgamma(k + 1)

    def _torch_log_prob(self, x):
        x = as_param(x) - self.shift
        ok = (x >= 0) & is_integer_valued(x)
        xs = torch.where(ok, x, torch.zeros_like(x))
        lp = torch.xlogy(xs, self.rate) - self.rate - torch.lgamma(xs + 1)
        return where_support(ok, lp)


class PoissonPlusOne(Poisson):
    """``1 + Poisson(rate)``: support ``1, 2, ...`` (Gen's, for numbers of clusters)."""

    name = "poisson_plus_one"
    __slots__ = ()

    def __init__(self, rate):
        super().__init__(rate, shift=1)


def _failures_log_prob(x, log_success_term, lp_of):
    """Shared shape of counting distributions on ``0, 1, ...``: ``lp_of(x)`` where ``x`` is a
    whole number ``>= 0``, else ``-inf``."""
    x = as_param(x)
    ok = (x >= 0) & is_integer_valued(x)
    return where_support(ok, log_success_term + lp_of(torch.where(ok, x, torch.zeros_like(x))))


class Geometric(DiscreteReference, Distribution):
    """Number of failures before the first success: ``P(x) = p (1-p)^x``, ``x = 0, 1, ...``."""

    discrete = True
    name = "geometric"
    arg_constraints = {"p": constraints.positive_probability}
    __slots__ = ("p",)

    def __init__(self, p):
        super().__init__(p)
        self.p = as_param(p)

    def _cdf_sf(self, k):
        if k < 0:
            return 0.0, 1.0
        sf = math.exp((k + 1) * math.log1p(-self.p.item())) if self.p.item() < 1 else 0.0
        return 1.0 - sf, sf

    def _reference_guess(self, z):
        if self.p.item() >= 1:
            return 0
        log_sf = float(torch.special.log_ndtr(torch.tensor(-z, dtype=DTYPE)))   # log(1 - Φ(z))
        return max(0, int(log_sf / math.log1p(-self.p.item())) - 1)

    def sample(self):
        u = torch.rand((), dtype=DTYPE)
        if float(self.p) == 1.0:
            return 0
        return int(torch.floor(torch.log1p(-u) / torch.log1p(-self.p)))

    def log_prob(self, x):
        return _failures_log_prob(x, torch.log(self.p), lambda xs: torch.xlogy(xs, 1 - self.p))


class NegBinomial(Distribution):
    """Number of failures before the ``r``-th success, success probability ``p``.

    ``P(y) = C(y + r - 1, y) p^r (1 - p)^y``, ``y = 0, 1, ...``, real ``r > 0``.
    Mean ``r (1 - p) / p``. (For mean ``λ`` and overdispersion ``κ`` as in
    Green & Hastie's soccer model: ``r = 1/κ``, ``p = 1 / (1 + κ λ)``.)
    """

    discrete = True
    name = "neg_binomial"
    arg_constraints = {"r": constraints.positive, "p": constraints.positive_probability}
    __slots__ = ("r", "p")

    def __init__(self, r, p):
        super().__init__(r, p)
        self.r, self.p = as_param(r), as_param(p)

    def sample(self):
        rate = torch._standard_gamma(self.r) * (1 - self.p) / self.p
        return int(torch.poisson(rate))

    def sample_n(self, n):
        rate = torch._standard_gamma(self.r.expand(n).contiguous()) * (1 - self.p) / self.p
        return torch.poisson(rate).to(torch.int64)

    def log_prob(self, y):
        return _failures_log_prob(y, self.r * torch.log(self.p) - torch.lgamma(self.r),
                                  lambda ys: torch.lgamma(ys + self.r) - torch.lgamma(ys + 1)
                                  + torch.xlogy(ys, 1 - self.p))


# ---------------------------------------------------------------------------
# constructors
# ---------------------------------------------------------------------------
def bernoulli(p) -> Bernoulli:
    """``True`` with probability ``p``."""
    return Bernoulli(p)


def uniform_discrete(lo, hi) -> UniformDiscrete:
    """Uniform on the integers ``lo..hi``, both included (non-integers are an error)."""
    return UniformDiscrete(lo, hi)


def categorical(probs) -> Categorical:
    """An index ``0..len(probs)-1`` with the given probabilities (>= 0, summing to 1)."""
    return Categorical(probs)


def poisson(rate) -> Poisson:
    """Poisson with ``rate`` (mean rate), on ``0, 1, ...``."""
    return Poisson(rate)


def poisson_plus_one(rate) -> PoissonPlusOne:
    """``1 + Poisson(rate)``."""
    return PoissonPlusOne(rate)


def geometric(p) -> Geometric:
    """Failures before the first success (support 0, 1, ...)."""
    return Geometric(p)


def neg_binomial(r, p) -> NegBinomial:
    """Failures before the ``r``-th success with success probability ``p`` (real ``r > 0``)."""
    return NegBinomial(r, p)
