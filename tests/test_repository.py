"""The repository stands on its own: no tracked file names a path of the machines it was
developed on or a folder outside the repository (data are shipped in
``imcmc_lab/examples/data/``; papers are cited by title and authors)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Written in two pieces so that this file does not name them itself.
FORBIDDEN = tuple(a + b for a, b in [
    ("/wo", "rk/"),             # the development machines' work folder
    ("/ro", "ot/"),             # a home folder
    ("/ho", "me/"),
    ("../sha", "red"),          # the folder beside the repository
    ("shared/pa", "pers"),
    ("shared/da", "ta"),
])


def _tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / name for name in out.stdout.decode().split("\0") if name]


def test_no_tracked_file_names_a_path_outside_the_repository():
    found = []
    for path in _tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue    # binary files, or deleted but not yet committed
        for lineno, line in enumerate(text.splitlines(), start=1):
            for word in FORBIDDEN:
                if word in line:
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {word!r} in {line.strip()[:100]}")
    assert not found, ("files that depend on the development machines (ship the data in the "
                       "repository, cite papers by title and authors):\n" + "\n".join(found))


def test_the_reference_answers_read_the_shipped_data():
    from reference import coal, soccer

    assert len(coal.load_event_days()) == 191
    goals = soccer.load_goals()
    assert (len(goals), sum(goals)) == (1140, 2877)


def test_every_package_of_the_source_tree_is_installed():
    """A non-editable install (a wheel, Binder) ships only the packages pyproject lists."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {"imcmc_lab": ROOT / "imcmc_lab", "imcmc_lab.magics": ROOT / "magics",
               "imcmc_lab.widgets": ROOT / "widgets"}
    found = set()
    for package, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            if package == "imcmc_lab" and parts and parts[0] in ("magics", "widgets"):
                continue
            found.add(".".join((package, *parts)))
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"
