"""The code of a transform's compiled keys: one trie, one generated Python function.

Every key is a list of items: statements ``("s", name, code, deps)``, guards
``("g", code, outcome, deps)`` and one return ``("r", code, deps)``. Keys share their common
prefix in a :class:`Node` trie; a guard with one outcome seen is ``if not (...): return None``
(a miss), a guard on a specialised value is a switch; statements no return needs are dropped.
A miss, and any exception inside the code (an address the move lacks, a division by zero,
a record of another shape...), returns None: the interpreter then runs the move from the
start (the generated code draws nothing and changes nothing).
"""

from __future__ import annotations

import math

import torch
from numpy import array as _np_array

from ...core.values import float64_vector
from ...modeling.runtime import OwnedChoices
from .accounting import _ld
from .symbolic import Unsupported


class Node:
    __slots__ = ("items", "guard", "kids")

    def __init__(self):
        self.items, self.guard, self.kids = [], None, {}


def insert(root, items):
    node, p = root, 0
    for it in items:
        if it[0] in ("s", "r"):
            if p < len(node.items):
                if node.items[p][:3] != it[:3]:
                    raise Unsupported(f"a run that differs from the last one with the same guards: "
                                      f"{node.items[p][:3]} vs {it[:3]}")
            else:
                if node.guard is not None:
                    raise Unsupported("a statement where a guard was")
                node.items.append(it)
            p += 1
        else:
            if p != len(node.items) or (node.guard is not None and node.guard[1] != it[1]):
                raise Unsupported("a guard where a statement (or another guard) was")
            node.guard = it
            node = node.kids.setdefault(it[2], Node())
            p = 0


def _emit(node, ind, out):
    """Lines of ``node``'s code, dead statements dropped; returns the names it needs. A guard
    with one outcome seen is ``if not (...): return None`` (no nesting)."""
    needed = set()
    body = []
    pad = " " * 4 * ind
    if node.guard is not None:
        needed |= set(node.guard[3])
        cond = node.guard[1]
        if set(node.kids) <= {True, False} and all(type(a) is bool for a in node.kids):
            if len(node.kids) == 1:
                (outcome, kid), = node.kids.items()
                body.append(pad + (f"if not ({cond}): return None" if outcome else f"if {cond}: return None"))
                needed |= _emit(kid, ind, body)
            else:
                inner = {}
                for outcome in (True, False):
                    lines = []
                    needed |= _emit(node.kids[outcome], ind + 1, lines)
                    inner[outcome] = lines
                body += [pad + f"if {cond}:", *inner[True], pad + "else:", *inner[False]]
        elif len(node.kids) == 1:           # a specialised value seen once
            (answer, kid), = node.kids.items()
            body.append(pad + f"if {cond} != {answer!r}: return None")
            needed |= _emit(kid, ind, body)
        else:                               # a switch on a specialised value
            q = f"q{id(node) % 100000}"
            body.append(pad + f"{q} = {cond}")
            first = True
            for answer, kid in node.kids.items():
                body.append(pad + f"{'if' if first else 'elif'} {q} == {answer!r}:")
                lines = []
                needed |= _emit(kid, ind + 1, lines)
                body += lines
                first = False
            body.append(pad + "else:")
            body.append(pad + "    return None")
    kept = []
    for it in reversed(node.items):
        if it[0] == "r":
            kept.append(pad + it[1])
            needed |= set(it[2])
        elif it[1] in needed:
            kept.append(pad + f"{it[1]} = {it[2]}")
            needed.discard(it[1])
            needed |= set(it[3])
    out += kept[::-1] + body
    return needed


def source(root, name="_compiled"):
    lines = []
    _emit(root, 2, lines)
    return "\n".join([f"def {name}(mf, af):", "    try:"] + lines + [
        "    except Exception:       # (the interpreter runs the move: it raises what it raises)",
        "        return None", "    return None", ""])


_NAMESPACE = {"_m": math, "_fn": torch.from_numpy, "_arr": _np_array, "_f64v": float64_vector,
              "_ld": _ld, "_OC": OwnedChoices}


def build(root, label):
    """The generated function of the trie ``root`` (``label`` names it in tracebacks) and
    its source."""
    src = source(root)
    ns = dict(_NAMESPACE)
    exec(compile(src, f"<compiled transform {label}>", "exec"), ns)
    return ns["_compiled"], src
