"""Indexed families of choices: Fig. 1's ``[normal(0, 10) @ ("mu", j) for j in ...]`` as one step.

A model that draws one choice per cluster writes a comprehension::

    means = [normal(0.0, 10.0) @ ("mu", j) for j in range(1, k + 1)]

Run as written, every ``update`` re-runs it element by element: K distribution
objects, K traced choices, each kept one costing the full per-choice
bookkeeping, although a move changes one or two of them. :func:`lower_families`
recompiles such a comprehension into one call of :func:`choice_family`, which
builds the distribution once. The trace remembers the family, so ``update``
keeps its unconstrained, unchanged elements as slices of the previous trace's
family and re-runs only the others (Gen's ``Map`` does the same for an indexed
family; here the user's loop is the family). The values come back as a
:class:`~imcmc_lab.core.values.ScalarList` that also knows them as floats: a
distribution given the list as a vector parameter (``mixture_of_normals(weights,
means, variances)``) makes one tensor from them instead of stacking K tensors.

Only comprehensions whose meaning cannot change are lowered:

* one ``for`` over a plain name ``j``, no ``if``;
* the element is ``CONSTRUCTOR(ARGS) @ ("name", j)``, with ``CONSTRUCTOR`` a
  name or dotted name and ``ARGS`` positional, built from constants, names other
  than ``j`` and arithmetic; no attribute reads (a property may give a new value
  on every read) and no calls;
* at run time ``CONSTRUCTOR`` must be one of the engine's distribution
  constructors (pure), and the names that arithmetic applies to must hold plain
  numbers or tensors (a user type's ``__add__`` may have effects) -- checked
  before anything is evaluated; otherwise the original element runs once per key.

So evaluating the arguments once or K times is provably the same.

The trace is the same, choice for choice, as the comprehension's: the same
addresses in the same order, the same values drawn from the same random
stream, the same errors at the same line. :func:`lower_families` recompiles a
function only when it can verify that the source it read compiles to the
function's own code (a file edited since import is left alone).
"""

from __future__ import annotations

import __future__
import ast
import copy
import inspect
import linecache
import sys
import types

import torch

from ..core import distributions as _distributions
from ..core.effects import active_handler, visit_family

__all__ = ["choice_family", "lower_families", "lower_families_in_tree", "lowering_report", "single_choice_kernel",
           "pure_call", "HELPER_NAME"]

#: The name the lowered code calls (a closure cell of a lowered function; an attribute of
#: the engine module in ``%%gen`` cells).
HELPER_NAME = "_choice_family"

_PURE_CONSTRUCTORS = frozenset(
    [getattr(_distributions, name) for name in _distributions.__all__ if name != "Distribution"]
)


def _is_pure_constructor(constructor) -> bool:
    try:
        if constructor in _PURE_CONSTRUCTORS:
            return True
    except TypeError:       # an unhashable callable
        return False
    return isinstance(constructor, type) and issubclass(constructor, _distributions.Distribution)


#: operand types whose arithmetic has no effects
_PLAIN_NUMBERS = frozenset([int, float, bool, complex])


def _plain_operands(operands) -> bool:
    return all(type(v) in _PLAIN_NUMBERS or type(v) is torch.Tensor for v in operands)


def choice_family(parts, namespace, keys, element, lineno, operands=None, loop=False):
    """``[constructor(*args) @ (namespace, key) for key in keys]``: the lowered comprehension
    (with ``loop``, the lowered ``for key in keys: constructor(*args) @ (namespace, key)``,
    which gets the last key back, or nothing if there are no keys, to bind its ``key``).

    ``parts()`` gives ``(constructor, args)``; like the comprehension, it is not evaluated
    when there are no keys. ``operands()`` (or None) gives the values of the names that
    the arguments' arithmetic applies to: unless they are plain numbers or tensors, the
    arguments are not evaluated once. ``element`` is the original element as a function
    of the key, run per key when the constructor is not one of the engine's distributions
    or no program is being traced. ``lineno`` is the element's line (error messages name it).
    """
    __tracebackhide__ = True
    if type(keys) is not range:
        keys = list(keys)
    values = _family_values(parts, namespace, keys, element, lineno, operands, not loop)
    return keys[-1:] if loop else values


def _family_values(parts, namespace, keys, element, lineno, operands, wanted=True):
    __tracebackhide__ = True
    tracer = active_handler()
    if tracer is None or not keys:
        return [element(key) for key in keys]
    if operands is not None and not _plain_operands(operands()):
        return [element(key) for key in keys]
    constructor, args = parts()
    if not _is_pure_constructor(constructor):
        return [element(key) for key in keys]
    line = (sys._getframe(2).f_code.co_filename, lineno)
    return visit_family(tracer, namespace, keys, constructor(*args), line, wanted)


# ---------------------------------------------------------------------------
# the AST pattern
# ---------------------------------------------------------------------------
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


def _dotted_name(node) -> bool:
    return isinstance(_root(node), ast.Name)


def _root(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _root_name(node):
    return _root(node).id


def _operand_names(args) -> list:
    """The names that arithmetic in ``args`` applies to (in order, without repeats)."""
    names = []
    for arg in args:
        for node in ast.walk(arg):
            if isinstance(node, (ast.BinOp, ast.UnaryOp)):
                for operand in ast.walk(node):
                    if isinstance(operand, ast.Name) and operand.id not in names:
                        names.append(operand.id)
    return names


def _invariant(node, key: str) -> bool:
    """An expression that does not use ``key`` and reads no attribute: evaluated once or per
    key, it gives the same value (given plain operands, checked at run time)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id != key
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, (ast.USub, ast.UAdd)) and _invariant(node.operand, key)
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, _ARITHMETIC) and _invariant(node.left, key) and \
            _invariant(node.right, key)
    return False


def _element_parts(elt, key):
    """``(constructor, args, namespace)`` if ``elt`` is ``CONSTRUCTOR(ARGS) @ ("name", key)``
    with arguments that cannot change from key to key; else a sentence saying why not."""
    if not (isinstance(elt, ast.BinOp) and isinstance(elt.op, ast.MatMult)):
        return "the element is not `dist(...) @ address`"
    call, address = elt.left, elt.right
    if not (isinstance(address, ast.Tuple) and len(address.elts) == 2
            and isinstance(address.elts[0], ast.Constant) and isinstance(address.elts[0].value, str)
            and isinstance(address.elts[1], ast.Name) and address.elts[1].id == key):
        return f'the address is not ("name", {key})'
    if not (isinstance(call, ast.Call) and _dotted_name(call.func) and _root_name(call.func) != key):
        return "the distribution is not a call of a (dotted) name"
    if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
        return "the distribution has keyword or starred arguments"
    if not all(_invariant(a, key) for a in call.args):
        return (f"an argument may change from one key to the next (it uses {key}, an attribute, "
                f"a subscript or a call): it is evaluated per key")
    return call.func, call.args, address.elts[0].value


def _comprehension_parts(node: ast.ListComp):
    """``(constructor, args, namespace, key name, iterable)`` if ``node`` is a family, else a
    sentence saying why not."""
    if len(node.generators) != 1:
        return "more than one `for`"
    gen = node.generators[0]
    if gen.ifs or gen.is_async or not isinstance(gen.target, ast.Name):
        return "an `if`, an `async for` or a target that is not one name"
    parts = _element_parts(node.elt, gen.target.id)
    return parts if isinstance(parts, str) else (*parts, gen.target.id, gen.iter)


def _loop_parts(node: ast.For):
    """The same for ``for key in keys: dist(...) @ ("name", key)`` (one statement, no ``else``)."""
    if node.orelse or not isinstance(node.target, ast.Name):
        return "an `else` or a target that is not one name"
    if len(node.body) != 1 or not isinstance(node.body[0], ast.Expr):
        return "the body is not one `dist(...) @ address` statement"
    parts = _element_parts(node.body[0].value, node.target.id)
    return parts if isinstance(parts, str) else (*parts, node.target.id, node.iter)


def _is_candidate(node) -> bool:
    """A comprehension or loop that makes a traced choice or call (``... @ ...``) per key."""
    inside = [node.elt] if isinstance(node, ast.ListComp) else node.body
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)
               for part in inside for n in ast.walk(part))


def _lambda(params, body):
    return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params],
                                         kwonlyargs=[], kw_defaults=[], defaults=[]),
                      body=body)


class _Lower(ast.NodeTransformer):
    def __init__(self, helper):
        self.helper = helper      # () -> the expression naming choice_family
        self.count = 0
        #: (line, "comprehension"/"loop", None if lowered else why not), in source order
        self.report = []

    def _family_call(self, parts, node, element, loop):
        func, args, namespace, key, iterable = parts
        self.count += 1
        self.report.append((node.lineno, _KIND[type(node)], None))
        parts = _lambda([], ast.Tuple(elts=[func, ast.Tuple(elts=list(args), ctx=ast.Load())],
                                      ctx=ast.Load()))
        names = _operand_names(args)
        operands = _lambda([], ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Load()) for n in names],
                                         ctx=ast.Load())) if names else ast.Constant(None)
        call = ast.Call(
            func=self.helper(),
            args=[parts, ast.Constant(namespace), iterable, _lambda([key], element),
                  ast.Constant(element.lineno), operands, ast.Constant(loop)],
            keywords=[])
        return ast.copy_location(call, node)

    def _not_lowered(self, node, why):
        if _is_candidate(node):
            self.report.append((node.lineno, _KIND[type(node)], why))
        return node

    def visit_ListComp(self, node):
        self.generic_visit(node)
        parts = _comprehension_parts(node)
        if isinstance(parts, str):
            return self._not_lowered(node, parts)
        return ast.fix_missing_locations(self._family_call(parts, node, node.elt, False))

    def visit_For(self, node):
        self.generic_visit(node)
        parts = _loop_parts(node)
        if isinstance(parts, str):
            return self._not_lowered(node, parts)
        # ``for key in <the family, run; its last key>: pass`` leaves ``key`` bound as the loop does
        node.iter = self._family_call(parts, node, node.body[0].value, True)
        node.body = [ast.copy_location(ast.Pass(), node.body[0])]
        return ast.fix_missing_locations(node)


_KIND = {ast.ListComp: "comprehension", ast.For: "loop"}


def lower_families_in_tree(tree, helper) -> int:
    """Lower the families inside every function of ``tree`` in place; return how many.
    ``helper()`` makes the expression that names :func:`choice_family` in that code."""
    return _lower_tree(tree, helper).count


def _lower_tree(tree, helper):
    lowering = _Lower(helper)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = [lowering.visit(stmt) for stmt in node.body]
    ast.fix_missing_locations(tree)
    return lowering


# ---------------------------------------------------------------------------
# recompiling a function
# ---------------------------------------------------------------------------
_IDENTITY = "__imcmc_lab_identity__"
_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag
_CO_NESTED = 0x10       # set on the recompiled code (it is defined inside a factory)


def _imported_names(filename) -> list:
    """Names bound by imports at the top level of ``filename``'s source: CPython 3.11
    compiles ``name.attr(...)`` differently when ``name`` is imported there."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return []
    names, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"]
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return names


def _factory(fn, def_node, extra_names, imported):
    """A module whose one function binds ``fn``'s free variables (so the recompiled code
    has them as free variables too) and returns the function ``def_node`` defines. The
    module imports what ``fn``'s file imports (it is compiled, never run)."""
    bound = list(fn.__code__.co_freevars) + list(extra_names) + [_IDENTITY]
    assign = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store()) for name in bound],
                        value=ast.Constant(None))
    # decorators have been applied already: keep their lines (the code's first line) only
    def_node.decorator_list = [ast.copy_location(ast.Name(id=_IDENTITY, ctx=ast.Load()), d)
                               for d in def_node.decorator_list]
    factory = ast.FunctionDef(
        name="__imcmc_lab_factory__",
        args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[assign, def_node, ast.Return(ast.Name(id=def_node.name, ctx=ast.Load()))],
        decorator_list=[])
    imports = [ast.Import(names=[ast.alias(name="__imcmc_lab_never_run__", asname=name)])
               for name in imported]
    module = ast.Module(body=imports + [factory], type_ignores=[])
    for node in (*imports, *[i.names[0] for i in imports], assign, factory, *assign.targets, assign.value, factory.body[-1], factory.body[-1].value):
        ast.copy_location(node, def_node)
    ast.fix_missing_locations(module)
    return module


def _inner_code(module_code, name):
    factory = next(c for c in module_code.co_consts if isinstance(c, types.CodeType)
                   and c.co_name == "__imcmc_lab_factory__")
    return next(c for c in factory.co_consts if isinstance(c, types.CodeType) and c.co_name == name)


def _same_code(a, b) -> bool:
    """The same program (bytecode, names, constants), line and column information aside."""
    if (a.co_code != b.co_code or a.co_names != b.co_names or a.co_varnames != b.co_varnames
            or a.co_freevars != b.co_freevars or a.co_cellvars != b.co_cellvars
            or a.co_argcount != b.co_argcount or a.co_kwonlyargcount != b.co_kwonlyargcount
            or (a.co_flags | _CO_NESTED) != (b.co_flags | _CO_NESTED)
            or len(a.co_consts) != len(b.co_consts)):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, types.CodeType) or isinstance(y, types.CodeType):
            if not (isinstance(x, types.CodeType) and isinstance(y, types.CodeType) and _same_code(x, y)):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _function_def(fn):
    """The parsed ``def`` of ``fn`` at its file's line numbers, or None."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    text = "".join(lines)
    indented = text[:1].isspace()
    if indented:            # keep the columns: parse inside a block instead of dedenting
        text = "if 1:\n" + text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    node = tree.body[0].body[0] if indented else tree.body[0]
    if not isinstance(node, ast.FunctionDef) or node.name != fn.__code__.co_name:
        return None
    ast.increment_lineno(node, first - (2 if indented else 1))
    return node


def _compiled(fn, def_node, extra_names):
    """The code of ``def_node`` compiled as ``fn``'s would be (its file, future flags,
    free variables and the names its file imports)."""
    code = fn.__code__
    module = compile(_factory(fn, def_node, extra_names, _imported_names(code.co_filename)),
                     code.co_filename, "exec", flags=code.co_flags & _FUTURE_FLAGS, dont_inherit=True)
    return _inner_code(module, def_node.name)


def _source_matches(fn, node) -> bool:
    """Whether ``node`` (``fn``'s source as read from its file) compiles to ``fn``'s own code."""
    try:
        return _same_code(_compiled(fn, copy.deepcopy(node), ()), fn.__code__)
    except (SyntaxError, ValueError, StopIteration):
        return False


def lower_families(fn):
    """``fn`` with its comprehension families lowered (see the module docstring), or ``fn``
    itself when it has none or its source cannot be verified against its code."""
    code = fn.__code__
    if HELPER_NAME in code.co_names or HELPER_NAME in code.co_freevars:
        return fn           # lowered already (a %%gen cell)
    # Found in the source, not among the code's constants: Python 3.12 inlines
    # comprehensions (PEP 709), so there is no ``<listcomp>`` code object to look for.
    node = _function_def(fn)
    if node is None or not any(isinstance(n, ast.ListComp) and not isinstance(_comprehension_parts(n), str)
                               or isinstance(n, ast.For) and not isinstance(_loop_parts(n), str)
                               for n in ast.walk(node)):
        return fn
    if not _source_matches(fn, node):
        return fn           # the source on disk is not this function's (edited since import)
    try:
        lowered_node = copy.deepcopy(node)
        wrapper = ast.Module(body=[lowered_node], type_ignores=[])
        if lower_families_in_tree(wrapper, lambda: ast.Name(id=HELPER_NAME, ctx=ast.Load())) == 0:
            return fn
        lowered = _compiled(fn, lowered_node, (HELPER_NAME,))
    except (SyntaxError, ValueError, StopIteration):
        return fn
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    cells[HELPER_NAME] = types.CellType(choice_family)
    new = types.FunctionType(lowered.replace(co_qualname=code.co_qualname), fn.__globals__,
                             fn.__name__, fn.__defaults__, tuple(cells[n] for n in lowered.co_freevars))
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__annotations__ = fn.__annotations__
    new.__dict__.update(fn.__dict__)
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return new


def lowering_report(fn, lowered: bool) -> list:
    """One line per comprehension or loop of ``fn`` that makes a choice per key: whether it
    runs as one indexed family, and if not, why (``lowered``: whether ``fn``'s body was
    recompiled at all)."""
    node = _function_def(fn) if hasattr(fn, "__code__") else None
    if node is None:
        return ["the source of this function cannot be read: its body runs as written"]
    found = _lower_tree(ast.Module(body=[node], type_ignores=[]),
                        lambda: ast.Name(id=HELPER_NAME, ctx=ast.Load())).report
    lines = []
    for lineno, kind, why in sorted(found, key=lambda entry: entry[0]):
        if why is None and not lowered:
            why = "lowering is off (gen(lower=False)) or the source on disk is not this function's"
        lines.append(f"line {lineno}: {kind} " + ("runs as one indexed family" if why is None
                                                  else f"runs as written: {why}"))
    return lines


# ---------------------------------------------------------------------------
# a Map's kernel that is one choice (combinators.Map scores its elements together)
# ---------------------------------------------------------------------------
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08


def _kernel_argument(node, params) -> bool:
    """Constants, names, and arithmetic whose operands are parameters or constants."""
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    return _arithmetic_of(node, params)


def _arithmetic_of(node, params) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in params
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, (ast.USub, ast.UAdd)) and _arithmetic_of(node.operand, params)
    return (isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC)
            and _arithmetic_of(node.left, params) and _arithmetic_of(node.right, params))


def _single_choice_parts(node):
    """``(call, name)`` if ``node`` is ``def k(p1, ..., pk): return CONSTRUCTOR(ARGS) @ "name"``
    (a docstring allowed; ARGS as :func:`_kernel_argument` allows), else None."""
    body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr)
                             and isinstance(node.body[0].value, ast.Constant)
                             and isinstance(node.body[0].value.value, str)) else node.body
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    elt, params = body[0].value, {a.arg for a in node.args.args}
    if not (isinstance(elt, ast.BinOp) and isinstance(elt.op, ast.MatMult)
            and isinstance(elt.right, ast.Constant) and isinstance(elt.right.value, str)):
        return None
    call = elt.left
    if not (isinstance(call, ast.Call) and _dotted_name(call.func) and _root_name(call.func) not in params
            and not call.keywords and all(_kernel_argument(a, params) for a in call.args)):
        return None
    return call, elt.right.value


def single_choice_kernel(fn):
    """``(make, address)`` when ``fn`` is ``def k(p1, ..., pk): return CONSTRUCTOR(ARGS) @ "name"``
    with positional parameters only, no free variables, ``ARGS`` constants, names and
    arithmetic on the parameters, and its source verified against its code: ``make(*args)``
    evaluates ``CONSTRUCTOR(ARGS)`` as the body does (the same reads in the same order), and
    ``address`` is ``("name",)``. Else None. ``make(*args)`` gives ``(CONSTRUCTOR, ARGS)``, so
    the caller can check that the constructor is one of the engine's (pure) before calling it."""
    code = getattr(fn, "__code__", None)
    if (code is None or code.co_freevars or code.co_kwonlyargcount or fn.__defaults__
            or code.co_flags & (_CO_VARARGS | _CO_VARKEYWORDS) or code.co_posonlyargcount):
        return None
    node = _function_def(fn)
    parts = _single_choice_parts(node) if node is not None else None
    if parts is None or not _source_matches(fn, node):
        return None
    call, name = parts
    pair = ast.Tuple(elts=[call.func, ast.Tuple(elts=list(call.args), ctx=ast.Load())], ctx=ast.Load())
    make = ast.Expression(body=_lambda([a.arg for a in node.args.args], pair))
    ast.fix_missing_locations(make)
    try:
        made = eval(compile(make, code.co_filename, "eval", dont_inherit=True), fn.__globals__)
    except (SyntaxError, ValueError):
        return None
    return made, (name,)


def pure_call(constructor, args):
    """``constructor(*args)`` if the constructor is one of the engine's distributions and the
    arguments are plain numbers or tensors (nothing with effects runs), else None."""
    if not _is_pure_constructor(constructor) or not _plain_operands(args):
        return None
    return constructor(*args)
