"""Hamiltonian Monte Carlo on selected continuous addresses (leapfrog, identity mass)."""

from __future__ import annotations

import torch

from ..errors import ImcmcError
from ..modeling import differentiable_score
from .acceptance import metropolis_accept as _accept   # a module name: tests patch it to see log alpha
from .kernels import Kernel
from .selections import CheckedSelection

__all__ = ["hmc", "HMC"]


def _selected_continuous(trace, selection):
    """The continuous addresses selected; an error if the selection holds choices but none is
    continuous (a state in which it holds no choice at all is legitimate: the step does nothing)."""
    selected = [(a, r) for a, r in trace.flat_records().items() if a in selection]
    addresses = [a for a, r in selected if not r.dist.discrete]
    if selected and not addresses:
        raise ImcmcError(f"hmc: the selection {selection!r} holds no continuous choice of this trace, "
                         f"only discrete ones; HMC moves continuous choices (use MH for discrete ones)")
    return addresses


def _grad(trace, addresses, values):
    leaves = [v.detach().requires_grad_(True) for v in values]
    with torch.enable_grad():
        logp, _ = differentiable_score(trace, dict(zip(addresses, leaves)))
        if not torch.isfinite(logp):
            return logp.detach(), None
        grads = torch.autograd.grad(logp, leaves, allow_unused=True)
    return logp.detach(), [torch.zeros_like(v) if g is None else g for v, g in zip(values, grads)]


def hmc(trace, selection, step_size: float = 0.1, n_steps: int = 10):
    """One HMC step on the selected continuous addresses: ``(new_trace, accepted)``.

    Leapfrog with ``n_steps`` steps of ``step_size`` and an identity mass matrix;
    the acceptance uses the incremental update's ``log p(x') - log p(x)``. Every
    selected address must be named by ``trace`` (:mod:`imcmc_lab.inference.selections`).
    """
    return _hmc(trace, CheckedSelection(selection).confirm(trace, "hmc"), step_size, n_steps)


def _hmc(trace, selection, step_size, n_steps):
    addresses = _selected_continuous(trace, selection)
    if not addresses:      # a state of a trans-dimensional model without the selected choices
        return trace, False
    x0 = [trace[a].detach() for a in addresses]
    _, g = _grad(trace, addresses, x0)
    if g is None:
        return trace, False
    p0 = [torch.randn_like(x) for x in x0]
    x = [xi.clone() for xi in x0]
    p = [pi + 0.5 * step_size * gi for pi, gi in zip(p0, g)]
    for step in range(n_steps):
        x = [xi + step_size * pi for xi, pi in zip(x, p)]
        _, g = _grad(trace, addresses, x)
        if g is None:  # left the support: reject
            return trace, False
        scale = step_size if step < n_steps - 1 else 0.5 * step_size
        p = [pi + scale * gi for pi, gi in zip(p, g)]
    new_trace, weight, _ = trace.update(dict(zip(addresses, x)))
    kinetic_old = 0.5 * sum(float((pi * pi).sum()) for pi in p0)
    kinetic_new = 0.5 * sum(float((pi * pi).sum()) for pi in p)
    log_alpha = weight - kinetic_new + kinetic_old
    if _accept(log_alpha):
        return new_trace, True
    return trace, False


class HMC(Kernel):
    """Kernel form of :func:`hmc`."""

    def __init__(self, selection, step_size=0.1, n_steps=10, name=None):
        super().__init__(name or f"hmc({selection!r})")
        self.selection = CheckedSelection(selection)    # remembers the addresses it has seen
        self.step_size, self.n_steps = step_size, n_steps

    def step(self, trace):
        return _hmc(trace, self.selection.confirm(trace, self.name), self.step_size, self.n_steps)
