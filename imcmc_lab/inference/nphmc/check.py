"""``check_nphmc``: the NP analogue of the involution check (Algorithm 4 of "Automating
Involutive MCMC using Probabilistic and Differentiable Programming").

A trajectory is run forward from a state drawn from the model (with fresh momenta and a
random direction bit), then back from its end with negated momenta and the direction
flipped; it must return to the start in every coordinate, and the way back must not need
a coordinate the way forward did not instantiate. A wrong extension rule (say, a new
coordinate drawn at the current time instead of replayed from time 0) fails it.
"""

from __future__ import annotations

import math

import torch

from ...core.address import format_address
from ...core.values import DTYPE
from ...errors import InvolutionCheckError
from .coordinates import Trajectory
from .integrator import Integrator

__all__ = ["check_nphmc", "run_back", "NPCheckReport"]


def run_back(trace, observations, forward, selection, discontinuous, n_steps, tol=1e-7):
    """Run ``n_steps`` back from the end of ``forward``; ``None`` if the trajectory returns to
    its start, else a sentence naming the addresses that do not."""
    back = Trajectory(forward.step_size, -forward.direction)
    for a, disc in forward.disc.items():
        back.add(a, forward.z[a], -forward.p[a], disc)
    integrator = Integrator(trace, observations, back, selection, discontinuous)
    for _ in range(n_steps):
        if not integrator.step():
            return "the reverse trajectory left the support, which the forward one never did"
    if back.extended:
        return ("the reverse trajectory needed coordinates the forward one never instantiated: "
                + ", ".join(format_address(a) for a in back.extended[:5]))
    differ = [a for a in forward.disc
              if abs(back.z[a] - forward.z0[a]) > tol * (1 + abs(forward.z0[a]))
              or abs(back.p[a] + forward.p0[a]) > tol * (1 + abs(forward.p0[a]))]
    if not differ:
        return None
    shown = "; ".join(f"{format_address(a)}: z {forward.z0[a]:.6g} -> {back.z[a]:.6g}, "
                      f"p {forward.p0[a]:.6g} -> {-back.p[a]:.6g}" for a in differ[:5])
    more = f" (and {len(differ) - 5} more)" if len(differ) > 5 else ""
    return f"the trajectory does not return at {len(differ)} coordinate(s): {shown}{more}"


def _draw(model, args, observations, selection, max_latent):
    while True:
        trace, _ = model.generate(args, observations or {})
        if sum(a in selection for a in trace.flat_records()) <= max_latent:
            return trace


class NPCheckReport:
    """``trials`` run, ``failures`` as ``(trial, sentence)``, ``extensions`` and
    ``extensions_in_sweep`` (coordinates instantiated mid-trajectory / mid-sweep),
    ``left_support`` (forward trajectories that left the support: not checkable)."""

    def __init__(self):
        self.trials, self.failures, self.extensions, self.extensions_in_sweep, self.left_support = 0, [], 0, 0, 0

    @property
    def passed(self) -> bool:
        return not self.failures

    def __repr__(self):
        return (f"<NPCheckReport {'passed' if self.passed else 'FAILED'}: {self.trials} trials, "
                f"{len(self.failures)} failures, {self.extensions} extensions "
                f"({self.extensions_in_sweep} mid-sweep), {self.left_support} left the support>")


def check_nphmc(model, args, observations, kernel, trials=100, raise_on_failure=True, tol=1e-7,
                max_latent=50):
    """Run ``trials`` trajectories of ``kernel`` (an :class:`~.kernel.NPHMC`) forward and back
    from states ``model.generate(args, observations)``, in both directions; an
    :class:`~imcmc_lab.errors.InvolutionCheckError` naming the addresses of any state that does
    not return (or, with ``raise_on_failure=False``, the report). A drawn state with more
    than ``max_latent`` latent choices is drawn again (a random walk's prior has a heavy
    tail of very long runs; each costs a sweep per step)."""
    report = NPCheckReport()
    n_steps = kernel.n_steps * (kernel.lookahead + 1)
    saved = kernel.momentum, kernel.direction
    try:
        for trial in range(trials):
            trace = _draw(model, args, observations, kernel.selection, max_latent)
            kernel.momentum, kernel.direction = {}, 1 if trial % 2 == 0 else -1
            forward = kernel.start(trace)
            obs = {a: r.value for a, r in trace.flat_records().items() if a not in kernel.selection}
            integrator = Integrator(trace, obs, forward, kernel.selection, kernel.discontinuous)
            if not all(integrator.step() for _ in range(n_steps)) or not math.isfinite(integrator.current.loglik):
                report.left_support += 1
                continue
            report.trials += 1
            report.extensions += len(forward.extended)
            report.extensions_in_sweep += forward.extended_in_sweep
            problem = run_back(trace, obs, forward, kernel.selection, kernel.discontinuous, n_steps, tol)
            if problem:
                report.failures.append((trial, f"direction {'ascending' if forward.direction > 0 else 'descending'}"
                                               f": {problem}"))
    finally:
        kernel.momentum, kernel.direction = saved
    if report.failures and raise_on_failure:
        lines = "\n".join(f"  trial {t}: {why}" for t, why in report.failures[:5])
        raise InvolutionCheckError(f"check_nphmc: {len(report.failures)} of {report.trials} trajectories of "
                                   f"{kernel.name} do not return when run back:\n{lines}", report)
    return report
