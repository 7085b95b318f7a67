"""The beam_scaling cell runner (beyond the paper): how each path's per-step latency grows with decode depth, and
how wide a beam search each path fits on one GPU.

OneLA replays every ancestral record at every step, so its step t does work that grows with t, while a FullState
step does the same work at every depth; OneLA's capacity grows with W x depth, FullState's with W x V x K.

Depth cells are the suite's grid (R=4 W=512 on qwen3_5_0_8b, O = T + 1 from 2 to 128). Each path is gated and its
whole T-step decode timed as in the operator suite (sweeps.suites.operator.run_cell: latency_ms is the cumulative
latency, floor_ms its floor); then it decodes again as one CUDA graph per step, is gated again, and each step is
timed on its own (artifact.measure.check_and_time_steps). The side table <results_dir>/beam_scaling_steps.csv keeps,
per cell, the last step's time (step T - 1, which replays T - 1 ancestral records) with its floor from that step's
terms of the path's cost model (artifact.cost), every step's median and their sum.

Width cells (R = width_R, T = width_T) are one per path, enumerated after the grid (`width_shapes`). A path's
capacity limit is the largest W whose persistent + workspace bytes fit the device's memory: those bytes are read off
the path's real tensors at three small widths, checked affine in W and extrapolated, so nothing near the limit is
allocated; the limit is then lowered to the largest W the path's own supports() accepts (a launch-grid axis, a
free-memory check). The measured cell is the largest multiple of width_multiple at or below the limit whose
estimated bytes -- the path's and the harness's (the workload, the scrambled copy the gate captures on, the output,
the FP32 reference) -- stay within width_fill of the device memory. <results_dir>/beam_scaling_width.csv keeps, per
width cell, the limit, what sets it and the byte model. Where one request's W reference states would not fit in
half the free memory, the FP32 reference runs along ancestral chains in blocks of beams
(artifact.reference.fullstate_chains).
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Iterator, List, Optional

import torch

from artifact.cost import token_input_bytes
from artifact.limits import device_free_bytes
from artifact.measure import check_and_time_steps, floor_ms, free_device_memory, path_tolerance
from artifact.paths import get_path, make_stepper
from artifact.reference import fullstate_decode
from artifact.results import append_csv
from artifact.workload import KNOWN_LINEAGES, Geometry, Shape, default_prompt_len
from sweeps.context import RunContext, one_line, phase_clock
from sweeps.suites.operator import SHAPE_FIELDS, _run_shape, run_cell

STEPS_FILE = "beam_scaling_steps.csv"
WIDTH_FILE = "beam_scaling_width.csv"
STEPS_COLUMNS = ["config_hash", "run_id", "path", "geometry", "R", "W", "T", "O", "status", "reason", "step",
                 "step_ms", "step_p20_ms", "step_p80_ms", "step_floor_ms", "step_floor_bound",
                 "step_compulsory_bytes", "step_flops", "steps_sum_ms", "latency_ms", "max_abs_err", "timer",
                 "steps_ms", "steps_floor_ms"]
WIDTH_COLUMNS = ["config_hash", "run_id", "path", "geometry", "R", "W", "T", "O", "status", "latency_ms",
                 "memory_bytes", "capacity_W", "limit_W", "limited_by", "persistent_a", "persistent_b",
                 "workspace_a", "workspace_b", "cell_bytes", "note"]
PROBE = (1, 2, 3)               # the widths the byte model is read at, in units of width_multiple
REF_STATE_COPIES = 5            # beam states one FullState reference update holds per beam (S, its parent's, 3 temporaries)
LIMIT_MARGIN = 0.98             # a free-memory limit moves with what else the device holds when the cell runs


@dataclass
class BeamScalingSettings:
    """The suite's own knobs (config section `beam_scaling`)."""

    width_R: int = 4
    width_T: int = 6                     # O = 7, the paper's deepest point
    width_fill: float = 0.85             # a width cell's estimated bytes stay within this share of the device memory
    width_multiple: int = 64             # width cells are multiples of this (the warp-specialised kernel's beam tile)
    memory_bytes: Optional[int] = None   # the memory capacity is held against; None: the device's total memory
    step_repeats: int = 30               # timed decodes behind each per-step median
    step_warmup: int = 2
    # The depth grid runs again with each of these lineages, beside the run's `lineage` (the width cells keep that
    # one): `model` is the beam tree recorded from the Qwen3.5 model's own search (artifact.workload
    # RECORDED_LINEAGES); where its data file is missing or does not cover a cell, that cell is a recorded skip.
    depth_lineages: List[str] = field(default_factory=lambda: ["model"])

    def check_values(self) -> None:
        """Raise ValueError('<key>=<value>: why') for a value no run can use (sweeps.spec.validate names the key)."""
        for key, low in (("width_R", 1), ("width_T", 1), ("width_multiple", 1), ("step_repeats", 1),
                         ("step_warmup", 0)):
            val = getattr(self, key)
            if not isinstance(val, int) or val < low:
                raise ValueError(f"{key}={val!r}: must be an int >= {low}")
        if not 0 < self.width_fill <= 1:
            raise ValueError(f"width_fill={self.width_fill!r}: must be in (0, 1]")
        for name in self.depth_lineages:
            if name not in KNOWN_LINEAGES:
                raise ValueError(f"depth_lineages={list(self.depth_lineages)!r}: unknown lineage {name!r}; known: "
                                 f"{', '.join(KNOWN_LINEAGES)}")
        if self.memory_bytes is not None and self.memory_bytes < 1:
            raise ValueError(f"memory_bytes={self.memory_bytes!r}: must be > 0 or null (the device's memory)")


# ---------------------------------------------------------------- width: capacity and the width cell

@dataclass(frozen=True)
class WidthPlan:
    """One path's width cell on one device: its W, the path's limit and what sets it, and the byte model."""

    path: str
    W: int
    memory_bytes: int
    capacity_W: Optional[int]          # largest W whose persistent + workspace bytes fit memory_bytes
    limit_W: Optional[int]             # capacity_W lowered to the path's supports() limit; None: no width runs
    limited_by: str
    persistent: tuple[int, int] = (0, 0)   # (a, b): persistent_bytes() = a + b W at this R and T
    workspace: tuple[int, int] = (0, 0)    # (a, b): workspace_bytes() = a + b W
    cell_bytes: int = 0                # the cell's estimated bytes, the path's and the harness's
    note: str = ""


def device_memory(device, settings: BeamScalingSettings) -> int:
    """The memory capacity is held against: settings.memory_bytes, else the device's total memory."""
    if settings.memory_bytes is not None:
        return int(settings.memory_bytes)
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.get_device_properties(dev).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _affine(widths, ys, what: str) -> tuple[int, int]:
    """(a, b) with ys = a + b * widths exactly, or ValueError (the extrapolation would not be exact)."""
    b, rem = divmod(ys[1] - ys[0], widths[1] - widths[0])
    a = ys[0] - b * widths[0]
    if rem or any(a + b * w != y for w, y in zip(widths, ys)):
        raise ValueError(f"{what} is not affine in W: {dict(zip(widths, ys))}")
    return a, b


def byte_model(path: str, geo: Geometry, R: int, T: int, device, multiple: int) -> tuple[tuple, tuple]:
    """((a, b) of persistent_bytes, (a, b) of workspace_bytes) of the path's stepper at (R, T): read off its real
    tensors after reset at W = multiple x PROBE (small: nothing near a limit is allocated), checked affine in W."""
    widths = [multiple * m for m in PROBE]
    pers, work = [], []
    for W in widths:
        st = make_stepper(path, geo, R, W, T, device)
        st.reset(torch.zeros(R, geo.hv, geo.v, geo.k, dtype=torch.float32, device=device))
        pers.append(int(st.persistent_bytes()))
        work.append(int(st.workspace_bytes()))
        del st
    free_device_memory(device)
    return _affine(widths, pers, "persistent_bytes()"), _affine(widths, work, "workspace_bytes()")


def harness_bytes(geo: Geometry, R: int, W: int, T: int, elem: int = 2) -> int:
    """Bytes the measurement keeps beside a path: the workload and its scrambled copy (artifact.measure's capture
    inputs), the path's output (input dtype) and the FP32 reference output."""
    inputs = T * R * W * (token_input_bytes(geo, elem) + 4) + R * geo.state_bytes      # + the int32 parents
    out = T * R * W * geo.hv * geo.v
    return 2 * inputs + out * elem + out * 4


_PLANS: dict[tuple, WidthPlan] = {}      # the enumeration's plans, read again by the runner in the same process


def plan_width(path: str, geo: Geometry, R: int, T: int, device, settings: BeamScalingSettings,
               fallback_W: int) -> WidthPlan:
    """The path's width cell (module docstring); `fallback_W` where no width can be planned (the runner then
    records why the path does not run, or measures it there and notes that no limit was computed)."""
    memory = device_memory(device, settings)
    key = (path, geo, R, T, str(device), memory, settings.width_fill, settings.width_multiple, fallback_W)
    if key not in _PLANS:
        _PLANS[key] = _plan(path, geo, R, T, device, settings, memory, fallback_W)
    return _PLANS[key]


def _plan(path, geo, R, T, device, settings, memory, fallback_W) -> WidthPlan:
    m = settings.width_multiple
    try:
        (ap, bp), (aw, bw) = byte_model(path, geo, R, T, device, m)
    except Exception as e:  # noqa: BLE001 - an unavailable framework, a path without a stepper: said, not fatal
        return WidthPlan(path, fallback_W, memory, None, None,
                         one_line(f"capacity not computed: {type(e).__name__}: {e}"))
    a, b = ap + aw, bp + bw
    model = dict(persistent=(ap, bp), workspace=(aw, bw))
    capacity = (memory - a) // b if b > 0 else None
    if capacity is None or capacity < 1:
        why = "no state grows with W" if capacity is None else f"its state at W=1 exceeds {memory} bytes"
        return WidthPlan(path, fallback_W, memory, capacity, None, why, **model)
    dev = torch.device(device)
    p = get_path(path)

    def reason(W: int) -> Optional[str]:
        return p.supports(geo, Shape(R, W, T), dev)

    if reason(capacity) is None:
        limit, why = capacity, "memory: persistent + workspace bytes"
    elif reason(1):
        return WidthPlan(path, fallback_W, memory, capacity, None, one_line(reason(1)), **model)
    else:
        lo, hi = 1, capacity                 # supports(lo) holds, supports(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if reason(mid) is None else (lo, mid)
        limit, why = lo, one_line(f"supports() at W={hi}: {reason(hi)}")
    h1 = harness_bytes(geo, R, 2, T) - harness_bytes(geo, R, 1, T)
    h0 = harness_bytes(geo, R, 1, T) - h1
    fit = int((settings.width_fill * memory - a - h0) // (b + h1))
    top = min(int(LIMIT_MARGIN * limit), fit)
    W = top // m * m if top >= m else max(1, top)
    return WidthPlan(path, W, memory, capacity, limit, why, cell_bytes=a + b * W + harness_bytes(geo, R, W, T),
                     **model)


def width_cells(spec, device) -> list[tuple[dict, WidthPlan]]:
    """(cell, plan) of every width cell: one per path, geometry and prompt length (shape-major by W)."""
    from sweeps.spec import make_cell
    s = BeamScalingSettings(**spec.settings)
    out = []
    for geo_name, geo in spec.geometries.items():
        for pl in spec.prompt_len:
            prompt_len = default_prompt_len(device) if pl is None else pl
            for path in spec.paths:
                plan = plan_width(path, geo, s.width_R, s.width_T, device, s, fallback_W=spec.W[0])
                out.append((make_cell(spec, path, geo_name, geo, s.width_R, plan.W, s.width_T, prompt_len), plan))
    return sorted(out, key=lambda cp: (cp[0]["geometry"], cp[0]["prompt_len"], cp[0]["W"]))


def width_shapes(spec, device) -> list[list[dict]]:
    """The width cells as shapes, paths of one W together."""
    cells = [c for c, _ in width_cells(spec, device)]
    return [list(g) for _, g in itertools.groupby(cells, key=lambda c: tuple(c[f] for f in SHAPE_FIELDS))]


def depth_lineage_shapes(spec, device) -> list[list[dict]]:
    """The depth grid again for each of depth_lineages (less the run's own lineage), in the grid's order."""
    from sweeps.spec import make_cell
    s = BeamScalingSettings(**spec.settings)
    shapes = []
    for lineage in dict.fromkeys(s.depth_lineages):
        if lineage == spec.lineage:
            continue
        for geo_name, geo in spec.geometries.items():
            for R, W, T, pl in itertools.product(spec.R, spec.W, spec.T, spec.prompt_len):
                prompt_len = default_prompt_len(device) if pl is None else pl
                shapes.append([make_cell(spec, path, geo_name, geo, R, W, T, prompt_len, lineage=lineage)
                               for path in spec.paths])
    return shapes


def extra_shapes(spec, device) -> list[list[dict]]:
    """The suite's cells beyond its grid (sweeps.runners.RUNNER_SHAPES): the depth grid of every other lineage,
    then the width cells."""
    return depth_lineage_shapes(spec, device) + width_shapes(spec, device)


# ---------------------------------------------------------------- the runner

def run_cells(cfg, cells: list[dict], ctx: RunContext) -> Iterator[dict]:
    from sweeps.spec import validate
    spec = validate(cfg)
    settings = BeamScalingSettings(**spec.settings)
    plans = {c["config_hash"]: p for c, p in width_cells(spec, ctx.device)}

    def measure(cell, wl, ref, ctx):
        row = run_cell(cell, wl, ref, ctx)
        if cell["R"] in spec.R and cell["W"] in spec.W and cell["T"] in spec.T and row["status"] == "ok":
            _per_step(cell, row, wl, ref, ctx, settings)
        return row

    for _, group in itertools.groupby(cells, key=lambda c: tuple(c[f] for f in SHAPE_FIELDS)):
        for row in _run_shape(list(group), ctx, measure=measure, reference=bounded_reference):
            if row["config_hash"] in plans:
                _width_row(ctx, row, plans[row["config_hash"]])
            yield row


def bounded_reference(wl) -> torch.Tensor:
    """The FP32 FullState reference; on a GPU where one request's W states (with the update's temporaries) would
    take more than half the free memory, along ancestral chains in blocks of beams that fit."""
    per_beam = REF_STATE_COPIES * wl.geometry.state_bytes
    if wl.device.type != "cuda" or per_beam * wl.W <= device_free_bytes(wl.device) // 2:
        return fullstate_decode(wl)
    return fullstate_decode(wl, beams=max(1, device_free_bytes(wl.device) // 2 // per_beam))


def step_costs(path, wl) -> Optional[list[dict]]:
    """Compulsory bytes and FLOPs of each step alone, step 0 first: that step's terms of the path's cost model
    (artifact.cost gives every cost step by step; step 0's holds what the decode does once, e.g. a checkpoint
    copy)."""
    cost = path.cost(wl)
    if cost is None:
        return None
    return [{"compulsory_bytes": b, "flops": f, "rate": cost["rate"]}
            for b, f in zip(cost["step_bytes"], cost["step_flops"])]


def step_floors(costs: list[dict], ceilings: dict) -> list[tuple[float, str]]:
    """(floor in ms, its bound) of each step of `step_costs` on the GPU whose `ceilings` these are."""
    return [floor_ms(c["compulsory_bytes"], c["flops"], ceilings, c["rate"]) for c in costs]


def _per_step(cell: dict, row: dict, wl, ref, ctx: RunContext, settings: BeamScalingSettings) -> None:
    """Gate and time each step of the cell's decode on its own; one line of the steps side table. A per-step
    failure leaves the cell's whole-decode row as measured and is noted in its reason."""
    T = cell["T"]
    side = {k: cell.get(k) for k in ("config_hash", "run_id", "path", "geometry", "R", "W", "T", "O")}
    side.update(step=T - 1, latency_ms=row.get("latency_ms"))
    phase = phase_clock(ctx)
    with phase("setup"):
        path = get_path(cell["path"])
    try:
        res = check_and_time_steps(path, wl, ref, tolerance=path_tolerance(path, ctx.tolerance),
                                   repeats=settings.step_repeats, warmup=settings.step_warmup, time_it=ctx.time_it,
                                   phase=phase)
    except torch.cuda.OutOfMemoryError as e:
        path = None
        with phase("release"):
            free_device_memory(ctx.device)
        side.update(status="skipped", reason=one_line(f"out of memory: {e}"))
    except Exception as e:  # noqa: BLE001 - recorded beside the cell, and the sweep goes on
        side.update(status="failed", reason=one_line(f"{type(e).__name__}: {e}"))
    else:
        side.update(status=res.status, reason=res.reason, max_abs_err=res.max_abs_err, timer=res.timer)
        if res.steps:
            last = res.steps[-1]
            side.update(step_ms=last.median_ms, step_p20_ms=last.p20_ms, step_p80_ms=last.p80_ms,
                        steps_sum_ms=sum(t.median_ms for t in res.steps),
                        steps_ms=";".join(f"{t.median_ms:.6g}" for t in res.steps))
    try:
        costs = step_costs(get_path(cell["path"]), wl)
    except Exception as e:  # noqa: BLE001 - a broken cost model must not hide a measured step
        side["reason"] = one_line(f"{side.get('reason', '')} cost() raised {type(e).__name__}: {e}".strip())
        costs = None
    if costs is not None:
        cost = costs[T - 1]
        side.update(step_compulsory_bytes=cost["compulsory_bytes"], step_flops=cost["flops"])
        if ctx.ceilings:        # every step's own floor, so no step's floor is interpolated between depths
            floors = step_floors(costs, ctx.ceilings)
            side["step_floor_ms"], side["step_floor_bound"] = floors[-1]
            side["steps_floor_ms"] = ";".join(f"{ms:.6g}" for ms, _ in floors)
    if side["status"] != "ok":
        row["reason"] = one_line(f"{row.get('reason') or ''}; per-step: {side['status']}: {side['reason']}"
                                 .strip("; "))
    append_csv(ctx.results_dir / STEPS_FILE, STEPS_COLUMNS, [side])


def _width_row(ctx: RunContext, row: dict, plan: WidthPlan) -> None:
    """One line of the width side table for a width cell, whatever its status (the limit is known either way)."""
    side = {k: row.get(k) for k in ("config_hash", "run_id", "path", "geometry", "R", "W", "T", "O", "status",
                                    "latency_ms")}
    side.update(memory_bytes=plan.memory_bytes, capacity_W=plan.capacity_W, limit_W=plan.limit_W,
                limited_by=plan.limited_by, persistent_a=plan.persistent[0], persistent_b=plan.persistent[1],
                workspace_a=plan.workspace[0], workspace_b=plan.workspace[1], cell_bytes=plan.cell_bytes,
                note=plan.note)
    append_csv(ctx.results_dir / WIDTH_FILE, WIDTH_COLUMNS, [side])
