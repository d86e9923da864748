"""The compiled transform path against the interpreter, adversarially.

A transform is traced once per branch key into generated Python that serves involutive
moves (``f.compile``, default True; used only with ``check=False`` and
``autodiff="auto"``). It must be bit-identical to the interpreter and must never change an
error or a record a user sees. Each case below runs the same seeded chain twice -- every
transform with ``compile = False``, then with ``compile = True`` (fresh transform objects
each time) -- and compares every move: the accept decision, ``log alpha`` and each of its
terms, the new traces' choices and scores, what was read, written and copied (with their
lines), the Jacobian record, the transform's printed output, and for a move that raises,
the exception's type and message. Keys are compiled on a later visit than the first, so
chains run several dozen moves, and the environment a transform depends on (globals,
closures, defaults, module attributes, mutable containers, tensors) is changed between
moves after its keys were compiled.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import math
import operator
import os
import random
import re
import types

import pytest
import torch

import imcmc_lab as il
from imcmc_lab import continuous, copy, discrete, read, tcall, write
from imcmc_lab.examples import mixture
from imcmc_lab.inference.involutive import involutive_move
from imcmc_lab.transform.interpreter import _where

STEPS = 40


# ---------------------------------------------------------------------------
# the harness
# ---------------------------------------------------------------------------
def bits(v):
    """An exact, comparable picture of a value: dtype, shape and every byte of a tensor,
    float.hex of a float (the sign of zero included), the type of everything else."""
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        return ("T", str(t.dtype), tuple(t.shape), t.numpy().tobytes())
    if isinstance(v, float):
        return ("f", v.hex())
    if isinstance(v, (bool, int, str, type(None))):
        return (type(v).__name__, v)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(bits(x) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple((k, bits(x)) for k, x in v.items())
    return (type(v).__name__, repr(v))


def trace_picture(trace):
    if trace is None:
        return None
    flat = trace.flat_records()
    return (bits(float(trace.score)),
            tuple((a, bits(r.value), repr(r.dist), bits(float(r.logpdf))) for a, r in flat.items()))


def jacobian_picture(jac, deep):
    if jac is None:
        return None
    pic = {"logabsdet": bits(float(jac.logabsdet)), "problem": jac.problem}
    if deep:
        pic.update(
            rows=[c.label() for c in jac.rows], cols=[c.label() for c in jac.cols],
            reduced=bits(jac.reduced), blocks=repr(jac.blocks),
            inputs=[c.label() for c in jac.inputs], outputs=[c.label() for c in jac.outputs],
            eliminated=[(a.label(), b.label(), kind) for a, b, kind in jac.eliminated],
            full_size=jac.full_size, reduced_size=jac.reduced_size, dense=bits(jac.dense()))
    return pic


def record_picture(record, deep=False):
    """Everything a user (or a widget) reads from a MoveRecord, as comparable data."""
    app = record.application
    run = app.run
    pic = {
        "accepted": record.accepted,
        "log_alpha": bits(float(record.log_alpha)),
        "terms": {k: bits(float(v)) for k, v in record.terms.items()},
        "log_q_old": bits(float(record.log_q_old)),
        "check_failure": record.check_failure,
        "model_out": trace_picture(record.model_out),
        "aux_out": trace_picture(record.aux_out),
        "read": record.read, "written": record.written, "copied": record.copied,
        "copied_implicitly": record.copied_implicitly,
        "reads": [(k, repr(r.label), bits(r.value), _where(r.line)) for k, r in run.reads.items()],
        "writes": [(k, repr(w.label), bits(w.value), _where(w.line)) for k, w in run.writes.items()],
        "copies": [((c.src_side, c.src_address), (c.dst_side, c.dst_address), bits(c.value),
                    c.is_discrete, _where(c.line)) for c in run.copies],
        "retval": bits(run.retval),
        "problem": app.problem,
        "discard": None if app.discard is None else [(a, bits(v)) for a, v in app.discard.items()],
        "jacobian": jacobian_picture(app.jacobian, deep),
    }
    if deep:
        pic["acceptance_probability"] = bits(record.acceptance_probability)
        pic["repr"] = repr(record)
    return pic


class Kernels:
    """What a chain runs: ``moves`` is a list of ``(q, q_args, f)`` cycled move by move;
    ``transforms`` every transform object built (their ``compile`` is set by the harness)."""

    def __init__(self, trace, moves, transforms=None):
        self.trace, self.moves = trace, moves
        self.transforms = transforms if transforms is not None else [f for _, _, f in moves]


def run_chain(build, steps=STEPS, compile=True, seed=0, before=None, deep=False, check=False):
    """Run the chain ``build()`` describes; return ``(pictures, final trace picture, kernels)``.
    ``before(i, trace) -> trace`` runs before move ``i`` (environment changes, trace edits)."""
    torch.manual_seed(seed)
    random.seed(seed)
    k = build()
    for f in k.transforms:
        f.compile = compile
    torch.manual_seed(seed + 1)
    trace, pictures = k.trace, []
    for i in range(steps):
        if before is not None:
            trace = before(i, trace)
        q, q_args, f = k.moves[i % len(k.moves)]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                record = involutive_move(trace, q, q_args, f, check=check)
        except Exception as exc:       # noqa: BLE001 -- compared, type and message
            pictures.append(("raised", type(exc).__name__, str(exc), out.getvalue()))
            continue
        try:
            picture = record_picture(record, deep)
        except Exception as exc:       # noqa: BLE001 -- reading a record must not raise either
            picture = {"record raised": f"{type(exc).__name__}: {exc}",
                       "model_out": trace_picture(record.model_out), "log_alpha": bits(float(record.log_alpha))}
        pictures.append(("move", picture, out.getvalue()))
        trace = record.trace
    fallbacks = [(f.name, f.torch_fallbacks, f.last_fallback) for f in k.transforms]
    return pictures, (trace_picture(trace), fallbacks), k


def first_difference(a, b):
    if type(a) is not type(b):
        return f"{a!r} != {b!r}"
    if isinstance(a, dict):
        for key in list(a) + [x for x in b if x not in a]:
            if a.get(key) != b.get(key):
                return f"[{key!r}] " + first_difference(a.get(key), b.get(key))
    if isinstance(a, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"[{i}] " + first_difference(x, y)
    return f"{a!r}\n   !=\n{b!r}"


def same_chain(build, steps=STEPS, seed=0, before=None, deep=False, min_hits=0, check=False):
    """Interpreted vs compiled, move by move; returns the compiled run's Kernels."""
    ref, ref_final, _ = run_chain(build, steps, False, seed, before, deep, check)
    got, got_final, k = run_chain(build, steps, True, seed, before, deep, check)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"move {i} differs (interpreted vs compiled): {first_difference(a, b)}"
    assert ref_final == got_final, f"final state differs: {first_difference(ref_final, got_final)}"
    if os.environ.get("ADV_DEBUG"):      # what each case exercised: moves, errors, compile reports
        print("OUTCOMES", outcomes(ref), [p[1:3] for p in ref if p[0] == "raised"][:1],
              [f.compiled for f in k.transforms])
    if min_hits:
        hits = sum(f.compiled.hits for f in k.transforms)
        assert hits >= min_hits, (f"only {hits} moves served by generated code "
                                  f"(refusals: {[f.compiled.refusals for f in k.transforms]})")
    return ref, k


def n_keys(report):
    """``report.keys``: the keys compiled (a count, or a collection of them)."""
    return report.keys if isinstance(report.keys, int) else len(report.keys)


def outcomes(pictures):
    """How many moves were accepted, rejected, raised (a case must exercise what it claims)."""
    acc = sum(1 for p in pictures if p[0] == "move" and p[1]["accepted"])
    rej = sum(1 for p in pictures if p[0] == "move" and not p[1]["accepted"])
    return acc, rej, sum(1 for p in pictures if p[0] == "raised")


# ---------------------------------------------------------------------------
# a small split/merge: k in 1..3, ("mu", j) for j <= k, an untouched "scale"
# ---------------------------------------------------------------------------
KMAX = 3


@il.gen
def small():
    k = il.uniform_discrete(1, KMAX) @ "k"
    for j in range(1, k + 1):
        il.normal(0.0, 3.0) @ ("mu", j)
    il.gamma(2.0, 1.0) @ "scale"


@il.gen
def small_aux(trace):
    k = trace["k"]
    split = True if k == 1 else (False if k == KMAX else il.bernoulli(0.5) @ "split")
    if split:
        il.normal(0.0, 1.0) @ "u"


def split_merge_with(spread, unspread=None):
    """Split ("mu", k) into k, k + 1 at distance ``spread(u, mu)``; merge the last two.
    ``spread`` is where each case puts the code that depends on its environment."""
    unspread = unspread or (lambda d, mu: d)

    def body(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        split = True if k == 1 else (False if k == KMAX else read(aux_in["split"], discrete))
        if split:
            write(model_out["k"], k + 1, discrete)
            if k + 1 == 2:
                write(aux_out["split"], False, discrete)
            mu = read(model_in["mu", k], continuous)
            u = read(aux_in["u"], continuous)
            d = spread(u, mu)
            write(model_out["mu", k], mu - d, continuous)
            write(model_out["mu", k + 1], mu + d, continuous)
        else:
            write(model_out["k"], k - 1, discrete)
            if k - 1 == 2:
                write(aux_out["split"], True, discrete)
            mu1 = read(model_in["mu", k - 1], continuous)
            mu2 = read(model_in["mu", k], continuous)
            write(model_out["mu", k - 1], (mu1 + mu2) / 2, continuous)
            write(aux_out["u"], unspread((mu2 - mu1) / 2, (mu1 + mu2) / 2), continuous)

    return body


def small_chain(*bodies, k=1):
    """A build function: the small model at ``k``, the given transform bodies cycled."""
    def build():
        trace, _ = small.generate((), {"k": k})
        fs = [il.transform(b) for b in bodies]
        return Kernels(trace, [(small_aux, (), f) for f in fs])
    return build


def test_the_harness_sees_differences():
    """Two chains that differ in one constant differ: the comparison is not vacuous."""
    pictures = []
    for c in (1.0, 1.0 + 2 ** -40):
        pictures.append(run_chain(small_chain(split_merge_with(lambda u, mu, c=c: u * c)), 10, False)[0])
    assert pictures[0] != pictures[1]
    assert run_chain(small_chain(split_merge_with(lambda u, mu: u)), 10, False)[0] == \
        run_chain(small_chain(split_merge_with(lambda u, mu: u)), 10, False)[0]


# ---------------------------------------------------------------------------
# the contract itself, and that the compiled path is really used
# ---------------------------------------------------------------------------
def test_contract_names():
    def body(model_in, aux_in, model_out, aux_out):
        pass

    assert il.transform(body).compile is True
    assert il.transform(body, compile=False).compile is False
    assert il.transform(compile=False)(body).compile is False
    f = il.transform(body)
    f.compile = False
    assert f.compile is False
    report = f.compiled
    assert n_keys(report) == 0 and report.hits == 0 and report.misses == 0
    assert isinstance(report.refusals, list)


def test_fig1_split_merge_is_compiled_and_identical():
    data = mixture.synthetic_data(60, seed=3)

    def build():
        f = il.transform(mixture.split_merge.fn, name="split_merge")
        return Kernels(mixture.initial_trace(data, k=3), [(mixture.split_merge_aux, (), f)])

    pictures, k = same_chain(build, steps=80, min_hits=30)
    acc, rej, raised = outcomes(pictures)
    assert acc > 0 and rej > 0 and raised == 0
    assert n_keys(k.transforms[0].compiled) >= 2


def test_fig1_cycle_of_all_moves_is_identical():
    """swap_last (fancy indexing), birth_death (range(k) copies), move_cluster, move_weights
    (torch.exp, .sum()), split_merge, in a cycle, with the records' deep fields."""
    data = mixture.synthetic_data(40, seed=5)

    def build():
        fs = {name: il.transform(getattr(mixture, name).fn, name=name)
              for name in ("swap_last", "split_merge", "birth_death", "move_cluster", "move_weights")}
        moves = [(mixture.swap_aux, (), fs["swap_last"]),
                 (mixture.split_merge_aux, (), fs["split_merge"]),
                 (mixture.birth_death_aux, (), fs["birth_death"]),
                 (mixture.move_cluster_aux, (0.5, 0.3), fs["move_cluster"]),
                 (mixture.move_weights_aux, (0.3,), fs["move_weights"])]
        return Kernels(mixture.initial_trace(data, k=2), moves)

    pictures, k = same_chain(build, steps=150, deep=True, min_hits=40)
    assert outcomes(pictures)[0] > 0


def test_compiled_path_not_used_with_check_or_torch_autodiff():
    def build():
        trace, _ = small.generate((), {"k": 1})
        f = il.transform(split_merge_with(lambda u, mu: u))
        return Kernels(trace, [(small_aux, (), f)])

    _, k = same_chain(build, check=True)
    assert k.transforms[0].compiled.hits == 0

    def build_torch():
        trace, _ = small.generate((), {"k": 1})
        f = il.transform(split_merge_with(lambda u, mu: u), autodiff="torch")
        return Kernels(trace, [(small_aux, (), f)])

    _, k = same_chain(build_torch)
    assert k.transforms[0].compiled.hits == 0


def test_switching_compile_and_autodiff_between_moves():
    """``f.compile = False`` and ``f.autodiff = "torch"`` set mid-chain take effect at once."""
    def build():
        trace, _ = small.generate((), {"k": 1})
        f = il.transform(split_merge_with(lambda u, mu: u * torch.exp(mu / 10)))
        return Kernels(trace, [(small_aux, (), f)])

    holder = {}

    def build_keep():
        holder["k"] = build()
        return holder["k"]

    def before(i, trace):
        f = holder["k"].transforms[0]
        if i == 20:
            f.autodiff = "torch"
        if i == 30:
            f.autodiff = "auto"
        return trace

    ref, _, _ = run_chain(build_keep, 45, False, before=before)
    got, _, k = run_chain(build_keep, 45, True, before=before)
    assert ref == got
    f = k.transforms[0]
    hits = f.compiled.hits
    f.compile = False
    torch.manual_seed(0)
    trace = k.trace
    for _ in range(5):
        trace = involutive_move(trace, small_aux, (), f).trace
    assert f.compiled.hits == hits


# ---------------------------------------------------------------------------
# the environment changes between moves, after the keys were compiled
# ---------------------------------------------------------------------------
def helper(u, mu):
    return u


def test_global_helper_function_rebound():
    """A notebook cell redefines the helper the transform calls."""
    global helper
    original = helper

    def body(model_in, aux_in, model_out, aux_out):
        return split_merge_with(lambda u, mu: helper(u, mu))(model_in, aux_in, model_out, aux_out)

    def before(i, trace):
        global helper
        if i == 0:
            helper = original
        if i == 20:
            def helper(u, mu):          # noqa: F811 -- the redefinition is the point
                return 2.0 * u
        return trace

    try:
        same_chain(small_chain(body), before=before, min_hits=3)
    finally:
        helper = original


def direct_helper(u):
    return u


def _direct_body(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    split = True if k == 1 else (False if k == KMAX else read(aux_in["split"], discrete))
    if split:
        write(model_out["k"], k + 1, discrete)
        if k + 1 == 2:
            write(aux_out["split"], False, discrete)
        mu = read(model_in["mu", k], continuous)
        d = direct_helper(read(aux_in["u"], continuous)) * SCALE_C
        write(model_out["mu", k], mu - d, continuous)
        write(model_out["mu", k + 1], mu + d, continuous)
    else:
        write(model_out["k"], k - 1, discrete)
        if k - 1 == 2:
            write(aux_out["split"], True, discrete)
        mu1 = read(model_in["mu", k - 1], continuous)
        mu2 = read(model_in["mu", k], continuous)
        write(model_out["mu", k - 1], (mu1 + mu2) / 2, continuous)
        write(aux_out["u"], (mu2 - mu1) / 2 / SCALE_C, continuous)


SCALE_C = 1.0


def test_global_helper_called_directly_from_the_transform_rebound():
    global direct_helper
    original = direct_helper

    def before(i, trace):
        global direct_helper
        direct_helper = original if i < 20 else (lambda u: u * 3.0)
        return trace

    try:
        same_chain(small_chain(_direct_body), before=before, min_hits=3)
    finally:
        direct_helper = original


def test_global_float_constant_rebound():
    global SCALE_C

    def before(i, trace):
        global SCALE_C
        SCALE_C = 1.0 if i < 20 else 0.25
        return trace

    try:
        same_chain(small_chain(_direct_body), before=before, min_hits=3)
    finally:
        SCALE_C = 1.0


G = torch.tensor(1.5, dtype=torch.float64)


def test_global_tensor_changed_in_place():
    def before(i, trace):
        if i == 0:
            G.fill_(1.5)
        if i in (15, 25):
            G.mul_(2)
        return trace

    try:
        same_chain(small_chain(split_merge_with(lambda u, mu: u * G)), before=before)
    finally:
        G.fill_(1.5)


def test_global_tensor_rebound():
    global G
    original = G

    def before(i, trace):
        global G
        G = original if i < 20 else torch.tensor(0.75, dtype=torch.float64)
        return trace

    try:
        same_chain(small_chain(split_merge_with(lambda u, mu: u * G)), before=before)
    finally:
        G = original


def test_closure_variable_rebound_with_nonlocal():
    factor = 1.0

    def set_factor(v):
        nonlocal factor
        factor = v

    def before(i, trace):
        set_factor(1.0 if i < 20 else 4.0)
        return trace

    same_chain(small_chain(split_merge_with(lambda u, mu: u * factor)), before=before, min_hits=3)


def test_default_argument_changed():
    def spread(u, mu, c=1.0):
        return u * c

    def before(i, trace):
        spread.__defaults__ = (1.0,) if i < 20 else (3.0,)
        return trace

    same_chain(small_chain(split_merge_with(lambda u, mu: spread(u, mu))), before=before, min_hits=3)


def test_function_code_replaced():
    """``helper.__code__`` swapped (what some reloaders do) keeps the function object."""
    def spread(u, mu):
        return u

    def other(u, mu):
        return u * 5.0

    code = spread.__code__

    def before(i, trace):
        spread.__code__ = code if i < 20 else other.__code__
        return trace

    same_chain(small_chain(split_merge_with(lambda u, mu: spread(u, mu))), before=before, min_hits=3)


def test_module_attribute_replaced():
    lib = types.ModuleType("userlib")
    first, second = (lambda u: u), (lambda u: -u * 0.5)
    lib.spread = first

    def before(i, trace):
        lib.spread = first if i < 20 else second
        return trace

    same_chain(small_chain(split_merge_with(lambda u, mu: lib.spread(u))), before=before, min_hits=3)


def test_global_list_and_dict_mutated():
    coefficients = [1.0]
    table = {"c": 2.0}

    def before(i, trace):
        coefficients[0] = 1.0 if i < 20 else 7.0
        table["c"] = 2.0 if i < 25 else 0.5
        return trace

    same_chain(small_chain(split_merge_with(lambda u, mu: u * coefficients[0] * table["c"])),
               before=before)


def test_transform_object_fn_replaced():
    """``f.fn`` reassigned on the same Transform object."""
    holder = {}

    def build():
        trace, _ = small.generate((), {"k": 1})
        f = il.transform(split_merge_with(lambda u, mu: u))
        holder["f"] = f
        return Kernels(trace, [(small_aux, (), f)])

    def before(i, trace):
        if i == 20:
            holder["f"].fn = split_merge_with(lambda u, mu: 2.0 * u)
        return trace

    same_chain(build, before=before)


# ---------------------------------------------------------------------------
# side effects and non-determinism inside the transform
# ---------------------------------------------------------------------------
def test_print_inside_the_transform_prints_on_every_move():
    def spread(u, mu):
        print("spread", float(u) > 0)
        return u

    pictures, _ = same_chain(small_chain(split_merge_with(spread)))
    printed = [p[-1] for p in pictures if p[0] == "move" and "spread" in p[-1]]
    assert len(printed) > 10


def test_global_side_effect_counter():
    calls = []

    def spread(u, mu):
        calls.append(1)
        return u

    def before(i, trace):
        if i == 0:
            calls.clear()
        return trace

    ref, _, _ = run_chain(small_chain(split_merge_with(spread)), compile=False, before=before)
    n_ref = len(calls)
    got, _, _ = run_chain(small_chain(split_merge_with(spread)), compile=True, before=before)
    assert ref == got
    assert len(calls) == n_ref


def test_python_random_inside_the_transform():
    """A (broken) transform using random numbers: the interpreter draws on every move."""
    same_chain(small_chain(split_merge_with(lambda u, mu: u * (1.0 + random.random()))))


def test_torch_random_inside_the_transform():
    same_chain(small_chain(split_merge_with(lambda u, mu: u * (1.0 + float(torch.rand(()))))))


# ---------------------------------------------------------------------------
# continuous control flow
# ---------------------------------------------------------------------------
def test_if_on_a_read_value():
    def spread(u, mu):
        if u > 0.5:
            return u * 2.0
        return u / 2.0

    pictures, _ = same_chain(small_chain(split_merge_with(spread)))


def test_max_min_abs_of_traced_values():
    same_chain(small_chain(split_merge_with(lambda u, mu: max(u, mu) - min(u, 0.1 * mu) + abs(u))))


def test_comparison_of_two_reads_that_flips():
    def spread(u, mu):
        return u * 2.0 if mu > u else u - 0.5

    same_chain(small_chain(split_merge_with(spread)), steps=60)


def test_float_and_int_of_traced_values():
    """``float(u)`` (the value without its derivative) in a branch; ``int(mu)`` as a count."""
    def spread(u, mu):
        if float(u) > 0.0:
            return u * (1 + int(abs(float(mu))) % 3)
        return u

    same_chain(small_chain(split_merge_with(spread)))


def test_item_and_bool_of_traced_values():
    def spread(u, mu):
        return u * 2.0 if bool(u) and u.item() < 1.0 else u

    same_chain(small_chain(split_merge_with(spread)))


# ---------------------------------------------------------------------------
# discrete values used in Python ways
# ---------------------------------------------------------------------------
DISCRETE_SCALES = {1: 2.0, 3: 0.5}


def _sm_discrete(scale_of_k):
    """small split/merge whose spread depends on the discrete k through ``scale_of_k(k)``."""
    def body(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        split = True if k == 1 else (False if k == KMAX else read(aux_in["split"], discrete))
        if split:
            write(model_out["k"], k + 1, discrete)
            if k + 1 == 2:
                write(aux_out["split"], False, discrete)
            mu = read(model_in["mu", k], continuous)
            d = read(aux_in["u"], continuous) * scale_of_k(k)
            write(model_out["mu", k], mu - d, continuous)
            write(model_out["mu", k + 1], mu + d, continuous)
        else:
            write(model_out["k"], k - 1, discrete)
            if k - 1 == 2:
                write(aux_out["split"], True, discrete)
            mu1 = read(model_in["mu", k - 1], continuous)
            mu2 = read(model_in["mu", k], continuous)
            write(model_out["mu", k - 1], (mu1 + mu2) / 2, continuous)
            write(aux_out["u"], (mu2 - mu1) / (2 * scale_of_k(k - 1)), continuous)
    return body


@pytest.mark.parametrize("name, scale_of_k", [
    ("dict.get (a miss calls no __eq__)", lambda k: DISCRETE_SCALES.get(k, 1.0)),
    ("set membership (hash only)", lambda k: 2.0 if k in {2, 3} else 1.0),
    ("isinstance", lambda k: 2.0 if isinstance(k, int) and k > 1 else 1.0),
    ("modulo", lambda k: 1.0 + k % 2),
    ("floor division", lambda k: 1.0 + k // 2),
    ("true division", lambda k: 1.0 + k / 4),
    ("float()", lambda k: float(k)),
    ("power", lambda k: 1.5 ** k),
    ("str/f-string", lambda k: 1.0 + len(f"{k}{'x' * k}") / 10),
    ("math.log", lambda k: 1.0 + math.log(k)),
    ("bit operations", lambda k: 1.0 + (k ^ 1) + (k & 2)),
    ("tensor of k", lambda k: torch.tensor(float(k), dtype=torch.float64).sqrt()),
    ("list index of k", lambda k: [0.5, 1.0, 2.0, 4.0][k]),
    ("tuple index and negative", lambda k: (0.5, 1.0, 2.0, 4.0)[-k]),
])
def test_discrete_value_used_in_python(name, scale_of_k):
    same_chain(small_chain(_sm_discrete(scale_of_k)), steps=30)


def test_discrete_times_continuous():
    """``u * k`` and ``k * u``: a discrete value in a continuous formula."""
    same_chain(small_chain(_sm_discrete(lambda k: k), split_merge_with(lambda u, mu: u * 1.0)), steps=30)


def test_try_except_around_an_operation_the_tracer_may_not_model():
    """A transform's own try/except must take the same branch as the interpreter's."""
    def scale_of_k(k):
        try:
            return 1.0 + k % 2
        except TypeError:
            return 10.0

    same_chain(small_chain(_sm_discrete(scale_of_k)), steps=30)


def test_try_except_exception_around_continuous_ops():
    def spread(u, mu):
        try:
            return u * (1 + round(float(mu)) % 2)
        except Exception:       # noqa: BLE001 -- what a user writes
            return u * 3.0

    same_chain(small_chain(split_merge_with(spread)))


def test_try_except_attribute_error_on_traced_values():
    def spread(u, mu):
        try:
            return u * mu.abs().exp() / mu.abs().exp()
        except AttributeError:
            return u * 3.0

    same_chain(small_chain(split_merge_with(spread)))


def test_users_own_value_error_propagates_identically():
    def spread(u, mu):
        if u > 1.2:
            raise ValueError(f"u too large: {float(u):.3f}")
        return u

    pictures, _ = same_chain(small_chain(split_merge_with(spread)), steps=60)
    assert outcomes(pictures)[2] > 0


def test_transform_reads_the_input_trace_object():
    """``model_in.trace`` bypasses read(): a discrete fact taken from it must still be right."""
    def body(model_in, aux_in, model_out, aux_out):
        scale = 2.0 if model_in.trace["k"] == 2 else 1.0
        return _sm_discrete(lambda k: scale)(model_in, aux_in, model_out, aux_out)

    same_chain(small_chain(body), steps=30)


def test_exists_inside_the_transform():
    def body(model_in, aux_in, model_out, aux_out):
        scale = 2.0 if il.exists(model_in["mu", 2]) else 1.0
        return _sm_discrete(lambda k: scale)(model_in, aux_in, model_out, aux_out)

    same_chain(small_chain(body), steps=30)


# ---------------------------------------------------------------------------
# discrete structure that the branch key does not see
# ---------------------------------------------------------------------------
@il.gen
def gated():
    """``extra`` exists when ``m`` and k == 2; ``m`` is untouched by the transform."""
    m = il.bernoulli(0.5) @ "m"
    k = il.uniform_discrete(1, 2) @ "k"
    il.normal(0.0, 1.0) @ "a"
    if m and k == 2:
        il.normal(0.0, 1.0) @ "extra"


@il.gen
def gated_aux(trace):
    il.normal(0.0, 1.0) @ "u"


@il.transform
def _flip_k_shift_a(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    write(model_out["k"], 3 - k, discrete)
    a = read(model_in["a"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["a"], a + u, continuous)
    write(aux_out["u"], -u, continuous)


def flip_m_every(period, extra=None):
    def before(i, trace):
        if i % period == period - 1:
            m = not trace["m"]
            cons = {"m": m}
            if m and trace["k"] == 2:
                cons["extra"] = 0.25 if extra is None else extra
            trace, _, _ = trace.update(cons)
        return trace
    return before


def test_new_address_needed_only_for_some_untouched_values():
    """With m, k = 1 -> 2 needs ``extra``, which the transform does not write."""
    def build():
        trace, _ = gated.generate((), {"m": False, "k": 1})
        f = il.transform(_flip_k_shift_a.fn)
        return Kernels(trace, [(gated_aux, (), f)])

    pictures, _ = same_chain(build, steps=60, before=flip_m_every(13))
    assert outcomes(pictures)[2] > 0 and outcomes(pictures)[0] > 0


def _to_k1_shift_a(model_in, aux_in, model_out, aux_out):
    read(model_in["k"], discrete)
    write(model_out["k"], 1, discrete)
    a = read(model_in["a"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["a"], a + u, continuous)
    write(aux_out["u"], -u, continuous)


def test_untouched_continuous_address_disappears_after_compiling():
    """With m, k = 2 -> 1 drops ``extra`` unread: the lost-input error, also on keys
    compiled while m was False (the hook sets k = 2 every fourth move)."""
    def build():
        trace, _ = gated.generate((), {"m": False, "k": 2})
        return Kernels(trace, [(gated_aux, (), il.transform(_to_k1_shift_a))])

    def before(i, trace):
        cons = {}
        m = trace["m"]
        if i % 13 == 12:
            m = cons["m"] = not m
        if i % 4 == 3:
            cons["k"] = 2
        if cons:
            if m and cons.get("k", trace["k"]) == 2 and "extra" not in trace:
                cons["extra"] = 0.25
            trace, _, _ = trace.update(cons)
        return trace

    pictures, _ = same_chain(build, steps=60, before=before)
    assert outcomes(pictures)[2] > 0 and outcomes(pictures)[0] > 0
    assert any("disappears" in p[2] for p in pictures if p[0] == "raised")


@il.gen
def kind_switch():
    """``z`` is a count when k > m and a real number otherwise; m is never read."""
    m = il.uniform_discrete(0, 1) @ "m"
    k = il.uniform_discrete(0, 1) @ "k"
    if k > m:
        il.poisson(3.0) @ "z"
    else:
        il.normal(0.0, 1.0) @ "z"
    il.normal(0.0, 1.0) @ "a"


@il.gen
def u_aux(trace):
    il.normal(0.0, 1.0) @ "u"


def test_kept_value_changes_kind_only_for_some_untouched_values():
    def build():
        trace, _ = kind_switch.generate((), {"m": 1, "k": 0, "z": 0.5})
        return Kernels(trace, [(u_aux, (), il.transform(_flip_k_one))])

    def before(i, trace):
        if i % 11 == 10:
            m = 1 - trace["m"]
            cons = {"m": m}
            kind_discrete = trace["k"] > m
            cons["z"] = 2 if kind_discrete else 0.5
            trace, _, _ = trace.update(cons)
        return trace

    pictures, _ = same_chain(build, steps=60, before=before)
    assert outcomes(pictures)[2] > 0 and outcomes(pictures)[0] > 0


def _flip_k_one(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    write(model_out["k"], 1 - k, discrete)
    a = read(model_in["a"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["a"], a + u, continuous)
    write(aux_out["u"], -u, continuous)


@il.gen
def label_switch():
    """``y`` (k = 2 only) is a count when m and a real number otherwise."""
    m = il.bernoulli(0.5) @ "m"
    k = il.uniform_discrete(1, 2) @ "k"
    if k == 2:
        (il.poisson(3.0) if m else il.normal(0.0, 1.0)) @ "y"


@il.gen
def label_aux(trace):
    if trace["k"] == 1:
        il.normal(0.0, 1.0) @ "u"


def _birth_y(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    write(model_out["k"], 3 - k, discrete)
    if k == 1:
        write(model_out["y"], read(aux_in["u"], continuous) * 2.0, continuous)
    else:
        write(aux_out["u"], read(model_in["y"], continuous) / 2.0, continuous)


def test_write_and_read_labels_against_a_kind_the_key_does_not_see():
    """With m, ``y`` is a count: writing it as continuous and reading it as continuous are
    label errors, also on keys compiled while y was real."""
    def build():
        trace, _ = label_switch.generate((), {"m": False, "k": 1})
        return Kernels(trace, [(label_aux, (), il.transform(_birth_y))])

    def before(i, trace):
        if i % 13 == 12:
            m = not trace["m"]
            cons = {"m": m}
            if trace["k"] == 2:
                cons["y"] = 2 if m else 0.5
            trace, _, _ = trace.update(cons)
        return trace

    pictures, _ = same_chain(build, steps=70, before=before)
    assert outcomes(pictures)[2] > 0 and outcomes(pictures)[0] > 0


@il.gen
def ordered(flip_order):
    """The same choices in an order that depends on an untouched value (row order of J)."""
    f = il.bernoulli(0.5) @ "f"
    if f:
        il.normal(0.0, 1.0) @ "a"
        il.normal(0.0, 1.0) @ "b"
        il.normal(0.0, 1.0) @ "c"
    else:
        il.normal(0.0, 1.0) @ "c"
        il.normal(0.0, 1.0) @ "b"
        il.normal(0.0, 1.0) @ "a"


@il.gen
def abc_aux(trace):
    il.normal(0.0, 1.0) @ "u"


def _mix_abc(model_in, aux_in, model_out, aux_out):
    a, b, c = (read(model_in[n], continuous) for n in "abc")
    u = read(aux_in["u"], continuous)
    write(model_out["a"], a + b * 0.3 + c * 1.7 + u, continuous)
    write(model_out["b"], a * 1.7 - b + c * 0.3 - u * 0.1, continuous)
    write(model_out["c"], a * 0.3 + b * 1.7 - c + u * 2.3, continuous)
    write(aux_out["u"], a - b + c * 0.9 - u * 1.1, continuous)


def test_address_order_depends_on_an_untouched_value():
    """LU pivot ties make row order matter bit for bit; the order here is decided by f."""
    def build():
        trace, _ = ordered.generate((False,), {"f": True})
        return Kernels(trace, [(abc_aux, (), il.transform(_mix_abc))])

    def before(i, trace):
        if i % 7 == 6:
            trace, _, _ = trace.update({"f": not trace["f"], "a": trace["a"], "b": trace["b"],
                                        "c": trace["c"]})
        return trace

    same_chain(build, steps=50, before=before, deep=True)


# reads of ("mu", j) and ("mu", k) when j == k; a double write when j == k
@il.gen
def jk_aux(trace):
    il.uniform_discrete(1, trace["k"]) @ "j"
    il.normal(0.0, 1.0) @ "u"


def _jk_body(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    j = read(aux_in["j"], discrete)
    copy(aux_in["j"], aux_out["j"])
    a = read(model_in["mu", j], continuous)
    b = read(model_in["mu", k], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["mu", j], a + 0.5 * b + u, continuous)
    write(aux_out["u"], -u, continuous)


def _jk_double(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    j = read(aux_in["j"], discrete)
    copy(aux_in["j"], aux_out["j"])
    a = read(model_in["mu", j], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["mu", j], a + u, continuous)
    if j != 1:
        write(model_out["mu", k], read(model_in["mu", k], continuous) * 1.0, continuous)
    write(aux_out["u"], -u, continuous)


@pytest.mark.parametrize("body", [_jk_body, _jk_double], ids=["reads-j-and-k", "double-write-j-eq-k"])
def test_same_address_through_two_discrete_values(body):
    def build():
        trace, _ = small.generate((), {"k": 3})
        return Kernels(trace, [(jk_aux, (), il.transform(body))])

    same_chain(build, steps=60, deep=True)


def _dim_when_equal(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    j = read(aux_in["j"], discrete)
    copy(aux_in["j"], aux_out["j"])
    a = read(model_in["mu", j], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["mu", j], a + u, continuous)
    if j != k:
        write(aux_out["u"], -u, continuous)      # j == k: aux_out["u"] is missing


def test_error_only_for_some_discrete_values():
    def build():
        trace, _ = small.generate((), {"k": 3})
        return Kernels(trace, [(jk_aux, (), il.transform(_dim_when_equal))])

    pictures, _ = same_chain(build, steps=60)
    assert outcomes(pictures)[2] > 0 and outcomes(pictures)[0] + outcomes(pictures)[1] > 0


def test_same_address_read_twice():
    def spread(u, mu):
        return u

    def body(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        if k > 1:
            read(model_in["mu", 1], continuous)
            read(model_in["mu", 1], continuous)
        return inner(model_in, aux_in, model_out, aux_out)

    inner = split_merge_with(spread)
    same_chain(small_chain(body), steps=40, min_hits=3)


# ---------------------------------------------------------------------------
# numerics
# ---------------------------------------------------------------------------
@il.gen
def one_a():
    il.normal(0.0, 1.0) @ "a"
    il.normal(0.0, 1.0) @ "b"


def _ab_body(formula):
    def body(model_in, aux_in, model_out, aux_out):
        a = read(model_in["a"], continuous)
        b = read(model_in["b"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["a"], formula(a, u), continuous)
        write(model_out["b"], b + u * 0.5, continuous)
        write(aux_out["u"], -u, continuous)
    return body


def set_a(values):
    """before(): on some moves set ``a`` to a special value (0, a negative, inf), and back
    to 0.5 on the move after (a move that raises leaves the trace as it was)."""
    def before(i, trace):
        v = values.get(i % 10)
        if v is None and (i - 1) % 10 in values:
            v = 0.5
        if v is not None:
            trace, _, _ = trace.update({"a": v})
        return trace
    return before


@pytest.mark.parametrize("name, formula, values", [
    ("division by zero", lambda a, u: u / a + a, {3: 0.0, 7: -0.0}),
    ("sqrt of a negative", lambda a, u: torch.sqrt(a) + u, {2: 4.0, 5: -1.0}),
    ("log of zero", lambda a, u: torch.log(a * a) + u, {4: 0.0}),
    ("inf - inf (nan) on overflow", lambda a, u: a + u + (torch.exp(a * 300) - torch.exp(a * 300)), {6: 3.0}),
    ("inf value", lambda a, u: a * 2.0 + u, {6: float("inf")}),
    ("pow of a negative", lambda a, u: a ** 2.5 + u, {1: 2.0, 3: -2.0}),
    ("0/0 in a derivative", lambda a, u: torch.sqrt(a * a) + u, {5: 0.0}),
])
def test_numerical_edge_cases(name, formula, values):
    def build():
        trace, _ = one_a.generate((), {"a": 1.0})
        return Kernels(trace, [(u_aux, (), il.transform(_ab_body(formula)))])

    same_chain(build, steps=40, before=set_a(values))


def test_python_int_written_into_a_continuous_address():
    def body(model_in, aux_in, model_out, aux_out):
        a = read(model_in["a"], continuous)
        b = read(model_in["b"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["a"], b, continuous)
        write(model_out["b"], a, continuous)
        write(aux_out["u"], 1 if u > 1.0 else -u, continuous)

    def build():
        trace, _ = one_a.generate((), {"a": 1.0})
        return Kernels(trace, [(u_aux, (), il.transform(body))])

    pictures, _ = same_chain(build, steps=60)


def test_float32_tensors_inside_the_transform():
    c32 = torch.tensor(0.3, dtype=torch.float32)

    def build():
        trace, _ = one_a.generate((), {"a": 1.0})
        return Kernels(trace, [(u_aux, (), il.transform(_ab_body(lambda a, u: a + u * c32)))])

    same_chain(build, steps=30)


def test_float32_input_values():
    def build():
        trace, _ = one_a.generate((), {"a": torch.tensor(0.1, dtype=torch.float32),
                                        "b": torch.tensor(0.7, dtype=torch.float32)})
        return Kernels(trace, [(u_aux, (), il.transform(_ab_body(lambda a, u: a * 1.1 + u)))])

    same_chain(build, steps=30)


# ---------------------------------------------------------------------------
# Python features
# ---------------------------------------------------------------------------
@il.transform
def _scaled_shift(model_in, aux_in, model_out, aux_out, scale):
    a = read(model_in["a"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["a"], a + u * scale, continuous)
    write(aux_out["u"], -u, continuous)


TCALL_SCALE = 1.0


def test_tcall_of_a_sub_transform_with_changing_arguments():
    def body(model_in, aux_in, model_out, aux_out):
        tcall(_scaled_shift, TCALL_SCALE)
        b = read(model_in["b"], continuous)
        write(model_out["b"], b, continuous)

    def before(i, trace):
        global TCALL_SCALE
        TCALL_SCALE = 1.0 if i < 20 else 2.5
        return trace

    def build():
        trace, _ = one_a.generate((), {"a": 1.0})
        return Kernels(trace, [(u_aux, (), il.transform(body))])

    try:
        same_chain(build, steps=40, before=before)
    finally:
        globals()["TCALL_SCALE"] = 1.0


def test_tcall_sub_transform_with_compile_false():
    """The outer transform compiles; its sub-transform says compile=False."""
    sub = il.transform(_scaled_shift.fn, compile=False)

    def body(model_in, aux_in, model_out, aux_out):
        tcall(sub, 0.5)
        write(model_out["b"], read(model_in["b"], continuous) * 1.0, continuous)

    def build():
        trace, _ = one_a.generate((), {"a": 1.0})
        return Kernels(trace, [(u_aux, (), il.transform(body))])

    same_chain(build, steps=30)


def test_one_trace_transform():
    def swap(t_in, t_out):
        a = read(t_in["a"], continuous)
        b = read(t_in["b"], continuous)
        write(t_out["a"], -b, continuous)
        write(t_out["b"], a * 2.0, continuous)

    def build():
        trace, _ = one_a.generate((), {"a": 1.0})
        return Kernels(trace, [(None, (), il.transform(swap))])

    same_chain(build, steps=30, deep=True)


@il.gen
def vec_model():
    k = il.uniform_discrete(2, 4) @ "k"
    for j in range(1, k + 1):
        il.normal(0.0, 1.0) @ ("mu", j)
    il.dirichlet(torch.full((k,), 2.0, dtype=torch.float64)) @ "w"


@il.gen
def vec_aux(trace):
    il.uniform_discrete(1, trace["k"]) @ "j"
    il.normal(0.0, 0.5) @ "u"


def _loops_and_stacks(model_in, aux_in, model_out, aux_out):
    k = read(model_in["k"], discrete)
    j = read(aux_in["j"], discrete)
    copy(aux_in["j"], aux_out["j"])
    u = read(aux_in["u"], continuous)
    mus = [read(model_in["mu", i], continuous) for i in range(1, k + 1)]
    total = torch.stack(mus).sum()
    shifted = [m + u * 0.1 if i + 1 == j else m for i, m in enumerate(mus)]
    for i in range(1, k + 1):
        write(model_out["mu", i], shifted[i - 1], continuous)
    w = read(model_in["w"], continuous)
    order = list(range(k))
    order[j - 1], order[k - 1] = k - 1, j - 1
    moved = w[order] * torch.exp(torch.stack([u * 0.0 + 0.01 * i for i in range(k)]))
    write(model_out["w"], moved / moved.sum(), continuous)
    write(aux_out["u"], -u + total * 0.0, continuous)


def test_loops_comprehensions_stack_exp_sum_fancy_indexing():
    def build():
        trace, _ = vec_model.generate((), {"k": 3})
        return Kernels(trace, [(vec_aux, (), il.transform(_loops_and_stacks))])

    def before(i, trace):
        if i % 9 == 8:
            k = 2 + (trace["k"] - 1) % 3
            trace, _ = vec_model.generate((), {"k": k})
        return trace

    same_chain(build, steps=50, before=before, deep=True)


def test_generator_and_enumerate_over_reads():
    def body(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        j = read(aux_in["j"], discrete)
        copy(aux_in["j"], aux_out["j"])
        u = read(aux_in["u"], continuous)
        vals = list(read(model_in["mu", i], continuous) for i in range(1, k + 1))
        s = sum(vals)
        for i, v in enumerate(vals, start=1):
            write(model_out["mu", i], v + u if i == j else v, continuous)
        write(aux_out["u"], -u + s * 0.0, continuous)
        copy(model_in["w"], model_out["w"])

    def build():
        trace, _ = vec_model.generate((), {"k": 3})
        return Kernels(trace, [(vec_aux, (), il.transform(body))])

    same_chain(build, steps=40)


def test_in_place_operator_inside_the_transform():
    def spread(u, mu):
        d = u * 1.0
        d += mu * 0.1
        return d

    same_chain(small_chain(split_merge_with(spread)))


def test_transform_return_value_is_kept():
    def body(model_in, aux_in, model_out, aux_out):
        split_merge_with(lambda u, mu: u)(model_in, aux_in, model_out, aux_out)
        return read(model_in["k"], discrete) * 10

    same_chain(small_chain(body))


# ---------------------------------------------------------------------------
# threads
# ---------------------------------------------------------------------------
def test_two_chains_in_two_threads_equal_their_serial_runs():
    data = mixture.synthetic_data(40, seed=7)
    start = mixture.initial_trace(data, k=2)

    def kernel(compile):
        fs = [il.transform(getattr(mixture, n).fn, name=n) for n in ("split_merge", "move_cluster")]
        for f in fs:
            f.compile = compile
        return il.cycle(il.InvolutiveKernel(mixture.split_merge_aux, (), fs[0]),
                        il.InvolutiveKernel(mixture.move_cluster_aux, (0.5, 0.3), fs[1])), fs

    serial_kernel, _ = kernel(False)
    serial = il.run_chains(serial_kernel, start, 40, chains=2, executor="serial", seed=11,
                           record=["k"], progress=False)
    threaded_kernel, fs = kernel(True)
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        threaded = il.run_chains(threaded_kernel, start, 40, chains=2, executor=ex, seed=11,
                                 record=["k"], progress=False)
    for c in range(2):
        a, b = serial.traces[c], threaded.traces[c]
        assert trace_picture(a) == trace_picture(b), f"chain {c} differs"
    assert bits(serial.values("k")) == bits(threaded.values("k"))


# ---------------------------------------------------------------------------
# records and the widgets' inputs after a compiled move
# ---------------------------------------------------------------------------
def test_records_and_widget_inputs_after_compiled_moves():
    from imcmc_lab.widgets.jacobian import layout, render_matrix
    from imcmc_lab.widgets.schematic import Stages, render_frame

    data = mixture.synthetic_data(30, seed=9)

    def records(compile):
        torch.manual_seed(4)
        trace = mixture.initial_trace(data, k=3)
        f = il.transform(mixture.split_merge.fn, name="split_merge")
        f.compile = compile
        out = []
        for i in range(40):
            rec = involutive_move(trace, mixture.split_merge_aux, (), f)
            trace = rec.trace
            if i >= 30:
                stages = Stages(rec)
                out.append((record_picture(rec, deep=True),
                            [render_frame(stages, frame) for frame in range(3)],
                            render_matrix(layout(rec.jacobian)),
                            bits(rec.application.run.floats)))
        return out, f

    ref, _ = records(False)
    got, f = records(True)
    assert f.compiled.hits > 5
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"record {i}: {first_difference(a, b)}"


# ---------------------------------------------------------------------------
# more: identity, types, proxies leaking, same code with other closures, other models
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name, test", [
    ("is True", lambda split: split is True),
    ("is not False", lambda split: split is not False),
    ("type() is bool", lambda split: type(split) is bool and bool(split)),
    ("__class__", lambda split: split.__class__ is bool and split),
])
def test_identity_tests_on_a_discrete_read(name, test):
    """``split is True`` cannot be intercepted by a proxy: the branch must still be right."""
    def body(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        split = True if k == 1 else (False if k == KMAX else read(aux_in["split"], discrete))
        factor = 2.0 if test(split) else 1.0
        return _sm_discrete(lambda kk: factor)(model_in, aux_in, model_out, aux_out)

    same_chain(small_chain(body, k=2), steps=40)


@pytest.mark.parametrize("name, new_k, new_split", [
    ("k + 0 and split + 0", lambda k: k + 1 + 0, lambda s: s + 0),
    ("k * 1 and split * 1", lambda k: (k + 1) * 1, lambda s: s * 1),
    ("True + k - True", lambda k: True + k, lambda s: s - 0),
    ("-(-x)", lambda k: -(-(k + 1)), lambda s: -(-s)),
    ("not not", lambda k: k + 1, lambda s: not (not s)),
    ("int(split)", lambda k: k + 1, lambda s: int(s)),
    ("bool(split + 0)", lambda k: k + 1, lambda s: bool(s + 0)),
])
def test_types_of_discrete_values_written(name, new_k, new_split):
    """The value written (bool vs int) is what the new trace holds: identities must keep types."""
    def body(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        split = True if k == 1 else (False if k == KMAX else read(aux_in["split"], discrete))
        if split:
            write(model_out["k"], new_k(k), discrete)
            if k + 1 == 2:
                write(aux_out["split"], new_split(False), discrete)
            mu = read(model_in["mu", k], continuous)
            d = read(aux_in["u"], continuous)
            write(model_out["mu", k], mu - d, continuous)
            write(model_out["mu", k + 1], mu + d, continuous)
        else:
            write(model_out["k"], k - 1, discrete)
            if k - 1 == 2:
                write(aux_out["split"], new_split(not split), discrete)
            mu1 = read(model_in["mu", k - 1], continuous)
            mu2 = read(model_in["mu", k], continuous)
            write(model_out["mu", k - 1], (mu1 + mu2) / 2, continuous)
            write(aux_out["u"], (mu2 - mu1) / 2, continuous)

    same_chain(small_chain(body, k=2), steps=40)


@pytest.mark.parametrize("name, formula", [
    ("a", lambda a: a),
    ("a * 1.0", lambda a: a * 1.0),
    ("1.0 * a", lambda a: 1.0 * a),
    ("a + 0.0", lambda a: a + 0.0),
    ("0.0 + a", lambda a: 0.0 + a),
    ("a - 0.0", lambda a: a - 0.0),
    ("-(-a)", lambda a: -(-a)),
    ("a / 1.0", lambda a: a / 1.0),
    ("a * -1.0 * -1.0", lambda a: a * -1.0 * -1.0),
    ("a ** 1", lambda a: a ** 1),
    ("(a * 3.0) / 3.0", lambda a: (a * 3.0) / 3.0),
    ("a + a - a", lambda a: a + a - a),
])
def test_pass_through_identities_and_the_sign_of_zero(name, formula):
    """Writes that are (nearly) the read value: pass-through detection and -0.0 + 0.0 == 0.0."""
    def body(model_in, aux_in, model_out, aux_out):
        a = read(model_in["a"], continuous)
        b = read(model_in["b"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["a"], formula(a), continuous)
        write(model_out["b"], b + u, continuous)
        write(aux_out["u"], -u, continuous)

    def build():
        trace, _ = one_a.generate((), {"a": -0.0})
        return Kernels(trace, [(u_aux, (), il.transform(body))])

    same_chain(build, steps=30, deep=True, before=set_a({3: -0.0, 6: 0.0}))


def test_same_code_with_other_closures_in_one_chain():
    """Two transforms from one factory share their code object, not their closure cells."""
    same_chain(small_chain(split_merge_with(lambda u, mu: u), split_merge_with(lambda u, mu: 2.0 * u),
                           split_merge_with(lambda u, mu: u), split_merge_with(lambda u, mu: 0.5 * u)),
               steps=60)


@il.gen
def one_a_reordered():
    il.normal(0.0, 1.0) @ "b"
    il.normal(0.0, 2.0) @ "a"


@il.gen
def one_a_gamma():
    il.gamma(2.0, 1.0) @ "a"
    il.normal(0.0, 1.0) @ "b"


@il.gen
def one_a_discrete():
    il.poisson(2.0) @ "a"
    il.normal(0.0, 1.0) @ "b"


@pytest.mark.parametrize("other", [one_a_reordered, one_a_gamma, one_a_discrete])
def test_one_transform_on_two_models_alternately(other):
    """The same transform object serves two models with the same addresses (other order,
    other distribution, other kind): a key compiled on one must not serve the other."""
    body = _ab_body(lambda a, u: a + u * 0.5)

    def build():
        t1, _ = one_a.generate((), {"a": 0.3})
        t2, _ = other.generate((), {"a": 2})
        k = Kernels(t1, [(u_aux, (), il.transform(body))])
        k.states = [t1, t2]
        return k

    holder = {}

    def build_keep():
        holder["k"] = build()
        return holder["k"]

    def before(i, trace):
        states = holder["k"].states
        if i > 0:
            states[(i - 1) % 2] = trace
        return states[i % 2]

    ref, ref_final, _ = run_chain(build_keep, 40, False, before=before)
    got, got_final, _ = run_chain(build_keep, 40, True, before=before)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"move {i}: {first_difference(a, b)}"
    assert ref_final == got_final


@il.gen
def switch_aux(trace):
    """Samples "u" or "v" depending on a model value the transform never reads."""
    if trace["b"] > 0:
        il.normal(0.0, 1.0) @ "u"
    else:
        il.normal(0.0, 1.0) @ "v"


def test_missing_aux_address_on_a_compiled_key():
    def build():
        trace, _ = one_a.generate((), {"a": 0.3, "b": 1.0})
        return Kernels(trace, [(switch_aux, (), il.transform(_ab_body(lambda a, u: a + u)))])

    def before(i, trace):
        if i % 9 == 8:
            trace, _, _ = trace.update({"b": -trace["b"]})
        return trace

    pictures, _ = same_chain(build, steps=50, before=before)
    assert outcomes(pictures)[2] > 0


HISTORY = []


def test_traced_values_stored_by_the_transform():
    """A transform that keeps its values in a global list: what the user finds there."""
    def spread(u, mu):
        HISTORY.append(u)
        return u

    def summary():
        return [(type(h).__name__, float(h)) for h in HISTORY]

    HISTORY.clear()
    run_chain(small_chain(split_merge_with(spread)), compile=False)
    ref = summary()
    HISTORY.clear()
    run_chain(small_chain(split_merge_with(spread)), compile=True)
    got = summary()
    HISTORY.clear()
    assert ref == got


def test_numpy_scalars_with_traced_values():
    import numpy as np
    same_chain(small_chain(split_merge_with(lambda u, mu: np.float64(0.5) * u + u * np.float64(0.25))))


def test_sorted_and_torch_sort_of_reads():
    def spread(u, mu):
        lo, hi = sorted([u, mu * 0.1])
        return hi - lo + torch.sort(torch.stack([u, mu]))[0][0] * 0.0

    same_chain(small_chain(split_merge_with(spread)))


def test_users_torch_error_on_some_moves():
    """torch raises inside the transform (incompatible shapes) when u < -1."""
    def spread(u, mu):
        if u < -1.0:
            return torch.cat([u.reshape(1), torch.zeros(2, 2, dtype=torch.float64)]).sum()
        return u

    pictures, _ = same_chain(small_chain(split_merge_with(spread)), steps=60)
    assert outcomes(pictures)[2] > 0


def test_read_with_two_labels_on_some_moves():
    def body(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        if k == 2:
            read(model_in["mu", 1], continuous)
            if read(aux_in["split"], discrete):
                read(model_in["mu", 1], discrete)
        return split_merge_with(lambda u, mu: u)(model_in, aux_in, model_out, aux_out)

    pictures, _ = same_chain(small_chain(body), steps=50)
    assert outcomes(pictures)[2] > 0


def test_namespace_copy():
    """copy(model_in["mu"], ...) of a whole namespace whose size is k."""
    @il.gen
    def two_ns():
        k = il.uniform_discrete(1, 3) @ "k"
        for j in range(1, k + 1):
            il.normal(0.0, 1.0) @ ("mu", j)
            il.normal(0.0, 1.0) @ ("nu", j)

    @il.gen
    def nothing(trace):
        pass

    def swap_ns(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        copy(model_in["mu"], model_out["nu"])
        copy(model_in["nu"], model_out["mu"])
        write(model_out["k"], k, discrete)

    def build():
        trace, _ = two_ns.generate((), {"k": 2})
        return Kernels(trace, [(nothing, (), il.transform(swap_ns))])

    def before(i, trace):
        if i % 6 == 5:
            trace, _ = two_ns.generate((), {"k": 1 + i % 3})
        return trace

    same_chain(build, steps=40, before=before, deep=True)


def test_q_args_change_between_moves():
    data = mixture.synthetic_data(30, seed=2)

    def build():
        f = il.transform(mixture.move_cluster.fn, name="move_cluster")
        return Kernels(mixture.initial_trace(data, k=3),
                       [(mixture.move_cluster_aux, (0.5, 0.3), f), (mixture.move_cluster_aux, (3.0, 1.0), f)])

    same_chain(build, steps=60, min_hits=20)


def test_model_arguments_change_between_moves():
    """The data size (gmm's argument) differs between the two traces a transform alternates on."""
    small_data, big_data = mixture.synthetic_data(20, seed=1), mixture.synthetic_data(45, seed=1)
    holder = {}

    def build():
        t1, t2 = mixture.initial_trace(small_data, k=2), mixture.initial_trace(big_data, k=3)
        f = il.transform(mixture.split_merge.fn, name="split_merge")
        holder["states"] = [t1, t2]
        return Kernels(t1, [(mixture.split_merge_aux, (), f)])

    def before(i, trace):
        states = holder["states"]
        if i > 0:
            states[(i - 1) % 2] = trace
        return states[i % 2]

    same_chain(build, steps=60, before=before, min_hits=10)


# ---------------------------------------------------------------------------
# pickling and sharing a transform whose keys were compiled
# ---------------------------------------------------------------------------
def warmed_split_merge(compile, moves=30, seed=3):
    """A fresh split_merge transform after ``moves`` chained moves (keys compiled), and the trace."""
    torch.manual_seed(seed)
    data = mixture.synthetic_data(30, seed=seed)
    trace = mixture.initial_trace(data, k=3)
    f = il.transform(mixture.split_merge.fn, name="split_merge")
    f.compile = compile
    for _ in range(moves):
        trace = involutive_move(trace, mixture.split_merge_aux, (), f).trace
    return f, trace


def continue_chain(f, trace, steps=20, seed=8):
    torch.manual_seed(seed)
    out = []
    for _ in range(steps):
        rec = involutive_move(trace, mixture.split_merge_aux, (), f)
        out.append(record_picture(rec))
        trace = rec.trace
    return out


def without_line_text(picture):
    """``picture`` with each source line reduced to its number: cloudpickle >= 3.1.3 renames
    the file of a function it pickles by value to "<dynamic-code>", so a copy's records name
    the line (``line 117``) without its text."""
    return json.loads(re.sub(r'"(line \d+): (?:[^"\\]|\\.)*"', r'"\1"', json.dumps(picture, default=repr)))


def test_a_compiled_transform_pickles_and_continues_identically():
    import cloudpickle
    import pickle

    f_ref, trace = warmed_split_merge(False)
    f, trace2 = warmed_split_merge(True)
    assert trace_picture(trace) == trace_picture(trace2)
    assert f.compiled.hits > 0
    copied = pickle.loads(cloudpickle.dumps(f))     # a local transform: pickled by value
    assert copied.compile is True
    assert continue_chain(f_ref, trace) == continue_chain(f, trace)
    assert without_line_text(continue_chain(copied, trace)) == without_line_text(continue_chain(f_ref, trace))
    unset = pickle.loads(cloudpickle.dumps(f_ref))
    assert unset.compile is False


def test_a_move_record_pickles_after_a_compiled_move():
    import pickle

    f, trace = warmed_split_merge(True)
    torch.manual_seed(5)
    rec = involutive_move(trace, mixture.split_merge_aux, (), f)
    f_ref, _ = warmed_split_merge(False)
    torch.manual_seed(5)
    ref = involutive_move(trace, mixture.split_merge_aux, (), f_ref)
    import cloudpickle
    back = pickle.loads(cloudpickle.dumps(rec))
    assert record_picture(ref, deep=True) == record_picture(rec, deep=True)
    assert without_line_text(record_picture(back, deep=True)) == without_line_text(record_picture(ref, deep=True))


def app_picture(app):
    run = app.run
    return (bits(app.model_log_ratio), bits(app.log_q_new), trace_picture(app.new_model),
            trace_picture(app.new_aux), app.problem, jacobian_picture(app.jacobian, False),
            [(k, bits(w.value)) for k, w in run.writes.items()])


def test_one_transform_object_shared_by_two_threads():
    """apply_transform with one (compiling) transform object from two threads at once."""
    torch.manual_seed(12)
    data = mixture.synthetic_data(30, seed=12)
    pairs, trace = [], mixture.initial_trace(data, k=3)
    for i in range(60):
        trace, _ = mixture.gmm.generate((30,), {"x": data, "k": 2 + i % 4})
        pairs.append((trace, mixture.split_merge_aux.simulate(trace)))

    def apply_all(f, chunk):
        return [app_picture(il.apply_transform(f, x, y, mixture.split_merge_aux)) for x, y in chunk]

    f_ref = il.transform(mixture.split_merge.fn, name="split_merge")
    f_ref.compile = False
    ref = apply_all(f_ref, pairs)
    f = il.transform(mixture.split_merge.fn, name="split_merge")
    apply_all(f, pairs[:10])
    apply_all(f, pairs[:10])            # the second visit of each key compiles it
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        halves = list(ex.map(lambda chunk: apply_all(f, chunk), [pairs[0::2], pairs[1::2]]))
    got = [None] * len(pairs)
    got[0::2], got[1::2] = halves
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"pair {i}: {first_difference(a, b)}"
    assert f.compiled.hits > 0


def test_run_chains_in_threads_after_keys_were_compiled():
    """The kernel is pickled to each chain after its transforms compiled keys."""
    f_ref, start = warmed_split_merge(False)
    f, _ = warmed_split_merge(True)
    runs = []
    for g, executor in ((f_ref, "serial"), (f, "threads")):
        kernel = il.InvolutiveKernel(mixture.split_merge_aux, (), g)
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            runs.append(il.run_chains(kernel, start, 30, chains=2, seed=21, record=["k"], progress=False,
                                      executor=ex if executor == "threads" else "serial"))
    assert [trace_picture(t) for t in runs[0].traces] == [trace_picture(t) for t in runs[1].traces]
    assert bits(runs[0].values("k")) == bits(runs[1].values("k"))


# ---------------------------------------------------------------------------
# whole kernels of the examples (random walks built from callable objects, Green's coal
# moves, the soccer jump, HMC as an involution through model_in.trace, derived RJ moves)
# ---------------------------------------------------------------------------
def _transforms_and_involutive(kernel, found=None, seen=None):
    found = found if found is not None else ([], [])
    seen = seen if seen is not None else set()
    if id(kernel) in seen:
        return found
    seen.add(id(kernel))
    if isinstance(kernel, il.InvolutiveKernel):
        found[1].append(kernel)
    for value in vars(kernel).values() if hasattr(kernel, "__dict__") else ():
        if isinstance(value, il.transform(lambda a, b: None).__class__):
            if all(value is not f for f in found[0]):
                found[0].append(value)
        elif isinstance(value, il.Kernel):
            _transforms_and_involutive(value, found, seen)
        elif isinstance(value, (list, tuple)):
            for v in value:
                if isinstance(v, il.Kernel):
                    _transforms_and_involutive(v, found, seen)
    return found


def kernel_chain(make, steps, compile, seed=0, before=None):
    torch.manual_seed(seed)
    kernel, trace = make()
    transforms, involutive = _transforms_and_involutive(kernel)
    for f in transforms:
        f.compile = compile
    torch.manual_seed(seed + 1)
    pictures = []
    for i in range(steps):
        if before is not None:
            trace = before(i, trace, transforms)
        try:
            trace, accepted = kernel.step(trace)
        except Exception as exc:       # noqa: BLE001 -- compared
            pictures.append(("raised", type(exc).__name__, str(exc)))
            continue
        pictures.append((accepted, trace_picture(trace),
                         [record_picture(k.last_record) if k.last_record is not None else None
                          for k in involutive]))
    return pictures, transforms


def same_kernel_chain(make, steps=30, seed=0, before=None, min_hits=0):
    ref, _ = kernel_chain(make, steps, False, seed, before)
    got, transforms = kernel_chain(make, steps, True, seed, before)
    assert transforms, "no transform found in the kernel"
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"step {i}: {first_difference(a, b)}"
    if min_hits:
        assert sum(f.compiled.hits for f in transforms) >= min_hits
    return ref


class ScaledShift:
    """A transform body that is a callable object: its attributes are its environment."""

    def __init__(self, c):
        self.c = c

    def __call__(self, model_in, aux_in, model_out, aux_out):
        a = read(model_in["a"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["a"], a + u * self.c, continuous)
        write(aux_out["u"], -u, continuous)
        write(model_out["b"], read(model_in["b"], continuous) * 1.0, continuous)


def test_callable_object_transform_whose_attribute_changes():
    holder = {}

    def build():
        trace, _ = one_a.generate((), {"a": 0.3})
        holder["body"] = ScaledShift(1.0)
        return Kernels(trace, [(u_aux, (), il.transform(holder["body"], name="scaled"))])

    def before(i, trace):
        if i == 15:
            holder["body"].c = 3.0
        return trace

    same_chain(build, steps=30, before=before)


def test_random_walk_kernel():
    from imcmc_lab.examples import soccer
    from imcmc_lab.examples.random_walk import random_walk_kernel

    same_kernel_chain(lambda: (random_walk_kernel(["lam"], 0.05), soccer.initial_trace()), steps=30)


def test_soccer_kernel():
    from imcmc_lab.examples import soccer
    same_kernel_chain(lambda: (soccer.soccer_kernel(), soccer.initial_trace()), steps=45)


def test_coal_green_moves():
    from imcmc_lab.examples import coal
    same_kernel_chain(lambda: (coal.coal_kernel(), coal.initial_trace(n=2)), steps=60)


def test_hmc_involution_through_model_in_trace():
    from imcmc_lab.examples.hmc_involution import hmc_involution_kernel

    @il.gen
    def gauss2():
        il.normal(0.0, 1.0) @ "a"
        il.normal(1.0, 2.0) @ "b"

    def make():
        trace, _ = gauss2.generate((), {"a": 0.2})
        return hmc_involution_kernel(["a", "b"], 0.3, 3), trace

    same_kernel_chain(make, steps=20)


def test_derived_reversible_jump_soccer():
    from imcmc_lab.examples import soccer
    from imcmc_lab.examples.rj_from_proposals import soccer_rj_kernel
    same_kernel_chain(lambda: (soccer_rj_kernel(), soccer.initial_trace()), steps=24)


# ---------------------------------------------------------------------------
# generalising one key from its trace-time instance to others
# ---------------------------------------------------------------------------
P_FLAG = 0.0


@il.gen
def flag_aux(trace):
    il.bernoulli(P_FLAG) @ "flag"
    il.normal(0.0, 1.0) @ "u"


def flag_chain(test):
    """``flag`` is read and only copied, and used in ``test(flag)``; the first moves all
    have flag False (P_FLAG = 0), the later ones flag True."""
    def body(model_in, aux_in, model_out, aux_out):
        flag = read(aux_in["flag"], discrete)
        write(aux_out["flag"], flag, discrete)
        c = 2.0 if test(flag) else 1.0
        a = read(model_in["a"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["a"], a + u * c, continuous)
        write(aux_out["u"], -u, continuous)
        write(model_out["b"], read(model_in["b"], continuous) * 1.0, continuous)

    def build():
        trace, _ = one_a.generate((), {"a": 0.3})
        return Kernels(trace, [(flag_aux, (), il.transform(body))])

    def before(i, trace):
        global P_FLAG
        P_FLAG = 0.0 if i < 20 else 1.0
        return trace

    return build, before


ISINSTANCE, TYPE_OF = isinstance, type


def _match_class(flag):
    match flag:
        case bool():
            return bool(flag)
        case _:
            return False


def _match_literal(flag):
    match flag:
        case True:
            return True
        case _:
            return False


@pytest.mark.parametrize("name, test", [
    ("is True", lambda flag: flag is True),
    ("is not False", lambda flag: flag is not False),
    ("type is bool", lambda flag: type(flag) is bool and flag is not False),
    ("isinstance int", lambda flag: isinstance(flag, int) and flag is True),
    ("str", lambda flag: str(flag) == "True"),
    ("f-string", lambda flag: f"{flag}" == "True"),
    ("repr", lambda flag: repr(flag) == "True"),
    ("id", lambda flag: id(flag) == id(True)),
    ("in a tuple of objects", lambda flag: any(flag is x for x in (True,))),
    ("alias of isinstance", lambda flag: ISINSTANCE(flag, int) and flag),
    ("alias of type", lambda flag: TYPE_OF(flag) == bool and flag),
    ("operator.is_", lambda flag: operator.is_(flag, True)),
    ("operator.is_not", lambda flag: operator.is_not(flag, False) and flag),
    ("__class__", lambda flag: flag.__class__ == bool and flag),
    ("match class pattern", lambda flag: _match_class(flag)),
    ("match literal True", lambda flag: _match_literal(flag)),
    ("dict keyed by bool", lambda flag: {True: True, False: False}.get(flag, False)),
    ("json", lambda flag: json.dumps(flag) == "true"),
])
def test_a_discrete_value_tested_without_a_comparison(name, test):
    """The only use of ``flag`` is a test that a proxy cannot see: the key compiled while it
    was False must not serve the moves where it is True."""
    build, before = flag_chain(test)
    try:
        pictures, _ = same_chain(build, steps=40, before=before)
    finally:
        globals()["P_FLAG"] = 0.0


@pytest.mark.parametrize("name, test", [
    ("a == b", lambda a, b: a == b),
    ("a != b", lambda a, b: a != b),
    ("a == 0.5", lambda a, b: a == 0.5),
    ("a in [0.5]", lambda a, b: a in [0.5]),
    ("a is b", lambda a, b: a is b),
])
def test_equality_of_continuous_values(name, test):
    """On some moves a and b are both set to 0.5 exactly."""
    def body(model_in, aux_in, model_out, aux_out):
        a = read(model_in["a"], continuous)
        b = read(model_in["b"], continuous)
        u = read(aux_in["u"], continuous)
        c = 2.0 if test(a, b) else 1.0
        write(model_out["a"], a + u * c, continuous)
        write(model_out["b"], b * 1.0, continuous)
        write(aux_out["u"], -u, continuous)

    def build():
        trace, _ = one_a.generate((), {"a": 0.3})
        return Kernels(trace, [(u_aux, (), il.transform(body))])

    def before(i, trace):
        if i >= 10 and i % 5 == 0:
            trace, _, _ = trace.update({"a": 0.5, "b": 0.5})
        return trace

    same_chain(build, steps=40, before=before)


@pytest.mark.parametrize("value", [0.0, -0.0, 1.0, -1.0])
def test_coefficients_that_are_exactly_zero_or_one_on_some_moves(value):
    """d a' / d u = b: exactly 0 or 1 on some moves (sparsity, pass-through, blocks)."""
    def body(model_in, aux_in, model_out, aux_out):
        a = read(model_in["a"], continuous)
        b = read(model_in["b"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["a"], a * b + u * b, continuous)
        write(model_out["b"], b + u, continuous)
        write(aux_out["u"], -u * b - a, continuous)

    def build():
        trace, _ = one_a.generate((), {"a": 0.3})
        return Kernels(trace, [(u_aux, (), il.transform(body))])

    def before(i, trace):
        if i >= 8 and i % 4 == 0:
            trace, _, _ = trace.update({"b": value})
        return trace

    same_chain(build, steps=40, before=before, deep=True)


# ---------------------------------------------------------------------------
# more environment: builtins shadowed, other modules' globals, partials, kwdefaults,
# stores to globals (no call to see), numpy arrays, namespaces
# ---------------------------------------------------------------------------
SUM_LIB_SOURCE = """
from imcmc_lab import continuous, read, write

def body(model_in, aux_in, model_out, aux_out):
    a = read(model_in["a"], continuous)
    b = read(model_in["b"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["a"], sum([a, u]), continuous)
    write(model_out["b"], b * 1.0, continuous)
    write(aux_out["u"], -u, continuous)
"""


def ab_build(body):
    def build():
        trace, _ = one_a.generate((), {"a": 0.3})
        return Kernels(trace, [(u_aux, (), il.transform(body))])
    return build


def test_a_builtin_shadowed_by_a_new_global():
    """``sum`` is the builtin when the key compiles; then a global ``sum`` appears in the
    transform's module (a notebook cell defining ``sum``)."""
    lib = types.ModuleType("userlib4")
    exec(SUM_LIB_SOURCE, lib.__dict__)

    def before(i, trace):
        if i == 0:
            lib.__dict__.pop("sum", None)
        if i == 20:
            lib.sum = lambda xs: xs[0] + 2.0 * xs[1]
        return trace

    same_chain(ab_build(lib.body), before=before, min_hits=3)


def test_helper_in_another_module_reads_its_own_global():
    lib = types.ModuleType("userlib2")
    exec("K = 1.0\ndef spread(u, mu):\n    return u * K\n", lib.__dict__)

    def before(i, trace):
        lib.K = 1.0 if i < 20 else 3.0
        return trace

    same_chain(small_chain(split_merge_with(lib.spread)), before=before, min_hits=3)


def test_partial_keywords_mutated():
    import functools

    def scaled(u, mu, c):
        return u * c

    spread = functools.partial(scaled, c=1.0)

    def before(i, trace):
        spread.keywords["c"] = 1.0 if i < 20 else 3.0
        return trace

    same_chain(small_chain(split_merge_with(spread)), before=before)


def test_keyword_only_default_changed():
    def spread(u, mu, *, c=1.0):
        return u * c

    first, second = {"c": 1.0}, {"c": 3.0}

    def before(i, trace):
        spread.__kwdefaults__ = first if i < 20 else second
        return trace

    same_chain(small_chain(split_merge_with(spread)), before=before, min_hits=3)


def test_mutable_default_argument_mutated():
    def spread(u, mu, c=[1.0]):     # noqa: B006 -- the mutable default is the point
        return u * c[0]

    def before(i, trace):
        spread.__defaults__[0][0] = 1.0 if i < 20 else 3.0
        return trace

    same_chain(small_chain(split_merge_with(spread)), before=before)


def test_numpy_global_array_changed_in_place():
    import numpy as np
    arr = np.array([1.0])

    def before(i, trace):
        arr[0] = 1.0 if i < 20 else 3.0
        return trace

    same_chain(small_chain(split_merge_with(lambda u, mu: u * float(arr[0]))), before=before)


def test_simple_namespace_attribute_changed():
    cfg = types.SimpleNamespace(c=1.0)

    def before(i, trace):
        cfg.c = 1.0 if i < 20 else 3.0
        return trace

    same_chain(small_chain(split_merge_with(lambda u, mu: u * cfg.c)), before=before)


MOVES_SEEN = 0
LAST_U = None


def _counting_body(model_in, aux_in, model_out, aux_out):
    global MOVES_SEEN, LAST_U
    MOVES_SEEN += 1                 # a store: no call for a profile hook to see
    a = read(model_in["a"], continuous)
    u = read(aux_in["u"], continuous)
    LAST_U = u
    write(model_out["a"], a + u, continuous)
    write(model_out["b"], read(model_in["b"], continuous) * 1.0, continuous)
    write(aux_out["u"], -u, continuous)


def test_stores_to_globals_inside_the_transform():
    """``global n; n += 1`` and ``LAST_U = u``: what the user finds after every move."""
    seen = []

    def before(i, trace):
        global MOVES_SEEN, LAST_U
        if i == 0:
            MOVES_SEEN, LAST_U = 0, None
        seen.append((MOVES_SEEN, type(LAST_U).__name__, None if LAST_U is None else float(LAST_U)))
        return trace

    ref, _, _ = run_chain(ab_build(_counting_body), 30, False, before=before)
    ref_seen, seen[:] = list(seen), []
    got, _, _ = run_chain(ab_build(_counting_body), 30, True, before=before)
    assert ref == got
    for i, (a, b) in enumerate(zip(ref_seen, seen)):
        assert a == b, f"before move {i}: interpreted {a}, compiled {b}"


def test_nonlocal_counter_incremented_inside_the_transform():
    counter = 0

    def spread(u, mu):
        nonlocal counter
        counter += 1
        return u

    ref, _, _ = run_chain(small_chain(split_merge_with(spread)), compile=False)
    n_ref, counter = counter, 0
    got, _, _ = run_chain(small_chain(split_merge_with(spread)), compile=True)
    assert ref == got
    assert counter == n_ref, f"the transform's body ran {counter} times compiled, {n_ref} interpreted"


def test_module_attribute_counter_incremented():
    lib = types.ModuleType("userlib3")
    lib.calls = 0

    def spread(u, mu):
        lib.calls += 1
        return u

    run_chain(small_chain(split_merge_with(spread)), compile=False)
    n_ref, lib.calls = lib.calls, 0
    run_chain(small_chain(split_merge_with(spread)), compile=True)
    assert lib.calls == n_ref, f"the transform's body ran {lib.calls} times compiled, {n_ref} interpreted"


def test_print_and_warn_of_constants_inside_the_transform():
    import warnings

    def spread(u, mu):
        print("spreading")
        warnings.warn("spreading", UserWarning)
        return u

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pictures, _ = same_chain(small_chain(split_merge_with(spread)))
    n_moves = sum(1 for p in pictures if p[0] == "move" and "spreading" in p[-1])
    assert n_moves > 10


# ---------------------------------------------------------------------------
# shapes and kinds of read values that the key does not see
# ---------------------------------------------------------------------------
@il.gen
def vec_len_model():
    """``v`` has ``n`` coordinates; ``n`` is never read by the transform."""
    n = il.uniform_discrete(2, 4) @ "n"
    il.iid(il.normal(0.0, 1.0), n) @ "v"
    il.dirichlet(torch.full((n,), 2.0, dtype=torch.float64)) @ "w"


def _rotate(model_in, aux_in, model_out, aux_out):
    v = read(model_in["v"], continuous)
    w = read(model_in["w"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["v"], torch.cat([v[1:], (v[0] + u).reshape(1)]), continuous)
    write(model_out["w"], torch.cat([w[1:], w[:1]]), continuous)
    write(aux_out["u"], -u, continuous)


def test_vector_lengths_the_key_does_not_read():
    def build():
        trace, _ = vec_len_model.generate((), {"n": 3})
        return Kernels(trace, [(u_aux, (), il.transform(_rotate))])

    def before(i, trace):
        if i % 7 == 6:
            trace, _ = vec_len_model.generate((), {"n": 2 + (i // 7) % 3})
        return trace

    same_chain(build, steps=45, before=before, deep=True)


@il.gen
def shape_switch():
    """``a`` is a scalar, or (when m) a vector of one or two coordinates; a simplex or not."""
    m = il.uniform_discrete(0, 3) @ "m"
    if m == 0:
        il.normal(0.0, 1.0) @ "a"
    elif m == 1:
        il.iid(il.normal(0.0, 1.0), 1) @ "a"
    elif m == 2:
        il.iid(il.gamma(2.0, 2.0), 2) @ "a"
    else:
        il.dirichlet(torch.full((2,), 2.0, dtype=torch.float64)) @ "a"
    il.normal(0.0, 1.0) @ "b"


def _shift_a(model_in, aux_in, model_out, aux_out):
    a = read(model_in["a"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["a"], a * torch.exp(u * 0.1), continuous)
    write(aux_out["u"], -u, continuous)


def test_shape_and_simplex_of_a_read_change_between_moves():
    """Scalar -> vector of one -> two coordinates -> a simplex: the key was compiled on one."""
    def build():
        trace, _ = shape_switch.generate((), {"m": 0})
        return Kernels(trace, [(u_aux, (), il.transform(_shift_a))])

    def before(i, trace):
        if i % 8 == 7:
            trace, _ = shape_switch.generate((), {"m": (i // 8) % 4})
        return trace

    pictures, _ = same_chain(build, steps=64, before=before, deep=True)


# ---------------------------------------------------------------------------
# the rest of the transform's life: check_involution, compile toggled, renamed, odd ints
# ---------------------------------------------------------------------------
def test_check_involution_reports_the_same_after_compiling():
    """A broken split/merge (spread 2u, merge halves it back... twice): Algorithm 4's report."""
    good = split_merge_with(lambda u, mu: u)
    bad = split_merge_with(lambda u, mu: u, unspread=lambda d, mu: d * 2.0)

    def report(body, compile):
        f = il.transform(body)
        f.compile = compile
        torch.manual_seed(3)
        trace, _ = small.generate((), {"k": 1})
        for _ in range(20):
            trace = involutive_move(trace, small_aux, (), f).trace
        try:
            return repr(il.check_involution(small, (), small_aux, f, trials=20, seed=4))
        except Exception as exc:       # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"

    for body in (good, bad):
        assert report(body, False) == report(body, True)
    assert "Error" in report(bad, False)


def test_environment_changed_while_compile_was_off():
    global SCALE_C
    holder = {}

    def build():
        trace, _ = small.generate((), {"k": 1})
        holder["f"] = il.transform(_direct_body)
        return Kernels(trace, [(small_aux, (), holder["f"])])

    def before(i, trace):
        global SCALE_C
        f = holder["f"]
        if i == 20 and f.compile:
            f.compile = False
            holder["was_on"] = True
        if i == 22:
            SCALE_C = 0.25
        if i == 24 and holder.get("was_on"):
            f.compile = True
        return trace

    try:
        SCALE_C = 1.0
        ref, _, _ = run_chain(build, 40, False, before=before)
        SCALE_C = 1.0
        holder.clear()
        got, _, k = run_chain(build, 40, True, before=before)
        assert k.transforms[0].compiled.hits > 0
        for i, (a, b) in enumerate(zip(ref, got)):
            assert a == b, f"move {i}: {first_difference(a, b)}"
    finally:
        SCALE_C = 1.0


def test_transform_renamed_between_moves():
    """Error messages name the transform: after ``f.name = ...`` they name the new name."""
    holder = {}
    flip_m = flip_m_every(13)

    def build():
        trace, _ = gated.generate((), {"m": False, "k": 1})
        holder["f"] = il.transform(_flip_k_shift_a.fn)
        return Kernels(trace, [(gated_aux, (), holder["f"])])

    def before(i, trace):
        if i == 30:
            holder["f"].name = "renamed_move"
        return flip_m(i, trace)

    pictures, _ = same_chain(build, steps=60, before=before)
    assert any("renamed_move" in p[2] for p in pictures[30:] if p[0] == "raised")


def test_discrete_values_given_as_numpy_and_torch_integers():
    import numpy as np

    def build():
        trace, _ = small.generate((), {"k": np.int64(2)})
        return Kernels(trace, [(small_aux, (), il.transform(split_merge_with(lambda u, mu: u)))])

    def before(i, trace):
        if i % 10 == 9:
            trace, _ = small.generate((), {"k": torch.tensor(1 + i % 3)})
        return trace

    same_chain(build, steps=40, before=before)


# ---------------------------------------------------------------------------
# environment reached through modules held in closures, sub-modules, tensor storage,
# engine code that is not pure
# ---------------------------------------------------------------------------
def test_float_attribute_of_a_module_held_in_a_closure():
    lib = types.ModuleType("userlib5")
    lib.K = 1.0

    def before(i, trace):
        lib.K = 1.0 if i < 20 else 3.0
        return trace

    same_chain(small_chain(split_merge_with(lambda u, mu: u * lib.K)), before=before, min_hits=3)


def test_list_attribute_of_a_module_held_in_a_closure_appended():
    lib = types.ModuleType("userlib6")
    lib.log = []

    def spread(u, mu):
        lib.log.append(u)
        return u

    def summary(values):        # (float() of a tracer's proxy raises a BaseException)
        return [(type(v).__name__, float(v) if type(v).__name__ in ("Dual", "Tensor") else None)
                for v in values]

    run_chain(small_chain(split_merge_with(spread)), compile=False)
    ref = summary(lib.log)
    lib.log = []
    run_chain(small_chain(split_merge_with(spread)), compile=True)
    got = summary(lib.log)
    assert len(got) == len(ref), f"{len(got)} values logged compiled, {len(ref)} interpreted"
    assert got == ref


SUBLIB = types.ModuleType("userlib7")
SUBLIB.inner = types.ModuleType("userlib7.inner")
SUBLIB.inner.K = 1.0


def test_attribute_of_a_sub_module_of_a_global_module():
    def before(i, trace):
        SUBLIB.inner.K = 1.0 if i < 20 else 3.0
        return trace

    try:
        same_chain(small_chain(_sm_discrete(lambda k: SUBLIB.inner.K)), before=before, min_hits=3)
    finally:
        SUBLIB.inner.K = 1.0


H = torch.tensor(1.0, dtype=torch.float64)


@pytest.mark.parametrize("how", ["data", "numpy", "set_"])
def test_global_tensor_storage_changed_without_an_in_place_operator(how):
    """``H.data = ...`` and a NumPy view's write change a tensor without bumping its version."""
    def before(i, trace):
        if i == 0:
            H.data = torch.tensor(1.0, dtype=torch.float64)
        if i == 20:
            if how == "data":
                H.data = torch.tensor(3.0, dtype=torch.float64)
            elif how == "numpy":
                H.numpy()[()] = 3.0
            else:
                H.set_(torch.tensor(3.0, dtype=torch.float64))
        return trace

    try:
        same_chain(small_chain(_sm_discrete(lambda k: H)), before=before)
    finally:
        H.data = torch.tensor(1.0, dtype=torch.float64)


def test_engine_code_that_draws_random_numbers():
    """A helper from the engine's own package that draws (il.normal(...).sample())."""
    noise = il.normal(0.0, 1.0)
    same_chain(small_chain(_sm_discrete(lambda k: 1.0 + 0.1 * float(noise.sample()) ** 2)))


def test_public_distribution_sampled_inside_the_transform():
    """``il.normal(0, 1).sample()`` inside a (broken) transform: a fresh draw on every move."""
    same_chain(small_chain(_sm_discrete(lambda k: 1.0 + 0.1 * float(il.normal(0.0, 1.0).sample()) ** 2)))


def test_engine_draw_called_directly():
    from imcmc_lab.core.distributions._draws import uniform01
    same_chain(small_chain(_sm_discrete(lambda k: 1.0 + uniform01())))


COUNTER_ONLY = 0


def _global_counter_body(model_in, aux_in, model_out, aux_out):
    global COUNTER_ONLY
    COUNTER_ONLY += 1
    a = read(model_in["a"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["a"], a + u, continuous)
    write(model_out["b"], read(model_in["b"], continuous) * 1.0, continuous)
    write(aux_out["u"], -u, continuous)


def test_global_counter_incremented_by_the_transform():
    global COUNTER_ONLY
    COUNTER_ONLY = 0
    ref, _, _ = run_chain(ab_build(_global_counter_body), 30, False)
    n_ref, COUNTER_ONLY = COUNTER_ONLY, 0
    got, _, _ = run_chain(ab_build(_global_counter_body), 30, True)
    assert ref == got
    assert COUNTER_ONLY == n_ref, f"the body ran {COUNTER_ONLY} times compiled, {n_ref} interpreted"


# ---------------------------------------------------------------------------
# records read later: after the environment or the transform object changed
# ---------------------------------------------------------------------------
REBUILD_REFUSED = "cannot be rebuilt"


def picture_or_error(record):
    """The record's picture, or the TransformError a compiled record raises when what its move
    used has changed since (its reads, writes and Jacobian are rebuilt on first access)."""
    try:
        return record_picture(record, deep=True)
    except il.TransformError as exc:
        assert REBUILD_REFUSED in str(exc) and "compile=False" in str(exc), str(exc)
        return REBUILD_REFUSED


def chain_records(compile, after, steps=30):
    """The records of a chain, read (pictured) only after ``after(f)`` ran at its end."""
    torch.manual_seed(0)
    trace, _ = small.generate((), {"k": 1})
    f = il.transform(_direct_body)
    f.compile = compile
    torch.manual_seed(1)
    records = []
    for _ in range(steps):
        rec = involutive_move(trace, small_aux, (), f)
        records.append(rec)
        trace = rec.trace
    after(f)
    return [picture_or_error(r) for r in records], f


@pytest.mark.parametrize("what", ["global rebound", "fn replaced", "autodiff torch", "name"])
def test_records_read_after_the_move_describe_the_move(what):
    """A record is the move's: reading ``record.jacobian``/``written`` later, after a global
    was rebound or the transform object changed, must show what the move did -- or, for a
    compiled move whose record can no longer be rebuilt as the move ran (a global it read was
    rebound since), say so with a TransformError; never another move's numbers."""
    global SCALE_C

    def after(f):
        global SCALE_C
        if what == "global rebound":
            SCALE_C = 0.25
        elif what == "fn replaced":
            f.fn = split_merge_with(lambda u, mu: 3.0 * u)
        elif what == "autodiff torch":
            f.autodiff = "torch"
        else:
            f.name = "renamed"

    try:
        SCALE_C = 1.0
        ref, _ = chain_records(False, after)
        SCALE_C = 1.0
        got, f = chain_records(True, after)
        assert f.compiled.hits > 0
        refused = [i for i, b in enumerate(got) if b == REBUILD_REFUSED]
        # only a rebound global makes a record unbuildable; the transform object's own changes
        # (its function, autodiff, name) are undone by the rebuild
        assert bool(refused) == (what == "global rebound"), refused
        for i, (a, b) in enumerate(zip(ref, got)):
            assert a == b or i in refused, f"record {i}: {first_difference(a, b)}"
    finally:
        SCALE_C = 1.0


# ---------------------------------------------------------------------------
# the tracer's own signals caught by the transform; overflow in generated arithmetic
# ---------------------------------------------------------------------------
def _bare_except_spread(u, mu):
    try:
        c = 2.0 if float(u) > 0.9 else 1.0
    except:                     # noqa: E722 -- a bare except is what is being tested
        c = 1.0
    return u * c


def _base_exception_spread(u, mu):
    try:
        c = 2.0 if float(u) > 0.9 else 1.0
    except BaseException:
        c = 1.0
    return u * c


@pytest.mark.parametrize("spread", [_bare_except_spread, _base_exception_spread], ids=["bare", "BaseException"])
def test_a_transform_catching_every_exception(spread):
    """float(u) works on the interpreter; if the tracer's refusal were caught by the
    transform's own ``except``, the key would bake in the fallback branch."""
    pictures, _ = same_chain(small_chain(split_merge_with(spread)), steps=60)


@pytest.mark.parametrize("name, formula, values", [
    ("square overflows", lambda a, u: a ** 2 * 1e-300 + u, {4: 1e200, 8: -1e200}),
    ("exp overflows", lambda a, u: torch.exp(a) * 1e-300 + u, {4: 800.0}),
    ("product overflows", lambda a, u: (a * 1e300) * 1e-300 + u, {4: 1e10}),
    ("tiny underflows", lambda a, u: (a * 1e-300) * 1e300 + u, {4: 1e-30}),
])
def test_overflow_and_underflow_in_generated_arithmetic(name, formula, values):
    def build():
        trace, _ = one_a.generate((), {"a": 1.0})
        return Kernels(trace, [(u_aux, (), il.transform(_ab_body(formula)))])

    same_chain(build, steps=40, before=set_a(values))


@pytest.mark.parametrize("name, op", [
    ("flag * 1", lambda flag: flag * 1),
    ("1 * flag", lambda flag: 1 * flag),
    ("flag + 0", lambda flag: flag + 0),
    ("0 + flag", lambda flag: 0 + flag),
    ("flag - 0", lambda flag: flag - 0),
    ("-(-flag)", lambda flag: -(-flag)),
    ("(flag + 1) - 1", lambda flag: (flag + 1) - 1),
    ("flag + flag - flag", lambda flag: flag + flag - flag),
    ("flag", lambda flag: flag),
])
def test_arithmetic_identities_on_a_bool_read_keep_the_written_type(name, op):
    """``flag * 1`` is the int 1 or 0, not the bool: the new trace holds what was written."""
    def body(model_in, aux_in, model_out, aux_out):
        flag = read(aux_in["flag"], discrete)
        write(aux_out["flag"], op(flag), discrete)
        a = read(model_in["a"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["a"], a + u, continuous)
        write(aux_out["u"], -u, continuous)
        write(model_out["b"], read(model_in["b"], continuous) * 1.0, continuous)

    def before(i, trace):
        global P_FLAG
        P_FLAG = 0.5
        return trace

    try:
        same_chain(ab_build_q(body, flag_aux), steps=30, before=before, deep=True)
    finally:
        globals()["P_FLAG"] = 0.0


def ab_build_q(body, q):
    def build():
        trace, _ = one_a.generate((), {"a": 0.3})
        return Kernels(trace, [(q, (), il.transform(body))])
    return build


@il.gen
def int_or_bool():
    """``flag`` is a bool (bernoulli) when m, an int (uniform_discrete) otherwise."""
    m = il.uniform_discrete(0, 1) @ "m"
    (il.bernoulli(0.5) if m else il.uniform_discrete(0, 1)) @ "flag"
    il.normal(0.0, 1.0) @ "a"
    il.normal(0.0, 1.0) @ "b"


def test_a_read_that_is_an_int_on_some_moves_and_a_bool_on_others():
    def body(model_in, aux_in, model_out, aux_out):
        flag = read(model_in["flag"], discrete)
        write(model_out["flag"], flag + 0, discrete)
        a = read(model_in["a"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["a"], a + u, continuous)
        write(aux_out["u"], -u, continuous)

    def build():
        trace, _ = int_or_bool.generate((), {"m": 0, "flag": 1})
        return Kernels(trace, [(u_aux, (), il.transform(body))])

    def before(i, trace):
        if i == 20:
            trace, _, _ = trace.update({"m": 1, "flag": True})
        return trace

    same_chain(build, steps=30, before=before)


# ---------------------------------------------------------------------------
# models with combinators, many addresses, discrete vectors, formatted addresses
# ---------------------------------------------------------------------------
@il.gen
def point(x):
    z = il.normal(x, 1.0) @ "z"
    il.normal(z, 0.5) @ "y"


points = il.Map(point)


@il.gen
def map_model(n):
    m = il.uniform_discrete(1, n) @ "m"
    points(torch.arange(n, dtype=torch.float64) * 0.5) @ "pts"
    return m


@il.gen
def pick_aux(trace, n):
    il.uniform_discrete(0, n - 1) @ "i"
    il.normal(0.0, 0.3) @ "u"


def _map_body(model_in, aux_in, model_out, aux_out):
    i = read(aux_in["i"], discrete)
    copy(aux_in["i"], aux_out["i"])
    m = read(model_in["m"], discrete)
    u = read(aux_in["u"], continuous)
    z = read(model_in["pts", i, "z"], continuous)
    y = read(model_in["pts", m - 1, "y"], continuous)
    write(model_out["pts", i, "z"], z + u + y * 0.0, continuous)
    if i != m - 1:
        write(model_out["pts", m - 1, "y"], y * 1.0, continuous)
    write(aux_out["u"], -u, continuous)


def test_map_combinator_nested_addresses():
    def build():
        trace, _ = map_model.generate((6,), {"m": 3})
        return Kernels(trace, [(pick_aux, (6,), il.transform(_map_body))])

    def before(i, trace):
        if i % 9 == 8:
            trace, _, _ = trace.update({"m": 1 + i % 6})
        return trace

    same_chain(build, steps=50, before=before, deep=True)


def _kind_switching_many(n_extra):
    @il.gen
    def kind_switch_many():
        """m = 1: nothing changes kind or disappears; m = 0: z changes kind with k;
        m = 2: "gone" exists only when k."""
        m = il.uniform_discrete(0, 2) @ "m"
        k = il.uniform_discrete(0, 1) @ "k"
        if k > m:
            il.poisson(3.0) @ "z"
        else:
            il.normal(0.0, 1.0) @ "z"
        il.normal(0.0, 1.0) @ "a"
        for e in range(n_extra):
            il.normal(0.0, 1.0) @ ("e", e)
        if m == 2 and k:
            il.normal(0.0, 1.0) @ "gone"
    return kind_switch_many


@pytest.mark.parametrize("n_extra", [0, 45])
def test_kind_change_and_lost_input_with_many_untouched_addresses(n_extra):
    """Above 40 addresses the interpreter visits only the touched ones: the kind change of z
    and the disappearance of "gone" must still raise after the keys compiled (with m = 1)."""
    model = _kind_switching_many(n_extra)

    def build():
        trace, _ = model.generate((), {"m": 1, "k": 0, "z": 0.5})
        return Kernels(trace, [(u_aux, (), il.transform(_flip_k_one))])

    def before(i, trace):
        if i % 11 == 10:
            m = (trace["m"] + 1) % 3
            k = trace["k"]
            cons = {"m": m, "z": 2 if k > m else 0.5}
            if m == 2 and k:
                cons["gone"] = 0.1
            trace, _, _ = trace.update(cons)
        return trace

    pictures, _ = same_chain(build, steps=66, before=before)
    raised = [p[2] for p in pictures if p[0] == "raised"]
    assert any("disappears" in r for r in raised) and any("is continuous" in r or "is discrete" in r
                                                         for r in raised)
    assert outcomes(pictures)[0] > 0


@il.gen
def counts_model():
    il.iid(il.poisson(3.0), 3) @ "c"
    il.normal(0.0, 1.0) @ "a"


def test_a_discrete_vector_read():
    def body(model_in, aux_in, model_out, aux_out):
        c = read(model_in["c"], discrete)
        a = read(model_in["a"], continuous)
        u = read(aux_in["u"], continuous)
        scale = 1.0 + int(c[0]) * 0.1 + float(c.sum()) * 0.01
        write(model_out["a"], a + u * scale, continuous)
        write(aux_out["u"], -u, continuous)

    def build():
        trace, _ = counts_model.generate((), {"c": torch.tensor([1, 2, 3])})
        return Kernels(trace, [(u_aux, (), il.transform(body))])

    def before(i, trace):
        if i % 7 == 6:
            trace, _, _ = trace.update({"c": torch.tensor([i % 5, 1, 2])})
        return trace

    same_chain(build, steps=40, before=before)


@il.gen
def named_model():
    k = il.uniform_discrete(1, 3) @ "k"
    for j in range(1, 4):
        il.normal(0.0, 1.0) @ f"mu{j}"


@il.gen
def named_aux(trace):
    il.normal(0.0, 1.0) @ "u"


def test_addresses_formatted_from_a_discrete_value():
    def body(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        name = f"mu{k}"
        mu = read(model_in[name], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["mu" + str(k)], mu + u, continuous)
        write(aux_out["u"], -u, continuous)

    def build():
        trace, _ = named_model.generate((), {"k": 1})
        return Kernels(trace, [(named_aux, (), il.transform(body))])

    def before(i, trace):
        if i % 6 == 5:
            trace, _, _ = trace.update({"k": 1 + (i // 6) % 3})
        return trace

    same_chain(build, steps=40, before=before)


def spread_with_attribute(u, mu):
    return u * spread_with_attribute.c


spread_with_attribute.c = 1.0


@pytest.mark.parametrize("where", ["global function", "closure function"])
def test_attribute_of_a_function_changed(where):
    """``spread.c`` (a function attribute, a common memo/config idiom) changed at move 20."""
    if where == "global function":
        spread = spread_with_attribute
    else:
        def spread(u, mu):
            return u * spread.c
        spread.c = 1.0

    def before(i, trace):
        spread.c = 1.0 if i < 20 else 3.0
        return trace

    try:
        same_chain(small_chain(split_merge_with(spread)), before=before, min_hits=3)
    finally:
        spread_with_attribute.c = 1.0


# ---------------------------------------------------------------------------
# work counters (il.count_work: what notebooks show about incremental update)
# ---------------------------------------------------------------------------
def work_of_chain(compile, read_records):
    data = mixture.synthetic_data(40, seed=6)
    torch.manual_seed(2)
    trace = mixture.initial_trace(data, k=3)
    f = il.transform(mixture.split_merge.fn, name="split_merge")
    f.compile = compile
    for _ in range(25):                       # learn the keys first
        trace = involutive_move(trace, mixture.split_merge_aux, (), f).trace
    with il.count_work() as work:
        for _ in range(15):
            rec = involutive_move(trace, mixture.split_merge_aux, (), f)
            if read_records:
                rec.jacobian.logabsdet, rec.written
            trace = rec.trace
    return (work.logpdf_evaluations, work.executions), f


@pytest.mark.parametrize("read_records", [False, True], ids=["moves", "moves and their records"])
def test_work_counted_by_count_work(read_records):
    ref, _ = work_of_chain(False, read_records)
    got, f = work_of_chain(True, read_records)
    assert f.compiled.hits > 5
    assert got == ref, f"count_work: compiled {got}, interpreted {ref} (logpdf evaluations, executions)"


# ---------------------------------------------------------------------------
# code whose file name merely starts like the engine's; a profiler running
# ---------------------------------------------------------------------------
def test_user_code_whose_path_starts_with_the_engine_directory():
    """A user's module at ``<site>/imcmc_lab_plugins/helpers.py`` is not engine code."""
    engine_dir = os.path.dirname(il.__file__)
    lib = types.ModuleType("imcmc_lab_plugins_helpers")
    source = "K = 1.0\ndef spread(u, mu):\n    return u * K\n"
    exec(compile(source, engine_dir + "_plugins" + os.sep + "helpers.py", "exec"), lib.__dict__)

    def before(i, trace):
        lib.K = 1.0 if i < 20 else 3.0
        return trace

    same_chain(small_chain(split_merge_with(lib.spread)), before=before, min_hits=3)


def test_moves_under_a_running_profiler():
    """cProfile (what %prun uses) is running while keys are learned: same moves, and the
    profiler still works afterwards."""
    import cProfile
    import pstats

    def run(compile):
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            pictures, final, k = run_chain(small_chain(split_merge_with(lambda u, mu: u)), 30, compile)
        finally:
            profiler.disable()
        stats = pstats.Stats(profiler)
        return pictures, final, k, any("involutive_move" in str(key) for key in stats.stats)

    ref, ref_final, _, ref_seen = run(False)
    got, got_final, k, got_seen = run(True)
    assert ref == got and ref_final == got_final
    assert ref_seen and got_seen
    assert k.transforms[0].compiled.hits > 0


# ---------------------------------------------------------------------------
# vector values: truth value, and operations the tracer's vector lacks (Python's own TypeError)
# ---------------------------------------------------------------------------
@il.gen
def vec2_model():
    il.iid(il.normal(0.0, 1.0), 2) @ "v"
    il.iid(il.normal(0.0, 1.0), 1) @ "one"


@il.gen
def vec2_mv_model():
    il.mvnormal(torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)) @ "v"
    il.mvnormal(torch.zeros(1, dtype=torch.float64), torch.eye(1, dtype=torch.float64)) @ "one"


def _vec_body(decide):
    def body(model_in, aux_in, model_out, aux_out):
        v = read(model_in["v"], continuous)
        one = read(model_in["one"], continuous)
        u = read(aux_in["u"], continuous)
        c = 2.0 if decide(v, one) else 1.0
        write(model_out["v"], v + u * c, continuous)
        write(model_out["one"], one * 1.0, continuous)
        write(aux_out["u"], -u, continuous)
    return body


def _try_pow(v, one):
    try:
        return bool((v ** 2).sum() > 3.0)
    except TypeError:
        return False


def _try_float(v, one):
    try:
        return float(one) > 0.9
    except TypeError:
        return False


def _try_less(v, one):
    try:
        return bool((one < -0.9)[0])
    except TypeError:
        return False


@pytest.mark.parametrize("name, decide", [
    ("truth of a one-element vector", lambda v, one: bool(one)),
    ("try v ** 2 except TypeError", _try_pow),
    ("try float(vector) except TypeError", _try_float),
    ("try vector < x except TypeError", _try_less),
])
@pytest.mark.parametrize("model", ["iid", "mvnormal"])
def test_vector_operations_the_interpreter_runs(name, decide, model):
    def build():
        gen = vec2_model if model == "iid" else vec2_mv_model
        trace, _ = gen.generate((), {"one": torch.tensor([0.5], dtype=torch.float64)})
        return Kernels(trace, [(u_aux, (), il.transform(_vec_body(decide)))])

    def before(i, trace):
        if i % 6 == 5:
            value = [0.0, 1.5, -1.5][(i // 6) % 3]
            trace, _, _ = trace.update({"one": torch.tensor([value], dtype=torch.float64),
                                        "v": torch.tensor([value, 2.0 * value], dtype=torch.float64)})
        return trace

    same_chain(build, steps=60, before=before)


def light_chain(build, steps, compile, before=None, seed=0):
    """Moves only: log alpha, decision and new model trace, never reading the record's
    interpreter-made parts (what a sampler does)."""
    torch.manual_seed(seed)
    k = build()
    for f in k.transforms:
        f.compile = compile
    torch.manual_seed(seed + 1)
    trace, out = k.trace, []
    for i in range(steps):
        if before is not None:
            trace = before(i, trace)
        q, q_args, f = k.moves[i % len(k.moves)]
        try:
            rec = involutive_move(trace, q, q_args, f)
        except Exception as exc:       # noqa: BLE001
            out.append((type(exc).__name__, str(exc)))
            continue
        out.append((bits(float(rec.log_alpha)), rec.accepted, trace_picture(rec.model_out)))
        trace = rec.trace
    light_chain.hits = sum(f.compiled.hits for f in k.transforms)
    return out


def test_truth_value_of_a_one_element_vector_in_a_sampler():
    """``if vector:`` with one element that is exactly 0.0 on some moves, records never read."""
    def build():
        trace, _ = vec2_mv_model.generate((), {"one": torch.tensor([0.5], dtype=torch.float64)})
        return Kernels(trace, [(u_aux, (), il.transform(_vec_body(lambda v, one: bool(one))))])

    def before(i, trace):
        if i % 6 == 5:
            value = [0.0, 1.5, -1.5][(i // 6) % 3]
            trace, _, _ = trace.update({"one": torch.tensor([value], dtype=torch.float64),
                                        "v": torch.tensor([value, 2.0 * value], dtype=torch.float64)})
        return trace

    ref = light_chain(build, 60, False, before)
    got = light_chain(build, 60, True, before)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"move {i}: {first_difference(a, b)}"


@pytest.mark.parametrize("name, decide", [
    ("try v ** 2 except TypeError", _try_pow),
    ("try float(vector) except TypeError", _try_float),
    ("try vector < x except TypeError", _try_less),
    ("try +vector except TypeError", lambda v, one: _try(lambda: bool((+one).sum() > 0.9))),
    ("truth of a one-element vector", lambda v, one: bool(one)),
])
def test_vector_operations_after_keys_compiled_on_small_values(name, decide):
    """20 moves with small values (every decision False: the key the tracer makes agrees with
    the interpreter there), then large ones (the interpreter decides True)."""
    def build():
        trace, _ = vec2_mv_model.generate((), {"one": torch.tensor([0.5], dtype=torch.float64)})
        return Kernels(trace, [(u_aux, (), il.transform(_vec_body(decide)))])

    def before(i, trace):
        if i < 20:
            v, one = [0.1, 0.2], [0.0 if name.startswith("truth") else 0.5]
        else:
            v, one = [1.5, 3.0], [[1.5, -1.5][i % 2]]
        trace, _, _ = trace.update({"v": torch.tensor(v, dtype=torch.float64),
                                    "one": torch.tensor(one, dtype=torch.float64)})
        return trace

    ref = light_chain(build, 30, False, before)
    got = light_chain(build, 30, True, before)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"move {i}: {first_difference(a, b)}"


def _try(fn):
    try:
        return fn()
    except TypeError:
        return False


# ---------------------------------------------------------------------------
# support failures on compiled keys: p(x') = 0 and q_x'(y') = 0
# ---------------------------------------------------------------------------
@il.gen
def positive_model():
    il.gamma(2.0, 1.0) @ "s"
    il.normal(0.0, 1.0) @ "b"


@il.gen
def beta_aux(trace):
    il.beta(2.0, 2.0) @ "p"


def test_support_failures_on_compiled_keys():
    """s' = s + 2p - 1.2 can be negative (p(x') = 0); p' = 1.3 - p can leave (0, 1) (q = 0)."""
    def body(model_in, aux_in, model_out, aux_out):
        s = read(model_in["s"], continuous)
        p = read(aux_in["p"], continuous)
        write(model_out["s"], s + 2.0 * p - 1.2, continuous)
        write(aux_out["p"], 1.3 - p, continuous)
        write(model_out["b"], read(model_in["b"], continuous) * 1.0, continuous)

    def build():
        trace, _ = positive_model.generate((), {"s": 0.4})
        return Kernels(trace, [(beta_aux, (), il.transform(body))])

    def before(i, trace):
        if i % 5 == 4:
            trace, _, _ = trace.update({"s": 0.2 + 0.3 * (i % 3)})
        return trace

    pictures, k = same_chain(build, steps=60, before=before, deep=True)
    problems = [p[1]["problem"] for p in pictures if p[0] == "move" and p[1].get("problem")]
    assert any("p(x') = 0" in s for s in problems) and any("q_{x'}(y') = 0" in s for s in problems)
    assert k.transforms[0].compiled.hits > 0


# ---------------------------------------------------------------------------
# seeded random transforms (a small regression net; larger runs found nothing at 52d96e6:
# 1,300 scalar and 700 vector transforms, 30-40 moves each)
# ---------------------------------------------------------------------------
FUZZ_CONSTS = ["0.0", "1.0", "-1.0", "2.0", "0.5", "3", "1", "0", "1e-300", "1e300", "-0.0"]
FUZZ_SPECIAL = [0.0, -0.0, 1.0, -1.0, 1e-300, 1e300, 2.0, 0.5]


def fuzz_expr(rng, names, depth):
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(names + FUZZ_CONSTS[:rng.choice([2, 5, len(FUZZ_CONSTS)])])
    r = rng.random()
    sub = lambda: fuzz_expr(rng, names, depth - 1)      # noqa: E731
    if r < 0.55:
        return f"({sub()} {rng.choice(['+', '-', '*', '/'])} {sub()})"
    if r < 0.7:
        return f"torch.{rng.choice(['exp', 'sqrt', 'log'])}({rng.choice(names)} * 0.25 + {sub()})"
    if r < 0.8:
        return f"(-{sub()})"
    if r < 0.9:
        return f"({sub()} ** 2)"
    return f"({sub()} if {sub()} {rng.choice(['<', '>', '<=', '>=', '==', '!='])} {sub()} else {sub()})"


def fuzz_scalar_source(rng):
    g, h, s = fuzz_expr(rng, ["b", "u"], 3), fuzz_expr(rng, ["a2", "u"], 3), fuzz_expr(rng, ["u", "b"], 2)
    return (
        "def body(model_in, aux_in, model_out, aux_out):\n"
        "    a = read(model_in['a'], continuous)\n"
        "    b = read(model_in['b'], continuous)\n"
        "    u = read(aux_in['u'], continuous)\n"
        f"    a2 = a * torch.exp({s} * 0.0 + u * 0.1) + {g}\n"
        f"    b2 = b + {h}\n"
        "    write(model_out['a'], a2, continuous)\n"
        "    write(model_out['b'], b2, continuous)\n"
        "    write(aux_out['u'], -u, continuous)\n")


def fuzz_body(source, name):
    ns = {"read": read, "write": write, "copy": copy, "continuous": continuous, "discrete": discrete,
          "torch": torch}
    exec(compile(source, name, "exec"), ns)
    return ns["body"]


@pytest.mark.parametrize("block", range(4))
def test_fuzzed_scalar_transforms(block):
    hits = 0
    for seed in range(block * 15, block * 15 + 15):
        rng = random.Random(seed)
        body = fuzz_body(fuzz_scalar_source(rng), f"<fuzz {seed}>")
        values = [rng.choice(FUZZ_SPECIAL) for _ in range(30)]

        def build():
            trace, _ = one_a.generate((), {"a": 0.3, "b": 0.7})
            return Kernels(trace, [(u_aux, (), il.transform(body))])

        def before(i, trace):
            if i >= 10 and i % 3 == 0:
                try:
                    trace, _, _ = trace.update({"a": values[i], "b": values[(i * 7) % 30]})
                except il.errors.ImcmcError:
                    pass
            return trace

        ref, got = light_chain(build, 30, False, before), light_chain(build, 30, True, before)
        hits += light_chain.hits
        for i, (a, b) in enumerate(zip(ref, got)):
            assert a == b, f"seed {seed}, move {i}: {first_difference(a, b)}"
    assert hits > 50


@il.gen
def fuzz_vec_model(kind):
    k = il.uniform_discrete(2, 5) @ "k"
    if kind == "dirichlet":
        il.dirichlet(torch.full((k,), 2.0, dtype=torch.float64)) @ "w"
    else:
        il.mvnormal(torch.zeros(k, dtype=torch.float64), torch.eye(k, dtype=torch.float64)) @ "w"


@il.gen
def fuzz_vec_aux(trace):
    il.uniform_discrete(1, trace["k"]) @ "j"
    il.normal(0.0, 0.5) @ "u"


def fuzz_vec_template(rng, x):
    c = rng.choice(["torch.exp(u)", "(1.0 + u * u)", "2.0", "torch.exp(-u)", "(w[0] + 1.0)"])
    return rng.choice([
        f"torch.cat([{x}[:j - 1], ({x}[j - 1] * {c}).reshape(1), {x}[j:]])",
        f"torch.cat([{x}[j:], {x}[:j]])",
        f"torch.cat([{x}[:j - 1], {x}[-1:], {x}[j:-1], {x}[j - 1:j]])",
        f"({x} * torch.exp(u * 0.3))",
        f"torch.cat([{x}[:1] * {c}, {x}[1:]])",
        f"torch.stack([{x}[i] * ({c} if i == j - 1 else 1.0) for i in range(k)])",
        f"{x}[[k - 1 - i for i in range(k)]]",
        f"torch.cat([{x}[:k - j], {x}[k - j:] * {c}])",
        f"({x} + u * 0.1)",
        f"({x} / {x}.sum())",
    ])


@pytest.mark.parametrize("block", range(3))
def test_fuzzed_vector_transforms(block):
    hits = 0
    for seed in range(block * 10, block * 10 + 10):
        rng = random.Random(seed)
        kind = rng.choice(["dirichlet", "mvnormal"])
        x = "w"
        for _ in range(rng.randint(1, 3)):
            x = fuzz_vec_template(rng, x)
        norm = "    out = out / out.sum()\n" if kind == "dirichlet" and rng.random() < 0.8 else ""
        body = fuzz_body(
            "def body(model_in, aux_in, model_out, aux_out):\n"
            "    k = read(model_in['k'], discrete)\n"
            "    j = read(aux_in['j'], discrete)\n"
            "    copy(aux_in['j'], aux_out['j'])\n"
            "    w = read(model_in['w'], continuous)\n"
            "    u = read(aux_in['u'], continuous)\n"
            f"    out = {x}\n" + norm +
            "    write(model_out['w'], out, continuous)\n"
            "    write(aux_out['u'], -u, continuous)\n", f"<vfuzz {seed}>")

        def build():
            trace, _ = fuzz_vec_model.generate((kind,), {"k": 3})
            return Kernels(trace, [(fuzz_vec_aux, (), il.transform(body))])

        def before(i, trace):
            if i % 4 == 3:
                trace, _ = fuzz_vec_model.generate((kind,), {"k": 2 + (i * 7 + seed) % 4})
            return trace

        ref, got = light_chain(build, 40, False, before), light_chain(build, 40, True, before)
        hits += light_chain.hits
        for i, (a, b) in enumerate(zip(ref, got)):
            assert a == b, f"seed {seed}, move {i}: {first_difference(a, b)}"
    assert hits > 50


def test_record_read_after_the_user_changed_a_trace_value_in_place():
    """A value taken from ``record.model_in`` and changed in place (the engine detects that on
    the trace's next use): reading the move's record afterwards gives the move's record, or (a
    compiled move, whose record is rebuilt on first access) a TransformError saying it cannot
    be rebuilt -- never a record of other numbers."""
    def records(compile):
        torch.manual_seed(0)
        trace, _ = small.generate((), {"k": 1})
        f = il.transform(split_merge_with(lambda u, mu: u))
        f.compile = compile
        torch.manual_seed(1)
        recs = []
        for _ in range(30):
            rec = involutive_move(trace, small_aux, (), f)
            recs.append(rec)
            trace = rec.trace
        last = recs[-1]
        last.model_in["mu", 1].add_(1.0)        # the user's in-place edit of a loaned value
        out = []
        for rec in recs[-3:]:
            try:
                out.append(picture_or_error(rec))
            except Exception as exc:       # noqa: BLE001
                out.append(f"{type(exc).__name__}: {exc}")
        return out, f

    ref, _ = records(False)
    got, f = records(True)
    assert f.compiled.hits > 0
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b or b == REBUILD_REFUSED, f"record {i}: {first_difference(a, b)}"


@il.gen
def no_choices(trace):
    pass


def test_one_trace_transform_with_and_without_an_auxiliary_program():
    """The same transform alternately with q=None (EMPTY_AUX) and a q that draws nothing."""
    def swap(t_in, t_out):
        a = read(t_in["a"], continuous)
        b = read(t_in["b"], continuous)
        write(t_out["a"], -b, continuous)
        write(t_out["b"], a * 2.0, continuous)

    def build():
        trace, _ = one_a.generate((), {"a": 1.0})
        f = il.transform(swap)
        return Kernels(trace, [(None, (), f), (no_choices, (), f)], [f])

    same_chain(build, steps=40, deep=True, min_hits=10)


def test_checked_and_unchecked_moves_with_one_transform():
    """check=True moves (interpreter, Algorithm 4) interleaved with unchecked ones (compiled)."""
    def build():
        trace, _ = small.generate((), {"k": 1})
        f = il.transform(split_merge_with(lambda u, mu: u))
        return Kernels(trace, [(small_aux, (), f)])

    holder = {}

    def run(compile):
        torch.manual_seed(0)
        k = build()
        k.transforms[0].compile = compile
        holder["f"] = k.transforms[0]
        torch.manual_seed(1)
        trace, out = k.trace, []
        for i in range(40):
            rec = involutive_move(trace, small_aux, (), k.transforms[0], check=(i % 3 == 0))
            out.append(record_picture(rec))
            trace = rec.trace
        return out

    ref = run(False)
    got = run(True)
    assert holder["f"].compiled.hits > 5
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"move {i}: {first_difference(a, b)}"


# ---------------------------------------------------------------------------
# white box: a wrong generated key (a stand-in for a tracer bug) met by the sampled check
# ---------------------------------------------------------------------------
def test_a_checked_hit_that_disagrees_gives_the_interpreters_move():
    """When a checked hit disagrees, the move must be exactly the interpreter's: its new model
    trace, log p(x') - log p(x), q terms and log |det J| -- not the interpreter's record on top of
    an update made from the wrong generated values. (White box: wraps the serving function.)"""
    def run(compile, corrupt):
        torch.manual_seed(0)
        trace, _ = small.generate((), {"k": 1})
        f = il.transform(split_merge_with(lambda u, mu: u))
        f.compile = compile
        torch.manual_seed(1)
        out = []
        for i in range(40):
            if corrupt and i == 30:
                cache = f._compiled_cache
                fn, keys, env = cache.serving
                assert fn is not None, "nothing compiled by move 30"

                def wrong(x_flat, y_flat, _fn=fn):
                    res = _fn(x_flat, y_flat)
                    if res is None:
                        return None
                    mo = dict(res[0])
                    for a, v in mo.items():
                        if isinstance(v, torch.Tensor) and v.dtype == torch.float64:
                            mo[a] = v + 0.25
                    return (mo,) + tuple(res[1:])

                cache.serving = (wrong, keys, env)
                cache.checked = {key: 64 for key in keys}       # the next hit of every key is checked
            rec = involutive_move(trace, small_aux, (), f)
            out.append((bits(float(rec.log_alpha)), rec.accepted, trace_picture(rec.model_out),
                        bits(float(rec.model_log_ratio)), bits(float(rec.logabsdet))))
            trace = rec.trace
        return out, f

    ref, _ = run(False, False)
    got, f = run(True, True)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"move {i} (generated code corrupted from move 30): {first_difference(a, b)}"
    assert any("disagreed" in r for r in f.compiled.refusals)


# ---------------------------------------------------------------------------
# the notebook flow: %%gen / %%transform cells, a helper cell re-run with a new body
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    saved = os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = str(tmp_path_factory.mktemp("ipython"))
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    cfg = Config()
    cfg.HistoryManager.hist_file = ":memory:"
    sh = InteractiveShell.instance(config=cfg)
    assert sh.run_cell("%load_ext imcmc_lab").success
    yield sh
    if saved is None:
        os.environ.pop("IPYTHONDIR", None)
    else:
        os.environ["IPYTHONDIR"] = saved


NOTEBOOK_CELLS = [
    '''%%gen
def nb_model():
    k ~ uniform_discrete(1, 3)
    for j in range(1, k + 1):
        {("mu", j)} ~ normal(0, 3)
''',
    '''%%gen
def nb_aux(trace):
    k = trace["k"]
    split = True if k == 1 else (False if k == 3 else {"split"} ~ bernoulli(0.5))
    if split:
        u ~ normal(0, 1)
''',
    '''SCALE = 1.0
def spread(u):
    return u * SCALE
''',
    '''%%transform nb_split_merge (model_in, aux_in) to (model_out, aux_out)
k = @read(model_in["k"], discrete)
split = True if k == 1 else (False if k == 3 else @read(aux_in["split"], discrete))
if split:
    @write(model_out["k"], k + 1, discrete)
    if k + 1 == 2:
        @write(aux_out["split"], False, discrete)
    mu = @read(model_in["mu", k], continuous)
    d = spread(@read(aux_in["u"], continuous))
    @write(model_out["mu", k], mu - d, continuous)
    @write(model_out["mu", k + 1], mu + d, continuous)
else:
    @write(model_out["k"], k - 1, discrete)
    if k - 1 == 2:
        @write(aux_out["split"], True, discrete)
    mu1 = @read(model_in["mu", k - 1], continuous)
    mu2 = @read(model_in["mu", k], continuous)
    @write(model_out["mu", k - 1], (mu1 + mu2) / 2, continuous)
    @write(aux_out["u"], (mu2 - mu1) / 2 / SCALE, continuous)
''',
]


def test_notebook_cells_redefined_between_moves(notebook):
    """A helper cell re-run with a new body (move 15) and a constant cell re-run (move 25)."""
    def chain(compile):
        for cell in NOTEBOOK_CELLS:
            assert notebook.run_cell(cell).success
        ns = notebook.user_ns
        f = ns["nb_split_merge"]
        f.compile = compile
        torch.manual_seed(0)
        trace, _ = ns["nb_model"].generate((), {"k": 1})
        out = []
        for i in range(40):
            if i == 15:
                assert notebook.run_cell("def spread(u):\n    return u * 2.0 * SCALE\n").success
            if i == 25:
                assert notebook.run_cell("SCALE = 0.5\n").success
            rec = involutive_move(trace, ns["nb_aux"], (), f)
            out.append(record_picture(rec))
            trace = rec.trace
        return out, f

    ref, _ = chain(False)
    got, f = chain(True)
    assert f.compiled.hits > 5
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"move {i}: {first_difference(a, b)}"


@il.gen
def extra_aux(trace):
    if trace["k"] == 1:
        il.normal(0.0, 1.0) @ "u"


def test_a_write_the_new_model_does_not_visit_on_a_compiled_key():
    """k 1 -> 2 writes "extra", which the model has only when m: with m False (untouched by the
    transform) the update refuses the constraint; the error names the address and the line."""
    def body(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        if k == 1:
            write(model_out["k"], 2, discrete)
            write(model_out["extra"], read(aux_in["u"], continuous) * 2.0, continuous)
        else:
            write(model_out["k"], 1, discrete)
            write(aux_out["u"], read(model_in["extra"], continuous) / 2.0, continuous)

    def build():
        trace, _ = gated.generate((), {"m": True, "k": 1})
        return Kernels(trace, [(extra_aux, (), il.transform(body))])

    def before(i, trace):
        if i >= 20 and trace["m"] and trace["k"] == 1:
            trace, _, _ = trace.update({"m": False})
        return trace

    pictures, k = same_chain(build, steps=40, before=before, min_hits=5)
    assert any("does not have that address" in p[2] for p in pictures if p[0] == "raised")


def shared_values(rec):
    """Which new values are the very objects of old ones (copies share them on the
    interpreter; the engine's loans and incremental update see identity)."""
    sources = {}
    for side, trace in (("model", rec.model_in), ("aux", rec.aux_in)):
        if trace is None or not hasattr(trace, "flat_records"):
            continue
        for a, r in trace.flat_records().items():
            sources[id(r.value)] = (side, a)
    out = []
    for side, trace in (("model", rec.model_out), ("aux", rec.aux_out)):
        if trace is None or not hasattr(trace, "flat_records"):
            continue
        for a, r in trace.flat_records().items():
            if isinstance(r.value, torch.Tensor):
                out.append((side, a, sources.get(id(r.value))))
    return out


def test_copied_values_are_shared_objects_as_on_the_interpreter():
    data = mixture.synthetic_data(30, seed=8)

    def run(compile):
        torch.manual_seed(3)
        trace = mixture.initial_trace(data, k=4)
        fs = [il.transform(getattr(mixture, n).fn, name=n) for n in ("swap_last", "birth_death", "split_merge")]
        qs = [mixture.swap_aux, mixture.birth_death_aux, mixture.split_merge_aux]
        for f in fs:
            f.compile = compile
        torch.manual_seed(4)
        out = []
        for i in range(180):
            rec = involutive_move(trace, qs[i % 3], (), fs[i % 3])
            out.append(shared_values(rec))
            trace = rec.trace
        return out, fs

    ref, _ = run(False)
    got, fs = run(True)
    assert sum(f.compiled.hits for f in fs) > 10
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a == b, f"move {i}: {first_difference(a, b)}"


def test_traces_from_regenerate_and_update_interleaved():
    """Resimulation MH on the means (traces made by regenerate) between split/merge moves."""
    data = mixture.synthetic_data(40, seed=10)

    def make():
        f = il.transform(mixture.split_merge.fn, name="split_merge")
        kernel = il.cycle(il.MH(il.select("mu")), il.MH(il.select("weights")),
                          il.InvolutiveKernel(mixture.split_merge_aux, (), f),
                          il.InvolutiveKernel(mixture.move_cluster_aux, (0.5, 0.3),
                                              il.transform(mixture.move_cluster.fn, name="move_cluster")))
        return kernel, mixture.initial_trace(data, k=3)

    same_kernel_chain(make, steps=60, min_hits=20)


def test_per_point_model_with_many_untouched_addresses():
    """One choice per data point (n = 60 > 40 addresses: the interpreter's accounting visits
    only the touched ones; a compact family the transforms never touch)."""
    from imcmc_lab.examples.per_point import gmm_per_point, observations
    data = mixture.synthetic_data(60, seed=11)

    def build():
        trace, _ = gmm_per_point.generate((60,), dict(observations(data), k=3))
        fs = {n: il.transform(getattr(mixture, n).fn, name=n) for n in ("split_merge", "swap_last", "move_cluster")}
        return Kernels(trace, [(mixture.split_merge_aux, (), fs["split_merge"]), (mixture.swap_aux, (), fs["swap_last"]),
                               (mixture.move_cluster_aux, (0.5, 0.3), fs["move_cluster"])], list(fs.values()))

    same_chain(build, steps=90, min_hits=20, deep=True)
