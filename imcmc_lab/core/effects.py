"""The handler stack that ``dist @ address`` and ``callee(args) @ address`` dispatch to.

The lowest layer owns only the mechanism, as Pyro keeps ``_PYRO_STACK`` in
its lowest layer: a thread-local slot holding the handler that is running a
generative function's body. ``modeling`` installs its handlers here (one per
execution mode); ``core`` never needs to know what they do. A handler
implements::

    handler.choice(address, dist, line)          # -> the choice's value
    handler.call(address, gen_fn, args, line)    # -> the callee's return value
    handler.choice_family(namespace, keys, dist, line, values=True)   # -> the values (optional;
                                                 # with values=False, a loop's: may be None)

``line`` says where the user's code wrote it, for error messages: a *call site*,
``(code object, instruction offset)`` as :func:`visit_choice` takes it from the frame
(cheap; the line number is found only when a message needs it), or ``(filename,
lineno)``. :func:`resolve_line` turns either into ``(filename, lineno)``. A handler
with a list attribute ``handed`` gets each tensor value the body received appended to
it with its version counter, ``(value, value._version)`` (the tensors of a list or tuple
handed whole: ``(tuple of tensors, tuple of their versions)``), so that it can tell whether
the body changed in place a value the trace keeps (the trace would keep the changed value
with the density of the drawn one): a choice's value, a sub-call's return value (a
tensor, or the tensors in a returned tuple), and the tensors the body takes out of a
returned list or an indexed family's values. Such a list is handed to the body as a
watched :class:`~imcmc_lab.core.values.ScalarList`, entered as ``(the list, None)`` (or
``(a watched copy, the plain list)``); the handler stops the watch at the end of the body
(``list.watch(None)``, and a copy the body returns is returned as the plain list). Tensors that the
body never takes out of a list cost nothing (a family of 10,000 values handed whole to a
distribution reads no version counter).
"""

from __future__ import annotations

import operator
import sys
import threading
from types import CodeType
from contextlib import contextmanager

import torch

from .address import normalize_address
from .values import ScalarList

_Tensor = torch.Tensor
_VERSION = operator.attrgetter("_version")
_getframe = sys._getframe

__all__ = ["current_handler", "active_handler", "handling", "visit_choice", "visit_call", "visit_family",
           "NoHandlerError", "resolve_line"]

_local = threading.local()


class NoHandlerError(RuntimeError):
    """``dist @ address`` outside a running generative function."""


def active_handler():
    """The handler running the current body, or ``None`` outside any generative function."""
    return getattr(_local, "handler", None)


def current_handler():
    """The handler running the current body; an error outside any generative function."""
    handler = getattr(_local, "handler", None)
    if handler is None:
        raise NoHandlerError(
            "`dist @ address` and `gen_fn(args) @ address` only work inside a @gen function "
            "that is being run by simulate/generate/assess/update; call e.g. "
            "`model.simulate(args)` instead of running the body directly."
        )
    return handler


@contextmanager
def handling(handler):
    """Make ``handler`` answer the ``@`` operations of the body run inside the block."""
    saved = getattr(_local, "handler", None)
    _local.handler = handler
    try:
        yield handler
    finally:
        _local.handler = saved


def push_handler(handler):
    """Install ``handler``; returns the one it replaces (for :func:`pop_handler`). The hot
    path of every run uses this pair instead of the context manager."""
    saved = getattr(_local, "handler", None)
    _local.handler = handler
    return saved


def pop_handler(saved):
    _local.handler = saved


def resolve_line(line):
    """``(filename, lineno)`` of a call site ``(code, instruction offset)``; a
    ``(filename, lineno)`` pair is returned as it is."""
    code, where = line
    if type(code) is not CodeType:
        return line
    lineno = code.co_firstlineno
    for start, end, number in code.co_lines():
        if start <= where < end:
            lineno = number if number is not None else lineno
            break
    return code.co_filename, lineno


def visit_choice(dist, address):
    """``dist @ address``: ``Distribution.__matmul__`` is this function itself (one Python
    call per random choice, so the lookups are inlined too). The line is kept as the call
    site ``(code, offset)``: ``frame.f_lineno`` scans the code's line table, and only an
    error message needs it (:func:`resolve_line`)."""
    try:
        handler = _local.handler
    except AttributeError:          # this thread never ran a body
        handler = None
    if handler is None:
        handler = current_handler()     # raises
    frame = _getframe(1)            # the body that wrote `dist @ address`
    # normalize_address's most common case inlined: a one-key address written as a string
    address = (address,) if type(address) is str else normalize_address(address)
    value = handler.choice(address, dist, (frame.f_code, frame.f_lasti))
    if type(value) is _Tensor:
        handed = getattr(handler, "handed", None)
        if handed is not None:
            handed.append((value, value._version))
    return value


def visit_call(gen_fn, args, address):
    """``callee(args) @ address``."""
    handler = current_handler()
    frame = sys._getframe(2)        # the body that wrote `callee(args) @ address`
    value = handler.call(normalize_address(address), gen_fn, args, (frame.f_code, frame.f_lasti))
    handed = getattr(handler, "handed", None)
    return value if handed is None or value is None else _watched(value, handed)


def visit_family(handler, namespace, keys, dist, line, wanted=True):
    """A lowered ``[dist @ (namespace, key) for key in keys]``: ``handler.choice_family``'s
    values, watched for in-place changes like every value handed to a body. A lowered
    ``for`` loop does not hand its values to the body (``wanted=False``): nothing to watch."""
    if not wanted:
        return handler.choice_family(namespace, keys, dist, line, values=False)
    values = handler.choice_family(namespace, keys, dist, line)
    handed = getattr(handler, "handed", None)
    if handed is None:
        return values
    if type(values) is list:        # a short family (or assess): noted now, and kept a plain list
        _note_all(values, handed)
        return values
    return _watched(values, handed)


def _note_all(values, handed):
    """Note the tensors among ``values`` (a list or tuple the body receives) with their
    versions: when all are tensors, as ONE entry ``(tuple of the tensors, tuple of their
    versions)``, read at C speed (no Python step per element); else one pair per tensor."""
    if values and type(values[0]) is _Tensor:
        try:
            handed.append((tuple(values), tuple(map(_VERSION, values))))
            return
        except AttributeError:      # not all tensors: the pairs below
            pass
    handed.extend([(v, v._version) for v in values if type(v) is _Tensor])


def _watched(value, handed):
    """``value`` as the body gets it, noted in ``handed`` (see the module docstring)."""
    kind = type(value)
    if kind is _Tensor:
        handed.append((value, value._version))
    elif kind is ScalarList:
        handed.append((value.watch(handed), None))
    elif kind is list:              # a Map's or Unfold's list: watched as a copy
        watched = ScalarList(value).watch(handed)
        handed.append((watched, value))
        return watched
    elif kind is tuple:
        _note_all(value, handed)
    return value
