"""Not in the paper: where one decode call of the Fig 6 model spends its GPU time, per component, beside each
component's roofline floor (results/full_model_breakdown.csv, written by `python -m tools.decode_breakdown`).

One panel per prompt length; per component one bar per path (OneLA, Controlled FullState: measured device time
per decode call, the mean over the T calls of one search) with a black tick at that component's floor
(max(bytes / copy bandwidth, FLOPs / matrix rate), artifact.model.cost.component_costs). The bold label is
measured / floor. "idle" is the graph replay's time with no kernel running; the panel title gives each path's
call time as Fig 6 times it and the whole-model floor. Where the table also holds an earlier run of a cell (the
tool keeps each code's run: `tools.decode_breakdown`), the first one recorded is the "first run": a dashed outline
per component and a column in REPORT, the breakdown before the changes since. `report_lines` writes the
REPORT.md section: the table and the components furthest above their floors.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from plots.data import Results, side_frame
from plots.style import colour, display_name, hatch, mark_series, no_data, ordered, save

STEM = "fig_breakdown"
CSV_NAME = "full_model_breakdown.csv"
NOT_MEASURED = "not measured yet"
SUMMARY = ("span", "total")               # rows that are not components
LOG_SPREAD = 30
# Element-wise parts that move activations. Runs of the model whose floor counted weights alone (they also have a
# separate conv_state component) give these a weights-only floor, so their measured / floor is not shown there;
# the model's floor now counts activation bytes (artifact/model/cost.py activation_bytes).
ACTIVATION_BOUND = ("gdn_conv", "gdn_norm", "attn_qk_norm_rope", "norms")
WEIGHTS_ONLY_MARK = "conv_state"


def floor_hidden(rows: pd.DataFrame, component: str) -> bool:
    """Whether `component`'s floor in these rows (one run's cell) counts weights alone (see ACTIVATION_BOUND)."""
    return component in ACTIVATION_BOUND and WEIGHTS_ONLY_MARK in set(rows["component"])

NUMERIC = ("R", "W", "T", "O", "prompt_len", "measured_ms", "floor_ms", "bytes", "flops", "ops", "max_abs_err")


CELL = ["path", "prompt_len", "O"]
FIRST_RUN = "first run"


def _run_rows(root, which: str) -> pd.DataFrame:
    """The rows of one run per (path, prompt_len, O): the latest ("max" run_id; ids sort by their UTC stamp), or
    the first ("min") where the cell also has a later run. Empty if there is no file (or no such run)."""
    df = side_frame(root, CSV_NAME, lambda c: c in NUMERIC)
    if not len(df):
        return df
    runs = df.groupby(CELL)["run_id"]
    keep = df["run_id"] == runs.transform(which)
    if which == "min":
        keep &= runs.transform("nunique") > 1
    return df[keep].drop_duplicates([*CELL, "component"], keep="last").reset_index(drop=True)


def load(root) -> pd.DataFrame:
    """The breakdown rows of the latest run per (path, prompt_len, O); an empty frame if there is no file."""
    return _run_rows(root, "max")


def load_first(root) -> pd.DataFrame:
    """The rows of the first run recorded per (path, prompt_len, O) where the table holds a later one too: the
    breakdown before the code that measured the latest. Empty where every cell has one run."""
    return _run_rows(root, "min")


def _in_cell(df: pd.DataFrame, prompt, o) -> pd.DataFrame:
    """df's rows of the cell (prompt_len, O); df itself when empty (a frame without columns)."""
    return df[(df["prompt_len"] == prompt) & (df["O"] == o)] if len(df) else df


def _first_label(first: pd.DataFrame) -> str:
    commits = sorted({str(c)[:12] for c in first["git_commit"]}) if "git_commit" in first else []
    return f"{FIRST_RUN} ({', '.join(commits) or 'unknown commit'})"


def components(df: pd.DataFrame) -> list[str]:
    """Components in the CSV's order, leaving out those with neither time nor floor in every row."""
    comp = df[~df["component"].isin(SUMMARY)]
    keep = comp.groupby("component", sort=False)[["measured_ms", "floor_ms"]].max().fillna(0).sum(axis=1) > 0
    return [c for c in comp["component"].drop_duplicates() if keep.get(c, False)]


def _value(df, path, comp, col) -> float:
    r = df[(df["path"] == path) & (df["component"] == comp)]
    return float(r[col].iloc[0]) if len(r) and pd.notna(r[col].iloc[0]) else math.nan


def _prompt_label(n) -> str:
    return f"prompt {int(n) // 1024}K" if n % 1024 == 0 else f"prompt {int(n)}"


def draw(res: Results):
    df = load(res.root)
    if not len(df):
        fig, ax = plt.subplots(figsize=(9, 4))
        ax.set_title("Where a decode call's time goes (per component vs its floor; not a paper figure)")
        no_data(ax, f"no {CSV_NAME} yet\n(python -m tools.decode_breakdown)")
        return fig
    earlier = load_first(res.root)
    cells = sorted(df[["prompt_len", "O"]].drop_duplicates().itertuples(index=False))
    comps = components(df)
    paths = ordered(df["path"].unique())
    fig, axes = plt.subplots(1, len(cells), figsize=(6.4 * len(cells), 0.22 * len(comps) * len(paths) + 2.4),
                             squeeze=False, sharey=True)
    first = df.iloc[0]
    fig.suptitle(f"Where a decode call's time goes ({first['model']}, R={int(first['R'])}, W={int(first['W'])}): "
                 f"device time per call vs floor, per component (not a paper figure)")
    height = 0.8 / len(paths)
    for ax, (prompt, o) in zip(axes[0], cells):
        rows = _in_cell(df, prompt, o)
        before = _in_cell(earlier, prompt, o)
        heads = []
        for i, p in enumerate(paths):
            ys = [j - 0.4 + height * (i + 0.5) for j in range(len(comps))]
            vals = [_value(rows, p, c, "measured_ms") for c in comps]
            drawn = [(y, v) for y, v in zip(ys, vals) if math.isfinite(v) and v > 0]
            bars = ax.barh([y for y, _ in drawn], [v for _, v in drawn], height * 0.92, color=colour(p),
                           edgecolor="black", linewidth=0.4, label=display_name(p), hatch=hatch(p))
            mark_series(bars, p)
            was = [(y, _value(before, p, c, "measured_ms")) for y, c in zip(ys, comps)] if len(before) else []
            was = [(y, v) for y, v in was if math.isfinite(v) and v > 0]
            for a in ax.barh([y for y, _ in was], [v for _, v in was], height * 0.92, fill=False,
                             edgecolor=colour(p), linestyle=(0, (3, 2)), linewidth=0.9, zorder=3):
                a.set_gid(f"{FIRST_RUN}:{p}")
            for y, c, v in zip(ys, comps, vals):
                f = _value(rows, p, c, "floor_ms")
                if math.isfinite(f) and f > 0 and not floor_hidden(rows, c):
                    ax.vlines(f, y - height / 2, y + height / 2, colors="black", linewidth=1.6, zorder=4)
                    if math.isfinite(v) and v > 0:
                        ax.annotate(f"{v / f:.1f}×", (v, y), xytext=(3, 0), textcoords="offset points",
                                    va="center", fontsize=7, fontweight="bold", color=colour(p))
            tot, fl = _value(rows, p, "total", "measured_ms"), _value(rows, p, "total", "floor_ms")
            then = _value(before, p, "total", "measured_ms") if len(before) else math.nan
            heads.append(f"{display_name(p)} {tot:.2f} ms (floor {fl:.2f}"
                         + (f"; {FIRST_RUN} {then:.2f})" if math.isfinite(then) else ")"))
        ax.set_title(f"{_prompt_label(prompt)}, O={int(o)}\n" + "\n".join(heads), fontsize=9)
        ax.set_yticks(range(len(comps)), comps)
        if ax is axes[0][0]:
            ax.invert_yaxis()                   # the panels share y: once for all, first component on top
        vals = rows[rows["component"].isin(comps)][["measured_ms", "floor_ms"]].to_numpy().ravel()
        vals = vals[np.isfinite(vals) & (vals > 0)]
        if len(vals) and vals.max() > LOG_SPREAD * vals.min():
            ax.set_xscale("log")
            ax.set_xlabel("ms per decode call (log); tick: floor; label: measured / floor")
        else:
            ax.set_xlabel("ms per decode call; tick: floor; label: measured / floor")
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if len(earlier):
        handles.append(Patch(fill=False, edgecolor="black", linestyle=(0, (3, 2)), linewidth=0.9))
        labels.append(f"dashed: {_first_label(earlier)}")
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, bbox_to_anchor=(0.5, -0.01))
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)


def _ms(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{v:.3g}"


def _ratio(m: float, f: float) -> str:
    return f"{m / f:.1f}×" if math.isfinite(m) and math.isfinite(f) and f > 0 else "—"


def report_lines(root) -> list[str]:
    """REPORT.md's section: per cell, every component's measured ms per call, floor and ratio for each path,
    and each path's components with the most time above their floors."""
    df = load(root)
    if not len(df):
        return [f"{NOT_MEASURED} (`results/{CSV_NAME}`: `python -m tools.decode_breakdown`)."]
    earlier = load_first(root)
    paths = ordered(df["path"].unique())
    comps = components(df)
    out = [f"From `results/{CSV_NAME}` (`tools.decode_breakdown`, run(s) "
           f"{', '.join(sorted(df['run_id'].unique()))}): device time per decode call (mean over the T calls), "
           "the component's floor (max(bytes / copy bandwidth, FLOPs / matrix rate), the run's measured "
           "ceilings) and measured / floor. `total` is the call as Fig 6 times it, beside the whole-model floor; "
           "`span` the profiled replay's first-to-last kernel time; `idle` its time with no kernel running. "
           "ancestry and embed have no floor (index updates; tied embeddings: no separate embedding read), and "
           "kv_state's floor is copy mode's fork of each beam's earlier decode K/V (none in ancestry mode; runs "
           "whose floors predate that count show no floor there) (artifact/model/cost.py). Runs whose model "
           "kept the FullState conv windows in a component of their own (conv_state, no floor) counted weights "
           "alone in the floors of gdn_conv, gdn_norm, attn_qk_norm_rope and norms, so those runs leave these "
           "parts' measured / floor out ('—'); later runs' floors count the activation bytes each part moves." + (
               f" `{FIRST_RUN} ms`: the first run the table holds of the same cell (run(s) "
               f"{', '.join(sorted(earlier['run_id'].unique()))}; {_first_label(earlier)}), measured by the code "
               "before the changes since." if len(earlier) else ""), ""]
    for (prompt, o), rows in df.groupby(["prompt_len", "O"]):
        before = _in_cell(earlier, prompt, o)
        was = [p for p in paths if len(before) and (before["path"] == p).any()]
        header = ["component"]
        for p in paths:
            header += [f"{display_name(p)} ms", "floor ms", "× floor"] + ([f"{FIRST_RUN} ms"] if p in was else [])
        table = []
        for c in [*comps, *SUMMARY]:
            line = [c]
            for p in paths:
                m, f = _value(rows, p, c, "measured_ms"), _value(rows, p, c, "floor_ms")
                line += [_ms(m), _ms(f), "—" if floor_hidden(rows, c) else _ratio(m, f)]
                line += [_ms(_value(before, p, c, "measured_ms"))] if p in was else []
            table.append(line)
        out += [f"**{_prompt_label(prompt)}, O={int(o)}** (method: "
                f"{', '.join(sorted(rows['method'].astype(str).unique()))})", "",
                "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(line) + " |" for line in table]
        for p in paths:
            r = rows[(rows["path"] == p) & rows["component"].isin(comps)].copy()
            r.loc[[floor_hidden(rows, c) for c in r["component"]], "floor_ms"] = float("nan")
            r["excess"] = r["measured_ms"] - r["floor_ms"].fillna(0)
            top = r.sort_values("excess", ascending=False).head(4)
            out.append(f"- {display_name(p)}: most time above its floor in " + ", ".join(
                f"{t.component} (+{t.excess:.3g} ms, "
                f"{'floor not modelled' if floor_hidden(rows, t.component) else _ratio(t.measured_ms, t.floor_ms)})"
                for t in top.itertuples()) + f"; the modelled floors add up to {_ms(r['floor_ms'].sum())} ms "
                f"(each at its own bound; the whole model's: {_ms(_value(rows, p, 'total', 'floor_ms'))} ms).")
        out.append("")
    return out
