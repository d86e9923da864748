"""What a compiled transform read from its environment, and the per-move guard on it.

The generated code bakes in what the transform's functions found when they were traced: the
globals they name, their closure cells and defaults, the attributes they read off modules
(``torch.exp``, ``il.read``), the helper functions they call (recursively). :meth:`Environment.
record` walks those statically before the trace runs, and refuses any it cannot guard by
identity (a global list, dict, array or other mutable object: its contents could change
between moves without any name changing). While the trace runs, :meth:`Environment.start`
installs a profile hook (this thread only) that refuses, before it happens, any call the
tracer does not model: a Python function not reached through the recorded names (a method of
a user object, ``random.random``), or a C function outside a short list of pure ones
(``print``, ``time.time``, ``torch.randn``, a numpy call). The refusal is raised *before* the
call, so the trace-time re-run of the user's code never prints or draws twice.

Per move, :meth:`Environment.ok` checks the recorded facts (a few dict lookups and ``is``
tests): any change makes the move a miss.
"""

from __future__ import annotations

import builtins
import dis
import math
import operator
import os
import sys
import types

import torch

from ..language import Label, Transform
from .symbolic import _TORCH, Unsupported

# The engine code a traced transform may run unwatched: the tracer itself and the transform
# language (read, write, copy, tcall, run_on). Any other engine function (a distribution's
# sample, an example's helper) is user code here: recorded through names, or refused.
_HERE = os.path.dirname(os.path.abspath(__file__))
_LANGUAGE = os.path.join(os.path.dirname(_HERE), "language.py")
_MISSING = object()
_IMMUTABLE = (int, float, bool, str, bytes, complex, type(None), range, type(Ellipsis), Label)
_PURE_BUILTINS = {getattr(builtins, n) for n in (
    "len", "range", "int", "bool", "float", "abs", "min", "max", "enumerate", "zip", "list",
    "tuple", "sorted", "reversed", "sum", "any", "all", "hash", "iter", "next", "divmod", "dict", "set",
    "frozenset", "str", "repr", "format", "callable", "round", "map", "filter")}
# What a proxy cannot answer as the plain value would (``type(k) is bool`` on a traced discrete
# value, ``isinstance(k, int)``, ``id``): a transform naming one is not compiled.
_OPAQUE = {builtins.type: "type()", builtins.isinstance: "isinstance()", builtins.issubclass: "issubclass()",
           builtins.id: "id()", builtins.vars: "vars()", builtins.dir: "dir()", builtins.getattr: "getattr()",
           builtins.hasattr: "hasattr()", builtins.setattr: "setattr()", builtins.delattr: "delattr()",
           builtins.globals: "globals()", builtins.locals: "locals()", builtins.eval: "eval()",
           builtins.exec: "exec()"}
# Bytecode that stores outside the run (a re-run while tracing would repeat the store) or
# tests identity (a proxy is never the plain value's object).
_STORES = {"STORE_GLOBAL", "DELETE_GLOBAL", "STORE_ATTR", "DELETE_ATTR", "DELETE_SUBSCR", "IMPORT_NAME",
           "MATCH_CLASS", "MATCH_MAPPING", "MATCH_SEQUENCE", "MATCH_KEYS"}
_PURE_BUILTINS |= {v for m in (math, operator) for v in vars(m).values() if callable(v) and not isinstance(v, type)}
_PURE_BUILTINS -= {operator.is_, operator.is_not, operator.attrgetter, operator.methodcaller, operator.delitem}
_PURE_METHOD_OWNERS = (list, tuple, dict, set, frozenset, int, float, str, bool, range)


def _engine_code(code):
    name = code.co_filename
    return name.startswith(_HERE) or name == _LANGUAGE


def _nested_codes(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _nested_codes(c)


class Environment:
    """The recorded environment of one compiled transform (all its keys)."""

    def __init__(self):
        self.checks = []        # (getter, key, expected object): getter(key, _MISSING) is expected
        self.codes = set()      # the code objects the transform may run
        self._seen = set()
        self._names = set()     # every name the recorded code objects use
        self._modules, self._module_ids, self._scanned = [], set(), set()

    def ok(self):
        """Whether everything recorded is still what it was (per move, before the generated code)."""
        for getter, key, obj in self.checks:
            if getter(key, _MISSING) is not obj:
                return False
        return True

    def record_transform(self, f):
        """Record ``f`` (a Transform) and everything its function reaches: then the attributes
        of every module reached (global, closure, default, attribute of one), named by any
        recorded code, until nothing new is found."""
        self._record_transform(f)
        while True:
            todo = [(m, n) for m in list(self._modules) for n in sorted(self._names)
                    if (id(m), n) not in self._scanned]
            if not todo:
                return
            for m, name in todo:
                self._scanned.add((id(m), name))
                d = vars(m)
                if name in d:
                    self.checks.append((d.get, name, d[name]))
                    self._value(d[name], f"{m.__name__}.{name}")

    def _record_transform(self, f):
        self._attr(f, "fn", f.fn)
        self.record_function(f.fn)

    def _attr(self, owner, name, value):
        self.checks.append((lambda key, default, _o=owner: getattr(_o, key, default), name, value))

    def record_function(self, fn):
        """Record a Python function: code, defaults, closure cells, the globals and module
        attributes its code names (with each value classified by :meth:`_value`)."""
        if id(fn) in self._seen:
            return
        self._seen.add(id(fn))
        code = fn.__code__
        for name in ("__code__", "__defaults__", "__kwdefaults__"):
            self._attr(fn, name, getattr(fn, name))
        for value in (fn.__defaults__ or ()) + tuple((fn.__kwdefaults__ or {}).values()):
            self._value(value, f"a default of {fn.__name__}")
        for cell, name in zip(fn.__closure__ or (), code.co_freevars):
            try:
                value = cell.cell_contents
            except ValueError:
                raise Unsupported(f"an empty closure cell {name}") from None
            self._attr(cell, "cell_contents", value)
            self._value(value, f"the closure variable {name}")
        names = set()
        for c in _nested_codes(code):
            self.codes.add(c)
            names.update(c.co_names)
            _scan(c, fn.__name__)
        self._names |= names
        self._globals(fn.__globals__, names)

    def _globals(self, g, names):
        b = g.get("__builtins__", builtins)
        b = b if type(b) is dict else vars(b)
        for name in sorted(names):
            if name in g:
                value = g[name]
                self.checks.append((g.get, name, value))
                self._value(value, f"the global {name}")
            elif name in b:
                self.checks.append((g.get, name, _MISSING))
                self.checks.append((b.get, name, b[name]))
                self._value(b[name], f"the builtin {name}")

    def _value(self, value, what):
        """Refuse a value whose contents could change without its identity changing."""
        if _hashable(value) and value in _OPAQUE:
            raise Unsupported(f"uses {_OPAQUE[value]}")
        if isinstance(value, types.ModuleType):
            if id(value) not in self._module_ids:
                self._module_ids.add(id(value))
                self._modules.append(value)
            return
        if isinstance(value, _IMMUTABLE) or isinstance(value, types.BuiltinFunctionType):
            return
        if isinstance(value, (tuple, frozenset)):
            for v in value:
                self._value(v, what)
            return
        if isinstance(value, Transform):
            self._record_transform(value)
            return
        if isinstance(value, types.FunctionType):
            if not _engine_code(value.__code__):
                self.record_function(value)
            return
        if isinstance(value, torch.Tensor):
            raise Unsupported(f"reads {what}, a tensor (its storage could change between moves)")
        if isinstance(value, type) and value.__module__ in ("builtins", "math"):
            return
        if callable(value) and type(value).__module__.startswith("torch"):
            return      # a torch C function or method descriptor: its calls are vetted by watching()
        raise Unsupported(f"reads {what}, a {type(value).__name__} (its contents could change between moves)")

    def start(self):
        """While the transform is traced (until :meth:`stop`): refuse, before it happens, any
        call outside what the tracer models. This thread only (``sys.setprofile``). Not a
        context manager: its exit would be a call the hook refuses."""
        previous = sys.getprofile()
        sys.setprofile(self._profile)
        return previous

    @staticmethod
    def stop(previous):
        sys.setprofile(previous)

    def _profile(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code not in self.codes and not _engine_code(code):
                raise Unsupported(f"calls {code.co_name} (not reached through the transform's names)")
        elif event == "c_call" and not _engine_code(frame.f_code):
            if arg in _PURE_BUILTINS or arg in _TORCH:
                return
            owner = getattr(arg, "__self__", None)
            if isinstance(owner, _PURE_METHOD_OWNERS) and not isinstance(owner, type):
                return
            raise Unsupported(f"calls {getattr(arg, '__qualname__', getattr(arg, '__name__', arg))}")


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _scan(code, where):
    """Refuse code that stores outside its own run or tests identity (``x is y``, except
    ``x is None``: a traced value is never None, and neither is the value it stands for)."""
    previous = None
    for ins in dis.get_instructions(code):
        op = ins.opname
        if op in _STORES or (op == "STORE_DEREF" and ins.argval in code.co_freevars) or \
                (op in ("LOAD_ATTR", "LOAD_METHOD") and str(ins.argval).startswith("__")):
            raise Unsupported(f"{op.lower().replace('_', ' ')} {ins.argval} in {where} "
                              f"(line {ins.positions.lineno if ins.positions else '?'})")
        if op == "IS_OP" and not (previous is not None and previous.opname == "LOAD_CONST"
                                  and previous.argval is None):
            raise Unsupported(f"an identity test (is) in {where}")
        previous = ins
