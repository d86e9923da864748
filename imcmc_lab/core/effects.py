"""The handler stack that ``dist @ address`` and ``callee(args) @ address`` dispatch to.

The lowest layer owns only the mechanism, as Pyro keeps ``_PYRO_STACK`` in
its lowest layer: a thread-local slot holding the handler that is running a
generative function's body. ``modeling`` installs its handlers here (one per
execution mode); ``core`` never needs to know what they do. A handler
implements::

    handler.choice(address, dist, line)          # -> the choice's value
    handler.call(address, gen_fn, args, line)    # -> the callee's return value
    handler.choice_family(namespace, keys, dist, line)   # -> the values (optional)

``line`` says where the user's code wrote it, for error messages: a *call site*,
``(code object, instruction offset)`` as :func:`visit_choice` takes it from the frame
(cheap; the line number is found only when a message needs it), or ``(filename,
lineno)``. :func:`resolve_line` turns either into ``(filename, lineno)``. A handler
with a list attribute ``handed`` gets each tensor value the body received appended to
it with its version counter, ``(value, value._version)``, so that it can tell whether
the body changed a drawn value in place (the trace would keep the changed value with
the density of the drawn one).
"""

from __future__ import annotations

import sys
import threading
from types import CodeType
from contextlib import contextmanager

import torch

from .address import normalize_address

_Tensor = torch.Tensor

__all__ = ["current_handler", "active_handler", "handling", "visit_choice", "visit_call", "NoHandlerError",
           "resolve_line"]

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
    handler = getattr(_local, "handler", None) or current_handler()
    frame = sys._getframe(1)        # the body that wrote `dist @ address`
    value = handler.choice(normalize_address(address), dist, (frame.f_code, frame.f_lasti))
    if type(value) is _Tensor:
        handed = getattr(handler, "handed", None)
        if handed is not None:
            handed.append((value, value._version))
    return value


def visit_call(gen_fn, args, address):
    """``callee(args) @ address``."""
    handler = current_handler()
    frame = sys._getframe(2)        # the body that wrote `callee(args) @ address`
    return handler.call(normalize_address(address), gen_fn, args, (frame.f_code, frame.f_lasti))
