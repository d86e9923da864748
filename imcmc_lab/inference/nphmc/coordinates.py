"""Reference coordinates of a nonparametric HMC trajectory, and running the program in them.

Every latent scalar choice ``a`` (an address of the kernel's selection) has a coordinate
``z_a`` with a reference measure μ_a and a map to its value under which μ_a becomes the
choice's prior, so that the prior densities are expressed by the map:

* **normal** coordinates: μ_a = N(0, 1), ``v_a = F_a⁻¹(Φ(z_a))`` (see
  :mod:`imcmc_lab.core.distributions.reference`); reference potential ½z_a²;
* **unit** coordinates (a ``uniform(lo, hi)`` choice moved as a discontinuous coordinate,
  with ``coordinates="unit"``): μ_a = U(0, 1), ``v_a = lo + (hi - lo) z_a``; reference
  potential 0 inside [0, 1] and an infinite wall outside (the coordinate-wise update
  reflects there). This is the uniform sampler of the trace semantics the thesis cites
  (Mak et al. 2021a; "Nonparametric Involutive MCMC", Sec. 3.2.1): in the box a
  coordinate whose likelihood is flat keeps moving at speed ε whatever its energy, where
  in the N(0, 1) well a chain with little kinetic energy stays near the bottom.

The potential energy is

    U(z) = -log L(v(z)) + Σ V_a(z_a)       (sum over every *instantiated* coordinate)

where ``L`` holds the densities of the choices that are not latent (observations) and
``V_a`` is the reference potential. A coordinate the program does not use moves under its
reference potential alone (a harmonic oscillator, or free flight between walls), and so
does one that is not instantiated yet, which is why an extension is drawn at time 0 from
μ_a and *replayed* through every operation of the trajectory so far
(:meth:`Trajectory.extend`): the trajectory then is the one it would have been had that
coordinate been drawn at the start, and the move is an exact involution.
"""

from __future__ import annotations

import math
import threading

import torch

from ...core.address import format_address
from ...core.distributions.continuous import Uniform
from ...core.distributions.reference import NoReferenceMap, ndtr, ndtri
from ...core.values import DTYPE
from ...errors import ImcmcError
from ...modeling.execution import Execution
from ...modeling.gen import DynamicGenFunction
from ...modeling.trace import ChoiceRecord
from ...modeling.tracer import Assess, AssessFailure, describe_line
from .scale import UNSCALED

__all__ = ["Trajectory", "Evaluation", "evaluate", "sort_key", "laplace_to_gauss", "gauss_to_laplace",
           "kinetic", "rotate", "redraw_in_interval", "no_map_error", "unit_coordinate"]

_LOG2 = math.log(2.0)


def sort_key(address):
    """The canonical order of addresses (the discontinuous sweep's order)."""
    return tuple((type(k) is int, k) for k in address)


# ---------------------------------------------------------------------------
# momenta: Gaussian (continuous coordinates) and Laplace (discontinuous ones)
# ---------------------------------------------------------------------------
def kinetic(p: float, discontinuous: bool) -> float:
    return abs(p) if discontinuous else 0.5 * p * p


def draw_momentum(discontinuous: bool) -> float:
    g = float(torch.randn((), dtype=DTYPE))
    return gauss_to_laplace(g) if discontinuous else g


def laplace_to_gauss(p: float) -> float:
    """``Φ⁻¹(F_Laplace(p))``: the Gaussian copula coordinate of a Laplace(0, 1) momentum,
    from the log of its tail ``log(½) - |p|``. (``ndtri(½ e^-|p|)`` underflows to ±inf from
    |p| ≈ 745: a momentum that large — a chain started far out in the tail turns hundreds of
    nats of likelihood into kinetic energy — then stayed infinite under persistence and every
    later move was rejected.)"""
    from scipy.special import ndtri_exp      # Φ⁻¹(exp(y)), accurate for any y <= 0

    return math.copysign(-float(ndtri_exp(-_LOG2 - abs(p))), p)


def gauss_to_laplace(g: float) -> float:
    """``F_Laplace⁻¹(Φ(g))``, computed from the tail that keeps its precision."""
    log_tail = float(torch.special.log_ndtr(torch.tensor(-abs(g), dtype=DTYPE)))
    return math.copysign(-(_LOG2 + log_tail), g)


def rotate(z: float, p: float, t: float):
    """The exact flow of the reference part ``½z² + ½p²`` of the energy for time ``t``."""
    c, s = math.cos(t), math.sin(t)
    return c * z + s * p, c * p - s * z


def redraw_in_interval(lo: float, hi: float) -> float:
    """``z ~ N(0, 1)`` restricted to ``lo < z <= hi`` (``Φ(z)`` uniform on the interval)."""
    u = float(torch.rand((), dtype=DTYPE))
    if lo > 0:         # the upper tail: draw in the survival function, where the precision is
        s_hi, s_lo = ndtr(-lo), ndtr(-hi)
        return -ndtri(s_lo + u * (s_hi - s_lo))
    c_lo, c_hi = ndtr(lo), ndtr(hi)
    z = ndtri(c_lo + u * (c_hi - c_lo))
    return min(max(z, math.nextafter(lo, math.inf)), hi)


# ---------------------------------------------------------------------------
# the trajectory's coordinates and the record of its operations
# ---------------------------------------------------------------------------
class Trajectory:
    """Coordinates ``z``, momenta ``p`` (and their time-0 values) of one iteration, and the
    operations applied so far, so that an extension can be replayed through them.

    ``ops`` lists the continuous operations in order (``("kick", c)``: ``p += c ∂loglik/∂z``;
    ``("rotate", c)``: the exact flow of ½z² + ½p² for time ``c``); ``sweeps`` counts the completed sweeps over the
    discontinuous coordinates; ``cursor`` is the sort key of the coordinate being swept
    (``None`` between sweeps). ``unit[a]``: whether ``a`` is a unit coordinate (reference
    U(0, 1)) rather than a normal one; ``unit_uniforms``: whether a uniform choice moved as a
    discontinuous coordinate gets a unit coordinate (the kernel's ``coordinates="unit"``).
    ``scale[a]``: the factor of ``a``'s step, ``step_size · scale[a]`` (the kernel's
    ``step_scale``, a :class:`~.scale.StepScale`; ``ops`` record the unscaled times)."""

    def __init__(self, step_size: float, direction: int, unit_uniforms: bool = False, step_scale=UNSCALED):
        self.step_size, self.direction, self.unit_uniforms = step_size, direction, unit_uniforms
        self.step_scale = step_scale
        self.z, self.p, self.z0, self.p0, self.disc, self.unit = {}, {}, {}, {}, {}, {}
        self.scale = {}
        self.ops, self.sweeps, self.cursor = [], 0, None
        self.extended = []          # addresses instantiated after time 0, in order
        self.extended_in_sweep = 0  # how many of them in the middle of a sweep

    def wants_unit(self, dist, discontinuous: bool) -> bool:
        """Whether a choice of ``dist`` gets a unit coordinate in this trajectory."""
        return self.unit_uniforms and discontinuous and type(dist) is Uniform

    def add(self, address, z, p, discontinuous, unit=False):
        """A coordinate present at time 0 (from the current trace)."""
        self.z[address] = self.z0[address] = z
        self.p[address] = self.p0[address] = p
        self.disc[address], self.unit[address] = discontinuous, unit
        self.scale[address] = self.step_scale.of(address)

    def extend(self, address, discontinuous, unit=False):
        """Instantiate ``address`` mid-trajectory: draw ``(z, p)`` at time 0 from the reference
        and replay the coordinate's own dynamics through every operation so far."""
        z0 = float(torch.rand((), dtype=DTYPE) if unit else torch.randn((), dtype=DTYPE))
        p0 = draw_momentum(discontinuous)
        self.z0[address], self.p0[address] = z0, p0
        self.disc[address], self.unit[address] = discontinuous, unit
        self.scale[address] = self.step_scale.of(address)
        self.z[address], self.p[address] = self._extend_state(address, z0, p0, discontinuous)
        self.extended.append(address)
        self.extended_in_sweep += self.cursor is not None

    def _extend_state(self, address, z, p, discontinuous):
        sweeps = self.sweeps + (self.cursor is not None and self.precedes(sort_key(address), self.cursor))
        return self.replay(z, p, discontinuous, len(self.ops), sweeps, self.unit[address], self.scale[address])

    def replay(self, z, p, discontinuous, n_ops, sweeps, unit=False, scale=1.0):
        """A coordinate the program has not used, from ``(z, p)`` at time 0 through the first
        ``n_ops`` continuous operations (a kick does not move it: its likelihood gradient is
        0; a rotation is the exact flow of ½z² + ½p², for time ``c · scale``) or ``sweeps``
        coordinate-wise updates of ``±step_size · scale`` under its reference potential. Both
        keep its energy exactly, so no acceptance test depends on whether it is instantiated."""
        if not discontinuous:
            for op, c in self.ops[:n_ops]:
                if op == "rotate":
                    z, p = rotate(z, p, c * scale)
            return z, p
        for _ in range(sweeps):
            z, p = self.reference_update(z, p, unit, scale)
        return z, p

    def precedes(self, key, other) -> bool:
        """Whether ``key`` comes before ``other`` in this trajectory's sweep direction."""
        return key < other if self.direction > 0 else key > other

    @staticmethod
    def reference_change(z, z_new, unit) -> float:
        """``V(z_new) - V(z)`` of a coordinate's reference potential (``inf``: a unit
        coordinate would leave [0, 1])."""
        if unit:
            return 0.0 if 0.0 <= z_new <= 1.0 else math.inf
        return 0.5 * (z_new * z_new - z * z)

    def reference_update(self, z, p, unit=False, scale=1.0):
        """One coordinate-wise (Laplace momentum) update, of ``±step_size · scale``, of an unused
        coordinate under its reference potential alone: ½z² (normal) or free flight between
        walls at 0 and 1 (unit)."""
        step = math.copysign(self.step_size * scale, p)
        delta = self.reference_change(z, z + step, unit)
        if abs(p) > delta:
            return z + step, p - math.copysign(1.0, p) * delta
        return z, -p

    def reference_energy(self, address, z) -> float:
        """``V_a(z)``: ½z² for a normal coordinate, 0 for a unit one (inside [0, 1])."""
        return 0.0 if self.unit[address] else 0.5 * z * z

    def continuous(self):
        return [a for a, d in self.disc.items() if not d]

    def energy(self, at_start: bool, loglik: float, addresses=None):
        """``(U, K, prior)`` of the coordinates ``addresses`` (default: all) at time 0 or now:
        ``U = -loglik + Σ V_a(z_a)``, ``K = Σ kinetic(p)``, ``prior = Σ V_a(z_a)``."""
        z, p = (self.z0, self.p0) if at_start else (self.z, self.p)
        addresses = self.disc if addresses is None else addresses
        prior = sum(self.reference_energy(a, z[a]) for a in addresses)
        return -loglik + prior, sum(kinetic(p[a], self.disc[a]) for a in addresses), prior


# ---------------------------------------------------------------------------
# running the program in reference coordinates
# ---------------------------------------------------------------------------
def no_map_error(address, dist, exc, where=""):
    """The error for a latent choice whose distribution has no reference-coordinate map."""
    return ImcmcError(
        f"NPHMC: the latent choice at {format_address(address)}{where} is {dist!r}, and {exc}. Use a "
        f"distribution with a map (normal, uniform, exponential, lognormal, beta(1, b), bernoulli, "
        f"categorical, uniform_discrete, poisson, geometric) or leave the address out of the selection.")


class Evaluation:
    """One run of the program at the trajectory's current coordinates."""

    __slots__ = ("loglik", "values", "grads")

    def __init__(self, loglik, values, grads):
        self.loglik, self.values, self.grads = loglik, values, grads

    @property
    def used(self):
        return list(self.values)


class _Run:
    __slots__ = ("trajectory", "selection", "discontinuous", "need_grad", "prefix", "leaves", "values")

    def __init__(self, trajectory, selection, discontinuous, need_grad):
        self.trajectory, self.selection, self.discontinuous = trajectory, selection, discontinuous
        self.need_grad, self.prefix, self.leaves, self.values = need_grad, (), {}, {}

    def value(self, address, dist, line):
        """The value of latent ``address`` at the current coordinate (extending if needed)."""
        if dist.event_shape != () and not dist.discrete:
            raise ImcmcError(f"NPHMC moves scalar choices; {format_address(address)} ({describe_line(line)}) "
                             f"holds a {dist.name} value of shape {tuple(dist.event_shape)}. Write it as "
                             f"scalar choices, or leave it out of the selection.")
        traj = self.trajectory
        disc = dist.discrete or address in self.discontinuous
        unit = traj.wants_unit(dist, disc)
        if address not in traj.disc:
            traj.extend(address, disc, unit)
        elif traj.disc[address] != disc:
            raise ImcmcError(f"NPHMC: the coordinate {format_address(address)} ({describe_line(line)}) was "
                             f"{'discontinuous' if traj.disc[address] else 'continuous'} earlier in the "
                             f"trajectory and is now {dist!r}; list it in `discontinuous=` so that it is "
                             f"discontinuous in every branch.")
        elif traj.unit[address] != unit:
            raise ImcmcError(f"NPHMC: the coordinate {format_address(address)} ({describe_line(line)}) was a "
                             f"{'uniform' if traj.unit[address] else 'non-uniform'} choice earlier in the "
                             f"trajectory and is now {dist!r}: with coordinates='unit' a discontinuous uniform "
                             f"choice has a U(0, 1) coordinate and any other an N(0, 1) one, so the address "
                             f"must keep its kind. Use coordinates='normal'.")
        z = traj.z[address]
        try:
            if unit:
                value = _unit_value(dist, z)
            elif dist.discrete:
                value = dist.from_reference(z)
            elif self.need_grad and not disc:
                leaf = self.leaves[address] = torch.tensor(z, dtype=DTYPE, requires_grad=True)
                value = dist.from_reference(leaf)
            else:       # a float: distributions may take a fast path outside autograd
                value = dist.from_reference(z)
                value = value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=DTYPE)
        except NoReferenceMap as exc:
            raise no_map_error(address, dist, exc, f" ({describe_line(line)})") from None
        self.values[address] = value
        return value


def _unit_value(dist, u: float):
    """The value ``lo + (hi - lo) u`` of a uniform choice's unit coordinate."""
    return dist.lo + (dist.hi - dist.lo) * u


def unit_coordinate(dist, value) -> float:
    """The unit coordinate ``(v - lo) / (hi - lo)`` of a uniform choice's value."""
    lo, hi = float(dist.lo), float(dist.hi)
    return (float(value) - lo) / (hi - lo)


_active = threading.local()


class _CoordinateAssess(Assess):
    """Assess whose latent choices take their values from the trajectory's coordinates;
    every other choice is given (an observation) and scored into the weight."""

    __slots__ = ()

    def choice(self, address, dist, line):
        run = _active.run
        full = run.prefix + address
        if full not in run.selection:
            return Assess.choice(self, address, dist, line)
        self._claim(address, line, "random choice")
        self._validate(dist, full, line, may_be_impossible=True)
        value = run.value(full, dist, line)
        self.records[address] = ChoiceRecord(dist, value, 0.0)
        return value

    def call(self, address, gen_fn, args, line):
        run = _active.run
        if not isinstance(gen_fn, DynamicGenFunction):
            raise ImcmcError(f"NPHMC runs programs whose sub-calls are @gen functions; the call at "
                             f"{format_address(run.prefix + address)} ({describe_line(line)}) is {gen_fn!r}.")
        saved, run.prefix = run.prefix, run.prefix + address
        try:
            return Assess.call(self, address, gen_fn, args, line)
        finally:
            run.prefix = saved


def evaluate(trace, observations, trajectory, selection, discontinuous, need_grad=False) -> Evaluation:
    """Run ``trace``'s program at the trajectory's coordinates: the log-likelihood of the
    given choices ``observations`` (``-inf`` if the program does not visit every one of
    them), the latent values used, and (``need_grad``) ``∂ loglik / ∂ z`` of the continuous ones."""
    run = _Run(trajectory, selection, discontinuous, need_grad)
    terms = [] if need_grad else None
    saved, _active.run = getattr(_active, "run", None), run
    try:
        with torch.set_grad_enabled(need_grad):
            result = trace.gen_fn._execute(Execution(_CoordinateAssess, trace._args, None, observations or None,
                                                     None, terms))
    except AssessFailure as exc:
        raise ImcmcError(f"NPHMC: at a state of the trajectory the program needs the choice "
                         f"{format_address(exc.args[0])}, which is neither selected (latent) nor given "
                         f"in the trace. Add it to the selection.") from None
    finally:
        _active.run = saved
    loglik = result.weight if result.n_used == len(observations) else -math.inf
    grads = {}
    if need_grad and run.leaves and terms and math.isfinite(loglik):
        leaves = list(run.leaves)
        total = torch.stack([t.reshape(()) for t in terms]).sum()
        if total.requires_grad:
            found = torch.autograd.grad(total, [run.leaves[a] for a in leaves], allow_unused=True)
            grads = {a: float(g) for a, g in zip(leaves, found) if g is not None}
    values = {a: (v.detach() if isinstance(v, torch.Tensor) else v) for a, v in run.values.items()}
    return Evaluation(loglik, values, grads)
