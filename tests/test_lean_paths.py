"""The lean paths of simulate and generate give what the general handler path gives.

A prior draw of a built-in beta, bernoulli or uniform_discrete is drawn and scored in one
pass (``Tracer._sampled`` through ``_sample_logpdf``); ``visit_choice``
normalises a string address inline; ``DynamicTrace.__getitem__`` answers a one-key choice
holding no tensor without resolving the path. Here each runs beside a handler that takes
the general path for every choice: the same traces (addresses, values, log-densities,
distributions), scores, weights, draws and errors.
"""

from __future__ import annotations

import pytest
import torch

import imcmc_lab as il
from imcmc_lab.modeling.execution import Execution
from imcmc_lab.modeling.runtime import OwnedChoices, generate
from imcmc_lab.modeling.tracer import Generate, Simulate

F64 = torch.float64


def _drawn_then_scored(tracer, dist, address, line):
    """A prior draw as before the one-pass path: check, sample(), then _score."""
    if dist.check_params() is not None:
        tracer._validate(dist, address, line, may_be_impossible=False)     # raises
    value = dist.sample()
    return value, tracer._score(dist, value, address, True)


class GeneralSimulate(Simulate):
    """Simulate as it was before the lean path: _claim, sample() and _score for every choice."""
    __slots__ = ()

    def choice(self, address, dist, line):
        self._claim(address, line, "random choice")
        value, logpdf = _drawn_then_scored(self, dist, address, line)
        self.records[address] = il.modeling.trace.ChoiceRecord(dist, value, logpdf)
        return value


class GeneralGenerate(Generate):
    __slots__ = ()

    def choice(self, address, dist, line):
        self._claim(address, line, "random choice")
        if self.constraints is not None and address in self.constraints:
            value, logpdf = self._constrained(dist, address, line)
            self.weight += logpdf
        else:
            self.fresh.append(address)
            value, logpdf = _drawn_then_scored(self, dist, address, line)
        self.records[address] = il.modeling.trace.ChoiceRecord(dist, value, logpdf)
        return value


@il.gen
def mixed(n):
    split = il.bernoulli(0.4) @ "split"
    k = il.uniform_discrete(1, 5) @ "k"
    u = il.beta(2.0, 3.0) @ "u"
    mu = il.normal(0.0, 10.0) @ ("mu", 1)          # a two-key address: the general claim
    xs = [il.normal(mu, 1.0) @ ("x", i) for i in range(n)]
    il.gamma(2.0, 1.0) @ 7                        # an int key
    il.beta(0.5, 0.5) @ "small"                    # beta's other sampler
    return split, k, u, xs


def _run(mode, fn, args, constraints=None, seed=0):
    torch.manual_seed(seed)
    result = fn._execute(Execution(mode, args, None, constraints))
    tail = torch.rand(()).item()            # the generator's state after the run
    records = [(a, repr(r.dist), r.value, r.logpdf) for a, r in result.trace.flat_records().items()]
    return records, result.trace.score, result.weight, result.fresh, result.n_used, tail


def _same(a, b):
    ra, rb = a[0], b[0]
    assert [r[0] for r in ra] == [r[0] for r in rb]
    for (addr, da, va, la), (_, db, vb, lb) in zip(ra, rb):
        assert da == db and la == lb, addr
        assert type(va) is type(vb) and (torch.equal(va, vb) if isinstance(va, torch.Tensor) else va == vb)
    assert a[1:] == b[1:]


@pytest.mark.parametrize("n", [0, 3, 40])       # 40: a family long enough to be kept compact
def test_simulate_and_generate_match_the_general_path(n):
    for seed in range(5):
        _same(_run(Simulate, mixed, (n,), seed=seed), _run(GeneralSimulate, mixed, (n,), seed=seed))
        constraints = OwnedChoices({("k",): 2, ("u",): torch.tensor(0.25, dtype=F64), ("mu", 1): 1.5,
                                    ("x", 0): torch.tensor(0.5, dtype=F64)} if n else {("k",): 9})
        _same(_run(Generate, mixed, (n,), constraints, seed), _run(GeneralGenerate, mixed, (n,), constraints, seed))
    trace = mixed.simulate(2)
    assert trace["k"] == trace[("k",)] and trace["split"] is trace.choice_record("split").value


def _error(mode, body, constraints=None):
    try:
        body._execute(Execution(mode, (), None, constraints))
    except Exception as exc:        # noqa: BLE001 (the error is what is compared)
        return type(exc), str(exc)
    return None


def _bodies():
    def twice():
        il.normal(0.0, 1.0) @ "a"
        il.normal(0.0, 1.0) @ "a"

    def leaf_then_namespace():
        il.normal(0.0, 1.0) @ "a"
        il.normal(0.0, 1.0) @ ("a", 1)

    def namespace_then_leaf():
        il.normal(0.0, 1.0) @ ("a", 1)
        il.normal(0.0, 1.0) @ "a"

    def empty():
        il.normal(0.0, 1.0) @ ()

    def invalid():
        il.beta(2.0, -1.0) @ "b"

    def family_then_element():
        [il.normal(0.0, 1.0) @ ("x", i) for i in range(40)]
        il.normal(0.0, 1.0) @ ("x", 3)

    def nan_density():
        il.normal(float("nan"), 1.0) @ "z"
    return [twice, leaf_then_namespace, namespace_then_leaf, empty, invalid, family_then_element, nan_density]


@pytest.mark.parametrize("body", _bodies(), ids=lambda f: f.__name__)
def test_errors_match_the_general_path(body):
    fn = il.gen(body)
    simulated = _error(Simulate, fn)
    assert simulated is not None and simulated == _error(GeneralSimulate, fn)
    constraints = OwnedChoices({("a",): torch.tensor(0.5, dtype=F64)})
    if body.__name__ in ("twice", "leaf_then_namespace", "namespace_then_leaf"):
        assert _error(Generate, fn, constraints) == _error(GeneralGenerate, fn, constraints) is not None


def test_one_key_constraints_and_a_namespace_conflict():
    # OwnedChoices of one-key addresses skip the leaf/namespace check; others still get it
    with pytest.raises(il.errors.AddressError, match="both as a value and as a namespace"):
        generate(mixed, (3,), OwnedChoices({("mu",): 1.0, ("mu", 1): 2.0}))
    result = generate(mixed, (0,), OwnedChoices({("k",): 3, ("split",): True}))
    assert result.trace["k"] == 3 and result.trace["split"] is True and result.n_used == 2


def test_a_tensor_read_with_a_string_is_still_lent():
    trace = mixed.simulate(0)
    u = trace["u"]
    u += 1.0                        # changed in place after the trace handed it out
    with pytest.raises(il.errors.TraceChangedError, match="'u'"):
        trace.update({"k": 2})


@pytest.mark.parametrize("dist", [il.beta(2.0, 2.0), il.beta(1.0, 3.5), il.beta(0.5, 2.0), il.beta(2, 3),
                                  il.beta(torch.tensor(2.0, dtype=F64), 3.0), il.bernoulli(0.3), il.bernoulli(0.0),
                                  il.bernoulli(1.0), il.bernoulli(torch.tensor(0.7)), il.uniform_discrete(1, 8),
                                  il.uniform_discrete(-3, -3)], ids=repr)
def test_sample_logpdf_is_sample_then_logpdf(dist):
    for seed in range(50):
        torch.manual_seed(seed)
        value, logpdf = dist._sample_logpdf()
        after = torch.rand(()).item()
        torch.manual_seed(seed)
        expected = dist.sample()
        assert torch.rand(()).item() == after           # the same numbers drawn
        assert type(value) is type(expected)
        assert (torch.equal(value, expected) if isinstance(value, torch.Tensor) else value == expected)
        assert logpdf is None or logpdf == dist.logpdf(expected)


def test_a_subclass_keeps_its_own_density_and_sampler():
    class Tilted(il.core.distributions.Beta):
        __slots__ = ()

        def logpdf(self, value):
            return -1.5

        def log_prob(self, value):
            return torch.tensor(-1.5, dtype=F64)

    class Fixed(il.core.distributions.Bernoulli):
        __slots__ = ()

        def sample(self):
            return True

    @il.gen
    def body():
        Tilted(2.0, 2.0) @ "t"
        Fixed(0.5) @ "f"
    trace = body.simulate()
    assert trace.choice_record("t").logpdf == -1.5 and trace["f"] is True


def test_a_fused_draw_with_no_finite_density_is_scored_as_any_value():
    class Odd(il.core.distributions.Distribution):
        name = "odd"
        __slots__ = ()

        def sample(self):
            return torch.tensor(0.5, dtype=F64)

        def log_prob(self, value):
            return torch.tensor(float("nan"), dtype=F64)

        def _sample_logpdf(self):
            return self.sample(), float("nan")

    @il.gen
    def body():
        Odd() @ "o"
    with pytest.raises(il.errors.DistributionError, match="log-density of odd.* at address 'o' is NaN"):
        body.simulate()
