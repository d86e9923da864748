"""NP-DHMC with unit coordinates (issue 18): a uniform choice moved as a discontinuous
coordinate has the coordinate u = (v - lo) / (hi - lo) with reference U(0, 1) (the kernel's
``coordinates="unit"``, the default). The involution check and exact answers on the
thesis's random walk (start and steps uniform) and on a uniform whose bounds depend on
another choice; each statistical test compares a chain average with the exact value within
4 batch-means standard errors (tests/mcmc_stats.py).
"""

import math

import pytest
import torch

import imcmc_lab as il
from imcmc_lab.errors import ImcmcError
from imcmc_lab.examples.nonparametric import WALK_START_BELOW_ONE, WALK_START_MEAN, walk
from imcmc_lab.inference.nphmc.coordinates import Trajectory

from mcmc_stats import assert_close_to, chain_statistic

WALK = il.select("start", "step")

# P(y < 1/2) for x ~ uniform(0, 2), y ~ uniform(0, x): E[min(1, 1/(2x))] = 1/4 + ln(4)/4;
# weighted by 1/2 where y < 1/2: P = (P0/2) / (P0/2 + 1 - P0).
_P0 = 0.25 + 0.25 * math.log(4.0)
NESTED_P = 0.5 * _P0 / (0.5 * _P0 + 1.0 - _P0)


@il.gen
def nested_uniform():
    """y's bounds depend on x; a coin observed True has probability 1/2 where y < 1/2."""
    x = il.uniform(0.0, 2.0) @ "x"
    y = il.uniform(0.0, x) @ "y"
    il.bernoulli(0.5 if y < 0.5 else 1.0) @ "w"


def test_walk_check_passes_with_unit_coordinates():
    """Forward and back (both sweep directions) with persistence and look-ahead: the unused
    steps fly freely between the walls at 0 and 1 and are replayed exactly on extension."""
    torch.manual_seed(0)
    kernel = il.NPHMC(WALK, 0.1, 5, discontinuous=WALK, persistence=0.1, lookahead=2)
    report = il.check_nphmc(walk, (), {"distance": 1.1}, kernel, trials=40, max_latent=10)
    assert report.passed and report.trials >= 36 and report.extensions_in_sweep > 50
    forward = kernel.start(walk.generate((), {"distance": 1.1})[0])
    assert all(forward.unit.values()) and 0.0 <= forward.z[("start",)] <= 1.0


def test_an_unused_unit_coordinate_reflects_at_the_walls():
    traj = Trajectory(0.3, 1, unit_uniforms=True)
    assert traj.reference_update(0.8, 2.0, unit=True) == (0.8, -2.0)        # 1.1 is outside: reflect
    z, p = traj.reference_update(0.5, -2.0, unit=True)
    assert z == pytest.approx(0.2) and p == -2.0                           # free flight: p unchanged
    assert traj.reference_update(0.5, 1.0, unit=False) == pytest.approx((0.8, 1.0 - 0.5 * (0.64 - 0.25)))


@pytest.mark.parametrize("alpha, eps", [(1.0, 0.1), (0.1, 0.1), (0.1, 0.1 / 3)])
def test_walk_start_posterior_with_unit_coordinates(alpha, eps):
    """Mean start 0.590964, P(start < 1) = 0.89977; 300 + 2,000 moves (L=5, ε jittered):
    batch-means SE 0.010 / 0.012 (mean) and 0.009 / 0.014 (P) for α = 1 / 0.1 at ε = 0.1
    (estimates 0.583 / 0.587 and 0.925 / 0.898); 5-15 s CPU each. ε = 0.1/3, where α = 0.1
    gives 1.7-1.8× the ESS of α = 1 (``benchmarks/nonparametric.py --only walk-sweep``):
    0.598 (SE 0.015) and 0.897 (SE 0.011) at α = 0.1 (seeds 7 and 8: 0.632 / 0.604, 0.875 / 0.893)."""
    torch.manual_seed(6)
    trace, _ = walk.generate((), {"distance": 1.1})
    kernel = il.NPHMC(WALK, eps, 5, discontinuous=WALK, persistence=alpha, coordinates="unit")
    starts = chain_statistic(kernel, trace, 2300, lambda t: float(t["start"]), seed=6)[300:]
    assert_close_to(starts, WALK_START_MEAN, label="mean start")
    assert_close_to([float(s < 1) for s in starts], WALK_START_BELOW_ONE, label="P(start < 1)")


def test_walk_start_posterior_with_normal_coordinates():
    """The N(0, 1) coordinates (``coordinates="normal"``) stay exact: 300 + 2,000 moves at α = 1
    (estimate 0.612, SE 0.027 on the mean; 0.888, SE 0.015 on P: these coordinates mix
    about 4× slower on the walk)."""
    torch.manual_seed(7)
    trace, _ = walk.generate((), {"distance": 1.1})
    kernel = il.NPHMC(WALK, 0.1, 5, discontinuous=WALK, coordinates="normal")
    starts = chain_statistic(kernel, trace, 2300, lambda t: float(t["start"]), seed=7)[300:]
    assert_close_to(starts, WALK_START_MEAN, label="mean start")
    assert_close_to([float(s < 1) for s in starts], WALK_START_BELOW_ONE, label="P(start < 1)")


def test_a_uniform_whose_bounds_depend_on_another_choice():
    """The U(0, 1) reference does not depend on the bounds, so y ~ uniform(0, x) with x
    moving is exact: P(y < 1/2 | w) = 0.42508; 3,000 moves: 0.434, SE 0.009."""
    trace, _ = nested_uniform.generate((), {"w": True})
    kernel = il.NPHMC(il.select("x", "y"), 0.1, 5, discontinuous=il.select("x", "y"), persistence=0.5)
    torch.manual_seed(8)
    assert il.check_nphmc(nested_uniform, (), {"w": True}, kernel, trials=30).passed
    assert all(kernel.start(trace).unit.values())
    below = chain_statistic(kernel, trace, 3000, lambda t: float(t["y"] < 0.5), seed=8)
    assert_close_to(below, NESTED_P, label="P(y < 1/2)")


def test_an_address_that_changes_kind_is_named():
    @il.gen
    def model():
        b = il.uniform(0.0, 1.0) @ "b"
        if b < 0.5:
            il.uniform(0.0, 1.0) @ "c"
        else:
            il.normal(0.0, 1.0) @ "c"

    kernel = il.NPHMC(il.select("b", "c"), 0.3, 5, discontinuous=il.select("b", "c"))
    torch.manual_seed(9)
    with pytest.raises(ImcmcError, match=r"'c'.*coordinates='normal'"):
        chain_statistic(kernel, model.simulate(), 50, lambda t: None, seed=9)
    chain_statistic(il.NPHMC(il.select("b", "c"), 0.3, 5, discontinuous=il.select("b", "c"), coordinates="normal"),
          model.simulate(), 20, lambda t: None, seed=9)


def test_coordinates_must_be_named():
    with pytest.raises(ValueError, match="coordinates"):
        il.NPHMC(WALK, coordinates="native")


def test_geometric_pooled_tvd_with_unit_coordinates():
    """Done-when 2 of issue 18: pooled TVD of N over 10 chains × 1,000 moves (L=5, ε=0.1, α=1,
    each chain from a prior draw, no burn-in) at most 0.0235 (independent exact samples: about
    0.016 at 10,000). These seeds: 0.0153 with unit coordinates, 0.0237 with
    coordinates="normal" (the test fails with them; another seeding gave 0.0142 against
    0.0301, and at α = 0.1 0.0127 against 0.0424). About 45 s CPU."""
    from imcmc_lab.examples.nonparametric import geometric

    flips, ns = il.select("u"), []
    for seed in range(10):
        torch.manual_seed(seed)
        kernel = il.NPHMC(flips, 0.1, 5, discontinuous=flips)
        ns += chain_statistic(kernel, geometric.simulate(0.2), 1000, lambda t: t.retval, seed=seed)
    top = max(max(ns), 60)
    counts = torch.bincount(torch.tensor(ns), minlength=top + 1)[1:].double() / len(ns)
    exact = 0.2 * 0.8 ** torch.arange(top, dtype=torch.float64)
    tvd = 0.5 * (float((counts - exact).abs().sum()) + 0.8 ** top)
    assert tvd <= 0.0235, f"pooled TVD {tvd:.4f}"
