"""Engine code stays in pieces a reader can hold: no function over 60 lines and no class
over 200 lines in ``imcmc_lab`` (core, modeling, transform, inference, examples), unless
the line just above it (or above its decorators) says why, as ``# long: <reason>``.

Read from the source with ``ast``; a docstring counts, since a reader reads it too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "imcmc_lab"
LIMITS = {ast.FunctionDef: 60, ast.AsyncFunctionDef: 60, ast.ClassDef: 200}
REASON = "# long:"


def _reason_above(lines: list[str], node: ast.AST) -> bool:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    above = lines[first - 2].strip() if first >= 2 else ""
    return above.startswith(REASON) and len(above) > len(REASON) + 3


def oversized(source: str) -> list[tuple[str, int, int, int]]:
    """``(name, line, length, limit)`` of each definition over its limit without a reason."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        limit = LIMITS.get(type(node))
        if limit is None:
            continue
        length = node.end_lineno - node.lineno + 1
        if length > limit and not _reason_above(lines, node):
            found.append((node.name, node.lineno, length, limit))
    return found


def test_no_engine_function_or_class_over_its_limit_without_a_reason():
    offenders = [f"{path.relative_to(ROOT)}:{line} {name}: {length} lines (limit {limit})"
                 for path in sorted(ENGINE.rglob("*.py"))
                 for name, line, length, limit in oversized(path.read_text())]
    assert not offenders, ("split these, or say why on the line above with '# long: <reason>':\n"
                           + "\n".join(offenders))


def test_the_check_sees_a_long_function_and_accepts_a_reason():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    long_function = f"def f():\n{body}\n"
    assert [(name, length) for name, _, length, _ in oversized(long_function)] == [("f", 62)]
    assert oversized("# long: one table of cases, read top to bottom\n" + long_function) == []
    assert oversized("# long:\n" + long_function) != []          # a reason, not just the tag
    decorated = "# long: kept whole, see the docstring\n@staticmethod\n" + long_function
    assert oversized(decorated) == []
