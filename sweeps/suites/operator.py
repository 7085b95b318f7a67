"""The operator cell runner (suites operator, recurrent_path, smoke): gate, time and record each path.

Per shape (cells arrive shape-major): ask every path whether it supports the shape (a reason is a recorded
skip, before anything is built); if any path remains, build the workload and its FP32 FullState reference
once, then for each remaining path run artifact.measure.check_and_time (correctness gate, then CUDA-graph
timing on a GPU, artifact.timing.time_replay) and fill the floors from path.cost(wl): floor_ms, and on a timed
row launch_floor_ms (artifact.launch_floor, measured once per distinct per-step byte count in the process, after
the path's memory is released). After a shape, GPU memory is collected (gc + empty cache) where tensors still hold
more of it than before the shape began, and the allocator's cache alone is returned where it exceeds a tenth of the
device (artifact.measure.release_where_needed: supports()' memory checks count cached blocks as free, so only
memory still held would hide from them; a graph capture cannot reclaim cached blocks); between the paths of a
shape only when a path runs out of memory, before its one retry. Each part of the work is timed as a phase of the run's
wall record (sweeps.context.RunContext.phase): the shape's workload (setup) and FP32 reference under BUILD, the
release under RELEASE, the launch floor under LAUNCH_FLOOR, each path's supports() (setup), capture, gate and
timing under its path.

Outcomes: a path that raises is a failed cell with the error; one that runs out of GPU memory is a
*skipped* cell with reason "out of memory: ..." (the shape does not fit beside this path's state on this
GPU: like an unsupported shape, not a wrong answer; the summary lists these skips). A CUDA error that
leaves the context unusable stops the run instead of failing every later cell; a re-run resumes.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterator

import torch

from artifact.measure import (allocated_bytes, check_and_time, cuda_context_alive, floor_ms, free_device_memory,
                              gate_note, path_tolerance, release_where_needed)
from artifact.paths import get_path
from artifact.reference import fullstate_decode
from artifact.workload import Geometry, Shape, lineage_unavailable, make_workload
from sweeps.context import RunContext, one_line, phase_clock

BUILD = "(workload + FP32 reference)"        # wall-record labels of the per-shape work no path owns
RELEASE = "(memory release between shapes)"
LAUNCH_FLOOR = "(launch floor)"             # timing the streaming launches of launch_floor_ms
# Above this bandwidth floor a step streams for >= 5 ms / 31 (the suites' cells take at most 31 steps: beam_scaling's
# deepest T), about 0.16 ms, against a few microseconds of launch ramp and drain: T launches add < 2 % to floor_ms,
# so the column stays empty there rather than spending seconds of copies per cell on a number that equals floor_ms
# within that bound.
LAUNCH_FLOOR_MAX_FLOOR_MS = 5.0
SHAPE_FIELDS = ("geometry", "HK", "HV", "K", "V", "R", "W", "T", "prompt_len", "lineage", "seed")


class CudaContextLost(RuntimeError):
    """The CUDA context is unusable after an error (e.g. an illegal address); nothing more can run here."""


def run_cells(cfg, cells: list[dict], ctx: RunContext) -> Iterator[dict]:
    for _, shape_cells in itertools.groupby(cells, key=lambda c: tuple(c[f] for f in SHAPE_FIELDS)):
        yield from _run_shape(list(shape_cells), ctx)


def _row(cell: dict, status: str, reason: str = "", **measured) -> dict:
    return {**cell, "status": status, "reason": one_line(reason), **measured}




def _run_shape(cells: list[dict], ctx: RunContext, measure=None, reference=None) -> Iterator[dict]:
    """One shape's rows. `measure(cell, wl, ref, ctx) -> row` (default run_cell) and `reference(wl) -> o`
    (default fullstate_decode) let another runner (beam_scaling) add to a cell's measurement or bound the
    reference's memory, with this shape's supports / build / release protocol."""
    measure, reference = measure or run_cell, reference or fullstate_decode
    c0 = cells[0]
    geo = Geometry(c0["HK"], c0["HV"], c0["K"], c0["V"])
    shape = Shape(c0["R"], c0["W"], c0["T"])
    # A recorded lineage whose data file is missing or does not cover the shape: every path's cell is a recorded
    # skip naming why (and the command that records the file), before anything is asked or built.
    missing = lineage_unavailable(c0["lineage"], shape.T, shape.R, shape.W)
    if missing:
        for cell in cells:
            ctx.started(cell)
            yield _row(cell, "skipped", missing)
        return
    runnable = []                                # cells only: a path object lives for its own cell alone
    for cell in cells:
        ctx.started(cell)
        try:
            with ctx.phase("setup", path=cell["path"]):     # a supported path's row comes after the others'
                reason = get_path(cell["path"]).supports(geo, shape, ctx.device)
        except Exception as e:  # noqa: BLE001 - a broken supports() is that cell's failure
            yield _row(cell, "failed", f"supports() raised {type(e).__name__}: {e}")
            continue
        if reason:
            yield _row(cell, "skipped", reason)
        else:
            runnable.append(cell)
    if not runnable:
        return                                   # nothing to run: never build the workload

    held = allocated_bytes(ctx.device)           # the level the shape's release returns to
    try:
        with ctx.phase("setup", shared=BUILD):
            wl = make_workload(geo, shape.R, shape.W, shape.T, lineage=c0["lineage"], seed=c0["seed"],
                               device=ctx.device, prompt_len=c0["prompt_len"])
        with ctx.phase("reference", shared=BUILD):
            ref = reference(wl)
    except torch.cuda.OutOfMemoryError as e:
        with ctx.phase("release", shared=RELEASE):
            free_device_memory(ctx.device)
        for cell in runnable:
            yield _row(cell, "skipped", f"out of memory building the workload/reference: {e}")
        return
    except Exception as e:  # noqa: BLE001
        for cell in runnable:
            yield _row(cell, "failed", f"workload/reference: {type(e).__name__}: {e}")
        return

    for cell in runnable:
        ctx.started(cell)
        row = measure(cell, wl, ref, ctx)        # its path's state (pools, graphs) is freed on return
        if row["status"] == "failed" and not cuda_context_alive(ctx.device):
            yield row
            raise CudaContextLost(f"CUDA context unusable after {cell['path']} failed ({row['reason']}); "
                                  "re-run the same command to continue with the remaining cells")
        yield row
    del wl, ref
    with ctx.phase("release", shared=RELEASE):
        release_where_needed(ctx.device, held)


def run_cell(cell: dict, wl, ref, ctx: RunContext, path=None) -> dict:
    """One cell's row: gate against `ref`, time a passing cell, floor from the path's cost model. Runs on a fresh
    path object (or `path`, e.g. a configured variant for `tools.bench`), local to this call: whatever it
    allocates (state pools, a CUDA graph's private pool) is released when the call returns. (Path objects kept
    for a whole shape would hold every path's pools at the same time: big shapes would run out of memory and
    the next shapes' supports() would see the GPU nearly full.) `ctx` needs tolerance, warmup_ms, rep_ms,
    time_it, ceilings and device; a `charge` method, where it has one, books the launch floor's time apart."""
    phase = phase_clock(ctx)
    fresh = path is None
    with phase("setup"):
        path = get_path(cell["path"]) if fresh else path
    # A framework whose kernel computes in lower precision declares its own, documented gate (its docstring
    # says why). The row's `tolerance` is the gate applied; its reason names the run's (gate_note).
    tolerance = path_tolerance(path, ctx.tolerance)
    try:
        try:
            res = check_and_time(path, wl, ref, tolerance=tolerance, warmup_ms=ctx.warmup_ms,
                                 rep_ms=ctx.rep_ms, time_it=ctx.time_it, phase=phase)
        except torch.cuda.OutOfMemoryError:
            # The previous path's memory went back by reference counting (no gc pass between the paths of a
            # shape: ~50-100 ms each, minutes over the suite). Drop this attempt's half-built state, collect
            # what a reference cycle still holds, return the cache, and try once more on a fresh object.
            if not fresh:
                raise
            path = None
            with phase("release"):
                free_device_memory(ctx.device)
            path = get_path(cell["path"])
            res = check_and_time(path, wl, ref, tolerance=tolerance, warmup_ms=ctx.warmup_ms,
                                 rep_ms=ctx.rep_ms, time_it=ctx.time_it, phase=phase)
    except torch.cuda.OutOfMemoryError as e:
        return _row(cell, "skipped", f"out of memory: {e}")
    except Exception as e:  # noqa: BLE001 - recorded, and the sweep goes on
        return _row(cell, "failed", f"{type(e).__name__}: {e}")
    row = _row(cell, res.status, res.reason, max_abs_err=res.max_abs_err, latency_ms=res.latency_ms,
               p20_ms=res.p20_ms, p80_ms=res.p80_ms, timer=res.timer, persistent_bytes=res.persistent_bytes,
               written_bytes=res.written_bytes, tolerance=tolerance)
    note = gate_note(path.name, tolerance, ctx.tolerance)
    if note:
        row["reason"] = one_line(f"{note}; {row['reason'] or ''}".strip("; "))
    try:
        cost = path.cost(wl)
    except Exception as e:  # noqa: BLE001 - a broken cost model must not hide a measured latency
        row["reason"] = one_line(f"{row['reason']} cost() raised {type(e).__name__}: {e}".strip())
        cost = None
    if cost is not None:
        row.update(compulsory_bytes=cost["compulsory_bytes"], flops=cost["flops"])
        if ctx.ceilings:
            row["floor_ms"], row["floor_bound"] = floor_ms(cost["compulsory_bytes"], cost["flops"],
                                                           ctx.ceilings, cost["rate"])
            path = res = None           # the path's pools go back before the launch floor allocates its buffers
            _launch_floor(row, cost, wl, ctx)
    return row


def launch_floor_ms(steps, warmup_ms: float, rep_ms: float, device) -> float:
    """artifact.launch_floor.launch_floor_ms, imported on first use: that module defines a Triton kernel, and this
    one is imported with the sweep's configs, before a CPU run sets TRITON_INTERPRET."""
    from artifact.launch_floor import launch_floor_ms as measure
    return measure(steps, warmup_ms, rep_ms, device)


def _launch_floor(row: dict, cost: dict, wl, ctx) -> None:
    """Fill launch_floor_ms of a timed row (a finite latency, on a GPU, floor_ms <= LAUNCH_FLOOR_MAX_FLOOR_MS) from
    its cost model's per-step bytes, with the cell's timer settings. A floor that cannot be measured leaves the column empty and says why in the
    reason; the row keeps its latency. Out of memory gets one retry after the cached blocks are returned. Its
    time is booked under LAUNCH_FLOOR, apart from the row's path (one measurement serves several paths)."""
    if wl.device.type != "cuda" or not math.isfinite(row.get("latency_ms", math.nan)):
        return
    if not row.get("floor_ms", math.inf) <= LAUNCH_FLOOR_MAX_FLOOR_MS:
        return
    try:
        with phase_clock(ctx)("launch_floor", shared=LAUNCH_FLOOR):
            steps = cost["step_bytes"]
            try:
                value = launch_floor_ms(steps, ctx.warmup_ms, ctx.rep_ms, wl.device)
            except torch.cuda.OutOfMemoryError:
                free_device_memory(wl.device)
                value = launch_floor_ms(steps, ctx.warmup_ms, ctx.rep_ms, wl.device)
        row["launch_floor_ms"] = value
    except Exception as e:  # noqa: BLE001 - a floor that cannot be measured must not hide a measured latency
        row["reason"] = one_line(f"{row['reason']} launch floor not measured: {type(e).__name__}: {e}".strip())
