"""Hamiltonian Monte Carlo written as an involution (paper Sec. 6; Neklyudov et al. 2020).

HMC is an instance of involutive MCMC (automating-involutive-mcmc.txt, Sec. 6,
"Incorrectly transformed continuous variables"): the auxiliary program draws a
momentum ``p ~ N(0, I)`` for each selected continuous address; the involution
runs ``n_leapfrog`` leapfrog steps of size ``step_size`` from ``(x, p)`` and
negates the final momentum, ``f(x, p) = (x_L, -p_L)``. Running it twice goes
forward and then back along the same trajectory, so ``f(f(x, p)) = (x, p)``.

The engine derives the acceptance ratio with no HMC-specific code:
``log p(x') - log p(x)`` from the incremental update, ``log q(p') - log q(p) =
(|p|^2 - |p'|^2) / 2`` from assessing the momentum program, and ``log |det J|``
by autodiff through the whole leapfrog trajectory (the gradients inside it are
taken with ``create_graph=True``). Leapfrog preserves volume, so ``|det J| = 1``
up to rounding -- which the tests check numerically instead of assuming.

Gradients of ``log p`` come from :func:`imcmc_lab.differentiable_score` on the
model trace the transform reads (choices that are not selected are held at their
current values). If the trajectory leaves the support (``log p = -inf``), the
integration stops there; that point has density zero, so the move is rejected.
"""

from __future__ import annotations

import torch

from .. import continuous, gen, iid, normal, read, transform, write
from ..core.address import normalize_address
from ..inference.involutive import InvolutiveKernel
from ..modeling.runtime import differentiable_score

__all__ = ["hmc_involution_kernel", "momentum_program", "leapfrog_involution"]


def _input_model_trace(model_in):
    """The model trace behind the ``model_in`` handle (to score it differentiably)."""
    return model_in.trace


def momentum_program(addresses):
    """The auxiliary program: a standard normal momentum ``("p", i)`` for the
    ``i``-th address (a vector of them, one ``iid`` choice, for a vector value)."""
    addresses = [normalize_address(a) for a in addresses]

    @gen
    def momenta(trace):
        for i, address in enumerate(addresses):
            value = trace[address]
            if value.ndim == 0:
                normal(0.0, 1.0) @ ("p", i)
            else:
                iid(normal(0.0, 1.0), value.shape[0]) @ ("p", i)

    return momenta


def leapfrog_involution(addresses, step_size: float, n_leapfrog: int):
    """The transform ``(x, p) -> (x_L, -p_L)``: ``n_leapfrog`` leapfrog steps, then a
    momentum flip. Arithmetic in the same order as :func:`imcmc_lab.hmc`."""
    addresses = [normalize_address(a) for a in addresses]
    step_size, n_leapfrog = float(step_size), int(n_leapfrog)
    if n_leapfrog < 1 or step_size <= 0:
        raise ValueError(f"need n_leapfrog >= 1 and step_size > 0, got {n_leapfrog} and {step_size}")

    @transform
    def leapfrog(model_in, aux_in, model_out, aux_out):
        trace = _input_model_trace(model_in)

        def gradient(xs):
            # d log p / d x as a differentiable function of x (create_graph), so
            # the engine's Jacobian sees through every leapfrog step.
            log_p, _ = differentiable_score(trace, dict(zip(addresses, xs)))
            if not torch.isfinite(log_p):
                return None
            return torch.autograd.grad(log_p, xs, create_graph=True, allow_unused=True)

        x = [read(model_in[a], continuous) for a in addresses]
        p = [read(aux_in["p", i], continuous) for i in range(len(addresses))]
        g = gradient(x)
        if g is not None:
            p = [pi + 0.5 * step_size * _dense(gi, xi) for pi, gi, xi in zip(p, g, x)]
            for step in range(n_leapfrog):
                x = [xi + step_size * pi for xi, pi in zip(x, p)]
                g = gradient(x)
                if g is None:       # left the support: p(x') = 0 rejects the move
                    break
                scale = step_size if step < n_leapfrog - 1 else 0.5 * step_size
                p = [pi + scale * _dense(gi, xi) for pi, gi, xi in zip(p, g, x)]
        for i, address in enumerate(addresses):
            write(model_out[address], x[i], continuous)
            write(aux_out["p", i], -p[i], continuous)

    return leapfrog


def _dense(grad, like):
    return torch.zeros_like(like) if grad is None else grad


def hmc_involution_kernel(addresses, step_size: float, n_leapfrog: int, check=False,
                          name=None) -> InvolutiveKernel:
    """HMC on the given continuous addresses (scalars or 1-d vectors) as an
    involutive MCMC kernel: momenta from :func:`momentum_program`, the involution
    from :func:`leapfrog_involution`. ``check=True`` runs the dynamic checks on
    every move."""
    addresses = [normalize_address(a) for a in addresses]
    return InvolutiveKernel(momentum_program(addresses), (),
                            leapfrog_involution(addresses, step_size, n_leapfrog), check=check,
                            name=name or f"hmc involution ({n_leapfrog} x {step_size:g})")
