"""A gallery notebook executed, saved and exported still shows its pictures (issue 17).

The split/merge gallery notebook (small-run mode) is executed with nbclient and
saved, as ``jupyter nbconvert --execute`` does. Then:

* the saved outputs carry, beside each widget view, a static fallback output:
  the involution schematic's and the Jacobian's SVG, the live sampler's final
  plot (a PNG) with its final status, and tqdm's progress bar in its final
  state (it read "0/30", its state when first shown);
* the notebook exported to HTML (nbconvert's lab template) and opened in
  Chromium with every network request refused -- the page cannot load the
  widget manager or require.js from their CDNs -- shows each picture.
  Screenshots go to tests/artifacts/export-*.png.

Skipped like tests/test_browser.py when Playwright or Chromium are missing.
"""

from __future__ import annotations

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

test_browser = pytest.importorskip("test_browser", reason="tests/test_browser.py holds the browser helpers")
from test_browser import ARTIFACTS, _requirements, browser  # noqa: E402,F401  (browser: a fixture)

GALLERY = pathlib.Path(__file__).resolve().parent.parent / "gallery"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def saved_notebook(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("IMCMC_SMALL", "1")
    nb = nbformat.read(GALLERY / "split_merge_mixture.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(GALLERY)}}).execute()
    path = tmp_path_factory.mktemp("saved") / "split_merge_mixture.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _cell(nb, text):
    return next(c for c in nb.cells if c.cell_type == "code" and text in c.source)


def _fallback_before_widget(cell) -> str:
    """The text/html of the output right before the cell's widget view."""
    outputs = cell.outputs
    index = next(i for i, o in enumerate(outputs) if WIDGET_VIEW in o.get("data", {}))
    assert index > 0, "no static fallback before the widget"
    return outputs[index - 1]["data"]["text/html"]


def test_saved_outputs_carry_static_pictures(saved_notebook):
    nb = nbformat.read(saved_notebook, as_version=4)
    schematic = _fallback_before_widget(_cell(nb, "InvolutionSchematic(record)"))
    assert schematic.count('<svg xmlns="http://www.w3.org/2000/svg" class="imcmc-schematic"') == 3
    jacobian = _fallback_before_widget(_cell(nb, "JacobianView(record)"))
    assert 'class="imcmc-jacobian"' in jacobian and "log |det|" in jacobian
    stream = _fallback_before_widget(_cell(nb, "SamplerStream(kernel"))
    assert "data:image/png;base64," in stream and "finished" in stream and ">30</b> / 30 steps" in stream
    # tqdm's bar (run_chain's progress) is saved in its final state
    bars = [o["data"]["text/plain"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if WIDGET_VIEW in o.get("data", {}) and "it/s" in o["data"].get("text/plain", "")]
    assert bars and all(" 0/" not in b and "100%" in b for b in bars), bars


def test_exported_html_shows_the_pictures_offline(saved_notebook, browser):
    import nbconvert
    from nbconvert import HTMLExporter

    # nbconvert's templates live under the prefix it was installed in (a virtual environment
    # sharing another one's packages does not have them under its own prefix)
    installed = pathlib.Path(nbconvert.__file__).resolve().parents[4] / "share" / "jupyter"
    with pytest.MonkeyPatch.context() as mp:
        if (installed / "nbconvert" / "templates" / "lab").is_dir():
            mp.setenv("JUPYTER_PATH", str(installed))
        body, _ = HTMLExporter(template_name="lab").from_filename(str(saved_notebook))
    page_path = ARTIFACTS / "export-split-merge.html"
    ARTIFACTS.mkdir(exist_ok=True)
    page_path.write_text(body, encoding="utf-8")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    refused = []

    def only_files(route):
        if route.request.url.startswith("file:") or route.request.url.startswith("data:"):
            return route.continue_()
        refused.append(route.request.url)
        return route.abort()

    context.route("**/*", only_files)
    page = context.new_page()
    page.goto(page_path.as_uri())
    page.wait_for_timeout(1500)
    assert any("require" in u or "widget" in u or "unpkg" in u or "jsdelivr" in u for u in refused), refused
    for selector, name in (("svg.imcmc-schematic", "schematic"), ("svg.imcmc-jacobian", "jacobian")):
        drawn = page.locator(f"{selector}:visible").first
        drawn.scroll_into_view_if_needed()
        box = drawn.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 150, (name, box)
        drawn.screenshot(path=str(ARTIFACTS / f"export-{name}.png"))
    plot = page.locator("img[alt='infinite GMM plots']:visible").first     # the sampler's final plots
    plot.scroll_into_view_if_needed()
    assert plot.evaluate("img => img.complete && img.naturalWidth") > 300
    plot.screenshot(path=str(ARTIFACTS / "export-stream.png"))
    cell = page.locator(".jp-CodeCell").filter(has=page.locator(".jp-InputArea", has_text="SamplerStream(kernel"))
    assert "30 / 30 steps" in cell.inner_text().replace("\u2009", " ")
    cell.locator(".jp-Cell-outputWrapper").screenshot(path=str(ARTIFACTS / "export-stream-cell.png"))
    # no view's text repr beside its picture (the widgets cannot render here)
    text = "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())
    for view in ("<SamplerStream", "<InvolutionSchematic", "<JacobianView"):
        assert view not in text, f"{view}'s text repr shows beside its picture"
    # the schematic's fallback still animates: its own few lines of script, no CDN
    static = page.locator(".imcmc-static").filter(has=page.locator("svg.imcmc-schematic")).first
    static.locator(".imcmc-play").click()
    page.wait_for_function("el => el.getAttribute('data-shown') !== '0'", arg=static.element_handle(),
                           timeout=10_000)
    page.screenshot(path=str(ARTIFACTS / "export-page.png"), full_page=True)
    context.close()
