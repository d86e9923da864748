"""The widgets in a real browser: Chromium (driven by Playwright) against a Voilà server.

Voilà runs tests/notebooks/widgets_demo.ipynb in a fresh kernel when the page
loads and renders the widgets with the real widget manager. The test checks
that the involution schematic animates (the drawn stage changes when the Play
control advances), that the Jacobian view and the trace tree render as SVG, and
that the live sampler's plot changes while the chain runs in the background.
A second test exports the executed notebook to static HTML without widget
state and checks that the self-contained fallback still animates.
Screenshots go to tests/artifacts/.

Skipped (with the reason) when Playwright, Chromium or Voilà are missing,
unless IMCMC_REQUIRE_BROWSER=1, when that is a failure (CI sets it).
"""

from __future__ import annotations

import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent
NOTEBOOK = ROOT / "notebooks" / "widgets_demo.ipynb"
ARTIFACTS = ROOT / "artifacts"


def _chromium():
    for candidate in (os.environ.get("IMCMC_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def _requirements():
    """(playwright's sync_playwright, chromium path) or a pytest skip/fail with the reason."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append("the playwright Python package (pip install playwright)")
    chromium = _chromium()
    if chromium is None:
        missing.append("Chromium at /usr/bin/chromium (apt-get install chromium) or $IMCMC_CHROMIUM")
    try:
        import voila  # noqa: F401
    except ImportError:
        missing.append("Voilà (pip install voila)")
    if missing:
        reason = "browser test needs " + "; ".join(missing)
        if os.environ.get("IMCMC_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + " (IMCMC_REQUIRE_BROWSER=1)")
        pytest.skip(reason)
    return sync_playwright, chromium


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser():
    sync_playwright, chromium = _requirements()
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


def voila_server(voila_args, root, log_name, env=None):
    """Start Voilà on a free localhost port with a token; yields ``(port, token)``, then stops it."""
    port, token = _free_port(), secrets.token_hex(16)
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / log_name, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "voila", *voila_args, "--no-browser", f"--port={port}",
         "--Voila.ip=127.0.0.1", f"--token={token}", "--show_tracebacks=True", f"--Voila.root_dir={root}"],
        stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"Voilà exited early; see {ARTIFACTS / log_name}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("Voilà did not start listening within 60 s")
        yield port, token
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def voila_url():
    _requirements()
    for port, token in voila_server([str(NOTEBOOK)], NOTEBOOK.parent, "voila.log"):
        yield f"http://127.0.0.1:{port}/?token={token}"


def _visible_stage(container) -> str:
    return container.locator("svg.imcmc-schematic:visible").first.get_attribute("data-stage")


def test_views_render_and_animate_in_voila(browser, voila_url):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(voila_url, timeout=120_000)
    # Voilà executes the whole notebook (the stream's first run included), then renders.
    page.wait_for_selector(".imcmc-stream img", state="visible", timeout=120_000)

    # 1. The schematic animates: Play advances the drawn stage.
    schematic = page.locator(".imcmc-frames").filter(has=page.locator("svg.imcmc-schematic")).first
    schematic.scroll_into_view_if_needed()
    assert _visible_stage(schematic) == "0"
    schematic.screenshot(path=str(ARTIFACTS / "schematic-stage1.png"))
    schematic.locator(".widget-play button").first.click()
    page.wait_for_function(
        """el => { const s = el.querySelector('svg.imcmc-schematic[data-stage]:not([data-stage="0"])');
                   return s && s.getClientRects().length > 0; }""",
        arg=schematic.element_handle(), timeout=10_000)
    advanced = _visible_stage(schematic)
    assert advanced in ("1", "2")
    schematic.screenshot(path=str(ARTIFACTS / f"schematic-stage{int(advanced) + 1}.png"))

    # The tree-structured schematic (Fig. 2f) outlines the swapped subtree.
    tree_schematic = page.locator(".imcmc-frames").filter(has=page.locator("svg.imcmc-schematic")).nth(1)
    tree_schematic.scroll_into_view_if_needed()
    tree_schematic.locator(".widget-play button").first.click()
    page.wait_for_timeout(2000)
    tree_schematic.screenshot(path=str(ARTIFACTS / "schematic-subtree.png"))
    assert tree_schematic.locator("svg.imcmc-schematic:visible rect.imcmc-subtree").count() >= 1

    # 2. The Jacobian view renders, labelled, and its toggle switches to block order.
    jac = page.locator(".imcmc-frames").filter(has=page.locator("svg.imcmc-jacobian")).first
    jac.scroll_into_view_if_needed()
    assert jac.locator("svg.imcmc-jacobian:visible").get_attribute("data-order") == "address"
    assert jac.locator("svg.imcmc-jacobian:visible text.imcmc-row-label").count() >= 6
    jac.get_by_text("block order").click()
    page.wait_for_function(
        """el => { const s = el.querySelector('svg.imcmc-jacobian[data-order="block"]');
                   return s && s.getClientRects().length > 0; }""", arg=jac.element_handle(), timeout=10_000)
    assert jac.locator("svg.imcmc-jacobian:visible rect.imcmc-block").count() >= 1
    jac.screenshot(path=str(ARTIFACTS / "jacobian.png"))

    # 3. The trace tree is Graphviz's SVG (JupyterLab's renderer shows SVG output as an image).
    tree = page.locator(".jp-RenderedSVG").first
    tree.scroll_into_view_if_needed()
    drawn = tree.evaluate("""el => { const img = el.querySelector('img');
        if (img) return {w: img.naturalWidth, text: decodeURIComponent(img.src)};
        const svg = el.querySelector('svg'); return {w: svg.getBoundingClientRect().width, text: svg.outerHTML}; }""")
    assert drawn["w"] > 100 and 'class="graph"' in drawn["text"] and drawn["text"].count('class="node"') >= 5
    tree.screenshot(path=str(ARTIFACTS / "trace-tree.png"))

    # 4. The live stream: Continue runs the chain further; the plot and the progress change over time.
    stream = page.locator(".imcmc-stream").first
    stream.scroll_into_view_if_needed()
    stream.screenshot(path=str(ARTIFACTS / "stream-before.png"))
    first_src = stream.locator("img").get_attribute("src")
    assert "300 / 300 steps" in stream.inner_text()
    stream.get_by_role("button", name="Continue").click()
    seen = {first_src}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(seen) < 3:
        page.wait_for_timeout(250)
        seen.add(stream.locator("img").get_attribute("src"))
    stream.screenshot(path=str(ARTIFACTS / "stream-running.png"))
    assert len(seen) >= 3, "the stream's plot did not update at least twice while running"
    page.wait_for_function("""el => el.innerText.includes('finished')""", arg=stream.element_handle(),
                           timeout=60_000)
    page.wait_for_function("el => el.querySelector('img').complete", arg=stream.element_handle())
    page.wait_for_timeout(300)      # the last picture arrives with the 'finished' text; let it paint
    assert "600 / 600 steps" in stream.inner_text()
    stream.screenshot(path=str(ARTIFACTS / "stream-after.png"))
    page.screenshot(path=str(ARTIFACTS / "voila-page.png"), full_page=True)
    assert not errors, errors


def test_static_html_export_animates_without_a_widget_manager(browser, tmp_path):
    """nbconvert's HTML of the executed notebook, without widget state: the text/html fallback."""
    _requirements()
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=False,
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    assert "widgets" not in nb.metadata     # so nbconvert falls back to each output's text/html
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    path = tmp_path / "widgets_demo.html"
    path.write_text(body, encoding="utf-8")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(path.as_uri())
    static = page.locator(".imcmc-static").filter(has=page.locator("svg.imcmc-schematic")).first
    static.scroll_into_view_if_needed()
    assert static.get_attribute("data-shown") == "0"
    static.locator("button.imcmc-play").click()
    page.wait_for_function("el => el.getAttribute('data-shown') !== '0'", arg=static.element_handle(),
                           timeout=10_000)
    shown = static.get_attribute("data-shown")
    assert static.locator(f".imcmc-frame[data-frame='{shown}'] svg.imcmc-schematic").is_visible()
    assert not static.locator(".imcmc-frame[data-frame='0'] svg").is_visible()
    static.screenshot(path=str(ARTIFACTS / "static-export-schematic.png"))
