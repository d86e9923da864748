"""The front door in a real browser: what `bash run.sh lab` and `bash run.sh voila` open,
and the quickstart in Notebook 7.

Each server is started with the very command run.sh would run
(``IMCMC_PRINT_COMMAND=1 bash run.sh JOB`` prints it), plus a port and a token.
Skipped like tests/test_browser.py when Playwright, Chromium or Voilà are missing.
Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from test_browser import ARTIFACTS, _free_port, _requirements

ROOT = Path(__file__).resolve().parents[1]


def run_sh_command(job: str, *args: str) -> list[str]:
    out = subprocess.run(["bash", "run.sh", job, *args], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, IMCMC_PRINT_COMMAND="1"), check=True)
    return shlex.split(out.stdout)


def _jupyter_data_path() -> str:
    """JUPYTER_PATH naming the share/jupyter folder of every prefix that holds a front end.

    Usually that is sys.prefix alone; in a virtual environment layered over another
    one (or with --user installs) JupyterLab's schemas and Voilà's templates live in
    the other prefix, where the servers would not look for them.
    """
    import importlib.util

    folders = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    for name in ("jupyterlab", "notebook", "voila"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            share = Path(spec.origin).parents[4] / "share" / "jupyter"
            if share.is_dir() and str(share) not in folders:
                folders.append(str(share))
    return os.pathsep.join(folders)


@contextmanager
def server(command: list[str], log_name: str, env=None):
    """Run ``command`` (a Jupyter or Voilà server) in the repository root until its port answers."""
    ARTIFACTS.mkdir(exist_ok=True)
    port = int(next(a.split("=")[1] for a in command if a.startswith("--port=")))
    with open(ARTIFACTS / log_name, "w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, JUPYTER_PATH=_jupyter_data_path(), **(env or {})))
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    pytest.fail(f"{command[:3]} exited early; see {ARTIFACTS / log_name}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    time.sleep(0.3)
            else:
                pytest.fail(f"{command[:3]} did not listen within 120 s")
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def browser():
    sync_playwright, chromium = _requirements()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


def _jupyter_flags(port: int, token: str) -> list[str]:
    return ["--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}"]


def test_run_sh_lab_opens_the_quickstart_and_hides_the_build_sources(browser):
    port, token = _free_port(), secrets.token_hex(8)
    command = run_sh_command("lab", *_jupyter_flags(port, token))
    if os.geteuid() == 0:
        assert "--allow-root" in command       # Jupyter refuses root without it
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    with server(command, "run-sh-lab.log"):
        page.goto(f"http://127.0.0.1:{port}/?token={token}", timeout=120_000)
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
        assert "/lab/tree/quickstart.ipynb" in page.url
        assert "quickstart.ipynb" in page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current").first.inner_text()
        page.wait_for_selector(".jp-DirListing-item", timeout=60_000)
        names = page.locator(".jp-DirListing-itemName").all_inner_texts()
        page.screenshot(path=str(ARTIFACTS / "run-sh-lab.png"))
    assert "quickstart.ipynb" in names and "_build" not in names, names


def _accept_kernel_dialog(page, timeout=5_000):
    """Notebook 7 sometimes asks which kernel to start (a fresh environment, a slow start):
    choose the preselected Python 3 kernel, as a user would."""
    select = page.locator(".jp-Dialog").get_by_role("button", name="Select")
    try:
        select.wait_for(state="visible", timeout=timeout)
    except Exception:
        return
    select.click()


def test_quickstart_runs_in_notebook_7_and_shows_a_widget(browser, tmp_path):
    pytest.importorskip("notebook", minversion="7")
    # a copy, so that Notebook's autosave never writes outputs into the gallery
    shutil.copy(ROOT / "gallery" / "quickstart.ipynb", tmp_path / "quickstart.ipynb")
    (tmp_path / "_build").mkdir()
    port, token = _free_port(), secrets.token_hex(8)
    command = [sys.executable, "-m", "notebook", *_jupyter_flags(port, token),
               f"--ServerApp.root_dir={tmp_path}"] + (["--allow-root"] if os.geteuid() == 0 else [])
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    with server(command, "notebook7.log", env={"IMCMC_SMALL": "1",
                                               "JUPYTER_CONFIG_PATH": str(ROOT / "etc" / "jupyter")}):
        page.goto(f"http://127.0.0.1:{port}/tree?token={token}", timeout=120_000)
        page.wait_for_selector(".jp-DirListing-item", timeout=120_000)
        assert "_build" not in page.locator(".jp-DirListing-itemName").all_inner_texts()
        page.goto(f"http://127.0.0.1:{port}/notebooks/quickstart.ipynb", timeout=120_000)
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        _accept_kernel_dialog(page)
        page.get_by_role("menuitem", name="Run").first.click()
        page.get_by_role("menuitem", name="Run All Cells").first.click()
        _accept_kernel_dialog(page)
        widget = page.locator(".jupyter-widgets svg.imcmc-schematic, .jupyter-widgets .widget-play").first
        try:
            widget.wait_for(state="attached", timeout=240_000)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "notebook7-failure.png"), full_page=True)
            raise
        widget.scroll_into_view_if_needed()
        widget.wait_for(state="visible", timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "notebook7-quickstart.png"))
    assert not [e for e in errors if "widget" in e.lower()], errors


def test_run_sh_voila_shows_cells_as_they_run(browser, tmp_path):
    """Progressive rendering: the first cell's output is on the page while a later cell runs."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Progressive"),
        nbformat.v4.new_code_cell("print('early output')"),
        nbformat.v4.new_code_cell("import time; time.sleep(25)"),
        nbformat.v4.new_code_cell("print('late output')"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "progressive.ipynb"
    nbformat.write(nb, path)
    port, token = _free_port(), secrets.token_hex(8)
    command = run_sh_command("voila", str(path), "--no-browser", f"--port={port}",
                             "--Voila.ip=127.0.0.1", f"--token={token}")
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    with server(command, "run-sh-voila.log"):
        started = time.monotonic()
        page.goto(f"http://127.0.0.1:{port}/?token={token}", timeout=120_000, wait_until="commit")
        page.get_by_text("early output").wait_for(timeout=60_000)
        seen_after = time.monotonic() - started
        assert page.get_by_text("late output").count() == 0
        page.screenshot(path=str(ARTIFACTS / "run-sh-voila-progressive.png"))
    assert seen_after < 25, f"the first output appeared only after {seen_after:.0f} s"
