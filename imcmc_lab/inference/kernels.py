"""MCMC kernels as objects, and combinators (cycle, mixture, repeat).

A kernel is a callable ``kernel(trace) -> (new_trace, accepted)``. The classes
here also keep acceptance statistics per component, which chains report.
"""

from __future__ import annotations

import itertools
import numbers

import torch

__all__ = ["Kernel", "as_kernel", "cycle", "mixture", "repeat", "FunctionKernel"]


class Kernel:
    """Base class: a named kernel that counts its proposals and acceptances."""

    name = "kernel"

    def __init__(self, name=None):
        if name is not None:
            self.name = name
        self.proposed = 0
        self.accepted = 0

    def step(self, trace):
        raise NotImplementedError

    def __call__(self, trace):
        new_trace, accepted = self.step(trace)
        self.proposed += 1
        self.accepted += bool(accepted)
        return new_trace, accepted

    def components(self):
        """The basic kernels inside (for per-kernel acceptance statistics)."""
        return [self]

    def acceptance(self) -> dict:
        """``{name: (accepted, proposed)}`` of every basic kernel inside."""
        stats = {}
        for k in self.components():
            a, p = stats.get(k.name, (0, 0))
            stats[k.name] = (a + k.accepted, p + k.proposed)
        return stats

    def reset_stats(self):
        for k in self.components():
            k.proposed = k.accepted = 0

    def __repr__(self):
        return f"<kernel {self.name}>"


class FunctionKernel(Kernel):
    """Wraps a plain ``fn(trace) -> (trace, accepted)``."""

    def __init__(self, fn, name=None):
        super().__init__(name or getattr(fn, "name", None) or getattr(fn, "__name__", "kernel"))
        self.fn = fn

    def step(self, trace):
        return self.fn(trace)


def as_kernel(k) -> Kernel:
    return k if isinstance(k, Kernel) else FunctionKernel(k)


class _Composite(Kernel):
    def __init__(self, kernels, name):
        super().__init__(name)
        self.kernels = [as_kernel(k) for k in kernels]

    def components(self):
        return [c for k in self.kernels for c in k.components()]


def _in_turn(kernels, trace):
    """Apply each kernel in turn; accepted if any move was."""
    any_accepted = False
    for k in kernels:
        trace, acc = k(trace)
        any_accepted = any_accepted or bool(acc)
    return trace, any_accepted


class Cycle(_Composite):
    def step(self, trace):
        return _in_turn(self.kernels, trace)


class Mixture(_Composite):
    def __init__(self, kernels, weights, name):
        super().__init__(kernels, name)
        w = torch.as_tensor(weights if weights is not None else [1.0] * len(self.kernels), dtype=torch.float64)
        if w.shape != (len(self.kernels),) or bool((w < 0).any()) or float(w.sum()) <= 0:
            raise ValueError(f"mixture weights must be {len(self.kernels)} non-negative numbers, got {weights!r}")
        self.weights = w / w.sum()

    def step(self, trace):
        j = int(torch.multinomial(self.weights, 1))
        return self.kernels[j](trace)


class Repeat(_Composite):
    def __init__(self, kernel, n, name):
        super().__init__([kernel], name)
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"repeat: n must be a positive integer (how many times to apply the kernel), "
                             f"got {n!r}")
        self.n = int(n)

    def step(self, trace):
        return _in_turn(itertools.repeat(self.kernels[0], self.n), trace)


def cycle(*kernels, name="cycle") -> Kernel:
    """Apply each kernel in turn (each leaves the target invariant, so does the cycle)."""
    return Cycle(kernels, name)


def mixture(kernels, weights=None, name="mixture") -> Kernel:
    """Apply one kernel chosen at random with the given (state-independent) weights."""
    return Mixture(kernels, weights, name)


def repeat(kernel, n: int, name=None) -> Kernel:
    """Apply ``kernel`` ``n`` times."""
    return Repeat(kernel, n, name or f"repeat({as_kernel(kernel).name}, {n})")
