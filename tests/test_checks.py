"""Dynamic checks (paper Algorithm 4 and Sec. 6).

* ``check_involution`` catches each bug of Sec. 6 (square-root merge, birth only at
  the end, a misspelled address, a wrong discrete/continuous label), with a message
  naming the addresses; the corrected version of each passes.
* ``involutive_mcmc(check=True)`` rejects moves whose check fails and records why;
  by Lemma 6.1 the kernel of a *non*-involution then still leaves the target
  invariant, which is tested against the exact prior (and shown to fail with
  ``check=False``).
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

import imcmc_lab as il
from imcmc_lab import continuous, discrete, read, write
from imcmc_lab.examples.bugs import (arithmetic_merge, birth_at_end, birth_at_end_aux, labelled,
                                     mean_split_aux as split_merge_aux, misspelled, one_or_two,
                                     one_or_two_aux, positive_means, sqrt_merge)
from imcmc_lab.examples.mixture import birth_death, birth_death_aux, gmm
from imcmc_lab.transform.checks import involution_problem

# The buggy kernels of Sec. 6 and their corrected twins live in imcmc_lab.examples.bugs
# (and the birth-death move in imcmc_lab.examples.mixture), where gallery notebooks use them.
NO_DATA = (0,)     # gmm(n): the mixture with no data points, i.e. the prior


# ---------------------------------------------------------------------------
# 1. the square-root merge
# ---------------------------------------------------------------------------
def test_arithmetic_merge_passes():
    report = il.check_involution(positive_means, (), split_merge_aux, arithmetic_merge, trials=60, seed=0)
    assert report.trials == 60
    assert sum(report.moves.values()) == 60
    assert set(report.jacobian_sizes) == {(2, 2)}


def test_sqrt_merge_is_caught():
    # k = 1 observed: every trial splits first (in the support), so the failure is the
    # involution check, on the split cluster's mean
    with pytest.raises(il.InvolutionCheckError) as info:
        il.check_involution(positive_means, (), split_merge_aux, sqrt_merge, trials=20,
                            observations={"k": 1}, seed=0)
    msg = str(info.value)
    assert "failed on trial 1 of 20" in msg
    assert "f(f(x, y)) != (x, y)" in msg
    assert "model value at ('mu', 1) differs" in msg
    assert "auxiliary value" not in msg            # u comes back right; only the mean is wrong
    report = info.value.report
    x = report["model"]
    back = il.apply_transform(sqrt_merge, report["application"].new_model,
                              report["application"].new_aux, split_merge_aux)
    mu, u = float(x["mu", 1]), float(report["aux"]["u"])
    assert float(back.new_model["mu", 1]) == pytest.approx(math.sqrt(mu * mu - u * u))
    # the same check passes on the arithmetic merge with the same cases
    il.check_involution(positive_means, (), split_merge_aux, arithmetic_merge, trials=20,
                        observations={"k": 1}, seed=0)


# ---------------------------------------------------------------------------
# 2. the birth-death move that only appends at the end
# ---------------------------------------------------------------------------
def test_birth_anywhere_passes():
    report = il.check_involution(gmm, NO_DATA, birth_death_aux, birth_death, trials=60, seed=1)
    assert report.trials == 60


def test_birth_only_at_the_end_is_caught():
    with pytest.raises(il.InvolutionCheckError) as info:
        il.check_involution(gmm, NO_DATA, birth_at_end_aux, birth_at_end, trials=60, seed=1)
    msg = str(info.value)
    report = info.value.report
    k, idx = report["model"]["k"], report["aux"]["deletion_idx"]
    # the failing case is a death of a cluster that is not the last one ...
    assert report["aux"]["is_birthing"] is False and idx < k
    assert f"aux_in['deletion_idx'] = {idx}" in msg and f"model_in['k'] = {k}" in msg
    # ... and the message names the clusters that came back in the wrong place
    assert "f(f(x, y)) != (x, y)" in msg
    for i in range(idx, k + 1):
        assert f"model value at ('mu', {i}) differs" in msg
        assert f"model value at ('var', {i}) differs" in msg
    for i in range(1, idx):
        assert f"('mu', {i})" not in msg
    assert "model value at 'weights' differs" in msg
    assert f"auxiliary value at 'deletion_idx' differs: before {idx}, after f(f(·)) {k}" in msg


def test_birth_at_the_end_alone_is_an_involution():
    # the buggy move is fine on the cases it handles: births, and deaths of the last cluster
    q, h = birth_at_end_aux, birth_at_end
    torch.manual_seed(2)
    for _ in range(20):
        x = gmm.simulate(0)
        y = q.simulate(x)
        if not y["is_birthing"] and y["deletion_idx"] < x["k"]:
            continue
        app = il.apply_transform(h, x, y, q)
        assert involution_problem(h, app, x, y, q, (), 1e-6, 1e-8) is None


# ---------------------------------------------------------------------------
# 3. misspelled addresses
# ---------------------------------------------------------------------------
def test_misspelled_read_is_caught_with_a_suggestion():
    with pytest.raises(il.AddressError) as info:
        il.check_involution(positive_means, (), split_merge_aux, misspelled(read_address="clusetr_to_split"),
                            trials=20, seed=0)
    msg = str(info.value)
    assert msg.startswith("check_involution trial ")
    assert "aux_in['clusetr_to_split']" in msg
    assert "Did you mean 'cluster_to_split'" in msg
    il.check_involution(positive_means, (), split_merge_aux, misspelled(), trials=20, seed=0)


def test_misspelled_write_is_caught_with_a_suggestion():
    with pytest.raises(il.TransformError) as info:
        il.check_involution(positive_means, (), split_merge_aux, misspelled(copy_to="clusetr_to_merge"),
                            trials=20, seed=0)
    msg = str(info.value)
    assert msg.startswith("check_involution trial ")
    assert "aux_out['clusetr_to_merge']" in msg
    assert "Did you mean 'cluster_to_merge'?" in msg


# ---------------------------------------------------------------------------
# 4. wrong discrete/continuous labels
# ---------------------------------------------------------------------------
def test_continuous_read_as_discrete_is_caught():
    # Gen does not catch this one: the derivative of mu + u in u would be lost
    with pytest.raises(il.LabelError) as info:
        il.check_involution(one_or_two, (), one_or_two_aux, labelled(u_label=discrete), trials=20, seed=0)
    msg = str(info.value)
    assert "aux_in['u'] is read as discrete" in msg and "il.continuous" in msg


def test_discrete_read_as_continuous_is_caught():
    with pytest.raises(il.LabelError) as info:
        il.check_involution(one_or_two, (), one_or_two_aux, labelled(k_label=continuous), trials=20, seed=0)
    msg = str(info.value)
    assert "model_in['k'] is read as continuous" in msg and "il.discrete" in msg


def test_correct_labels_pass():
    report = il.check_involution(one_or_two, (), one_or_two_aux, labelled(), trials=40, seed=0)
    assert set(report.jacobian_sizes) == {(2, 2)}


# ---------------------------------------------------------------------------
# 5. check=True during inference rejects and records why
# ---------------------------------------------------------------------------
def test_check_true_rejects_a_failed_involution_and_says_why():
    torch.manual_seed(3)
    x, _ = positive_means.generate((), {"k": 1})
    failures = 0
    for _ in range(10):
        record = il.involutive_move(x, split_merge_aux, (), sqrt_merge, check=True)
        assert not record.accepted and record.trace is x
        assert "model value at ('mu', 1) differs" in record.check_failure
        failures += 1
    assert failures == 10
    # without the check the same moves are accepted at some rate
    torch.manual_seed(3)
    accepted = sum(il.involutive_move(x, split_merge_aux, (), sqrt_merge).accepted for _ in range(50))
    assert accepted > 0


def test_a_chain_whose_moves_fail_their_check_warns_once():
    """Before: the chain ran with every split rejected and said nothing (acceptance 0.00)."""
    torch.manual_seed(3)
    x, _ = positive_means.generate((), {"k": 1})
    kernel = il.InvolutiveKernel(split_merge_aux, (), sqrt_merge, check=True)
    with pytest.warns(UserWarning) as caught:
        il.run_chain(kernel, x, 5, progress=False)
    mine = [w for w in caught if "failed its check" in str(w.message)]
    assert len(mine) == 1 and kernel.check_failures == 5
    message = str(mine[0].message)
    assert "involutive(sqrt_merge)" in message and "f(f(x, y)) != (x, y)" in message
    assert "fix the transform" in message and "check_failure" in message
    assert mine[0].filename == __file__            # points at the user's call, not the engine


def test_check_true_rejects_a_dimension_failure():
    @il.gen
    def two_aux(trace):
        if trace["k"] == 1:
            il.normal(0.0, 2.0) @ "u"
            il.normal(0.0, 1.0) @ "v"

    @il.transform
    def three_to_two(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        write(model_out["k"], 3 - k, discrete)
        if k == 1:       # (mu, u, v) -> (mu1, mu2): one coordinate short
            mu = read(model_in["mu", 1], continuous)
            u, v = read(aux_in["u"], continuous), read(aux_in["v"], continuous)
            write(model_out["mu", 1], mu - u * torch.exp(v), continuous)
            write(model_out["mu", 2], mu + u, continuous)
        else:            # (mu1, mu2) -> (mu, u, v)
            mu1 = read(model_in["mu", 1], continuous)
            mu2 = read(model_in["mu", 2], continuous)
            write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
            write(aux_out["u"], (mu2 - mu1) / 2, continuous)
            write(aux_out["v"], mu1 * 0.0, continuous)

    torch.manual_seed(0)
    x, _ = one_or_two.generate((), {"k": 2})
    with pytest.raises(il.DimensionError):
        il.involutive_move(x, two_aux, (), three_to_two)
    record = il.involutive_move(x, two_aux, (), three_to_two, check=True)
    assert not record.accepted and record.trace is x
    assert record.check_failure.startswith("dimension")
    assert "Inputs read: model_in[('mu', 1)], model_in[('mu', 2)]" in record.check_failure
    assert "Outputs written: model_out[('mu', 1)], aux_out['u'], aux_out['v']" in record.check_failure
    with pytest.raises(il.InvolutionCheckError) as info:
        il.check_involution(one_or_two, (), two_aux, three_to_two, trials=5, seed=0)
    assert "dimension" in str(info.value)


# ---------------------------------------------------------------------------
# 6. Lemma 6.1: with check=True a non-involution still leaves the prior invariant
# ---------------------------------------------------------------------------
@il.gen
def prior():
    il.bernoulli(0.3) @ "s"
    il.normal(0.0, 1.0) @ "x"


@il.gen
def prior_aux(trace):
    il.normal(0.0, 1.0) @ "u"


@il.transform
def swap_unless_far(model_in, aux_in, model_out, aux_out):
    """Flip s; swap x and u -- but when |x| >= 1 send u to 2x instead.

    f(f(z)) = z exactly when |x| < 1 and |u| < 1 (an involution there, the
    independence sampler from the prior); elsewhere it is not an involution.
    """
    s = read(model_in["s"], discrete)
    write(model_out["s"], not s, discrete)
    x = read(model_in["x"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["x"], u, continuous)
    write(aux_out["u"], x if x.abs() < 1.0 else 2.0 * x, continuous)


X_EDGES = [-math.inf, -1.0, 0.0, 1.0, math.inf]


def _cells(s, x):
    return (4 if s else 0) + sum(1 for e in X_EDGES[1:-1] if x > e)


def _exact_cell_probs():
    px = [stats.norm.cdf(b) - stats.norm.cdf(a) for a, b in zip(X_EDGES[:-1], X_EDGES[1:])]
    return [0.7 * p for p in px] + [0.3 * p for p in px]


def _chain_end_counts(check, n_chains, n_steps, seed):
    """Counts of (s, bin of x) after n_steps moves from exact prior draws."""
    torch.manual_seed(seed)
    counts = [0] * 8
    for _ in range(n_chains):
        trace = prior.simulate()
        for _ in range(n_steps):
            trace, _ = il.involutive_mcmc(trace, prior_aux, (), swap_unless_far, check=check)
        counts[_cells(trace["s"], float(trace["x"]))] += 1
    return counts


def _chi2_pvalue(counts):
    n = sum(counts)
    expected = [n * p for p in _exact_cell_probs()]
    assert min(expected) > 20
    return stats.chisquare(counts, expected).pvalue


def test_check_true_keeps_the_prior_invariant():
    # 1000 independent chains of 3 moves, each started from an exact prior draw: under
    # invariance their end states are exact prior draws, so a chi-square test on the 8
    # cells (s) x (x in (-inf,-1), (-1,0), (0,1), (1,inf)) has a uniform p-value.
    counts = _chain_end_counts(check=True, n_chains=1000, n_steps=3, seed=11)
    assert _chi2_pvalue(counts) > 1e-3
    # the check was active: moves fail it, and others pass and are accepted
    torch.manual_seed(12)
    kernel = il.InvolutiveKernel(prior_aux, (), swap_unless_far, check=True)
    trace, accepted = prior.simulate(), 0
    for _ in range(200):
        trace, acc = kernel.step(trace)
        accepted += acc
    assert 20 < kernel.check_failures < 200 and accepted > 20


def test_check_false_does_not_keep_the_prior_invariant():
    # the same kernel without checks drifts to large |x| (it accepts u -> 2x jumps):
    # this is what the test above would see if check=True did not reject
    counts = _chain_end_counts(check=False, n_chains=1000, n_steps=3, seed=11)
    assert _chi2_pvalue(counts) < 1e-6
    far = counts[0] + counts[3] + counts[4] + counts[7]
    assert far / 1000 > 0.45          # prior: P(|x| > 1) = 0.317
