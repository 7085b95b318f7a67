"""Where one decode call of the Fig 6 model spends its GPU time, per component, beside each component's floor:
`python -m tools.decode_breakdown [--out DIR]` (a GPU measurement; `--cpu` runs the tiny model eagerly on a CPU
to exercise the plumbing, with no timing).

Per path (default onela and controlled_fullstate) and prompt length (default 1K and 5K), at R=4, W=256, O=5 on
the Qwen3.5-0.8B geometry with seeded random weights -- a Fig 6 cell, measured as the full_model suite measures
it (artifact.model.cell: the same model and seeded prompts, torch.compile'd blocks, one CUDA graph per decode
call, captured on the decoy prompt):
1. gate: one graph-replayed search on the real prompt with poisoned stepper outputs, every GDN layer's outputs
   against FP32 FullState (artifact.model.stepper_gate) at `--tolerance`, recorded as max_abs_err; a cell that fails
   it is recorded as failed (its error in the env record) and neither timed nor broken down;
2. the "total" row: the search timed as Fig 6 times it (artifact.model.graphs.time_decode: CUDA events around
   each call's graph replay, median of `--repeats` searches), per decode call;
3. the components: artifact.model.breakdown (torch.profiler over one eager and one graph-replayed search, each
   replayed kernel labelled through its eager twin; the method and its limits are in that module's docstring),
   per decode call, the mean over the T calls; "idle" is the replay's time with no kernel running, "span" the
   profiled replay's first-kernel-to-last-kernel time;
4. floors: artifact.model.cost.component_costs (bytes / measured copy bandwidth against FLOPs / measured matrix
   rate per component; their bytes and FLOPs add up to the Fig 6 row's floor), at the ceilings this run
   measures (artifact.measure.measure_ceilings).
Writes DIR/full_model_breakdown.csv (appended: one row per path, prompt, O and component; a cell it already holds
from the same code is skipped, so a resumed ./run_all.sh measures each once, while a run of other code adds its
rows beside the earlier run's, which the breakdown figure and REPORT show as "first run"), DIR/env/<run_id>.json
(env record: ceilings, per-cell summaries, attribution notes, a failed cell's error) and
DIR/full_model_breakdown/<run_id>/<path>_L<prompt>_O<O>.csv (every device op of the profiled search: call,
position, name, region, component, us, eager twin's us); a cell whose attribution fails keeps its profiler
traces beside it (gzipped Chrome traces; `--keep-traces` keeps every cell's), and the other cells still run.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import torch

CSV_NAME = "full_model_breakdown.csv"
COLUMNS = ["run_id", "git_commit", "path", "model", "R", "W", "T", "O", "prompt_len", "component", "measured_ms",
           "floor_ms", "bound", "bytes", "flops", "ops", "method", "max_abs_err", "timer"]
TOTAL, SPAN = "total", "span"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tools.decode_breakdown", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results", help="results directory (default: results/)")
    ap.add_argument("--paths", nargs="+", default=["onela", "controlled_fullstate"])
    ap.add_argument("--prompts", nargs="+", type=int, default=[1024, 5120])
    ap.add_argument("--O", type=int, default=5, help="output tokens per beam (T = O - 1 decode calls)")
    ap.add_argument("--R", type=int, default=4)
    ap.add_argument("--W", type=int, default=256)
    ap.add_argument("--model", default=None, help="model preset (default: qwen3_5_0_8b; tiny with --cpu)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=10, help="timed searches behind the total row")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=None,
                    help="the gate's max |o - o_fp32| (default: the suites' default tolerance)")
    ap.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                    help="torch.compile the non-recurrent blocks (auto: on a GPU, as Fig 6)")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (the tiny model; no timing)")
    ap.add_argument("--keep-traces", action="store_true",
                    help="keep each cell's profiler traces (gzipped Chrome traces; always kept when attribution fails)")
    ap.add_argument("--ceilings", default=None,
                    help="a JSON dict of ceilings to use instead of measuring them (CPU runs, tests)")
    args = ap.parse_args(argv)
    if args.O < 2:
        ap.error("--O must be >= 2 (at least one decode call)")
    if args.tolerance is not None and not 0 < args.tolerance < float("inf"):
        ap.error(f"--tolerance must be a positive finite number, got {args.tolerance}")
    return args


def _write_table(path: Path, table: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(table[0]) if table else ["call", "index", "name", "region", "component", "us"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=names)
        w.writeheader()
        w.writerows(table)


def cell_rows(base: dict, parts: dict, costs: dict, whole: dict, ceilings: dict | None, T: int,
              total_ms: float) -> list[dict]:
    """The rows of one cell: every component (regions.COMPONENTS first, then any other label the attribution
    produced), idle, span and total; times, bytes and FLOPs per decode call."""
    from artifact.model.cost import component_floor
    from artifact.model.regions import COMPONENTS
    rows = []
    extra = sorted(c for c in parts if c not in COMPONENTS and not c.startswith("_") and c != "idle")
    for c in [*COMPONENTS, *extra, "idle"]:
        p = parts.get(c, {"us": 0.0, "ops": 0.0})
        row = {**base, "component": c, "measured_ms": p["us"] / 1e3, "ops": p["ops"]}
        cost = costs.get(c)
        if cost is not None:
            row.update(bytes=cost["compulsory_bytes"] / T, flops=cost["flops"] / T)
            if ceilings:
                row["floor_ms"], row["bound"] = component_floor(cost, ceilings, T)
        rows.append(row)
    span = parts.get("_span", {"us": math.nan})["us"]
    rows.append({**base, "component": SPAN, "measured_ms": span / 1e3,
                 "ops": sum(p["ops"] for c, p in parts.items() if not c.startswith("_") and c != "idle")})
    tot = {**base, "component": TOTAL, "measured_ms": total_ms}
    if whole:
        tot.update(bytes=whole["compulsory_bytes"] / T, flops=whole["flops"] / T)
        if "floor_ms" in whole:
            tot.update(floor_ms=whole["floor_ms"] / T, bound=whole["floor_bound"])
    rows.append(tot)
    return rows


def _keep_traces(traces: dict, trace_dir: Path) -> None:
    import gzip
    trace_dir.mkdir(parents=True, exist_ok=True)
    for name, trace in traces.items():
        with gzip.open(trace_dir / f"{name}_trace.json.gz", "wt") as f:
            json.dump(trace, f)


class GateFailed(RuntimeError):
    """A cell whose decode failed the FP32 FullState gate: recorded, never timed or broken down."""


def measure_cell(inputs, model, model_name: str, path: str, R: int, W: int, T: int, prompt_len: int, args,
                 ceilings, compile: bool, trace_dir: Path, keep_traces: bool = False):
    """(rows, summary, kernel table) of one cell, from the full_model suite's measurement (artifact.model.cell);
    the profiler traces go to `trace_dir` when the attribution fails or `keep_traces` asks."""
    from artifact.measure import DEFAULT_TOLERANCE
    from artifact.model.breakdown import breakdown, kernel_table, per_call
    from artifact.model.cell import gated_decode
    from artifact.model.cost import component_costs, decode_floor
    from artifact.paths import get_path
    on_gpu = model.device.type == "cuda"
    t0 = time.perf_counter()
    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    gated = gated_decode(inputs, model, path, R, W, T, prompt_len, args.seed, tolerance, compile=compile)
    if not gated.passed:
        raise GateFailed(gated.reason)
    dec, graphs, result, err = gated.decoder, gated.graphs, gated.result, gated.max_abs_err
    timing = gated.time(args.repeats, args.warmup) if on_gpu else None
    traces: dict = {}
    try:
        lab, eager = breakdown(dec, graphs, traces)
    except Exception:
        _keep_traces(traces, trace_dir)       # what the attribution could not read, for a look by hand
        raise
    if keep_traces:
        _keep_traces(traces, trace_dir)
    parts = per_call(lab)
    tail = getattr(dec.steppers[0], "replay_tail_len", None) if dec.steppers else None
    costs = component_costs(model, get_path(path), R, W, T, prompt_len, result.parents, tail)
    whole = decode_floor(model, get_path(path), R, W, T, prompt_len, result.parents, ceilings, tail_len=tail)
    method = "graph" if lab is not eager else "eager"
    timer = (f"{'cuda_graph_per_call' if graphs else 'eager'}+cuda_events(per call: median of {args.repeats} "
             f"searches / T, warmup {args.warmup}); components: torch.profiler device time per call, {method} "
             f"search; pipeline {dec.ops.label}; prompt attention {dec.attn_impl}") if timing else \
        f"none (CPU: attribution only); pipeline {dec.ops.label}"
    base = {"path": path, "model": model_name, "R": R, "W": W, "T": T, "O": T + 1, "prompt_len": prompt_len,
            "method": method, "max_abs_err": err, "timer": timer}
    total_ms = timing.median_ms / T if timing else math.nan
    rows = cell_rows(base, parts, costs, whole, ceilings, T, total_ms)
    summary = {"path": path, "prompt_len": prompt_len, "T": T, "method": method, "max_abs_err": err,
               "total_ms_per_call": total_ms, "search_ms": timing.median_ms if timing else math.nan,
               "search_p20_ms": timing.p20_ms if timing else math.nan,
               "search_p80_ms": timing.p80_ms if timing else math.nan,
               "span_ms_per_call": parts.get("_span", {"us": math.nan})["us"] / 1e3,
               "eager_span_ms_per_call": per_call(eager).get("_span", {"us": math.nan})["us"] / 1e3,
               "idle_ms_per_call": parts.get("idle", {"us": 0.0})["us"] / 1e3,
               "notes": lab.notes, "wall_s": round(time.perf_counter() - t0, 1),
               "pipeline": dec.ops.label, "prompt_attention": dec.attn_impl}
    table = kernel_table(lab, eager if lab is not eager else None)
    del dec
    return rows, summary, table


def _print_cell(rows: list[dict]) -> None:
    r0 = rows[0]
    print(f"\n{r0['path']} prompt {r0['prompt_len']} O={r0['O']} ({r0['method']}; max_abs_err "
          f"{r0['max_abs_err']:.2e}) -- ms per decode call", flush=True)
    print(f"  {'component':22s} {'measured':>9s} {'floor':>9s} {'x floor':>8s}  bound")
    for r in rows:
        f = r.get("floor_ms", "")
        ratio = r["measured_ms"] / f if isinstance(f, float) and f > 0 else math.nan
        fs = f"{f:9.4f}" if isinstance(f, float) else f"{'':9s}"
        print(f"  {r['component']:22s} {r['measured_ms']:9.4f} {fs} {ratio:8.2f}  {r.get('bound', '')}")


def same_code(a: str, b: str) -> bool:
    """Whether two git_commit values name the same code: the same commit (a full hash and its 12-digit short form
    match) with the same suffix ("+dirty", or a GPU host's label after "+")."""
    (ha, _, sa), (hb, _, sb) = a.partition("+"), b.partition("+")
    return bool(ha) and ha[:12] == hb[:12] and sa == sb


def recorded_cells(csv_path: Path, commit: str) -> set[tuple]:
    """(path, model, R, W, O, prompt_len) of every cell whose total row the table holds from the code `commit`
    names: a run into a folder that has them (./run_all.sh resumed) skips those cells, as a resumed sweep does;
    a failed cell has no rows and runs again, and a cell measured by other code is measured again beside it (the
    table keeps each code's run: the breakdown's before and after)."""
    if not csv_path.exists():
        return set()
    with open(csv_path, newline="") as f:
        return {(r["path"], r["model"], int(r["R"]), int(r["W"]), int(r["O"]), int(r["prompt_len"]))
                for r in csv.DictReader(f) if r.get("component") == TOTAL and same_code(r["git_commit"], commit)}


def main(argv=None) -> int:
    args = parse_args(argv)
    from artifact.measure import free_device_memory, measure_ceilings
    from artifact.env_record import write_env
    from artifact.model.cell import FullModelInputs
    from artifact.results import append_csv, git_commit, new_run_id
    from sweeps.suites.full_model import private_inductor_cache
    on_gpu = not args.cpu
    if not on_gpu:          # Triton decides at import whether to interpret: before any kernels module loads
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if on_gpu and not torch.cuda.is_available():
        raise SystemExit("tools.decode_breakdown needs a CUDA GPU (or --cpu for a plumbing run of the tiny model)")
    device = torch.device("cuda" if on_gpu else "cpu")
    compile = {"on": True, "off": False, "auto": on_gpu}[args.compile]
    private_inductor_cache()
    t_start = time.perf_counter()
    ceilings = json.loads(args.ceilings) if args.ceilings else (measure_ceilings() if on_gpu else None)
    out = Path(args.out)
    run_id, commit = new_run_id("full_model_breakdown"), git_commit()
    env_path = out / "env" / f"{run_id}.json"
    extra = {"run_id": run_id, "suite": "full_model_breakdown", "device": str(device), "ceilings": ceilings,
             "argv": [sys.argv[0], *(argv if argv is not None else sys.argv[1:])], "args": vars(args),
             "method": "artifact.model.breakdown (torch.profiler; graph replay labelled through the eager "
                       "search)", "cells": []}
    write_env(env_path, extra)
    model_name = args.model or ("qwen3_5_0_8b" if on_gpu else "tiny")
    inputs = FullModelInputs(device)
    model = inputs.model(model_name, args.seed)
    T, failed = args.O - 1, 0
    done = recorded_cells(out / CSV_NAME, commit)
    for prompt_len in args.prompts:
        for path in args.paths:
            cell = f"{path}_L{prompt_len}_O{args.O}"
            if (path, model_name, args.R, args.W, args.O, prompt_len) in done:     # resumed: broken down before
                print(f"[decode_breakdown] {cell}: recorded earlier by this code ({commit}) in {out / CSV_NAME}",
                      flush=True)
                continue
            try:
                rows, summary, table = measure_cell(
                    inputs, model, model_name, path, args.R, args.W, T, prompt_len, args, ceilings, compile,
                    out / "full_model_breakdown" / run_id / f"{cell}_traces", args.keep_traces)
            except Exception as e:  # noqa: BLE001 - recorded; the other cells still run
                traceback.print_exc()
                extra["cells"].append({"path": path, "prompt_len": prompt_len, "T": T,
                                       "error": f"{type(e).__name__}: {e}"[:2000]})
                write_env(env_path, extra)
                failed += 1
                free_device_memory(device)
                continue
            for r in rows:
                r.update(run_id=run_id, git_commit=commit)
            append_csv(out / CSV_NAME, COLUMNS, rows)
            _write_table(out / "full_model_breakdown" / run_id / f"{cell}.csv", table)
            extra["cells"].append(summary)
            write_env(env_path, extra)
            _print_cell(rows)
            print(f"  total {summary['total_ms_per_call']:.4f} ms per call (Fig 6's timer), profiled span "
                  f"{summary['span_ms_per_call']:.4f}, eager span {summary['eager_span_ms_per_call']:.4f}; "
                  f"{summary['wall_s']} s", flush=True)
            for note in summary["notes"][:12]:
                print(f"  note: {note}", flush=True)
            free_device_memory(device)
    extra["wall_s"] = round(time.perf_counter() - t_start, 1)
    write_env(env_path, extra)
    print(f"\n[decode_breakdown] {out / CSV_NAME}, {env_path} ({extra['wall_s']} s; {failed} cell(s) failed)",
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
