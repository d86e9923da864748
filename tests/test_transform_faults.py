"""Faults inside transforms that used to give silently wrong answers (issue 16, items 3, 4,
13 and 14), each checked against what the user must see.

* A user's exception raised inside a transform propagates, once: the float path re-runs
  a transform on torch autograd only for its own "needs torch" signal.
* A derivative lost on the way (``float(x)``, ``math.exp(x)``) or a NaN derivative (a
  masked ``torch.where`` branch) makes ``log |det J|`` -inf or NaN; for an involution
  that is always a bug, so the move and ``check_involution`` raise, naming the
  written coordinates involved, and a checked move is rejected with that reason.
* In-place operators (``x *= -1``) act on tensors in place, so aliases see the change;
  the float path must give exactly what torch gives (here: by handing the transform
  to torch), checked on a generated corpus of transforms with in-place operators,
  aliases and views.
"""

from __future__ import annotations

import math
import random
import warnings

import pytest
import torch

import imcmc_lab as il
from imcmc_lab import continuous, read, write
from imcmc_lab.errors import InvolutionCheckError, TransformError
from imcmc_lab.transform.apply import apply_transform

F64 = torch.float64


@il.gen
def one_normal():
    il.normal(0.0, 1.0) @ "x"


@il.gen
def step_aux(trace):
    il.normal(0.0, 1.0) @ "u"


# ---------------------------------------------------------------------------
# item 3: a user's exception propagates, once
# ---------------------------------------------------------------------------
def test_users_exception_propagates_once_without_a_torch_rerun():
    calls = []

    @il.transform
    def flaky(t_in, t_out):
        x = read(t_in["x"], continuous)
        calls.append(1)                     # a side effect
        if len(calls) == 1:
            raise RuntimeError("the user's own error")
        write(t_out["x"], -x, continuous)

    torch.manual_seed(0)
    trace = one_normal.simulate()
    with pytest.raises(RuntimeError, match="the user's own error"):
        apply_transform(flaky, trace)
    assert calls == [1]                     # run once: not re-run on torch
    assert flaky.torch_fallbacks == 0 and flaky.last_fallback is None


def test_users_exception_on_every_run_is_raised_once():
    calls = []

    @il.transform
    def broken(t_in, t_out):
        x = read(t_in["x"], continuous)
        calls.append(1)
        raise ValueError(f"bad value {float(x):.3f}")

    trace = one_normal.simulate()
    with pytest.raises(ValueError, match="bad value"):
        il.involutive_mcmc(trace, None, (), broken)
    assert calls == [1]


def test_needs_torch_still_reruns_on_autograd():
    @il.transform
    def uses_logsumexp(t_in, t_out):
        x = read(t_in["x"], continuous)
        write(t_out["x"], torch.logsumexp(torch.stack([x, -x]), 0) * 0.0 - x, continuous)

    trace = one_normal.simulate()
    app = apply_transform(uses_logsumexp, trace)
    assert not app.run.floats and uses_logsumexp.torch_fallbacks == 1
    assert uses_logsumexp.last_fallback.startswith("NeedsTorch")


# ---------------------------------------------------------------------------
# item 4: lost derivatives
# ---------------------------------------------------------------------------
def _detached(how):
    @il.transform(name=f"negate_{how}")
    def negate(t_in, t_out):
        x = read(t_in["x"], continuous)
        value = {"float": lambda: -float(x), "math.exp": lambda: math.log(math.exp(-x)),
                 "item": lambda: -x.item()}[how]()
        write(t_out["x"], value, continuous)

    return negate


@pytest.mark.parametrize("how", ["float", "math.exp", "item"])
@pytest.mark.parametrize("autodiff", ["auto", "torch"])
def test_lost_derivative_fails_check_involution_naming_the_coordinate(how, autodiff):
    f = _detached(how)
    f.autodiff = autodiff
    with pytest.raises(InvolutionCheckError) as info:
        il.check_involution(one_normal, (), None, f, trials=5, seed=1)
    message = str(info.value)
    assert "model_out['x']" in message and "does not depend on any" in message, message


@pytest.mark.parametrize("how", ["float", "math.exp"])
def test_lost_derivative_raises_in_the_move_and_a_checked_move_records_why(how):
    f = _detached(how)
    torch.manual_seed(2)
    trace = one_normal.simulate()
    with pytest.raises(TransformError, match=r"model_out\['x'\]"):
        il.involutive_mcmc(trace, None, (), f)
    record = il.involutive_move(trace, None, (), f, check=True)
    assert not record.accepted
    assert "model_out['x']" in record.check_failure and "jacobian" in record.check_failure.lower()
    assert record.application.jacobian.problem is not None


# A derivative lost on one path of two: the Jacobian stays invertible, only wrong
# ((mu, u) -> (2 mu + 3 u, -mu - 2 u) is an involution with |det J| = 1; with d/dmu lost
# in the first write |det J| is 3), so every acceptance probability is wrong and nothing
# but finite differences can see it.
@il.gen
def one_mean():
    il.normal(0.0, 3.0) @ "mu"


@il.gen
def split_step(trace):
    il.normal(0.0, 1.0) @ "u"


def _shift(how):
    @il.transform(name=f"shift_{how}")
    def shift(model_in, aux_in, model_out, aux_out):
        mu, u = read(model_in["mu"], continuous), read(aux_in["u"], continuous)
        lost = {"float": lambda: float(mu), "detach": lambda: mu.detach(),
                "item": lambda: mu.item(), "math.sqrt": lambda: math.copysign(math.sqrt(mu * mu), mu)}[how]()
        write(model_out["mu"], 2 * lost + 3 * u, continuous)
        write(aux_out["u"], -mu - 2 * u, continuous)

    return shift


@pytest.mark.parametrize("how", ["float", "detach", "item", "math.sqrt"])
@pytest.mark.parametrize("autodiff", ["auto", "torch"])
def test_partly_lost_derivative_fails_check_involution(how, autodiff):
    """Failed before the finite-difference check: check_involution passed (the values are
    right and J is invertible) and the chain sampled the wrong distribution."""
    f = _shift(how)
    f.autodiff = autodiff
    with warnings.catch_warnings(), pytest.raises(InvolutionCheckError) as info:
        warnings.simplefilter("ignore")     # (torch warns of float() on a tracked tensor)
        il.check_involution(one_mean, (), split_step, f, trials=3, seed=1)
    message = str(info.value)
    assert "d model_out['mu'] / d model_in['mu']" in message, message
    assert "finite differences" in message and "line" in message and "torch functions" in message


def test_the_same_transform_without_the_loss_passes():
    @il.transform
    def shift_ok(model_in, aux_in, model_out, aux_out):
        mu, u = read(model_in["mu"], continuous), read(aux_in["u"], continuous)
        write(model_out["mu"], 2 * mu + 3 * u, continuous)
        write(aux_out["u"], -mu - 2 * u, continuous)

    assert il.check_involution(one_mean, (), split_step, shift_ok, trials=20, seed=1).trials == 20


# ---------------------------------------------------------------------------
# item 14: NaN derivatives
# ---------------------------------------------------------------------------
@il.transform
def signed_root_swap(model_in, aux_in, model_out, aux_out):
    """(x, u) -> (u |u|, signed sqrt of x): an involution, with the signed square root
    written with torch.where (both branches are evaluated: sqrt of a negative number
    on one of them, whose NaN derivative reaches the result)."""
    x = read(model_in["x"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["x"], u * torch.abs(u), continuous)
    write(aux_out["u"], torch.where(x > 0, torch.sqrt(x), -torch.sqrt(-x)), continuous)


def test_nan_derivative_fails_check_involution_naming_the_coordinate():
    with pytest.raises(InvolutionCheckError) as info:
        il.check_involution(one_normal, (), step_aux, signed_root_swap, trials=20, seed=3)
    message = str(info.value)
    assert "aux_out['u']" in message and "nan" in message.lower(), message


def test_nan_derivative_raises_in_the_move():
    torch.manual_seed(4)
    trace = one_normal.simulate()
    with pytest.raises(TransformError, match=r"aux_out\['u'\]"):
        for _ in range(20):
            trace, _ = il.involutive_mcmc(trace, step_aux, (), signed_root_swap)


def test_correct_signed_root_passes():
    @il.transform
    def signed_root_swap_ok(model_in, aux_in, model_out, aux_out):
        x = read(model_in["x"], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["x"], u * torch.abs(u), continuous)
        write(aux_out["u"], torch.sign(x) * torch.sqrt(torch.abs(x)), continuous)

    il.check_involution(one_normal, (), step_aux, signed_root_swap_ok, trials=20, seed=3)


# ---------------------------------------------------------------------------
# item 13: in-place operators, aliases and views
# ---------------------------------------------------------------------------
@il.transform
def aliased_reflection(model_in, aux_in, model_out, aux_out):
    """Under tensor semantics ``y`` is ``x``, negated in place: (a, u) -> (u - a, u)."""
    a = read(model_in["x"], continuous)
    u = read(aux_in["u"], continuous)
    x = a * 1.0
    y = x
    x *= -1.0
    write(model_out["x"], y + u, continuous)
    write(aux_out["u"], u, continuous)


def test_in_place_operator_on_an_alias_matches_torch():
    torch.manual_seed(5)
    trace = one_normal.simulate()
    aux = step_aux.simulate(trace)
    auto = apply_transform(aliased_reflection, trace, aux, step_aux, autodiff="auto")
    ref = apply_transform(aliased_reflection, trace, aux, step_aux, autodiff="torch")
    expected = float(aux["u"]) - float(trace["x"])
    assert float(ref.new_model["x"]) == pytest.approx(expected, abs=1e-15)
    assert float(auto.new_model["x"]) == float(ref.new_model["x"])
    assert auto.logabsdet == ref.logabsdet


@il.gen
def three_normals():
    il.normal(0.0, 1.0) @ "a"
    il.normal(0.0, 1.0) @ "b"
    il.iid(il.normal(0.0, 1.0), 3) @ "v"


IN_PLACE = ["+=", "-=", "*=", "/="]


def _corpus_program(rng):
    """Source of a transform body: arithmetic on copies, aliases and views of the reads,
    with in-place operators applied to some of them."""
    lines = ["a = read(t_in['a'], continuous)", "b = read(t_in['b'], continuous)",
             "v = read(t_in['v'], continuous)", "s0 = a * 1.0", "s1 = b + 0.0", "w = v * 1.0"]
    scalars, vectors = ["s0", "s1"], ["w"]
    for k in range(rng.randrange(3, 7)):
        kind = rng.randrange(5)
        if kind == 0:                                   # an alias
            name = f"al{k}"
            lines.append(f"{name} = {rng.choice(scalars)}")
            scalars.append(name)
        elif kind == 1:                                 # a view of a vector
            name = f"vw{k}"
            lines.append(f"{name} = {rng.choice(vectors)}[{rng.choice(['0:2', '1:', ':'])}]")
            vectors.append(name)
        elif kind == 2:                                 # an element of a vector
            name = f"el{k}"
            lines.append(f"{name} = {rng.choice(vectors)}[{rng.randrange(2)}]")
            scalars.append(name)
        elif kind == 3:                                 # in place on a scalar
            lines.append(f"{rng.choice(scalars)} {rng.choice(IN_PLACE)} {rng.choice(['2.0', '-1.5', 'a', 'b'])}")
        else:                                           # in place on a vector
            lines.append(f"{rng.choice(vectors)} {rng.choice(IN_PLACE)} {rng.choice(['0.5', '-2.0', 'a'])}")
    pick = lambda names: " + ".join(rng.sample(names, min(2, len(names))))   # noqa: E731
    lines += [f"write(t_out['a'], a + 0.1 * ({pick(scalars)}), continuous)",
              f"write(t_out['b'], b * 1.5 + 0.1 * ({pick(scalars)}), continuous)",
              f"write(t_out['v'], v * 1.25 + 0.1 * w, continuous)"]
    return "\n".join(lines)


def _make_transform(body, name):
    namespace = {"read": read, "write": write, "continuous": continuous, "torch": torch}
    source = "def f(t_in, t_out):\n" + "\n".join("    " + line for line in body.splitlines())
    exec(compile(source, f"<corpus {name}>", "exec"), namespace)
    return il.transform(namespace["f"], name=name)


@pytest.mark.parametrize("seed", range(40))
def test_generated_in_place_corpus_float_path_equals_torch(seed):
    """Each generated transform gives the same new values and log |det J| on the default
    path as with autodiff="torch" (or both raise the same error)."""
    rng = random.Random(seed)
    body = _corpus_program(rng)
    f = _make_transform(body, f"corpus_{seed}")
    torch.manual_seed(seed)
    trace = three_normals.simulate()
    outcomes = []
    for autodiff in ("auto", "torch"):
        try:
            app = apply_transform(f, trace, autodiff=autodiff)
        except RuntimeError as exc:         # torch refuses some in-place operations (on a leaf's view)
            outcomes.append(("error", type(exc).__name__))
            continue
        values = {a: app.new_model[a].tolist() for a in ("a", "b", "v")}
        outcomes.append((values, app.logabsdet))
    (auto_values, auto_det), (ref_values, ref_det) = [o if o[0] != "error" else (o, None) for o in outcomes]
    assert auto_values == ref_values, body
    if ref_det is not None:
        assert auto_det == pytest.approx(ref_det, rel=1e-12, abs=1e-12), body
