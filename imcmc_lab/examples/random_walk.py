"""A Gaussian random walk written as an involution.

The auxiliary program samples a step ``eps ~ normal(0, scale)`` for each
selected scalar address; the transform adds it and writes ``-eps`` back, so
applying it twice returns to the start. ``|det J| = 1``, and ``q`` is
symmetric, so the acceptance ratio reduces to ``p(x') / p(x)`` -- which the
engine derives by itself.
"""

from __future__ import annotations

from .. import continuous, exists, gen, normal, read, transform, write
from ..core.address import normalize_address
from ..inference.involutive import InvolutiveKernel

__all__ = ["random_walk_kernel"]


def random_walk_kernel(addresses, scale: float, name=None) -> InvolutiveKernel:
    """An involutive random-walk kernel on the given continuous scalar addresses."""
    addresses = [normalize_address(a) for a in addresses]
    label = ", ".join(repr(a[0]) if len(a) == 1 else repr(a) for a in addresses)
    return InvolutiveKernel(gen(_Steps(addresses, scale)), (), transform(_Shift(addresses), name="shift"),
                            name=name or f"random_walk({label})")


# The bodies are instances of module-level classes, not closures, so that the kernel pickles
# with the standard pickle (a closure pickles only with cloudpickle).
class _Steps:
    """The auxiliary program: a step ``eps ~ normal(0, scale)`` per address the trace has."""

    def __init__(self, addresses, scale):
        self.addresses, self.scale = addresses, scale
        self.__name__ = "steps"

    def __call__(self, trace):
        for i, address in enumerate(self.addresses):
            if address in trace:
                normal(0.0, self.scale) @ ("eps", i)


class _Shift:
    """The involution: ``x += eps`` and ``eps = -eps`` at each address the model trace has."""

    def __init__(self, addresses):
        self.addresses = addresses

    def __call__(self, model_in, aux_in, model_out, aux_out):
        for i, address in enumerate(self.addresses):
            if exists(model_in[address]):
                x = read(model_in[address], continuous)
                eps = read(aux_in["eps", i], continuous)
                write(model_out[address], x + eps, continuous)
                write(aux_out["eps", i], -eps, continuous)
