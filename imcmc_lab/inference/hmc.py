"""Hamiltonian Monte Carlo on selected continuous addresses (leapfrog, identity mass)."""

from __future__ import annotations

import torch

from ..core.choicemap import as_selection
from ..errors import ImcmcError
from ..modeling import differentiable_score
from .kernels import Kernel
from .mh import _accept

__all__ = ["hmc", "HMC"]


def _selected_continuous(trace, selection):
    addresses = [a for a, r in trace.flat_records().items() if a in selection and not r.dist.discrete]
    if not addresses:
        raise ImcmcError(f"hmc: the selection {selection!r} holds no continuous choice of this trace")
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
    the acceptance uses the incremental update's ``log p(x') - log p(x)``.
    """
    selection = as_selection(selection)
    addresses = _selected_continuous(trace, selection)
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
        self.selection = as_selection(selection)
        self.step_size, self.n_steps = step_size, n_steps

    def step(self, trace):
        return hmc(trace, self.selection, self.step_size, self.n_steps)
