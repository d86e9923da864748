"""Comprehension families (imcmc_lab.modeling.families): the lowered body makes the same trace.

``@gen`` recompiles ``[dist(args) @ ("name", j) for j in keys]`` into one family call whose
``update`` keeps unchanged elements in bulk. Every test here runs the lowered and the
unlowered (``@gen(lower=False)``) version of one program and asks for identical results:
addresses in order, values, log-densities, weights, discards, and errors.
"""

from __future__ import annotations

import linecache
import math
import random

import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples import mixture, per_point
from imcmc_lab.modeling.families import lower_families


def _both(fn):
    return il.gen(fn), il.gen(fn, lower=False)


def _close(a, b):
    """Scores and weights: a compact family's log-densities enter them as one sum, so they
    agree with the element-by-element run to rounding (values and each element's
    log-density are compared exactly)."""
    return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))


class _Score(float):
    __hash__ = float.__hash__

    def __eq__(self, other):
        return _close(float(self), float(other))


def _snapshot(trace):
    out = []
    for address, rec in trace.flat_records().items():
        value = rec.value
        if isinstance(value, torch.Tensor):
            value = tuple(value.reshape(-1).tolist())
        out.append((address, value, rec.logpdf))
    return out, _Score(trace.score), trace.retval if not isinstance(trace.retval, torch.Tensor) else trace.retval.tolist()


def _discard(discard):
    return sorted((str(a), str(v)) for a, v in discard.items())


def test_fig1_model_is_lowered_and_transforms_are_not_touched():
    assert mixture.gmm.lowered
    assert not il.gen(mixture.gmm.__wrapped__, lower=False).lowered
    assert mixture.gmm.__wrapped__.__code__ is not mixture.gmm.fn.__code__
    assert not mixture.split_merge_aux.lowered       # no comprehension family in it


def test_fig1_simulate_update_regenerate_assess_identical():
    lowered, plain = mixture.gmm, il.gen(mixture.gmm.__wrapped__, lower=False)
    rng = random.Random(1)
    for seed in range(30):
        given = {"k": rng.choice([1, 3, 9, 14, 20])}      # families below and above _BULK_FAMILY
        torch.manual_seed(seed)
        a = lowered.generate((15,), given)[0]
        torch.manual_seed(seed)
        b = plain.generate((15,), given)[0]
        assert _snapshot(a) == _snapshot(b)
        k = a["k"]
        new_k = max(1, k + rng.choice([-2, -1, 0, 1, 2]))
        constraints = {"k": new_k}
        for j in rng.sample(range(1, new_k + 1), min(new_k, rng.randint(0, 3))):
            constraints[("mu", j)] = rng.gauss(0, 5)
        for j in range(k + 1, new_k + 1):
            constraints[("mu", j)], constraints[("var", j)] = rng.gauss(0, 5), rng.uniform(0.5, 3)
        if new_k != k:
            constraints["weights"] = torch.full((new_k,), 1.0 / new_k, dtype=torch.float64)
        ta, wa, da = a.update(constraints)
        tb, wb, db = b.update(constraints)
        assert _snapshot(ta) == _snapshot(tb) and _close(wa, wb) and _discard(da) == _discard(db)
        selection = il.select(("mu", 1), ("var", min(2, new_k)))
        torch.manual_seed(seed)
        ra, rwa = ta.regenerate(selection)
        torch.manual_seed(seed)
        rb, rwb = tb.regenerate(selection)
        assert _snapshot(ra) == _snapshot(rb) and _close(rwa, rwb)
        choices = dict(ta.get_choices().items())
        assert lowered.assess((15,), choices) == plain.assess((15,), choices)


@il.gen
def _sub(scale):
    return il.normal(0.0, scale) @ "z"


def _hierarchical(n):
    scale = il.gamma(2.0, 1.0) @ "scale"
    xs = [il.normal(0.0, scale) @ ("x", i) for i in range(n)]        # arguments from a choice
    ys = [il.normal(1.0, 2.0) @ ("y", i) for i in ["a", "b", "c"]]   # string keys
    flags = [il.bernoulli(0.3) @ ("flag", i) for i in range(n)]       # discrete
    [_sub(2.0) @ ("sub", i) for i in range(2)]                        # sub-calls: not a family
    return sum(float(x) for x in xs) + sum(float(y) for y in ys) + sum(flags)


def test_family_whose_distribution_depends_on_a_changed_choice():
    lowered, plain = _both(_hierarchical)
    assert lowered.lowered
    for seed in range(10):
        torch.manual_seed(seed)
        a = lowered.simulate(10)
        torch.manual_seed(seed)
        b = plain.simulate(10)
        assert _snapshot(a) == _snapshot(b)
        for constraints in ({"scale": 0.5 + seed}, {("x", 2): 0.1, ("y", "b"): -1.0},
                            {("flag", 0): True, "scale": 3.0}, {}):
            ta, wa, da = a.update(constraints)
            tb, wb, db = b.update(constraints)
            assert _snapshot(ta) == _snapshot(tb) and _close(wa, wb) and _discard(da) == _discard(db)
        for n in (3, 8, 14):     # elements removed; new elements sampled
            torch.manual_seed(seed)
            ta, wa, da = a.update({}, args=(n,))
            torch.manual_seed(seed)
            tb, wb, db = b.update({}, args=(n,))
            assert _snapshot(ta) == _snapshot(tb) and _close(wa, wb) and _discard(da) == _discard(db)


def test_kept_value_outside_the_new_support_scores_minus_infinity_in_both():
    def model():
        lo = il.uniform(0.0, 1.0) @ "lo"
        return [il.uniform(lo, 2.0) @ ("u", i) for i in range(12)]

    lowered, plain = _both(model)
    torch.manual_seed(0)
    a = lowered.simulate()
    torch.manual_seed(0)
    b = plain.simulate()
    bump = max(float(a["u", i]) for i in range(12)) + 0.01
    ta, wa, _ = a.update({"lo": min(bump, 1.99)})
    tb, wb, _ = b.update({"lo": min(bump, 1.99)})
    assert wa == wb == -math.inf and _snapshot(ta) == _snapshot(tb)
    back_a, wa2, _ = ta.update({"lo": 0.0})      # records at -inf are re-scored, not reused
    back_b, wb2, _ = tb.update({"lo": 0.0})
    assert _close(wa2, wb2) and _snapshot(back_a) == _snapshot(back_b)


def _both_from_source(source, tmp_path):
    """The lowered and unlowered versions of ``model`` defined in ``source`` (from a real
    file: lowering needs the source; errors quote its lines)."""
    path = tmp_path / "model_src.py"
    path.write_text(source)
    namespace = {"il": il}
    exec(compile(source, str(path), "exec"), namespace)
    lowered, plain = _both(namespace["model"])
    assert lowered.lowered
    return lowered, plain


def _error_of(gen_fn):
    try:
        gen_fn.simulate()
    except Exception as exc:      # noqa: BLE001 - the test compares whatever is raised
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("body", [
    "[il.normal(0.0, 1.0) @ ('x', j) for j in [1, 2, 1]]",            # a repeated key
    "[il.normal(0.0, 1.0) @ ('x', j) for j in [1.5, 2]]",             # not an address key
    "[il.normal(0.0, -1.0) @ ('x', j) for j in range(3)]",            # invalid parameters
    "[il.normal(0.0, 1.0) @ ('k', j) for j in range(3)]",             # 'k' is a leaf already
])
def test_errors_are_the_same(body, tmp_path):
    source = f"def model():\n    k = il.poisson(2.0) @ 'k'\n    return {body}\n"
    lowered, plain = _both_from_source(source, tmp_path)
    torch.manual_seed(0)
    got_lowered = _error_of(lowered)
    torch.manual_seed(0)
    got_plain = _error_of(plain)
    assert got_lowered is not None and got_lowered == got_plain
    assert "line 3" in got_lowered[1] or got_lowered[0] is TypeError


def test_errors_in_update_are_the_same():
    def model(keys):
        return [il.normal(0.0, 1.0) @ ("x", j) for j in keys]

    lowered, plain = _both(model)
    torch.manual_seed(0)
    keys = list(range(1, 13))
    a = lowered.simulate(keys)
    torch.manual_seed(0)
    b = plain.simulate(keys)
    for keys in (keys + [2], keys[:5] + [2.5] + keys[5:], keys[::-1]):
        got = []
        for trace in (a, b):
            try:
                trace.update({}, args=(keys,))
                got.append(None)
            except Exception as exc:    # noqa: BLE001 - compare whatever is raised
                got.append((type(exc), str(exc)))
        assert got[0] == got[1]
        assert (got[0] is None) == (2.5 not in keys and len(set(keys)) == len(keys))


@pytest.mark.parametrize("later", [
    "il.normal(0.0, 1.0) @ 'x'",          # the family's namespace as a leaf
    "il.normal(0.0, 1.0) @ ('x', 0)",     # a duplicate of the first element
    "il.normal(0.0, 1.0) @ ('x', 11)",    # a duplicate of the last
])
def test_a_family_kept_whole_still_claims_its_addresses(later, tmp_path):
    source = (f"def model(again):\n    xs = [il.normal(0.0, 1.0) @ ('x', j) for j in range(12)]\n"
              f"    if again:\n        {later}\n    return xs\n")
    lowered, plain = _both_from_source(source, tmp_path)
    got = []
    for gen_fn in (lowered, plain):
        trace = gen_fn.simulate(False)
        with pytest.raises((il.AddressError, il.DuplicateAddressError)) as err:    # all kept: same keys
            trace.update({}, args=(True,))
        got.append((type(err.value), str(err.value)))
    assert got[0] == got[1]
    assert "line 4" in got[0][1] and ("line 2" in got[0][1] or "namespace" in got[0][1])


def test_only_invariant_patterns_are_lowered():
    calls = []

    def noisy_normal(mean, std):
        calls.append(1)
        return il.normal(mean, std)

    def model():
        a = [il.normal(j, 1.0) @ ("a", j) for j in range(3)]                     # args use j
        b = [il.normal(0.0, std=1.0) @ ("b", j) for j in range(3)]              # keyword
        c = [il.normal(0.0, 1.0) @ ("c", j) for j in range(6) if j % 2]         # filter
        d = [il.normal(0.0, 1.0) @ ("d", i, j) for i in range(2) for j in range(2)]
        e = [noisy_normal(0.0, 1.0) @ ("e", j) for j in range(4)]               # not ours: per key
        return a, b, c, d, e

    import ast
    import inspect
    import textwrap

    from imcmc_lab.modeling.families import lower_families_in_tree

    tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    # only the last: its constructor is checked at run time (and is not the engine's)
    assert lower_families_in_tree(tree, lambda: ast.Name(id="f", ctx=ast.Load())) == 1
    lowered, plain = _both(model)
    assert lowered.lowered
    torch.manual_seed(3)
    a = lowered.simulate()
    torch.manual_seed(3)
    b = plain.simulate()
    assert _snapshot(a) == _snapshot(b)
    assert len(calls) == 8           # noisy_normal ran once per key in both
    ta, wa, _ = a.update({("e", 2): 0.5, ("c", 3): 1.0})
    tb, wb, _ = b.update({("e", 2): 0.5, ("c", 3): 1.0})
    assert _snapshot(ta) == _snapshot(tb) and _close(wa, wb)


def test_closures_stay_live():
    def make():
        scale = 1.0

        @il.gen
        def model(n):
            return [il.normal(0.0, scale) @ ("x", j) for j in range(n)]

        def set_scale(value):
            nonlocal scale
            scale = value

        return model, set_scale

    model, set_scale = make()
    assert model.lowered
    set_scale(1e-9)
    torch.manual_seed(0)
    trace = model.simulate(3)
    assert all(abs(float(trace["x", j])) < 1e-6 for j in range(3))


def test_stale_source_is_not_lowered():
    filename = "<imcmc-lab-test-stale>"
    source = "def model():\n    return [normal(0.0, 1.0) @ ('x', j) for j in range(3)]\n"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"normal": il.normal}
    exec(compile(source, filename, "exec"), namespace)
    fn = namespace["model"]
    assert lower_families(fn) is not fn
    edited = source.replace("1.0", "2.0")        # the text changed after the code was compiled
    linecache.cache[filename] = (len(edited), None, edited.splitlines(True), filename)
    assert lower_families(fn) is fn
    del linecache.cache[filename]
    assert lower_families(fn) is fn             # no source at all


def test_the_bulk_path_is_exercised():
    from imcmc_lab.modeling import family_update
    assert family_update.BULK_FAMILY <= 9          # the tests above use families of 9 and more


def test_update_keeps_unchanged_elements_without_rescoring():
    trace, _ = mixture.gmm.generate((20,), {"k": 30})
    with il.count_work() as work:
        new, _, _ = trace.update({("mu", 7): 0.25})
    # "mu", 7 and the data (whose mixture depends on the means) are scored; nothing else
    assert work.logpdf_evaluations == 2
    assert new["mu", 8] is trace["mu", 8]


def test_gen_cell_is_lowered_and_errors_keep_cell_lines():
    from imcmc_lab.magics.compiler import compile_gen_cell
    body = ("def model(n):\n"
            "    k = poisson(2.0) @ 'k'\n"
            "    return [normal(0.0, 1.0) @ ('x', j) for j in [1, 1][:n]]\n")
    compiled = compile_gen_cell(body, "<cell-families>")
    namespace = {"__imcmc_lab__": il, "poisson": il.poisson, "normal": il.normal}
    exec(compiled.code, namespace)
    model = namespace["model"]
    assert model.lowered
    torch.manual_seed(0)
    trace = model.simulate(1)
    assert [a for a in trace.flat_records()] == [("k",), ("x", 1)]
    with pytest.raises(il.DuplicateAddressError, match="line 4"):
        model.simulate(2)      # the cell's line 4 (line 1 is %%gen)


def test_a_later_duplicate_of_a_kept_element_names_the_family_line():
    def model(again):
        xs = [il.normal(0.0, 1.0) @ ("x", j) for j in range(12)]
        if again:
            il.normal(0.0, 1.0) @ ("x", 9)
        return xs

    lowered, plain = _both(model)
    torch.manual_seed(0)
    a, b = lowered.simulate(False), plain.simulate(False)
    messages = []
    for trace in (a, b):
        with pytest.raises(il.DuplicateAddressError) as err:
            trace.update({("x", 0): 0.5}, args=(True,))
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    line = model.__code__.co_firstlineno + 1
    assert f"first at line {line}" in messages[0]


def test_an_empty_family_evaluates_nothing():
    def model(n):
        # a misspelled constructor: the comprehension never evaluates it when n == 0
        return [normall(0.0, 1.0) @ ("x", j) for j in range(n)]   # noqa: F821

    lowered, plain = _both(model)
    assert lowered.lowered
    assert lowered.simulate(0).retval == plain.simulate(0).retval == []
    for gen_fn in (lowered, plain):
        with pytest.raises(NameError):
            gen_fn.simulate(2)


def _windows(m):
    lo = il.uniform_discrete(0, 6) @ "lo"
    hi = il.uniform_discrete(lo + 8, lo + 20) @ "hi"
    loc = il.normal(0.0, 1.0) @ "loc"
    bound = il.uniform(0.0, 1.0) @ "bound"
    ws = [il.normal(loc, 1.0) @ ("w", j) for j in range(lo, hi)]        # a sliding window of keys
    us = [il.uniform(bound, 3.0) @ ("u", j) for j in range(hi - lo)]    # may leave the support
    zs = []
    for block in range(2):      # one line, one namespace, two families with different keys
        zs += [il.normal(0.0, 2.0) @ ("z", j) for j in range(block * m, (block + 1) * m)]
    return float(sum(ws)) + float(sum(us)) + float(sum(zs))


def test_chains_of_updates_through_remembered_families_are_identical():
    """Each update starts from the previous update's trace, whose families it remembers:
    windows sliding both ways, constrained elements, changed distributions, elements
    leaving the support and coming back, and a changed number of keys."""
    lowered, plain = _both(_windows)
    assert lowered.lowered
    rng = random.Random(7)
    torch.manual_seed(3)
    a = lowered.generate((9,), {"lo": 3, "hi": 20})[0]
    torch.manual_seed(3)
    b = plain.generate((9,), {"lo": 3, "hi": 20})[0]
    assert _snapshot(a) == _snapshot(b)
    for step in range(120):
        lo, hi = a["lo"], a["hi"]
        constraints, args = {}, None
        kind = rng.randrange(6)
        if kind == 0:
            new_lo = rng.randint(0, 6)
            constraints = {"lo": new_lo, "hi": rng.randint(new_lo + 8, new_lo + 20)}
        elif kind == 1:
            for j in rng.sample(range(lo, hi), 3):
                constraints[("w", j)] = rng.gauss(0.0, 1.0)
            constraints[("u", rng.randrange(hi - lo))] = rng.uniform(0.0, 3.0)
        elif kind == 2:
            constraints = {"loc": rng.gauss(0.0, 1.0)}
        elif kind == 3:
            constraints = {"bound": rng.choice([0.0, 0.5, 0.99, 2.9])}   # may put us at -inf
        elif kind == 4:
            args = (rng.choice([8, 9, 12]),)
        torch.manual_seed(step)
        ta, wa, da = a.update(constraints, args=args)
        torch.manual_seed(step)
        tb, wb, db = b.update(constraints, args=args)
        assert _snapshot(ta) == _snapshot(tb), step
        assert (_close(wa, wb)) and _discard(da) == _discard(db), step
        if ta.score > -math.inf or rng.random() < 0.5:     # walk on, sometimes through -inf
            a, b = ta, tb


@pytest.mark.usefixtures("compact_families_from_8")
def test_split_merge_chains_are_identical_lowered_and_unlowered():
    """Fig. 1's kernel on both versions of the model: the lowered one keeps its families
    (and the means' and variances' floats, which the mixture reads) from move to move."""
    plain = il.gen(mixture.gmm.__wrapped__, lower=False)
    data = mixture.synthetic_data(30, seed=2)
    torch.manual_seed(0)     # k = 16: the chain spends its first accepted moves at k >= 8
    a = mixture.gmm.generate((30,), {"x": data, "k": 16})[0]
    torch.manual_seed(0)
    b = plain.generate((30,), {"x": data, "k": 16})[0]
    kernel = il.InvolutiveKernel(mixture.split_merge_aux, (), mixture.split_merge)
    accepted = remembered = 0
    for step in range(150):
        torch.manual_seed(step)
        a, accepted_a = kernel(a)
        torch.manual_seed(step)
        b, accepted_b = kernel(b)
        assert accepted_a == accepted_b and _snapshot(a) == _snapshot(b), step
        accepted += accepted_a
        remembered += bool(a._compact) and accepted_a
    assert accepted >= 10 and remembered >= 5    # accepted moves, at k >= 8 (families held compact)


def test_family_values_know_their_floats_until_changed():
    from imcmc_lab.core.values import ScalarList

    def model(k):
        return [il.normal(0.0, 1.0) @ ("z", j) for j in range(k)]

    gen_fn = il.gen(model)
    trace = gen_fn.simulate(12)
    new, _, _ = trace.update({("z", 3): 0.5}, args=(14,))
    values = new.retval
    assert type(values) is ScalarList
    assert values.floats() == tuple(float(v) for v in values)     # from the old floats and the redone ones
    assert values.floats()[3] == 0.5
    values[0] = torch.tensor(9.0, dtype=torch.float64)
    assert values.floats() is None                               # a changed list forgets its floats
    assert type(gen_fn.simulate(3).retval) is list               # short families: plain lists
    grad = torch.tensor(0.25, dtype=torch.float64, requires_grad=True)
    tracked, _, _ = trace.update({("z", 5): grad})
    assert tracked.retval.floats() is None                       # a tracked value: no floats


@pytest.mark.parametrize("k", [3, 12, 40])
def test_mixture_from_family_lists_scores_like_stacked_tensors(k):
    from imcmc_lab.core.values import ScalarList

    torch.manual_seed(k)
    means = [torch.randn((), dtype=torch.float64) * 3 for _ in range(k)]
    variances = [torch.rand((), dtype=torch.float64) + 0.1 for _ in range(k)]
    weights = torch.distributions.Dirichlet(torch.ones(k, dtype=torch.float64)).sample()
    known = (ScalarList(means, lambda: tuple(map(float, means))),
             ScalarList(variances, lambda: tuple(map(float, variances))))
    stacked = il.mixture_of_normals(weights, torch.stack(means), torch.stack(variances))
    from_lists = il.mixture_of_normals(weights, *known)
    assert torch.equal(from_lists.means, stacked.means) and torch.equal(from_lists.variances, stacked.variances)
    assert from_lists.same_as(stacked)
    for x in (torch.tensor(0.3, dtype=torch.float64), torch.randn(50, dtype=torch.float64) * 4):
        assert torch.equal(from_lists.log_prob(x), stacked.log_prob(x))


def test_a_gen_cell_model_is_lowered():
    """The %%gen compiler lowers the Fig. 1 comprehensions too (on every supported Python:
    3.12 inlines comprehensions, so nothing may depend on ``<listcomp>`` code objects)."""
    from imcmc_lab.magics.compiler import compile_gen_cell
    from imcmc_lab.magics.rewrite import ENGINE_NAME

    body = ("def cell_gmm(n):\n"
            "    k ~ poisson_plus_one(1)\n"
            "    means = [{('mu', j)} ~ normal(0.0, 10.0) for j in range(1, k + 1)]\n"
            "    vars = [{('var', j)} ~ inv_gamma(1.0, 10.0) for j in range(1, k + 1)]\n"
            "    weights ~ dirichlet(torch.full((k,), 2.0))\n"
            "    xs ~ iid(mixture_of_normals(weights, means, vars), n)\n")
    cell = compile_gen_cell(body, "<gen-cell-lowering-test>")
    namespace = {ENGINE_NAME: il, "torch": torch, **{name: getattr(il, name) for name in
                 ("poisson_plus_one", "normal", "inv_gamma", "dirichlet", "iid", "mixture_of_normals")}}
    exec(cell.code, namespace)
    model = namespace["cell_gmm"]
    assert model.lowered
    torch.manual_seed(5)
    trace = model.simulate(12)
    plain = il.gen(model.__wrapped__, lower=False)
    assert _snapshot(plain.generate((12,), trace.get_choices())[0]) == _snapshot(trace)


def test_families_are_compact_from_64_elements_on():
    """A lowered family of 64 scalar choices or more is held as one record; fewer, one by one
    (below that, building the compact record costs more than it saves)."""
    for n, kinds in ((63, {"ChoiceRecord"}), (64, {"ChoiceRecord", "FamilyRecord"})):
        given = {**per_point.observations(mixture.synthetic_data(n, seed=1)), "k": 1, ("mu", 1): 0.3}
        trace = per_point.two_clusters_per_point.generate((n,), given)[0]
        assert {type(r).__name__ for r in trace._records.values()} == kinds, n
