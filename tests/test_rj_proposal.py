"""Reversible jump derived from ONE proposal program (``il.rj_proposal``; Roberts,
Gallagher & Taimre 2019, Stochaskell), on the paper's two examples.

What is checked:

* the derived soccer jump's ``log alpha`` equals the hand-written involution's
  (``examples/soccer.py``) term by term, on the same state and auxiliary draw, in both
  directions, and its reverse ``u*`` is solved symbolically; with one seed, the derived
  and the hand-written soccer chains are the same chain, step by step;
* a scalar map outside the symbolic table is inverted numerically, and the engine's
  ``log |det J|`` is the analytic ``log dkap/du`` (the implicit-function derivatives);
* the derived coal kernel's ``log alpha`` for each of the paper's four moves equals the
  acceptance ratio written out by hand for those proposals (birth: Green's formula with
  the paper's lognormal height ratio, Jacobian ``g_j``);
* ``check_involution`` (Algorithm 4) passes on both derived kernels;
* posteriors: soccer P(model 1 | y) = 0.7071 (quadrature) and the coal P(n | y) (dynamic
  programming) within 4 batch-means standard errors, with fixed seeds;
* non-invertible proposals (``kap = u ** 2``, a map that ignores ``u``, an extra draw)
  and proposals that cannot propose going back end in errors that name the draw.
"""

import math

import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples import coal, soccer
from imcmc_lab.examples.rj_from_proposals import coal_rj_kernel, sample_coal_n, soccer_jump, soccer_rj_kernel
from mcmc_stats import assert_close_to, batch_means_se
from reference import coal as coal_ref
from reference import soccer as soccer_ref

GOALS = soccer.load_goals()
EVENTS = coal.load_coal()


def soccer_state(model, lam=2.5, kap=0.05):
    constraints = {"model": model, "lam": lam, "y": GOALS}
    if model == 2:
        constraints["kap"] = kap
    return soccer.soccer.generate((len(GOALS),), constraints)[0]


def move_with(kernel, trace, aux):
    """The kernel's move from ``trace`` with the auxiliary choices ``aux`` (not sampled)."""
    y, _ = kernel.q.generate((trace, *kernel.q_args), aux)
    app = il.apply_transform(kernel.f, trace, y, kernel.q, kernel.q_args)
    return app.model_log_ratio + app.log_q_new - y.score + app.logabsdet, app


@pytest.mark.parametrize("u", [-1.7, 0.3, 2.2])
def test_soccer_derived_jump_equals_hand_written(u):
    derived = il.rj_proposal(soccer_jump)
    hand = il.InvolutiveKernel(soccer.jump_aux, (), soccer.jump)
    x = soccer_state(1, lam=2.4)
    alpha_d, app_d = move_with(derived, x, {"u": u})
    alpha_h, app_h = move_with(hand, x, {"u": u})
    assert float(app_d.new_model["kap"]) == pytest.approx(0.015 * math.exp(u), rel=1e-12)
    assert alpha_d == pytest.approx(alpha_h, abs=1e-9)
    assert app_d.logabsdet == pytest.approx(math.log(0.015) + u, abs=1e-12)   # dkap/du = kap
    # and back: from model 2 the derived reverse finds u* = log(kap / 0.015)
    back_d, app_back = move_with(derived, app_d.new_model, {})
    back_h, _ = move_with(hand, app_h.new_model, {})
    assert float(app_back.new_aux["u"]) == pytest.approx(u, abs=1e-12)
    assert back_d == pytest.approx(back_h, abs=1e-9) and back_d == pytest.approx(-alpha_d, abs=1e-9)
    assert derived.f.inversions["symbolic"] == 1 and derived.f.inversions["numerical"] == 0


@il.gen
def atan_jump(trace):
    """One-to-one (dkap/du > 0) but outside the symbolic table: solved numerically."""
    if trace["model"] == 1:
        u = il.normal(0.0, 1.5) @ "u"
        return {"model": 2, "kap": 0.015 * torch.exp(u) + 0.01 * (torch.atan(u) + 2.0)}
    return {"model": 1}


def test_numerical_inversion_gives_the_analytic_jacobian():
    kernel = il.rj_proposal(atan_jump)
    kap = 0.07
    back, app = move_with(kernel, soccer_state(2, kap=kap), {})
    u = float(app.new_aux["u"])
    assert 0.015 * math.exp(u) + 0.01 * (math.atan(u) + 2.0) == pytest.approx(kap, rel=1e-10)
    dkap_du = 0.015 * math.exp(u) + 0.01 / (1 + u * u)
    assert app.logabsdet == pytest.approx(-math.log(dkap_du), abs=1e-9)   # d u*/d kap
    assert kernel.f.inversions["numerical"] == 1 and kernel.f.inversions["symbolic"] == 0
    kernel.check_involution(soccer.soccer, (len(GOALS),), trials=20, observations={"y": GOALS}, seed=4)


ELEMENTARY_MAPS = {   # kap = h(u), one-to-one; dkap/du; solved symbolically?
    "softplus": (lambda u: 0.01 + 0.02 * torch.log1p(torch.exp(u)), lambda u: 0.02 / (1 + math.exp(-u)), True),
    "logistic": (lambda u: 0.1 * torch.exp(u) / (1 + torch.exp(u)),
                 lambda u: 0.1 * math.exp(u) / (1 + math.exp(u)) ** 2, True),
    "sqrt": (lambda u: torch.sqrt(0.01 + torch.exp(2 * u)),
             lambda u: math.exp(2 * u) / math.sqrt(0.01 + math.exp(2 * u)), True),
    "cube": (lambda u: 0.05 + 0.001 * (2.0 * u + 3.0) ** 3, lambda u: 0.006 * (2 * u + 3) ** 2, False),
}


def jump_through(h):
    @il.gen
    def jump(trace):
        if trace["model"] == 1:
            u = il.normal(0.0, 1.5) @ "u"
            return {"model": 2, "kap": h(u)}
        return {"model": 1}
    return jump


@pytest.mark.parametrize("name", sorted(ELEMENTARY_MAPS))
def test_elementary_maps_are_inverted_with_the_analytic_jacobian(name):
    h, dh, symbolic = ELEMENTARY_MAPS[name]
    kernel = il.rj_proposal(jump_through(h))
    forward, app = move_with(kernel, soccer_state(1), {"u": 0.4})
    assert app.logabsdet == pytest.approx(math.log(dh(0.4)), abs=1e-10)
    back, app_back = move_with(kernel, app.new_model, {})
    assert float(app_back.new_aux["u"]) == pytest.approx(0.4, abs=1e-12)
    assert back == pytest.approx(-forward, abs=1e-9)
    # the cube's other two roots are complex: SymPy's answer is left for Newton
    assert (kernel.f.inversions["symbolic"] == 1) == symbolic


def test_check_involution_catches_a_two_to_one_map_the_numerical_route_cannot_see():
    kernel = il.rj_proposal(jump_through(lambda u: 0.01 * torch.abs(u) ** 2))   # u and -u; abs: not symbolic
    with pytest.raises(il.InvolutionCheckError, match="'u'"):
        kernel.check_involution(soccer.soccer, (len(GOALS),), trials=40, observations={"y": GOALS}, seed=5)


def test_check_involution_passes_on_derived_soccer_and_coal():
    il.rj_proposal(soccer_jump).check_involution(soccer.soccer, (len(GOALS),), trials=40,
                                                 observations={"y": GOALS}, seed=1)
    report = coal_rj_kernel().check_involution(coal.coal, (coal.LENGTH,), trials=100,
                                               observations={"y": EVENTS}, seed=2)
    assert "100 randomized trials passed" in str(report)


def coal_state(n=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    s = torch.sort(torch.rand(n, generator=gen, dtype=torch.float64) * coal.LENGTH).values
    g = 0.001 + 0.004 * torch.rand(n + 1, generator=gen, dtype=torch.float64)
    return coal.coal.generate((coal.LENGTH,), {"n": n, "s": s, "g": g, "y": EVENTS})[0]


def move_logprob(n, move):
    return math.log(float(coal.move_probabilities(n)[move]))


def test_coal_birth_and_death_alpha_is_the_hand_derived_ratio():
    kernel = coal_rj_kernel()
    x = coal_state(n=3)
    s, g = x["s"], x["g"]
    for position, ratio in [(5000.0, 0.7), (float(s[1]) + 10.0, 2.5), (40000.0, 1.3)]:
        alpha, app = move_with(kernel, x, {"move": 2, "x": position, "u": ratio})
        j = int(torch.searchsorted(s, torch.tensor(position, dtype=torch.float64)))
        x_new = app.new_model
        assert x_new["n"] == 4 and float(x_new["g"][j + 1]) == pytest.approx(ratio * float(g[j]))
        lognormal = -math.log(ratio) - 0.5 * math.log(2 * math.pi) - 0.5 * math.log(ratio) ** 2
        expected = (x_new.score - x.score + move_logprob(4, 3) - math.log(4)
                    - (move_logprob(3, 2) - math.log(coal.LENGTH) + lognormal) + math.log(float(g[j])))
        assert alpha == pytest.approx(expected, abs=1e-8)
        assert set(app.new_aux.flat_records()) == {("move",), ("j",)}     # the reverse: death of x
        assert app.new_aux["move"] == 3 and app.new_aux["j"] == j
        back, app_back = move_with(kernel, x_new, {"move": 3, "j": j})
        assert back == pytest.approx(-alpha, abs=1e-8)
        assert float(app_back.new_aux["x"]) == pytest.approx(position, rel=1e-12)
        assert float(app_back.new_aux["u"]) == pytest.approx(ratio, rel=1e-10)


def test_coal_within_model_moves_alpha():
    kernel = coal_rj_kernel()
    x = coal_state(n=4, seed=3)
    alpha, app = move_with(kernel, x, {"move": 0, "j": 2, "u": 0.3})     # rate: J = e^u
    assert app.logabsdet == pytest.approx(0.3, abs=1e-10)
    assert alpha == pytest.approx(app.new_model.score - x.score + 0.3, abs=1e-9)
    assert float(app.new_aux["u"]) == pytest.approx(-0.3, abs=1e-12)
    alpha, app = move_with(kernel, x, {"move": 1, "j": 1, "u": 0.25})    # point: J = 1
    assert app.logabsdet == pytest.approx(0.0, abs=1e-10)
    s = x["s"]
    assert float(app.new_aux["u"]) == pytest.approx(float((s[1] - s[0]) / (s[2] - s[0])), rel=1e-10)


def test_soccer_derived_chain_is_the_hand_written_chain():
    """Same seed, same random numbers (the derivation draws none from the user's stream),
    same acceptance ratios: the two chains agree step by step."""
    chains = []
    for kernel in (soccer.soccer_kernel(), soccer_rj_kernel()):
        torch.manual_seed(8)
        chains.append(il.run_chain(kernel, soccer.initial_trace(), 300, progress=False,
                                   record={"model": "model", "lam": "lam"}))
    hand, derived = chains
    assert hand.values("model") == derived.values("model") and len(set(hand.values("model"))) == 2
    assert np.allclose(hand.values("lam"), derived.values("lam"), rtol=1e-9, atol=0)


def test_soccer_posterior_matches_quadrature():
    torch.manual_seed(3)
    chain = il.run_chain(soccer_rj_kernel(), soccer.initial_trace(), 4000,
                         record={"model": "model"}, progress=False)
    model = np.array(chain.values("model"))[200:]
    assert_close_to(model == 1, soccer_ref.posterior_model1(), label="P(model 1 | goals), derived jump")
    assert chain.acceptance["jump"][0] > 500


COAL_CHAINS, COAL_STEPS, COAL_BURN_IN = 2, 6000, 500


def test_coal_posterior_number_of_change_points_matches_dynamic_programming():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(COAL_CHAINS, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = list(pool.map(sample_coal_n, [COAL_STEPS] * COAL_CHAINS, [31 + c for c in range(COAL_CHAINS)],
                             [2 + 2 * c for c in range(COAL_CHAINS)]))
    exact = coal_ref.posterior_num_changepoints()
    n = np.concatenate([r[COAL_BURN_IN:] for r in runs])

    def check(values_per_chain, exact_value, label):
        se = math.sqrt(sum(batch_means_se(v) ** 2 for v in values_per_chain)) / len(values_per_chain)
        estimate = np.concatenate(values_per_chain).mean()
        assert se > 0 and abs(estimate - exact_value) <= 4 * se, (
            f"{label}: {estimate:.4f} vs exact {exact_value:.4f} (SE {se:.4f})")

    check([r[COAL_BURN_IN:] for r in runs], float(np.arange(len(exact)) @ exact), "E[n | y]")
    for j in range(1, 5):
        check([r[COAL_BURN_IN:] == j for r in runs], float(exact[j]), f"P(n = {j} | y)")
    assert set(np.unique(n)) >= {1, 2, 3}


# -- proposals no kernel can be derived from ---------------------------------------
@il.gen
def squared_jump(trace):
    if trace["model"] == 1:
        u = il.normal(0.0, 1.5) @ "u"
        return {"model": 2, "kap": u ** 2}
    return {"model": 1}


@il.gen
def constant_jump(trace):
    if trace["model"] == 1:
        u = il.normal(0.0, 1.5) @ "u"
        return {"model": 2, "kap": 0.015 + 0.0 * u}
    return {"model": 1}


@il.gen
def two_draw_jump(trace):
    if trace["model"] == 1:
        u = il.normal(0.0, 1.5) @ "u"
        il.normal(0.0, 1.0) @ "w"
        return {"model": 2, "kap": 0.015 * torch.exp(u)}
    return {"model": 1}


@il.gen
def one_way_jump(trace):
    u = il.normal(0.0, 1.5) @ "u"
    return {"model": 2, "kap": 0.015 * torch.exp(u)}


@pytest.mark.parametrize("model", [1, 2])
def test_non_invertible_map_is_an_error_naming_the_draw(model):
    kernel = il.rj_proposal(squared_jump)
    with pytest.raises(il.ProposalError, match=r"not invertible in its draw 'u'.*2 values of 'u'"):
        kernel(soccer_state(model))


def test_map_that_ignores_its_draw_is_an_error():
    with pytest.raises(il.ProposalError, match=r"not invertible in its draw 'u'.*does not change"):
        il.rj_proposal(constant_jump)(soccer_state(2))


def test_extra_draw_and_one_way_proposal_are_errors():
    with pytest.raises(il.ProposalError, match=r"2 continuous coordinates \('u', 'w'\).*fixes only 1"):
        il.rj_proposal(two_draw_jump)(soccer_state(2))
    with pytest.raises(il.DimensionError, match="aux_in\\['w'\\]"):
        il.rj_proposal(two_draw_jump)(soccer_state(1))
    with pytest.raises(il.ProposalError, match=r"cannot propose going back.*'model'"):
        il.rj_proposal(one_way_jump)(soccer_state(1))


def test_proposal_must_return_a_dict_and_be_a_gen_function():
    @il.gen
    def returns_list(trace):
        il.normal(0.0, 1.0) @ "u"
        return [1]

    with pytest.raises(il.ProposalError, match="returned list"):
        il.rj_proposal(returns_list)(soccer_state(1))
    with pytest.raises(il.ProposalError, match="@il.gen"):
        il.rj_proposal(lambda trace: {})
