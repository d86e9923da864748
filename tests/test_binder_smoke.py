"""The Binder configuration, checked statically, and the Binder smoke test (opt-in).

The static checks follow repo2docker's conventions: a ``binder/`` folder makes
repo2docker ignore the repository's own packaging, so ``postBuild`` must install
the package; ``requirements.txt`` is installed from the repository root; a
``runtime.txt`` names the Python; ``apt.txt`` lists Debian packages.

The smoke test (``scripts/binder_smoke.sh``: a fresh virtual environment built
from ``binder/`` alone, then every gallery notebook executed in it) takes about
two minutes with a warm pip cache, over this suite's time budget per file, so it
runs only with ``IMCMC_BINDER_SMOKE=1``.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"


def _requirement_lines():
    lines = (BINDER / "requirements.txt").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def test_runtime_matches_the_package():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert re.fullmatch(r"python-3\.\d+", runtime), runtime
    minor = int(runtime.split(".")[1])
    text = (ROOT / "pyproject.toml").read_text()
    required = re.search(r'requires-python\s*=\s*">=3\.(\d+)"', text)
    assert required and minor >= int(required.group(1)), "runtime.txt's Python is older than pyproject's minimum"


def test_requirements_take_torch_from_the_cpu_index():
    lines = _requirement_lines()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert any(re.match(r"torch\b", line) for line in lines)
    assert any(re.match(r"voila\b", line) for line in lines)
    # no local references: repo2docker can then install these before copying the repository
    # (a cached image layer); the package itself is installed by postBuild
    assert not any(line.startswith(("-e", ".", "-r", "-c")) for line in lines), lines


def test_post_build_installs_the_package_and_is_executable():
    post_build = BINDER / "postBuild"
    assert os.access(post_build, os.X_OK)
    text = post_build.read_text()
    assert text.startswith("#!/usr/bin/env bash")
    assert re.search(r'pip install .*-e "\.\[lab\]"', text)


def test_apt_installs_graphviz():
    assert "graphviz" in (BINDER / "apt.txt").read_text().split()


def test_readme_badges_open_the_gallery():
    readme = (ROOT / "README.md").read_text()
    badges = re.findall(r"https://mybinder\.org/v2/gh/[^)\s]+", readme)
    assert any("urlpath=lab/tree/gallery" in b for b in badges), badges
    voila = [b for b in badges if "urlpath=voila" in b]
    assert voila, badges
    for badge in voila:
        notebook = re.search(r"urlpath=voila/render/(.+\.ipynb)", badge).group(1)
        assert (ROOT / notebook).exists(), notebook


@pytest.mark.skipif(os.environ.get("IMCMC_BINDER_SMOKE") != "1",
                    reason="about two minutes: set IMCMC_BINDER_SMOKE=1 (or run bash scripts/binder_smoke.sh)")
def test_binder_smoke():
    result = subprocess.run(["bash", str(ROOT / "scripts" / "binder_smoke.sh")], capture_output=True, text=True,
                            timeout=1800)
    sys.stdout.write(result.stdout[-4000:])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "Binder smoke test passed" in result.stdout
