#!/usr/bin/env bash
# The two commands of this repository (README):
#   ./run_all.sh          reproduce: on a GPU host, every suite then the figures; on a CPU host, the smoke
#                         suite under the Triton interpreter and the figures from the committed results
#   ./run_all.sh test     install what the tests need (into ./.venv) and run them
# Sub-commands used by the two: smoke | figures | gpu-suites
set -euo pipefail
cd "$(dirname "$0")"
VENV=${ONELA_VENV:-.venv}

ensure_env() {
  # A virtualenv in ./.venv built from pyproject.toml; torch comes from PyPI (CPU hosts: the file the
  # pip cap points to when there is one). Set ONELA_VENV=none to use the current interpreter instead.
  if [ "$VENV" = none ]; then PY=python3; return; fi
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[run_all] creating virtualenv $VENV"
    python3 -m venv "$VENV"
  fi
  PY="$VENV/bin/python"
  if ! "$PY" -c "import artifact, torch, triton, hydra, pytest, hypothesis, hydra_plugins.hydra_joblib_launcher, transformers" \
      >/dev/null 2>&1; then
    echo "[run_all] installing the project and its test dependencies into $VENV"
    "$PY" -m pip install -q --upgrade pip >/dev/null
    if ! command -v nvidia-smi >/dev/null 2>&1 && ! "$PY" -c "import torch" >/dev/null 2>&1; then
      # CPU host: the versions CI is known to pass with (Triton's interpreter differs between releases;
      # the GPU host has Triton 3.6 too). torch 2.13.0 is a CPU build where the pip cap points to one.
      "$PY" -m pip install -q "torch==2.13.0" "triton==3.6.0" || "$PY" -m pip install -q torch "triton==3.6.0"
    fi
    "$PY" -m pip install -q -e ".[test]"
  fi
}

has_gpu() { "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; }

cmd=${1:-reproduce}
case "$cmd" in
  test)
    ensure_env
    echo "[run_all] running the test suite (GPU tests are marked 'gpu' and skip without a GPU)"
    exec "$PY" -m pytest tests
    ;;
  smoke)
    ensure_env
    has_gpu || export TRITON_INTERPRET=1
    echo "[run_all] smoke suite (TRITON_INTERPRET=${TRITON_INTERPRET:-0})"
    exec "$PY" -m sweeps.run suite=smoke
    ;;
  figures)
    ensure_env
    echo "[run_all] regenerating figures and results/REPORT.md from results/"
    exec "$PY" -m plots
    ;;
  gpu-suites)
    # Every suite runs even if an earlier one recorded a failed cell; the exit status says if any did.
    # Several GPUs: the operator suite is sharded one job per GPU (launcher=joblib_gpus), then merged.
    ensure_env
    rc=0
    n=$("$PY" -c "import torch; print(torch.cuda.device_count())")
    if [ "$n" -gt 1 ]; then
      "$PY" -m sweeps.run -m suite=operator launcher=joblib_gpus shard.count="$n" || rc=1
    else
      "$PY" -m sweeps.run suite=operator || rc=1
    fi
    for suite in recurrent_path full_model traffic; do
      "$PY" -m sweeps.run suite=$suite || rc=1
    done
    exit $rc
    ;;
  reproduce)
    ensure_env
    rc=0
    if has_gpu; then
      echo "[run_all] GPU found: running every suite, then the figures"
      "$0" gpu-suites || rc=$?       # failed cells are recorded rows: draw the figures anyway
    else
      echo "[run_all] no GPU: smoke suite under the Triton interpreter, then figures from committed results"
      "$0" smoke
    fi
    "$0" figures
    exit $rc
    ;;
  *)
    echo "usage: $0 [test|smoke|figures|gpu-suites]" >&2; exit 2 ;;
esac
