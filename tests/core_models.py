"""Test models for the engine core (imported by test_gfi.py and test_incremental.py).

Each model exercises one structural feature of the generative function interface:

* ``branching``   stochastic control flow that adds and removes addresses
                  (a random number of means, an optional scale), int args;
* ``gp``          recursion: the covariance-function PCFG of Fig. 2 of
                  automating-involutive-mcmc.txt (``left_node``/``right_node``
                  sub-calls) feeding an ``mvnormal`` observation;
* ``subcalls``    sub-calls with changing and unchanging arguments, vector choices;
* ``map_model``   ``il.Map`` whose elements have branch-dependent addresses;
* ``unfold_model`` ``il.Unfold`` (a switching random walk).

``log_joint_<model>`` functions are the same joint densities hand-written with
scipy (no engine code), as an independent reference for ``assess``/``score``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats

import imcmc_lab as il

# ---------------------------------------------------------------------------
# stochastic control flow
# ---------------------------------------------------------------------------


@il.gen
def branching(n):
    k = il.poisson_plus_one(1.5) @ "k"
    mus = [il.normal(0.0, 3.0) @ ("mu", j) for j in range(1, k + 1)]
    if il.bernoulli(0.4) @ "wide":
        scale = il.gamma(2.0, 1.0) @ "scale"
    else:
        scale = 1.0
    for i in range(n):
        c = il.uniform_discrete(1, 3) @ ("c", i)
        il.normal(mus[(c - 1) % k], scale) @ ("x", i)
    return k


def log_joint_branching(n, choices) -> float:
    """log p(choices) of ``branching(n)`` written directly with scipy."""
    cm = il.ChoiceMap(choices)
    k = cm["k"]
    expected = {("k",), ("wide",)} | {("mu", j) for j in range(1, k + 1)}
    expected |= {("c", i) for i in range(n)} | {("x", i) for i in range(n)}
    if cm["wide"]:
        expected.add(("scale",))
    if set(cm.addresses()) != expected:
        return -math.inf
    lp = stats.poisson.logpmf(k - 1, 1.5)
    mus = [float(cm["mu", j]) for j in range(1, k + 1)]
    lp += sum(stats.norm.logpdf(m, 0, 3) for m in mus)
    lp += math.log(0.4) if cm["wide"] else math.log(0.6)
    scale = 1.0
    if cm["wide"]:
        scale = float(cm["scale"])
        lp += stats.gamma.logpdf(scale, 2.0, scale=1.0)
    for i in range(n):
        c = cm["c", i]
        lp += -math.log(3) if c in (1, 2, 3) else -math.inf
        lp += stats.norm.logpdf(float(cm["x", i]), mus[(c - 1) % k], scale)
    return float(lp)


# ---------------------------------------------------------------------------
# recursion: the covariance-function grammar of Fig. 2
# ---------------------------------------------------------------------------
CONSTANT, LINEAR, SQUARED_EXP, PERIODIC, PLUS, TIMES = range(6)
NODE_PROBS = torch.tensor([0.2, 0.2, 0.2, 0.2, 0.1, 0.1])


@il.gen
def cov_function_prior():
    node_type = il.categorical(NODE_PROBS) @ "node_type"
    if node_type == CONSTANT:
        return ("constant", il.uniform(0.0, 1.0) @ "param")
    if node_type == LINEAR:
        return ("linear", il.uniform(0.0, 1.0) @ "param")
    if node_type == SQUARED_EXP:
        return ("squared_exp", il.uniform(0.0, 1.0) @ "length_scale")
    if node_type == PERIODIC:
        scale = il.uniform(0.0, 1.0) @ "scale"
        period = il.uniform(0.0, 1.0) @ "period"
        return ("periodic", scale, period)
    left = cov_function_prior() @ "left_node"
    right = cov_function_prior() @ "right_node"
    return ("plus" if node_type == PLUS else "times", left, right)


def cov_matrix(node, xs):
    kind = node[0]
    d = xs[:, None] - xs[None, :]
    if kind == "constant":
        return node[1] * torch.ones_like(d)
    if kind == "linear":
        return (xs[:, None] - node[1]) * (xs[None, :] - node[1])
    if kind == "squared_exp":
        return torch.exp(-0.5 * d * d / node[1])
    if kind == "periodic":
        return torch.exp(-2.0 * torch.sin(math.pi * d.abs() / node[2]) ** 2 / node[1])
    left, right = cov_matrix(node[1], xs), cov_matrix(node[2], xs)
    return left + right if kind == "plus" else left * right


@il.gen
def gp(xs):
    cov_function = cov_function_prior() @ "cov_function"
    K = cov_matrix(cov_function, xs) + 0.01 * torch.eye(len(xs), dtype=torch.float64)
    il.mvnormal(torch.zeros(len(xs), dtype=torch.float64), K) @ "y_values"
    return cov_function


GP_XS = torch.linspace(0.0, 1.0, 4, dtype=torch.float64)

# ---------------------------------------------------------------------------
# sub-calls (with vector-valued choices)
# ---------------------------------------------------------------------------


@il.gen
def inner(mu):
    a = il.normal(mu, 1.0) @ "a"
    flag = il.bernoulli(0.5) @ "flag"
    if flag:
        il.exponential(1.0) @ "extra"
    return a


@il.gen
def subcalls(offset):
    m = il.normal(offset, 1.0) @ "m"
    r1 = inner(m) @ "sub1"              # arguments depend on "m"
    inner(0.0) @ "sub2"                 # arguments never change
    w = il.dirichlet(torch.tensor([2.0, 2.0, 2.0])) @ "w"
    z = il.mvnormal(torch.stack([r1, m]), torch.eye(2, dtype=torch.float64)) @ "z"
    il.iid(il.normal(z[0], 1.0 + w[0]), 3) @ "obs"
    il.categorical(w) @ "cat"
    return z


# ---------------------------------------------------------------------------
# combinators
# ---------------------------------------------------------------------------


@il.gen
def point(x, slope):
    if il.bernoulli(0.2) @ "outlier":
        return il.normal(0.0, 5.0) @ "y"
    noise = il.inv_gamma(3.0, 2.0) @ "noise"
    return il.normal(slope * x, noise) @ "y"


@il.gen
def map_model(xs):
    slope = il.normal(0.0, 2.0) @ "slope"
    return il.Map(point)(xs, [slope] * len(xs)) @ "data"


def log_joint_map(xs, choices) -> float:
    cm = il.ChoiceMap(choices)
    slope = float(cm["slope"])
    lp = stats.norm.logpdf(slope, 0, 2)
    expected = {("slope",)}
    for i, x in enumerate(xs):
        x = float(x)
        out = cm["data", i, "outlier"]
        expected.add(("data", i, "outlier"))
        expected.add(("data", i, "y"))
        lp += math.log(0.2) if out else math.log(0.8)
        y = float(cm["data", i, "y"])
        if out:
            lp += stats.norm.logpdf(y, 0, 5)
        else:
            expected.add(("data", i, "noise"))
            noise = float(cm["data", i, "noise"])
            lp += stats.invgamma.logpdf(noise, 3.0, scale=2.0)
            lp += stats.norm.logpdf(y, slope * x, noise)
    if set(cm.addresses()) != expected:
        return -math.inf
    return float(lp)


@il.gen
def walk_step(t, state, drift):
    if il.bernoulli(0.25) @ "jump":
        new_state = il.normal(state, 3.0) @ "big"
    else:
        new_state = il.normal(state + drift, 0.5) @ "x"
    il.normal(new_state, 1.0) @ "obs"
    return new_state


@il.gen
def unfold_model(T):
    drift = il.normal(0.0, 1.0) @ "drift"
    return il.Unfold(walk_step)(T, 0.0, drift) @ "chain"


# ---------------------------------------------------------------------------
# independent log-joints of gp, subcalls and unfold_model (scipy only)
# ---------------------------------------------------------------------------
def _expect(cm, expected):
    if set(cm.addresses()) != expected:
        raise KeyError("not exactly a trace")


def _uniform01(v):
    return stats.uniform(0, 1).logpdf(float(v))


def _cov_node(cm, prefix, seen):
    t = cm[prefix + ("node_type",)]
    seen.add(prefix + ("node_type",))
    lp = math.log(float(NODE_PROBS[t]))
    names = {CONSTANT: ["param"], LINEAR: ["param"], SQUARED_EXP: ["length_scale"],
             PERIODIC: ["scale", "period"]}.get(t)
    if names is not None:
        values = [cm[prefix + (n,)] for n in names]
        seen.update(prefix + (n,) for n in names)
        lp += sum(_uniform01(v) for v in values)
        kind = ["constant", "linear", "squared_exp", "periodic"][t]
        return lp, (kind, *values)
    lp_l, left = _cov_node(cm, prefix + ("left_node",), seen)
    lp_r, right = _cov_node(cm, prefix + ("right_node",), seen)
    return lp + lp_l + lp_r, ("plus" if t == PLUS else "times", left, right)


def log_joint_gp(xs, choices) -> float:
    cm = il.ChoiceMap(choices)
    seen = {("y_values",)}
    try:
        lp, node = _cov_node(cm, ("cov_function",), seen)
        _expect(cm, seen)
    except KeyError:
        return -math.inf
    K = (cov_matrix(node, xs) + 0.01 * torch.eye(len(xs), dtype=torch.float64)).numpy()
    y = cm["y_values"].numpy()
    return float(lp + stats.multivariate_normal(np.zeros(len(xs)), K).logpdf(y))


def _inner(cm, prefix, mu, seen):
    a, flag = float(cm[prefix + ("a",)]), cm[prefix + ("flag",)]
    seen.update({prefix + ("a",), prefix + ("flag",)})
    lp = stats.norm.logpdf(a, mu, 1.0) + math.log(0.5)
    if flag:
        seen.add(prefix + ("extra",))
        lp += stats.expon.logpdf(float(cm[prefix + ("extra",)]))
    return lp, a


def log_joint_subcalls(offset, choices) -> float:
    cm = il.ChoiceMap(choices)
    seen = {("m",), ("w",), ("z",), ("obs",), ("cat",)}
    try:
        m = float(cm["m"])
        lp = stats.norm.logpdf(m, offset, 1.0)
        lp1, r1 = _inner(cm, ("sub1",), m, seen)
        lp2, _ = _inner(cm, ("sub2",), 0.0, seen)
        _expect(cm, seen)
    except KeyError:
        return -math.inf
    w, z, obs = cm["w"].numpy(), cm["z"].numpy(), cm["obs"].numpy()
    lp += lp1 + lp2 + stats.dirichlet([2.0, 2.0, 2.0]).logpdf(w)
    lp += stats.multivariate_normal([r1, m], np.eye(2)).logpdf(z)
    lp += stats.norm.logpdf(obs, z[0], 1.0 + w[0]).sum()
    lp += math.log(w[cm["cat"]])
    return float(lp)


def log_joint_unfold(T, choices) -> float:
    cm = il.ChoiceMap(choices)
    seen = {("drift",)}
    try:
        drift = float(cm["drift"])
        lp = stats.norm.logpdf(drift, 0, 1)
        state = 0.0
        for t in range(T):
            jump = cm["chain", t, "jump"]
            seen.update({("chain", t, "jump"), ("chain", t, "obs")})
            lp += math.log(0.25) if jump else math.log(0.75)
            if jump:
                new_state = float(cm["chain", t, "big"])
                seen.add(("chain", t, "big"))
                lp += stats.norm.logpdf(new_state, state, 3.0)
            else:
                new_state = float(cm["chain", t, "x"])
                seen.add(("chain", t, "x"))
                lp += stats.norm.logpdf(new_state, state + drift, 0.5)
            lp += stats.norm.logpdf(float(cm["chain", t, "obs"]), new_state, 1.0)
            state = new_state
        _expect(cm, seen)
    except KeyError:
        return -math.inf
    return float(lp)


LOG_JOINTS = {"branching": log_joint_branching, "gp": log_joint_gp,
              "subcalls": log_joint_subcalls, "map": log_joint_map, "unfold": log_joint_unfold}

# (model, a function giving random arguments); used for randomized GFI tests.
MODELS = {
    "branching": (branching, lambda rng: (int(rng.integers(0, 5)),)),
    # Same number of inputs, so a kept "y_values" keeps its shape.
    "gp": (gp, lambda rng: (GP_XS if rng.random() < 0.6
                            else torch.tensor(np.sort(rng.random(4)), dtype=torch.float64),)),
    "subcalls": (subcalls, lambda rng: (float(rng.choice([0.0, 0.0, 1.5])),)),
    "map": (map_model, lambda rng: ([float(v) for v in rng.normal(size=int(rng.integers(0, 6)))],)),
    "unfold": (unfold_model, lambda rng: (int(rng.integers(0, 6)),)),
}
