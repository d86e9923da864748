"""Coal-mining disasters: how many change points? (Green 1995; Roberts et al. 2019, Sec. 5.2)

The model of Fig. 3 of "Reversible Jump Probabilistic Programming" (D. A. Roberts,
M. Gallagher and T. Taimre, AISTATS 2019) with the constants and data conversion of its Stochaskell source (``mainCoal``):

* ``"n"``: number of change points, Poisson(3) truncated to ``1..30``
  (a table of probabilities over ``0..30`` whose entry at 0 is zero, so the
  value *is* ``n``);
* ``"s"``: the change points ``0 < s_1 < ... < s_n < L``, the even order
  statistics of ``2n + 1`` iid Uniform(0, L) draws, one vector choice
  (:class:`EvenOrderStatistics`); ``L = 40907`` days;
* ``"g"``: the heights, ``n + 1`` iid Gamma(shape 1, rate 200) (one ``iid`` choice);
  ``g[j]`` is the rate on ``[s_j, s_{j+1})`` with ``s_0 = 0``, ``s_{n+1} = L``;
* ``"y"``: the 191 event times (days since the first disaster), one choice of a
  Poisson process with that piecewise-constant rate (:class:`PiecewisePoissonProcess`),
  scored by one vectorised torch call.

The kernel is Green's (1995, pp. 719-721) mixture of four moves, written as ONE
involutive MCMC kernel: the auxiliary program :func:`coal_aux` draws the move type
with Green's state-dependent probabilities ``(eta_n, pi_n, b_n, d_n)`` and the
move's random numbers; the transform made by :func:`coal_moves` maps them to
the new state and to the auxiliary choices of the reverse move:

* **height**: ``g_j -> g_j e^u``, ``u ~ U(-1/2, 1/2)``, ``u -> -u`` (Fig. 4,
  ``coalMoveRate``); Jacobian ``e^u``, found by autodiff;
* **position**: ``s_j -> s_{j-1} + (s_{j+1} - s_{j-1}) u``, ``u ~ U(0, 1)``, and
  ``u -> (s_j - s_{j-1}) / (s_{j+1} - s_{j-1})`` (Fig. 4, ``coalMovePoint``, made
  an involution by handing the old position back as ``u``);
* **birth**: a new point ``x ~ U(0, L)`` splits the segment ``[lo, hi)`` it falls in;
  the old height ``h`` becomes ``h1`` (left) and ``h2`` (right) with
  ``(x - lo) log h1 + (hi - x) log h2 = (hi - lo) log h`` (weighted geometric
  mean kept) and ``h2 / h1 = (1 - u) / u``, ``u ~ U(0, 1)`` -- Green's formulas,
  not the paper's simpler lognormal proposal;
* **death** (the inverse of birth): remove ``s_j``, chosen uniformly, merge its
  two heights by the weighted geometric mean, hand back ``x = s_j`` and
  ``u = h1 / (h1 + h2)``.

The engine derives the acceptance ratio: Green's ``(h1 + h2)^2 / h`` Jacobian
comes from autodiff through the formulas above, the prior ratios from the
incremental ``update`` and the move probabilities from assessing ``coal_aux``
at the new state (tests/test_example_coal.py compares it with Green's formula).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

import numpy as np
import torch

from .. import (continuous, discrete, gamma, gen, iid, read, transform, uniform,
                uniform_discrete, write)
from ..core.distributions import Distribution, as_integer_param, as_param, constraints, where_support
from ..core.values import DTYPE, as_real
from ..inference.chains import run_chain
from ..inference.involutive import InvolutiveKernel

__all__ = ["load_coal", "years_to_days", "coal", "coal_aux", "coal_moves", "coal_kernel", "initial_trace",
           "sample_posterior",
           "move_probabilities", "rate_at", "EvenOrderStatistics", "PiecewisePoissonProcess",
           "TabulatedDiscrete", "green_split", "green_merge",
           "LENGTH", "DAYS_PER_YEAR", "HEIGHT", "POSITION", "BIRTH", "DEATH", "MOVE_NAMES"]

DAYS_PER_YEAR = 365.2425
LENGTH = 40907.0                     # observation window [0, L] in days (Stochaskell's t)
PRIOR_MEAN_N, N_MAX = 3.0, 30        # n ~ Poisson(3) truncated to 1..N_MAX
HEIGHT_SHAPE, HEIGHT_RATE = 1.0, 200.0
MAX_JUMP_PROBABILITY = 0.9           # Green: c as large as possible with b_n + d_n <= 0.9

HEIGHT, POSITION, BIRTH, DEATH = 0, 1, 2, 3          # values of the auxiliary choice "move"
MOVE_NAMES = ("height", "position", "birth", "death")


def _load_years() -> torch.Tensor:
    text = resources.files(__package__).joinpath("data/coal_disasters.json").read_text()
    return torch.tensor(json.loads(text)["dates"], dtype=DTYPE)


def load_coal() -> torch.Tensor:
    """The 191 disaster times in days since the first one (Stochaskell's conversion:
    ``365.2425 * year - 365.2425 * year_1``), a float64 vector starting at 0."""
    return years_to_days(_load_years())


def years_to_days(years) -> torch.Tensor:
    """Decimal years -> the model's time axis (days since the first disaster)."""
    return as_real(years) * DAYS_PER_YEAR - _load_years()[0] * DAYS_PER_YEAR


# ---------------------------------------------------------------------------
# distributions of the model
# ---------------------------------------------------------------------------
class EvenOrderStatistics(Distribution):
    """The even order statistics ``s_(2), s_(4), ..., s_(2n)`` of ``2n + 1`` iid
    Uniform(0, L) draws (Green 1995; Roberts et al. 2019, Sec. 5.2): a vector of ``n``
    increasing points.

    Density ``(2n+1)! / L^(2n+1) * prod_{j=0}^{n} (s_{j+1} - s_j)`` on
    ``0 < s_1 < ... < s_n < L`` (``s_0 = 0``, ``s_{n+1} = L``); it vanishes as two
    points merge, which discourages tiny segments.
    """

    name = "even_order_statistics"
    arg_constraints = {"n": constraints.nonnegative_integer, "length": constraints.positive}
    __slots__ = ("n", "length", "_log_norm")

    def __init__(self, n, length):
        super().__init__(n, length)
        self.n, self.length = as_integer_param(n), float(length)
        valid = type(self.n) is int and self.n >= 0 and 0 < self.length < math.inf   # else check_params says why
        self.event_shape = (self.n,) if valid else ()
        self._log_norm = (math.lgamma(2 * self.n + 2) - (2 * self.n + 1) * math.log(self.length)
                          if valid else math.nan)    # log (2n+1)! / L^(2n+1)

    def sample(self):
        draws = torch.sort(torch.rand(2 * self.n + 1, dtype=DTYPE) * self.length).values
        return draws[1::2].contiguous()

    def log_prob(self, s):
        batch = s.shape[:-1]
        edges = torch.cat([s.new_zeros(batch + (1,)), s, s.new_full(batch + (1,), self.length)], dim=-1)
        gaps = edges[..., 1:] - edges[..., :-1]
        ok = torch.all(gaps > 0, dim=-1)
        log_gaps = torch.log(torch.where(ok.unsqueeze(-1), gaps, torch.ones_like(gaps))).sum(-1)
        return where_support(ok, self._log_norm + log_gaps)


class PiecewisePoissonProcess(Distribution):
    """Event times of a Poisson process on ``[0, L]`` with rate ``heights[j]`` on
    ``[s_j, s_{j+1})`` (``s_0 = 0``, ``s_{n+1} = L``; an event exactly at ``s_j``
    belongs to the later segment, as Stochaskell's ``findSortedInsertIndex``).

    The value is the sorted vector of event times; its length is random, so
    ``event_shape`` is left empty (no fixed shape) and any 1-d vector is accepted.
    Density (w.r.t. Lebesgue measure on sorted tuples, summed over lengths):
    ``prod_i rate(y_i) * exp(-sum_j heights[j] (s_{j+1} - s_j))`` -- one
    ``searchsorted`` and two sums, whatever the number of events.
    """

    name = "poisson_process"
    arg_constraints = {"change_points": constraints.real_vector, "heights": constraints.positive_vector,
                       "length": constraints.positive}
    __slots__ = ("change_points", "heights", "length")

    def __init__(self, change_points, heights, length):
        super().__init__(change_points, heights, length)
        self.change_points, self.heights, self.length = as_param(change_points), as_param(heights), float(length)

    def check_relations(self):
        if self.heights.shape != (self.change_points.shape[0] + 1,):
            return (f"needs n change points and n + 1 heights, got shapes "
                    f"{tuple(self.change_points.shape)} and {tuple(self.heights.shape)}")
        return None

    def coerce(self, value):
        value = as_real(value)
        if value.ndim != 1:
            raise ValueError(f"a Poisson process value is a 1-d vector of event times, got shape "
                             f"{tuple(value.shape)}")
        return value

    def _edges(self):
        s = self.change_points
        return torch.cat([s.new_zeros(1), s, s.new_full((1,), self.length)])

    def sample(self):
        edges = self._edges()
        counts = torch.poisson(self.heights * (edges[1:] - edges[:-1])).to(torch.int64)
        segment = torch.repeat_interleave(torch.arange(len(counts)), counts)
        times = edges[segment] + torch.rand(len(segment), dtype=DTYPE) * (edges[segment + 1] - edges[segment])
        return torch.sort(times).values

    def log_prob(self, y):
        ok = torch.all((y >= 0) & (y <= self.length)) & torch.all(y[1:] >= y[:-1])
        edges = self._edges()
        segment = torch.searchsorted(self.change_points.detach(), y.detach(), right=True)
        lp = torch.log(self.heights)[segment].sum() - (self.heights * (edges[1:] - edges[:-1])).sum()
        return where_support(ok, lp)


class TabulatedDiscrete(Distribution):
    """A distribution on ``0, 1, ..., k-1`` given by a fixed table of probabilities.

    Like :func:`imcmc_lab.categorical`, but the table's logarithms are computed once,
    so scoring a value is a table look-up: the model's ``"n"`` and the auxiliary
    program's ``"move"`` are scored on every move of a long chain.
    """

    discrete = True
    name = "tabulated_discrete"
    arg_constraints = {"probs": constraints.Simplex(tol=1e-9)}
    __slots__ = ("probs", "_log_probs", "_problem")

    def __init__(self, probs):
        probs = as_param(probs)
        super().__init__(probs)
        self.probs = probs
        self._log_probs = [torch.log(p) for p in probs.reshape(-1)]   # 0-d tensors, reused
        self._problem = super().check_params()            # the table is fixed: check it once

    def check_params(self):
        return self._problem

    def sample(self):
        return int(torch.multinomial(self.probs, 1))

    def log_prob(self, x):
        if isinstance(x, int) and 0 <= x < len(self._log_probs):
            return self._log_probs[x]
        x = as_param(x)
        ok = (x >= 0) & (x < len(self._log_probs)) & (torch.floor(x) == x)
        idx = torch.where(ok, x, torch.zeros_like(x)).to(torch.int64)
        return where_support(ok, torch.log(self.probs)[idx])


# ---------------------------------------------------------------------------
# the model (Fig. 3) and the auxiliary program (Green's move mixture)
# ---------------------------------------------------------------------------
def _prior_n_probs() -> torch.Tensor:
    n = torch.arange(N_MAX + 1, dtype=DTYPE)
    log_p = n * math.log(PRIOR_MEAN_N) - torch.lgamma(n + 1)
    log_p[0] = -math.inf
    return torch.softmax(log_p, dim=0)


PRIOR_N = _prior_n_probs()           # P(n), n = 0..30, with P(0) = 0
_PRIOR_N_DIST = TabulatedDiscrete(PRIOR_N)


@gen
def coal(length):
    """Fig. 3 of the paper (coalPrior + coalLikelihood) on the window ``[0, length]``."""
    n = _PRIOR_N_DIST @ "n"
    s = EvenOrderStatistics(n, length) @ "s"
    g = iid(gamma(HEIGHT_SHAPE, HEIGHT_RATE), n + 1) @ "g"
    PiecewisePoissonProcess(s, g, length) @ "y"
    return n


def move_probabilities(n: int) -> torch.Tensor:
    """Green's (1995, p. 719) probabilities ``(eta_n, pi_n, b_n, d_n)`` of a height,
    position, birth and death move at ``n`` change points.

    ``b_n = c min(1, P(n+1)/P(n))``, ``d_n = c min(1, P(n-1)/P(n))``, with ``c`` the
    largest constant such that ``b_n + d_n <= 0.9`` for every ``n``; the rest is
    split equally between the height and position moves. Birth is impossible at
    ``n = 30`` and death at ``n = 1`` (their prior probability is zero).
    """
    return _move_type_dist(n).probs


@lru_cache(maxsize=None)
def _move_type_dist(n: int) -> TabulatedDiscrete:
    prior = PRIOR_N.tolist() + [0.0]

    def raw(k):
        return min(1.0, prior[k + 1] / prior[k]), min(1.0, prior[k - 1] / prior[k])

    c = MAX_JUMP_PROBABILITY / max(sum(raw(k)) for k in range(1, N_MAX + 1))
    up, down = raw(n)
    birth, death = c * up, c * down
    within = (1.0 - birth - death) / 2
    return TabulatedDiscrete(torch.tensor([within, within, birth, death], dtype=DTYPE))


@gen
def coal_aux(trace, length):
    """The auxiliary program: Green's move type, then that move's random numbers.

    ``"move"``: 0 height, 1 position, 2 birth, 3 death. ``"j"`` is 0-based: the
    height ``g[j]`` (``0..n``) or the change point ``s[j]`` (``0..n-1``).
    """
    n = trace["n"]
    move = _move_type_dist(n) @ "move"
    if move == HEIGHT:
        uniform_discrete(0, n) @ "j"
        uniform(-0.5, 0.5) @ "u"
    elif move == POSITION:
        uniform_discrete(0, n - 1) @ "j"
        uniform(0.0, 1.0) @ "u"
    elif move == BIRTH:
        uniform(0.0, length) @ "x"
        uniform(0.0, 1.0) @ "u"
    else:
        uniform_discrete(0, n - 1) @ "j"


# ---------------------------------------------------------------------------
# the involution
# ---------------------------------------------------------------------------
def _replace(vector, j, value):
    """``vector`` with entry ``j`` replaced (differentiable in both)."""
    return torch.cat([vector[:j], value.reshape(1), vector[j + 1:]])


def _edge(s, i, zero, length):
    """Entry ``i`` of ``(0, s_1, ..., s_n, L)``: a segment boundary."""
    if i == 0:
        return zero
    return s[i - 1] if i <= s.shape[0] else length


def green_split(h, lo, x, hi, u):
    """Green's (1995, pp. 720-721) birth: the heights ``(h1, h2)`` of ``[lo, x)`` and
    ``[x, hi)`` whose weighted geometric mean is ``h``,
    ``(x - lo) log h1 + (hi - x) log h2 = (hi - lo) log h``, with ``h2 / h1 = (1 - u) / u``."""
    a = (x - lo) / (hi - lo)
    log_ratio = torch.log1p(-u) - torch.log(u)
    log_h = torch.log(h)
    return torch.exp(torch.stack([log_h - (1 - a) * log_ratio, log_h + a * log_ratio]))


def green_merge(h1, h2, lo, x, hi):
    """Green's death, the inverse of :func:`green_split`: ``(h, u)`` from ``(h1, h2)``."""
    a = (x - lo) / (hi - lo)
    h = torch.exp(a * torch.log(h1) + (1 - a) * torch.log(h2))
    return h, h1 / (h1 + h2)


def coal_moves(length=LENGTH):
    """The involution of Green's four moves on the window ``[0, length]`` (see module doc)."""
    zero = torch.zeros((), dtype=DTYPE)
    length = torch.tensor(float(length), dtype=DTYPE)

    @transform
    def green_moves(model_in, aux_in, model_out, aux_out):
        move = read(aux_in["move"], discrete)
        n = read(model_in["n"], discrete)
        if move == HEIGHT:                           # g[j] -> g[j] e^u, u -> -u
            j = read(aux_in["j"], discrete)
            g = read(model_in["g"], continuous)
            u = read(aux_in["u"], continuous)
            write(model_out["g"], _replace(g, j, g[j] * torch.exp(u)), continuous)
            write(aux_out["u"], -u, continuous)
            write(aux_out["j"], j, discrete)
            write(aux_out["move"], HEIGHT, discrete)
        elif move == POSITION:                       # s[j] -> uniform between its neighbours
            j = read(aux_in["j"], discrete)
            s = read(model_in["s"], continuous)
            u = read(aux_in["u"], continuous)
            lo, hi = _edge(s, j, zero, length), _edge(s, j + 2, zero, length)
            write(model_out["s"], _replace(s, j, lo + (hi - lo) * u), continuous)
            write(aux_out["u"], (s[j] - lo) / (hi - lo), continuous)
            write(aux_out["j"], j, discrete)
            write(aux_out["move"], POSITION, discrete)
        elif move == BIRTH:                          # x splits segment j = [lo, hi)
            s = read(model_in["s"], continuous)
            g = read(model_in["g"], continuous)
            x = read(aux_in["x"], continuous)
            u = read(aux_in["u"], continuous)
            j = int(torch.searchsorted(s.detach(), x.detach()))
            lo, hi = _edge(s, j, zero, length), _edge(s, j + 1, zero, length)
            write(model_out["n"], n + 1, discrete)
            write(model_out["s"], torch.cat([s[:j], x.reshape(1), s[j:]]), continuous)
            write(model_out["g"], torch.cat([g[:j], green_split(g[j], lo, x, hi, u), g[j + 1:]]),
                  continuous)
            write(aux_out["move"], DEATH, discrete)
            write(aux_out["j"], j, discrete)         # the new point is s'[j]
        else:                                        # remove s[j], merge g[j] and g[j + 1]
            j = read(aux_in["j"], discrete)
            s = read(model_in["s"], continuous)
            g = read(model_in["g"], continuous)
            lo, x, hi = _edge(s, j, zero, length), s[j], _edge(s, j + 2, zero, length)
            h, u = green_merge(g[j], g[j + 1], lo, x, hi)
            write(model_out["n"], n - 1, discrete)
            write(model_out["s"], torch.cat([s[:j], s[j + 1:]]), continuous)
            write(model_out["g"], torch.cat([g[:j], h.reshape(1), g[j + 2:]]), continuous)
            write(aux_out["move"], BIRTH, discrete)
            write(aux_out["x"], x, continuous)
            write(aux_out["u"], u, continuous)

    return green_moves


def coal_kernel(length=LENGTH, check=False, name="coal (Green 1995)") -> InvolutiveKernel:
    """Green's reversible-jump sampler as one involutive MCMC kernel."""
    return InvolutiveKernel(coal_aux, (float(length),), coal_moves(length), check=check, name=name)


def initial_trace(events=None, n=1, length=LENGTH):
    """A trace of :func:`coal` with the events observed, ``n`` evenly spaced change
    points and every height at the overall rate (events per day)."""
    events = load_coal() if events is None else as_real(events)
    s = torch.linspace(0.0, length, n + 2, dtype=DTYPE)[1:-1]
    g = torch.full((n + 1,), len(events) / length, dtype=DTYPE)
    trace, _ = coal.generate((float(length),), {"n": n, "s": s, "g": g, "y": events})
    return trace


def rate_at(trace, times) -> torch.Tensor:
    """The rate ``g[segment containing t]`` of a trace at each time ``t`` (events/day)."""
    times = as_real(times)
    return trace["g"][torch.searchsorted(trace["s"], times, right=True)]


def sample_posterior(steps, seed, times=(), n=3):
    """Run :func:`coal_kernel` for ``steps`` moves from :func:`initial_trace` with ``n``
    change points; return ``(n per step, rate at each of times per step)`` as NumPy
    arrays. A plain top-level function, so it can run in a worker process."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    times = as_real(times)
    chain = run_chain(coal_kernel(), initial_trace(n=n), steps, progress=False,
                      record=lambda t: {"n": t["n"], "rate": rate_at(t, times)})
    ns = np.asarray(chain.values("n"))
    rates = np.stack([r.numpy() for r in chain.values("rate")]) if len(times) else np.zeros((len(ns), 0))
    return ns, rates
