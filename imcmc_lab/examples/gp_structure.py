"""Gaussian-process covariance structure learning (paper Sec. 7.2, Fig. 2).

**Model** (Fig. 2a). A probabilistic context-free grammar over covariance
expressions, written as the recursive generative function
:func:`cov_function_prior`. Each node chooses ``"node_type"`` (a categorical,
0-based, over :data:`NODE_TYPES`) with the production probabilities of Gen's
reference implementation of this example (the paper does not print them):
0.2 each for the leaves constant, linear, squared exponential and periodic,
0.1 each for the binary operators plus and times. Leaf parameters are
``uniform(0, 1)`` (Fig. 2a; the periodic node's two parameters, elided in the
figure, too). Children are sub-calls mounted at ``"left_node"`` and
``"right_node"`` (the names Fig. 2a and the walk's paths use), so a trace has
hierarchical addresses such as
``("cov_function", "left_node", "right_node", "length_scale")``.
:func:`gp_model` draws the tree at ``"cov_function"`` and the observations
``"y_values" ~ mvnormal(0, K(x, x) + 0.01 I)``: the noise variance is fixed at
0.01, as in Fig. 2a. With no inputs (``xs`` empty) there is no observation
and the model is the grammar alone.

**Move** (Fig. 2d, 2e). The auxiliary program :func:`subtree_aux` walks the
current tree to pick a node (``"path"``), and draws a whole new subtree from
the grammar (``"new_subtree"``); it returns the model address of the picked
node. The involution :data:`swap_subtree` swaps the two subtrees with
namespace copies and copies the walk. Two walks (Sec. 7.2):

* :func:`walk_tree` -- at an internal node stop with probability 1/2, else go
  left or right with probability 1/4 each; a leaf stops with probability 1.
  The forward/backward ratio of the walk's probabilities is 1, 1/2 or 2.
* :func:`walk_tree_uniform` -- stop with probability ``1/(1 + n1 + n2)``, else
  go left with probability ``n1/(n1 + n2)`` (``n1``, ``n2`` the subtree sizes):
  every node is picked with probability ``1/size``, so the ratio is the ratio of
  the old and new tree sizes.

The engine accounts for these ratios automatically: nothing here computes an
acceptance probability.
"""

from __future__ import annotations

import math

import torch

from .. import bernoulli, categorical, copy, discrete, gen, mvnormal, read, transform, uniform
from ..inference.involutive import InvolutiveKernel

__all__ = [
    "NODE_TYPES", "PRODUCTION_PROBS", "NOISE",
    "Node", "Constant", "Linear", "SquaredExponential", "Periodic", "Plus", "Times",
    "cov_function_prior", "gp_model", "walk_tree", "walk_tree_uniform", "WALKS",
    "subtree_aux", "swap_subtree", "gp_structure_kernel", "initial_trace",
    "log_marginal_likelihood", "predictive", "synthetic_data", "tree_size_distribution",
]

NODE_TYPES = ("constant", "linear", "squared_exp", "periodic", "plus", "times")
CONSTANT, LINEAR, SQUARED_EXP, PERIODIC, PLUS, TIMES = range(len(NODE_TYPES))
PRODUCTION_PROBS = torch.tensor([0.2, 0.2, 0.2, 0.2, 0.1, 0.1], dtype=torch.float64)
NOISE = 0.01   # observation noise variance, fixed (Fig. 2a: cov_matrix .+ 0.01*I(n))


# ---------------------------------------------------------------------------
# covariance expressions (the return values of cov_function_prior)
# ---------------------------------------------------------------------------
def _number(x) -> str:
    return f"{float(x):.3g}"


class Node:
    """A covariance expression: a parse tree of the grammar.

    ``cov(x1, x2)`` evaluates the covariance function with torch broadcasting
    (``cov(xs[:, None], xs[None, :])`` is the matrix); ``size`` counts the
    nodes; ``str(node)`` is a readable formula; ``children`` and ``label`` are
    for tree views.
    """

    is_leaf = True
    size = 1
    children = ()

    @property
    def label(self) -> str:
        """This node alone, for tree views: a leaf's formula or the operator."""
        return str(self)

    def cov(self, x1, x2) -> torch.Tensor:
        raise NotImplementedError

    def cov_matrix(self, xs, xs2=None) -> torch.Tensor:
        """``K[i, j] = cov(xs[i], xs2[j])`` (``xs2`` defaults to ``xs``)."""
        xs2 = xs if xs2 is None else xs2
        return self.cov(xs[:, None], xs2[None, :])

    def __repr__(self):
        return f"<covariance {self}>"


class Constant(Node):
    """``k(x, x') = param``."""

    def __init__(self, param):
        self.param = param

    def cov(self, x1, x2):
        return torch.zeros_like(x1 - x2) + self.param

    def __str__(self):
        return f"C({_number(self.param)})"


class Linear(Node):
    """``k(x, x') = (x - param)(x' - param)`` (Fig. 2c: ``(x - 0.08)(x' - 0.08)``)."""

    def __init__(self, param):
        self.param = param

    def cov(self, x1, x2):
        return (x1 - self.param) * (x2 - self.param)

    def __str__(self):
        return f"Lin({_number(self.param)})"


class SquaredExponential(Node):
    """``k(x, x') = exp(-(x - x')^2 / length_scale)`` (the form of Fig. 2c)."""

    def __init__(self, length_scale):
        self.length_scale = length_scale

    def cov(self, x1, x2):
        return torch.exp(-(x1 - x2) ** 2 / self.length_scale)

    def __str__(self):
        return f"SE({_number(self.length_scale)})"


class Periodic(Node):
    """``k(x, x') = exp(-sin^2(2 pi |x - x'| / period) / scale)`` (Gen's reference form)."""

    def __init__(self, scale, period):
        self.scale, self.period = scale, period

    def cov(self, x1, x2):
        return torch.exp(-torch.sin(2 * math.pi * torch.abs(x1 - x2) / self.period) ** 2 / self.scale)

    def __str__(self):
        return f"Per({_number(self.scale)}, {_number(self.period)})"


class _Binary(Node):
    is_leaf = False
    symbol = "?"

    def __init__(self, left: Node, right: Node):
        self.left, self.right = left, right
        self.children = (left, right)
        self.size = 1 + left.size + right.size

    @property
    def label(self) -> str:
        return self.symbol

    def __str__(self):
        return f"({self.left} {self.symbol} {self.right})"


class Plus(_Binary):
    """``k = k_left + k_right``."""

    symbol = "+"

    def cov(self, x1, x2):
        return self.left.cov(x1, x2) + self.right.cov(x1, x2)


class Times(_Binary):
    """``k = k_left * k_right``."""

    symbol = "*"

    def cov(self, x1, x2):
        return self.left.cov(x1, x2) * self.right.cov(x1, x2)


# ---------------------------------------------------------------------------
# the model (Fig. 2a)
# ---------------------------------------------------------------------------
@gen
def cov_function_prior():
    """The grammar: one node, recursing into ``"left_node"``/``"right_node"`` (Fig. 2a)."""
    node_type = categorical(PRODUCTION_PROBS) @ "node_type"
    if node_type == CONSTANT:
        return Constant(uniform(0.0, 1.0) @ "param")
    if node_type == LINEAR:
        return Linear(uniform(0.0, 1.0) @ "param")
    if node_type == SQUARED_EXP:
        return SquaredExponential(uniform(0.0, 1.0) @ "length_scale")
    if node_type == PERIODIC:
        scale = uniform(0.0, 1.0) @ "scale"
        return Periodic(scale, uniform(0.0, 1.0) @ "period")
    left = cov_function_prior() @ "left_node"
    right = cov_function_prior() @ "right_node"
    return Plus(left, right) if node_type == PLUS else Times(left, right)


@gen
def gp_model(xs):
    """Fig. 2a: a covariance tree, then ``y_values ~ mvnormal(0, K + 0.01 I)`` at inputs ``xs``."""
    cov_function = cov_function_prior() @ "cov_function"
    n = len(xs)
    if n > 0:
        cov_matrix = cov_function.cov_matrix(xs) + NOISE * torch.eye(n, dtype=torch.float64)
        mvnormal(torch.zeros(n, dtype=torch.float64), cov_matrix) @ "y_values"
    return cov_function


# ---------------------------------------------------------------------------
# the move (Fig. 2d, 2e)
# ---------------------------------------------------------------------------
@gen
def walk_tree(node, path):
    """Fig. 2d: stop at an internal node with probability 1/2, else go left/right
    with probability 1/4 each; a leaf always stops. Returns the model address of
    the node where the walk stops."""
    if node.is_leaf:
        bernoulli(1.0) @ "done"
        return path
    if bernoulli(0.5) @ "done":
        return path
    if bernoulli(0.5) @ "recurse_left":
        return walk_tree(node.left, path + ("left_node",)) @ "left"
    return walk_tree(node.right, path + ("right_node",)) @ "right"


@gen
def walk_tree_uniform(node, path):
    """Sec. 7.2's alternative walk: stop with probability ``1/(1 + n1 + n2)``, else go
    left with probability ``n1/(n1 + n2)``; every node is picked with probability
    ``1/size(tree)``."""
    n1 = 0 if node.is_leaf else node.left.size
    n2 = 0 if node.is_leaf else node.right.size
    # At a leaf ``done`` is True with probability 1; returning there also when it is
    # (impossibly) False keeps the assessment of any choices from dividing by zero.
    if (bernoulli(1.0 / (1 + n1 + n2)) @ "done") or node.is_leaf:
        return path
    if bernoulli(n1 / (n1 + n2)) @ "recurse_left":
        return walk_tree_uniform(node.left, path + ("left_node",)) @ "left"
    return walk_tree_uniform(node.right, path + ("right_node",)) @ "right"


WALKS = {"halving": walk_tree, "uniform": walk_tree_uniform}


@gen
def subtree_aux(trace, walk=walk_tree):
    """Fig. 2d: pick a node by ``walk`` (choices under ``"path"``) and draw a new subtree
    from the grammar (under ``"new_subtree"``). Returns the picked node's model address."""
    path = walk(trace["cov_function"], ("cov_function",)) @ "path"
    cov_function_prior() @ "new_subtree"
    return path


@transform
def swap_subtree(model_in, aux_in, model_out, aux_out):
    """Fig. 2e: swap the subtree at the picked address with the proposed one; keep the walk."""
    subtree_address = read(aux_in[()], discrete)   # the return value of subtree_aux
    copy(model_in[subtree_address], aux_out["new_subtree"])
    copy(aux_in["new_subtree"], model_out[subtree_address])
    copy(aux_in["path"], aux_out["path"])


#: Names of the ``node_type`` values, for views: a generative function's ``value_names``
#: (``{choice key: names}``) makes the schematic and the trace tree of its traces show
#: ``periodic (3)`` where the value is 3 (``imcmc_lab.widgets``; nothing else reads it).
NODE_TYPE_NAMES = {"node_type": NODE_TYPES}
gp_model.value_names = subtree_aux.value_names = cov_function_prior.value_names = NODE_TYPE_NAMES


def gp_structure_kernel(walk="halving", check=False):
    """The subtree-replacement kernel with the ``"halving"`` (Fig. 2d) or ``"uniform"`` walk."""
    walk_fn = WALKS[walk] if isinstance(walk, str) else walk
    return InvolutiveKernel(subtree_aux, (walk_fn,), swap_subtree, check=check,
                            name=f"subtree replacement ({walk_fn.name})")


# ---------------------------------------------------------------------------
# data, starting points, summaries
# ---------------------------------------------------------------------------
def synthetic_data(n=40, seed=0, period=0.25, slope=1.5, amplitude=0.8, noise_std=0.1):
    """``(xs, ys)``: a periodic signal plus a linear trend with noise on [0, 1], centred.

    Uses its own seeded generator (the global torch RNG is left alone).
    """
    g = torch.Generator().manual_seed(seed)
    xs = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
    ys = (amplitude * torch.sin(2 * math.pi * xs / period) + slope * (xs - 0.5)
          + noise_std * torch.randn(n, generator=g, dtype=torch.float64))
    return xs, ys - ys.mean()


def initial_trace(xs, ys, cov_function=None):
    """A trace of :func:`gp_model` with ``"y_values"`` fixed to ``ys``; the tree is drawn
    from the grammar unless ``cov_function`` gives constraints under ``"cov_function"``
    (e.g. ``{"node_type": 0, "param": 0.5}``)."""
    xs = torch.as_tensor(xs, dtype=torch.float64)
    constraints = {"y_values": torch.as_tensor(ys, dtype=torch.float64)}
    for address, value in (cov_function or {}).items():
        address = address if isinstance(address, tuple) else (address,)
        constraints[("cov_function",) + address] = value
    trace, _ = gp_model.generate((xs,), constraints)
    return trace


def log_marginal_likelihood(trace) -> float:
    """``log p(y_values | tree)``: the GP marginal likelihood of the trace's tree."""
    return trace.choice_record("y_values").logpdf


def predictive(trace, xs_test, include_noise=False):
    """Posterior predictive ``(mean, variance)`` of the GP at ``xs_test`` given the
    trace's tree and data (variance of f, plus the noise if ``include_noise``)."""
    tree = trace["cov_function"]
    xs, ys = trace.args[0], trace["y_values"]
    xs_test = torch.as_tensor(xs_test, dtype=torch.float64)
    K = tree.cov_matrix(xs) + NOISE * torch.eye(len(xs), dtype=torch.float64)
    K_cross = tree.cov_matrix(xs, xs_test)                      # (n, m)
    L = torch.linalg.cholesky(K)
    mean = K_cross.T @ torch.cholesky_solve(ys[:, None], L).squeeze(-1)
    v = torch.linalg.solve_triangular(L, K_cross, upper=False)
    variance = (tree.cov(xs_test, xs_test) - (v * v).sum(0)).clamp_min(0.0)
    if include_noise:
        variance = variance + NOISE
    return mean, variance


def tree_size_distribution(max_size: int) -> torch.Tensor:
    """Exact prior probabilities ``P(size = s)`` for ``s = 0..max_size`` (index = size).

    The generating function ``T(z) = sum_s P(size = s) z^s`` of the grammar
    satisfies ``T(z) = a z + b z T(z)^2`` with ``a`` the total leaf probability and
    ``b`` the total binary probability, so ``t_1 = a`` and
    ``t_s = b sum_{i + j = s - 1} t_i t_j``.
    """
    a = float(PRODUCTION_PROBS[:PLUS].sum())
    b = float(PRODUCTION_PROBS[PLUS:].sum())
    t = [0.0] * (max_size + 1)
    if max_size >= 1:
        t[1] = a
    for s in range(2, max_size + 1):
        t[s] = b * sum(t[i] * t[s - 1 - i] for i in range(1, s - 1))
    return torch.tensor(t, dtype=torch.float64)
