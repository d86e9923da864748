"""Coal-mining change points (Green 1995; Roberts et al. 2019, Sec. 5.2): Green's
reversible-jump sampler as one involutive MCMC kernel.

What is checked:

* the data conversion and the model's density against independent formulas
  (tests/reference/coal.py's event days; scipy for the priors; NumPy for the
  Poisson-process likelihood), and the two custom distributions' samplers;
* Green's move probabilities: ``b_n + d_n <= 0.9`` and ``P(n) b_n = P(n+1) d_{n+1}``;
* ``check_involution`` (Algorithm 4) on all four moves;
* the engine's ``log alpha`` of birth and death moves equals Green's (1995, pp.
  720-721) analytic acceptance ratio, term by term, and its Jacobian is Green's
  ``(h1 + h2)^2 / h``;
* the chain against the exact reference (dynamic programming, heights
  integrated out): total-variation distance of P(n | y) below 0.03, each
  P(n = j | y) and the posterior mean rate at a grid of times within 4
  batch-means standard errors.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.special import gammaln

import imcmc_lab as il
from imcmc_lab.examples import coal
from mcmc_stats import batch_means_se
from reference import coal as coal_ref

L = coal.LENGTH
P_THRESHOLD = 1e-3


# ---------------------------------------------------------------------------
# independent formulas (NumPy / SciPy)
# ---------------------------------------------------------------------------
def log_likelihood(s, g, y):
    """Poisson-process log-likelihood: sum_i log rate(y_i) - sum_j g_j (s_{j+1} - s_j)."""
    edges = np.concatenate([[0.0], s, [L]])
    rate_at_events = np.asarray(g)[np.searchsorted(s, y, side="right")]
    return float(np.log(rate_at_events).sum() - np.sum(np.asarray(g) * np.diff(edges)))


def log_prior(s, g):
    """log P(n) + log p(s | n) + log p(g | n) of Fig. 3 (Green's even order statistics)."""
    n = len(s)
    gaps = np.diff(np.concatenate([[0.0], s, [L]]))
    log_p_s = gammaln(2 * n + 2) - (2 * n + 1) * math.log(L) + np.log(gaps).sum()
    log_p_g = stats.gamma(a=coal.HEIGHT_SHAPE, scale=1 / coal.HEIGHT_RATE).logpdf(g).sum()
    return float(coal_ref.log_prior_n()[n] + log_p_s + log_p_g)


def green_move_probabilities():
    """Green's (1995, p. 719) table, n = 1..30: columns (height, position, birth, death)
    with b_n = c min(1, P(n+1)/P(n)), d_n = c min(1, P(n-1)/P(n)), max_n (b_n + d_n) = 0.9."""
    prior = np.exp(coal_ref.log_prior_n())            # P(n), n = 0..30
    prior = np.append(prior, 0.0)                     # P(31) = 0
    n = np.arange(1, coal_ref.N_MAX + 1)
    up, down = np.minimum(1, prior[n + 1] / prior[n]), np.minimum(1, prior[n - 1] / prior[n])
    c = 0.9 / np.max(up + down)
    within = (1 - c * up - c * down) / 2
    return {k: np.array([w, w, c * b, c * d]) for k, w, b, d in zip(n, within, up, down)}


GREEN_TABLE = green_move_probabilities()


def green_birth_log_ratio(s, g, x, u, y):
    """log of Green's (1995, pp. 720-721) birth acceptance ratio for a new point ``x`` and
    split variable ``u`` from state ``(s, g)``: likelihood ratio x prior ratio x
    proposal ratio x Jacobian, each written out by hand."""
    s, g = np.asarray(s, dtype=float), np.asarray(g, dtype=float)
    n = len(s)
    j = int(np.searchsorted(s, x))
    edges = np.concatenate([[0.0], s, [L]])
    lo, hi, h = edges[j], edges[j + 1], g[j]
    r = (1 - u) / u
    h1, h2 = h * r ** (-(hi - x) / (hi - lo)), h * r ** ((x - lo) / (hi - lo))
    s_new, g_new = np.insert(s, j, x), np.concatenate([g[:j], [h1, h2], g[j + 1:]])
    a, b = coal.HEIGHT_SHAPE, coal.HEIGHT_RATE
    log_prior_n = coal_ref.log_prior_n()
    probs = GREEN_TABLE
    terms = {
        "likelihood": log_likelihood(s_new, g_new, y) - log_likelihood(s, g, y),
        "prior n": log_prior_n[n + 1] - log_prior_n[n],
        "prior s": math.log((2 * n + 2) * (2 * n + 3) / L ** 2 * (x - lo) * (hi - x) / (hi - lo)),
        "prior h": (a * math.log(b) - math.lgamma(a) + (a - 1) * math.log(h1 * h2 / h)
                    - b * (h1 + h2 - h)),
        "proposal": math.log(probs[n + 1][coal.DEATH] * L / (probs[n][coal.BIRTH] * (n + 1))),
        "jacobian": math.log((h1 + h2) ** 2 / h),
    }
    return sum(terms.values()), terms


def trace_with(s, g):
    s, g = torch.tensor(s, dtype=torch.float64), torch.tensor(g, dtype=torch.float64)
    trace, _ = coal.coal.generate((L,), {"n": len(s), "s": s, "g": g, "y": coal.load_coal()})
    return trace


def moves_of_kind(trace, kind, count, first_seed=0):
    """Involutive moves from ``trace`` whose auxiliary draw picked ``kind`` (seeded)."""
    kernel = coal.coal_kernel()
    records = []
    for seed in range(first_seed, first_seed + 1000):
        torch.manual_seed(seed)
        record = il.involutive_move(trace, kernel.q, kernel.q_args, kernel.f)
        if record.aux_in["move"] == kind:
            records.append(record)
            if len(records) == count:
                return records
    raise AssertionError(f"no {coal.MOVE_NAMES[kind]} move drawn")


STATE = ([12000.0, 15500.0, 31000.0], [0.0085, 0.004, 0.0025, 0.0015])


# ---------------------------------------------------------------------------
# data, model, distributions
# ---------------------------------------------------------------------------
def test_data_are_days_since_first_disaster_as_in_stochaskell():
    y = coal.load_coal()
    expected = np.asarray(coal_ref.load_event_days())
    assert y.dtype == torch.float64 and y.shape == (191,)
    np.testing.assert_array_equal(y.numpy(), expected)
    assert y[0] == 0 and 40548.0 < float(y[-1]) < 40549.0 < L


def test_model_density_matches_independent_formula():
    s, g = STATE
    trace = trace_with(s, g)
    y = coal.load_coal().numpy()
    assert trace["n"] == 3
    assert trace.score == pytest.approx(log_prior(s, g) + log_likelihood(s, g, y), rel=1e-12)
    # change points out of order, or a negative height: outside the support
    assert coal.coal.assess((L,), {"n": 2, "s": torch.tensor([5.0e3, 1.0e3], dtype=torch.float64),
                                   "g": torch.full((3,), 0.004, dtype=torch.float64),
                                   "y": coal.load_coal()}) == -math.inf


def test_even_order_statistics_sampler_matches_its_density():
    # n = 1: the median of 3 uniforms is L * Beta(2, 2); n = 2: s_1 / L ~ Beta(2, 4).
    torch.manual_seed(0)
    for n, (a, b) in ((1, (2, 2)), (2, (2, 4))):
        draws = torch.stack([coal.EvenOrderStatistics(n, L).sample() for _ in range(2000)])
        assert bool(torch.all(draws[:, 1:] > draws[:, :-1])) if n > 1 else True
        assert stats.kstest(draws[:, 0].numpy() / L, stats.beta(a, b).cdf).pvalue > P_THRESHOLD
    # the density integrates the even order statistics of 2n + 1 uniforms: (2n+1)! prod gaps / L^(2n+1)
    s = torch.tensor([1000.0, 25000.0], dtype=torch.float64)
    expected = math.log(120) + math.log(1000.0 * 24000.0 * (L - 25000.0)) - 5 * math.log(L)
    assert float(coal.EvenOrderStatistics(2, L).log_prob(s)) == pytest.approx(expected, rel=1e-12)


def test_poisson_process_sampler():
    # counts per segment: Poisson (mean by a z-test, dispersion by the chi-square
    # index-of-dispersion test); positions within a segment: uniform (KS)
    torch.manual_seed(1)
    s = torch.tensor([10000.0, 30000.0], dtype=torch.float64)
    g = torch.tensor([0.002, 0.0005, 0.001], dtype=torch.float64)
    edges = np.array([0.0, 1e4, 3e4, L])
    process = coal.PiecewisePoissonProcess(s, g, L)
    samples = [process.sample().numpy() for _ in range(1000)]
    assert all(np.all(np.diff(y) >= 0) for y in samples)
    counts = np.array([np.histogram(y, edges)[0] for y in samples])
    for segment, mean in enumerate(g.numpy() * np.diff(edges)):
        c = counts[:, segment]
        assert abs(c.mean() - mean) <= 4 * math.sqrt(mean / len(c))
        dispersion = ((c - mean) ** 2).sum() / mean
        tail = stats.chi2(len(c)).sf(dispersion)
        assert P_THRESHOLD < tail < 1 - P_THRESHOLD
    first = np.concatenate([y[y < 1e4] for y in samples]) / 1e4
    assert stats.kstest(first, "uniform").pvalue > P_THRESHOLD


def test_green_move_probabilities():
    table = np.array([coal.move_probabilities(n).numpy() for n in range(1, coal.N_MAX + 1)])
    np.testing.assert_allclose(table, np.array([GREEN_TABLE[n] for n in range(1, coal.N_MAX + 1)]),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(table.sum(axis=1), 1.0, rtol=1e-12)
    jump = table[:, coal.BIRTH] + table[:, coal.DEATH]
    assert jump.max() == pytest.approx(0.9, rel=1e-12)
    assert table[0, coal.DEATH] == 0 and table[-1, coal.BIRTH] == 0   # n = 1 and n = 30
    prior = np.exp(coal_ref.log_prior_n())
    for n in range(1, coal.N_MAX):   # Green's balance: P(n) b_n = P(n+1) d_{n+1}
        assert prior[n] * table[n - 1, coal.BIRTH] == pytest.approx(prior[n + 1] * table[n, coal.DEATH], rel=1e-12)


# ---------------------------------------------------------------------------
# the kernel: involution and acceptance ratio
# ---------------------------------------------------------------------------
def test_check_involution_all_four_moves():
    report = il.check_involution(coal.coal, (L,), coal.coal_aux, coal.coal_moves(), trials=150,
                                 q_args=(L,), observations={"y": coal.load_coal()}, seed=2)
    # discrete writes: birth writes n and j, death writes n, height/position write j
    assert set(report.moves) == {"'j', 'move', 'n'", "'move', 'n'", "'j', 'move'"}
    assert set(report.jacobian_sizes) == {(2, 2), (3, 3)}


def test_birth_and_death_log_alpha_equal_greens_formula():
    s, g = STATE
    trace = trace_with(s, g)
    y = coal.load_coal().numpy()
    for record in moves_of_kind(trace, coal.BIRTH, 4):
        x, u = float(record.aux_in["x"]), float(record.aux_in["u"])
        expected, terms = green_birth_log_ratio(s, g, x, u, y)
        assert record.logabsdet == pytest.approx(terms["jacobian"], rel=1e-9)
        assert record.log_alpha == pytest.approx(expected, rel=1e-9, abs=1e-9)
        assert record.model_out["n"] == 4 and record.aux_out["move"] == coal.DEATH
    # a death is the reverse of the birth it undoes: log alpha = -(Green's birth ratio)
    for record in moves_of_kind(trace, coal.DEATH, 3):
        j = record.aux_in["j"]
        x, u = float(record.aux_out["x"]), float(record.aux_out["u"])
        s_small, g_small = record.model_out["s"].numpy(), record.model_out["g"].numpy()
        expected, _ = green_birth_log_ratio(s_small, g_small, x, u, y)
        assert x == s[j]
        assert record.log_alpha == pytest.approx(-expected, rel=1e-9, abs=1e-9)


def test_within_model_moves_are_the_papers():
    trace = trace_with(*STATE)
    (height,) = moves_of_kind(trace, coal.HEIGHT, 1)
    j, u = height.aux_in["j"], float(height.aux_in["u"])
    assert float(height.model_out["g"][j]) == pytest.approx(STATE[1][j] * math.exp(u), rel=1e-12)
    assert height.logabsdet == pytest.approx(u, rel=1e-9, abs=1e-12)   # d(g e^u)/dg = e^u
    (position,) = moves_of_kind(trace, coal.POSITION, 1)
    j, u = position.aux_in["j"], float(position.aux_in["u"])
    edges = [0.0] + STATE[0] + [L]
    assert float(position.model_out["s"][j]) == pytest.approx(edges[j] + (edges[j + 2] - edges[j]) * u)
    assert position.logabsdet == pytest.approx(0.0, abs=1e-9)


# ---------------------------------------------------------------------------
# the chain against the exact reference
# ---------------------------------------------------------------------------
# Chain length. Green's birth/death mixes slowly (integrated autocorrelation time of n
# ~160 moves), so the TV distance of the empirical P(n | y) shrinks slowly. From a
# hand-coded NumPy replica of this exact kernel (5M moves cut into pieces; the engine
# agrees with it move by move): mean TV / P(TV > 0.03) = 0.021 / 16% at 60k moves,
# 0.018 / 8% at 100k, 0.015 / 0 of 33 pieces at 150k. So 150k moves in all: two
# independent chains of 75k, one per core (CI has two), from different starts.
CHAINS, STEPS, BURN_IN = 2, 75_000, 2_000
GRID_YEARS = np.array([1855.0, 1870.0, 1885.0, 1890.0, 1895.0, 1910.0, 1940.0, 1960.0])


def test_chain_matches_exact_posterior():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    times = coal.years_to_days(GRID_YEARS).numpy()
    with ProcessPoolExecutor(CHAINS, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = list(pool.map(coal.sample_posterior, [STEPS] * CHAINS, [2024 + c for c in range(CHAINS)],
                             [times] * CHAINS, [3 + 2 * c for c in range(CHAINS)]))
    n = np.concatenate([ns[BURN_IN:] for ns, _ in runs])
    rates = np.concatenate([r[BURN_IN:] for _, r in runs])

    exact = coal_ref.posterior_num_changepoints()
    estimate = np.bincount(n, minlength=len(exact))[: len(exact)] / len(n)
    assert n.max() <= coal.N_MAX and n.min() >= 1
    tv = 0.5 * np.abs(estimate - exact).sum()
    assert tv < 0.03, f"TV(chain, exact P(n | y)) = {tv:.4f}"
    # standard errors from batch means of each chain, combined
    def se(values_per_chain):
        return math.sqrt(sum(batch_means_se(v) ** 2 for v in values_per_chain)) / len(values_per_chain)

    for j in range(1, 7):
        s = se([ns[BURN_IN:] == j for ns, _ in runs])
        assert abs(estimate[j] - exact[j]) <= 4 * s, f"P(n = {j}): {estimate[j]:.4f} vs {exact[j]:.4f} (SE {s:.4f})"

    exact_rates = coal_ref.posterior_mean_rate(times)
    for k, year in enumerate(GRID_YEARS):
        s = se([r[BURN_IN:, k] for _, r in runs])
        assert abs(rates[:, k].mean() - exact_rates[k]) <= 4 * s, (
            f"E[rate({year:g}) | y]: {rates[:, k].mean():.3e} vs {exact_rates[k]:.3e} (SE {s:.1e})")
