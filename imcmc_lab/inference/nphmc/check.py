"""``check_nphmc``: the NP analogue of the involution check (Algorithm 4 of "Automating
Involutive MCMC using Probabilistic and Differentiable Programming").

A trajectory is run forward from a state drawn from the model (with fresh momenta and a
random direction bit), then back from its end with negated momenta and the direction
flipped; it must return to the start in every coordinate, and the way back must not need
a coordinate the way forward did not instantiate. A wrong extension rule (say, a new
coordinate drawn at the current time instead of replayed from time 0) fails it.

With look-ahead (``kernel.lookahead > 0``) the move is an involution only if the acceptance
test after block i, computed over the coordinates instantiated by then, is the one the way
back computes over every coordinate instantiated by the end: a coordinate first needed in
a later block must have kept its energy exactly up to the end of block i. That is checked
too (it failed with leapfrog on ½z², which changes an unused coordinate's energy by O(ε²)).
"""

from __future__ import annotations

import math

import torch

from ...core.address import format_address
from ...core.values import DTYPE
from ...errors import InvolutionCheckError
from .coordinates import Trajectory, kinetic
from .integrator import Integrator

__all__ = ["check_nphmc", "run_back", "lookahead_problem", "NPCheckReport"]


def run_back(trace, observations, forward, selection, discontinuous, n_steps, tol=1e-7):
    """Run ``n_steps`` back from the end of ``forward``; ``None`` if the trajectory returns to
    its start, else a sentence naming the addresses that do not."""
    back = Trajectory(forward.step_size, -forward.direction, forward.unit_uniforms, forward.step_scale)
    for a, disc in forward.disc.items():
        back.add(a, forward.z[a], -forward.p[a], disc, forward.unit[a])
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


def lookahead_problem(forward, block_ends, tol=1e-9):
    """``None`` if every coordinate instantiated after the end of a look-ahead block had the
    same energy (reference potential + kinetic) there as at time 0, else a sentence naming one that did not.
    ``block_ends``: ``(number of operations, sweeps, instantiated addresses)`` per block."""
    for block, (n_ops, sweeps, present) in enumerate(block_ends[:-1], start=1):
        for a in forward.disc:
            if a in present:
                continue
            z0, p0, disc = forward.z0[a], forward.p0[a], forward.disc[a]
            z, p = forward.replay(z0, p0, disc, n_ops, sweeps, forward.unit[a], forward.scale[a])
            e0 = forward.reference_energy(a, z0) + kinetic(p0, disc)
            e = forward.reference_energy(a, z) + kinetic(p, disc)
            if abs(e - e0) > tol * (1 + e0):
                return (f"look-ahead: {format_address(a)}, first needed after block {block}, had energy "
                        f"{e0:.12g} at time 0 and {e:.12g} at the end of block {block}: the acceptance test "
                        f"after block {block} depends on whether it is instantiated")
    return None


def _forward(kernel, trace, obs, report):
    """Run the kernel's blocks from ``trace``: the trajectory and its block ends, or ``None``
    if it left the support."""
    forward = kernel.start(trace)
    integrator = Integrator(trace, obs, forward, kernel.selection, kernel.discontinuous)
    block_ends = []
    for _ in range(kernel.lookahead + 1):
        if not all(integrator.step() for _ in range(kernel.n_steps)) or not math.isfinite(integrator.current.loglik):
            report.left_support += 1
            return None
        block_ends.append((len(forward.ops), forward.sweeps, set(forward.disc)))
    return forward, block_ends


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
    saved = kernel.momentum, kernel.direction, kernel.coordinates
    try:
        for trial in range(trials):
            trace = _draw(model, args, observations, kernel.selection, max_latent)
            kernel.momentum, kernel.coordinates, kernel.direction = {}, {}, 1 if trial % 2 == 0 else -1
            obs = {a: r.value for a, r in trace.flat_records().items() if a not in kernel.selection}
            run = _forward(kernel, trace, obs, report)
            if run is None:
                continue
            forward, block_ends = run
            report.trials += 1
            report.extensions += len(forward.extended)
            report.extensions_in_sweep += forward.extended_in_sweep
            problem = (run_back(trace, obs, forward, kernel.selection, kernel.discontinuous, n_steps, tol)
                       or lookahead_problem(forward, block_ends, tol))
            if problem:
                report.failures.append((trial, f"direction {'ascending' if forward.direction > 0 else 'descending'}"
                                               f": {problem}"))
    finally:
        kernel.momentum, kernel.direction, kernel.coordinates = saved
    if report.failures and raise_on_failure:
        lines = "\n".join(f"  trial {t}: {why}" for t, why in report.failures[:5])
        raise InvolutionCheckError(f"check_nphmc: {len(report.failures)} of {report.trials} trajectories of "
                                   f"{kernel.name} do not return when run back:\n{lines}", report)
    return report
