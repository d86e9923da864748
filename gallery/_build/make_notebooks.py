"""Build the gallery notebooks from their Markdown sources (readable diffs, no outputs).

Each ``gallery/_build/src/NAME.md`` becomes ``gallery/NAME.ipynb``. The format
is close to jupytext's Markdown format: a fenced block opened with
```` ```python ```` is a code cell, and ```` ```python tags=["raises-exception"] ````
gives the cell tags (nbclient runs on past such a cell, which shows an error on
purpose). The text between code cells is a Markdown cell; a line
``<!-- cell -->`` splits it in two. Fences of any other language stay inside
the Markdown. Notebooks are written without outputs or execution counts and
with stable cell ids, so regenerating an unchanged source changes nothing.

    python gallery/_build/make_notebooks.py          # write every notebook
    python gallery/_build/make_notebooks.py --check  # exit 1 if one is out of date
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import nbformat

BUILD = pathlib.Path(__file__).resolve().parent
SOURCES = BUILD / "src"
GALLERY = BUILD.parent
CODE_FENCE = "```python"
CELL_BREAK = "<!-- cell -->"
METADATA = {
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def _fence_tags(stripped: str):
    """The tags of a code fence line, or None if the line does not open a code cell."""
    if stripped == CODE_FENCE:
        return []
    if stripped.startswith(CODE_FENCE + " tags="):
        return json.loads(stripped[len(CODE_FENCE + " tags="):])
    return None


def parse(text: str) -> list[tuple[str, str, list]]:
    """``[(cell_type, source, tags), ...]`` of a Markdown source (see the module docstring)."""
    cells, lines = [], []
    in_code, in_other_fence, tags = False, False, []

    def flush(kind):
        source = "\n".join(lines).strip("\n")
        if source.strip():
            cells.append((kind, source, tags if kind == "code" else []))
        lines.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if in_code:
            if stripped == "```":
                flush("code")
                in_code = False
            else:
                lines.append(line)
        elif _fence_tags(stripped) is not None and not in_other_fence:
            flush("markdown")
            in_code, tags = True, _fence_tags(stripped)
        elif stripped.startswith("```"):     # another language's fence: part of the Markdown
            in_other_fence = not in_other_fence if stripped == "```" else True
            lines.append(line)
        elif stripped == CELL_BREAK and not in_other_fence:
            flush("markdown")
        else:
            lines.append(line)
    if in_code:
        raise ValueError("a ```python block is not closed")
    flush("markdown")
    return cells


def build(source: pathlib.Path) -> nbformat.NotebookNode:
    """The notebook of one Markdown source."""
    nb = nbformat.v4.new_notebook(metadata=METADATA)
    for index, (kind, text, tags) in enumerate(parse(source.read_text(encoding="utf-8"))):
        make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        cell = make(text, metadata={"tags": tags} if tags else {})
        cell["id"] = f"{source.stem[:40]}-{index}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(nb) -> str:
    return nbformat.writes(nb) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report notebooks that are out of date")
    args = parser.parse_args(argv)
    stale = []
    for source in sorted(SOURCES.glob("*.md")):
        target = GALLERY / f"{source.stem}.ipynb"
        text = render(build(source))
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        stale.append(target.name)
        if not args.check:
            target.write_text(text, encoding="utf-8")
    if args.check and stale:
        print("out of date (run python gallery/_build/make_notebooks.py):", ", ".join(stale))
        return 1
    if not args.check:
        print("wrote:", ", ".join(stale) if stale else "(nothing changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
