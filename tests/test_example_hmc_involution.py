"""HMC written as an involution (paper Sec. 6; Neklyudov et al. 2020).

What is checked:

* ``check_involution`` (Algorithm 4) passes, and fails for the paper's example
  bug (the momentum not negated);
* the leapfrog map preserves volume: the engine's ``log |det J|``, computed by
  autodiff through the whole trajectory, is 0 to rounding on a non-Gaussian
  model whose Jacobian is far from trivial;
* for the same seed, state and momentum, the involutive kernel's ``log alpha``
  equals the built-in ``il.hmc``'s (scalar and vector addresses), and both take
  the same decision;
* on a conjugate Gaussian regression the chain's posterior means, variances and
  covariance match the closed form within 4 batch-means standard errors.
"""

import math

import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples.hmc_involution import (hmc_involution_kernel, leapfrog_involution,
                                               momentum_program)
import importlib
hmc_module = importlib.import_module("imcmc_lab.inference.hmc")   # the module (il.hmc is the function)
from mcmc_stats import assert_close_to

XS = torch.tensor([-1.5, -1.0, -0.4, 0.0, 0.3, 0.9, 1.4, 2.0], dtype=torch.float64)
YS = torch.tensor([-1.9, -0.6, 0.2, 0.4, 1.3, 1.7, 2.9, 3.6], dtype=torch.float64)
NOISE_SD = 0.8
PRIOR_MEAN = torch.tensor([0.0, 1.0], dtype=torch.float64)
PRIOR_SD = torch.tensor([2.0, 1.5], dtype=torch.float64)


@il.gen
def regression(xs):
    """y ~ N(a + b x, 0.8^2 I) with a ~ N(0, 2^2), b ~ N(1, 1.5^2): conjugate."""
    a = il.normal(PRIOR_MEAN[0], PRIOR_SD[0]) @ "a"
    b = il.normal(PRIOR_MEAN[1], PRIOR_SD[1]) @ "b"
    il.mvnormal(a + b * xs, NOISE_SD ** 2 * torch.eye(len(xs), dtype=torch.float64)) @ "y"


@il.gen
def regression_vector(xs):
    """The same regression with the coefficients as one vector choice ``"w"``."""
    w = il.mvnormal(PRIOR_MEAN, torch.diag(PRIOR_SD ** 2)) @ "w"
    il.mvnormal(w[0] + w[1] * xs, NOISE_SD ** 2 * torch.eye(len(xs), dtype=torch.float64)) @ "y"


@il.gen
def banana():
    """A curved (non-Gaussian) target: leapfrog is non-linear, its Jacobian is not constant."""
    a = il.normal(0.0, 1.0) @ "a"
    il.normal(a * a, 0.5) @ "b"


def exact_regression_posterior():
    """Closed-form posterior N(m, S) of (a, b)."""
    X = torch.stack([torch.ones_like(XS), XS], dim=1)
    precision = torch.diag(PRIOR_SD ** -2) + X.T @ X / NOISE_SD ** 2
    S = torch.linalg.inv(precision)
    m = S @ (PRIOR_MEAN / PRIOR_SD ** 2 + X.T @ YS / NOISE_SD ** 2)
    return m.numpy(), S.numpy()


def regression_trace(a=0.3, b=0.5):
    trace, _ = regression.generate((XS,), {"a": a, "b": b, "y": YS})
    return trace


def builtin_log_alpha(monkeypatch, trace, selection, step_size, n_steps, seed):
    """``log alpha`` the built-in ``il.hmc`` computes (captured at its accept step)."""
    captured = []
    with monkeypatch.context() as m:
        m.setattr(hmc_module, "_accept", lambda log_alpha: captured.append(log_alpha) or False)
        torch.manual_seed(seed)
        il.hmc(trace, selection, step_size, n_steps)
    (log_alpha,) = captured
    return log_alpha


# ---------------------------------------------------------------------------
def test_check_involution_passes_and_catches_a_missing_momentum_flip():
    kernel = hmc_involution_kernel(["a", "b"], 0.2, 4)
    report = il.check_involution(regression, (XS,), kernel.q, kernel.f, trials=15,
                                 observations={"y": YS}, seed=0)
    assert set(report.jacobian_sizes) == {(4, 4)}

    @il.transform
    def leapfrog_without_flip(model_in, aux_in, model_out, aux_out):
        # one leapfrog step of the Gaussian prior (gradient -x), momentum NOT negated
        x, p = il.read(model_in["a"], il.continuous), il.read(aux_in["p", 0], il.continuous)
        p = p - 0.5 * 0.3 * x
        x = x + 0.3 * p
        il.write(model_out["a"], x, il.continuous)
        il.write(aux_out["p", 0], p - 0.5 * 0.3 * x, il.continuous)

    with pytest.raises(il.InvolutionCheckError, match="involution"):
        il.check_involution(banana, (), momentum_program(["a"]), leapfrog_without_flip, trials=5, seed=0)


def test_leapfrog_preserves_volume():
    # (a stable step size: a diverging trajectory, rejected anyway, has entries ~1e30
    # whose determinant float64 cannot resolve)
    kernel = hmc_involution_kernel(["a", "b"], 0.1, 8)
    torch.manual_seed(3)
    for _ in range(6):
        record = il.involutive_move(banana.simulate(), kernel.q, (), kernel.f)
        jacobian = record.jacobian.reduced
        assert record.jacobian.reduced_size == (4, 4)
        # far from a permutation: every output depends on every input
        assert bool(torch.all(jacobian.abs() > 1e-6))
        assert abs(record.logabsdet) < 1e-10
        assert abs(float(torch.linalg.det(jacobian)) - 1.0) < 1e-10


@pytest.mark.parametrize("step_size", [0.15, 0.45])
def test_log_alpha_equals_builtin_hmc(monkeypatch, step_size):
    kernel = hmc_involution_kernel(["a", "b"], step_size, 5)
    trace = regression_trace()
    log_alphas = []
    for seed in range(6):
        expected = builtin_log_alpha(monkeypatch, trace, il.select("a", "b"), step_size, 5, seed)
        torch.manual_seed(seed)
        record = il.involutive_move(trace, kernel.q, (), kernel.f)
        assert record.log_alpha == pytest.approx(expected, rel=1e-9, abs=1e-9)
        # with the real accept step, the same seed gives the same decision and state
        torch.manual_seed(seed)
        builtin_trace, builtin_accepted = il.hmc(trace, il.select("a", "b"), step_size, 5)
        torch.manual_seed(seed)
        record = il.involutive_move(trace, kernel.q, (), kernel.f)
        assert record.accepted == builtin_accepted
        for address in ("a", "b"):
            assert float(record.trace[address]) == pytest.approx(float(builtin_trace[address]), rel=1e-12)
        log_alphas.append(expected)
        trace = record.trace
    if step_size > 0.4:   # the large step really rejects sometimes: the comparison is not all zeros
        assert min(log_alphas) < -0.05


def test_log_alpha_equals_builtin_hmc_for_a_vector_address(monkeypatch):
    kernel = hmc_involution_kernel(["w"], 0.3, 4)
    trace, _ = regression_vector.generate((XS,), {"w": torch.tensor([0.2, 0.4], dtype=torch.float64),
                                                  "y": YS})
    for seed in range(4):
        expected = builtin_log_alpha(monkeypatch, trace, il.select("w"), 0.3, 4, seed)
        torch.manual_seed(seed)
        record = il.involutive_move(trace, kernel.q, (), kernel.f)
        assert record.aux_in["p", 0].shape == (2,)
        assert record.log_alpha == pytest.approx(expected, rel=1e-9, abs=1e-9)
        assert abs(record.logabsdet) < 1e-10


def test_chain_matches_conjugate_posterior():
    torch.manual_seed(7)
    mean, cov = exact_regression_posterior()
    kernel = hmc_involution_kernel(["a", "b"], 0.12, 4)
    chain = il.run_chain(kernel, regression_trace(), 1200, record=["a", "b"], progress=False)
    a = np.array(chain.values("a"), dtype=float)[100:]
    b = np.array(chain.values("b"), dtype=float)[100:]
    assert chain.acceptance_rates()[kernel.name] > 0.5
    assert_close_to(a, mean[0], label="E[a | y]")
    assert_close_to(b, mean[1], label="E[b | y]")
    assert_close_to((a - mean[0]) ** 2, cov[0, 0], label="Var[a | y]")
    assert_close_to((b - mean[1]) ** 2, cov[1, 1], label="Var[b | y]")
    assert_close_to((a - mean[0]) * (b - mean[1]), cov[0, 1], label="Cov[a, b | y]")
