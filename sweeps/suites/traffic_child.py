"""The child process of the traffic suite (paper §4.4, Fig 8c): one measured region in a fresh process.

`python -m sweeps.suites.traffic_child ...` (started by sweeps.suites.traffic, under a profiler) builds one
cell's workload exactly as the sweep does (artifact.workload.make_workload with the cell's fields), prepares
the path and warms it up twice (so autotuning and compilation stay outside), checks the output against FP32
FullState, and only then runs the measured region:

    read a clean 4xL2 buffer A         L2 holds only clean lines: nothing of the workload, nothing dirty
    range 1: path.run(wl) (eager)      every kernel (and memcpy) of the T decode steps
    range 2: read a clean buffer B     evicts what range 1 left dirty in L2, so those write-backs are counted

Range 1's reads and ranges 1+2's writes are the path's DRAM traffic; the drain's own reads are not. The
ranges are bracketed per method: cudaProfilerStart/Stop for Nsight Compute (run by the parent), a CUPTI
PM-sampling window each, or a torch.profiler session. The run is eager, not graph-replayed: one ordinary
run() issues the same kernels as the captured graph, and profilers see eager launches reliably.
The target can instead be a copy of known size (the calibration: read n, write n). The child also counts the
cell's FLOPs (`path_flops`), from the prepared path and its workload.
Writes one JSON object to --out; never raises past main (a failure is a JSON status).
This module imports nothing of the runner (sweeps.suites.traffic), which imports the names both share from here.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback

import torch
import triton
import triton.language as tl

from sweeps.suites.traffic import DRAIN_KERNEL, METRICS  # noqa: F401 -- DRAIN_KERNEL names the kernel below


@triton.jit
def _l2_read_kernel(x_ptr, out_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    """Read x[0:n] (grid-stride, ITERS = cdiv(n, programs*BLOCK) rounds: a constant per buffer size) and
    store one fp32 partial sum per program: reads n*4 bytes, writes 4 bytes per program."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(ITERS):
        offs = (i * nprog + pid) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def read_all(x: torch.Tensor, partial: torch.Tensor, block: int = 1024) -> None:
    """Launch _l2_read_kernel over x with one program per element of `partial`."""
    nprog = partial.numel()
    _l2_read_kernel[(nprog,)](x, partial, x.numel(), ITERS=triton.cdiv(x.numel(), nprog * block), BLOCK=block)


@triton.jit
def _calib_copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    """dst = src (fp32): reads n*4 bytes, writes n*4 bytes; a kernel, so every profiler sees it."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class L2Buffers:
    """Two clean buffers of max(4 x L2, 256 MiB): A empties L2 before the region, B drains it after."""

    def __init__(self, device):
        props = torch.cuda.get_device_properties(device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0) or (64 << 20)
        self.nbytes = max(4 * l2, 256 << 20)
        self.a = torch.empty(self.nbytes // 4, dtype=torch.float32, device=device)
        self.b = torch.empty(self.nbytes // 4, dtype=torch.float32, device=device)
        self.nprog = 4 * props.multi_processor_count
        self.partial = torch.empty(self.nprog, dtype=torch.float32, device=device)

    def read(self, buf: torch.Tensor) -> None:
        read_all(buf, self.partial)

    def clean(self) -> None:
        """Leave L2 holding only clean lines of A (B read first, so its lines are clean and then evicted)."""
        self.read(self.b)
        self.read(self.a)
        torch.cuda.synchronize()

    def drain(self) -> None:
        self.read(self.b)
        torch.cuda.synchronize()


# ---- FLOPs of the cell (docs/design.md §1) ----

ALGORITHMS = ("fullstate", "projection_replay", "state_replay")

# The algorithm class of each registered path, used only when the path has no cost().
PATH_ALGORITHM = {
    "reference_fullstate": "fullstate", "controlled_fullstate": "fullstate", "vllm_fullstate": "fullstate",
    "sglang_fullstate": "fullstate", "flashinfer_fullstate": "fullstate", "trtllm_fullstate": "fullstate",
    "fla_fullstate": "fullstate",
    "reference_replay": "projection_replay", "onela": "projection_replay",
    "vllm_prefix_replay": "state_replay", "sglang_replayssm": "state_replay",
}


def analytic_flops(algorithm: str, geometry, R: int, W: int, T: int, replay_tail: int = 0) -> dict:
    """FLOPs of the GDN decode math of one algorithm class over T steps of R x W beams (docs/design.md §1).

    A multiply-add counts 2, any other arithmetic op 1. Per beam, value head and step t (0-based):
      fullstate          S k-hat 2VK + update S <- aS + d k-hat^T 3VK + S q-hat 2VK + d = b(v - a Sk) 3V
      projection_replay  S_ctx q-hat, S_ctx k-hat 4VK; per ancestral record (t of them) two K-dots 4K and
                         two accumulator updates u <- a u + d s 4V; final d and o 6V + 2K (as onela_cost)
      state_replay       ReplaySSM: the beam replays `replay_tail` prompt-tail tokens plus its t earlier
                         tokens from the checkpoint, each S k-hat 2VK + update 3VK + d 3V, then the
                         current token as fullstate
    The l2 norms, exp(g) and the K^-1/2 scale are left out (O(K) per key head, < 0.1% at K = V = 128).
    Returns the total and its parts; `state_matvec` (the products with a [V, K] state) is what
    torch.utils.flop_counter counts for the plain-torch references.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    V, K = geometry.v, geometry.k
    VK = V * K
    parts = {"state_matvec": 0, "state_update": 0, "records": 0, "vector": 0}
    for t in range(T):
        if algorithm == "fullstate":
            replayed = 0
        elif algorithm == "state_replay":
            replayed = replay_tail + t
        else:
            replayed = None
        if replayed is not None:
            parts["state_matvec"] += replayed * 2 * VK + 4 * VK
            parts["state_update"] += replayed * 3 * VK + 3 * VK
            parts["vector"] += replayed * 3 * V + 3 * V
        else:
            parts["state_matvec"] += 4 * VK
            parts["records"] += t * (4 * K + 4 * V)
            parts["vector"] += 6 * V + 2 * K
    scale = R * W * geometry.hv
    parts = {k: v * scale for k, v in parts.items()}
    parts["total"] = sum(parts.values())
    return parts


def path_flops(path, wl) -> tuple[float, str, float]:
    """(flops, where the count comes from, compulsory bytes) of a prepared path on its workload."""
    try:
        cost = path.cost(wl)
    except Exception as e:  # noqa: BLE001 - a broken cost() must not lose the measurement
        cost, why = None, f"cost() raised {type(e).__name__}: {e}"
    else:
        why = ""
    compulsory = float(cost["compulsory_bytes"]) if cost and cost.get("compulsory_bytes") is not None else math.nan
    if cost and cost.get("flops") is not None:
        return float(cost["flops"]), "cost()", compulsory
    algorithm = PATH_ALGORITHM.get(getattr(path, "name", ""))
    if algorithm is None:
        return math.nan, f"unknown: no cost() and no algorithm class for {path.name!r} {why}".strip(), compulsory
    tail = 0
    if algorithm == "state_replay":
        tail = getattr(path, "replay_tail_len", None)
        if tail is None:
            return math.nan, "unknown: ReplaySSM path has no cost() and no replay_tail_len", compulsory
    total = analytic_flops(algorithm, wl.geometry, wl.R, wl.W, wl.T, replay_tail=int(tail))["total"]
    return float(total), f"analytic:{algorithm}" + (f"(tail={tail})" if algorithm == "state_replay" else ""), compulsory


# ---- targets: what range 1 runs ----

class PathTarget:
    """One cell's path on its workload, prepared, warmed up and checked."""

    def __init__(self, cell: dict, device, check: bool, tolerance: float):
        from artifact.paths import get_path
        from artifact.workload import Geometry, Shape, default_prompt_len, get_geometry, make_workload

        self.info: dict = {}
        self.skip_reason = self.fail_reason = None
        if all(cell.get(f) not in (None, "") for f in ("HK", "HV", "K", "V")):
            geo = Geometry(int(cell["HK"]), int(cell["HV"]), int(cell["K"]), int(cell["V"]))
        else:
            geo = get_geometry(cell["geometry"])
        prompt_len = cell.get("prompt_len")
        prompt_len = default_prompt_len(device) if prompt_len in (None, "", "None") else int(prompt_len)
        self.path = get_path(cell["path"])
        why = self.path.supports(geo, Shape(int(cell["R"]), int(cell["W"]), int(cell["T"])), torch.device(device))
        if why:
            self.skip_reason = str(why)
            return
        self.wl = make_workload(geo, int(cell["R"]), int(cell["W"]), int(cell["T"]),
                                lineage=cell.get("lineage", "beam"), seed=int(cell.get("seed", 0)), device=device,
                                prompt_len=prompt_len)
        self.path.prepare(self.wl)
        out = None
        for _ in range(2):                                   # compile / autotune / first touch
            out = self.path.run(self.wl)
        _sync(device)
        self.info.update(persistent_bytes=int(self.path.persistent_bytes()),
                         written_bytes=int(self.path.written_bytes()))
        if check:
            from artifact.measure import max_abs_err, path_tolerance
            from artifact.reference import fullstate_decode
            tolerance = path_tolerance(self.path, tolerance)
            ref = fullstate_decode(self.wl, torch.float32)
            err = max_abs_err(out, ref)
            del ref
            self.info.update(max_abs_err=err, tolerance=tolerance)
            if not err <= tolerance:
                self.fail_reason = f"max_abs_err {err:.3e} > tolerance {tolerance:.3e}"
        flops, source, compulsory = path_flops(self.path, self.wl)
        self.info.update(flops=flops, flops_source=source, compulsory_bytes=compulsory)
        del out
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()

    def run(self) -> None:
        self.path.run(self.wl)


class CopyTarget:
    """A device-to-device copy of `nbytes` through a kernel: the known traffic that calibrates a method."""

    def __init__(self, nbytes: int, device):
        n = nbytes // 4
        self.src = torch.randn(n, device=device)
        self.dst = torch.empty_like(self.src)
        self.info = {"expected_read": n * 4, "expected_write": n * 4}
        self.skip_reason = self.fail_reason = None
        self.run()
        _sync(device)

    def run(self) -> None:
        n = self.src.numel()
        _calib_copy_kernel[(triton.cdiv(n, 4096),)](self.src, self.dst, n, BLOCK=4096)


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


# ---- methods: how the region is measured ----

def region_ncu(target, bufs: L2Buffers) -> dict:
    """Bracket the two ranges with cudaProfilerStart/Stop; the parent's `ncu --profile-from-start off` reads them."""
    bufs.clean()
    torch.cuda.profiler.start()
    target.run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    torch.cuda.profiler.start()
    bufs.drain()
    torch.cuda.profiler.stop()
    return {}


def _pm_window(collector, fn, interval_ns: int) -> tuple[list[float], dict]:
    """Sum each metric over every completed PM sample of one window around fn()."""
    t0 = time.perf_counter()
    collector.start()
    fn()
    torch.cuda.synchronize()
    time.sleep(max(0.002, 5 * interval_ns * 1e-9))         # let the last busy interval complete
    collector.stop()
    elapsed_ns = (time.perf_counter() - t0) * 1e9
    data = collector.decode(max_samples=int(2 * elapsed_ns / interval_ns) + 1000)
    sums = [0.0] * len(METRICS)
    for sample in data:
        for i, v in enumerate(sample.metric_values):
            sums[i] += float(v)
    meta = {"samples": data.num_completed_samples, "populated": data.num_populated_samples}
    return sums, meta


def region_pm_sampling(target, bufs: L2Buffers, interval_ns: int) -> dict:
    """CUPTI PM sampling (cupti-python): device-wide counters over a time window, kernels and copies alike."""
    from cupti import pm_sampling

    col = pm_sampling.Collector(device_index=torch.cuda.current_device())
    col.enable()
    try:
        col.configure(metrics=list(METRICS), sampling_interval=interval_ns,
                      trigger_mode=pm_sampling.TriggerMode.GPU_TIME_INTERVAL)
        bufs.clean()
        (r1, w1), m1 = _pm_window(col, target.run, interval_ns)
        (_, w2), m2 = _pm_window(col, lambda: bufs.read(bufs.b), interval_ns)
    finally:
        col.disable()
    notes = []
    for name, m in (("run", m1), ("drain", m2)):
        if m["populated"] > m["samples"]:
            notes.append(f"{name}: {m['populated'] - m['samples']} incomplete sample(s) dropped")
    return {"measured": {"read": r1, "write": w1 + w2, "drain_write": w2, "notes": notes,
                         "windows": {"run": m1, "drain": m2}}}


def _trace_events(prof) -> list[dict]:
    import os
    import tempfile
    fd, name = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(name)
        with open(name) as f:
            return json.load(f).get("traceEvents", [])
    finally:
        os.unlink(name)


def census_from_events(events: list[dict]) -> dict:
    """Kernels, copies and memsets in a torch.profiler (Kineto) chrome trace."""
    kernels, copies = [], []
    for e in events:
        cat = str(e.get("cat", "")).lower()
        if cat == "kernel":
            kernels.append(e.get("name", "?"))
        elif cat in ("gpu_memcpy", "gpu_memset"):
            copies.append({"name": e.get("name", "?"), "bytes": int((e.get("args") or {}).get("bytes", 0) or 0)})
    return {"kernels": kernels, "copies": copies}


def region_census(target, bufs: L2Buffers | None) -> dict:
    """What one run() issues on the GPU (no counters): the kernel count ncu must match, and any memcpy/memset."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        target.run()
        torch.cuda.synchronize()
    return {"census": census_from_events(_trace_events(prof))}


def metrics_from_events(events: list[dict]) -> list[dict]:
    """Per-kernel CUPTI metric values that torch.profiler's experimental profiler_metrics put in event args."""
    out = []
    for e in events:
        args = e.get("args") or {}
        if METRICS[0] in args or METRICS[1] in args:
            out.append({"name": e.get("name", "?"),
                        "read": float(args.get(METRICS[0], "nan")), "write": float(args.get(METRICS[1], "nan"))})
    return out


def region_torch_profiler(target, bufs: L2Buffers) -> dict:
    """torch.profiler with CUPTI range-profiler metrics per kernel (experimental; absent in some torch builds)."""
    from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile

    cfg = _ExperimentalConfig(profiler_metrics=list(METRICS), profiler_measure_per_kernel=True)
    bufs.clean()
    with profile(activities=[ProfilerActivity.CUDA], experimental_config=cfg) as prof:
        target.run()
        torch.cuda.synchronize()
        bufs.drain()
    per_kernel = metrics_from_events(_trace_events(prof))
    if not per_kernel:
        raise RuntimeError("torch.profiler returned no CUPTI metric values (its range-profiler path is "
                           "not active in this torch build)")
    return {"measured": {"per_kernel": per_kernel}}


# ---- entry ----

def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m sweeps.suites.traffic_child")
    ap.add_argument("--target", choices=("path", "copy"), required=True)
    ap.add_argument("--cell", help="the cell as JSON (target=path)")
    ap.add_argument("--nbytes", type=int, help="copy size (target=copy)")
    ap.add_argument("--method", choices=("ncu", "pm_sampling", "torch_profiler", "census", "dry"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default=None)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--tolerance", type=float, default=None)
    ap.add_argument("--pm-interval-ns", type=int, default=20000)
    return ap.parse_args(argv)


def run_child(args, rec: dict) -> None:
    """Fill `rec`; rec["stage"] says whether a failure came before the region ("setup") or inside it."""
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    on_gpu = torch.device(device).type == "cuda"
    if on_gpu and torch.device(device).index is not None:    # plain "cuda" is the current device already
        torch.cuda.set_device(torch.device(device))
    if args.method != "dry" and not on_gpu:
        rec.update(status="failed", reason=f"method {args.method} needs a CUDA GPU")
        return
    if args.target == "path":
        from artifact.measure import DEFAULT_TOLERANCE
        tol = args.tolerance if args.tolerance is not None else DEFAULT_TOLERANCE
        target = PathTarget(json.loads(args.cell), device, check=not args.no_check, tolerance=tol)
    else:
        target = CopyTarget(int(args.nbytes), device)
    rec.update(target.info)
    if target.skip_reason:
        rec.update(status="skipped", reason=target.skip_reason)
        return
    if target.fail_reason:
        rec.update(status="failed", reason=target.fail_reason)
        return
    if args.method == "dry":
        target.run()
        return
    bufs = L2Buffers(device)
    free, total = torch.cuda.mem_get_info()
    rec.update(free_bytes_at_region=int(free), total_bytes=int(total), drain_bytes=bufs.nbytes, stage="region")
    if args.method == "ncu":
        rec.update(region_ncu(target, bufs))
    elif args.method == "pm_sampling":
        rec.update(region_pm_sampling(target, bufs, args.pm_interval_ns))
    elif args.method == "torch_profiler":
        rec.update(region_torch_profiler(target, bufs))
    else:
        rec.update(region_census(target, bufs))


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rec: dict = {"method": args.method, "target": args.target, "status": "ok", "reason": "", "stage": "setup"}
    try:
        run_child(args, rec)
    except Exception as e:  # noqa: BLE001 - every failure becomes a recorded status, with its traceback tail
        tb = traceback.format_exc().strip().splitlines()
        rec.update(status="failed", reason=f"{type(e).__name__}: {e}", traceback=tb[-12:])
    with open(args.out, "w") as f:
        json.dump(rec, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
