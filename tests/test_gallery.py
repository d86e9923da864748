"""The gallery notebooks: each runs top to bottom in a fresh Jupyter kernel, and is kept tidy.

* Every ``gallery/*.ipynb`` is executed with nbclient in small-run mode
  (``IMCMC_SMALL=1``: the notebooks shorten their chains, same code). A cell may
  show an error only if it is tagged ``raises-exception`` (the debugging
  notebooks show what a failed check prints), and such a cell *must* raise: if
  a planted bug stopped being caught, the notebook would teach something false.
* Hygiene: notebooks are committed without outputs or execution counts, are
  generated from their Markdown sources in ``gallery/_build/src`` (readable
  diffs; ``python gallery/_build/make_notebooks.py`` rebuilds them), contain no
  absolute paths, follow the small-run convention, and link only to notebooks
  that exist.
"""

import os
import pathlib
import re
import subprocess
import sys
import time

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
GALLERY = ROOT / "gallery"
SOURCES = GALLERY / "_build" / "src"
NOTEBOOKS = sorted(GALLERY.glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# notebooks whose widgets must have been displayed (the browser test opens these)
WITH_WIDGETS = {"quickstart.ipynb", "split_merge_mixture.ipynb", "nonparametric_hmc.ipynb"}


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _expects_error(cell) -> bool:
    return "raises-exception" in cell.get("metadata", {}).get("tags", [])


def test_there_are_gallery_notebooks():
    names = {p.name for p in NOTEBOOKS}
    assert {"quickstart.ipynb", "split_merge_mixture.ipynb", "gp_structure.ipynb", "debugging_involutions.ipynb",
            "hmc_as_involution.ipynb", "change_points_and_model_choice.ipynb", "nonparametric_hmc.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_gallery_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("IMCMC_SMALL", "1")
    nb = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(GALLERY)}}).execute()
    seconds = time.perf_counter() - started
    print(f"{path.name}: executed in {seconds:.1f} s (small-run mode)")
    for index, cell in enumerate(_code_cells(nb)):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if _expects_error(cell):
            assert errors, f"{path.name}, code cell {index}: tagged raises-exception but did not raise:\n{cell.source}"
        else:
            assert not errors, f"{path.name}, code cell {index}:\n{cell.source}\n{errors}"
    if path.name in WITH_WIDGETS:
        views = [o for c in _code_cells(nb) for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
        assert views, f"{path.name} displayed no widget"


def test_gallery_is_committed_without_outputs():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in _code_cells(nb):
            assert not cell.get("outputs"), f"{path.name} has outputs: {cell.source[:60]!r}"
            assert cell.get("execution_count") is None, f"{path.name} has execution counts"


def test_notebooks_are_built_from_their_sources():
    stems = {p.stem for p in NOTEBOOKS}
    assert stems == {p.stem for p in SOURCES.glob("*.md")}, "each notebook needs a source in gallery/_build/src"
    result = subprocess.run([sys.executable, str(GALLERY / "_build" / "make_notebooks.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_small_run_convention_and_no_absolute_paths():
    absolute = re.compile(r"(?<![\w.])(/(home|work|tmp|Users|root|opt)/|[A-Za-z]:\\\\)")
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        first = _code_cells(nb)[0].source
        assert 'SMALL = os.environ.get("IMCMC_SMALL") == "1"' in first, f"{path.name}: first code cell"
        for cell in nb.cells:
            match = absolute.search(cell.source)
            assert match is None, f"{path.name}: absolute path {match.group(0)!r} in {cell.source[:80]!r}"


def test_links_between_notebooks_resolve():
    link = re.compile(r"\]\(([^)#:]+\.ipynb)\)")
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                for target in link.findall(cell.source):
                    assert (GALLERY / target).exists(), f"{path.name} links to missing {target}"


def test_builder_parses_cells_tags_and_other_fences(tmp_path):
    sys.path.insert(0, str(GALLERY / "_build"))
    try:
        import make_notebooks
    finally:
        sys.path.pop(0)
    text = ("# Title\n\nprose\n\n```text\nnot code\n```\n\n```python\nx = 1\n```\n"
            "<!-- cell -->\nmore\n<!-- cell -->\nlast\n\n```python tags=[\"raises-exception\"]\n1 / 0\n```\n")
    cells = make_notebooks.parse(text)
    assert cells == [("markdown", "# Title\n\nprose\n\n```text\nnot code\n```", []),
                     ("code", "x = 1", []), ("markdown", "more", []), ("markdown", "last", []),
                     ("code", "1 / 0", ["raises-exception"])]
    with pytest.raises(ValueError):
        make_notebooks.parse("```python\nopen")
