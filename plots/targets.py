"""The project's own targets beyond the paper (docs/design.md §7 lists them with their bounds), each computed
from results/ alone; REPORT.md's "Project targets" section sets each beside its bound (plots.report.targets_table).

A Target is one bound on one value: `measure(res)` returns a plots.reproduced.Measured computed by the code that
computes the same quantity for the figures and REPORT (plots.reproduced, plots.fig_beam_scaling,
plots.fig_breakdown, plots.fig_floor_geometry, plots.report's suite_wall for run times); this module only picks and
reduces. A NaN value is "not measured yet" (the rows it reads are absent; `command` makes them), or, with
`missing` set, rows that exist without giving a value, which does not meet the target.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from plots import fig_beam_scaling, fig_breakdown, fig_floor_geometry
from plots.data import Results
from plots.reproduced import Measured, index_measures, measures, native_measure, not_yet

MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured yet"
OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge, ">": operator.gt}

FIG6_COMMAND = "python -m sweeps.run suite=full_model"
BREAKDOWN_COMMAND = "python -m tools.decode_breakdown"
BEAM_COMMAND = fig_beam_scaling.COMMAND
OPERATOR_COMMAND = "python -m sweeps.run suite=operator"
RECURRENT_COMMAND = "python -m sweeps.run suite=recurrent_path"
NATIVE_COMMAND = "python -m tools.hf_generate --out results"
# A run_all.sh run's folder under results/, as committed: its stages.tsv holds one line per stage,
# "<what>\t<seconds>\t<exit status>" (run_all.sh `stage`).
QUICK_RUN, FULL_RUN = "quick", "reproduce"
STAGES = "stages.tsv"
STEP8 = 8                    # the first step the deep-step path (prep + main kernels) runs
DEPTH_T_MAX = 31             # the cumulative bound holds at every T of the depth axis up to this
K_WIDE = 256                 # the key width of the geometries held to their own median bound
COMPONENT_RATIO, COMPONENT_SLACK_MS = 1.5, 0.020    # a component meets its bound at either of these


@dataclass(frozen=True)
class Target:
    id: str
    what: str
    source: str                         # the result rows it reads
    op: str                             # OPS key: value <op> bound meets it
    bound: float
    unit: str                           # plots.report.UNIT key
    measure: Callable[[Results], Measured]
    command: str                        # what writes the rows it reads

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"target {self.id}: op {self.op!r} is not one of {sorted(OPS)}")

    def verdict(self, m: Measured) -> str:
        if m.missing:                   # rows without a value (failed, skipped), or a run with a failed stage
            return NOT_MET
        if not m.measured:
            return NOT_MEASURED
        return MET if OPS[self.op](m.value, self.bound) else NOT_MET


# ---------------------------------------------------------------- the measures

def _paper_key(key: str, mode_index: bool = False) -> Callable[[Results], Measured]:
    """A paper number's measure (plots.reproduced), in the paper's mode or the index mode."""
    return lambda res: (index_measures() if mode_index else measures())[key](res)


def _onela_breakdown(res: Results) -> pd.DataFrame:
    df = fig_breakdown.load(res.root)
    return df[df["path"] == "onela"] if len(df) else df


def _cell_name(r) -> str:
    return f"prompt {int(r.prompt_len)} O={int(r.O)}"


def decode_call_over_floor(res: Results) -> Measured:
    """OneLA's decode call (the breakdown's `total` row) / the whole model's floor, largest over the cells."""
    df = _onela_breakdown(res)
    tot = df[df["component"] == "total"] if len(df) else df
    tot = tot[(tot["floor_ms"] > 0) & np.isfinite(tot["measured_ms"])] if len(tot) else tot
    if not len(tot):
        return not_yet(["onela"])
    r = (tot["measured_ms"] / tot["floor_ms"])
    worst = tot.loc[r.idxmax()]
    return Measured(float(r.max()), f"largest over {len(r)} cells, at {_cell_name(worst)}")


def component_excess(res: Results) -> Measured:
    """The most any OneLA component's time exceeds its allowance, max(1.5 x floor, floor + 20 us), in ms (<= 0:
    every component within it), over the components with a floor (fig_breakdown.components, floor_hidden)."""
    df = _onela_breakdown(res)
    if not len(df):
        return not_yet(["onela"])
    found = []
    for _, rows in df.groupby(["prompt_len", "O"]):
        for c in fig_breakdown.components(rows):
            r = rows[rows["component"] == c].iloc[0]
            if fig_breakdown.floor_hidden(rows, c) or not (r["floor_ms"] > 0) or not np.isfinite(r["measured_ms"]):
                continue
            allow = max(COMPONENT_RATIO * r["floor_ms"], r["floor_ms"] + COMPONENT_SLACK_MS)
            found.append((r["measured_ms"] - allow, c, _cell_name(r), r["measured_ms"] / r["floor_ms"]))
    if not found:
        return not_yet(["onela"])
    ex, c, cell, ratio = max(found)
    return Measured(float(ex), f"largest over {len(found)} components x cells: {c} at {cell} ({ratio:.2f}x floor)")


def idle_per_call(res: Results) -> Measured:
    """OneLA's `idle` component (graph replay time with no kernel running), largest over the cells."""
    df = _onela_breakdown(res)
    idle = df[(df["component"] == "idle") & np.isfinite(df["measured_ms"])] if len(df) else df
    if not len(idle):
        return not_yet(["onela"])
    worst = idle.loc[idle["measured_ms"].idxmax()]
    return Measured(float(worst["measured_ms"]), f"largest over {len(idle)} cells, at {_cell_name(worst)}")


def _beam_depth(res: Results) -> pd.DataFrame:
    """The depth rows of the synthetic beam lineage (fig_beam_scaling.depth_table)."""
    return fig_beam_scaling.of_lineage(fig_beam_scaling.depth_table(res), fig_beam_scaling.BASE_LINEAGE)


def _decode_steps(res: Results) -> pd.DataFrame:
    return fig_beam_scaling.decode_steps(_beam_depth(res))


def step_over_floor(res: Results) -> Measured:
    """OneLA's per-step latency / its per-step floor, largest over every step of the deepest decode."""
    s = _decode_steps(res)
    if not len(s):
        return not_yet(["onela"])
    r = s["ms"] / s["floor_ms"]
    t = int(s.loc[r.idxmax(), "step"])
    return Measured(float(r.max()), f"largest over steps 0..{int(s['step'].max())} of the T = {len(s)} decode, at "
                                    f"step {t}; floors interpolated at {int(s['interpolated'].sum())} steps")


def step8_over_step7(res: Results) -> Measured:
    """Step 8's time / step 7's in OneLA's deepest decode."""
    s = _decode_steps(res).set_index("step")
    if STEP8 not in s.index:
        return not_yet(["onela"])
    return Measured(float(s.loc[STEP8, "ms"] / s.loc[STEP8 - 1, "ms"]),
                    f"{s.loc[STEP8, 'ms']:.3g} / {s.loc[STEP8 - 1, 'ms']:.3g} ms, the T = {len(s)} decode")


def cumulative_over_floor(res: Results) -> Measured:
    """OneLA's whole-decode latency / its floor, largest over the depth cells with T <= DEPTH_T_MAX."""
    d = _beam_depth(res)
    d = d[(d["path"] == "onela") & (d["T"] <= DEPTH_T_MAX) & (d["floor_ms"] > 0)] if len(d) else d
    if not len(d):
        return not_yet(["onela"])
    r = d["latency_ms"] / d["floor_ms"]
    return Measured(float(r.max()), f"largest over {len(r)} depths T <= {DEPTH_T_MAX}, at "
                                    f"T = {int(d.loc[r.idxmax(), 'T'])}")


def fullstate_over_onela(res: Results) -> Measured:
    """The fastest FullState path's time / OneLA's, per step (step_ms) and whole decode (latency_ms), smallest
    over every depth and lineage (> 1: OneLA is faster everywhere)."""
    depth = fig_beam_scaling.depth_table(res)
    found = []
    for lin in fig_beam_scaling.lineages(depth):
        d = fig_beam_scaling.of_lineage(depth, lin)
        fs = d[d["path"].map(fig_beam_scaling.is_fullstate)]
        one = d[d["path"] == "onela"].drop_duplicates("O", keep="last").set_index("O")
        for metric, what in (("step_ms", "per step"), ("latency_ms", "cumulative")):
            best = fs.groupby("O")[metric].min()
            for o in one.index.intersection(best.index):
                if np.isfinite(best[o]) and one.loc[o, metric] > 0:
                    found.append((float(best[o] / one.loc[o, metric]), f"{what} at O = {int(o)}, {lin} lineage"))
    if not found:
        return not_yet(["onela", "controlled_fullstate"])
    v, where = min(found)
    return Measured(v, f"smallest over {len(found)} (depth, lineage, per step / cumulative) pairs: {where}")


def _k_wide_geometries(res: Results) -> set[str]:
    op = res["operator"]
    return set(op.loc[op["K"] == K_WIDE, "geometry"]) if len(op) else set()


def median_over_floor(res: Results, column: str, geometries: set[str] | None) -> Measured:
    """OneLA's median latency / `column` over the operator shapes of `geometries` (None: all)
    (fig_floor_geometry.floor_ratios)."""
    per = fig_floor_geometry.floor_ratios(res, column)
    vals = [v for g, v in per.items() if geometries is None or g in geometries]
    vals = np.concatenate(vals) if vals else np.array([])
    if not len(vals):
        return not_yet(["onela"])
    names = "" if geometries is None else " of " + ", ".join(sorted(g for g in per if g in geometries))
    return Measured(float(np.median(vals)), f"median over {len(vals)} operator shapes{names}")


def run_minutes(res: Results, folder: str) -> Measured:
    """A run_all.sh run's stage times (results/<folder>/stages.tsv) summed, in minutes."""
    path = Path(res.root) / folder / STAGES
    if not path.is_file():
        return Measured(math.nan, f"no {folder}/{STAGES} in the results folder")
    secs, failed, n = 0.0, [], 0
    for line in path.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        n += 1
        secs += float(parts[1])
        if parts[2].strip() != "0":
            failed.append(parts[0])
    note = f"{n} stages summed" + (f"; exit status not 0 in: {', '.join(failed)}" if failed else "")
    return Measured(secs / 60, note, "failed" if failed else "")


def _native(column: str, what: str) -> Callable[[Results], Measured]:
    return lambda res: native_measure(res, column, what)


# ---------------------------------------------------------------- the list
_FIG6 = "results/full_model.csv (R=4 W=256, prompt 1K and 5K, O=3-7)"
_BREAKDOWN = f"results/{fig_breakdown.CSV_NAME}, OneLA"
_STEPS = (f"results/{fig_beam_scaling.STEPS_CSV}, OneLA, R=4 W=512 qwen3_5_0_8b, beam lineage: the deepest decode's "
          "steps (steps_ms) against each step's own floor (steps_floor_ms; in tables without it, the depths' last "
          "steps' floors, interpolated)")
_DEPTH = f"results/{fig_beam_scaling.SUITE}.csv, OneLA, R=4 W=512 qwen3_5_0_8b, beam lineage"

TARGETS: list[Target] = [
    Target("fig6_index", "Fig 6: OneLA over Controlled FullState, index mode, at every point (smallest)",
           _FIG6, ">=", 3.0, "x", _paper_key("fig6.speedup_vs_controlled.min", True), FIG6_COMMAND),
    Target("fig6_paper", "Fig 6: OneLA over Controlled FullState, paper mode, at every point (smallest)",
           _FIG6, ">=", 5.0, "x", _paper_key("fig6.speedup_vs_controlled.min"), FIG6_COMMAND),
    Target("fig6_controlled_vllm_paper", "Fig 6: Controlled FullState's distance to vLLM FullState, paper mode "
           "(largest)", _FIG6, "<=", 10.0, "%", _paper_key("fig6.controlled_vs_vllm.max"),
           FIG6_COMMAND),
    Target("fig6_controlled_vllm_index", "Fig 6: Controlled FullState's distance to vLLM FullState, index mode "
           "(largest)", _FIG6, "<=", 10.0, "%",
           _paper_key("fig6.controlled_vs_vllm.max", True), FIG6_COMMAND),
    Target("decode_call_floor", "OneLA's decode call / its floor at the Fig 6 cells (largest)", f"{_BREAKDOWN}, `total` rows", "<=", 1.25, "x", decode_call_over_floor, BREAKDOWN_COMMAND),
    Target("component_floor", "every decode-call component above max(1.5x its floor, floor + 20 us) by at most "
           "(largest excess)", f"{_BREAKDOWN}, components with a floor", "<=", 0.0, "ms",
           component_excess, BREAKDOWN_COMMAND),
    Target("idle", "graph idle time per decode call (largest)", f"{_BREAKDOWN}, `idle` rows", "<=",
           0.050, "ms", idle_per_call, BREAKDOWN_COMMAND),
    Target("kernel_r4_o3", "OneLA kernel time at R=4 W=512 O=3 (Qwen3.5-0.8B)", "results/recurrent_path.csv", "<=", 0.038, "ms", _paper_key("fig8a.latency.onela.O3"), RECURRENT_COMMAND),
    Target("kernel_r4_o7", "OneLA kernel time at R=4 W=512 O=7 (Qwen3.5-0.8B)", "results/recurrent_path.csv", "<=", 0.17, "ms", _paper_key("fig8a.latency.onela.O7"), RECURRENT_COMMAND),
    Target("kernel_r16_o3", "OneLA kernel time at R=16 W=512 O=3 (Qwen3.5-0.8B)", "results/operator.csv", "<=", 0.15, "ms", _paper_key("fig7a.onela_largest_qwen.O3"), OPERATOR_COMMAND),
    Target("kernel_r16_o7", "OneLA kernel time at R=16 W=512 O=7 (Qwen3.5-0.8B)", "results/operator.csv", "<=", 0.69, "ms", _paper_key("fig7a.onela_largest_qwen.O7"), OPERATOR_COMMAND),
    Target("step_floor", "OneLA's per-step latency / its per-step floor at every step 0..30 (largest)", _STEPS, "<=", 2.0, "x", step_over_floor, BEAM_COMMAND),
    Target("step8", "OneLA's step 8 / step 7", _STEPS, "<=", 1.15, "x", step8_over_step7, BEAM_COMMAND),
    Target("cumulative_floor", f"OneLA's whole-decode latency / its floor at every T <= {DEPTH_T_MAX} (largest)",
           _DEPTH, "<=", 1.6, "x", cumulative_over_floor, BEAM_COMMAND),
    Target("depth_vs_fullstate", "the fastest FullState path / OneLA at every measured depth, per step and "
           "cumulative, every lineage (smallest)", f"results/{fig_beam_scaling.SUITE}.csv and {fig_beam_scaling.STEPS_CSV}", ">", 1.0, "x",
           fullstate_over_onela, BEAM_COMMAND),
    Target("k256_floor", f"OneLA's median latency / floor_ms over the K = {K_WIDE} geometries' operator shapes",
           "results/operator.csv, OneLA", "<=", 1.6, "x",
           lambda res: median_over_floor(res, "floor_ms", _k_wide_geometries(res)), OPERATOR_COMMAND),
    Target("launch_floor", "OneLA's median latency / launch_floor_ms over every operator shape (no regression from "
           "the committed kernels' 1.32, at two decimals)", "results/operator.csv, OneLA", "<=", 1.325, "x",
           lambda res: median_over_floor(res, "launch_floor_ms", None), OPERATOR_COMMAND),
    Target("hf_prefill", "OneLA inside transformers over stock generate, prefill (smallest over the Fig 6 cells)",
           "results/hf_generate.csv and hf_generate_times.csv", ">=", 50.0, "x",
           _native("hf_prefill_x", "prefill GPU time, same run"), NATIVE_COMMAND),
    Target("hf_decode_wall", "OneLA inside transformers over stock generate, wall time per decode call (smallest "
           "over the Fig 6 cells)", "results/hf_generate.csv and hf_generate_times.csv", ">=", 5.0, "x",
           _native("hf_wall_x", "wall time per decode call, same run"), NATIVE_COMMAND),
    Target("run_all_quick", "`./run_all.sh quick` on one H200, stage times summed", f"results/{QUICK_RUN}/{STAGES}", "<=", 10.0, "min", lambda res: run_minutes(res, QUICK_RUN),
           "./run_all.sh quick"),
    Target("run_all_full", "`./run_all.sh` on one H200 from a clean clone, stage times summed", f"results/{FULL_RUN}/{STAGES} (a full run's folder, outputs/reproduce/<stamp>/, committed)", "<=", 30.0,
           "min", lambda res: run_minutes(res, FULL_RUN), "./run_all.sh"),
]
BY_ID = {t.id: t for t in TARGETS}


def evaluate(res: Results) -> list[tuple[Target, Measured, str]]:
    """(target, its measured value, its verdict) for every target, in TARGETS' order."""
    out = []
    for t in TARGETS:
        m = t.measure(res)
        out.append((t, m, t.verdict(m)))
    return out

