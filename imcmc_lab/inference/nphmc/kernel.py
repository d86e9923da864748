"""The NP-HMC / NP-DHMC kernel: persistent momenta and direction, look-ahead, a record per move.

One move (thesis "Nonparametric Involutive MCMC", Ch. 7, with the extension rule of
:mod:`.coordinates`): the trace's latent values become reference coordinates (a discrete
choice's coordinate is redrawn within the interval that maps to its value), momenta are
refreshed (``p <- ρp + αξ``, ``ρ = √(1-α²)``; Laplace momenta through a Gaussian copula so
they stay exactly Laplace), then blocks of ``n_steps`` steps are run; after block ``j``
the move is accepted if ``u < exp(H_0 - H_j)`` for the one uniform ``u`` of the move (the
look-ahead of Sohl-Dickstein et al.: up to ``lookahead`` extra blocks). On acceptance the
state keeps the coordinates the final run used and their momenta; on rejection the
momenta are negated and the direction bit flips.
"""

from __future__ import annotations

import math

import torch

from ...core.address import format_address
from ...core.choicemap import as_selection
from ...core.values import DTYPE
from ...errors import ImcmcError
from ..kernels import Kernel
from ...core.distributions.reference import NoReferenceMap
from .coordinates import (Trajectory, draw_momentum, gauss_to_laplace, laplace_to_gauss, no_map_error,
                          redraw_in_interval, unit_coordinate)
from .check import run_back
from .integrator import Integrator
from .scale import StepScale

__all__ = ["NPHMC", "nphmc", "NPRecord"]


class NPRecord:
    """What one NP-HMC move did (for views and tests).

    ``energy``: ``{"loglik", "prior", "kinetic"}`` each as ``(start, end)`` over the
    instantiated coordinates (``prior`` is Σ V_a(z_a): ½z² per normal coordinate, 0 per unit one); ``log_alpha``; ``accepted``; ``block``
    (1-based look-ahead block that was accepted, ``None`` if rejected); ``dim_before`` /
    ``dim_after`` (latent choices used); ``instantiated`` and ``used`` addresses;
    ``discontinuous``: the instantiated addresses moved as discontinuous coordinates;
    ``unit``: those with a unit coordinate (reference U(0, 1)); the others' is N(0, 1);
    ``trajectory``: one ``{address: z}`` per step (step 0 is the start) with ``used`` per step;
    ``step_size``: this move's ε (after jitter); ``step_sizes``: ``{address: ε·s_a}`` per
    instantiated coordinate (``s_a`` from the kernel's ``step_scale``, 1 without);
    ``gradient_evaluations``; ``reason`` why a move was rejected early, if it was."""

    def __init__(self):
        self.energy, self.log_alpha, self.accepted, self.block = {}, -math.inf, False, None
        self.dim_before = self.dim_after = 0
        self.instantiated, self.used, self.trajectory, self.used_per_step = [], [], [], []
        self.discontinuous, self.unit, self.step_size, self.step_sizes = [], [], math.nan, {}
        self.gradient_evaluations, self.evaluations, self.reason = 0, 0, None

    def __repr__(self):
        return (f"<NPRecord accepted={self.accepted} block={self.block} dim {self.dim_before}->"
                f"{self.dim_after} log_alpha={self.log_alpha:.4g}>")


_LATTICE = ("NPHMC: {address} is a continuous choice moved as a discontinuous coordinate, and "
            "jitter=0: each update moves it by exactly ±step_size, so it would stay on one lattice "
            "of values and the chain would not sample its posterior. Use jitter > 0 (default 0.5).")


def _scalar(value):
    return float(value) if isinstance(value, torch.Tensor) and value.numel() == 1 else value


def _observations(trace, selection):
    return {a: r.value for a, r in trace.flat_records().items() if a not in selection}


def _refresh(p, discontinuous, alpha):
    """Partial momentum refresh that keeps N(0, 1) (or Laplace(0, 1)) exactly."""
    if alpha >= 1.0:
        return draw_momentum(discontinuous)
    rho, xi = math.sqrt(1.0 - alpha * alpha), float(torch.randn((), dtype=DTYPE))
    if not discontinuous:
        return rho * p + alpha * xi
    return gauss_to_laplace(rho * laplace_to_gauss(p) + alpha * xi)


class NPHMC(Kernel):
    """Nonparametric (discontinuous) HMC on the latent choices ``selection`` names.

    ``selection``: the latent addresses (a namespace selects an unbounded family such as
    ``("u", i)`` for all ``i``); every other choice of the trace is held fixed (observed).
    ``discontinuous``: addresses or namespaces of continuous choices to move with Laplace
    momenta and coordinate-wise updates (every discrete choice always is); ``()`` on a
    model without discrete choices is plain NP-HMC. ``persistence``: the refresh weight
    α (1 = fresh momenta each move; smaller keeps momentum and direction, generalised
    HMC). ``lookahead``: extra blocks of ``n_steps`` to try before rejecting. ``jitter``:
    the step size is drawn uniformly in ``step_size · (1 ± jitter)`` each move.
    ``check``: run each trajectory back and reject (with a reason) if it does not return.
    ``coordinates``: ``"unit"`` (default) gives a ``uniform(lo, hi)`` choice moved as a
    discontinuous coordinate the coordinate ``u = (v - lo) / (hi - lo)`` with reference
    U(0, 1): no prior term in the energy, reflection at 0 and 1; every other choice keeps
    the N(0, 1) coordinate. ``"normal"``: N(0, 1) coordinates for all (see
    :mod:`.coordinates`). On the thesis's walk (start and steps uniform, all discontinuous)
    the unit coordinates cut the start's autocorrelation time from 13 to 3 moves at α = 1
    (``benchmarks/nonparametric.py --only walk-energy``).

    ``step_scale``: ``{address or namespace: factor}`` (addresses as ``selection`` names
    them; ``"step"`` covers every ``("step", i)``); coordinate ``a``'s step is ε·s_a, ``s_a``
    the factor of the longest key that is a prefix of ``a`` (1 where none is), the same
    jittered ε for all. A discontinuous coordinate moves by ±ε·s_a per update; a continuous
    one is kicked and rotated for ε·s_a (a diagonal mass matrix; see :mod:`.scale`), and an
    extension is replayed with its own factor. On the walk with unit coordinates,
    ``{"start": 1/3, "step": 1/2}`` (1 / (hi - lo) of each uniform) makes ε a displacement
    in value, as the thesis's code moves them. A factor that is not positive and finite, or a key that is not an address,
    is a ``ValueError`` at once; a key that matches no latent address of the first trace
    and overlaps no address or namespace the selection names is one at the first move.

    ``jitter`` defaults to 0.5 (ε uniform in [0.5, 1.5]·``step_size``, as the thesis's
    experiments ran): a coordinate-wise update moves a discontinuous coordinate by exactly
    ±ε, so with a fixed ε a continuous discontinuous coordinate that every trace uses (the
    walk's start) never leaves the lattice z₀ + εℤ and the chain samples the posterior
    restricted to that lattice (on the walk, P(start < 1) anywhere in 0.855–0.938 instead of
    0.89977, depending on z₀). ``jitter=0`` with such a coordinate is therefore an error.
    """

    def __init__(self, selection, step_size=0.1, n_steps=5, *, discontinuous=None, persistence=1.0,
                 lookahead=0, jitter=0.5, coordinates="unit", step_scale=None, check=False, name=None):
        super().__init__(name or f"nphmc({selection!r})")
        if not (0.0 < persistence <= 1.0):
            raise ValueError(f"NPHMC: persistence is the refresh weight α in (0, 1], got {persistence!r}")
        if int(lookahead) != lookahead or lookahead < 0 or int(n_steps) != n_steps or n_steps < 1:
            raise ValueError(f"NPHMC: n_steps must be a positive and lookahead a non-negative integer, "
                             f"got n_steps={n_steps!r}, lookahead={lookahead!r}")
        if not step_size > 0 or not 0 <= jitter < 1:
            raise ValueError(f"NPHMC: step_size must be positive and jitter in [0, 1), got "
                             f"step_size={step_size!r}, jitter={jitter!r}")
        if coordinates not in ("unit", "normal"):
            raise ValueError(f"NPHMC: coordinates must be 'unit' or 'normal', got {coordinates!r}")
        self.unit_uniforms = coordinates == "unit"
        self.step_scale = StepScale(step_scale)
        self.selection = as_selection(selection)
        self.discontinuous = as_selection(discontinuous or ())
        self.step_size, self.n_steps, self.lookahead = float(step_size), int(n_steps), int(lookahead)
        self.persistence, self.jitter, self.check = float(persistence), float(jitter), check
        self.momentum, self.direction = {}, 1      # kept between moves
        self.coordinates = {}                      # address -> (z, value) it left each latent at
        self.last_record = None

    # -- the move ------------------------------------------------------------
    def start(self, trace):
        """The trajectory at time 0 for ``trace``: coordinates of its latent values, momenta."""
        eps = self.step_size
        if self.jitter:
            eps *= 1.0 + self.jitter * (2.0 * float(torch.rand((), dtype=DTYPE)) - 1.0)
        traj = Trajectory(eps, self.direction, self.unit_uniforms, self.step_scale)
        for address, record in trace.flat_records().items():
            if address not in self.selection:
                continue
            dist, value = record.dist, record.value
            disc = dist.discrete or address in self.discontinuous
            if disc and not dist.discrete and not self.jitter:
                raise ImcmcError(_LATTICE.format(address=format_address(address)))
            unit = traj.wants_unit(dist, disc)
            try:
                z = self._coordinate(address, dist, value, unit)
            except NoReferenceMap as exc:
                raise no_map_error(address, dist, exc) from None
            old = self.momentum.get(address)
            p = draw_momentum(disc) if old is None or old[1] != disc else _refresh(old[0], disc, self.persistence)
            traj.add(address, z, p, disc, unit)
        if not self.step_scale.checked:
            self.step_scale.check(list(traj.disc), self.selection)
        return traj

    def _coordinate(self, address, dist, value, unit):
        """The coordinate of a latent value: a discrete one's redrawn in its interval; a
        continuous one's the coordinate this kernel left it at, if the value is still the one
        that coordinate maps to, else ``to_reference(value)``. (Far out, ``|z|`` beyond about
        8.3 for a uniform, several coordinates map to the same float value — the end of its
        support — and ``to_reference`` of it is infinite; a chain whose trajectories went
        there used to reject them all, and the GMM's chains from some prior draws never moved.)"""
        if dist.discrete:
            return redraw_in_interval(*dist.reference_interval(value))
        kept = self.coordinates.get(address)
        if kept is not None and kept[1] == _scalar(value) and kept[2] == unit:
            return kept[0]
        return unit_coordinate(dist, value) if unit else float(dist.to_reference(value))

    def step(self, trace):
        record = self.last_record = NPRecord()
        observations = _observations(trace, self.selection)
        traj = self.start(trace)
        integrator = Integrator(trace, observations, traj, self.selection, self.discontinuous)
        start = integrator.current
        record.dim_before = len(start.values)
        record.trajectory.append(dict(traj.z))
        record.used_per_step.append(start.used)
        u = float(torch.rand((), dtype=DTYPE))
        accepted_at = self._blocks(integrator, start, u, record)
        record.instantiated, record.evaluations = list(traj.disc), integrator.evaluations
        record.discontinuous = [address for address, disc in traj.disc.items() if disc]
        record.unit = [address for address, unit in traj.unit.items() if unit]
        record.step_size = traj.step_size
        record.step_sizes = {a: traj.step_size * s for a, s in traj.scale.items()}
        final = integrator.current
        if accepted_at is not None and self.check and not self._returns(trace, observations, traj, record):
            accepted_at = None
        if accepted_at is not None:
            new_trace, _, _ = trace.update(final.values)
            if new_trace.score == -math.inf:        # a value on the boundary of its support
                accepted_at, record.reason = None, "the proposed trace has log-density -inf"
        kept = start if accepted_at is None else final
        self.coordinates = {a: ((traj.z0 if kept is start else traj.z)[a], _scalar(v), traj.unit[a])
                            for a, v in kept.values.items()}
        if accepted_at is None:
            self.momentum = {a: (-traj.p0[a], traj.disc[a]) for a in start.values}
            self.direction = -self.direction
            record.dim_after, record.used = record.dim_before, start.used
            return trace, False
        self.momentum = {a: (traj.p[a], traj.disc[a]) for a in final.values}
        record.accepted, record.block = True, accepted_at
        record.dim_after, record.used = len(final.values), final.used
        return new_trace, True

    def _blocks(self, integrator, start, u, record):
        """Run blocks of steps; the 1-based block accepted by ``u``, or ``None``."""
        traj = integrator.trajectory
        for block in range(1, self.lookahead + 2):
            for _ in range(self.n_steps):
                ok = integrator.step()
                record.gradient_evaluations += 1
                record.trajectory.append(dict(traj.z))
                record.used_per_step.append(integrator.current.used)
                if not ok:
                    record.reason = f"the trajectory left the support (block {block})"
                    return None
            u0, k0, prior0 = traj.energy(True, start.loglik)
            u1, k1, prior1 = traj.energy(False, integrator.current.loglik)
            record.energy = {"loglik": (start.loglik, integrator.current.loglik), "prior": (prior0, prior1),
                             "kinetic": (k0, k1)}
            record.log_alpha = (u0 + k0) - (u1 + k1)
            if math.log(u) < record.log_alpha if u > 0 else True:
                return block
        return None

    def _returns(self, trace, observations, traj, record):
        problem = run_back(trace, observations, traj, self.selection, self.discontinuous,
                           len(record.trajectory) - 1)
        if problem:
            record.reason = problem
        return problem is None


def nphmc(trace, selection, step_size=0.1, n_steps=5, **options):
    """One NP-HMC move with fresh momenta: ``(new_trace, accepted)`` (see :class:`NPHMC`)."""
    return NPHMC(selection, step_size, n_steps, **options).step(trace)
