"""Compiled transforms (``imcmc_lab.transform.compiled``): the generated code serves moves with
exactly the interpreter's results, and every per-move guard hands a move it cannot decide to
the interpreter (so errors are the interpreter's own, type and message).

Each chain runs twice from one seed, with ``f.compile`` on and off, and is compared move by
move: log alpha (every bit), the decision and the new trace's choices. A guard's test also
asserts that the move in question was *not* served by generated code (``hits`` unchanged):
with the guard removed it would be (and, for the error cases, the error would not be raised).
"""

from __future__ import annotations

import io
import contextlib

import pytest
import torch

import imcmc_lab as il
from imcmc_lab import continuous, copy, discrete, read, tcall, write
from imcmc_lab.examples import mixture as m
from imcmc_lab.inference.involutive import involutive_move


def _choices(trace):
    return {a: (v.numpy().tobytes() if isinstance(v, torch.Tensor) else v)
            for a, v in trace.get_choices().items()}


def _run(step, start, moves, seed):
    """``(log alpha hex, accepted, choices)`` per move of ``step(trace) -> record``."""
    torch.manual_seed(seed)
    trace, out = start, []
    for _ in range(moves):
        record = step(trace)
        trace = record.trace
        out.append((float(record.log_alpha).hex(), record.accepted, _choices(trace)))
    return out


def _both(transforms, step, start, moves, seed=0):
    """The chain with every transform's ``compile`` on, then off; both runs' moves."""
    runs = {}
    for flag in (True, False):
        for f in transforms:
            f.compile = flag
        runs[flag] = _run(step, start, moves, seed)
    for f in transforms:
        f.compile = True
    return runs[True], runs[False]


def _gmm_start(n=30, k=3, seed=3):
    torch.manual_seed(seed)
    data = m.synthetic_data(n, seed=seed)
    return m.gmm.generate((n,), {"x": data, "k": k})[0]


def test_the_mixture_cycle_is_the_same_move_by_move_and_served_by_generated_code():
    transforms = [m.split_merge, m.swap_last, m.birth_death, m.move_cluster, m.move_weights]
    hits = {f.name: f.compiled.hits for f in transforms}
    cycle = m.mixture_kernel()

    def step(trace):
        new, accepted = cycle(trace)
        return _Step(new, accepted, trace)

    compiled, interpreted = _both(transforms, step, _gmm_start(), 60, seed=5)
    assert compiled == interpreted
    for f in transforms:
        assert f.compiled.hits > hits[f.name], f"{f.name}: {f.compiled!r}"


class _Step:
    """A cycle step as a record: its log alpha is the new trace's score (every move's terms
    feed it), its decision whether the trace changed."""

    def __init__(self, new, accepted, old):
        self.trace, self.accepted, self.log_alpha = new, accepted, new.score


@pytest.mark.parametrize("n,K", [(30, 1), (100, 8)])
def test_split_merge_records_are_the_interpreters(n, K):
    start = _gmm_start(n, K, seed=n)
    records = {}
    for flag in (True, False):
        m.split_merge.compile = flag
        torch.manual_seed(1)
        trace, recs = start, []
        for _ in range(40):
            rec = involutive_move(trace, m.split_merge_aux, (), m.split_merge)
            recs.append(rec)
            trace = rec.trace
        records[flag] = recs
    m.split_merge.compile = True
    for a, b in zip(records[True], records[False]):
        assert float(a.log_alpha).hex() == float(b.log_alpha).hex() and a.accepted == b.accepted
        assert {k: float(v).hex() for k, v in a.terms.items()} == {k: float(v).hex() for k, v in b.terms.items()}
        assert a.read == b.read and a.written == b.written and a.copied == b.copied
        assert a.copied_implicitly == b.copied_implicitly
        assert float(a.jacobian.logabsdet).hex() == float(b.jacobian.logabsdet).hex()
        assert torch.equal(a.jacobian.reduced, b.jacobian.reduced)
    assert m.split_merge.compiled.hits > 0


# ---------------------------------------------------------------------------
# small programs for the guards
# ---------------------------------------------------------------------------
@il.gen
def flip_model():
    k = il.uniform_discrete(1, 3) @ "k"
    if k == 3:
        il.normal(0.0, 1.0) @ "e"
    il.normal(0.0, 1.0) @ "x"


@il.transform
def reflect(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    write(model_out["k"], 4 - k, discrete)
    x = read(model_in["x"], continuous)
    write(model_out["x"], -x, continuous)


def _trace(model, choices, args=()):
    return model.generate(args, choices)[0]


def _warm(f, trace, q=None, times=3):
    for _ in range(times):
        il.apply_transform(f, trace, None, q)
    assert f.compiled.keys >= 1, f.compiled


def _error(f, trace, q=None):
    try:
        il.apply_transform(f, trace, None, q)
    except Exception as exc:        # noqa: BLE001 (the error itself is compared)
        return type(exc), str(exc)
    return None


def _same_error_and_not_served(f, trace, q=None):
    hits = f.compiled.hits
    compiled = _error(f, trace, q)
    f.compile = False
    try:
        interpreted = _error(f, trace, q)
    finally:
        f.compile = True
    assert compiled == interpreted and compiled is not None
    assert f.compiled.hits == hits


def test_an_untouched_continuous_address_that_disappears_is_the_interpreters_lost_input():
    _warm(reflect, _trace(flip_model, {"k": 2, "x": 0.5}))
    # k = 3 -> 1: "e" (never read, written or copied) leaves the model: the discard check
    _same_error_and_not_served(reflect, _trace(flip_model, {"k": 3, "x": 0.5, "e": 0.1}))
    # k = 1 -> 3: "e" would be sampled from the prior: the update's fresh addresses
    _same_error_and_not_served(reflect, _trace(flip_model, {"k": 1, "x": 0.5}))


@il.gen
def kind_model(kind):
    if kind:
        il.uniform_discrete(0, 3) @ "x"
    else:
        il.normal(0.0, 1.0) @ "x"


@il.transform
def negate(model_in, aux_in, model_out, aux_out):
    x = read(model_in["x"], continuous)
    write(model_out["x"], -x, continuous)


def test_a_choice_whose_kind_changed_is_the_interpreters_label_error():
    _warm(negate, _trace(kind_model, {"x": 0.5}, (False,)))
    _same_error_and_not_served(negate, _trace(kind_model, {"x": 2}, (True,)))


@il.gen
def out_kind_model():
    k = il.uniform_discrete(1, 3) @ "k"
    if k == 3:
        il.normal(0.0, 1.0) @ "y"
    else:
        il.uniform_discrete(0, 3) @ "y"


@il.transform
def flip_k_negate_y(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    write(model_out["k"], 4 - k, discrete)         # (generic in k: one key for k = 1 and k = 2)
    y = read(model_in["y"], discrete)
    write(model_out["y"], 3 - y, discrete)


def test_the_output_label_check_is_the_interpreters():
    _warm(flip_k_negate_y, _trace(out_kind_model, {"k": 2, "y": 1}))
    # k = 1 -> 3: the new y is continuous, written as discrete: the interpreter's LabelError
    _same_error_and_not_served(flip_k_negate_y, _trace(out_kind_model, {"k": 1, "y": 1}))


SCALE = 2.0


@il.transform
def scaled(model_in, aux_in, model_out, aux_out):
    x = read(model_in["x"], continuous)
    write(model_out["x"], x * SCALE if x > 0.0 else x / SCALE, continuous)


@il.gen
def one_normal():
    il.normal(0.0, 1.0) @ "x"


def test_a_rebound_global_and_a_continuous_branch_follow_the_interpreter():
    global SCALE
    t = _trace(one_normal, {"x": 0.5})
    _warm(scaled, t)
    try:
        SCALE = 3.0     # the environment guard: a miss, then the interpreter
        hits = scaled.compiled.hits
        app = il.apply_transform(scaled, t)
        assert float(app.new_model["x"]) == 1.5 and scaled.compiled.hits == hits
    finally:
        SCALE = 2.0


@il.transform
def halve_or_double(model_in, aux_in, model_out, aux_out):
    x = read(model_in["x"], continuous)
    write(model_out["x"], x * 2.0 if x > 0.0 else x / 2.0, continuous)


def test_a_comparison_of_continuous_values_is_a_guard():
    _warm(halve_or_double, _trace(one_normal, {"x": 0.5}))
    hits = halve_or_double.compiled.hits
    neg = _trace(one_normal, {"x": -0.5})       # the other side of x > 0.0: not the baked branch
    assert float(il.apply_transform(halve_or_double, neg).new_model["x"]) == -0.25
    assert halve_or_double.compiled.hits == hits


@il.transform
def noisy(model_in, aux_in, model_out, aux_out):
    x = read(model_in["x"], continuous)
    print("moved")
    write(model_out["x"], -x, continuous)


def test_a_transform_that_prints_is_not_compiled_and_prints_once_a_move():
    t = _trace(one_normal, {"x": 0.5})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for _ in range(4):
            il.apply_transform(noisy, t)
    assert out.getvalue() == "moved\n" * 4
    assert noisy.compiled.keys == 0 and any("print" in r for r in noisy.compiled.refusals), noisy.compiled


@il.gen
def aux_extra(trace):
    il.normal(0.0, 1.0) @ "u"
    if trace["k"] == 3:
        il.normal(0.0, 1.0) @ "v"


@il.gen
def kx_model():
    il.uniform_discrete(1, 3) @ "k"
    il.normal(0.0, 1.0) @ "x"


@il.transform
def uses_u(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    write(model_out["k"], 4 - k, discrete)
    x = read(model_in["x"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["x"], u, continuous)
    write(aux_out["u"], x, continuous)


def test_an_auxiliary_choice_the_key_does_not_touch_is_the_interpreters_lost_input():
    t2 = _trace(kx_model, {"k": 2, "x": 0.5})
    for _ in range(3):
        il.involutive_move(t2, aux_extra, (), uses_u)
    assert uses_u.compiled.keys == 1
    t3 = _trace(kx_model, {"k": 3, "x": 0.5})      # "v" in the old aux trace only
    aux = aux_extra.simulate(t3)
    results = []
    for flag in (True, False):
        uses_u.compile = flag
        hits = uses_u.compiled.hits
        try:
            il.apply_transform(uses_u, t3, aux, aux_extra)
            results.append(None)
        except il.TransformError as exc:
            results.append(str(exc))
        assert uses_u.compiled.hits == hits
    uses_u.compile = True
    assert results[0] == results[1] and "neither read nor copied" in results[0]


@il.transform
def swap_halves(t_in, t_out):
    flag = read(t_in["flag"], discrete)
    write(t_out["flag"], not flag, discrete)
    tcall(to_a if flag else to_b)


@il.transform
def to_a(model_in, aux_in, model_out, aux_out):
    x = read(model_in["x"], continuous)
    write(model_out["x"], x + 1.0, continuous)


@il.transform
def to_b(model_in, aux_in, model_out, aux_out):
    x = read(model_in["x"], continuous)
    write(model_out["x"], x - 1.0, continuous)


@il.gen
def flag_model():
    il.bernoulli(0.5) @ "flag"
    il.normal(0.0, 2.0) @ "x"


def test_a_one_trace_transform_with_tcall_is_the_same_and_compiled():
    start = _trace(flag_model, {"flag": True, "x": 0.3})

    def step(trace):
        return involutive_move(trace, None, (), swap_halves)

    compiled, interpreted = _both([swap_halves], step, start, 30, seed=2)
    assert compiled == interpreted
    assert swap_halves.compiled.hits > 0 and swap_halves.compiled.keys == 2


def test_opting_out_and_checked_moves_run_the_interpreter():
    @il.transform(compile=False)
    def off(model_in, aux_in, model_out, aux_out):
        x = read(model_in["x"], continuous)
        write(model_out["x"], -x, continuous)

    t = _trace(one_normal, {"x": 0.5})
    for _ in range(4):
        il.involutive_move(t, None, (), off)
        il.involutive_move(t, None, (), negate_x, check=True)
    assert off.compile is False and off.compiled.hits == off.compiled.keys == 0
    assert negate_x.compiled.hits == 0 and negate_x.compiled.misses == 0
    assert "keys" in repr(off.compiled)


@il.transform
def negate_x(model_in, aux_in, model_out, aux_out):
    x = read(model_in["x"], continuous)
    write(model_out["x"], -x, continuous)


def test_a_transform_with_a_cache_pickles_and_its_copy_compiles_on_its_own():
    import pickle

    t = _trace(one_normal, {"x": 0.5})
    _warm(negate_x, t)
    copy_ = pickle.loads(pickle.dumps(negate_x))
    assert copy_ is negate_x or copy_.compiled.keys == 0


def test_a_checked_hit_that_disagrees_drops_the_keys_and_gives_the_interpreters_result():
    t = _trace(one_normal, {"x": 0.5})

    @il.transform
    def flip(model_in, aux_in, model_out, aux_out):
        x = read(model_in["x"], continuous)
        write(model_out["x"], -x, continuous)

    _warm(flip, t)
    cache = flip._compiled_cache
    fn, keys, env = cache.serving

    def wrong(mf, af):      # a stand-in for a tracer bug: log |det J| off by one
        out = fn(mf, af)
        return out[:2] + (out[2] + 1.0,) + out[3:]

    cache.serving, cache.checked = (wrong, keys, env), {}
    app = il.apply_transform(flip, t)
    assert app.logabsdet == 0.0 and float(app.new_model["x"]) == -0.5
    assert cache.serving[0] is None and "disagreed" in flip.compiled.refusals[-1]
