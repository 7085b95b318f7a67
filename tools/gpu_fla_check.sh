#!/usr/bin/env bash
# fla FullState on a GPU host (baselines/fla_fullstate.py): (a) its GPU tests, (b) its rows of the recurrent_path
# and operator suites (and, with ONELA_FLA_ALL=1, of traffic and beam_scaling) into a fresh folder, (c) the commands
# that fold those rows into results/ and redraw the figures, printed, not run (the committed tables change only on
# purpose).
#
#   tools/gpu_fla_check.sh [RUN_DIR]          # default RUN_DIR: outputs/fla/<UTC stamp>
#
# Run from the repository root with the project's Python (PY, default .venv/bin/python). fla-core 0.6.0 and einops
# are installed into that environment when missing (pip needs the package index; elsewhere install the wheel:
# pip install fla_core-0.6.0-py3-none-any.whl einops). Expected time on one H200: tests about 1 min (Triton
# compiles fla's kernel once per head layout), recurrent_path under 1 min, operator 405 shapes x 2 paths about
# 10 min (estimate: the other FullState paths take 2-4 min each); traffic needs ncu.
# The rows pair with the committed OneLA rows of the same shapes (plots.data.paired_ratio); the env record of the
# run names fla-core's version (artifact.results.env_record).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
RUN=${1:-outputs/fla/$(date -u +%Y%m%dT%H%M%SZ)}
COMMIT=$(git rev-parse --short HEAD)
PATHS='path=[fla_fullstate,fla_fullstate_paper]'
mkdir -p "$RUN/tests"

if ! "$PY" -c "import einops, importlib.metadata as m; m.version('fla-core')" >/dev/null 2>&1; then
  echo "[fla] installing fla-core==0.6.0 and einops into $("$PY" -c 'import sys; print(sys.prefix)')"
  "$PY" -m pip install -q "fla-core==0.6.0" einops
fi
"$PY" -c "import torch, triton, importlib.metadata as m; print('[fla] fla-core', m.version('fla-core'), '| torch',
torch.__version__, '| triton', triton.__version__, '|', torch.cuda.get_device_name(0))"

echo "[fla] (a) GPU tests -> $RUN/tests/gpu_fla_$COMMIT.log"
set +e
"$PY" -m pytest -q -m gpu -p no:cacheprovider tests/test_baselines_fla.py 2>&1 | tee "$RUN/tests/gpu_fla_$COMMIT.log"
TESTS=${PIPESTATUS[0]}
set -e

echo "[fla] (b) recurrent_path and operator rows -> $RUN"
SUITES=(recurrent_path operator)
if [ -n "${ONELA_FLA_ALL:-}" ]; then
  if command -v ncu >/dev/null 2>&1; then SUITES+=(traffic); else echo "[fla] no ncu on PATH: traffic not run"; fi
  SUITES+=(beam_scaling)
fi
RC=$TESTS
for s in "${SUITES[@]}"; do     # a failed cell exits 1 and is listed; the next suite still runs
  "$PY" -m sweeps.run suite="$s" "$PATHS" results_dir="$RUN" progress=false || RC=1
done

echo "[fla] GPU tests exit $TESTS, suites ${SUITES[*]} done (exit $RC); rows in $RUN. To fold them into results/ and redraw:"
echo "  cp $RUN/tests/gpu_fla_$COMMIT.log results/tests/"
for s in recurrent_path operator traffic beam_scaling; do
  [ -f "$RUN/$s.csv" ] && echo "  $PY -m sweeps.merge suite=$s from=$RUN"
done
echo "  $PY -m plots"
exit "$RC"
