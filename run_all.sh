#!/usr/bin/env bash
# The artifact's one entry point (README.md). Every command prints its stages, each with its expected
# duration, before running them.
#   ./run_all.sh            reproduce. GPU host: set up (virtualenv, baseline pack, FlashInfer's CuTe DSL), run
#                           every suite, transformers' generate (tools.hf_generate) and the decode breakdown into
#                           outputs/reproduce/<stamp>/, draw its figures
#                           and REPORT.md, check it against the committed results/ (python -m plots.check). CPU: the smoke
#                           suite under the Triton interpreter, the figures, REPORT.md and README's claims table
#                           from the committed results/, and their self-check.
#   ./run_all.sh quick      at most 10 minutes on one H200: recurrent_path at O=3 (every path), one operator shape
#                           on 5 head layouts + the R=16 W=512 Qwen shape, one full-model point per prompt length, traffic
#                           at O=3 (OneLA, Controlled FullState), into outputs/quick/<stamp>/, then the check.
#                           CPU host: the smoke suite and the self-check of the committed results.
#   ./run_all.sh test       install what the tests need (into ./.venv), run the linters (vulture, import-linter;
#                           pyproject.toml) and the tests (CI runs this); fails when either fails
# Sub-commands: setup | smoke | figures | check [RUN_DIR] | gpu-suites [RUN_DIR]
# Environment: ONELA_VENV (default .venv; "none" = the interpreter ONELA_PYTHON, default python3),
#   ONELA_RUN_DIR (the folder a GPU run writes; "results" folds new rows into the committed tables, resuming),
#   ONELA_OFFLINE=1 (never download), ONELA_BASELINE_PACK (the pack folder, default .baseline_pack),
#   ONELA_DRY_RUN=1 (print the stages and their commands, run none of them; =gpu: a GPU host's plan, with
#   ONELA_DRY_GPUS GPUs, default 1), TRITON_CACHE_AUTOTUNING (default 1: Triton keeps autotune results on disk).
set -uo pipefail
cd "$(dirname "$0")"
# Triton keeps each autotuned kernel's benchmark results on disk (its cache dir, ~/.triton/cache by default) and
# every later process with the same kernel source, autotune key, GPU target and Triton version reads the choice
# back instead of benchmarking every config again: the suites, tools and traffic children this script starts
# (docs/methods.md section 11). TRITON_CACHE_AUTOTUNING=0 in the environment turns it off.
export TRITON_CACHE_AUTOTUNING=${TRITON_CACHE_AUTOTUNING:-1}
# Python's bytecode: a host that sets PYTHONDONTWRITEBYTECODE (the project's GPU host does, and its torch ships
# without __pycache__) compiles every module it imports again in each process -- about 4 s of a suite process's
# start there (torch, transformers, the frameworks' kernel modules; docs/methods.md section 11) -- and a run starts
# dozens (every traffic cell two or more). The bytecode then goes to .cache/pycache (PYTHONPYCACHEPREFIX): the
# first process writes it, the later ones read it.
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && [ -z "${PYTHONPYCACHEPREFIX:-}" ]; then
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX="$PWD/.cache/pycache"
fi
VENV=${ONELA_VENV:-.venv}
PACK=${ONELA_BASELINE_PACK:-.baseline_pack}
DRY=${ONELA_DRY_RUN:-}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
STAGE=0
RUN_DIR=""
RC=0

say() { echo "[run_all] $*"; }

ensure_env() {
  # A virtualenv in ./.venv built from pyproject.toml; torch comes from PyPI (CPU hosts: the file the pip cap
  # points to when there is one). ONELA_VENV=none uses ${ONELA_PYTHON:-python3} as it is.
  if [ "$VENV" = none ]; then PY=${ONELA_PYTHON:-python3}; return 0; fi
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv $VENV (first time: installing torch, triton and the test deps takes a few minutes)"
    [ -n "$DRY" ] && { PY=python3; return 0; }
    python3 -m venv "$VENV" || exit 1
  fi
  PY="$VENV/bin/python"
  if ! "$PY" -c "import artifact, torch, triton, hydra, pytest, hypothesis, hydra_plugins.hydra_joblib_launcher, hydra_plugins.hydra_submitit_launcher, submitit, transformers, vulture, importlinter" \
      >/dev/null 2>&1; then
    say "installing the project and its test dependencies into $VENV"
    [ -n "$DRY" ] && return 0
    "$PY" -m pip install -q --upgrade pip >/dev/null
    if ! command -v nvidia-smi >/dev/null 2>&1 && ! "$PY" -c "import torch" >/dev/null 2>&1; then
      # CPU host: the versions CI is known to pass with (Triton's interpreter differs between releases;
      # the GPU host has Triton 3.6 too). torch 2.13.0 is a CPU build where the pip cap points to one.
      "$PY" -m pip install -q "torch==2.13.0" "triton==3.6.0" || "$PY" -m pip install -q torch "triton==3.6.0"
    fi
    "$PY" -m pip install -q -e ".[test]" || exit 1
  fi
  # fla-core (the fla FullState baseline's kernel): a venv without it gets it here; where pip cannot
  # reach it, fla's rows are skips that name the missing package (baselines/fla_fullstate.py)
  if ! "$PY" -c "import einops, importlib.metadata as m; m.version('fla-core')" >/dev/null 2>&1; then
    if [ -n "${ONELA_OFFLINE:-}" ]; then
      say "fla-core==0.6.0 is not in $VENV and ONELA_OFFLINE is set: the fla FullState rows will be skips naming it"
    else
      say "installing fla-core==0.6.0 and einops (the fla FullState baseline) into $VENV"
      [ -n "$DRY" ] && return 0
      "$PY" -m pip install -q "fla-core==0.6.0" einops \
        || say "could not install fla-core==0.6.0: the fla FullState rows will be skips naming it"
    fi
  fi
}

has_gpu() {
  # ONELA_DRY_RUN=gpu prints a GPU host's plan on any host (tests/test_run_all.py); it runs nothing.
  [ "$DRY" = gpu ] && return 0
  "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
}

# Recorded wall times (<dir>/env/<run_id>.wall.json, as in README's claims table): load_expected <dir> reads them
# once (one python call); expected <suite> <fallback> [dir] prints one, else the fallback.
declare -A EXPECTED=()
load_expected() {
  local dir=$1 s t
  while IFS=$'\t' read -r s t; do [ -n "$s" ] && EXPECTED[$dir/$s]=$t; done < <(
    "$PY" -m plots.report expected operator recurrent_path full_model traffic beam_scaling hf_generate --results "$dir" --fallback "" \
      2>/dev/null)
  return 0
}
expected() { local t=${EXPECTED[${3:-results}/$1]:-}; echo "${t:-$2}"; }

# stage "<what>" "<expected duration>" command...: announce, run, time; a failure is remembered (RC), not fatal.
stage() {
  local what=$1 exp=$2 t0=$SECONDS rc=0
  shift 2
  STAGE=$((STAGE + 1))
  say "stage $STAGE: $what -- expected: $exp"
  if [ -n "$DRY" ]; then say "  would run: $*"; return 0; fi
  "$@" || rc=$?
  say "  stage $STAGE done in $((SECONDS - t0)) s (exit $rc)"
  [ -n "$RUN_DIR" ] && [ -d "$RUN_DIR" ] && printf '%s\t%s\t%s\n' "$what" "$((SECONDS - t0))" "$rc" >>"$RUN_DIR/stages.tsv"
  [ "$rc" -eq 0 ] || RC=1
  return 0
}

INDEX=""   # probed once: can pip reach the package index? (a 140 kB download; ONELA_OFFLINE=1 skips it)
index_reachable() {
  if [ -z "$INDEX" ]; then
    INDEX=no
    if [ -z "${ONELA_OFFLINE:-}" ] && "$PY" -m baselines.pack --probe-index >/dev/null 2>&1; then INDEX=yes; fi
  fi
  [ "$INDEX" = yes ]
}

# The baseline pack and FlashInfer's CuTe DSL, GPU hosts only (a CPU host runs no framework kernel).
setup_baselines() {
  if [ -f "$PACK/MANIFEST.json" ]; then
    say "baseline pack: $PACK (present)"
  elif index_reachable; then
    stage "baseline pack: download the pinned wheels (about 440 MB), check their sha256, build $PACK" \
      "1-3 min, network-bound (estimate; the build itself takes seconds)" \
      "$PY" -m baselines.pack --download --wheels .whl --out "$PACK"
  else
    say "no baseline pack and no package index: build one where pip reaches PyPI (python -m baselines.pack --download --python-version 3.12) and copy .baseline_pack/ here (or set ONELA_BASELINE_PACK); until then the vLLM, SGLang and FlashInfer rows are named skips"
  fi
  if "$PY" -c "import nvidia_cutlass_dsl" >/dev/null 2>&1; then
    say "FlashInfer's CuTe DSL: installed"
  elif index_reachable; then
    stage "FlashInfer's CuTe DSL: download the pinned wheels (about 96 MB), install them" \
      "1 min, network-bound (estimate)" "$PY" -m baselines.pack --install-dsl --wheels .whl --out "$PACK"
  else
    say "FlashInfer's CuTe DSL is not installed and the index is unreachable: carry it with python -m baselines.ship_parts (README); until then the FlashInfer rows are named skips"
  fi
}

new_run_dir() {  # new_run_dir <kind>: ONELA_RUN_DIR or outputs/<kind>/<stamp>, plus outputs/<kind>/latest
  RUN_DIR=${ONELA_RUN_DIR:-outputs/$1/$STAMP}
  [ -n "$DRY" ] && { say "run folder: $RUN_DIR"; return 0; }
  mkdir -p "$RUN_DIR"
  if [ -z "${ONELA_RUN_DIR:-}" ]; then ln -sfn "$STAMP" "outputs/$1/latest"; fi
  say "run folder: $RUN_DIR"
}

smoke() {
  local out=${1:-outputs/smoke/$STAMP}
  has_gpu || export TRITON_INTERPRET=1
  stage "smoke suite (TRITON_INTERPRET=${TRITON_INTERPRET:-0}): every path on tiny shapes, into $out" \
    "15-30 s on a CPU" "$PY" -m sweeps.run suite=smoke results_dir="$out" progress=false
}

check() {  # check <run dir>: the self-check against the committed results/
  local out=()
  [ -n "$RUN_DIR" ] && out=(--out "$RUN_DIR/check.txt")
  stage "self-check of $1 against results/ and the paper (python -m plots.check)" "a few seconds" \
    "$PY" -m plots.check "$1" "${out[@]}"
}

gpu_count() {  # the GPUs this host has (ONELA_DRY_RUN=gpu: ONELA_DRY_GPUS, default 1)
  if [ "$DRY" = gpu ]; then echo "${ONELA_DRY_GPUS:-1}"; return; fi
  "$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0
}

gpu_suites() {  # every suite into $RUN_DIR; on several GPUs each suite but traffic sharded over all of them
  local n launch=()
  n=$(gpu_count)
  # one job per GPU, each a shard of the suite's shapes; the shards' tables merge when all have ended and
  # their side tables (beam_scaling_*.csv) take whole lines from each
  [ "$n" -gt 1 ] && launch=(-m launcher=joblib_gpus shard.count="$n")
  local on=""; [ "$n" -gt 1 ] && on=", sharded over $n GPUs"
  stage "operator suite, 405 shapes x every path (Fig 7)$on" "$(expected operator 'not measured') on one GPU" \
    "$PY" -m sweeps.run "${launch[@]}" suite=operator results_dir="$RUN_DIR"
  stage "recurrent_path suite, every path (Fig 8a/8b)$on" "$(expected recurrent_path 'not measured') on one GPU" \
    "$PY" -m sweeps.run "${launch[@]}" suite=recurrent_path results_dir="$RUN_DIR"
  stage "full_model suite, 6 paths x 2 prompts x O=3..7 (Fig 6)$on" "$(expected full_model 'not measured') on one GPU" \
    "$PY" -m sweeps.run "${launch[@]}" suite=full_model results_dir="$RUN_DIR"
  # Fig 6's native framework reference: transformers' own generate(num_beams=W), stock and with OneLA inside it, at
  # the Fig 6 cells (one process on one GPU; stock generate prefills W copies of each prompt: 1K prompts only)
  if "$PY" -c "import transformers" >/dev/null 2>&1 || [ "$DRY" = gpu ]; then
    stage "transformers generate, stock and with OneLA, at the Fig 6 cells (Fig 6's native framework reference)" \
      "$(expected hf_generate '6-8 min (estimate)')" "$PY" -m tools.hf_generate --out "$RUN_DIR"
  else
    say "transformers generate stage skipped: transformers is not installed in $PY (pip install -e '.[test]')"
  fi
  # where one Fig 6 decode call's time goes, per component beside its floor (results/full_model_breakdown.csv and
  # its figure): the committed run's three paths, one process (a few cells; not a Hydra suite, so not sharded)
  stage "decode breakdown: one Fig 6 decode call per component vs its floor, 3 paths x 2 prompts at O=5" \
    "about 1 min (the committed run: 58 s)" \
    "$PY" -m tools.decode_breakdown --out "$RUN_DIR" --paths onela controlled_fullstate_paper controlled_fullstate
  # beyond the paper; the estimate: 10 depths x 12 paths and one width cell per path, cold compile cache
  stage "beam_scaling suite, per-step latency vs depth O=2..32 and the widest beam per path (beyond the paper)$on" \
    "$(expected beam_scaling '6-9 min (estimate)') on one GPU" \
    "$PY" -m sweeps.run "${launch[@]}" suite=beam_scaling results_dir="$RUN_DIR"
  # not sharded: ncu takes a host-wide lock (/tmp/nsight-compute-lock), so shards would only queue for it
  if command -v ncu >/dev/null 2>&1 || [ "$DRY" = gpu ]; then
    stage "traffic suite, ncu counters of the recurrent_path cells (Fig 8c)" "$(expected traffic 'not measured')" \
      "$PY" -m sweeps.run suite=traffic results_dir="$RUN_DIR"
  else
    say "traffic suite skipped: Nsight Compute (ncu) is not on PATH"
  fi
}

quick_gpu() {
  # Expected times: the reference quick run's records (results/quick/env/*.wall.json) where committed, else
  # estimates from cold-cache runs of the full suites (recurrent_path at O=3 and O=7, every path: 2.5 min, 1.6 of it
  # vLLM's prefix-cache replay; an operator shape on a new head layout: about a minute with that path, less
  # without it).
  stage "recurrent_path at O=3, every path (Fig 8a/8b)" "$(expected recurrent_path '1.5 min (estimate)' results/quick)" \
    "$PY" -m sweeps.run suite=quick_recurrent_path results_dir="$RUN_DIR" progress=false
  stage "operator subset: R=4 W=128 O=3 on 5 head layouts (5 shapes x 7 paths)" "$(expected operator '3 min for both operator stages (estimate)' results/quick)" \
    "$PY" -m sweeps.run suite=quick_operator results_dir="$RUN_DIR" progress=false
  stage "operator subset: R=16 W=512 Qwen, O=3 and O=7" "(included above)" \
    "$PY" -m sweeps.run suite=quick_operator_qwen results_dir="$RUN_DIR" progress=false
  stage "full model: O=3 at prompt 1K and 5K, 3 paths (Fig 6)" "$(expected full_model '2 min (estimate)' results/quick)" \
    "$PY" -m sweeps.run suite=quick_full_model results_dir="$RUN_DIR" progress=false
  if command -v ncu >/dev/null 2>&1; then
    stage "traffic at O=3: OneLA and Controlled FullState (Fig 8c)" "$(expected traffic '1 min (estimate)' results/quick)" \
      "$PY" -m sweeps.run suite=quick_traffic results_dir="$RUN_DIR" progress=false
  else
    say "traffic stage skipped: Nsight Compute (ncu) is not on PATH"
  fi
}

finish() {
  say "done in $((SECONDS)) s$( [ -n "$RUN_DIR" ] && echo ", results in $RUN_DIR/" ) (exit $RC)"
  [ -n "$RUN_DIR" ] && [ -d "$RUN_DIR" ] && [ -z "$DRY" ] && echo "$SECONDS" >"$RUN_DIR/wall_s.txt"
  exit $RC
}

cmd=${1:-reproduce}
case "$cmd" in
  test)
    ensure_env
    if has_gpu; then setup_baselines; fi          # the framework-kernel GPU tests need the pack
    say "running the test suite (GPU tests are marked 'gpu' and skip without a GPU)"
    # several GPUs: one pytest-xdist worker per GPU (tests/conftest.py pins worker i to GPU i)
    XDIST=()
    n=$(gpu_count)
    if [ "$n" -gt 1 ] && { [ "$DRY" = gpu ] || "$PY" -c "import xdist" 2>/dev/null; }; then XDIST=(-n "$n"); fi
    LINT_IMPORTS=(-c "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())")
    if [ -n "$DRY" ]; then
      say "  would run: $PY -m vulture; $PY ${LINT_IMPORTS[*]}; $PY -m pytest tests ${XDIST[*]}"; exit 0
    fi
    # The linters first, configured in pyproject.toml: vulture (dead code), import-linter (the layer
    # contracts). A linter's failure fails the command, after the tests have run too.
    LINT=0
    say "vulture: no dead code in the packages and tests (pyproject.toml [tool.vulture])"
    "$PY" -m vulture || LINT=1
    say "import-linter: the layer contracts (pyproject.toml [tool.importlinter])"
    "$PY" "${LINT_IMPORTS[@]}" || LINT=1
    "$PY" -m pytest tests "${XDIST[@]}"; TESTS=$?
    [ "$LINT" -eq 0 ] || say "a linter failed (above): dead code or a broken layer contract"
    [ "$TESTS" -ne 0 ] && exit "$TESTS"
    exit "$LINT"
    ;;
  setup)
    ensure_env
    if has_gpu; then setup_baselines; else say "no GPU: the baseline pack and the CuTe DSL are not needed here"; fi
    finish
    ;;
  smoke)
    ensure_env; smoke; finish ;;
  figures)
    ensure_env
    stage "figures, results/REPORT.md and README's claims table from results/" "10-20 s" "$PY" -m plots
    finish
    ;;
  check)
    ensure_env; check "${2:-results}"; finish ;;
  gpu-suites)
    ensure_env
    has_gpu || { say "gpu-suites runs the suites on a CUDA GPU and this host has none (./run_all.sh smoke runs the CPU suite)"; exit 2; }
    load_expected results
    RUN_DIR=${2:-${ONELA_RUN_DIR:-outputs/reproduce/$STAMP}}; [ -z "$DRY" ] && mkdir -p "$RUN_DIR"
    setup_baselines
    gpu_suites; finish
    ;;
  quick)
    ensure_env
    if has_gpu; then
      load_expected results/quick
      say "GPU found: the quick path (about 5 min on one H200 from a cold compile cache; at most 10), then the self-check"
      setup_baselines
      new_run_dir quick
      quick_gpu
      check "$RUN_DIR"
    else
      say "no GPU: the smoke suite under the Triton interpreter, then the self-check of the committed results"
      smoke
      check results
    fi
    finish
    ;;
  reproduce)
    ensure_env
    if has_gpu; then
      load_expected results
      say "GPU found: every suite (operator $(expected operator '?'), full_model $(expected full_model '?'), recurrent_path $(expected recurrent_path '?'), traffic $(expected traffic '?'), beam_scaling $(expected beam_scaling '6-9 min, estimate'), as recorded on one H200), transformers generate ($(expected hf_generate '6-8 min, estimate')) and the decode breakdown, then figures and the self-check"
      setup_baselines
      new_run_dir reproduce
      gpu_suites
      stage "figures and REPORT.md of this run" "10-20 s" "$PY" -m plots --results "$RUN_DIR"
      check "$RUN_DIR"
    else
      say "no GPU: smoke suite under the Triton interpreter, then figures and the self-check from the committed results"
      smoke
      stage "figures, results/REPORT.md and README's claims table from results/" "10-20 s" "$PY" -m plots
      check results
    fi
    finish
    ;;
  -h|--help|help)
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *)
    echo "usage: $0 [reproduce|quick|test|setup|smoke|figures|check [RUN_DIR]|gpu-suites [RUN_DIR]]" >&2; exit 2 ;;
esac
