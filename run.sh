#!/usr/bin/env bash
# imcmc-lab: set everything up in ./.venv and run one job.
#   bash run.sh lab    JupyterLab on gallery/ (the main job)
#   bash run.sh demo   headless demo: a split/merge chain, summary printed
#   bash run.sh test   the test suite (what CI runs)
set -euo pipefail
cd "$(dirname "$0")"
VENV="${IMCMC_VENV:-.venv}"
# A CPU build of PyTorch; pinned so pip does not pull several GB of CUDA packages
# on machines that have this wheel locally. Override with TORCH_SPEC if needed.
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"

setup() {
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  local stamp="$VENV/.imcmc-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q "$TORCH_SPEC"
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    "$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null
    touch "$stamp"
  fi
}

case "${1:-}" in
  lab)
    setup
    exec "$VENV/bin/jupyter" lab --notebook-dir=gallery "${@:2}"
    ;;
  demo)
    setup
    exec "$VENV/bin/python" -m imcmc_lab.examples "${@:2}"
    ;;
  test)
    setup
    exec "$VENV/bin/python" -m pytest -q "${@:2}"
    ;;
  *)
    echo "usage: bash run.sh lab|demo|test" >&2
    exit 2
    ;;
esac
