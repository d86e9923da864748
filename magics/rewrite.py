"""Token-level rewriting of the notebook notation into plain Python.

This module is pure Python (no IPython import) so that it can be tested and
reused on its own.  It knows three rewrites:

``name ~ expr``        (statement)   ->  ``name = expr @ "name"``
``name ~ expr``        (in an expression) -> ``(name := expr @ "name")``
``{addr} ~ expr``      (expression)  ->  ``(expr @ addr)``
``@read(...)`` etc.    (%%transform) ->  ``__imcmc_lab__.read(...)``

The rewrite works on tokens, never on raw text: a ``~`` inside a string, a
comment or an f-string's text is never touched, and a *unary* ``~`` (bitwise
not: it follows an operator, an opening bracket, a keyword or the start of a
statement) is left alone.  A ``~`` is binary (a random choice) exactly when it
follows a complete operand, which plain Python never allows.

Every token stays on the line it came from, so line numbers of the rewritten
source equal those of the original; a column map translates columns of the
rewritten source back to the original, so a syntax error's caret lands on the
character the user typed.

How far the right-hand side of ``~`` reaches
--------------------------------------------
* statement form ``name ~ expr``: the whole rest of the statement.
* expression forms ``{addr} ~ expr`` and ``name ~ expr`` inside an expression:
  ``expr`` takes in arithmetic, bitwise operators, calls, attribute access and
  ``await``, and stops at the first of: ``,`` ``:`` ``;`` ``=`` ``:=`` an
  augmented assignment, a comparison (``==``, ``<``, ``in``, ``is``, ...),
  ``not`` / ``and`` / ``or``, ``if`` / ``else``, ``for``, any other keyword, a
  closing bracket, or the end of the statement.  So
  ``[{("mu", j)} ~ normal(0, 10) for j in range(k)]`` and
  ``if {"done"} ~ bernoulli(0.5) and depth > 2:`` mean what they say.
  Parenthesize when in doubt: ``({"a"} ~ normal(0, 1)) * 2``.
"""

from __future__ import annotations

import ast
import bisect
import io
import keyword
import tokenize
from dataclasses import dataclass, field

__all__ = [
    "ENGINE_NAME",
    "NotationError",
    "RewriteResult",
    "python_syntax_error",
    "rewrite",
    "TRANSFORM_OPS",
]

#: Name under which the engine module is visible to compiled code.
ENGINE_NAME = "__imcmc_lab__"

#: ``@name(...)`` spellings accepted in %%transform cells.
TRANSFORM_OPS = ("read", "write", "copy", "tcall")

_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)
_TSTRING_START = getattr(tokenize, "TSTRING_START", None)
_TSTRING_END = getattr(tokenize, "TSTRING_END", None)
_STRING_STARTS = {t for t in (_FSTRING_START, _TSTRING_START) if t is not None}
_STRING_ENDS = {t for t in (_FSTRING_END, _TSTRING_END) if t is not None}

_OP_EXAMPLES = {
    "read": '`k = @read(model_in["k"], discrete)`',
    "write": '`@write(model_out["k"], k + 1, discrete)`',
    "copy": '`@copy(aux_in["u"], model_out["u"])`',
    "tcall": "`@tcall(other_transform, arg)`",
}

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}
_SKIP = {tokenize.NL, tokenize.COMMENT, tokenize.ENCODING}
_STATEMENT_BREAK = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
_COMPOUND = {"if", "elif", "else", "while", "for", "with", "try", "except",
             "finally", "def", "class", "async", "match", "case"}
_AUGASSIGN = {"+=", "-=", "*=", "/=", "//=", "%=", "@=", "&=", "|=", "^=",
              ">>=", "<<=", "**="}
_COMPARISON = {"==", "!=", "<", ">", "<=", ">=", "<>"}
# Tokens that end the right-hand side of an expression-form `~`.
_EXPR_STOP_OPS = {",", ":", ";", "=", ":=", "->", "!"} | _AUGASSIGN | _COMPARISON
# Keywords that may appear inside the right-hand side (everything else stops it).
_EXPR_KEEP_KEYWORDS = {"await", "None", "True", "False"}
# Tokens after which `name ~ expr` is an expression (compiled to `:=`).
_WALRUS_AFTER_OPS = {"(", "[", "{", ",", "=", ":", ":="} | _AUGASSIGN | _COMPARISON
_WALRUS_AFTER_KEYWORDS = {"return", "yield", "if", "elif", "while", "else", "and",
                          "or", "not", "in", "is", "assert", "with", "raise",
                          "from"}


class NotationError(SyntaxError):
    """A syntax error in the notebook notation, located in the original text.

    ``lineno`` / ``offset`` are the 1-based line and column in the source that
    was given to :func:`rewrite` (see ``line_offset`` there).
    """


@dataclass
class _Tok:
    type: int
    string: str
    start: tuple[int, int]
    end: tuple[int, int]

    @property
    def is_name(self) -> bool:
        return self.type == tokenize.NAME

    def is_op(self, *ops: str) -> bool:
        return self.type == tokenize.OP and self.string in ops


@dataclass
class _Edit:
    start: tuple[int, int]
    end: tuple[int, int]
    text: str
    kind: int  # 0: closing insertion, 1: opening insertion, 2: replacement
    seq: int

    def key(self):
        tie = self.seq if self.kind == 0 else -self.seq
        return (self.start, self.kind, tie)


@dataclass
class Choice:
    """One binary ``~`` found in the source (original coordinates)."""

    form: str  # "statement", "walrus" or "address"
    line: int
    col: int  # 0-based column of the `~`
    address: str  # the address as Python source (`"k"`, `("mu", j)`)


@dataclass
class RewriteResult:
    source: str  # the rewritten source; same number of lines as the input
    choices: list[Choice] = field(default_factory=list)
    transform_ops: list[tuple[int, int, str]] = field(default_factory=list)
    complete: bool = True  # False when tokenizing stopped early (the source is invalid)
    _colmaps: dict[int, list[tuple[int, int, bool]]] = field(default_factory=dict, repr=False)

    def original_col(self, line: int, col: int) -> int:
        """Map a 0-based column of the rewritten ``line`` back to the original."""
        segs = self._colmaps.get(line)
        if not segs:
            return col
        starts = [s[0] for s in segs]
        i = bisect.bisect_right(starts, col) - 1
        if i < 0:
            return col
        new_start, orig_start, copied = segs[i]
        if copied:
            return orig_start + (col - new_start)
        return orig_start

    def map_syntax_error(self, err: SyntaxError, original: str, filename: str,
                         line_offset: int = 0) -> SyntaxError:
        """Return a copy of ``err`` whose position refers to the original text."""
        lines = original.splitlines()
        lineno = err.lineno
        offset = err.offset
        end_lineno = getattr(err, "end_lineno", None)
        end_offset = getattr(err, "end_offset", None)
        if lineno is not None and offset is not None and offset > 0:
            offset = self.original_col(lineno, offset - 1) + 1
        if end_lineno is not None and end_offset is not None and end_offset > 0:
            end_offset = self.original_col(end_lineno, end_offset - 1) + 1
            if end_lineno == lineno and offset is not None and end_offset <= offset:
                end_offset = offset + 1
        text = None
        if lineno is not None and 1 <= lineno <= len(lines):
            text = lines[lineno - 1] + "\n"
        if lineno is not None:
            lineno += line_offset
        if end_lineno is not None:
            end_lineno += line_offset
        cls = type(err) if isinstance(err, SyntaxError) else SyntaxError
        new = cls(err.msg, (filename, lineno, offset, text, end_lineno, end_offset))
        return new


# ---------------------------------------------------------------------------
# tokenizing


def _tokenize(src: str) -> tuple[list[_Tok], bool]:
    """Tokens of ``src``; f-/t-strings are collapsed into one STRING token.

    Returns ``(tokens, complete)``; ``complete`` is False when the tokenizer
    gave up (unterminated string or bracket, bad dedent): the tokens seen so
    far are still returned so that the part before the problem is rewritten
    and the compiler can then report the real error.
    """
    toks: list[_Tok] = []
    complete = True
    depth = 0
    fstart = None
    try:
        for t in tokenize.generate_tokens(io.StringIO(src).readline):
            if t.type in _STRING_STARTS:
                if depth == 0:
                    fstart = t.start
                depth += 1
                continue
            if t.type in _STRING_ENDS:
                depth -= 1
                if depth == 0:
                    toks.append(_Tok(tokenize.STRING, _slice(src, fstart, t.end), fstart, t.end))
                continue
            if depth:
                continue
            toks.append(_Tok(t.type, t.string, t.start, t.end))
    except (tokenize.TokenError, SyntaxError):
        complete = False
    return toks, complete


def _slice(src: str, start: tuple[int, int], end: tuple[int, int]) -> str:
    lines = src.splitlines(keepends=True)
    if start[0] == end[0]:
        return lines[start[0] - 1][start[1]:end[1]]
    out = [lines[start[0] - 1][start[1]:]]
    out.extend(lines[start[0]:end[0] - 1])
    out.append(lines[end[0] - 1][:end[1]])
    return "".join(out)


# ---------------------------------------------------------------------------
# the rewriter


class _Rewriter:
    def __init__(self, src: str, mode: str):
        self.src = src
        self.lines = src.splitlines(keepends=True)
        self.mode = mode
        toks, self.complete = _tokenize(src)
        self.sig = [t for t in toks if t.type not in _SKIP]
        self._match_brackets()
        self.edits: list[_Edit] = []
        self.seq = 0
        self.choices: list[Choice] = []
        self.ops: list[tuple[int, int, str]] = []

    # -- structure ---------------------------------------------------------

    def _match_brackets(self):
        sig = self.sig
        self.match = [-1] * len(sig)
        self.depth = [0] * len(sig)
        stack: list[int] = []
        for i, t in enumerate(sig):
            if t.type == tokenize.OP and t.string in _OPEN:
                self.depth[i] = len(stack)
                stack.append(i)
            elif t.type == tokenize.OP and t.string in _CLOSE:
                if stack and _OPEN[sig[stack[-1]].string] == t.string:
                    j = stack.pop()
                    self.match[i] = j
                    self.match[j] = i
                self.depth[i] = len(stack)
            else:
                self.depth[i] = len(stack)

    def _is_operand_end(self, i: int) -> bool:
        t = self.sig[i]
        if t.type in (tokenize.NUMBER, tokenize.STRING):
            return True
        if t.type == tokenize.NAME:
            return not keyword.iskeyword(t.string) or t.string in ("None", "True", "False")
        return t.type == tokenize.OP and t.string in (")", "]", "}", "...")

    def _line_start(self, i: int) -> int:
        """Index of the first token of the logical line containing token i."""
        j = i
        while j > 0 and self.sig[j - 1].type not in _STATEMENT_BREAK:
            j -= 1
        return j

    def _line_end(self, i: int) -> int:
        """Index of the NEWLINE/ENDMARKER ending the logical line of token i."""
        j = i
        n = len(self.sig)
        while j < n and self.sig[j].type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
            j += 1
        return j

    def _is_statement_start(self, i: int) -> bool:
        if i == 0:
            return True
        p = self.sig[i - 1]
        if p.type in _STATEMENT_BREAK:
            return True
        if self.depth[i - 1] != 0 or p.type != tokenize.OP:
            return False
        if p.string == ";":
            return True
        if p.string == ":":
            start = self._line_start(i - 1)
            first = self.sig[start]
            if first.type == tokenize.NAME and first.string in _COMPOUND:
                # the header colon, unless a lambda's colon comes first
                for k in range(start, i - 1):
                    if self.depth[k] == 0 and self.sig[k].is_op(":"):
                        return False
                    if self.depth[k] == 0 and self.sig[k].is_name and self.sig[k].string == "lambda":
                        return False
                return True
        return False

    def _is_binary_tilde(self, i: int) -> bool:
        if i == 0 or not self._is_operand_end(i - 1):
            return False
        p = self.sig[i - 1]
        if p.type == tokenize.NAME and p.string in ("match", "case") and self._is_statement_start(i - 1):
            end = self._line_end(i)
            if end > 0 and self.sig[end - 1].is_op(":"):
                return False  # `match ~x:` / `case ~x:` are statements
        return True

    def _is_primary(self, a: int, z: int) -> bool:
        """True when tokens a..z form an atom followed by trailers."""
        sig = self.sig
        if a > z:
            return False
        t = sig[a]
        if t.type == tokenize.OP and t.string in _OPEN:
            i = self.match[a] + 1
            if self.match[a] < 0:
                return False
        elif t.type in (tokenize.NUMBER, tokenize.STRING):
            i = a + 1
            while i <= z and sig[i].type == tokenize.STRING:  # implicit concatenation
                i += 1
        elif t.type == tokenize.NAME and (not keyword.iskeyword(t.string)
                                          or t.string in ("None", "True", "False")):
            i = a + 1
        else:
            return False
        while i <= z:
            t = sig[i]
            if t.is_op(".") and i + 1 <= z and sig[i + 1].is_name:
                i += 2
            elif t.is_op("(", "[") and self.match[i] > 0:
                i = self.match[i] + 1
            else:
                return False
        return i == z + 1

    def _rhs_end(self, t: int, statement: bool) -> int:
        """Index of the last token of the right-hand side of the `~` at t.

        Bracketed groups are skipped whole, so every token looked at here is
        at the bracket depth of the `~` itself.
        """
        sig = self.sig
        last = t
        i = t + 1
        n = len(sig)
        while i < n:
            tok = sig[i]
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
                break
            if tok.type == tokenize.OP:
                if tok.string in _CLOSE or tok.string == ";":
                    break
                if not statement and tok.string in _EXPR_STOP_OPS:
                    break
                if tok.string in _OPEN:
                    if self.match[i] > i:
                        last = self.match[i]
                        i = last + 1
                        continue
                    # an unclosed bracket: the source is invalid anyway; end at the
                    # last real token so the compiler reports the real problem
                    j = n - 1
                    while j > i and sig[j].type in _STATEMENT_BREAK | {tokenize.ENDMARKER}:
                        j -= 1
                    return j
            elif (not statement and tok.type == tokenize.NAME and keyword.iskeyword(tok.string)
                  and tok.string not in _EXPR_KEEP_KEYWORDS):
                break
            last = i
            i += 1
        return last

    def _tok_text(self, a: int, z: int) -> str:
        """Source text of tokens a..z on one line (comments and newlines dropped)."""
        sig = self.sig
        if sig[a].start[0] == sig[z].end[0]:
            return _slice(self.src, sig[a].start, sig[z].end)
        out = []
        for i in range(a, z + 1):
            tok = sig[i]
            if tok.start[0] != tok.end[0]:
                raise self._error("write this address on one line", tok.start, tok.end)
            if i < z and sig[i + 1].start[0] == tok.start[0]:
                out.append(_slice(self.src, tok.start, sig[i + 1].start))
            else:
                out.append(tok.string + (" " if i < z else ""))
        return "".join(out)

    def _error(self, msg, start, end=None):
        line = start[0]
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        if end is None or end[0] != start[0]:
            end = (start[0], start[1] + 1)
        return NotationError(msg, ("<cell>", line, start[1] + 1, text, end[0], end[1] + 1))

    # -- edits ------------------------------------------------------------

    def _insert(self, pos, text, closing: bool):
        self.edits.append(_Edit(pos, pos, text, 0 if closing else 1, self.seq))

    def _replace(self, start, end, text):
        if start[0] != end[0]:
            raise AssertionError("multi-line replacement")
        self.edits.append(_Edit(start, end, text, 2, self.seq))

    # -- the rewrites -----------------------------------------------------

    def run(self) -> RewriteResult:
        sig = self.sig
        tildes = [i for i, t in enumerate(sig) if t.is_op("~") and self._is_binary_tilde(i)]
        if self.mode == "transform" and tildes:
            t = sig[tildes[0]]
            raise self._error(
                "a transform makes no random choices (`~`); sample them in the auxiliary "
                "program q and read them here with read(aux_in[...], ...)", t.start, t.end)
        tilde_set = set(tildes)
        for t in reversed(tildes):
            self.seq += 1
            self._rewrite_tilde(t, tilde_set)
        if self.mode == "transform":
            self._rewrite_transform_ops()
        src, colmaps = self._apply()
        self.choices.sort(key=lambda c: (c.line, c.col))
        return RewriteResult(src, self.choices, self.ops, self.complete, colmaps)

    def _rewrite_tilde(self, t: int, tilde_set: set[int]):
        sig = self.sig
        tt = sig[t]
        p = sig[t - 1]
        if p.is_op("}"):
            b = self.match[t - 1]
            if b < 0:
                raise self._error("unbalanced braces before `~`", p.start, p.end)
            self._rewrite_address(b, t, tilde_set)
            return
        annotated = self._annotation_target(t)
        if annotated is not None:
            raise self._error(
                f"a random choice cannot carry a type annotation (`{annotated}: ...` is an "
                f"annotation, never evaluated): write `{annotated} ~ normal(...)`; its value is "
                "a float64 tensor (continuous) or an int (discrete)", tt.start, tt.end)
        if p.type == tokenize.NAME and not keyword.iskeyword(p.string):
            before = t - 2
            if before >= 0 and sig[before].is_op("."):
                raise self._error(
                    "the left of `~` must be a plain name (`x ~ dist`) or an address in braces "
                    '(`{"x"} ~ dist`), not an attribute', tt.start, tt.end)
            if self._is_statement_start(t - 1):
                self._rewrite_statement(t)
                return
            if before >= 0 and (
                    (sig[before].type == tokenize.OP and sig[before].string in _WALRUS_AFTER_OPS)
                    or (sig[before].type == tokenize.NAME and sig[before].string in _WALRUS_AFTER_KEYWORDS)):
                self._rewrite_walrus(t)
                return
            op = sig[before].string if before >= 0 else ""
            raise self._error(
                f"`~` binds more loosely than `{op}`: put the random choice in parentheses, "
                f'e.g. `({p.string} ~ ...)` or `({{"{p.string}"}} ~ ...)`',
                tt.start, tt.end)
        if p.type == tokenize.STRING:
            hint = f" (write `{{{p.string}}} ~ ...`)"
        elif p.type == tokenize.NUMBER:
            hint = f" (write `{{{p.string}}} ~ ...`)"
        elif p.is_op("]"):
            hint = ' (for an indexed address write `{("xs", i)} ~ ...`)'
        else:
            hint = ""
        raise self._error(
            "the left of `~` must be a name (`x ~ dist`, the choice at address \"x\") or an "
            'address in braces (`{"x"} ~ dist`, `{("mu", j)} ~ dist`)' + hint, tt.start, tt.end)

    def _annotation_target(self, t: int) -> str | None:
        """The annotated target when the `~` at t is inside an annotation (`x: float ~ d`).

        That is a simple statement whose first bracket-level colon comes before the
        `~` with no `=` between them (a compound header, a lambda, a dict or a
        slice has its colon elsewhere or deeper).
        """
        sig = self.sig
        start = self._line_start(t)
        first = sig[start]
        if first.is_name and first.string in _COMPOUND | {"lambda"}:
            return None
        colon = None
        for k in range(start, t):
            if self.depth[k] != self.depth[t]:
                continue
            tok = sig[k]
            if tok.is_name and tok.string == "lambda":
                return None
            if tok.is_op(";"):
                start, colon = k + 1, None
            elif tok.is_op(":") and colon is None:
                colon = k
            elif tok.is_op("=", ":=") and colon is not None:
                return None
        if colon is None or self.depth[t] != 0 or colon == start:
            return None
        return self._tok_text(start, colon - 1)

    def _rhs(self, t: int, statement: bool) -> tuple[int, int, bool]:
        z = self._rhs_end(t, statement)
        if z <= t:
            tt = self.sig[t]
            raise self._error("missing the distribution or generative function call after `~`",
                              tt.start, tt.end)
        return t + 1, z, not self._is_primary(t + 1, z)

    def _rewrite_statement(self, t: int):
        sig = self.sig
        name = sig[t - 1].string
        a, z, paren = self._rhs(t, statement=True)
        self._replace(sig[t].start, sig[t].end, "=")
        if paren:
            self._insert(sig[a].start, "(", closing=False)
        self._insert(sig[z].end, (")" if paren else "") + f' @ "{name}"', closing=True)
        self.choices.append(Choice("statement", sig[t].start[0], sig[t].start[1], f'"{name}"'))

    def _rewrite_walrus(self, t: int):
        sig = self.sig
        n = t - 1
        name = sig[n].string
        a, z, paren = self._rhs(t, statement=False)
        outer = not (n - 1 >= 0 and sig[n - 1].is_op("(") and self.match[n - 1] == z + 1)
        if outer:
            self._insert(sig[n].start, "(", closing=False)
        self._replace(sig[t].start, sig[t].end, ":=")
        if paren:
            self._insert(sig[a].start, "(", closing=False)
        self._insert(sig[z].end, (")" if paren else "") + f' @ "{name}"' + (")" if outer else ""),
                     closing=True)
        self.choices.append(Choice("walrus", sig[t].start[0], sig[t].start[1], f'"{name}"'))

    def _rewrite_address(self, b: int, t: int, tilde_set: set[int]):
        sig = self.sig
        close = t - 1
        if close == b + 1:
            raise self._error('empty address `{}`: write the address inside the braces, e.g. `{"x"}`',
                              sig[b].start, sig[close].end)
        for i in range(b + 1, close):
            if i in tilde_set:
                raise self._error("a random choice `~` inside an address is not supported; "
                                  "compute the address first", sig[i].start, sig[i].end)
            if self.depth[i] == self.depth[b] + 1:
                if sig[i].is_op(":"):
                    raise self._error("an address is a key or a tuple of keys, not a dict",
                                      sig[i].start, sig[i].end)
                if sig[i].is_name and sig[i].string in ("for", "async"):
                    raise self._error("an address is a key or a tuple of keys, not a comprehension",
                                      sig[i].start, sig[i].end)
        addr = self._tok_text(b + 1, close - 1)
        if not self._is_primary(b + 1, close - 1):
            addr = f"({addr})"
        a, z, paren = self._rhs(t, statement=False)
        # `({addr} ~ expr)` is already parenthesized: no second pair
        outer = "" if (b > 0 and sig[b - 1].is_op("(") and self.match[b - 1] == z + 1) else "("
        if sig[b].start[0] == sig[a].start[0]:
            self._replace(sig[b].start, sig[a].start, outer)
        else:
            self._replace(sig[b].start, sig[b].end, outer)
            for i in range(b + 1, t + 1):
                tok = sig[i]
                if tok.start[0] != tok.end[0]:
                    raise self._error("write this address on one line", tok.start, tok.end)
                self._replace(tok.start, tok.end, "")
        if paren:
            self._insert(sig[a].start, "(", closing=False)
        self._insert(sig[z].end, (")" if paren else "") + f" @ {addr}" + (")" if outer else ""),
                     closing=True)
        self.choices.append(Choice("address", sig[t].start[0], sig[t].start[1], addr))

    def _transform_ops(self):
        """Indices of the `@` of every `@read`/`@write`/`@copy`/`@tcall` to rewrite."""
        sig = self.sig
        for i, tok in enumerate(sig):
            if not tok.is_op("@") or i + 1 >= len(sig):
                continue
            nxt = sig[i + 1]
            if not (nxt.is_name and nxt.string in TRANSFORM_OPS):
                continue
            if i > 0 and self._is_operand_end(i - 1):
                continue  # matrix multiplication `a @read(...)`
            if self._is_statement_start(i) and self._is_decorator(i):
                continue
            yield i

    def _rewrite_transform_ops(self):
        sig = self.sig
        for i in self._transform_ops():
            tok, nxt = sig[i], sig[i + 1]
            if i + 2 >= len(sig) or not sig[i + 2].is_op("("):
                raise self._error(
                    f"`@{nxt.string}` needs its arguments: write `@{nxt.string}(...)`, e.g. "
                    + _OP_EXAMPLES[nxt.string], tok.start, nxt.end)
            self.seq += 1
            end = nxt.start if nxt.start[0] == tok.start[0] else tok.end
            self._replace(tok.start, end, ENGINE_NAME + ".")
            self.ops.append((tok.start[0], tok.start[1], nxt.string))

    def _is_decorator(self, i: int) -> bool:
        """A statement-level `@x(...)` is a decorator when its chain of `@` lines
        ends in a def or class (`@write(...)` followed by `@copy(...)` is not)."""
        sig = self.sig
        j = i
        while j < len(sig) and sig[j].is_op("@"):
            j = self._line_end(j) + 1
            while j < len(sig) and sig[j].type in (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE):
                j += 1
        if j >= len(sig):
            return False
        t = sig[j]
        return t.is_name and t.string in ("def", "class", "async")

    # -- applying edits -----------------------------------------------------

    def _apply(self):
        edits = sorted(self.edits, key=_Edit.key)
        by_line: dict[int, list[_Edit]] = {}
        for e in edits:
            by_line.setdefault(e.start[0], []).append(e)
        out_lines = list(self.lines)
        colmaps: dict[int, list[tuple[int, int, bool]]] = {}
        for line, es in by_line.items():
            text = self.lines[line - 1]
            pieces: list[str] = []
            segs: list[tuple[int, int, bool]] = []
            pos = 0  # original column
            new = 0  # rewritten column
            for e in es:
                s, en = e.start[1], e.end[1]
                if s < pos:
                    raise AssertionError(f"overlapping rewrites on line {line}")
                if s > pos:
                    segs.append((new, pos, True))
                    pieces.append(text[pos:s])
                    new += s - pos
                if e.text:
                    segs.append((new, s, False))
                    pieces.append(e.text)
                    new += len(e.text)
                pos = en
            segs.append((new, pos, True))
            pieces.append(text[pos:])
            out_lines[line - 1] = "".join(pieces)
            colmaps[line] = segs
        return "".join(out_lines), colmaps


def python_syntax_error(src: str, mode: str = "gen") -> SyntaxError | None:
    """The syntax error Python itself finds in ``src``, the notation read as plain operators.

    A binary ``~`` becomes ``|`` and the ``@`` of ``@read(...)`` & co. becomes ``_``
    (same widths, so the error's position is one in ``src``). An error found this way
    at or before the notation's own complaint is the user's ordinary Python mistake
    (an unclosed bracket, a bad indent), which the notation did not cause.
    """
    probe = _Rewriter(src, mode)
    sig = probe.sig
    artefacts = set()   # where `|` itself is the problem (`x ~ not y`): not the user's error
    for i, tok in enumerate(sig):
        if tok.is_op("~") and probe._is_binary_tilde(i):
            probe._replace(tok.start, tok.end, "|")
            artefacts.update(t.start for t in sig[i:i + 2])
    if mode == "transform":
        for i in probe._transform_ops():
            probe._replace(sig[i].start, sig[i].end, "_")
    text, _ = probe._apply()
    try:
        ast.parse(text)
    except SyntaxError as err:
        if (err.lineno, (err.offset or 1) - 1) not in artefacts:
            return err
    return None


def rewrite(src: str, mode: str = "gen") -> RewriteResult:
    """Rewrite the notebook notation in ``src`` into plain Python.

    ``mode`` is ``"gen"`` (tilde forms) or ``"transform"`` (``@read`` & co.;
    a binary ``~`` is an error there).  Raises :class:`NotationError` for
    misuse of the notation; other syntax errors are left for the compiler.
    """
    if mode not in ("gen", "transform"):
        raise ValueError(f"unknown mode {mode!r}")
    return _Rewriter(src, mode).run()
