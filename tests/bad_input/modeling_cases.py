"""Bad input for the modeling layer: what the user does, the error they must see."""

from __future__ import annotations

import functools

import imcmc_lab as il

from imcmc_lab.errors import TraceChangedError

from . import Case

CASES: list[Case] = [
]


def _gen_on_lru_cache():
    import imcmc_lab as il

    @functools.lru_cache(maxsize=None)
    def cached(n):
        return il.normal(0.0, 1.0) @ "x"

    return il.gen(cached)


def _gen_on_builtin():
    import imcmc_lab as il

    return il.gen(len)


def _observed():
    """A trace of ``mu ~ normal(0, 1); x ~ iid(normal(mu, 1), 3)`` that returns ``mu``."""
    import torch

    import imcmc_lab as il

    @il.gen
    def two(xs):
        mu = il.normal(0.0, 1.0) @ "mu"
        il.iid(il.normal(mu, 1.0), len(xs)) @ "x"
        return mu

    xs = torch.tensor([0.5, -0.2, 1.0], dtype=torch.float64)
    return two.generate((xs,), {"x": xs, "mu": 0.3})[0]


def _plus_equals_then_update():
    trace = _observed()
    v = trace["mu"]
    v += 50                                  # in place: a 0-d tensor
    trace.update({"x": [0.0, 0.0, 0.0]})


def _element_assigned_then_update():
    trace = _observed()
    trace["x"][0] = 3.0
    trace.update({"mu": 0.5})


def _mul_then_regenerate():
    trace = _observed()
    trace["mu"].mul_(2.0)
    trace.regenerate("mu")


def _choices_edited_then_update_of_a_sharing_trace():
    trace = _observed()
    new, _, _ = trace.update({})             # keeps every value: shares them with trace
    trace.get_choices()["x"].mul_(2.0)
    new.update({"mu": 0.5})


def _retval_edited_then_update():
    trace = _observed()
    trace.get_retval().add_(1.0)             # the program returns mu: the same tensor
    trace.update({})


def _edited_then_differentiable_score():
    import imcmc_lab as il

    trace = _observed()
    trace["mu"].sub_(1.0)
    il.differentiable_score(trace, {})


_CHANGED = ("changed in place", "clone()")

CASES += [
    # issue 16 item 1: a value a trace handed out, changed in place, changed the trace silently
    Case("trace-value-plus-equals", _plus_equals_then_update, TraceChangedError, ("'mu'",) + _CHANGED),
    Case("trace-vector-element-assigned", _element_assigned_then_update, TraceChangedError,
         ("'x'",) + _CHANGED),
    Case("trace-value-mul_-then-regenerate", _mul_then_regenerate, TraceChangedError, ("'mu'",) + _CHANGED),
    Case("trace-choices-edited-sharing-trace-used", _choices_edited_then_update_of_a_sharing_trace,
         TraceChangedError, ("'x'",) + _CHANGED),
    Case("trace-retval-edited", _retval_edited_then_update, TraceChangedError, ("'mu'",) + _CHANGED),
    Case("trace-value-edited-then-differentiable-score", _edited_then_differentiable_score,
         TraceChangedError, ("'mu'",) + _CHANGED),
]

def _args_edited_then_update():
    trace = _observed()
    trace.args[0][1] = 9.0                   # the trace's own copy of the argument
    trace.update({"mu": 0.5})


def _numpy_view_written_then_update():
    trace = _observed()
    trace["x"].numpy().sort()                # shares the memory, bumps no version counter
    trace.update({"mu": 0.5})


def _detailed_discard_edited_then_update():
    trace = _observed()
    trace.update_detailed({"mu": 0.9}).discard[("mu",)].add_(1.0)
    trace.update({})


def _family_value_changed_in_body():
    import imcmc_lab as il

    @il.gen
    def clusters(k):
        means = [il.normal(0.0, 10.0) @ ("mu", j) for j in range(k)]     # lowered: one family
        means[2] -= means[2]                 # in place on the trace's value
        return means

    clusters.simulate(10)


def _sub_call_value_changed_in_body():
    import imcmc_lab as il

    @il.gen
    def inner():
        return il.normal(0.0, 1.0) @ "z"

    @il.gen
    def outer():
        r = inner() @ "s"
        r *= 2.0
        return r

    outer.simulate()


CASES += [
    # issue 16 item 1, second round: what the first round did not catch
    Case("trace-args-edited", _args_edited_then_update, TraceChangedError,
         ("argument 0", "trace.args[0]") + _CHANGED),
    Case("trace-numpy-view-written", _numpy_view_written_then_update, TraceChangedError,
         ("'x'", "numpy") + _CHANGED),
    Case("update-detailed-discard-edited", _detailed_discard_edited_then_update, TraceChangedError,
         ("'mu'",) + _CHANGED),
    Case("body-changes-family-value", _family_value_changed_in_body, TraceChangedError,
         ("('mu', 2)", "in place", "after drawing it", "line", "out-of-place")),
    Case("body-changes-sub-call-value", _sub_call_value_changed_in_body, TraceChangedError,
         ("('s', 'z')", "in place", "call at 's'", "line")),
]

CASES += [
    # issue 16 item 20: a cached body would skip its choices on repeated calls
    Case("gen-on-lru-cache", _gen_on_lru_cache, TypeError, ("lru_cache", "cached", "plain function")),
    Case("gen-on-builtin", _gen_on_builtin, TypeError, ("len", "python function")),
]


@il.gen
def _two_args(n, scale):
    il.iid(il.normal(0.0, scale), n) @ "x"


@il.gen
def _body_type_error(n):
    return len(n)       # the body's own TypeError keeps Python's message


CASES += [
    # a generative function given arguments that do not fit: Python's "_two_args() missing 1
    # required positional argument" from inside run_dynamic before, with no word of where
    Case("simulate-too-few-arguments", lambda: _two_args.simulate(3), TypeError,
         ("_two_args(n, scale)", "given 1 argument", "missing 1 required", "_two_args.simulate(n, scale)")),
    Case("generate-too-many-arguments", lambda: _two_args.generate((3, 1.0, 2), {}), TypeError,
         ("given 3 arguments", "_two_args.generate((n, scale), constraints)")),
    Case("check-involution-without-model-arguments",
         lambda: il.check_involution(_two_args, (), None, il.transform(lambda t_in, t_out: None), trials=1),
         TypeError, ("given 0 arguments", "--args \"(n, scale)\"")),
    Case("body-type-error-unchanged", lambda: _body_type_error.simulate(3), TypeError,
         ("object of type 'int' has no len()",)),
]
