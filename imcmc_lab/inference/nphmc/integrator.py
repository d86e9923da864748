"""The NP-(D)HMC integrator: a symmetric splitting on continuous coordinates around a coordinate-wise
sweep over the discontinuous ones (Nishimura, Dunson and Lu's discontinuous HMC), on a
:class:`~.coordinates.Trajectory` that instantiates coordinates as the program asks.

One step of size ε:  kick ε/2, rotate ε/2, sweep, rotate ε/2, kick ε/2, where a kick moves
the continuous momenta by the likelihood's gradient and a rotation is the exact flow of the
reference part ½z² + ½p² (the Gaussian splitting of Shahbaba, Lan, Johnson and Neal, "Split
Hamiltonian Monte Carlo"). A coordinate the program does not use then keeps its energy
exactly, as a discontinuous one does under the sweep: the look-ahead's acceptance test after
block i then does not depend on coordinates first needed in a later block. (An unused
discontinuous coordinate moves under its reference potential: a harmonic oscillator for a
normal coordinate, free flight between walls for a unit one.) (With leapfrog on
U = -loglik + ½z² it did, by O(ε²), and the look-ahead move was not an exact involution on
programs that instantiate continuous coordinates mid-trajectory.) The sweep visits the
discontinuous coordinates in the canonical address order, ascending or descending by the
trajectory's direction bit, including any instantiated during the sweep that come after
the one being moved. Negating the momenta and the direction retraces the step exactly.
"""

from __future__ import annotations

import math

from .coordinates import evaluate, rotate, sort_key

__all__ = ["Integrator"]


class Integrator:
    """Runs steps on one trajectory of ``trace``'s program; keeps the current evaluation."""

    def __init__(self, trace, observations, trajectory, selection, discontinuous):
        self.trace, self.observations = trace, observations
        self.trajectory, self.selection, self.discontinuous = trajectory, selection, discontinuous
        self.evaluations = 0
        self.current = self.evaluate(need_grad=True)

    def evaluate(self, need_grad=False):
        """Run the program at the current coordinates (with the likelihood's gradient if
        ``need_grad``: computed only when a continuous coordinate is in play)."""
        traj = self.trajectory
        self.evaluations += 1
        with_grad = need_grad and any(not d for d in traj.disc.values())
        result = evaluate(self.trace, self.observations, traj, self.selection, self.discontinuous, with_grad)
        if need_grad and not with_grad and any(not traj.disc[a] for a in result.values):
            return self.evaluate(need_grad)     # the run instantiated the first continuous coordinate
        return result

    # -- continuous coordinates -------------------------------------------
    def kick(self, c):
        """``p += c s ∂loglik/∂z`` on every continuous coordinate, ``s`` its step factor (a
        coordinate the current program run did not use has no likelihood gradient)."""
        traj, grads = self.trajectory, self.current.grads
        for a in traj.continuous():
            traj.p[a] += c * traj.scale[a] * grads.get(a, 0.0)
        traj.ops.append(("kick", c))

    def rotate(self, c):
        """The exact flow of ``½z² + ½p²`` for time ``c s`` on every continuous coordinate,
        ``s`` its step factor."""
        traj = self.trajectory
        for a in traj.continuous():
            traj.z[a], traj.p[a] = rotate(traj.z[a], traj.p[a], c * traj.scale[a])
        traj.ops.append(("rotate", c))

    # -- discontinuous coordinates ----------------------------------------
    def sweep(self):
        """One coordinate-wise update of every discontinuous coordinate, in sweep order.
        Returns the log-likelihood at the end (``-inf``: the state left the support)."""
        traj = self.trajectory
        state = self.evaluate() if traj.continuous() else self.current
        loglik, used = state.loglik, set(state.values)
        if not math.isfinite(loglik):
            return loglik
        descending = traj.direction < 0
        order = sorted(((sort_key(a), a) for a, d in traj.disc.items() if d), reverse=descending)
        seen, i = len(traj.extended), 0
        while i < len(order):
            key, address = order[i]
            traj.cursor = key
            i += 1
            if address in used:
                loglik, used = self.update_coordinate(address, loglik, used)
            else:       # the program does not read it here: its reference dynamics, exactly
                traj.z[address], traj.p[address] = traj.reference_update(traj.z[address], traj.p[address],
                                                                         traj.unit[address], traj.scale[address])
            if len(traj.extended) > seen:      # instantiated now: swept later iff after the cursor
                later = [(sort_key(a), a) for a in traj.extended[seen:]
                         if traj.disc[a] and traj.precedes(key, sort_key(a))]
                order[i:] = sorted(order[i:] + later, reverse=descending)
                seen = len(traj.extended)
        traj.cursor = None
        traj.sweeps += 1
        return loglik

    def update_coordinate(self, address, loglik, used):
        """Move ``z_a`` by ±ε·s_a (sign of its Laplace momentum, ``s_a`` its step factor) if the
        momentum pays for the energy change, else reflect the momentum (at once, without
        running the program, if a unit coordinate would leave [0, 1]). Returns the log-likelihood and the coordinates
        the program uses at the resulting position."""
        traj = self.trajectory
        z, p = traj.z[address], traj.p[address]
        step = math.copysign(traj.step_size * traj.scale[address], p)
        reference = traj.reference_change(z, z + step, traj.unit[address])
        if reference < math.inf:
            traj.z[address] = z + step
            proposed = self.evaluate()
            delta = -(proposed.loglik - loglik) + reference
            if abs(p) > delta:
                traj.p[address] = p - math.copysign(1.0, p) * delta
                return proposed.loglik, set(proposed.values)
        traj.z[address], traj.p[address] = z, -p
        return loglik, used

    # -- one step ------------------------------------------------------------
    def step(self):
        """One step; ``False`` if the state left the support (the move is then rejected)."""
        eps = self.trajectory.step_size
        self.kick(0.5 * eps)
        self.rotate(0.5 * eps)
        if any(self.trajectory.disc.values()):
            if not math.isfinite(self.sweep()):
                return False
        else:
            self.trajectory.sweeps += 1
        self.rotate(0.5 * eps)
        self.current = self.evaluate(need_grad=True)
        if not math.isfinite(self.current.loglik):
            return False
        self.kick(0.5 * eps)
        return True
