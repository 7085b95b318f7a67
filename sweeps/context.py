"""What every cell runner gets besides its cells: the `RunContext` of one sweep run.

A *runner* is `run_cells(cfg, cells: list[dict], ctx: RunContext) -> Iterator[dict]` (dispatch table in
`sweeps.runners`). Each cell is a results row (artifact.results.COLUMNS) with only its defining fields
filled: suite, path, geometry, R, W, T, O, HK, HV, K, V, prompt_len, lineage, seed, tolerance,
config_hash, run_id, git_commit. The runner yields every cell back exactly once, as `dict(cell)` plus what
it measured (status, reason, latency_ms, ...); it must not change the defining fields or the hash.
`sweeps.run` appends each yielded row to the CSV (flushed) before asking for the next, so a runner should
yield as soon as a cell is done. A runner may yield in any order, e.g. shape-major, and should call
`ctx.started(cell)` before working on a cell so the progress bar shows it.

An exception inside a cell is the runner's to catch and yield as status "failed" (reason = the error)
or "skipped" (reason = why it could not run). An exception escaping the runner stops the suite: the cell
last passed to `ctx.started` is recorded as failed and the sweep exits non-zero.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch


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
    shared_s: Counter = field(default_factory=Counter, repr=False)

    def charge(self, label: str, seconds: float) -> None:
        """Book work no single cell owns (a shape's workload + reference build, freeing memory between
        shapes) under `label`, so the run's wall record keeps it out of the next row's path."""
        self.shared_s[label] += seconds

    def take_charges(self) -> dict[str, float]:
        """The charges booked since the last call (the sweep takes them with each row)."""
        out = dict(self.shared_s)
        self.shared_s.clear()
        return out

    def started(self, cell: dict) -> None:
        """Tell the sweep that work on `cell` begins (progress bar; names the cell if the runner crashes)."""
        if self.on_start is not None:
            self.on_start(cell)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"


def shape_label(cell: dict) -> str:
    """Short human name of a cell's shape, e.g. 'qwen3_5_0_8b R4 W512 T2 L1024'."""
    return f"{cell['geometry']} R{cell['R']} W{cell['W']} T{cell['T']} L{cell['prompt_len']}"


def one_line(text: str, limit: int = 400) -> str:
    """A reason fit for one CSV field: no newlines, bounded length."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
