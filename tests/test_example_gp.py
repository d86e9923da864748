"""GP covariance structure learning (paper Sec. 7.2, Fig. 2): the subtree-replacement kernel.

What is checked:

* the grammar's exact tree-size distribution (generating-function recursion)
  against the Catalan closed form and against the prior sampler;
* the walk programs give the mixture-probability ratios the paper states
  (1, 0.5 or 2 for the halving walk; the ratio of tree sizes, e.g. 5/9, for the
  size-proportional walk), and with no data the engine's whole ``log alpha`` is
  exactly that ratio;
* ``check_involution`` (Algorithm 4) passes for both walks;
* stationarity, by independent chains started at exact draws of the model
  (Geweke's successive-conditional idea): after a few kernel steps the final
  states must still be exact draws. With no data the tree size must follow the
  grammar's distribution; with data, in addition, ``y' (K + 0.01 I)^-1 y`` must be
  chi-square(n) under the final tree. Both tests are shown to fail for a kernel
  that forgets the walk's probabilities and for one that forgets the likelihood;
* a short chain on synthetic data climbs from a poor start to a good fit.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats

import imcmc_lab as il
from imcmc_lab.examples import gp_structure as gp

P_THRESHOLD = 1e-3
EMPTY = torch.zeros(0, dtype=torch.float64)
XS_SMALL = torch.linspace(0.0, 1.0, 6, dtype=torch.float64)
SIZE_BINS = (1, 3, 5, 7)   # and a last bin for sizes >= 9

PARAMETERS = {"constant": ("param",), "linear": ("param",), "squared_exp": ("length_scale",),
              "periodic": ("scale", "period")}


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def tree_choices(spec, prefix=()):
    """Choices of ``cov_function_prior`` for a tree written as nested tuples, e.g.
    ``("plus", ("constant", 0.3), ("squared_exp", 0.2))``, under ``prefix``."""
    kind, *rest = spec
    choices = {prefix + ("node_type",): gp.NODE_TYPES.index(kind)}
    if kind in PARAMETERS:
        for name, value in zip(PARAMETERS[kind], rest):
            choices[prefix + (name,)] = value
    else:
        choices.update(tree_choices(rest[0], prefix + ("left_node",)))
        choices.update(tree_choices(rest[1], prefix + ("right_node",)))
    return choices


def walk_choices(directions):
    """Choices under ``"path"`` of a walk that takes ``directions`` ("left"/"right")
    and then stops (``done`` is a choice at every visited node, leaves included)."""
    choices, prefix = {}, ("path",)
    for d in directions:
        choices[prefix + ("done",)] = False
        choices[prefix + ("recurse_left",)] = d == "left"
        prefix += (d,)
    choices[prefix + ("done",)] = True
    return choices


def move(walk, old_tree, directions, new_subtree):
    """Apply the swap to a constructed (model, aux) pair with no data; return
    ``(walk log ratio, log alpha, application)``."""
    x, _ = gp.gp_model.generate((EMPTY,), tree_choices(old_tree, ("cov_function",)))
    aux_constraints = walk_choices(directions)
    aux_constraints.update(tree_choices(new_subtree, ("new_subtree",)))
    y, _ = gp.subtree_aux.generate((x, walk), aux_constraints)
    app = il.apply_transform(gp.swap_subtree, x, y, gp.subtree_aux, (walk,))
    assert app.problem is None
    walk_log_ratio = app.new_aux.project(il.select("path")) - y.project(il.select("path"))
    log_alpha = app.model_log_ratio + app.log_q_new - y.score + app.logabsdet
    return walk_log_ratio, log_alpha, app


def size_counts(sizes):
    s = np.asarray(sizes)
    return np.array([np.sum(s == b) for b in SIZE_BINS] + [np.sum(s > SIZE_BINS[-1])])


def size_probabilities():
    exact = gp.tree_size_distribution(SIZE_BINS[-1]).numpy()
    head = [exact[b] for b in SIZE_BINS]
    return np.array(head + [1.0 - sum(head)])


def size_pvalue(sizes):
    """Chi-square test of observed tree sizes against the grammar's exact distribution."""
    expected = size_probabilities() * len(sizes)
    assert expected.min() >= 5, "too few chains for the chi-square approximation"
    return stats.chisquare(size_counts(sizes), expected).pvalue


def mahalanobis(tree, xs, ys):
    """``y' (K + 0.01 I)^-1 y``: chi-square(n) when ``y`` is drawn from the GP of ``tree``."""
    K = tree.cov_matrix(xs) + gp.NOISE * torch.eye(len(xs), dtype=torch.float64)
    z = torch.linalg.solve_triangular(torch.linalg.cholesky(K), ys[:, None], upper=False)
    return float((z * z).sum())


def final_states(kernel, xs, n_chains, steps, forget_likelihood=False):
    """Run ``n_chains`` independent chains of ``steps`` steps, each from an exact draw
    ``(tree, y) ~ gp_model(xs)`` targeting ``p(tree | y)``; return the final tree sizes
    and (with data) the chi-square(n) CDF of each final Mahalanobis statistic.

    If the kernel is invariant, every final state is again an exact draw of the
    model, so these are iid samples of known distributions. ``forget_likelihood``
    runs the chain on the tree alone (a kernel that ignores the data) -- a bug the
    Mahalanobis statistic must detect.
    """
    sizes, pits = [], []
    for _ in range(n_chains):
        trace = gp.gp_model.simulate(xs)
        ys = trace["y_values"] if len(xs) else None
        if forget_likelihood:
            tree = {a: v for a, v in trace.get_choices().to_dict().items() if a[0] == "cov_function"}
            trace, _ = gp.gp_model.generate((EMPTY,), tree)
        for _ in range(steps):
            trace, _ = kernel(trace)
        sizes.append(trace["cov_function"].size)
        if ys is not None:
            pits.append(stats.chi2.cdf(mahalanobis(trace["cov_function"], xs, ys), df=len(xs)))
    return sizes, pits


# A deliberately wrong kernel: it picks the node with untraced coin flips, so q's
# density omits the walk's probabilities and the acceptance ratio misses the
# mixture-probability ratio (the bug a hand-written sampler easily has).
def _untraced_halving_walk(node, path):
    while not node.is_leaf and float(torch.rand(())) >= 0.5:
        go_left = float(torch.rand(())) < 0.5
        node, path = (node.left, path + ("left_node",)) if go_left else (node.right, path + ("right_node",))
    return path


@il.gen
def _aux_untraced_walk(trace):
    path = _untraced_halving_walk(trace["cov_function"], ("cov_function",))
    gp.cov_function_prior() @ "new_subtree"
    return path


@il.transform
def _swap_without_walk(model_in, aux_in, model_out, aux_out):
    subtree_address = il.read(aux_in[()], il.discrete)
    il.copy(model_in[subtree_address], aux_out["new_subtree"])
    il.copy(aux_in["new_subtree"], model_out[subtree_address])


# ---------------------------------------------------------------------------
# the grammar
# ---------------------------------------------------------------------------
def test_tree_size_distribution_is_the_catalan_law():
    # Binary trees with k internal nodes: Catalan(k) shapes, each with probability
    # 0.2^k (binary productions) 0.8^(k+1) (leaf productions).
    exact = gp.tree_size_distribution(41)
    for k in range(21):
        catalan = math.comb(2 * k, k) // (k + 1)
        assert math.isclose(float(exact[2 * k + 1]), catalan * 0.2 ** k * 0.8 ** (k + 1), rel_tol=1e-12)
        assert float(exact[2 * k]) == 0.0
    # subcritical grammar (mean offspring 0.4): the mass is 1 up to a tiny tail
    assert 1.0 - float(exact.sum()) < 1e-6


def test_prior_sampler_follows_the_tree_size_distribution():
    torch.manual_seed(0)
    sizes = [gp.cov_function_prior.simulate()[()].size for _ in range(3000)]
    assert size_pvalue(sizes) > P_THRESHOLD


def test_trace_addresses_are_hierarchical():
    choices = tree_choices(("plus", ("constant", 0.45), ("times", ("squared_exp", 0.13), ("linear", 0.08))),
                           ("cov_function",))
    xs = torch.linspace(0.0, 1.0, 5, dtype=torch.float64)
    trace, _ = gp.gp_model.generate((xs,), choices)
    assert ("cov_function", "right_node", "left_node", "length_scale") in trace.get_choices().to_dict()
    tree = trace["cov_function"]
    assert tree.size == 5 and str(tree) == "(C(0.45) + (SE(0.13) * Lin(0.08)))"
    # Fig. 2c's formula: 0.45 + exp(-(x - x')^2 / 0.13) (x - 0.08)(x' - 0.08)
    x1, x2 = xs[:, None], xs[None, :]
    expected = 0.45 + torch.exp(-(x1 - x2) ** 2 / 0.13) * (x1 - 0.08) * (x2 - 0.08)
    torch.testing.assert_close(tree.cov_matrix(xs), expected)


# ---------------------------------------------------------------------------
# the walks' mixture-probability ratios (Sec. 7.2)
# ---------------------------------------------------------------------------
LEAF, OTHER_LEAF = ("constant", 0.3), ("periodic", 0.5, 0.4)
INTERNAL = ("plus", ("linear", 0.2), ("squared_exp", 0.7))
DEEP = ("times", ("constant", 0.6), ("plus", ("squared_exp", 0.1), ("periodic", 0.9, 0.3)))


@pytest.mark.parametrize("old_tree, directions, new_subtree, ratio", [
    (LEAF, [], OTHER_LEAF, 1.0),                      # leaf -> leaf
    (LEAF, [], INTERNAL, 0.5),                        # leaf -> internal
    (INTERNAL, [], LEAF, 2.0),                        # internal -> leaf
    (INTERNAL, [], DEEP, 1.0),                        # internal -> internal
    (DEEP, ["right"], LEAF, 2.0),                     # deeper: ancestors' 1/4 cancel
    (DEEP, ["right", "left"], INTERNAL, 0.5),
    (DEEP, ["left"], OTHER_LEAF, 1.0),
])
def test_halving_walk_ratio_is_1_half_or_2(old_tree, directions, new_subtree, ratio):
    walk_log_ratio, log_alpha, app = move(gp.walk_tree, old_tree, directions, new_subtree)
    assert math.isclose(math.exp(walk_log_ratio), ratio, rel_tol=1e-12)
    # With no data the subtree's prior and its proposal cancel: log alpha is the walk ratio.
    assert math.isclose(log_alpha, math.log(ratio), abs_tol=1e-9)
    assert app.jacobian.reduced_size == (0, 0)      # everything is copied (Sec. 5.1)


FIVE = ("times", ("plus", ("constant", 0.3), ("linear", 0.6)), ("squared_exp", 0.2))


@pytest.mark.parametrize("old_tree, directions, new_subtree, ratio", [
    (FIVE, ["left", "right"], FIVE, 5 / 9),           # a leaf becomes a 5-node subtree: 5 -> 9 nodes
    (("times", ("plus", ("constant", 0.3), FIVE), ("squared_exp", 0.2)), ["left", "right"],
     ("linear", 0.6), 9 / 5),                         # and back: 9 -> 5 nodes
    (FIVE, [], LEAF, 5 / 1),
    (FIVE, ["right"], ("periodic", 0.1, 0.2), 1.0),
])
def test_uniform_walk_ratio_is_the_ratio_of_tree_sizes(old_tree, directions, new_subtree, ratio):
    walk_log_ratio, log_alpha, _ = move(gp.walk_tree_uniform, old_tree, directions, new_subtree)
    assert math.isclose(math.exp(walk_log_ratio), ratio, rel_tol=1e-12)
    assert math.isclose(log_alpha, math.log(ratio), abs_tol=1e-9)


def test_uniform_walk_picks_every_node_with_probability_one_over_size():
    x, _ = gp.gp_model.generate((EMPTY,), tree_choices(DEEP, ("cov_function",)))
    paths = {(): [], ("left_node",): ["left"], ("right_node",): ["right"],
             ("right_node", "left_node"): ["right", "left"], ("right_node", "right_node"): ["right", "right"]}
    for address, directions in paths.items():
        walk = {a[1:]: v for a, v in walk_choices(directions).items()}   # without the "path" prefix
        log_q = gp.walk_tree_uniform.assess((x["cov_function"], ("cov_function",)), walk)
        assert math.isclose(math.exp(log_q), 1 / 5, rel_tol=1e-12), address


# ---------------------------------------------------------------------------
# Algorithm 4
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("walk", ["halving", "uniform"])
def test_check_involution_passes(walk):
    torch.manual_seed(1)
    report = il.check_involution(gp.gp_model, (EMPTY,), gp.subtree_aux, gp.swap_subtree,
                                 trials=150, q_args=(gp.WALKS[walk],))
    assert report.trials == 150
    xs, ys = gp.synthetic_data(n=12)
    il.check_involution(gp.gp_model, (xs,), gp.subtree_aux, gp.swap_subtree, trials=50,
                        q_args=(gp.WALKS[walk],), observations={"y_values": ys})


def test_kernel_with_checks_on_never_fails_a_check():
    torch.manual_seed(2)
    xs, ys = gp.synthetic_data(n=12)
    kernel = gp.gp_structure_kernel("uniform", check=True)
    trace = gp.initial_trace(xs, ys)
    for _ in range(100):
        trace, _ = kernel(trace)
    assert kernel.check_failures == 0 and kernel.proposed == 100


# ---------------------------------------------------------------------------
# stationarity (independent chains from exact draws)
# ---------------------------------------------------------------------------
N_CHAINS, STEPS = 1000, 5


@pytest.mark.parametrize("walk", ["halving", "uniform"])
@pytest.mark.parametrize("xs", [EMPTY, XS_SMALL], ids=["prior", "data"])
def test_kernel_leaves_the_model_invariant(walk, xs):
    torch.manual_seed(10 + len(xs) + (walk == "uniform"))
    kernel = gp.gp_structure_kernel(walk)
    sizes, pits = final_states(kernel, xs, N_CHAINS, STEPS)
    accepted, proposed = kernel.acceptance()[kernel.name]
    assert accepted > 0.1 * proposed                  # the chains do move
    assert size_pvalue(sizes) > P_THRESHOLD
    if len(xs):
        assert stats.kstest(pits, "uniform").pvalue > P_THRESHOLD


def test_invariance_test_detects_a_missing_walk_ratio():
    torch.manual_seed(20)
    kernel = il.InvolutiveKernel(_aux_untraced_walk, (), _swap_without_walk)
    sizes, _ = final_states(kernel, EMPTY, 600, STEPS)
    assert size_pvalue(sizes) < P_THRESHOLD


def test_invariance_test_detects_a_missing_likelihood():
    torch.manual_seed(21)
    _, pits = final_states(gp.gp_structure_kernel("uniform"), XS_SMALL, 300, STEPS, forget_likelihood=True)
    assert stats.kstest(pits, "uniform").pvalue < P_THRESHOLD


# ---------------------------------------------------------------------------
# inference on synthetic data; predictive
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("walk", ["halving", "uniform"])
def test_short_chain_finds_a_good_fit(walk):
    torch.manual_seed(3)
    xs, ys = gp.synthetic_data()
    start = gp.initial_trace(xs, ys, {"node_type": gp.CONSTANT, "param": 0.5})
    chain = il.run_chain(gp.gp_structure_kernel(walk), start, 300,
                         record={"lml": gp.log_marginal_likelihood}, progress=False)
    lml = chain.values("lml")
    # from about -860 nats (a constant covariance cannot explain a trend and a cycle)
    assert gp.log_marginal_likelihood(start) < -500
    assert lml[-1] > -50 and max(lml) > -20
    mean, _ = gp.predictive(chain.trace, xs)
    assert float(torch.sqrt(torch.mean((mean - ys) ** 2))) < 0.2   # the noise sd is 0.1


def test_predictive_matches_gaussian_conditioning():
    xs, ys = gp.synthetic_data(n=10)
    trace = gp.initial_trace(xs, ys, tree_choices(DEEP))
    x_test = torch.tensor([0.05, 0.5, 1.3], dtype=torch.float64)
    mean, var = gp.predictive(trace, x_test, include_noise=True)
    # condition the joint Gaussian of (y, y_test) with numpy
    tree = trace["cov_function"]
    both = torch.cat([xs, x_test]).numpy()
    K = tree.cov_matrix(torch.from_numpy(both)).numpy() + gp.NOISE * np.eye(len(both))
    n = len(xs)
    gain = np.linalg.solve(K[:n, :n], K[:n, n:]).T
    np.testing.assert_allclose(mean.numpy(), gain @ ys.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var.numpy(), np.diag(K[n:, n:] - gain @ K[:n, n:]), rtol=1e-8, atol=1e-10)
