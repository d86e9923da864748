"""The live multi-chain stream in a real browser (issue 20): Chromium (Playwright) against Voilà.

A notebook made here starts the embedded Dask cluster (2 worker processes) and shows
``SamplerStream(kernel, trace, chains=2)``. The test presses Start and reads the status line
twice while the workers run: the step count grows and the plot changes, drawn with one line
per chain; then Stop ends both chains and the final count stays. Screenshots go to
tests/artifacts/chains-*.png.

Same rules as tests/test_browser.py (whose helpers this reuses).
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
import time

import nbformat
import pytest

test_browser = pytest.importorskip("test_browser", reason="tests/test_browser.py holds the browser helpers")
from test_browser import ARTIFACTS, _requirements, browser, voila_server  # noqa: E402,F401  (browser: a fixture)

CELLS = [
    "import torch\nimport imcmc_lab as il\nfrom imcmc_lab.examples import two_clusters as tc\n"
    "from imcmc_lab.inference import distributed\nfrom imcmc_lab.widgets import SamplerStream\n"
    "client = distributed.local_client(n_workers=2)   # started (and warmed) before the view",
    "data = torch.tensor([-1.4, -0.9, -0.6, -1.1, 0.7, 1.2, 0.9, 1.5, 1.3, -0.8], dtype=torch.float64)\n"
    "stream = SamplerStream(tc.two_cluster_kernel(), tc.initial_trace(data), steps=6_000, chains=2, seed=3,\n"
    "                       record={'k': 'k'}, plots=['k', 'log joint', 'acceptance'], max_rate=3)\n"
    "stream",
]


def _steps(stream) -> int:
    text = stream.locator(".imcmc-stream-status").inner_text()
    return int(re.search(r"([\d,]+) / [\d,]+ steps in 2 chains", text).group(1).replace(",", ""))


@pytest.fixture(scope="module")
def chains_url(tmp_path_factory):
    _requirements()
    pytest.importorskip("distributed")
    root = tmp_path_factory.mktemp("chains")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "stream_chains.ipynb")
    import voila

    # Voilà's templates live under the prefix it was installed in (a virtual environment
    # sharing another one's packages does not have them under its own prefix)
    installed = pathlib.Path(voila.__file__).resolve().parents[4] / "share" / "jupyter"
    env = dict(os.environ)
    if (installed / "voila" / "templates").is_dir():
        # (this interpreter's own kernel first: the installed prefix's kernel runs another checkout)
        paths = [str(pathlib.Path(sys.prefix) / "share" / "jupyter"), str(installed), env.get("JUPYTER_PATH")]
        env["JUPYTER_PATH"] = os.pathsep.join(filter(None, paths))
    for port, token in voila_server([str(root / "stream_chains.ipynb")], root, "voila-chains.log", env):
        yield f"http://127.0.0.1:{port}/?token={token}"


def test_the_multi_chain_stream_updates_while_workers_run(browser, chains_url):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(chains_url, timeout=180_000)
    stream = page.locator(".imcmc-stream").first
    stream.wait_for(state="visible", timeout=180_000)
    assert "2 chains on the local Dask cluster" in stream.inner_text()
    assert _steps(stream) == 0
    stream.get_by_role("button", name="Start").click()
    page.wait_for_function("el => /[1-9][\\d,]* \\/ [\\d,]+ steps in 2 chains/.test(el.innerText)",
                           arg=stream.element_handle(), timeout=60_000)
    first, first_src = _steps(stream), stream.locator("img").get_attribute("src")
    stream.screenshot(path=str(ARTIFACTS / "chains-running-1.png"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _steps(stream) <= first:
        page.wait_for_timeout(250)
    page.wait_for_timeout(1000)
    second = _steps(stream)
    stream.screenshot(path=str(ARTIFACTS / "chains-running-2.png"))
    assert second > first, (first, second)
    assert stream.locator("img").get_attribute("src") != first_src, "the plot was not redrawn"
    assert "running" in stream.inner_text()
    stream.get_by_role("button", name="Stop").click()
    page.wait_for_function("el => el.innerText.includes('stopped')", arg=stream.element_handle(), timeout=60_000)
    stopped = _steps(stream)
    assert stopped >= second
    page.wait_for_timeout(1200)
    assert _steps(stream) == stopped          # both chains ended; nothing runs on
    stream.screenshot(path=str(ARTIFACTS / "chains-stopped.png"))
    assert not errors, errors
