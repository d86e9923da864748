"""Sequential models for SMC, particle Gibbs and PGAS (issue 19).

From "Particle Gibbs with Ancestor Sampling for Probabilistic Programs" (van de Meent,
Yang, Mansinghka and Wood, AISTATS 2015), Sec. 4.1: the branching program and the
recursive geometric program, each as two generations (the prior, then the observation);
and Sec. 5's linear dynamical system benchmark. Besides them: a small linear-Gaussian
state-space model (exact answers from a Kalman filter) and a 16-step hidden Markov model
(exact answers from forward-backward). Every state-space model is an ``Unfold``: step
``t`` is mounted at ``(name, t)``, with its latent state at ``(name, t, "x")`` (or ``"z"``)
and its observation at ``(name, t, "y")``.
"""

from __future__ import annotations

import math

import torch

from .. import (Unfold, bernoulli, categorical, gamma, gen, mvnormal, normal,
                poisson)
from ..inference.smc import Steps

__all__ = ["branching", "branching_steps", "geometric", "geometric_poisson", "geometric_steps",
           "lg_step", "linear_gaussian", "linear_gaussian_steps", "simulate_linear_gaussian",
           "hmm_step", "hmm", "hmm_steps", "HMM_PARAMETERS", "simulate_hmm",
           "lds_step", "lds", "lds_steps", "simulate_lds"]


# --- Sec. 4.1: a branch whose choices depend on an earlier choice --------------------------
@gen
def branching(observe: bool = True):
    """``r ~ bernoulli(0.5)``; ``mu ~ normal(0, 1)`` if ``r`` else ``mu = 0``; ``y ~ normal(mu, 1)``."""
    r = bernoulli(0.5) @ "r"
    mu = normal(0.0, 1.0) @ "mu" if r else 0.0
    if observe:
        normal(mu, 1.0) @ "y"
    return r


def branching_steps(y: float = 0.1) -> Steps:
    """Generation 0: the prior; generation 1: observe ``y``."""
    return Steps(branching, [((False,), {}), ((True,), {"y": y})])


# --- Sec. 4.1: a recursive program (unbounded number of choices) --------------------------
@gen
def geometric(p: float):
    """Number of flips until the first head, on {1, 2, ...}: flip at "flip", the rest under "rest"."""
    if bernoulli(p) @ "flip":
        return 1
    return 1 + geometric(p) @ "rest"


@gen
def geometric_poisson(observe: bool = True):
    """``g ~ geometric(0.5)`` (recursively); ``y ~ poisson(g)``."""
    g = geometric(0.5) @ "geom"
    if observe:
        poisson(float(g)) @ "y"
    return g


def geometric_steps(y: int = 3) -> Steps:
    return Steps(geometric_poisson, [((False,), {}), ((True,), {"y": y})])


# --- a small linear-Gaussian state-space model -------------------------------------------
@gen
def lg_step(t, x_prev, a, sigma, noise):
    """``x_t ~ normal(a x_{t-1}, sigma)``, ``y_t ~ normal(x_t, noise)``."""
    x = normal(a * x_prev, sigma) @ "x"
    normal(x, noise) @ "y"
    return x


@gen
def linear_gaussian(T: int, a: float = 0.9, sigma: float = 1.0, noise: float = 0.5):
    """``x_0 ~ normal(0, sigma)``, then ``x_t = a x_{t-1} + sigma eps_t``; ``y_t ~ normal(x_t, noise)``."""
    return Unfold(lg_step)(T, 0.0, a, sigma, noise) @ "states"


def linear_gaussian_steps(ys, a=0.9, sigma=1.0, noise=0.5) -> Steps:
    """Generation ``t`` runs ``t + 1`` steps and observes ``ys[t]``."""
    ys = [float(y) for y in ys]
    return Steps(linear_gaussian, args=lambda t: (t + 1, a, sigma, noise),
                 observations=lambda t: {("states", t, "y"): ys[t]}, n=len(ys))


def simulate_linear_gaussian(T=50, a=0.9, sigma=1.0, noise=0.5, seed=0):
    """``(xs, ys)``: a draw from the model (lists of floats)."""
    g = torch.Generator().manual_seed(seed)
    xs, ys, x = [], [], 0.0
    for _ in range(T):
        x = a * x + sigma * float(torch.randn((), generator=g, dtype=torch.float64))
        xs.append(x)
        ys.append(x + noise * float(torch.randn((), generator=g, dtype=torch.float64)))
    return xs, ys


# --- a 16-step hidden Markov model ------------------------------------------------------
#: ``initial`` (K), ``transition`` (K x K), ``emission`` (K x M)
HMM_PARAMETERS = {
    "initial": torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64),
    "transition": torch.tensor([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]], dtype=torch.float64),
    "emission": torch.tensor([[0.7, 0.2, 0.1], [0.2, 0.6, 0.2], [0.1, 0.2, 0.7]], dtype=torch.float64),
}


@gen
def hmm_step(t, z_prev, rows, emission):
    """``z_t ~ categorical(rows[z_{t-1}])`` (row K is the initial distribution), ``y_t ~ categorical(emission[z_t])``."""
    z = categorical(rows[z_prev]) @ "z"
    categorical(emission[z]) @ "y"
    return int(z)


@gen
def hmm(T: int, initial, transition, emission):
    K = len(initial)
    rows = torch.cat([transition, initial.reshape(1, -1)])      # start in the extra state K
    return Unfold(hmm_step)(T, K, rows, emission) @ "states"


def hmm_steps(ys, initial=None, transition=None, emission=None) -> Steps:
    p = HMM_PARAMETERS
    params = (p["initial"] if initial is None else initial, p["transition"] if transition is None else transition,
              p["emission"] if emission is None else emission)
    ys = [int(y) for y in ys]
    return Steps(hmm, args=lambda t: (t + 1,) + params,
                 observations=lambda t: {("states", t, "y"): ys[t]}, n=len(ys))


def simulate_hmm(T=16, seed=0):
    """``(zs, ys)`` drawn from the HMM with :data:`HMM_PARAMETERS`."""
    g = torch.Generator().manual_seed(seed)
    p = HMM_PARAMETERS
    zs, ys, probs = [], [], p["initial"]
    for _ in range(T):
        z = int(torch.multinomial(probs, 1, generator=g))
        zs.append(z)
        ys.append(int(torch.multinomial(p["emission"][z], 1, generator=g)))
        probs = p["transition"][z]
    return zs, ys


# --- Sec. 5: the linear dynamical system benchmark -------------------------------------
def _rotation(omega):
    c, s = torch.cos(omega), torch.sin(omega)
    return torch.stack([torch.stack([c, -s]), torch.stack([s, c])])


@gen
def lds_step(t, x_prev, omega, q, C, r):
    """``x_t ~ N(A(omega) x_{t-1}, q I)``; ``y_t ~ N(C x_t, r I)`` (``r`` = 0.01 in the paper)."""
    x = mvnormal(_rotation(omega) @ x_prev, q * torch.eye(2, dtype=torch.float64)) @ "x"
    mvnormal(C @ x, r * torch.eye(C.shape[0], dtype=torch.float64)) @ "y"
    return x


@gen
def lds(T: int, C, T_total: int = 100, r: float = 0.01):
    """The paper's LDS: ``omega = g pi / T_total``, ``g ~ gamma(10, rate 2.5)``, ``q ~ gamma(10, rate 100)``
    (the process-noise variance), ``x_0 ~ N(A x_init, q I)`` with ``x_init = (1, 0)``."""
    g = gamma(10.0, 2.5) @ "g"
    q = gamma(10.0, 100.0) @ "q"
    omega = torch.as_tensor(g, dtype=torch.float64) * math.pi / T_total
    x_init = torch.tensor([1.0, 0.0], dtype=torch.float64)
    return Unfold(lds_step)(T, x_init, omega, q, C, r) @ "states"


def lds_steps(ys, C, r=0.01) -> Steps:
    T_total = len(ys)
    return Steps(lds, args=lambda t: (t + 1, C, T_total, r),
                 observations=lambda t: {("states", t, "y"): ys[t]}, n=T_total)


def simulate_lds(D=36, T=100, q=0.1, r=0.01, seed=0):
    """``(C, xs, ys)`` with ``omega = 4 pi / T`` (g = 4), ``C``'s columns Dirichlet(0.1)."""
    g = torch.Generator().manual_seed(seed)
    alpha = torch.full((D,), 0.1, dtype=torch.float64)
    gam = torch.distributions.Gamma(alpha, torch.ones(D, dtype=torch.float64))
    torch_state = torch.get_rng_state()
    torch.manual_seed(seed)
    cols = gam.sample((2,))
    torch.set_rng_state(torch_state)
    C = (cols / cols.sum(dim=1, keepdim=True)).T.contiguous()
    A = _rotation(torch.tensor(4 * math.pi / T, dtype=torch.float64))
    x = torch.tensor([1.0, 0.0], dtype=torch.float64)
    xs, ys = [], []
    for _ in range(T):
        x = A @ x + math.sqrt(q) * torch.randn(2, generator=g, dtype=torch.float64)
        xs.append(x)
        ys.append(C @ x + math.sqrt(r) * torch.randn(D, generator=g, dtype=torch.float64))
    return C, xs, ys
