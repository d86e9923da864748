"""A step size per coordinate: the kernel's ``step_scale`` mapping.

``step_scale={address or namespace: factor}`` gives coordinate ``a`` the step ``ε·s_a``
(``s_a`` the factor of the longest key that is a prefix of ``a``; 1 where none is). For a
discontinuous coordinate the coordinate-wise update moves ``z_a`` by ``±ε·s_a``; for a
continuous one the kick is ``p_a += c·s_a·∂loglik/∂z_a`` and the rotation lasts ``c·s_a``:
leapfrog with the diagonal mass matrix ``M = diag(s)⁻²`` written in the momentum
``M^(-1/2) p`` (still N(0, 1)), so every sub-step is a shear or an exact rotation, volume
preserving, and the step is reversible. The energy is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ...core.address import did_you_mean, format_address, normalize_address

__all__ = ["StepScale", "UNSCALED"]


def _factor(key, factor) -> float:
    try:
        value = float(factor)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(factor, bool) or not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"NPHMC: step_scale[{format_address(key)}] must be a positive finite number (a "
                         f"coordinate's step is step_size × its factor), got {factor!r}")
    return value


def _key(key):
    try:
        address = normalize_address(key)
    except TypeError as exc:
        address, why = None, str(exc)
    else:
        why = "the root () selects every coordinate: scale step_size instead"
    if not address:
        raise ValueError(f"NPHMC: the step_scale key {key!r} is not an address or namespace ({why}). Keys are "
                         f"addresses as the selection names them: 'start', ('step', 3), or 'step' for every "
                         f"('step', i).")
    return address


def _no_match(key, latent, selection) -> str:
    named = selection.addresses()
    where = f"the selection {selection!r}" if named else "the latent addresses of the first trace"
    known = set(latent) | {a[:1] for a in latent} | set(named)
    hint = did_you_mean(key, known) or (" Latent addresses: " + ", ".join(
        format_address(a) for a in sorted(latent, key=str)[:6]) + ".")
    return (f"NPHMC: the step_scale key {format_address(key)} matches no address of {where}, so its factor "
            f"would never apply.{hint}")


class StepScale:
    """The validated factors; ``of(address)`` is the coordinate's factor (1 if no key matches)."""

    def __init__(self, mapping=None):
        if mapping is not None and not isinstance(mapping, Mapping):
            raise ValueError(f"NPHMC: step_scale must be a mapping {{address or namespace: factor}}, got "
                             f"{type(mapping).__name__} {mapping!r}")
        self.factors = {}
        for key, factor in (mapping or {}).items():
            address = _key(key)
            if address in self.factors:
                raise ValueError(f"NPHMC: step_scale names {format_address(address)} twice ({key!r})")
            self.factors[address] = _factor(address, factor)
        self.checked = not self.factors    # keys against the first trace's latent addresses
        self._cache = {}

    def __bool__(self):
        return bool(self.factors)

    def of(self, address) -> float:
        if not self.factors:
            return 1.0
        scale = self._cache.get(address)
        if scale is None:
            scale = next((self.factors[address[:i]] for i in range(len(address), 0, -1)
                          if address[:i] in self.factors), 1.0)
            self._cache[address] = scale
        return scale

    def check(self, latent, selection):
        """At the first move: every key must match a latent address of the trace, or overlap
        an address or namespace the selection names (it may match later: a branch not taken
        yet, a family member not instantiated yet). Under ``select_all()`` nothing is named,
        so a key must match the first trace. Raises a ``ValueError`` naming a key that
        cannot match, with the addresses it could have meant."""
        named = selection.addresses()
        for key in self.factors:
            n = len(key)
            if not (any(a[:n] == key for a in latent) or any(a[:n] == key or key[:len(a)] == a for a in named)):
                raise ValueError(_no_match(key, latent, selection))
        self.checked = True


UNSCALED = StepScale()
