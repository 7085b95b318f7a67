"""Per-kernel times of every step of one OneLA decode (a profile, not a benchmark):
`python -m tools.step_profile [--geometry G] [--R R] [--W W] [--O O] [--config JSON] [--out DIR]`.

Decodes once (compiles every step's kernels), gates the outputs against FP32 FullState, then runs `--reps` more
eager decodes under torch's profiler and reads each launch's kernel time from CUPTI. A step's launches are the
plan's (`kernels.onela.plan.step_launches`: "ws", "prep", "prep_pipe", "main"), so the i-th OneLA kernel of a
decode is named by its step and role. Writes DIR/step_profile.csv (one row per step and kernel: the median over
the decodes, microseconds) beside an env record, and prints the per-step totals. The kernels run
back to back in eager mode, so a step's total is the sum of its kernels' times, without the launch gaps a CUDA
graph also removes. `--graph N` also times each step as its own CUDA graph, as `sweeps.suites.beam_scaling` does
(`artifact.measure.check_and_time_steps`: gated again, N decodes, L2 flushed before step 0), into
DIR/step_graph.csv (median and 20th / 80th percentiles, microseconds): the step's latency with its launches'
gaps and overlaps (programmatic dependent launch) included.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

from artifact.limits import DEFAULT_TOLERANCE
from artifact.measure import check_and_time_steps, max_abs_err
from artifact.reference import fullstate_decode
from artifact.env_record import write_env
from artifact.results import append_csv, git_commit, new_run_id
from artifact.workload import GEOMETRIES, KNOWN_LINEAGES, make_workload
from kernels.onela import CONFIG_KEYS, OneLAStepper
from kernels.onela.plan import step_launches
from tools import launch_config_arg
from tools.bench import ConfiguredOneLA


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for step_profile.csv and env/")
    ap.add_argument("--geometry", default="qwen3_5_0_8b", choices=sorted(GEOMETRIES))
    ap.add_argument("--R", type=int, default=4)
    ap.add_argument("--W", type=int, default=512)
    ap.add_argument("--O", type=int, default=32, help="output tokens (T = O - 1 decode steps)")
    ap.add_argument("--lineage", default="beam", choices=KNOWN_LINEAGES,
                    help="the beam tree (model: the recorded one, artifact/data/model.npz)")
    ap.add_argument("--reps", type=int, default=5, help="profiled decodes (the median is kept)")
    ap.add_argument("--config", type=launch_config_arg, default={},
                    help=f"launch config override, JSON (keys {', '.join(CONFIG_KEYS)})")
    ap.add_argument("--graph", type=int, default=0, metavar="N",
                    help="also time each step as its own CUDA graph over N decodes (step_graph.csv); 0: not")
    args = ap.parse_args(argv)
    for name, value, low in (("--R", args.R, 1), ("--W", args.W, 1), ("--O", args.O, 2), ("--reps", args.reps, 1),
                             ("--graph", args.graph, 0)):
        if value < low:
            ap.error(f"{name} must be >= {low}, got {value}")
    return args


def launch_roles(st: OneLAStepper, T: int) -> list[list[str]]:
    """The kernel roles each step of a T-step decode launches, in launch order (ws_ok as the stepper decides it
    for bf16 contiguous inputs)."""
    geo = st.geometry
    return [list(step_launches(st.config, geo, st.R, st.W, t, True, ws_ok=st.ws_shape_ok, n_sm=st.n_sm))
            for t in range(T)]


def step_kernel_medians(times_us: list[float], roles: list[list[str]], reps: int) -> dict[tuple[int, str], float]:
    """(step, role) -> median over `reps` decodes of the kernel times `times_us`, given in launch order."""
    per = sum(len(r) for r in roles)
    if len(times_us) != reps * per:
        raise ValueError(f"{len(times_us)} OneLA kernels profiled, expected {reps} decodes x {per}")
    samples = defaultdict(list)
    i = 0
    for _ in range(reps):
        for t, names in enumerate(roles):
            for name in names:
                samples[(t, name)].append(times_us[i])
                i += 1
    return {key: statistics.median(v) for key, v in samples.items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("tools.step_profile needs a CUDA GPU (CPU timings are not performance)", file=sys.stderr)
        return 2
    T = args.O - 1
    wl = make_workload(args.geometry, args.R, args.W, T, lineage=args.lineage, seed=0, device="cuda")
    geo = wl.geometry
    st = OneLAStepper(geo, args.R, args.W, T, "cuda", config=args.config or None)
    out = torch.empty(T, args.R, args.W, geo.hv, geo.v, dtype=wl.q.dtype, device="cuda")

    def decode():
        st.reset(wl.s_ctx)
        for t in range(T):
            st.step(t, wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t], out[t])

    decode()
    ref = fullstate_decode(wl)
    err = max_abs_err(out, ref)
    print(f"{args.geometry} R={args.R} W={args.W} O={args.O} {args.config or ''}: max |o - o_fp32| {err:.3e}",
          flush=True)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.reps):
            decode()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA" and "onela" in e.name),
                     key=lambda e: e.time_range.start)
    medians = step_kernel_medians([e.time_range.elapsed_us() for e in kernels], launch_roles(st, T), args.reps)
    run_id = new_run_id("step_profile")
    dest = Path(args.out)
    write_env(dest / "env" / f"{run_id}.json", {"run_id": run_id, "suite": "step_profile",
                                                "command": " ".join(sys.argv), "max_abs_err": err})
    append_csv(dest / "step_profile.csv", _RUN_COLUMNS + ["step", "kernel", "median_us"],
               [{**_run_fields(args, run_id), "step": t, "kernel": name, "median_us": f"{us:.2f}"}
                for (t, name), us in sorted(medians.items())])
    totals = defaultdict(float)
    for (t, name), us in medians.items():
        totals[t] += us
    print("step total_us " + " ".join(f"{t}:{totals[t]:.1f}" for t in sorted(totals)))
    print("kernels (registers, spilled 4-byte registers):", st.kernel_info)
    ok = err <= DEFAULT_TOLERANCE
    if args.graph and ok:
        ok = _graph_steps(args, wl, ref, run_id, dest)
    return 0 if ok else 1


_RUN_COLUMNS = ["run_id", "git_commit", "geometry", "R", "W", "O", "lineage", "config"]


def _run_fields(args, run_id: str) -> dict:
    """The columns every row of this run's tables shares (_RUN_COLUMNS)."""
    return {"run_id": run_id, "git_commit": git_commit(), "geometry": args.geometry, "R": args.R, "W": args.W,
            "O": args.O, "lineage": args.lineage, "config": json.dumps(args.config, sort_keys=True)}


def _graph_steps(args, wl, ref: torch.Tensor, run_id: str, dest: Path) -> bool:
    """--graph: each step as its own CUDA graph (module docstring), gated against `ref` (FP32 FullState); rows into
    step_graph.csv. Whether it passed."""
    res = check_and_time_steps(ConfiguredOneLA(args.config), wl, ref, repeats=args.graph)
    if res.status != "ok":
        print(f"graph steps {res.status}: {res.reason}", file=sys.stderr)
        return False
    append_csv(dest / "step_graph.csv", _RUN_COLUMNS + ["step", "median_us", "p20_us", "p80_us", "decodes", "timer"],
               [{**_run_fields(args, run_id), "step": t, "median_us": f"{s.median_ms * 1e3:.2f}",
                 "p20_us": f"{s.p20_ms * 1e3:.2f}", "p80_us": f"{s.p80_ms * 1e3:.2f}", "decodes": args.graph,
                 "timer": s.timer} for t, s in enumerate(res.steps)])
    total = sum(s.median_ms for s in res.steps) * 1e3
    print(f"graph step_us (sum {total:.1f}) " + " ".join(f"{t}:{s.median_ms * 1e3:.1f}"
                                                        for t, s in enumerate(res.steps)))
    return True


if __name__ == "__main__":
    sys.exit(main())
