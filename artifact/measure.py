"""One correctness gate, then the timer, for every operator cell (docs/design.md §5).

`check_and_time` captures a path's whole T-step `run` in a CUDA graph on *scrambled* static inputs, copies
the real workload into those inputs, poisons the output, replays, and checks the replayed output against the
FP32 FullState reference: a graph that skipped a kernel or baked in stale values fails here. Only a passing
cell is timed (artifact.timing.time_replay: median and 20th/80th percentile of graph replays timed by Triton's
benchmark timer, which flushes L2 before each replay). On a CPU the check runs eagerly and nothing is timed:
CPU timings are not performance.
"""
from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field
from typing import Callable, ContextManager

import torch

from artifact.limits import DEFAULT_TOLERANCE
from artifact.timing import (EAGER_REPLAY, GRAPH_REPLAY, Timing, capture_graph, time_replay, time_sequence,
                             warm_up)
from artifact.workload import Workload


@dataclass
class CellResult:
    status: str                      # ok | failed | skipped
    reason: str = ""
    max_abs_err: float = math.nan
    latency_ms: float = math.nan
    p20_ms: float = math.nan
    p80_ms: float = math.nan
    timer: str = ""
    replays: int = 0                 # timed replays behind latency_ms / p20_ms / p80_ms
    persistent_bytes: int = 0
    written_bytes: int = 0
    extra: dict = field(default_factory=dict)


def scramble_(wl: Workload) -> Workload:
    """Overwrite a workload with different but valid values (capture inputs that must not leak into results)."""
    wl.q.neg_().copy_(wl.q.roll(1, dims=2))
    wl.k.neg_().copy_(wl.k.roll(1, dims=2))
    wl.v.neg_().copy_(wl.v.roll(1, dims=2))
    wl.g.copy_(wl.g.roll(1, dims=2))
    wl.beta.copy_(1.0 - wl.beta)
    wl.parents.copy_(wl.W - 1 - wl.parents)
    wl.s_ctx.neg_()
    return wl


def path_tolerance(path, tolerance: float) -> float:
    """The gate a path is held to: the run's tolerance, or the path's own documented `gate_tolerance` when that
    is looser (vllm_prefix_replay: its chunk kernel rounds to bf16 by design, baselines/vllm_prefix_replay.py).
    A row's `tolerance` is this applied value; its reason names the run's (gate_note)."""
    return max(tolerance, getattr(path, "gate_tolerance", 0.0))


def gate_note(path_name: str, applied: float, run_tolerance: float) -> str:
    """What a row's reason says when a path was gated at its own tolerance, not the run's ("" when the same)."""
    if applied == run_tolerance:
        return ""
    return f"gated at {path_name}'s documented tolerance {applied:.2e}, not the run's {run_tolerance:.2e}"


_GATE_NOTE = re.compile(r"gated at \S+'s documented tolerance (\S+), not the run's ([0-9.eE+-]+)")


def run_tolerance(row: dict) -> float:
    """The run's tolerance behind a results row: its `tolerance` column (the gate applied), or, where its reason
    carries a gate_note, the run's tolerance that note names."""
    m = _GATE_NOTE.search(row.get("reason") or "")
    return float(m.group(2)) if m else float(row["tolerance"])


def same_tolerance(a: float, b: float) -> bool:
    """Tolerances equal as gate_note prints them (3 significant digits)."""
    return f"{a:.2e}" == f"{b:.2e}"


ERR_CHUNK = 1 << 26          # elements compared at once: three fp64 temporaries of 512 MiB, whatever the cell's size


def max_abs_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| in fp64; NaN/Inf anywhere (e.g. an unwritten poisoned element) gives inf. Compared in
    chunks of ERR_CHUNK elements, so the fp64 temporaries stay small beside a cell that fills the device."""
    if out.shape != ref.shape:
        raise ValueError(f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    o, r = out.reshape(-1), ref.reshape(-1)
    worst = 0.0
    for i in range(0, o.numel(), ERR_CHUNK):
        d = (o[i:i + ERR_CHUNK].double() - r[i:i + ERR_CHUNK].double()).abs()
        if not torch.isfinite(d).all():
            return math.inf
        worst = max(worst, float(d.max()))
    return worst


def _capture(path, static: Workload):
    """(graph, output) of a prepared path's whole run on `static`, after two warm-up runs."""
    return capture_graph(lambda: path.run(static), warmup=2)


Phase = Callable[[str], ContextManager]     # phase(name) brackets a part of a measurement (see check_and_time)


def untimed(name: str, shared: str | None = None) -> ContextManager:
    """A phase clock that times nothing (a measurement's phases where no caller books them)."""
    return contextlib.nullcontext()


def check_and_time(path, wl: Workload, ref: torch.Tensor, tolerance: float = DEFAULT_TOLERANCE,
                   warmup_ms: int = 25, rep_ms: int = 100, time_it: bool = True,
                   phase: Phase | None = None) -> CellResult:
    """Gate, then time. Exceptions propagate: the caller records them as a failed cell. `phase(name)` brackets
    each part -- "capture" (prepare, the warm-up calls that compile and autotune, the graph capture), "gate" (the
    gated run and its comparison), "timing" -- so a caller can book where a cell's time goes
    (sweeps.context.RunContext.phase); the work inside the brackets is the same without them."""
    phase = phase or untimed
    on_gpu = wl.device.type == "cuda"
    if on_gpu and getattr(path, "capturable", True):
        with phase("capture"):
            static = scramble_(wl.clone())
            path.prepare(static)
            graph, out = _capture(path, static)
        with phase("gate"):
            static.copy_(wl)
            out.fill_(math.nan)
            graph.replay()
            torch.cuda.synchronize()
            err = max_abs_err(out, ref)
        replay = graph.replay
    else:
        with phase("capture"):
            path.prepare(wl)
        with phase("gate"):                   # an eager path's first call, and so its compiles, is its gated run
            out = path.run(wl)
            if on_gpu:
                torch.cuda.synchronize()
            err = max_abs_err(out, ref)
        replay = lambda: path.run(wl)  # noqa: E731
    res = CellResult(status="ok", max_abs_err=err, persistent_bytes=int(path.persistent_bytes()),
                     written_bytes=int(path.written_bytes()))
    if not err <= tolerance:
        res.status, res.reason = "failed", f"max_abs_err {err:.3e} > tolerance {tolerance:.3e}"
        return res
    if on_gpu and time_it:
        with phase("timing"):
            t = time_replay(replay, warmup_ms, rep_ms,
                            replayed=GRAPH_REPLAY if getattr(path, "capturable", True) else EAGER_REPLAY)
        res.latency_ms, res.p20_ms, res.p80_ms, res.timer, res.replays = \
            t.median_ms, t.p20_ms, t.p80_ms, t.timer, t.replays
    else:
        res.timer = "none (CPU: correctness only)" if not on_gpu else "not timed"
    return res


@dataclass
class StepsResult:
    """The gate and the per-step times of one decode replayed step by step (check_and_time_steps)."""

    status: str                      # ok | failed
    reason: str = ""
    max_abs_err: float = math.nan
    steps: list[Timing] = field(default_factory=list)      # step t's own time, t = 0 .. T-1 (none on a CPU)
    timer: str = ""


def check_and_time_steps(path, wl: Workload, ref: torch.Tensor, tolerance: float = DEFAULT_TOLERANCE,
                         repeats: int = 30, warmup: int = 2, time_it: bool = True,
                         phase: Phase | None = None) -> StepsResult:
    """Gate, then time each decode step on its own: the per-step twin of check_and_time, for a StepperPath.

    On a GPU one CUDA graph per step (step 0's also holds the reset), all in one memory pool, captured on scrambled
    inputs after two eager warm-up decodes; the real workload is copied in, the output poisoned, the graphs
    replayed in order and the output compared with the FP32 FullState reference, so the per-step graphs are
    gated as the whole-decode graph is. Only a passing decode is timed (artifact.timing.time_sequence: each step
    between its own events, in order, L2 flushed before step 0). On a CPU the steps run eagerly and are checked
    only. Exceptions propagate: the caller records them. `phase` as check_and_time's."""
    from artifact.paths import StepperPath
    if not isinstance(path, StepperPath) or not getattr(path, "capturable", True):
        raise ValueError(f"{path.name}: per-step timing needs a capturable StepperPath")
    phase = phase or untimed
    on_gpu = wl.device.type == "cuda"
    with phase("capture"):
        static = scramble_(wl.clone()) if on_gpu else wl
        path.prepare(static)
    st, out = path.stepper, path.out

    def step(t):
        def call():
            if t == 0:
                st.reset(static.s_ctx)
            st.step(t, static.q[t], static.k[t], static.v[t], static.g[t], static.beta[t], static.parents[t],
                    out[t])
            return out[t]
        return call

    calls = [step(t) for t in range(wl.T)]
    if not on_gpu:
        with phase("gate"):
            for call in calls:
                call()
            err = max_abs_err(out, ref)
        status, reason = ("ok", "") if err <= tolerance else ("failed", f"max_abs_err {err:.3e} > tolerance "
                                                                         f"{tolerance:.3e} (per-step run)")
        return StepsResult(status, reason, err, timer="none (CPU: correctness only)")
    with phase("capture"):
        warm_up(lambda: [call() for call in calls], 2)
        pool = torch.cuda.graph_pool_handle()
        graphs = [capture_graph(call, warmup=0, pool=pool)[0] for call in calls]
    with phase("gate"):
        static.copy_(wl)
        out.fill_(math.nan)
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
        err = max_abs_err(out, ref)
    if not err <= tolerance:
        return StepsResult("failed", f"max_abs_err {err:.3e} > tolerance {tolerance:.3e} (per-step graphs)", err)
    if not time_it:
        return StepsResult("ok", "", err, timer="not timed")
    with phase("timing"):
        steps = time_sequence([g.replay for g in graphs], repeats, warmup)
    return StepsResult("ok", "", err, steps, steps[0].timer)


def free_device_memory(device) -> None:
    """Drop what Python still holds and return cached blocks, between cells of a sweep."""
    import gc
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def allocated_bytes(device) -> int:
    """Bytes of `device` that live tensors hold now (PyTorch's allocator); 0 off CUDA."""
    dev = torch.device(device)
    return int(torch.cuda.memory_allocated(dev)) if dev.type == "cuda" else 0


# What a unit of work's leftover allocator cache may hold of the device before it is returned to the driver
# (release_where_needed): a CUDA graph capture draws its private pool's segments from the driver and cannot take
# back the allocator's cached blocks while it captures, so cached blocks left over from earlier shapes take that
# much room from a later capture. The paths of one shape already capture beside each other's cached blocks (nothing
# is released between them), and a capture that still runs out of memory gets run_cell's release and one retry.
CACHE_RELEASE_SHARE = 0.1


def cached_share(device) -> float:
    """The share of `device`'s memory that the caching allocator holds and no tensor uses; 0 off CUDA."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return 0.0
    cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    return cached / torch.cuda.get_device_properties(dev).total_memory


def release_where_needed(device, allocated_before: int) -> str:
    """After a unit of work (a shape, a cell) that began with `allocated_before` bytes held by live tensors:
    "collected" (free_device_memory: gc, then the cache returned) where live tensors hold more than that; else
    "cache returned" (empty_cache alone) where the allocator's unused cache exceeds CACHE_RELEASE_SHARE of the
    device; else "" (nothing done).

    What a path's supports() sees of the device is artifact.limits.device_free_bytes, which counts the blocks the
    allocator caches but no tensor uses as free (outside a capture the allocator returns them to the driver itself
    when a new segment does not fit), so returning the cache changes nothing those checks read. Only memory that
    tensors still hold after the work -- kept alive by a reference cycle until a gc pass, a failed cell's
    traceback -- makes the next check see less, and only a gc pass frees it. Memory kept on purpose across units of
    work (a model, its prefills) is part of the next unit's starting level once it exists, so it costs a collection
    only after the unit that built it."""
    if allocated_bytes(device) > allocated_before:
        free_device_memory(device)
        return "collected"
    if cached_share(device) > CACHE_RELEASE_SHARE:
        torch.cuda.empty_cache()
        return "cache returned"
    return ""


def cuda_context_alive(device) -> bool:
    """False once a kernel fault has made the CUDA context unusable (the sweep must stop, then resume)."""
    if torch.device(device).type != "cuda":
        return True
    try:
        torch.cuda.synchronize(device)
        return True
    except Exception:  # noqa: BLE001 - any error here means the context is gone
        return False


# ---- floors (docs/design.md §5): compulsory bytes / measured copy bandwidth, FLOPs / measured matrix rate ----

def measure_ceilings(nbytes: int = 2 << 30, n: int = 8192) -> dict:
    """Copy bandwidth (bytes read + written per second) and fp32/tf32/bf16 matmul rates, on this GPU now
    (eager calls timed by artifact.timing.time_replay: median, L2 flushed before each)."""
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    t = time_replay(lambda: dst.copy_(src), 25, 200, replayed="eager", stats="statistics").median_ms
    out = {"copy_bytes_per_s": 2 * nbytes / (t * 1e-3)}
    del src, dst
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    flops = 2 * n ** 3
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dt, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                               ("bf16", torch.bfloat16, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            x, y = a.to(dt), b.to(dt)
            t = time_replay(lambda: x @ y, 25, 200, replayed="eager", stats="statistics").median_ms
            out[f"{name}_flop_per_s"] = flops / (t * 1e-3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return out


def floor_ms(compulsory_bytes: float, flops, ceilings: dict, matrix_rate_key: str | None = None) -> tuple[float, str]:
    """max(bytes / copy bandwidth, FLOPs / matrix rate) in ms, and which bound it is. `flops` is a count at
    `matrix_rate_key`, or {rate key: count} for work at several precisions (their times add)."""
    parts = flops if isinstance(flops, dict) else {matrix_rate_key: flops}
    parts = {k: f for k, f in parts.items() if f}
    t_mem = compulsory_bytes / ceilings["copy_bytes_per_s"] * 1e3
    t_flop = sum(f / ceilings[k] for k, f in parts.items()) * 1e3
    return (t_mem, "memory") if t_mem >= t_flop else (t_flop, "compute:" + "+".join(parts))
