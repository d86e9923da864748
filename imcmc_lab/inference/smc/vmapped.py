"""One ``torch.func.vmap`` level, opened by hand, for running a kernel body on a batch.

``torch.func.vmap(f)`` runs ``f`` once on *batched tensors*: each behaves, to ``f``, as one
particle's value, so ``x.sum()``, ``A @ x`` or ``x.shape`` mean what they mean for one
particle, and any Python use of a value -- ``if x > 0``, ``float(x)``, ``x.item()``,
``int(z)`` -- raises instead of silently reading the whole batch. That is what makes a
batched generation provably the per-particle one (see :mod:`.batched`).

The engine's handler must step out of the vmap at each ``dist @ address``: it unwraps the
distribution's batched parameters into tensors with an explicit leading particle dimension,
draws and scores all particles with plain torch calls (:class:`outside`), and hands the
body the drawn values wrapped as batched tensors again. ``torch.func.vmap`` has no public
hook for that, so this module uses the primitives it is built from
(``torch._C._functorch``: the same calls as ``torch._functorch.vmap._flat_vmap``). If they
are missing in some torch version, :data:`AVAILABLE` is False and SMC runs per particle.
"""

from __future__ import annotations

import torch

try:
    from torch._C import _DisableFuncTorch as outside
    from torch._C._functorch import (_add_batch_dim, _remove_batch_dim, _vmap_decrement_nesting,
                                     _vmap_increment_nesting, get_unwrapped, is_batchedtensor,
                                     maybe_get_bdim, maybe_get_level)
    AVAILABLE = True
except ImportError:     # pragma: no cover - depends on the torch version
    AVAILABLE = False

__all__ = ["AVAILABLE", "Level", "outside"]


class Level:
    """An open vmap level of batch size ``n`` (a context manager; ``randomness="error"``: a
    body that calls torch's random functions itself, untraced, is refused)."""

    __slots__ = ("n", "level")

    def __init__(self, n: int):
        self.n, self.level = n, None

    def __enter__(self):
        self.level = _vmap_increment_nesting(self.n, "error")
        return self

    def __exit__(self, *exc):
        _vmap_decrement_nesting()
        return False

    def wrap(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` (leading dimension ``n``) as a batched tensor of this level."""
        return _add_batch_dim(tensor, 0, self.level)

    def unwrap(self, value):
        """``(tensor with the particle dimension first, True)`` for a batched tensor of this
        level; ``(value, False)`` for anything that is not batched (shared by all particles);
        None for a tensor batched at another level (a body that runs its own vmap)."""
        if not isinstance(value, torch.Tensor) or not is_batchedtensor(value):
            return value, False
        if maybe_get_level(value) != self.level:
            return None
        return _remove_batch_dim(value, self.level, self.n, 0), True


def unwrapped_parts(value):
    """For tests: ``(plain tensor, batch dim)`` of a batched tensor."""
    return get_unwrapped(value), maybe_get_bdim(value)
