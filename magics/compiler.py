"""Compile ``%%gen`` and ``%%transform`` cells into code objects (no IPython here).

A cell is compiled so that line ``L`` of the code object is line ``L`` of the
cell *as the notebook shows it*: line 1 is the ``%%gen`` / ``%%transform``
line, the first line of the body is line 2.  The text registered for the
filename (in :mod:`linecache`) is the original cell, so tracebacks and syntax
errors quote what the user wrote, not the compiled Python.
"""

from __future__ import annotations

import ast
import linecache
import re
from dataclasses import dataclass, field
from types import CodeType

from imcmc_lab.modeling.families import HELPER_NAME as FAMILY_HELPER
from imcmc_lab.modeling.families import lower_families_in_tree

from .rewrite import ENGINE_NAME, NotationError, RewriteResult, python_syntax_error, rewrite

__all__ = [
    "CompiledCell",
    "TransformSignature",
    "compile_gen_cell",
    "compile_transform_cell",
    "parse_transform_signature",
    "register_source",
]

#: Marker set on SyntaxErrors raised for a cell, so that the IPython side can
#: show them without frames.
CELL_ERROR_MARK = "_imcmc_lab_cell_error"


def register_source(text: str, filename: str) -> str:
    """Put ``text`` in :mod:`linecache` under ``filename`` (never evicted)."""
    lines = [line + "\n" for line in text.splitlines()]
    linecache.cache[filename] = (len(text), None, lines, filename)
    return filename


def _cell_error(msg, filename, original, lineno, offset, end_lineno=None, end_offset=None,
                cls=SyntaxError):
    lines = original.splitlines()
    text = lines[lineno - 1] + "\n" if 1 <= lineno <= len(lines) else None
    if end_lineno is None:
        end_lineno, end_offset = lineno, (offset + 1 if offset else None)
    err = cls(msg, (filename, lineno, offset, text, end_lineno, end_offset))
    setattr(err, CELL_ERROR_MARK, True)
    return err


def _relocate(err: SyntaxError, filename: str, original: str) -> SyntaxError:
    """A NotationError (positions already in cell coordinates) as a cell SyntaxError."""
    return _cell_error(err.msg, filename, original, err.lineno, err.offset,
                       getattr(err, "end_lineno", None), getattr(err, "end_offset", None))


def _mapped(rw: RewriteResult, err: SyntaxError, filename: str, original: str) -> SyntaxError:
    new = rw.map_syntax_error(err, original, filename)
    setattr(new, CELL_ERROR_MARK, True)
    return new


@dataclass
class CompiledCell:
    """What a cell compiled to."""

    kind: str  # "gen" or "transform"
    filename: str
    original: str  # the cell as the notebook shows it (magic line included)
    python: str  # the rewritten source, line-aligned with ``original``
    code: CodeType
    defined: list[str] = field(default_factory=list)  # names the cell binds as gen fns / transforms
    tree: ast.Module | None = field(default=None, repr=False)
    _decorate: dict[int, str] = field(default_factory=dict, repr=False)  # line -> decorator text
    _transform_header: str | None = field(default=None, repr=False)

    def referenced_names(self) -> set[str]:
        """Every bare name the compiled code reads."""
        if self.tree is None:
            return set()
        return {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Load)}

    def plain_python(self, from_imcmc_lab=(), import_torch=False) -> str:
        """The cell as a plain Python module (``import imcmc_lab as il`` and ``@il.gen``).

        ``from_imcmc_lab`` lists unqualified names the cell uses that come from
        imcmc_lab (they get a ``from imcmc_lab import ...`` line).
        """
        head = [f"# {self.original.splitlines()[0].strip()}  (compiled by imcmc_lab.magics)",
                "import imcmc_lab as il"]
        if import_torch:
            head.append("import torch")
        if from_imcmc_lab:
            head.append("from imcmc_lab import " + ", ".join(sorted(from_imcmc_lab)))
        head.append("")
        body_lines = self.python.splitlines()[1:]  # line 1 is the magic line
        out = []
        if self.kind == "transform":
            out.append(self._transform_header.replace(ENGINE_NAME + ".", "il."))
            out.extend(("    " + ln) if ln.strip() else "" for ln in body_lines)
        else:
            for lineno, ln in enumerate(body_lines, start=2):
                if lineno in self._decorate:
                    indent = ln[: len(ln) - len(ln.lstrip())]
                    out.append(indent + self._decorate[lineno])
                out.append(ln)
        text = "\n".join(head + out)
        return text.replace(ENGINE_NAME + ".", "il.").rstrip() + "\n"


# ---------------------------------------------------------------------------
# %%gen


def _is_gen_decorator(node: ast.expr) -> bool:
    if isinstance(node, ast.Call):
        node = node.func
    return (isinstance(node, ast.Name) and node.id == "gen") or (
        isinstance(node, ast.Attribute) and node.attr == "gen")


def _place(node: ast.AST, lineno: int, col: int, end_col: int) -> ast.AST:
    for n in ast.walk(node):
        if "lineno" in n._attributes:
            n.lineno = n.end_lineno = lineno
            n.col_offset = col
            n.end_col_offset = end_col
    return node


def _engine_attr(attr: str) -> ast.expr:
    return ast.Attribute(value=ast.Name(id=ENGINE_NAME, ctx=ast.Load()), attr=attr, ctx=ast.Load())



def _first_error(src: str, mode: str, err: SyntaxError, filename: str, original: str,
                 notation: bool):
    """Python's own error when plain Python finds one (before ``err``, for a ``notation``
    error: that one is the user's misuse of ``~`` only if it comes first); else ``err``.

    An unclosed bracket swallows the lines after it, so the notation, or Python on
    the rewritten code, may complain about another place; the user must see
    Python's message at the real one.
    """
    plain = python_syntax_error(src, mode)
    if plain is None or (notation and (plain.lineno or 0, plain.offset or 0)
                         > (err.lineno or 0, err.offset or 0)):
        return err
    return _cell_error(plain.msg, filename, original, plain.lineno, plain.offset,
                       plain.end_lineno, plain.end_offset, cls=type(plain))


def _parse_cell(body: str, header: str, filename: str, mode: str):
    """Rewrite the tilde notation and parse; errors are located in the cell (header = line 1)."""
    original = header + "\n" + body
    src = "\n" + body
    try:
        rw = rewrite(src, mode)
    except NotationError as e:
        raise _first_error(src, mode, _relocate(e, filename, original), filename, original,
                           notation=True) from None
    try:
        tree = ast.parse(rw.source, filename)
    except SyntaxError as e:
        raise _first_error(src, mode, _mapped(rw, e, filename, original), filename,
                           original, notation=False) from None
    return original, rw, tree

def _makes_choices(d: ast.FunctionDef, rw: RewriteResult) -> bool:
    """True when ``d`` has a ``~`` or a plain ``dist @ "address"`` (a literal address)."""
    if any(d.lineno <= ch.line <= d.end_lineno for ch in rw.choices):
        return True
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)
               and isinstance(n.right, (ast.Tuple, ast.Constant)) for n in ast.walk(d))


def _reject_bare_tilde(tree: ast.Module, filename: str, original: str) -> None:
    """A statement that is only ``~ expr`` (a bitwise not, thrown away) is a choice missing its name."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.UnaryOp) \
                and isinstance(n.value.op, ast.Invert):
            raise _cell_error(
                "this `~` has no name on its left, so it is a bitwise not whose value is thrown "
                'away: a random choice needs an address, e.g. `x ~ normal(0, 1)` or '
                '`{"x"} ~ normal(0, 1)`', filename, original, n.lineno, n.col_offset + 1,
                n.lineno, n.col_offset + 2)


def compile_gen_cell(body: str, filename: str, header: str = "%%gen") -> CompiledCell:
    """Compile the body of a ``%%gen`` cell.

    Every top-level ``def`` that makes a random choice (a ``~``, or the plain
    ``dist @ "address"``) becomes a generative function (decorated with the
    engine's ``gen``); a ``def`` without one stays a plain helper function
    (decorate it with ``@gen`` to make a generative function that makes no
    choices); other top-level statements run as ordinary Python.
    Raises ``SyntaxError`` located in the cell (``header`` is line 1).
    """
    original, rw, tree = _parse_cell(body, header, filename, "gen")

    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for d in defs:
        if isinstance(d, ast.AsyncFunctionDef):
            raise _cell_error("a generative function is a plain `def`, not `async def`",
                              filename, original, d.lineno, d.col_offset + 1,
                              d.lineno, d.col_offset + 6)
    for ch in rw.choices:
        if not any(d.lineno <= ch.line <= d.end_lineno for d in defs):
            raise _cell_error(
                "a random choice (`~`) only makes sense inside a generative function: "
                "put it in a `def` of this %%gen cell",
                filename, original, ch.line, ch.col + 1, ch.line, ch.col + 2)

    _reject_bare_tilde(tree, filename, original)
    decorate: dict[int, str] = {}
    defined = []
    for d in defs:
        if any(_is_gen_decorator(x) for x in d.decorator_list):
            defined.append(d.name)
            continue
        if not _makes_choices(d, rw):
            continue  # a helper: it stays a plain function (issue 16 item 20)
        defined.append(d.name)
        dec = _place(_engine_attr("gen"), d.lineno, d.col_offset, d.col_offset + 3)
        d.decorator_list.insert(0, dec)
        first = min([d.lineno] + [x.lineno for x in d.decorator_list[1:]])
        decorate[first] = "@" + ENGINE_NAME + ".gen"
    # [dist @ ("name", j) for j in ...] runs as one indexed family (imcmc_lab.modeling.families)
    lower_families_in_tree(tree, lambda: _engine_attr(FAMILY_HELPER))
    try:
        code = compile(tree, filename, "exec", dont_inherit=True)
    except SyntaxError as e:
        raise _mapped(rw, e, filename, original) from None
    return CompiledCell("gen", filename, original, rw.source, code, defined, tree, decorate)


# ---------------------------------------------------------------------------
# %%transform

_SIG_RE = re.compile(
    r"""^\s*(?P<name>[^\s()]+)\s*
        (?:\((?P<params>[^()]*)\)\s*)??
        \((?P<ins>[^()]*)\)\s*to\s*\((?P<outs>[^()]*)\)\s*$""",
    re.VERBOSE,
)

_SIG_HELP = ("expected `%%transform NAME (model_in, aux_in) to (model_out, aux_out)` "
             "or the one-trace form `%%transform NAME (t_in) to (t_out)`; extra "
             "arguments go after the name: `%%transform NAME(k, j) (t_in) to (t_out)`")


@dataclass
class TransformSignature:
    name: str
    inputs: list[str]
    outputs: list[str]
    params: str = ""  # extra parameters as Python source ("k, j=1")

    @property
    def one_trace(self) -> bool:
        return len(self.inputs) == 1

    def def_line(self) -> str:
        args = ", ".join(self.inputs + self.outputs)
        if self.params.strip():
            args += ", " + self.params.strip()
        return f"def {self.name}({args}):"


def parse_transform_signature(text: str) -> TransformSignature:
    """Parse ``NAME[(params)] (in...) to (out...)``; raises ``ValueError`` with a hint."""
    m = _SIG_RE.match(text)
    if not m:
        raise ValueError(_SIG_HELP)
    name = m.group("name")
    if not name.isidentifier() or name in ("to",):
        raise ValueError(f"`{name}` is not a valid transform name; " + _SIG_HELP)

    def names(group):
        items = [x.strip() for x in m.group(group).split(",")]
        if items and items[-1] == "":
            items.pop()
        for x in items:
            if not x.isidentifier():
                raise ValueError(f"`{x}` is not a valid trace name; " + _SIG_HELP)
        return items

    ins, outs = names("ins"), names("outs")
    if len(ins) not in (1, 2) or len(outs) != len(ins):
        raise ValueError(
            f"a transform maps (model_in, aux_in) to (model_out, aux_out), or (t_in) to (t_out); "
            f"got {len(ins)} input and {len(outs)} output trace names")
    if len(set(ins + outs)) != len(ins + outs):
        raise ValueError("the trace names must all differ")
    sig = TransformSignature(name, ins, outs, m.group("params") or "")
    try:
        ast.parse(sig.def_line() + " pass")
    except SyntaxError as e:
        raise ValueError(f"invalid transform parameters `({sig.params})`: {e.msg}") from None
    return sig


def compile_transform_cell(sig: TransformSignature, body: str, filename: str,
                           header: str) -> CompiledCell:
    """Compile the body of a ``%%transform`` cell into ``def NAME(...)`` + the engine's ``transform``."""
    original, rw, tree = _parse_cell(body, header, filename, "transform")
    if not tree.body:
        raise _cell_error("the transform has no body: write its read/write/copy statements "
                          "below the %%transform line", filename, original, 1, 1, 1, 2)
    fn = ast.parse(sig.def_line() + " pass").body[0]
    dec = ast.Call(func=_engine_attr("transform"), args=[],
                   keywords=[ast.keyword(arg="one_trace", value=ast.Constant(sig.one_trace))])
    fn.decorator_list = [dec]
    header_len = max(1, len(header))
    _place(fn, 1, 0, header_len)  # the def line is the %%transform line
    fn.body = tree.body
    fn.end_lineno = max(getattr(n, "end_lineno", 1) or 1 for n in tree.body)
    fn.end_col_offset = 0
    module = ast.Module(body=[fn], type_ignores=[])
    try:
        code = compile(module, filename, "exec", dont_inherit=True)
    except SyntaxError as e:
        raise _mapped(rw, e, filename, original) from None
    show_header = (f"@{ENGINE_NAME}.transform" + ("(one_trace=True)" if sig.one_trace else "")
                   + "\n" + sig.def_line())
    return CompiledCell("transform", filename, original, rw.source, code, [sig.name], module,
                        _transform_header=show_header)
