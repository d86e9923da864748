"""The N(0, 1) reference coordinate of a scalar choice (nonparametric HMC).

Nonparametric HMC moves every latent scalar choice in a coordinate ``z`` whose prior is
N(0, 1); the value is ``v = F⁻¹(Φ(z))`` with ``F`` the choice's CDF (generalised inverse
for a discrete distribution). A distribution offers the map through

* continuous: ``from_reference(z)`` (torch operations, so autograd gives ``dv/dz``) and
  ``to_reference(v)``;
* discrete: ``_cdf_sf(k) -> (F(k), 1 - F(k))`` as accurate floats (both, so that the
  upper tail keeps its precision) and ``_reference_guess(z)`` (a value near
  ``F⁻¹(Φ(z))`` to start the search); :class:`DiscreteReference` derives
  ``from_reference`` and ``reference_interval`` from them.

A distribution without the map raises :class:`NoReferenceMap` (the kernel names the address).
"""

from __future__ import annotations

import math

import torch

from ..values import DTYPE

__all__ = ["NoReferenceMap", "DiscreteReference", "z_of", "ndtr", "ndtri"]


class NoReferenceMap(NotImplementedError):
    """The distribution has no map to and from the N(0, 1) reference coordinate."""


def ndtri(u: float) -> float:
    return float(torch.special.ndtri(torch.tensor(u, dtype=DTYPE)))


def ndtr(z: float) -> float:
    return float(torch.special.ndtr(torch.tensor(z, dtype=DTYPE)))


def z_of(cdf: float, sf: float) -> float:
    """``Φ⁻¹(cdf)``, from the side that keeps its precision (``sf = 1 - cdf``)."""
    return ndtri(cdf) if cdf <= 0.5 else -ndtri(sf)


class DiscreteReference:
    """``from_reference``/``reference_interval`` of a discrete distribution from its CDF."""

    __slots__ = ()

    def _z_upper(self, k: int) -> float:
        """``Φ⁻¹(F(k))``: the largest ``z`` that maps to ``k`` or below."""
        return z_of(*self._cdf_sf(k))

    def reference_interval(self, value) -> tuple[float, float]:
        """``(z_lo, z_hi)``: the reference coordinates ``z`` with ``F⁻¹(Φ(z)) == value``
        are the interval ``z_lo < z <= z_hi``."""
        k = int(value)
        return self._z_upper(k - 1), self._z_upper(k)

    def from_reference(self, z: float) -> int:
        """``F⁻¹(Φ(z))``: the least ``k`` with ``Φ(z) <= F(k)``."""
        z = float(z)
        if math.isnan(z):
            raise ValueError("the reference coordinate is NaN")
        k = self._reference_guess(z)
        while z > self._z_upper(k):
            k += 1
        while z <= self._z_upper(k - 1):
            k -= 1
        return k

    def to_reference(self, value):
        raise NoReferenceMap(f"{self.name} is discrete: its reference coordinate is not a function of "
                             f"the value (use reference_interval)")
