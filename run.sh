#!/usr/bin/env bash
# imcmc-lab: set everything up in ./.venv and run one job.
#   bash run.sh lab      JupyterLab on gallery/, opening quickstart.ipynb (the main job)
#   bash run.sh notebook the same in Notebook 7 (classic interface)
#   bash run.sh voila    the split/merge notebook as a Voilà dashboard (or: bash run.sh voila NOTEBOOK)
#   bash run.sh demo     headless demo: a split/merge chain, summary printed
#   bash run.sh test     the test suite (what CI runs)
# Extra arguments go to the program (jupyter lab, voila, the demo, pytest).
# IMCMC_PRINT_COMMAND=1 prints the command a job would run instead of running it
# (no set-up; tests/test_browser_frontdoor.py starts exactly that command).
set -euo pipefail
cd "$(dirname "$0")"
VENV="${IMCMC_VENV:-.venv}"
# PyTorch, pinned; from PyTorch's CPU-only index when it can be reached (PyPI's Linux
# wheel pulls several GB of CUDA libraries), else from the default index. Override
# with TORCH_SPEC (e.g. TORCH_SPEC="torch>=2.1").
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
# The project's Jupyter settings (etc/jupyter): build sources hidden from the file
# browser, Voilà's progressive rendering (each cell shown as soon as it has run).
export JUPYTER_CONFIG_PATH="$PWD/etc/jupyter${JUPYTER_CONFIG_PATH:+:$JUPYTER_CONFIG_PATH}"

install_torch() {
  local pip=("$VENV/bin/python" -m pip install -q)
  if "${pip[@]}" --timeout 5 --retries 0 --index-url "$TORCH_CPU_INDEX" "$TORCH_SPEC" 2>/dev/null; then
    return
  fi
  echo "run.sh: PyTorch's CPU index ($TORCH_CPU_INDEX) cannot be reached;" \
       "installing $TORCH_SPEC from the default index" >&2
  "${pip[@]}" "$TORCH_SPEC"
}

setup() {
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  local stamp="$VENV/.imcmc-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    install_torch
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    "$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null
    touch "$stamp"
  fi
}

run() {
  if [ "${IMCMC_PRINT_COMMAND:-0}" = 1 ]; then
    printf '%q ' env "JUPYTER_CONFIG_PATH=$JUPYTER_CONFIG_PATH" "$@"; echo
    exit 0
  fi
  setup
  exec "$@"
}

# Jupyter refuses to run as root (containers, Binder-like machines) without this.
AS_ROOT=()
if [ "$(id -u)" = 0 ]; then AS_ROOT=(--allow-root); fi

case "${1:-}" in
  lab)
    run "$VENV/bin/jupyter" lab --notebook-dir=gallery \
        --LabApp.default_url=/lab/tree/quickstart.ipynb ${AS_ROOT[@]+"${AS_ROOT[@]}"} "${@:2}"
    ;;
  notebook)
    run "$VENV/bin/jupyter" notebook --notebook-dir=gallery ${AS_ROOT[@]+"${AS_ROOT[@]}"} "${@:2}"
    ;;
  voila)
    notebook="${2:-gallery/split_merge_mixture.ipynb}"
    run "$VENV/bin/voila" "$notebook" "${@:3}"
    ;;
  demo)
    run "$VENV/bin/python" -m imcmc_lab.examples "${@:2}"
    ;;
  test)
    run "$VENV/bin/python" -m pytest -q "${@:2}"
    ;;
  *)
    echo "usage: bash run.sh lab|notebook|voila|demo|test [arguments for the program]" >&2
    exit 2
    ;;
esac
