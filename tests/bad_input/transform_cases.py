"""Bad input for the transform layer: what the user does, the error they must see."""

from __future__ import annotations

import math

import torch

import imcmc_lab as il
from imcmc_lab.errors import InvolutionCheckError, TraceChangedError, TransformError

from . import Case


@il.gen
def _one_normal():
    il.normal(0.0, 1.0) @ "x"


@il.gen
def _step_aux(trace):
    il.normal(0.0, 1.0) @ "u"


@il.transform
def _negate(t_in, t_out):
    il.write(t_out["x"], -il.read(t_in["x"], il.continuous), il.continuous)


@il.transform
def _negate_through_float(t_in, t_out):
    x = il.read(t_in["x"], il.continuous)
    il.write(t_out["x"], -float(x), il.continuous)          # float() drops the derivative


@il.transform
def _negate_through_math_exp(t_in, t_out):
    x = il.read(t_in["x"], il.continuous)
    il.write(t_out["x"], math.log(math.exp(-x)), il.continuous)   # so does math.exp


@il.transform
def _signed_root_swap(model_in, aux_in, model_out, aux_out):
    x = il.read(model_in["x"], il.continuous)
    u = il.read(aux_in["u"], il.continuous)
    il.write(model_out["x"], u * torch.abs(u), il.continuous)
    il.write(aux_out["u"], torch.where(x > 0, torch.sqrt(x), -torch.sqrt(-x)), il.continuous)


_RUNS = []


@il.transform
def _raises_on_first_run(t_in, t_out):
    x = il.read(t_in["x"], il.continuous)
    _RUNS.append(1)                     # a side effect: re-running on torch would not raise
    if len(_RUNS) == 1:
        raise KeyError("the user's lookup failed")
    il.write(t_out["x"], -x, il.continuous)


def _move(f, aux=None):
    torch.manual_seed(0)
    trace = _one_normal.simulate()
    for _ in range(10):
        trace, _ = il.involutive_mcmc(trace, aux, (), f)


@il.gen
def _bits():
    il.iid(il.bernoulli(0.3), 3) @ "b"


@il.transform
def _flip_first_in_place(t_in, t_out):
    b = il.read(t_in["b"], il.discrete)      # the trace's own tensor
    b[0] = 1 - b[0]                           # changes the input trace (and the chain's state)
    il.write(t_out["b"], b, il.discrete)


def _transform_edits_a_discrete_read_in_place():
    torch.manual_seed(0)
    il.involutive_mcmc(_bits.simulate(), None, (), _flip_first_in_place)


@il.transform
def _shift_in_place(model_in, aux_in, model_out, aux_out):
    x, u = il.read(model_in["x"], il.continuous), il.read(aux_in["u"], il.continuous)
    x += u                                    # in place on a read value: torch refuses
    il.write(model_out["x"], x, il.continuous)
    il.write(aux_out["u"], -u, il.continuous)


@il.transform
def _scale_in_place(model_in, aux_in, model_out, aux_out):
    x, u = il.read(model_in["x"], il.continuous), il.read(aux_in["u"], il.continuous)
    u.mul_(-1.0)
    il.write(model_out["x"], x + u, il.continuous)
    il.write(aux_out["u"], u, il.continuous)


@il.gen
def _pair():
    il.iid(il.normal(0.0, 1.0), 2) @ "v"


@il.transform
def _swap_by_item_assignment(t_in, t_out):
    v = il.read(t_in["v"], il.continuous)
    v[0], v[1] = v[1], v[0]
    il.write(t_out["v"], v, il.continuous)


@il.transform
def _negate_through_numpy(t_in, t_out):
    import numpy as np

    x = il.read(t_in["x"], il.continuous)
    il.write(t_out["x"], torch.as_tensor(-np.asarray(x)), il.continuous)


@il.gen
def _coin_and_x():
    il.bernoulli(0.5) @ "heads"
    il.normal(0.0, 1.0) @ "x"


@il.transform
def _flip_without_read(t_in, t_out):
    if t_in["heads"] == True:                 # noqa: E712  (read forgotten: an address, not a value)
        il.write(t_out["heads"], False, il.discrete)
    else:
        il.write(t_out["heads"], True, il.discrete)


def _chain_of(f, model, steps=20):
    torch.manual_seed(0)
    trace = model.simulate()
    for _ in range(steps):
        trace, _ = il.involutive_mcmc(trace, None, (), f)


@il.transform
def _negate_without_read(t_in, t_out):
    il.write(t_out["x"], -t_in["x"], il.continuous)


@il.transform
def _negate_by_assignment(t_in, t_out):
    t_out["x"] = -il.read(t_in["x"], il.continuous)


def _move_after_an_in_place_edit():
    torch.manual_seed(0)
    trace = _one_normal.simulate()
    trace["x"].add_(10.0)                   # the trace's cached density no longer matches
    il.involutive_mcmc(trace, None, (), _negate)


CASES: list[Case] = [
    # issue 16 item 1: an involutive move on a trace whose value was changed in place
    Case("move after an in-place edit of a trace value", _move_after_an_in_place_edit, TraceChangedError,
         ("'x'", "changed in place", "clone()")),
    Case("transform changes a discrete value it read in place", _transform_edits_a_discrete_read_in_place,
         TraceChangedError, ("'b'", "changed in place", "read(...).clone()")),
    Case("check_involution trials=0", lambda: il.check_involution(_one_normal, (), None, _negate, trials=0),
         ValueError, ("trials", "at least 1")),
    Case("check_involution trials=-3", lambda: il.check_involution(_one_normal, (), None, _negate, trials=-3),
         ValueError, ("trials", "-3")),
    Case("check_involution float(x) loses the derivative",
         lambda: il.check_involution(_one_normal, (), None, _negate_through_float, trials=3, seed=0),
         InvolutionCheckError, ("model_out['x']", "does not depend on any", "float(")),
    Case("check_involution math.exp(x) loses the derivative",
         lambda: il.check_involution(_one_normal, (), None, _negate_through_math_exp, trials=3, seed=0),
         InvolutionCheckError, ("model_out['x']", "does not depend on any", "math.")),
    Case("move with float(x): singular Jacobian", lambda: _move(_negate_through_float),
         TransformError, ("model_out['x']", "singular", "log |det J|")),
    Case("check_involution torch.where NaN derivative",
         lambda: il.check_involution(_one_normal, (), _step_aux, _signed_root_swap, trials=20, seed=3),
         InvolutionCheckError, ("aux_out['u']", "nan", "torch.where")),
    Case("move with torch.where NaN derivative", lambda: _move(_signed_root_swap, _step_aux),
         TransformError, ("aux_out['u']", "nan")),
    # a value il.read returned, changed in place or handed to NumPy: torch's RuntimeError
    # ("a leaf Variable that requires grad ...", "... Use tensor.detach().numpy()") with the
    # engine's frames before; now the line, the read address and what to write instead
    Case("transform x += u on a read value", lambda: _move(_shift_in_place, _step_aux), TransformError,
         ("in place", "x: model_in['x']", "x += u", "x = x + 1")),
    Case("transform u.mul_ on a read value", lambda: _move(_scale_in_place, _step_aux), TransformError,
         ("in place", "u: aux_in['u']", "u.mul_(-1.0)", "w = w * 2")),
    Case("transform v[0] = ... on a read vector", lambda: il.involutive_mcmc(_pair.simulate(), None, (),
                                                                          _swap_by_item_assignment),
         TransformError, ("in place", "v: model_in['v']", "w.clone()")),
    Case("transform np.asarray on a read value", lambda: _move(_negate_through_numpy), TransformError,
         ("numpy", "x: model_in['x']", "np.asarray(x)", "torch functions")),
    # an address used as its value: `t_in["heads"] == True` was always False (a chain ran, moving
    # every state to heads = True: a silently wrong kernel); `-t_in["x"]` and `t_out["x"] = ...`
    # gave Python's TypeErrors about AddressRef/TraceHandle from the engine's frames
    Case("transform compares an address instead of its value", lambda: _chain_of(_flip_without_read, _coin_and_x),
         TransformError, ("t_in['heads'] is an address, not its value", "== True", "read(t_in['heads'], il.discrete)")),
    Case("transform negates an address instead of its value", lambda: _move(_negate_without_read),
         TransformError, ("t_in['x'] is an address, not its value", "il.continuous")),
    Case("transform assigns to an output address", lambda: _move(_negate_by_assignment), TransformError,
         ("t_out['x'] = ...", "write(model_out[...], value, il.continuous)")),
    # check_involution(p, p_args, q, f) with programs in the wrong places: "'Transform' object has
    # no attribute 'simulate'" / "'function' object has no attribute 'simulate'" before
    Case("check_involution q and f swapped",
         lambda: il.check_involution(_one_normal, (), _negate, _step_aux, trials=1), TypeError,
         ("q must be the auxiliary program", "_negate", "order")),
    Case("check_involution p a plain function",
         lambda: il.check_involution(lambda: None, (), None, _negate, trials=1), TypeError,
         ("p must be the model", "@gen")),
    Case("user's exception in a transform propagates", lambda: _move(_raises_on_first_run),
         KeyError, ("the user's lookup failed",)),
]
