"""Kernel benchmark (a benchmark, not a test): `python -m tools.bench [--out DIR] [--config JSON ...]`.

Times the whole T-step decode of `onela` and `controlled_fullstate` on one geometry (default Qwen3.5-0.8B,
W=512, R in {4, 16}, O in {7, 3}) in one process, through the operator suite's own cell measurement (gate
against FP32 FullState, then the CUDA-graph replay timer, floor_ms and launch_floor_ms from the path's cost
model), and writes the rows
in the results schema every suite uses (`artifact.results.COLUMNS`, suite `kernel_bench`) to DIR/bench.csv with
its env record DIR/env/<run_id>.json. `--config` adds `onela` rows under a launch config override (keys
`kernels.onela.CONFIG_KEYS`), labelled `onela[<json>]` in the path column. The summary table is printed last.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import types
from pathlib import Path

import torch

from artifact.measure import DEFAULT_TOLERANCE, free_device_memory, measure_ceilings
from artifact.paths import PATHS
from artifact.reference import fullstate_decode
from artifact.env_record import write_env
from artifact.results import append_row, config_hash, git_commit, new_run_id
from artifact.workload import GEOMETRIES, make_workload
from kernels.onela import OneLAPath, OneLAStepper
from sweeps.suites.operator import run_cell
from tools import launch_config_arg

SUITE = "kernel_bench"


class ConfiguredOneLA(OneLAPath):
    """The `onela` path under a launch config override."""

    def __init__(self, config: dict):
        self.config = config

    def make_stepper(self, wl):
        return OneLAStepper(wl.geometry, wl.R, wl.W, wl.T, wl.device, self.config)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for bench.csv and env/")
    ap.add_argument("--geometry", default="qwen3_5_0_8b", choices=sorted(GEOMETRIES))
    ap.add_argument("--R", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--W", type=int, default=512, help="beams per request")
    ap.add_argument("--O", type=int, nargs="+", default=[7, 3], help="output tokens (T = O - 1 decode steps)")
    ap.add_argument("--paths", nargs="+", default=["onela", "controlled_fullstate"])
    ap.add_argument("--config", action="append", default=[], type=launch_config_arg,
                    help='also time onela under this launch config (JSON, e.g. \'{"ws": false}\'); repeatable')
    ap.add_argument("--rep-ms", type=int, default=50, help="timer budget per cell (at least 10 replays)")
    args = ap.parse_args(argv)
    for name, values, low in (("--R", args.R, 1), ("--W", [args.W], 1), ("--O", args.O, 2)):
        bad = [v for v in values if v < low]
        if bad:
            ap.error(f"{name} must be >= {low}, got {bad}")
    unknown = sorted(set(args.paths) - set(PATHS))
    if unknown:
        ap.error(f"unknown path(s) {unknown}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("tools.bench needs a CUDA GPU (CPU timings are not performance)", file=sys.stderr)
        return 2
    out = Path(args.out)
    ceilings = measure_ceilings()
    run_id = new_run_id(SUITE)
    commit = git_commit()
    env = write_env(out / "env" / f"{run_id}.json", {"run_id": run_id, "suite": SUITE, "ceilings": ceilings,
                                                     "command": " ".join(sys.argv)})
    print(f"GPU {env.get('gpu')}: copy {ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s, "
          f"bf16 {ceilings['bf16_flop_per_s'] / 1e12:.0f} TFLOP/s; run {run_id}", flush=True)
    ctx = types.SimpleNamespace(tolerance=DEFAULT_TOLERANCE, warmup_ms=100, rep_ms=args.rep_ms, time_it=True,
                                ceilings=ceilings, device=torch.device("cuda"))
    geo = GEOMETRIES[args.geometry]
    variants = [(p, None) for p in args.paths] + [(f"onela[{json.dumps(c, sort_keys=True)}]", c) for c in args.config]
    rows = []
    for R, O in itertools.product(args.R, args.O):
        T = O - 1
        wl = make_workload(args.geometry, R, args.W, T, lineage="beam", seed=0, device="cuda")
        ref = fullstate_decode(wl)
        for name, cfg in variants:
            cell = dict(suite=SUITE, path=name, geometry=args.geometry, R=R, W=args.W, T=T, O=O, HK=geo.hk,
                        HV=geo.hv, K=geo.k, V=geo.v, prompt_len=wl.prompt_len, lineage="beam", seed=0,
                        tolerance=DEFAULT_TOLERANCE, run_id=run_id, git_commit=commit)
            cell["config_hash"] = config_hash(cell)
            row = run_cell(cell, wl, ref, ctx, path=ConfiguredOneLA(cfg) if cfg is not None else None)
            append_row(out / "bench.csv", row)
            rows.append(row)
            print(f"{name:24s} R={R:2d} O={O} {row['status']:6s} lat={row.get('latency_ms', float('nan')):.4f} ms "
                  f"floor={row.get('floor_ms', float('nan')):.4f} ms "
                  f"launch floor={row.get('launch_floor_ms', float('nan')):.4f} ms "
                  f"err={row.get('max_abs_err', float('nan')):.2e} "
                  f"{row.get('reason', '')}", flush=True)
            free_device_memory("cuda")
        del wl, ref
        free_device_memory("cuda")
    print("\nsummary:")
    for r in rows:
        lat, fl = r.get("latency_ms", float("nan")), r.get("floor_ms", float("nan"))
        lfl = r.get("launch_floor_ms", float("nan"))
        print(f"  {r['path']:24s} R={r['R']:2d} O={r['O']}: {lat:.4f} ms (floor {fl:.4f} ms, x{lat / fl:.2f}; "
              f"launch floor {lfl:.4f} ms, x{lat / lfl:.2f}) "
              f"err {r.get('max_abs_err', float('nan')):.2e}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
