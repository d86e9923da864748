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
from .symbolic import _TORCH, Unsupported, set_hook

# The engine code a traced transform may run unwatched: the tracer itself and the transform
# language (read, write, copy, tcall, run_on). Any other engine function (a distribution's
# sample, an example's helper) is user code here: recorded through names, or refused.
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LANGUAGE = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "language.py")
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
# The bytecode a traced function may use (an allow-list, CPython 3.11-3.13): locals,
# constants, globals and closure reads, arithmetic, comparisons, containers built in the run,
# jumps, loops, calls (vetted by the profile hook while tracing), returns. Refused: exception
# handlers and ``with`` (an ``except`` can swallow the tracer's refusal), stores outside the
# run (globals, attributes, free variables), deletions, imports, pattern matching (C-level
# isinstance), class bodies, async code; ``is`` except against None; dunder attribute loads.
_ALLOWED_OPS = {
    "NOP", "RESUME", "CACHE", "PRECALL", "CALL", "KW_NAMES", "PUSH_NULL", "POP_TOP", "COPY", "SWAP",
    "EXTENDED_ARG", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST",
    "STORE_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_MAYBE_NULL", "DELETE_FAST",
    "LOAD_CONST", "RETURN_CONST", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_CLOSURE", "MAKE_CELL", "COPY_FREE_VARS",
    "LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR", "BINARY_OP", "BINARY_SUBSCR", "BINARY_SLICE", "STORE_SUBSCR",
    "STORE_SLICE", "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_POSITIVE", "UNARY_INVERT", "TO_BOOL", "COMPARE_OP",
    "IS_OP", "CONTAINS_OP", "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP", "BUILD_SET", "BUILD_SLICE",
    "BUILD_STRING", "BUILD_CONST_KEY_MAP", "LIST_APPEND", "SET_ADD", "MAP_ADD", "LIST_EXTEND", "SET_UPDATE",
    "DICT_UPDATE", "DICT_MERGE", "LIST_TO_TUPLE", "UNPACK_SEQUENCE", "UNPACK_EX", "FORMAT_VALUE",
    "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "CONVERT_VALUE", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
    "JUMP", "JUMP_NO_INTERRUPT", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE",
    "POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE", "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP",
    "GET_ITER", "FOR_ITER", "END_FOR", "RETURN_VALUE", "MAKE_FUNCTION", "SET_FUNCTION_ATTRIBUTE",
    "CALL_FUNCTION_EX", "CALL_INTRINSIC_1", "LOAD_ASSERTION_ERROR", "RAISE_VARARGS", "CALL_KW",
}
_PURE_METHOD_OWNERS = (list, tuple, dict, set, frozenset, int, float, str, bool, range)
_GENERATOR_OPS = {"RETURN_GENERATOR", "YIELD_VALUE", "SEND", "END_SEND", "POP_ITER"}      # a <genexpr> only

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
        self.attributes = []    # (owner, name, expected object): getattr(owner, name) is expected
        self._marks = set()
        self.codes = set()      # the code objects the transform may run
        self._seen = set()
        self._names = set()     # every name the recorded code objects use
        self._modules, self._module_ids, self._scanned = [], set(), set()
        self._entry = None

    def ok(self):
        """Whether everything recorded is still what it was (per move, before the generated code)."""
        for getter, key, obj in self.checks:
            if getter(key, _MISSING) is not obj:
                return False
        for owner, name, obj in self.attributes:
            if getattr(owner, name, _MISSING) is not obj:
                return False
        return True

    def _check(self, getter, key, value):
        """Add ``getter(key) is value`` (once: helpers share their modules' names)."""
        mark = (id(getattr(getter, "__self__", getter)), key)
        if mark not in self._marks:
            self._marks.add(mark)
            self.checks.append((getter, key, value))

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
                d = vars(m) if hasattr(m, "__dict__") else {}
                if name in d:
                    self._check(d.get, name, d[name])
                    self._value(d[name], f"{m.__name__}.{name}")

    def _namespace(self, obj):
        """An object whose attributes the code may read by name (a module, a function, a
        transform): each attribute a recorded code object names is guarded (and classified)."""
        if id(obj) not in self._module_ids:
            self._module_ids.add(id(obj))
            self._modules.append(obj)

    def _record_transform(self, f):
        self._attr(f, "fn", f.fn)
        self.record_function(f.fn)

    def _attr(self, owner, name, value):
        mark = (id(owner), name)
        if mark not in self._marks:
            self._marks.add(mark)
            self.attributes.append((owner, name, value))

    def record_function(self, fn):
        """Record a Python function: code, defaults, closure cells, the globals and module
        attributes its code names (with each value classified by :meth:`_value`)."""
        self._namespace(fn)
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
                self._check(g.get, name, value)
                self._value(value, f"the global {name}")
            elif name in b:
                self._check(g.get, name, _MISSING)
                self._check(b.get, name, b[name])
                self._value(b[name], f"the builtin {name}")

    def _value(self, value, what):
        """Refuse a value whose contents could change without its identity changing."""
        if _hashable(value) and value in _OPAQUE:
            raise Unsupported(f"uses {_OPAQUE[value]}")
        if isinstance(value, types.ModuleType):
            self._namespace(value)
            return
        if isinstance(value, _IMMUTABLE) or isinstance(value, types.BuiltinFunctionType):
            return
        if isinstance(value, (tuple, frozenset)):
            for v in value:
                self._value(v, what)
            return
        if isinstance(value, Transform):
            self._namespace(value)
            self._record_transform(value)
            return
        if isinstance(value, types.FunctionType):
            self._namespace(value)
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
        self._entry = sys._getframe(1)      # trace_once's frame: the walk in _by_tracer stops there
        hook = self._profile
        set_hook(hook)
        sys.setprofile(hook)
        return previous

    @staticmethod
    def stop(previous):
        set_hook(None)
        sys.setprofile(previous)

    def _profile(self, frame, event, arg):
        # (every call and return of the trace passes here: the common cases return first)
        if event == "call":
            code = frame.f_code
            if code in self.codes:
                return
            name = code.co_filename
            if name.startswith(_HERE) or name == _LANGUAGE or self._by_tracer(frame.f_back):
                return
            raise Unsupported(f"calls {code.co_name} (not reached through the transform's names)")
        if event == "c_call":
            if arg in _PURE_BUILTINS or arg in _TORCH:
                return
            name = frame.f_code.co_filename
            if name.startswith(_HERE) or name == _LANGUAGE or self._by_tracer(frame):
                return
            owner = getattr(arg, "__self__", None)
            if isinstance(owner, _PURE_METHOD_OWNERS) and not isinstance(owner, type):
                return
            raise Unsupported(f"calls {getattr(arg, '__qualname__', getattr(arg, '__name__', arg))}")

    def _by_tracer(self, frame):
        """Whether ``frame`` runs on behalf of the tracer (a tracer frame is among its callers
        below the trace's entry): the tracer reads records' distributions (``dist.discrete``
        may be a property), which is not the transform's doing."""
        entry = self._entry
        while frame is not None and frame is not entry:
            if frame.f_code.co_filename.startswith(_HERE):
                return True
            frame = frame.f_back
        return False

def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _scan(code, where):
    """Refuse code outside :data:`_ALLOWED_OPS` (see there), before it is traced."""
    if getattr(code, "co_exceptiontable", b""):
        raise Unsupported(f"an exception handler or with block in {where}")
    allowed = _ALLOWED_OPS | (_GENERATOR_OPS if code.co_name == "<genexpr>" else set())
    previous = None
    for ins in dis.get_instructions(code):
        op = ins.opname
        line = ins.positions.lineno if ins.positions else "?"
        if op not in allowed and not (op == "STORE_DEREF" and ins.argval in code.co_cellvars):
            raise Unsupported(f"{op} {ins.argval if ins.arg is not None else ''} in {where} (line {line})".replace("  ", " "))
        if op in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR") and str(ins.argval).startswith("__"):
            raise Unsupported(f"the attribute {ins.argval} in {where} (line {line})")
        if op == "IS_OP" and not (previous is not None and previous.opname == "LOAD_CONST"
                                  and previous.argval is None):
            raise Unsupported(f"an identity test (is) in {where} (line {line})")
        previous = ins
