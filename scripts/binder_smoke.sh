#!/usr/bin/env bash
# Binder smoke test: build a fresh environment from binder/ alone, the way
# repo2docker does, then run every gallery notebook in it (small-run mode).
#
#   bash scripts/binder_smoke.sh
#
# Steps, as a new user's Binder would take them:
#   1. copy the repository as a clone has it (tracked files and untracked files
#      git does not ignore) into a temporary folder: no .venv, no build output;
#   2. a new virtual environment with the Python of binder/runtime.txt;
#   3. from the repository root: pip install -r binder/requirements.txt, then
#      bash binder/postBuild;
#   4. check binder/apt.txt's programs, that Voila and the widgets are enabled in
#      Jupyter, and that the kernel the notebooks name is this environment's;
#   5. execute every gallery/*.ipynb with nbclient in a fresh kernel.
#
# Environment:
#   TORCH_SPEC   the torch requirement to install instead of binder/requirements.txt's
#                CPU-index lines (default torch==2.13.0, the wheel run.sh uses, so the
#                test works without access to download.pytorch.org); TORCH_SPEC=binder
#                uses the file exactly as Binder does.
#   IMCMC_SMALL  1 (default): short runs, as in CI; 0: the notebooks' full-length runs.
#   KEEP=1       keep the temporary folder (its path is printed).
# HOME is a fresh folder too (no user-level Jupyter kernels or settings leak in);
# pip's download cache is shared with yours so that a rerun is quick.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
export IMCMC_SMALL="${IMCMC_SMALL:-1}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/imcmc-binder-smoke.XXXXXX")"
if [ "${KEEP:-0}" != "1" ]; then trap 'rm -rf "$WORK"' EXIT; fi
started=$SECONDS
step() { printf '\n== [%3ds] %s\n' "$((SECONDS - started))" "$*"; }

step "1. copy of the repository in $WORK/repo"
mkdir -p "$WORK/repo"
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # every file a clone (plus your uncommitted work) has; files deleted but not yet committed are skipped
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
     | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done \
     | tar --null -T - -cf -) | tar -xf - -C "$WORK/repo"
else
  (cd "$ROOT" && tar --exclude=./.venv --exclude='*.egg-info' --exclude=__pycache__ -cf - .) | tar -xf - -C "$WORK/repo"
fi
cd "$WORK/repo"

step "2. Python from binder/runtime.txt"
runtime="$(tr -d '[:space:]' < binder/runtime.txt)"          # e.g. python-3.11
version="${runtime#python-}"
PYTHON="$(command -v "python$version" || true)"
if [ -z "$PYTHON" ]; then
  echo "binder/runtime.txt asks for $runtime, but python$version is not installed here" >&2
  exit 1
fi
"$PYTHON" -m venv "$WORK/venv"
export PATH="$WORK/venv/bin:$PATH"
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}"
export HOME="$WORK/home"
mkdir -p "$HOME"
echo "$(python --version) in $WORK/venv"

step "3. pip install -r binder/requirements.txt (from the repository root), then binder/postBuild"
requirements=binder/requirements.txt
if [ "$TORCH_SPEC" != "binder" ]; then
  # the same file with its CPU-index torch lines replaced by $TORCH_SPEC
  requirements="$WORK/requirements.txt"
  grep -v -E '^\s*(--extra-index-url|--index-url)\s+https://download\.pytorch\.org|^\s*torch\b' \
    binder/requirements.txt > "$requirements"
  echo "$TORCH_SPEC" >> "$requirements"
  echo "torch requirement replaced by '$TORCH_SPEC' (TORCH_SPEC=binder uses the file as Binder does)"
fi
python -m pip install -q -r "$requirements"
bash binder/postBuild >/dev/null
python -c "import torch, imcmc_lab; print('torch', torch.__version__, '| imcmc_lab from', imcmc_lab.__file__)"

step "4. apt.txt, Jupyter extensions and the kernel"
while read -r package; do
  case "$package" in ''|'#'*) continue ;; esac
  if [ "$package" = graphviz ] && ! command -v dot >/dev/null; then
    echo "warning: apt.txt's graphviz is not installed on this machine (no 'dot'); trace trees fall back to HTML"
  else
    echo "apt.txt: $package present"
  fi
done < binder/apt.txt
jupyter server extension list 2>&1 | grep -E '^\s*voila\b.*enabled' \
  || { echo "Voila is not enabled as a Jupyter server extension" >&2; exit 1; }
jupyter labextension list 2>&1 | grep -E '@jupyter-widgets/jupyterlab-manager.*enabled' \
  || { echo "the ipywidgets JupyterLab extension is not enabled" >&2; exit 1; }
python -c "
from voila.server_extension import load_config_file
config = load_config_file()
assert config is not None and config.VoilaConfiguration.progressive_rendering, 'postBuild did not configure Voila'
print('Voila: progressive rendering on')"

step "5. every gallery notebook (IMCMC_SMALL=$IMCMC_SMALL)"
python - <<'PY'
import pathlib, sys, time

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

spec = KernelSpecManager().get_kernel_spec("python3")
if not spec.argv[0].startswith(sys.prefix):
    sys.exit(f"the python3 kernel runs {spec.argv[0]}, not this environment's Python ({sys.prefix})")
failed = []
for path in sorted(pathlib.Path("gallery").glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    except Exception as exc:               # a cell failed: nbclient says which
        failed.append(path.name)
        print(f"FAILED {path.name}: {type(exc).__name__}: {str(exc)[-2000:]}")
        continue
    unexpected = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "code"
                  and "raises-exception" not in c.metadata.get("tags", [])
                  and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    if unexpected:
        failed.append(path.name)
        print(f"FAILED {path.name}: errors in {unexpected}")
    else:
        print(f"ok  {path.name:<40} {time.perf_counter() - t0:6.1f} s")
sys.exit(f"{len(failed)} notebook(s) failed: {', '.join(failed)}" if failed else 0)
PY
step "6. the README badges' pages: JupyterLab on gallery/ and Voila on split/merge"
python - <<'PY'
import os, secrets, socket, subprocess, sys, time, urllib.request

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
token = secrets.token_hex(16)
# what Binder starts: a Jupyter server at the repository root, Voila as its extension
# (Binder's user is not root; a root shell here needs --allow-root)
log = os.path.join(os.environ["HOME"], "jupyter-server.log")
server = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
                           "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
                           f"--ServerApp.root_dir={os.getcwd()}"] + (["--allow-root"] if os.geteuid() == 0 else []),
                          stdout=subprocess.DEVNULL, stderr=open(log, "w"))
try:
    def get(path):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}?token={token}", timeout=120) as reply:
            return reply.status, reply.read().decode("utf-8", "replace")

    deadline = time.monotonic() + 90
    while True:
        try:
            get("api/status")
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit(open(log).read()[-3000:] + "\nthe Jupyter server did not start (its log is above)")
            time.sleep(0.5)
    for path, expect in [("lab/tree/gallery", "JupyterLab"),
                         ("voila/render/gallery/split_merge_mixture.ipynb", "Split and merge")]:
        status, body = get(path)
        if status != 200 or expect not in body:
            sys.exit(f"/{path}: HTTP {status}, {expect!r} not in the page")
        print(f"ok  /{path} (HTTP {status})")
finally:
    server.terminate()
    server.wait(30)
PY
step "Binder smoke test passed"
