"""Gallery notebooks in a real browser: Chromium (Playwright) against Voilà serving gallery/.

Voilà runs the notebook in a fresh kernel (small-run mode, ``IMCMC_SMALL=1``)
and renders its widgets with the real widget manager, progressively (cells
appear as they run), as the README's Binder badges show them. The test opens the quickstart and the split/merge notebook
and checks that their widgets rendered and work: the involution schematic
animates when Play is pressed, the Jacobian view is drawn and toggles to block
order, the trace tree is Graphviz's SVG, and the live sampler finished its run
with its plot drawn. It also opens the nonparametric HMC notebook: its trajectory views
render and play. Screenshots go to tests/artifacts/gallery-*.png.

Same rules as tests/test_browser.py (whose helpers this reuses): skipped when
Playwright, Chromium or Voilà are missing, unless IMCMC_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import os
import pathlib

import pytest

test_browser = pytest.importorskip("test_browser", reason="tests/test_browser.py holds the browser helpers")
from test_browser import ARTIFACTS, _requirements, browser, voila_server  # noqa: E402,F401  (browser: a fixture)

GALLERY = pathlib.Path(__file__).resolve().parent.parent / "gallery"


@pytest.fixture(scope="module")
def gallery_url():
    """A Voilà server on gallery/ (small-run mode); yields a function NAME -> page URL."""
    _requirements()
    env = dict(os.environ, IMCMC_SMALL="1")
    for port, token in voila_server(["--progressive_rendering=True"], GALLERY, "voila-gallery.log", env):
        yield lambda name: f"http://127.0.0.1:{port}/voila/render/{name}?token={token}"


def _open(browser, url, done_js):
    """Open a notebook; wait until ``done_js`` (a JavaScript expression) says its last output is there.

    Voilà renders progressively here (as on Binder, see binder/postBuild): cells appear
    while the kernel runs them, so "loaded" is not "finished"."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url, timeout=180_000)
    page.wait_for_function(done_js, timeout=180_000, polling=500)
    assert "Traceback" not in page.inner_text("body"), "a cell failed in Voilà"
    return page, errors


def _schematic_plays(page, name):
    """Play advances the schematic past its first stage."""
    schematic = page.locator(".imcmc-frames").filter(has=page.locator("svg.imcmc-schematic")).first
    schematic.scroll_into_view_if_needed()
    assert schematic.locator("svg.imcmc-schematic:visible").get_attribute("data-stage") == "0"
    schematic.locator(".widget-play button").first.click()
    page.wait_for_function(
        """el => { const s = el.querySelector('svg.imcmc-schematic[data-stage]:not([data-stage="0"])');
                   return s && s.getClientRects().length > 0; }""",
        arg=schematic.element_handle(), timeout=10_000)
    schematic.screenshot(path=str(ARTIFACTS / f"gallery-{name}-schematic.png"))


def _jacobian_toggles(page, name):
    jac = page.locator(".imcmc-frames").filter(has=page.locator("svg.imcmc-jacobian")).first
    jac.scroll_into_view_if_needed()
    assert jac.locator("svg.imcmc-jacobian:visible").get_attribute("data-order") == "address"
    jac.get_by_text("block order").click()
    page.wait_for_function(
        """el => { const s = el.querySelector('svg.imcmc-jacobian[data-order="block"]');
                   return s && s.getClientRects().length > 0; }""", arg=jac.element_handle(), timeout=10_000)
    assert jac.locator("svg.imcmc-jacobian:visible rect.imcmc-block").count() >= 1
    jac.screenshot(path=str(ARTIFACTS / f"gallery-{name}-jacobian.png"))


def test_quickstart_renders_its_widgets_in_voila(browser, gallery_url):
    page, errors = _open(browser, gallery_url("quickstart.ipynb"),
                         "document.body.innerText.includes('hdi_97%')")      # the last cell: ArviZ's summary
    body = page.inner_text("body")
    assert "100 randomized trials passed" in body          # %check_involution's report
    assert "exact P(k = 2 | data)" in body
    _schematic_plays(page, "quickstart")
    _jacobian_toggles(page, "quickstart")
    # the trace tree: Graphviz's SVG with the model's three choices
    tree = page.locator(".jp-RenderedSVG").first
    tree.scroll_into_view_if_needed()
    drawn = tree.evaluate("""el => { const img = el.querySelector('img');
        if (img) return decodeURIComponent(img.src);
        const svg = el.querySelector('svg'); return svg ? svg.outerHTML : ''; }""")
    assert 'class="graph"' in drawn and drawn.count('class="node"') >= 4
    page.screenshot(path=str(ARTIFACTS / "gallery-quickstart-page.png"), full_page=True)
    assert not errors, errors


def test_split_merge_renders_its_widgets_in_voila(browser, gallery_url):
    # the last cell draws the fourth figure after the live sampler's
    page, errors = _open(browser, gallery_url("split_merge_mixture.ipynb"),
                         "document.querySelectorAll('.jp-RenderedImage img').length >= 4")
    _schematic_plays(page, "split-merge")
    _jacobian_toggles(page, "split-merge")
    # the live sampler ran its (small) run to the end, with its plots drawn
    stream = page.locator(".imcmc-stream").first
    stream.scroll_into_view_if_needed()
    page.wait_for_function("el => el.innerText.includes('finished')", arg=stream.element_handle(), timeout=60_000)
    assert "30 / 30 steps" in stream.inner_text()
    size = stream.locator("img").evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert size[0] > 300 and size[1] > 200, size
    stream.screenshot(path=str(ARTIFACTS / "gallery-split-merge-stream.png"))
    # the ArviZ and matplotlib figures below it are images too
    assert page.locator(".jp-RenderedImage img").count() >= 4
    page.screenshot(path=str(ARTIFACTS / "gallery-split-merge-page.png"), full_page=True)
    assert not errors, errors


def test_nonparametric_trajectory_views_render_and_play_in_voila(browser, gallery_url):
    # the last cell shows the mixture's trajectory view
    page, errors = _open(browser, gallery_url("nonparametric_hmc.ipynb"),
                         "document.body.innerText.includes('NP-DHMC with look-ahead on the mixture')")
    body = page.inner_text("body")
    assert "E[N]: chain" in body and "P(start < 1): chain" in body and "off by" in body
    views = page.locator(".imcmc-frames").filter(has=page.locator("svg.imcmc-nptrajectory"))
    assert views.count() == 4                # geometric, four moves, walk, mixture
    first = views.first
    first.scroll_into_view_if_needed()
    shown = first.locator("svg.imcmc-nptrajectory:visible")
    assert shown.get_attribute("data-step") == "0"
    steps = int(shown.get_attribute("data-steps"))
    first.locator(".widget-play button").first.click()
    page.wait_for_function(
        """([el, last]) => { const s = el.querySelector('svg.imcmc-nptrajectory[data-step="' + last + '"]');
                             return s && s.getClientRects().length > 0; }""",
        arg=[first.element_handle(), steps], timeout=20_000)
    final = first.locator("svg.imcmc-nptrajectory:visible")
    dims = [int(d) for d in final.get_attribute("data-dims").split(",")]
    assert len(dims) == steps + 1 and len(set(dims)) > 1, dims      # the dimension changed in this move
    assert final.locator("g.imcmc-coordinate").count() >= 2
    first.screenshot(path=str(ARTIFACTS / "gallery-nonparametric-geometric.png"))
    for index, name in ((1, "moves"), (2, "walk"), (3, "mixture")):
        view = views.nth(index)
        view.scroll_into_view_if_needed()
        assert view.locator("svg.imcmc-nptrajectory:visible").count() == 1
        view.screenshot(path=str(ARTIFACTS / f"gallery-nonparametric-{name}.png"))
    page.screenshot(path=str(ARTIFACTS / "gallery-nonparametric-page.png"), full_page=True)
    assert not errors, errors
