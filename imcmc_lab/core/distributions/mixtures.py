"""Distributions built from others: Gen's ``mixture_of_normals`` and ``iid``."""

from __future__ import annotations

import math
import weakref

import numpy as np
import torch

from ..values import DTYPE, as_real, float64_vector, known_floats, values_equal
from . import constraints
from ._arith import (LOG_2PI, NEG_INF, PY_MAX_LEN, all_finite, all_positive_finite,
                     scalar, short_vector)
from .base import Distribution, as_integer_param, as_param, simplex_float64

__all__ = ["MixtureOfNormals", "IID", "mixture_of_normals", "iid"]

_LOG2_E = 1 / math.log(2)
_SQRT_HALF_LOG2_E = math.sqrt(0.5 * _LOG2_E)

#: Below this, a sum of shifted mixture terms may have lost terms that matter to underflow
#: (each lost term is below 2.3e-308: at most k of them, relative error k * 1e-28 here).
_MIN_SUM = 1e-280
#: Terms below 2^-1000 are taken as 2^-1000 before exp2: NumPy's exp2 runs several times slower
#: on arguments whose results are subnormal or zero (common: data far from a narrow component).
#: At most k <= PY_MAX_LEN such terms change a sum >= _MIN_SUM by a relative 64 * 2^-1000 / 1e-280
#: < 1e-19, below float64's rounding; a smaller sum is recomputed by the torch path anyway.
_EXP2_FLOOR = -1000.0
#: Up to this many terms exp2 is NumPy's (one call less into torch, a few us per move at
#: Fig. 1's n = 100); beyond, torch's, whose exp2 costs less per value (in-process A/B, process
#: time: at n = 10,000, K = 8 and 32, 2% and 10% per move).
_NUMPY_EXP2_MAX = 1 << 15


class MixtureOfNormals(Distribution):
    """Gen's ``mixture_of_normals(weights, means, variances)`` (note: variances, not stds).

    ``weights``, ``means`` and ``variances`` are vectors of one length ``k``; the weights
    are >= 0 and sum to 1 (as :func:`categorical`'s probabilities). Values are scalars."""

    name = "mixture_of_normals"
    arg_constraints = {"weights": constraints.simplex, "means": constraints.real_vector,
                       "variances": constraints.positive_vector}
    __slots__ = ("weights", "_means", "_variances", "_floats", "_params", "_weight_sum")

    def __init__(self, weights, means, variances):
        # Means and variances may be lists of 0-d tensors, as in Fig. 1. The vectors are
        # the distribution's arguments (raw_args): same_as then compares two vectors, not two
        # lists. Lists whose floats are known (plain float64 scalars, an indexed family's
        # list) keep those floats, which the fast paths read; their vectors are made from
        # them only when something asks for them (the same vectors as_param makes).
        self.weights = as_param(weights)
        mf, vf = known_floats(means), known_floats(variances)
        self._means = as_param(means) if mf is None else None
        self._variances = as_param(variances) if vf is None else None
        self._floats = (mf, vf)
        self.event_shape = ()       # Distribution.__init__ inlined: raw_args is the property below
        self._params = False        # _python_params() not computed yet

    @property
    def means(self) -> torch.Tensor:
        if self._means is None:
            self._means = float64_vector(self._floats[0])
        return self._means

    @property
    def variances(self) -> torch.Tensor:
        if self._variances is None:
            self._variances = float64_vector(self._floats[1])
        return self._variances

    @property
    def raw_args(self):
        return self.weights, self.means, self.variances

    def same_as(self, other):
        if type(other) is not MixtureOfNormals:
            return False
        (mf, vf), (omf, ovf) = self._floats, other._floats
        if mf is not None and omf is not None and mf != omf:
            return False        # known floats that differ (the common case of a move): no tensor compared
        w, ow = self.weights, other.weights
        if not (w is ow or values_equal(w, ow)):
            return False
        # floats known on both sides compare as the vectors made from them would (a NaN
        # parameter, never valid, is the only case where tuple equality may differ)
        return (mf == omf if mf is not None and omf is not None else values_equal(self.means, other.means)) \
            and (vf == ovf if vf is not None and ovf is not None else values_equal(self.variances, other.variances))

    def __reduce__(self):
        return MixtureOfNormals, self.raw_args

    def check_params(self):
        # the common case: valid short vectors, already checked while computing the fast
        # path's constants (all but the sum of the weights)
        if self._python_params() is not None and abs(self._weight_sum - 1) <= constraints.simplex.tol:
            return None
        return super().check_params()

    def check_relations(self):
        k = self.weights.shape[0]
        if self.means.shape != (k,) or self.variances.shape != (k,):
            return (f"weights, means and variances must be vectors of one length, got shapes "
                    f"{tuple(self.weights.shape)}, {tuple(self.means.shape)}, {tuple(self.variances.shape)}")
        return None

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
        w = self.weights
        ms, vs = self._floats
        if not short_vector(w) or w.requires_grad:
            return None
        ms = self._short_floats(ms, self._means)
        vs = self._short_floats(vs, self._variances)
        ws = w.tolist()
        if ms is None or vs is None or not ws or not len(ws) == len(ms) == len(vs) \
                or not all_positive_finite(vs) or not all_finite(ms):
            return None
        # all_nonnegative_finite(ws), its sum and minimum kept
        total, low = sum(ws), min(ws)
        if not (total == total and low >= 0 and max(ws) < math.inf):
            return None
        self._weight_sum = total
        log_ws = map(math.log, ws) if low > 0 else \
            [math.log(wi) if wi > 0 else NEG_INF for wi in ws]
        a = [lw - 0.5 * (lv + LOG_2PI) for lw, lv in zip(log_ws, map(math.log, vs))]
        return (a, ms, vs) if max(a) > NEG_INF else None

    @staticmethod
    def _short_floats(floats, vector):
        """A parameter's floats: those kept from its list, else its vector's if it is a short
        vector outside autograd, else ``None``."""
        if floats is not None:
            return floats if len(floats) <= PY_MAX_LEN else None
        if not short_vector(vector) or vector.requires_grad:
            return None
        return vector.tolist()

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
        if top == NEG_INF:
            return NEG_INF
        return top + math.log(sum(math.exp(t - top) for t in terms))

    def log_prob(self, x):
        params = None if x.requires_grad else self._python_params()
        if params is not None:
            if x.ndim == 0:
                lp = self._scalar_logpdf(x.item(), params)
                if lp is not None:
                    return scalar(lp)
            else:
                terms = _log_sums(x, params)
                if terms is not None:
                    log_sums, s = terms
                    log_sums += s
                    return torch.from_numpy(log_sums)
        return self._torch_log_prob(x)

    def _fast_sum_logpdf(self, x):
        # iid: the sum of log_prob(x) as a float, without a tensor per value
        params = None if x.requires_grad else self._python_params()
        terms = None if params is None else _log_sums(x, params)
        if terms is None:
            return None
        log_sums, s = terms
        return float(np.add.reduce(log_sums, None)) + s * log_sums.size

    def _torch_log_prob(self, x):
        x = x.unsqueeze(-1)
        z2 = (x - self.means) ** 2 / self.variances
        comp = torch.log(self.weights) - 0.5 * (z2 + torch.log(self.variances) + LOG_2PI)
        return torch.logsumexp(comp, dim=-1)


def _log_sums(x, params):
    """``(log_sums, s)`` with ``log_sums + s`` the log-densities of the values ``x`` (any shape,
    outside autograd) under the mixture with :meth:`MixtureOfNormals._python_params` ``params``,
    ``log_sums`` a float64 NumPy array; ``None`` where terms that matter may have underflowed or
    ``x`` has no NumPy view (then the torch path applies)."""
    # Component j at x is a_j - (x - m_j)² / (2 v_j) <= a_j: with s = max_j a_j subtracted,
    # no term of the log-sum-exp exceeds 1, so one shift serves every x (instead of the
    # maximum over each x's components: two passes less over a (k,) + x.shape array).
    # That array is filled in place (each extra full-size temporary costs an allocation and
    # memory traffic), with the components on the leading axis (the sum over them then runs
    # across x).
    #
    # In NumPy: at the sizes where a call's cost matters (Fig. 1's n = 100, k = 8), the engine
    # work between two density calls leaves torch's dispatch cold, and the same dozen
    # operations then cost about 25 us more per move in torch (in-process A/B, process time;
    # 7 torch calls fewer gained nothing measurable). NumPy's exp2, log and sums differ from
    # torch's in the last bit (one ulp of a value's log-density).
    try:
        xa = x.numpy()
    except (RuntimeError, TypeError):     # not a CPU tensor NumPy can view
        return None
    a, means, variances = params
    k, s = len(a), max(a)
    # exp(t) as exp2(t log2 e), log2 e folded into the constants (exp2 is the cheaper call).
    # The extra rounding is a relative error of |t| 2^-53 on a term, t <= 0 the log of that
    # term's share. The scale sqrt(log2 e / 2) / sqrt(v_j) is finite for every v_j in (0, inf).
    constants = [(aj - s) * _LOG2_E for aj in a]
    scales = [_SQRT_HALF_LOG2_E / math.sqrt(vj) for vj in variances]
    constants += scales
    constants += means
    shifted, scale, column = np.array(constants).reshape((3, k) + (1,) * xa.ndim)
    # |(x - m_j) scale_j| below 1e150: nothing overflows (nor becomes inf - inf), so NumPy has no
    # warning to give and the errstate below (a few us) is not needed
    if (_max_abs(x, xa) + max(max(means), -min(means))) * max(scales) < 1e150:
        return _shifted_log_sums(xa, shifted, scale, column, s)
    # tiny variances or huge values overflow to inf, as in torch, whose arithmetic is silent
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _shifted_log_sums(xa, shifted, scale, column, s)


def _shifted_log_sums(xa, shifted, scale, column, s):
    """The arithmetic of :func:`_log_sums`."""
    comp = np.subtract(xa, column)
    comp *= scale
    np.square(comp, out=comp)
    np.subtract(shifted, comp, out=comp)
    if comp.size <= _NUMPY_EXP2_MAX:
        np.maximum(comp, _EXP2_FLOOR, out=comp)
        np.exp2(comp, out=comp)
    else:
        torch.from_numpy(comp).exp2_()
    sums = np.add.reduce(comp, 0)
    # A tiny sum means x is far from every component, and terms that matter may have
    # underflowed: then None, and the caller shifts by each x's own maximum. (A NaN x
    # makes min() NaN, which is no reason by itself.)
    if sums.size and not np.minimum.reduce(sums, None) >= _MIN_SUM and bool((sums < _MIN_SUM).any()):
        return None
    return np.log(sums, out=sums), s


#: (weak reference to a tensor, its version, max |value| or NaN): the last values scored,
#: which are a model's data on most moves (a kept choice), so their bound is found once
_LAST_BOUND = (None, -1, math.nan)


def _max_abs(x, xa):
    """``max |x|`` (NaN if ``x`` holds a NaN; 0 if empty), remembered for the last tensor."""
    global _LAST_BOUND
    ref, version, bound = _LAST_BOUND
    if ref is not None and ref() is x and x._version == version:
        return bound
    bound = float(np.abs(xa).max()) if xa.size else 0.0
    _LAST_BOUND = (weakref.ref(x), x._version, bound)
    return bound


class IID(Distribution):
    """``n`` independent values of ``base`` as one choice of shape ``(n,) + base.event_shape``,
    scored by one vectorised ``base.log_prob`` call."""

    name = "iid"
    arg_constraints = {"n": constraints.nonnegative_integer}
    __slots__ = ("base", "n")

    def __init__(self, base: Distribution, n: int):
        super().__init__(base, n)
        if not isinstance(base, Distribution):
            raise TypeError(f"iid(dist, n) needs a distribution, got {base!r}")
        self.base, self.n = base, as_integer_param(n)
        count = self.n if type(self.n) is int else 0      # check_params reports a bad n
        self.event_shape = (count,) + tuple(base.event_shape)

    @property
    def discrete(self):
        return self.base.discrete

    @property
    def simplex(self):
        return self.base.simplex

    def check_params(self):
        # the common case without the generic loop: n a valid count, then the base's parameters
        n = self.n
        if type(n) is int and n >= 0:
            return self.base.check_params()
        return super().check_params()

    def check_relations(self):
        return self.base.check_params()

    def same_as(self, other):
        return type(other) is IID and self.n == other.n and self.base.same_as(other.base)

    def coerce(self, value):
        if self.base.discrete:
            value = _as_int_tensor(value, self.base.name)
        else:
            value = as_real(simplex_float64(value) if self.base.simplex else value)
        if value.shape != self.event_shape:
            raise ValueError(f"iid values have shape {self.event_shape}, got {tuple(value.shape)}")
        return value

    def sample(self):
        if self.n == 0:      # some torch samplers refuse n = 0 (torch.multinomial)
            dtype = torch.int64 if self.base.discrete else torch.float64
            return torch.empty((0,) + tuple(self.base.event_shape), dtype=dtype)
        return self.base.sample_n(self.n)

    def _fast_logpdf(self, x):
        # the base's log-densities summed without a tensor per value, where it can
        return None if self.base.discrete else self.base._fast_sum_logpdf(x)

    def log_prob(self, x):
        lp = self._fast_logpdf(x)
        if lp is not None:
            return scalar(lp)
        return self.base.log_prob(as_param(x) if self.base.discrete else x).sum()

    def __repr__(self):
        return f"iid({self.base!r}, {self.n})"


def _as_int_tensor(value, name):
    """Discrete iid values as an int64 tensor; a ``ValueError`` for non-integers (``[1.5]`` must
    not quietly become ``[1]``)."""
    value = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if value.is_complex() or (value.is_floating_point() and not bool(torch.all(value == torch.round(value)))):
        raise ValueError(f"iid({name}) is discrete: its values are integers, got {value.tolist()!r}")
    return value if value.dtype == torch.int64 else value.to(torch.int64)


def mixture_of_normals(weights, means, variances) -> MixtureOfNormals:
    """Finite mixture of normals; ``variances`` are variances (Gen's convention); the
    ``weights`` are >= 0 and sum to 1."""
    return MixtureOfNormals(weights, means, variances)


def iid(dist: Distribution, n: int) -> IID:
    """``n`` iid values of ``dist`` as one choice of shape ``(n,) + dist.event_shape``."""
    return IID(dist, n)
