"""Soccer goals: Poisson or negative binomial? (Green & Hastie 2009; Roberts et al. 2019, Sec. 5.1)

Model indicator ``"model"`` in {1, 2}, each with prior probability 1/2.

* Model 1: ``lam ~ gamma(25, 10)`` (shape, rate); goals ``y_i ~ poisson(lam)``.
* Model 2: ``lam ~ gamma(25, 10)``, ``kap ~ gamma(1, 10)``; goals are negative
  binomial with mean ``lam`` and overdispersion ``kap``:
  ``neg_binomial(r = 1/kap, p = 1/(1 + kap*lam))``.

The jump (Green & Hastie): from model 1, draw ``u ~ normal(0, 1.5)`` and set
``kap = 0.015 exp(u)``, keeping ``lam``; from model 2, drop ``kap``
(``u = log(kap / 0.015)``). ``lam`` is left alone by the transform: it is an
implicit copy, eliminated from the Jacobian, which is ``d kap / d u = kap``.
"""

from __future__ import annotations

import json
from importlib import resources

import torch

from .. import (continuous, cycle, discrete, gamma, gen, iid, neg_binomial, normal, poisson, read,
                transform, uniform_discrete, write)
from ..inference.involutive import InvolutiveKernel
from .random_walk import random_walk_kernel

__all__ = ["load_goals", "soccer", "jump_aux", "jump", "soccer_kernel", "initial_trace"]

KAPPA_SCALE = 0.015
JUMP_STD = 1.5


def load_goals() -> torch.Tensor:
    """Total goals in each of 1140 English league games (the data of the paper)."""
    text = resources.files(__package__).joinpath("data/soccer_goals.json").read_text()
    return torch.tensor(json.loads(text)["goals"], dtype=torch.int64)


@gen
def soccer(n):
    model = uniform_discrete(1, 2) @ "model"
    lam = gamma(25.0, 10.0) @ "lam"
    if model == 1:
        iid(poisson(lam), n) @ "y"
    else:
        kap = gamma(1.0, 10.0) @ "kap"
        iid(neg_binomial(1.0 / kap, 1.0 / (1.0 + kap * lam)), n) @ "y"


@gen
def jump_aux(trace):
    if trace["model"] == 1:
        normal(0.0, JUMP_STD) @ "u"


@transform
def jump(model_in, aux_in, model_out, aux_out):
    if read(model_in["model"], discrete) == 1:
        u = read(aux_in["u"], continuous)
        write(model_out["model"], 2, discrete)
        write(model_out["kap"], KAPPA_SCALE * torch.exp(u), continuous)
    else:
        kap = read(model_in["kap"], continuous)
        write(model_out["model"], 1, discrete)
        write(aux_out["u"], torch.log(kap / KAPPA_SCALE), continuous)


def soccer_kernel(lam_step=0.05, kap_step=0.01, check=False):
    """Model jump, then random walks on ``lam`` and (in model 2) ``kap``."""
    return cycle(
        InvolutiveKernel(jump_aux, (), jump, check=check, name="jump"),
        random_walk_kernel(["lam"], lam_step, name="walk lam"),
        random_walk_kernel(["kap"], kap_step, name="walk kap"),
        name="soccer",
    )


def initial_trace(goals=None):
    goals = load_goals() if goals is None else goals
    trace, _ = soccer.generate((len(goals),), {"model": 1, "lam": 2.5, "y": goals})
    return trace
