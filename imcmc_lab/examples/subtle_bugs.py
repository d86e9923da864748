"""Kernels with bugs that Algorithm 4 cannot see, each beside its correct twin.

Each transform here IS an involution (``il.check_involution`` passes on it); what is
wrong is the density in the acceptance ratio, the kind of mistake a hand-derived
reversible-jump ratio makes. Only a stationarity test (``il.check_stationarity``)
catches them:

=================================================  ==========================================
bug                                                kernel (``correct=True`` is the twin)
=================================================  ==========================================
birth/death whose auxiliary density omits a factor :func:`birth_death_omitted_factor`
MH proposal whose reverse density is wrong         :func:`log_walk_mh` (lognormal taken as
                                                   symmetric)
Dirichlet Jacobian on k instead of k-1 coordinates :func:`birth_death_dirichlet_k`
=================================================  ==========================================

The birth/death move is the Gaussian mixture's of :mod:`.mixture` (a new weight
``w ~ beta(1, k)``, the others scaled by ``1 - w``). Its auxiliary density contains
the factor ``k`` of ``beta(1, k)``'s normalising constant; a hand derivation that
forgets it accepts births ``k`` times too often. Its Jacobian is ``(1 - w)^(k-1)``
because a weight vector on the simplex has ``k - 1`` free coordinates; taking all
``k`` (Gen's convention) gives ``(1 - w)^k``.
"""

from __future__ import annotations

import math

from .. import gamma, gen, iid, poisson
from ..inference.acceptance import metropolis_accept
from ..inference.involutive import InvolutiveKernel, involutive_move
from ..inference.kernels import Kernel
from .mixture import birth_death, birth_death_aux, gmm

__all__ = ["MisstatedKernel", "birth_death_omitted_factor", "birth_death_dirichlet_k", "gamma_poisson",
           "log_walk_mh", "mixture_prior"]

mixture_prior = gmm            # used with n = 0 data points: the prior over mixtures


class MisstatedKernel(InvolutiveKernel):
    """An involutive kernel whose acceptance ratio is off by ``mistake(record)`` (a log
    factor): what a hand-derived ratio with that error would do."""

    def __init__(self, q, q_args, f, mistake, name=None):
        super().__init__(q, q_args, f, name=name)
        self.mistake = mistake

    def step(self, trace):
        record = involutive_move(trace, self.q, self.q_args, self.f)
        self.last_record = record
        if record.log_alpha == -math.inf:
            return trace, False
        accepted = metropolis_accept(record.log_alpha + self.mistake(record))
        return (record.model_out if accepted else trace), accepted


def _birth(record) -> bool:
    return bool(record.aux_in["is_birthing"])


def _omitted_beta_normaliser(record):
    # beta(1, k) has density k (1 - w)^(k-1); leaving out k makes -log q_x(y) too large by
    # log k on a birth from k, and log q_x'(y') too small by log k' on a death to k' = k - 1.
    k = record.model_in["k"]
    return math.log(k) if _birth(record) else -math.log(k - 1)


def _k_coordinate_jacobian(record):
    # (1 - w)^k instead of (1 - w)^(k-1): one factor (1 - w) too many, inverted on a death
    w = record.aux_in["new_w"] if _birth(record) else record.aux_out["new_w"]
    one_minus_w = math.log1p(-float(w))
    return one_minus_w if _birth(record) else -one_minus_w


def birth_death_omitted_factor(correct=False) -> InvolutiveKernel:
    """The mixture's birth/death, its auxiliary density missing ``beta(1, k)``'s factor ``k``."""
    if correct:
        return InvolutiveKernel(birth_death_aux, (), birth_death, name="birth/death")
    return MisstatedKernel(birth_death_aux, (), birth_death, _omitted_beta_normaliser,
                           name="birth/death, aux density without k")


def birth_death_dirichlet_k(correct=False) -> InvolutiveKernel:
    """The mixture's birth/death with the Jacobian of the weights taken on ``k`` coordinates."""
    if correct:
        return InvolutiveKernel(birth_death_aux, (), birth_death, name="birth/death")
    return MisstatedKernel(birth_death_aux, (), birth_death, _k_coordinate_jacobian,
                           name="birth/death, Dirichlet Jacobian on k coordinates")


@gen
def gamma_poisson(n):
    """``lam ~ gamma(2, 1)``; ``n`` counts ``y ~ poisson(lam)``."""
    lam = gamma(2.0, 1.0) @ "lam"
    iid(poisson(lam), n) @ "y"


class log_walk_mh(Kernel):  # noqa: N801 (used like the other kernel factories)
    """MH on a positive scalar with the multiplicative proposal ``x' = x exp(scale z)``.

    The forward density is lognormal, ``q(x' | x) = N(log x'; log x, scale) / x'``. The
    reverse density is ``N(log x; log x', scale) / x``, so the ratio is ``x' / x``.
    ``correct=False`` takes the proposal as symmetric (drops ``x' / x``): a wrong
    reverse density.
    """

    def __init__(self, address, scale, correct=False):
        super().__init__(f"log-walk MH on {address}" + ("" if correct else " (taken as symmetric)"))
        self.address, self.scale, self.correct = address, scale, correct

    def step(self, trace):
        import torch

        x = float(trace[self.address])
        x_new = x * math.exp(self.scale * float(torch.randn(())))
        new_trace, weight, _ = trace.update({self.address: x_new})
        reverse_over_forward = math.log(x_new / x) if self.correct else 0.0
        if metropolis_accept(float(weight) + reverse_over_forward):
            return new_trace, True
        return trace, False
