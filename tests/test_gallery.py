"""Every gallery notebook runs top to bottom (small-run mode) in a real Jupyter kernel."""

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

GALLERY = pathlib.Path(__file__).resolve().parent.parent / "gallery"
NOTEBOOKS = sorted(GALLERY.glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_gallery_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("IMCMC_SMALL", "1")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(GALLERY)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors


def test_gallery_is_committed_without_outputs():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name
