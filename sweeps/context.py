"""What every cell runner gets besides its cells: the `RunContext` of one sweep run.

A *runner* is `run_cells(cfg, cells: list[dict], ctx: RunContext) -> Iterator[dict]` (dispatch table in
`sweeps.runners`). Each cell is a results row (artifact.results.COLUMNS) with only its defining fields
filled: suite, path, geometry, R, W, T, O, HK, HV, K, V, prompt_len, lineage, seed, tolerance,
config_hash, run_id, git_commit. The runner yields every cell back exactly once, as `dict(cell)` plus what
it measured (status, reason, latency_ms, ...); it must not change the defining fields or the hash.
`sweeps.run` appends each yielded row to the CSV (flushed) before asking for the next, so a runner should
yield as soon as a cell is done. A runner may yield in any order, e.g. shape-major, and should call
`ctx.started(cell)` before working on a cell so the progress bar shows it. It times its work in phases with
`ctx.phase(name, shared=None, path=None)` (never across a yield): the run's wall record splits each path's time,
and the shared work's, by phase (artifact.results.PHASES).

An exception inside a cell is the runner's to catch and yield as status "failed" (reason = the error)
or "skipped" (reason = why it could not run). An exception escaping the runner stops the suite: the cell
last passed to `ctx.started` is recorded as failed and the sweep exits non-zero.
"""
from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager

import torch

from artifact.measure import untimed
from artifact.results import PHASES

ROW = ""          # the owner of a phase booked to the path of the next row the runner yields


@dataclass
class RunContext:
    """Settings shared by all cells of one run (one `python -m sweeps.run` job, or one shard of it).

    device      where workloads live: torch.device("cuda:<i>") or torch.device("cpu")
    ceilings    measure_ceilings() of this GPU, measured once per run (copy_bytes_per_s,
                fp32/tf32/bf16_flop_per_s); None on a CPU or with hardware.measure_ceilings=false, and then
                no row has a floor (floor_ms, launch_floor_ms)
    tolerance   the correctness gate: max |o - o_fp32 FullState| a cell may have and still be timed
    warmup_ms, rep_ms   the timer's settings (artifact.measure.check_and_time)
    time_it     False on a CPU: cells are checked, never timed
    run_id      names the env record results/env/<run_id>.json; also in every row
    git_commit  the commit the run measured (also in every row)
    results_dir where this run writes (a runner may put side files, e.g. profiler reports, under it)
    """

    device: torch.device
    ceilings: dict | None
    tolerance: float
    warmup_ms: int
    rep_ms: int
    time_it: bool
    run_id: str
    git_commit: str
    results_dir: Path
    on_start: Callable[[dict], None] | None = field(default=None, repr=False)
    shared_s: Counter = field(default_factory=Counter, repr=False)      # shared label -> seconds
    path_s: Counter = field(default_factory=Counter, repr=False)        # named path -> seconds
    phase_s: Counter = field(default_factory=Counter, repr=False)       # (owner, phase) -> seconds
    _open: str = field(default="", repr=False)                          # the phase being timed now

    @contextlib.contextmanager
    def phase(self, name: str, shared: str | None = None, path: str | None = None):
        """Time the enclosed work as phase `name` (artifact.results.PHASES) for the run's wall record: booked to
        the path of the next row the runner yields; with `path`, to that path, whichever row comes next (work
        done for a cell before other paths' rows, e.g. every path's supports() asked before a shape runs any);
        with `shared`, under that label of work no single cell owns (a shape's workload and reference, the
        memory release between shapes), which the record keeps out of every path's time. On a GPU a phase that
        completes ends with the device synchronised, so the GPU work it queued is its own; the timed work inside
        a phase is unchanged. Phases do not nest (nested, one second would be booked twice)."""
        if name not in PHASES:
            raise ValueError(f"phase {name!r}: not one of {', '.join(PHASES)}")
        if shared and path:
            raise ValueError(f"phase {name!r}: booked to path {path!r} and shared label {shared!r} at once")
        if self._open:
            raise RuntimeError(f"phase {name!r} opened inside phase {self._open!r}: its time would be booked twice")
        self._open = name
        t0 = time.monotonic()
        try:
            yield
            if self.on_gpu:
                # accounting only: an error the device reports here belongs to the work, whose next CUDA call
                # raises it where the runner records it (a raise here would escape between a row's write and its
                # booking)
                with contextlib.suppress(Exception):
                    torch.cuda.synchronize(self.device)
        finally:
            dt = time.monotonic() - t0
            self._open = ""
            self.phase_s[(shared or path or ROW, name)] += dt
            if shared:
                self.shared_s[shared] += dt
            elif path:
                self.path_s[path] += dt

    def take_charges(self) -> tuple[dict[str, float], dict[tuple[str, str], float], dict[str, float]]:
        """The shared seconds by label, the phases' seconds by (owner, phase) and the seconds booked to a named
        path (`phase(..., path=)`) booked since the last call (the sweep takes them with each row; owner ROW is
        that row's path)."""
        shared, phases, paths = dict(self.shared_s), dict(self.phase_s), dict(self.path_s)
        self.shared_s.clear()
        self.phase_s.clear()
        self.path_s.clear()
        return shared, phases, paths

    def started(self, cell: dict) -> None:
        """Tell the sweep that work on `cell` begins (progress bar; names the cell if the runner crashes)."""
        if self.on_start is not None:
            self.on_start(cell)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"


def phase_clock(ctx) -> Callable[..., ContextManager]:
    """`ctx.phase` of a RunContext; for another context (a tool's namespace of timer settings) a clock that
    times nothing."""
    return getattr(ctx, "phase", None) or untimed


def shape_label(cell: dict) -> str:
    """Short human name of a cell's shape, e.g. 'qwen3_5_0_8b R4 W512 T2 L1024'."""
    return f"{cell['geometry']} R{cell['R']} W{cell['W']} T{cell['T']} L{cell['prompt_len']}"


def one_line(text: str, limit: int = 400) -> str:
    """A reason fit for one CSV field: no newlines, bounded length."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
