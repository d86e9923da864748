"""The one-trace form, tcall composition, and involutions built from a pair of bijections."""

import math

import pytest
import torch

import imcmc_lab as il
from imcmc_lab import continuous, discrete, read, tcall, write
from imcmc_lab.examples import two_clusters
from imcmc_lab.transform.apply import apply_transform


@il.gen
def symmetric():
    il.normal(0.0, 1.0) @ "x"
    il.bernoulli(0.3) @ "b"


@il.transform
def negate(t_in, t_out):
    write(t_out["x"], -read(t_in["x"], continuous), continuous)


def test_one_trace_form_is_a_deterministic_involution():
    assert negate.one_trace
    report = il.check_involution(symmetric, (), None, negate, trials=20)
    assert report.trials == 20
    torch.manual_seed(0)
    trace = symmetric.simulate()
    record = il.involutive_move(trace, None, (), negate)
    assert record.accepted and record.log_alpha == pytest.approx(0.0, abs=1e-12)
    assert record.logabsdet == pytest.approx(0.0, abs=1e-12)       # |d(-x)/dx| = 1
    assert float(record.model_out["x"]) == -float(trace["x"])
    assert record.copied_implicitly == [("b",)] or ("b",) not in [a for (_, a) in record.written]


@il.transform
def split_part(model_in, aux_in, model_out, aux_out):
    mu = read(model_in["mu", 1], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["mu", 1], mu - u, continuous)
    write(model_out["mu", 2], mu + u, continuous)


@il.transform
def split_merge_by_tcall(model_in, aux_in, model_out, aux_out):
    if read(model_in["k"], discrete) == 1:
        write(model_out["k"], 2, discrete)
        tcall(split_part)
    else:
        mu1, mu2 = read(model_in["mu", 1], continuous), read(model_in["mu", 2], continuous)
        write(model_out["k"], 1, discrete)
        write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
        write(aux_out["u"], (mu2 - mu1) / 2, continuous)


@il.transform
def split(model_in, aux_in, model_out, aux_out):
    write(model_out["k"], 2, discrete)
    tcall(split_part)


@il.transform
def merge(model_in, aux_in, model_out, aux_out):
    mu1, mu2 = read(model_in["mu", 1], continuous), read(model_in["mu", 2], continuous)
    write(model_out["k"], 1, discrete)
    write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
    write(aux_out["u"], (mu2 - mu1) / 2, continuous)


@il.transform
def bad_merge(model_in, aux_in, model_out, aux_out):
    mu1, mu2 = read(model_in["mu", 1], continuous), read(model_in["mu", 2], continuous)
    write(model_out["k"], 1, discrete)
    write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
    write(aux_out["u"], (mu2 - mu1), continuous)        # should be halved


DATA = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64)


def _alpha_terms(f, trace, aux):
    app = apply_transform(f, trace, aux, two_clusters.split_aux, ())
    return app.model_log_ratio, app.log_q_new, app.logabsdet


@pytest.mark.parametrize("composed", ["tcall", "bijections"])
def test_composed_involutions_match_the_hand_written_one(composed):
    if composed == "tcall":
        f = split_merge_by_tcall
    else:
        f = il.involution_from_bijections(split, merge, forward=lambda m, a: read(m["k"], discrete) == 1)
    il.check_involution(two_clusters.two_clusters, (len(DATA),), two_clusters.split_aux, f, trials=30)
    torch.manual_seed(1)
    for _ in range(10):
        trace, _ = two_clusters.two_clusters.generate((len(DATA),), {"x": DATA})
        aux = two_clusters.split_aux.simulate(trace)
        expected = _alpha_terms(two_clusters.split_merge, trace, aux)
        got = _alpha_terms(f, trace, aux)
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_bijection_pair_that_is_not_inverse_is_caught():
    il.pair_bijections(split, bad_merge)

    @il.gen
    def forced_split(trace):
        if trace["k"] == 1:
            il.normal(0.0, 1.0) @ "u"

    @il.gen
    def clusters():
        k = il.uniform_discrete(1, 2) @ "k"
        for j in range(1, k + 1):
            il.normal(0.0, 10.0) @ ("mu", j)

    # Only k = 1 is in the domain of the split: fix it as an observation.
    with pytest.raises(il.InvolutionCheckError, match=r"auxiliary value at 'u' differs"):
        il.check_involution(clusters, (), forced_split, split, trials=5, observations={"k": 1})
    il.pair_bijections(split, merge)
    il.check_involution(clusters, (), forced_split, split, trials=5, observations={"k": 1})


def test_involution_from_bijections_with_a_flag_address():
    @il.gen
    def model():
        il.normal(0.0, 1.0) @ "x"

    @il.gen
    def aux(trace):
        il.bernoulli(0.5) @ "up"
        il.normal(0.0, 1.0) @ "d"

    @il.transform
    def up(model_in, aux_in, model_out, aux_out):
        x, d = read(model_in["x"], continuous), read(aux_in["d"], continuous)
        write(model_out["x"], x + d, continuous)
        write(aux_out["d"], d, continuous)

    @il.transform
    def down(model_in, aux_in, model_out, aux_out):
        x, d = read(model_in["x"], continuous), read(aux_in["d"], continuous)
        write(model_out["x"], x - d, continuous)
        write(aux_out["d"], d, continuous)

    f = il.involution_from_bijections(up, down, forward="up")
    report = il.check_involution(model, (), aux, f, trials=40)
    assert len(report.moves) == 1 and report.jacobian_sizes[0] == (2, 2)
