"""Running a ``@gen`` body, and the public entry points of the generative function interface.

:func:`run_dynamic` installs the handler of the request's mode (:mod:`.tracer`) and
runs the body; the entry points build the :class:`~.execution.Execution` request,
account for the constraints once at the top (a constraint the program never visits is
an error) and copy what the user hands in, so a trace never shares memory with a
tensor the user may change later (traces are immutable values).

Incremental update: a choice whose value and distribution arguments are unchanged
keeps its cached log-density; a sub-call with unchanged arguments and nothing
constrained or selected under it keeps its whole sub-trace without re-running.
"""

from __future__ import annotations

import inspect
import operator

import numpy as np
import torch

from ..core.address import did_you_mean, format_address, normalize_address
from ..core.choicemap import ChoiceMap, as_choicemap, as_selection
from ..core.effects import pop_handler, push_handler
from ..errors import AddressError, ConstraintError, TraceChangedError
from .execution import Execution, Result, counters
from .trace import DynamicTrace
from .tracer import Assess, AssessFailure, Generate, Regenerate, Simulate, Update, check_handed

__all__ = ["run_dynamic", "simulate", "generate", "assess", "update", "regenerate",
           "differentiable_score", "owned", "OwnedChoices"]

_NEG_INF = float("-inf")
_Tensor = torch.Tensor
_LOGPDF = operator.attrgetter("logpdf")


def run_dynamic(gen_fn, request):
    """Run a ``@gen`` function's body under the handler of ``request.mode``."""
    __tracebackhide__ = True  # IPython and pytest hide engine frames in user tracebacks
    tracer = request.mode(gen_fn, request)
    args = request.args
    # The trace keeps its arguments and re-runs the body on them in update: a body that
    # changed one in place would drift on every update, so note the tensors' versions.
    versions = [(i, a, a._version) for i, a in enumerate(args) if type(a) is _Tensor] \
        if _Tensor in map(type, args) else None     # (the test in C: no list for no tensor)
    saved = push_handler(tracer)
    counters.executions += 1
    try:
        retval = gen_fn.fn(*args)
    except TypeError as exc:
        if exc.__traceback__.tb_next is None:    # raised by the call itself, not in the body
            _arguments_do_not_fit(gen_fn, args, exc)
        raise
    finally:
        pop_handler(saved)
    if versions:
        for position, arg, version in versions:
            if arg._version != version:
                _argument_changed(gen_fn, position)
    if tracer.handed:
        retval = check_handed(tracer, retval)
    tracer.finish()
    score = sum(map(_LOGPDF, tracer.records.values()), 0.0)     # in order, as a loop would
    trace = DynamicTrace(gen_fn, request.args, retval, score, tracer.records, tracer.families, tracer.compact)
    result = Result(trace, tracer.weight, tracer.discard, tracer.fresh, tracer.n_used)
    result.kind_changed = tracer.kind_changed
    return result


def _arguments_do_not_fit(gen_fn, args, exc):
    """Raise a TypeError saying how ``gen_fn`` takes its arguments, if ``args`` do not fit."""
    try:
        signature = inspect.signature(gen_fn.fn)
    except (TypeError, ValueError):     # no signature to tell
        return
    try:
        signature.bind(*args)
    except TypeError:
        params = ", ".join(signature.parameters)
        one = f"({params},)" if len(signature.parameters) == 1 else f"({params})"
        raise TypeError(
            f"{gen_fn.name}({params}) was given {len(args)} argument{'s' if len(args) != 1 else ''}: "
            f"{exc}. Pass its arguments: {gen_fn.name}.simulate({params}), "
            f"{gen_fn.name}.generate({one}, constraints), il.check_involution({gen_fn.name}, {one}, ...) "
            f"or %check_involution ... --args \"{one}\".") from None


def _argument_changed(gen_fn, position):
    code = getattr(gen_fn.fn, "__code__", None)
    name = code.co_varnames[position] if code is not None and position < code.co_argcount else "x"
    raise TraceChangedError(
        f"the body of {gen_fn.name} changed its argument {name!r} (argument {position}) in place: "
        f"the trace keeps its arguments and runs the body on them again in update, so the "
        f"argument would change again on every update and the scores drift. Use an "
        f"out-of-place operation, which makes a new tensor: `{name} = {name} - ...` instead of "
        f"`{name} -= ...` or `{name}[i] = ...`; or copy first with `{name} = {name}.clone()`.")


# ---------------------------------------------------------------------------
# the boundary: what the user hands in is copied (traces never share memory with it)
# ---------------------------------------------------------------------------
_IMMUTABLE = frozenset([float, int, bool, str, type(None), DynamicTrace])


def owned(value):
    """``value`` with every tensor and array in it copied (through tuples, lists and
    dicts); anything else as it is (numbers and strings are immutable, traces too)."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is tuple and _IMMUTABLE.issuperset(map(type, value)):
        return value        # numbers, strings and traces only (a model's arguments, mostly)
    if kind is tuple or kind is list:
        return kind([owned(v) for v in value])
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if kind is dict:
        return {k: owned(v) for k, v in value.items()}
    return value


class OwnedChoices(dict):
    """Constraints ``{address: value}`` whose values the engine owns already: fresh
    tensors, immutable values, or values of other traces (which are never modified). The
    entry points take them without copying, and their addresses are normalised already
    (a leaf that is also a namespace is still refused). Engine code builds them (a
    transform's outputs, :meth:`~imcmc_lab.transform.interpreter.TransformRun.output_choices`);
    a user's dict or ChoiceMap is copied."""

    __slots__ = ()


def _as_args(args):
    if args is None:
        return ()
    return args if isinstance(args, tuple) else (args,)


def _owned_constraints(constraints):
    if type(constraints) is OwnedChoices:     # engine-built: normalised addresses, owned values
        if not constraints or _short_and_apart(constraints):
            return constraints
        return ChoiceMap._from_flat(constraints, check=True)._leaves
    flat = as_choicemap(constraints)._leaves      # addresses normalised and checked in any case
    if not flat:
        return flat
    return {address: owned(value) for address, value in flat.items()}


_HEAD = operator.itemgetter(slice(0, 1))


def _short_and_apart(flat):
    """Whether the addresses of ``flat`` (a non-empty dict) all have one or two keys and none
    is a leaf that is also a namespace (the check ``ChoiceMap._from_flat`` makes), at C
    speed: a conflict is then a one-key leaf that heads a two-key address, i.e. more
    addresses whose head is a leaf than one-key leaves. (An update's usual constraints, a
    transform's outputs, are such.)"""
    lengths = list(map(len, flat))
    return max(lengths) <= 2 and min(lengths) > 0 and \
        sum(map(flat.__contains__, map(_HEAD, flat))) == lengths.count(1)


def _account(gen_fn, result, flat, what, strict):
    """Every constraint must have been used: else an error, or with ``strict=False`` the
    unvisited addresses in ``result.unvisited``."""
    if result.n_used == len(flat):
        return result
    have = result.trace.flat_records()
    unvisited = [a for a in flat if a not in have]
    if not strict:
        result.unvisited = unvisited
        return result
    shown = ", ".join(format_address(a) for a in unvisited[:5])
    more = f" (and {len(unvisited) - 5} more)" if len(unvisited) > 5 else ""
    hint = did_you_mean(unvisited[0], have) if unvisited else ""
    raise ConstraintError(
        f"{what} of {gen_fn.name} got a constraint at {shown}{more}, but the program never "
        f"visits {'that address' if len(unvisited) == 1 else 'those addresses'} in this execution."
        f"{hint} Remove the constraint or fix its address."
    )


# ---------------------------------------------------------------------------
# the entry points (GenerativeFunction and Trace delegate here)
# ---------------------------------------------------------------------------
def simulate(gen_fn, args):
    return gen_fn._execute(Execution(Simulate, owned(_as_args(args)))).trace


def generate(gen_fn, args, constraints, strict=True):
    """The full :class:`~.execution.Result` of ``generate``."""
    flat = _owned_constraints(constraints)
    result = gen_fn._execute(Execution(Generate, owned(_as_args(args)), None, flat or None))
    return _account(gen_fn, result, flat, "generate", strict)


def assess(gen_fn, args, choices):
    flat = as_choicemap(choices)._leaves
    try:
        result = gen_fn._execute(Execution(Assess, _as_args(args), None, flat or None))
    except AssessFailure:
        return _NEG_INF
    if result.n_used != len(flat):
        return _NEG_INF
    return result.weight


def update(trace, constraints, args=None, strict=True):
    """The full :class:`~.execution.Result` of ``trace.update``."""
    flat = _owned_constraints(constraints)
    args = trace._args if args is None else owned(_as_args(args))
    result = trace.gen_fn._execute(Execution(Update, args, trace, flat or None))
    return _account(trace.gen_fn, result, flat, "update", strict)


def regenerate(trace, selection, args=None):
    args = trace._args if args is None else owned(_as_args(args))
    result = trace.gen_fn._execute(Execution(Regenerate, args, trace, None, as_selection(selection)))
    return result.trace, result.weight


# ---------------------------------------------------------------------------
# differentiable scoring (for gradients: HMC, MALA)
# ---------------------------------------------------------------------------
def differentiable_score(trace, values: dict):
    """``log p`` of ``trace`` with ``values`` (address -> tensor) substituted, as a
    differentiable tensor. Re-scores every choice (no caching), so gradients with
    respect to the substituted tensors flow through every density they affect."""
    trace._lineage()                # raises if a value it handed out was changed in place
    flat = dict(trace.get_choices().items())
    for address, value in values.items():
        address = normalize_address(address)
        if address not in flat:
            raise AddressError(f"differentiable_score: the trace has no choice at "
                               f"{format_address(address)} to substitute."
                               + did_you_mean(address, flat))
        flat[address] = value
    terms = []
    try:
        result = trace.gen_fn._execute(Execution(Assess, trace._args, None, flat, None, terms))
    except AssessFailure as exc:
        raise AddressError(f"differentiable_score: the program needs address {exc.args[0]!r}, "
                           f"which the trace does not have") from None
    if not terms:
        return torch.zeros((), dtype=torch.float64), result.trace
    return torch.stack([t.reshape(()) for t in terms]).sum(), result.trace
