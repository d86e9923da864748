"""The paper's two reversible-jump examples written as ONE proposal program each
(Roberts, Gallagher & Taimre, *Reversible Jump Probabilistic Programming*, AISTATS 2019,
Figs. 2 and 4), with the kernel derived by :func:`imcmc_lab.rj_proposal`.

Compare with :mod:`.soccer` and :mod:`.coal`, where both directions of the
involution are written by hand: here nothing says what the reverse of a move is,
what its auxiliary values are, or what the Jacobian is.

* :func:`soccer_jump` -- Fig. 2's ``soccerJump``: from model 1 draw ``u ~ N(0, 1.5)``
  and propose model 2 with ``kap = 0.015 e^u``; from model 2 propose model 1 (``kap``
  is discarded). The reverse ``u* = log(kap / 0.015)`` is solved symbolically.
* :func:`coal_move` -- Fig. 4's ``coalMove``: Green's (1995) move probabilities, then
  ``coalMoveRate`` (``g_j -> exp(log g_j + u)``), ``coalMovePoint`` (``s_j`` uniform
  between its neighbours), ``coalMoveBirth`` (a point ``x ~ U(0, L)``; the segment it
  splits keeps its height on the left and gets ``u g_j``, ``u ~ lognormal(0, 1)``, on the
  right) and ``coalMoveDeath`` (delete ``s_j`` and the height to its right). Indices are
  0-based. The reverse moves (a death for each birth, with its index; a birth for each
  death, with ``x = s_j`` and ``u = g_{j+1} / g_j``) are found and solved numerically.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import cycle, gen, lognormal, normal, rj_proposal, run_chain, uniform, uniform_discrete
from .coal import LENGTH, TabulatedDiscrete, initial_trace, move_probabilities
from .random_walk import random_walk_kernel
from .soccer import JUMP_STD, KAPPA_SCALE

__all__ = ["soccer_jump", "soccer_rj_kernel", "coal_move", "coal_rj_kernel",
           "replace_at", "insert_at", "delete_at", "sample_coal_n"]


@gen
def soccer_jump(trace):
    """Fig. 2's ``soccerJump``."""
    if trace["model"] == 1:
        u = normal(0.0, JUMP_STD) @ "u"
        return {"model": 2, "kap": KAPPA_SCALE * torch.exp(u)}
    return {"model": 1}


def soccer_rj_kernel(lam_step=0.05, kap_step=0.01, check=False):
    """The derived jump, then random walks on ``lam`` and (in model 2) ``kap`` -- the same
    cycle as :func:`.soccer.soccer_kernel`, with the jump derived instead of hand-written."""
    return cycle(
        rj_proposal(soccer_jump, check=check, name="jump"),
        random_walk_kernel(["lam"], lam_step, name="walk lam"),
        random_walk_kernel(["kap"], kap_step, name="walk kap"),
        name="soccer (derived jump)",
    )


def replace_at(vector, j, value):
    """Stochaskell's ``replaceAt``: ``vector`` with entry ``j`` replaced."""
    return torch.cat([vector[:j], value.reshape(1), vector[j + 1:]])


def insert_at(vector, j, value):
    """Stochaskell's ``insertAt``: ``value`` inserted before entry ``j``."""
    return torch.cat([vector[:j], value.reshape(1), vector[j:]])


def delete_at(vector, j):
    """Stochaskell's ``deleteAt``."""
    return torch.cat([vector[:j], vector[j + 1:]])


@gen
def coal_move(trace, length):
    """Fig. 4's ``coalMove`` (0: rate, 1: point, 2: birth, 3: death)."""
    n, s, g = trace["n"], trace["s"], trace["g"]
    move = TabulatedDiscrete(move_probabilities(n)) @ "move"
    if move == 0:                                       # coalMoveRate
        j = uniform_discrete(0, n) @ "j"
        u = uniform(-0.5, 0.5) @ "u"
        return {"g": replace_at(g, j, torch.exp(torch.log(g[j]) + u))}
    if move == 1:                                       # coalMovePoint
        j = uniform_discrete(0, n - 1) @ "j"
        u = uniform(0.0, 1.0) @ "u"
        lo = s[j - 1] if j > 0 else 0.0
        hi = s[j + 1] if j + 1 < n else length
        return {"s": replace_at(s, j, lo + (hi - lo) * u)}
    if move == 2:                                       # coalMoveBirth
        x = uniform(0.0, length) @ "x"
        j = int(torch.searchsorted(s.detach(), x.detach()))
        u = lognormal(0.0, 1.0) @ "u"
        return {"n": n + 1, "s": insert_at(s, j, x), "g": insert_at(g, j + 1, u * g[j])}
    j = uniform_discrete(0, n - 1) @ "j"                # coalMoveDeath
    return {"n": n - 1, "s": delete_at(s, j), "g": delete_at(g, j + 1)}


def coal_rj_kernel(length=LENGTH, check=False):
    """The paper's coal-mining sampler, derived from :func:`coal_move`."""
    return rj_proposal(coal_move, (float(length),), check=check, name="coal (derived from coalMove)")


def sample_coal_n(steps, seed, n=3):
    """Run :func:`coal_rj_kernel` for ``steps`` moves from :func:`.coal.initial_trace` with
    ``n`` change points; the number of change points per step, as a NumPy array. A plain
    top-level function, so it can run in a worker process."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    chain = run_chain(coal_rj_kernel(), initial_trace(n=n), steps, progress=False, record={"n": "n"})
    return np.asarray(chain.values("n"))
