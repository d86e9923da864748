"""A gallery notebook executed, saved and reopened in JupyterLab shows its pictures (issue 17).

The split/merge gallery notebook (small-run mode, plus one cell that runs a chain of a
kernel with a long name) is executed with nbclient, storing widget state, and saved in
a temporary folder, as ``jupyter nbconvert --execute`` would. JupyterLab is started
there, as ``bash run.sh lab`` starts it (the project's Jupyter settings), and the
notebook is opened in Chromium -- not run:

* **untrusted** (as saved: JupyterLab did not sign it, so it sanitises its HTML:
  no ``<svg>``, ``<style>`` or ``<script>``, and widgets are not rendered): the
  schematic's, the Jacobian's and the sampler's pictures are there as images, no
  loose SVG text is left, and no "Error displaying widget" line shows;
  Nor does a view's text repr ("<SamplerStream ...: running, 17 steps>") show beside
  its picture;
* **trusted** (signed, as a notebook JupyterLab saved itself): the same pictures, no
  "Error displaying widget: model not found", and the progress bar restored from
  the saved widget state shows the kernel's whole name, unclipped. The live sampler
  is restored in its final state ("30 / 30 steps", the final plot), though its run
  ended between cells, where nbclient records no widget messages.

The nonparametric HMC gallery notebook, saved the same way and opened untrusted, shows its
trajectory views as images.

Screenshots go to tests/artifacts/reopen-*.png. Skipped like tests/test_browser.py
when Playwright or Chromium are missing.
"""

from __future__ import annotations

import os
import pathlib
import secrets
import sys
from contextlib import contextmanager

import nbformat
import pytest
from nbclient import NotebookClient

test_browser = pytest.importorskip("test_browser", reason="tests/test_browser.py holds the browser helpers")
from test_browser import ARTIFACTS, _free_port, _requirements, browser  # noqa: E402,F401  (browser: a fixture)
from test_browser_frontdoor import _jupyter_flags, server  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
GALLERY = ROOT / "gallery"
NOTEBOOK = "split_merge_mixture.ipynb"
LONG_NAME = "infinite GMM: swap, split/merge, birth/death, cluster and weight moves"
STREAM_PLOTS = "infinite GMM plots"      # the alt text of the sampler's static picture
LONG_NAMED_CHAIN = (f"long_named = m.mixture_kernel()\nlong_named.name = {LONG_NAME!r}\n"
                    "_ = il.run_chain(long_named, m.initial_trace(data, k=1), 5)")


@pytest.fixture(scope="module")
def saved_folder(tmp_path_factory):
    _requirements()
    return _executed(NOTEBOOK, tmp_path_factory.mktemp("reopen"), [LONG_NAMED_CHAIN])


def _executed(notebook, folder, extra_cells=()):
    """``notebook`` from the gallery executed (small-run mode, widget state stored) and saved in ``folder``."""
    nb = nbformat.read(GALLERY / notebook, as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(source) for source in extra_cells]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IMCMC_SMALL", "1")
        NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True,
                       resources={"metadata": {"path": str(GALLERY)}}).execute()
    nbformat.write(nb, folder / notebook)
    return folder


@contextmanager
def _open_in_lab(browser, folder, name, data_dir, notebook=NOTEBOOK):
    """JupyterLab started on ``folder`` (its data folder, where notebook signatures live, and
    its workspaces: under ``data_dir``); yields a page showing the notebook, its outputs drawn."""
    port, token = _free_port(), secrets.token_hex(8)
    # (its own workspaces folder: the user's default workspace would reopen this notebook later)
    command = ([sys.executable, "-m", "jupyterlab", *_jupyter_flags(port, token), f"--ServerApp.root_dir={folder}",
                f"--LabApp.workspaces_dir={data_dir / 'workspaces'}"] + (["--allow-root"] if os.geteuid() == 0 else []))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    env = {"JUPYTER_CONFIG_PATH": str(ROOT / "etc" / "jupyter"), "JUPYTER_DATA_DIR": str(data_dir)}
    with server(command, f"reopen-{name}.log", env=env):
        page.goto(f"http://127.0.0.1:{port}/lab/tree/{notebook}?token={token}", timeout=120_000)
        page.wait_for_selector(".jp-NotebookPanel .jp-OutputArea-output", timeout=120_000)
        page.wait_for_timeout(3000)          # widget state restored, images decoded
        try:
            yield page
        finally:
            page.close()


def _shown(page, locator, name, min_width=300, min_height=120):
    """``locator``'s first visible element scrolled into view, of real size; its screenshot saved."""
    drawn = locator.first
    drawn.scroll_into_view_if_needed(timeout=30_000)
    drawn.wait_for(state="visible", timeout=30_000)
    box = drawn.bounding_box()
    assert box and box["width"] > min_width and box["height"] > min_height, (name, box)
    drawn.screenshot(path=str(ARTIFACTS / f"reopen-{name}.png"))
    return drawn


def _cell(page, source):
    """The notebook cell whose source contains ``source``."""
    return page.locator(".jp-Notebook .jp-CodeCell").filter(
        has=page.locator(".jp-InputArea", has_text=source)).first


def _output_text(page) -> str:
    """The visible text of every output, each cell scrolled into view first (JupyterLab draws
    only the cells near the viewport)."""
    texts = []
    cells = page.locator(".jp-Notebook .jp-Cell")
    for i in range(cells.count()):
        cells.nth(i).scroll_into_view_if_needed(timeout=30_000)
        texts += cells.nth(i).locator(".jp-OutputArea-output").all_inner_texts()
    return "\n".join(texts)


def _check_pictures(page, scenario):
    """The three views' pictures are visible -- the live widget's where the saved widget state
    restores it, else the static fallback: inline SVG where styles survive, images of the same
    SVG where they do not -- and no widget error line shows."""
    for kind, title in (("schematic", "Involution schematic"), ("jacobian", "Jacobian")):
        picture = page.locator(f".jp-OutputArea-output svg.imcmc-{kind}:visible, "
                               f".jp-OutputArea-output img.imcmc-raster[alt^='{title}']:visible")
        drawn = _shown(page, picture, f"{scenario}-{kind}")
        if drawn.evaluate("e => e.tagName") == "IMG":
            assert drawn.evaluate("img => img.complete && img.naturalWidth") > 300, kind
    plot = _shown(page, page.locator(f".jp-OutputArea-output .imcmc-static img[alt='{STREAM_PLOTS}']:visible, "
                                     ".jp-OutputArea-output .imcmc-stream img:visible"), f"{scenario}-stream")
    assert plot.evaluate("img => img.complete && img.naturalWidth") > 300
    _shown(page, _cell(page, "SamplerStream(kernel").locator(".jp-Cell-outputArea"), f"{scenario}-stream-cell")
    # nothing of the sanitised SVG left behind as loose text, no widget error line, no repr
    text = _output_text(page)
    if scenario == "untrusted":
        assert "Involution schematic, stage 1 of 3" not in text   # an <svg>'s <title>, as loose text
    assert "Error displaying widget" not in text and "model not found" not in text
    for view in ("<SamplerStream", "<InvolutionSchematic", "<JacobianView"):
        assert view not in text, f"{view}'s text repr shows beside its picture"
    page.screenshot(path=str(ARTIFACTS / f"reopen-{scenario}-page.png"))
    return text


def test_untrusted_saved_notebook_shows_its_pictures(browser, saved_folder, tmp_path):
    with _open_in_lab(browser, saved_folder, "untrusted", tmp_path) as page:
        assert page.locator(".jp-OutputArea svg.imcmc-schematic").count() == 0    # sanitised away
        text = _check_pictures(page, "untrusted")
        # the progress bars are text here (widgets are not rendered): the whole name
        assert LONG_NAME in text and f"{LONG_NAME}: 100%" in text


def test_trusted_saved_notebook_shows_pictures_and_whole_progress_bar(browser, saved_folder, tmp_path):
    from nbformat.sign import NotebookNotary

    nb = nbformat.read(saved_folder / NOTEBOOK, as_version=4)
    NotebookNotary(data_dir=str(tmp_path)).sign(nb)
    with _open_in_lab(browser, saved_folder, "trusted", tmp_path) as page:
        # the saved widget state is restored: the live widgets show, the fallbacks hide
        page.locator(".jp-OutputArea-output .imcmc-live svg.imcmc-schematic").first.wait_for(
            state="attached", timeout=60_000)
        _check_pictures(page, "trusted")
        bar = page.locator(".jp-OutputArea-output .widget-hprogress").last
        line = bar.locator("xpath=..")
        _shown(page, line, "trusted-progress", min_width=200, min_height=10)
        label = line.locator(".widget-html-content").first
        assert label.inner_text().replace("\u2007", " ").startswith(f"{LONG_NAME}: 100%")   # (tqdm's figure spaces)
        assert label.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), "the kernel's name is clipped"
        assert "5/5" in line.inner_text()
        # the long name leaves the bar its width (it squeezed the bar to nothing)
        assert bar.bounding_box()["width"] >= 150, bar.bounding_box()


def test_trusted_saved_notebook_restores_the_final_sampler(browser, saved_folder, tmp_path):
    """The live sampler is restored as it ended: its run ends after the cell that starts it, and
    nbclient keeps only widget messages sent during a cell (the view sends its state again)."""
    from nbformat.sign import NotebookNotary

    nb = nbformat.read(saved_folder / NOTEBOOK, as_version=4)
    NotebookNotary(data_dir=str(tmp_path)).sign(nb)
    with _open_in_lab(browser, saved_folder, "trusted-stream", tmp_path) as page:
        cell = _cell(page, "SamplerStream(kernel")
        cell.scroll_into_view_if_needed(timeout=60_000)
        live = cell.locator(".imcmc-stream")
        live.wait_for(state="visible", timeout=60_000)      # the widget, not the fallback
        # the container shows before its children have drawn their restored values: wait for the text
        status = live.locator(".imcmc-stream-status")
        page.wait_for_function("e => /30\\s*\\/\\s*30\\s*steps/.test(e.innerText)", arg=status.element_handle(),
                               timeout=30_000)
        assert "30 / 30 steps" in status.inner_text().replace("\u2009", " ")
        assert "finished" in live.inner_text() and cell.locator(".imcmc-static").is_hidden()
        # its plot is the final one: the same PNG as the (hidden) static picture of the end
        same = live.locator("img").evaluate("""async (img, alt) => {
            const fallback = document.querySelector(`img[alt='${alt}']`);
            const bytes = async src => new Uint8Array(await (await fetch(src)).arrayBuffer()).join();
            return (await bytes(img.src)) === (await bytes(fallback.src));
        }""", STREAM_PLOTS)
        assert same, "the restored sampler's plot is not its final plot"
        live.screenshot(path=str(ARTIFACTS / "reopen-trusted-stream-final.png"))


def test_untrusted_nonparametric_notebook_shows_its_trajectory_pictures(browser, tmp_path_factory, tmp_path):
    """The NP-HMC trajectory views of the nonparametric gallery notebook, saved untrusted: each
    is an image (a single move: its last frame, the whole trajectory; the list of four moves:
    one image per move), with no loose SVG text, widget error or text repr beside them."""
    _requirements()
    notebook = "nonparametric_hmc.ipynb"
    folder = _executed(notebook, tmp_path_factory.mktemp("reopen-np"))
    with _open_in_lab(browser, folder, "untrusted-np", tmp_path, notebook=notebook) as page:
        assert page.locator(".jp-OutputArea svg.imcmc-nptrajectory").count() == 0    # sanitised away
        text = _output_text(page)        # (scrolls every cell into view, so that all are drawn)
        images = page.locator(".jp-OutputArea-output img.imcmc-raster[alt^='NP-HMC trajectory']:visible")
        assert images.count() == 1 + 4 + 1 + 1, images.count()       # geometric, four moves, walk, mixture
        for i in range(images.count()):
            drawn = _shown(page, images.nth(i), f"untrusted-np-{i}")
            assert drawn.evaluate("img => img.complete && img.naturalWidth") > 300
        assert "NP-HMC trajectory, step" not in text         # an <svg>'s <title>, as loose text
        assert "Error displaying widget" not in text and "<NPTrajectoryView" not in text
        page.screenshot(path=str(ARTIFACTS / "reopen-untrusted-np-page.png"), full_page=True)
