"""Figure 6 runner (paper §4.2): full-model decode-forward GPU time of a large-beam SID search, per path.

`run_cells(cfg, cells, ctx)` is the `full_model` suite's cell runner (contract: sweeps.context), run by
`python -m sweeps.run suite=full_model` (the Fig 6 grid: sweeps/conf/suite/full_model.yaml). Per cell
(path, R, W, T, prompt_len, seed) on the Qwen3.5-0.8B geometry with seeded random weights, the measurement of
artifact.model.cell (shared with tools.decode_breakdown):
  1. prefill the R seeded prompts once per (prompt_len, seed), and a decoy prompt set of the same shapes;
  2. gated_decode: build the path's BeamDecoder, capture its T per-call CUDA graphs while the decoy prompt is
     loaded, load the real prompt, poison every stepper output, replay one whole beam search on the graphs and
     gate every GDN layer's outputs against the FP32 FullState reference (artifact.model.stepper_gate) at
     ctx.tolerance -- a failing cell is recorded and never timed;
  3. time (artifact.model.graphs.time_decode, through artifact.timing.time_events): latency_ms = decode-forward
     GPU time summed over the T calls (CUDA events around each call's graph replay; beam selection excluded;
     median / p20 / p80 over `repeats` whole searches).
On a GPU the non-recurrent ops are fused with torch.compile (artifact.model.blocks); if compiling fails on the
first cell the run continues eager, and every row's `timer` names the pipeline and prompt-attention kernel.
persistent_bytes / written_bytes are the steppers' recurrent state (all GDN layers). The figure's numbers
(speedups, distances) are computed from the rows by plots.reproduced.
Wall-record phases (sweeps.context.RunContext.phase): the model and the prefills under INPUTS (setup), then per
cell the path's set-up, `capture` (gated_decode: the decoder's build, torch.compile on the first cell, the graph
capture and the one gated search, which that call does together), `timing`, and after the cell a memory release
under RELEASE where it is needed (artifact.measure.release_where_needed: tensors still hold more than before the
cell, or the allocator's cache exceeds a tenth of the device).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from artifact.measure import allocated_bytes, cuda_context_alive, release_where_needed
from artifact.model.cell import VLLM_ALIGN_BLOCK_QWEN3_5_0_8B, FullModelInputs, gated_decode, uses_graphs
from artifact.model.decode import BeamDecoder
from artifact.model.network import HybridModel
from artifact.paths import get_path
from artifact.workload import Shape
from sweeps.context import phase_clock

# Wall-record labels of the work no cell owns: the model and the prefills its cells share, and returning memory.
INPUTS = "(model + prompt prefills)"
RELEASE = "(memory release between cells)"

# A correctness-only run of the grid's plumbing on a CPU: the tiny model, on a geometry of its GDN shape.
CPU_RUN = ("python -m sweeps.run suite=full_model geometry=smoke_gqa geometry.smoke_gqa.v=16 full_model.model=tiny "
           "full_model.cpu=true 'shape.R=[2]' 'shape.W=[4]' 'shape.prompt_len=[9]'")


@dataclass
class FullModelSettings:
    """The suite's own knobs, read from the config's optional `full_model` section (defaults otherwise)."""

    model: str | None = None          # model preset; None = the cell's geometry name (qwen3_5_0_8b)
    checkpoint: str | None = None     # a local Hugging Face-layout folder to load instead of random weights
    dtype: str = "bfloat16"
    repeats: int = 10                 # timed beam searches per cell
    warmup: int = 2
    replay_block: int = VLLM_ALIGN_BLOCK_QWEN3_5_0_8B
    attention: str = "auto"           # prompt-attention kernel: auto | flash | efficient | math
    compile: bool | None = None       # fuse the non-recurrent ops with torch.compile; None = on a GPU only
    cpu: bool = False                 # allow a CPU run (correctness only; sensible only with model=tiny)
    profile: str | None = None        # a folder: per cell, a table of time per kernel over one search (profile_search)

    @classmethod
    def from_cfg(cls, cfg) -> "FullModelSettings":
        section = None
        try:
            section = cfg.get("full_model") if hasattr(cfg, "get") else getattr(cfg, "full_model", None)
        except Exception:  # noqa: BLE001 - a struct config without the key
            section = None
        if not section:
            return cls()
        known = {f.name for f in dataclasses.fields(cls)}
        values = dict(section)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"full_model settings: unknown key(s) {unknown}; known: {sorted(known)}")
        out = cls(**values)
        for name in ("repeats", "warmup", "replay_block"):
            val = getattr(out, name)
            if not isinstance(val, int) or val < (0 if name == "warmup" else 1):
                raise ValueError(f"full_model.{name} must be a positive int, got {val!r}")
        return out


def _row(cell: dict, status: str, reason: str = "", **measured) -> dict:
    reason = " ".join(str(reason).split())
    return {**cell, "status": status, "reason": reason[:400], **measured}


class _Inputs(FullModelInputs):
    """The run's model and prefills (artifact.model.cell), and whether this run compiles the pipeline."""

    def __init__(self, settings: FullModelSettings, device):
        super().__init__(device, settings.checkpoint, settings.dtype, settings.replay_block)
        self.settings = settings
        self.compile = settings.compile if settings.compile is not None else self.device.type == "cuda"
        self.compile_error = ""       # set when torch.compile failed on the first cell and the run went eager
        self.compiled_ok = False

    def cell_model(self, cell) -> HybridModel:
        """The model of a cell, checked against the GDN geometry the cell names."""
        preset = self.settings.model or cell["geometry"]
        m = self.model(preset, cell["seed"])
        geo = m.cfg.geometry
        if (geo.hk, geo.hv, geo.k, geo.v) != (cell["HK"], cell["HV"], cell["K"], cell["V"]):
            raise ValueError(f"model {preset!r} has GDN geometry {geo}, but the cell asks for HK={cell['HK']} "
                             f"HV={cell['HV']} K={cell['K']} V={cell['V']}")
        return m


def run_cells(cfg, cells: list[dict], ctx) -> Iterator[dict]:
    """One results row per cell (any order: cells sharing a prompt run together so its prefill is reused)."""
    private_inductor_cache()
    settings = FullModelSettings.from_cfg(cfg)
    inputs = _Inputs(settings, ctx.device)
    order = sorted(range(len(cells)), key=lambda i: (cells[i]["seed"], cells[i]["R"], cells[i]["prompt_len"],
                                                     cells[i]["W"], cells[i]["T"]))
    phase = phase_clock(ctx)
    for i in order:
        cell = cells[i]
        ctx.started(cell)
        held = allocated_bytes(ctx.device)
        row = _run_cell(cell, settings, inputs, ctx)
        lost = row["status"] == "failed" and not cuda_context_alive(ctx.device)
        if not lost:
            with phase("release", shared=RELEASE):
                release_where_needed(ctx.device, held)
        yield row
        if lost:
            raise RuntimeError(f"CUDA context unusable after {cell['path']} failed ({row['reason'][:200]}); "
                               "re-run the same command to continue with the remaining cells")


def private_inductor_cache() -> str:
    """Give this process its own, empty Inductor cache (TORCHINDUCTOR_CACHE_DIR) unless one is set, so every
    compiled kernel's launch config is autotuned in this run, never read from what another run (another code
    version, or a concurrent run on the other GPU) left in the shared default cache. Hygiene only: a cache
    does not make Inductor's autotune choice repeatable, since that choice rests on noisy first-call timings
    in every process, cache or not (results/full_model_inductor_conv/autotune_log/)."""
    import os
    import tempfile

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")     # Inductor writes its default here once it has used it
    if not given or os.path.abspath(given) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="onela_inductor_")
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


def _run_cell(cell: dict, settings: FullModelSettings, inputs: _Inputs, ctx) -> dict:
    on_gpu = torch.device(ctx.device).type == "cuda"
    if not on_gpu and not settings.cpu:
        return _row(cell, "skipped", "full_model needs a CUDA GPU (the 0.8B model at W=256 beams); a CPU run of "
                                     f"the tiny model: {CPU_RUN}")
    phase = phase_clock(ctx)
    try:
        with phase("setup"):
            path = get_path(cell["path"])
        with phase("setup", shared=INPUTS):
            model = inputs.cell_model(cell)
        with phase("setup"):
            reason = path.supports(model.cfg.geometry, Shape(cell["R"], cell["W"], cell["T"]), ctx.device)
    except Exception as e:  # noqa: BLE001
        return _row(cell, "failed", f"setup: {type(e).__name__}: {e}")
    if reason:
        return _row(cell, "skipped", reason)
    try:
        # the prefills gated_decode loads (inputs keeps them for the cells that share them), built here so that
        # their time is booked as shared set-up; a failure is recorded as gated_decode's would be
        with phase("setup", shared=INPUTS):
            if uses_graphs(model, cell["path"]):
                inputs.prompt(model, cell["R"], cell["prompt_len"], cell["seed"], decoy=True)
            inputs.prompt(model, cell["R"], cell["prompt_len"], cell["seed"])
    except torch.cuda.OutOfMemoryError as e:
        return _row(cell, "skipped", f"out of memory: {e}")
    except Exception as e:  # noqa: BLE001
        return _row(cell, "failed", f"{type(e).__name__}: {e}")
    row = _measure(cell, settings, inputs, ctx, model, inputs.compile)
    if inputs.compile_error and inputs.compile and not inputs.compiled_ok:
        # torch.compile is only a fusion of the fixed pipeline: if it breaks on the first cell, the whole run
        # goes eager (recorded in every row's timer) rather than mixing fused and unfused cells.
        inputs.compile = False
        row = _measure(cell, settings, inputs, ctx, model, False)
    elif row["status"] == "ok" and inputs.compile:
        inputs.compiled_ok = True
    return row


def _measure(cell, settings, inputs, ctx, model, compile: bool) -> dict:
    phase = phase_clock(ctx)
    try:
        with phase("capture"):     # the decoder's build, first calls (torch.compile) and capture, and the gated search
            gated = gated_decode(inputs, model, cell["path"], cell["R"], cell["W"], cell["T"], cell["prompt_len"],
                                 cell["seed"], ctx.tolerance, attention=settings.attention, compile=compile)
        dec, graphs = gated.decoder, gated.graphs
        pipeline = dec.ops.label + (f" (torch.compile failed: {inputs.compile_error})" if inputs.compile_error
                                    else "")
        on_gpu = model.device.type == "cuda"
        row = _row(cell, "ok", max_abs_err=gated.max_abs_err, tolerance=ctx.tolerance,
                   persistent_bytes=dec.persistent_bytes(), written_bytes=dec.written_bytes())
        if not gated.passed:
            row.update(status="failed", reason=gated.reason)
            return row
        if on_gpu and ctx.time_it:
            with phase("timing"):
                t = gated.time(settings.repeats, settings.warmup)
            row.update(latency_ms=t.median_ms, p20_ms=t.p20_ms, p80_ms=t.p80_ms,
                       timer=(f"{'cuda_graph_per_call' if graphs else 'eager(not capturable)'}+cuda_events(sum over "
                              f"T calls, median of {settings.repeats} "
                              f"searches, warmup {settings.warmup}; beam selection excluded; "
                              f"pipeline {pipeline}; prompt attention {dec.attn_impl})"))
        else:
            row["timer"] = "none (CPU: correctness only)" if not on_gpu else "not timed"
        _add_floor(row, cell, dec, gated.result, ctx)
        if settings.profile:
            name = f"{cell['path']}_R{cell['R']}_W{cell['W']}_L{cell['prompt_len']}_O{cell['T'] + 1}.txt"
            profile_search(dec, graphs, Path(settings.profile) / name)
        return row
    except torch.cuda.OutOfMemoryError as e:
        return _row(cell, "skipped", f"out of memory: {e}")
    except Exception as e:  # noqa: BLE001 - recorded, and the sweep goes on
        if compile and type(e).__module__.startswith(("torch._dynamo", "torch._inductor")):
            inputs.compile_error = " ".join(f"{type(e).__name__}: {e}".split())[:160]
        return _row(cell, "failed", f"{type(e).__name__}: {e}")


def _add_floor(row: dict, cell: dict, dec: BeamDecoder, result, ctx) -> None:
    """compulsory_bytes / flops / floor_ms / floor_bound of this search (artifact.model.cost); a cost model
    that raises is noted in the reason and never hides the measured latency."""
    from artifact.model.cost import decode_floor
    try:
        tail = getattr(dec.steppers[0], "replay_tail_len", None) if dec.steppers else None
        row.update(decode_floor(dec.model, get_path(cell["path"]), cell["R"], cell["W"], cell["T"],
                                cell["prompt_len"], result.parents, getattr(ctx, "ceilings", None), tail_len=tail))
    except Exception as e:  # noqa: BLE001
        row["reason"] = " ".join(f"{row.get('reason', '')} floor: {type(e).__name__}: {e}".split())


def profile_search(dec: BeamDecoder, graphs: bool, out: Path, top: int = 40) -> str:
    """Where one whole beam search spends its time, per kernel (torch.profiler; on a GPU the CUDA activity,
    graph replays included where CUPTI traces them). Not a timer: profiling adds overhead; the table is for
    deciding what to optimise, and is written to `out`."""
    from torch.profiler import ProfilerActivity, profile
    on_gpu = dec.model.device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=acts) as prof:
        dec.run(use_graphs=graphs)
        if on_gpu:
            torch.cuda.synchronize()
    keys = ("self_device_time_total", "self_cuda_time_total") if on_gpu else ("self_cpu_time_total",)
    table = None
    for key in keys:
        try:
            table = prof.key_averages().table(sort_by=key, row_limit=top)
            break
        except (AttributeError, KeyError, ValueError):
            continue
    table = table or prof.key_averages().table(row_limit=top)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table)
    return table
