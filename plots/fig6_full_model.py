"""Figure 6 (paper §4.2): full-model decode-forward GPU time per path, by prompt length and O.

Each bar is the decode-forward GPU time summed over the T = O - 1 decode calls of one beam search (Qwen3.5-0.8B
geometry, R=4, W=256). Each FullState path is drawn in the paper's mode under the paper's name (e.g. "Controlled
FullState": one pool, an explicit per-step state copy) and, hatched beside it, in the index mode ("(index mode)":
two pools, the parent read through an index); a paper-mode slot with no row says "not measured yet". Above
OneLA's bar: its speedup over Controlled FullState on the same cell, the comparison the paper reports as
1.54-2.46x, in bold against the paper's mode, and below it, labelled "index", against the index mode. The vLLM
bars are vLLM's kernels inside this project's decode pipeline (vLLM's engine pins another torch than the GPU
host's), and the figure says so under its legend (PIPELINE_NOTE).

The lower row is the native framework reference, per decode call: transformers' own `generate(num_beams=W)`
(stock, and with OneLA inside it; tools.hf_generate, results/hf_generate.csv) beside the pipeline's OneLA, each
bar the GPU time of one decode-forward call, a black dash over a transformers bar its generate's wall time per
decode call (Python overhead and beam selection included). Above the bars of OneLA inside transformers: its
speedup over stock generate in wall time and in GPU time (same run); above the pipeline's OneLA: its speedup
over stock generate's GPU time (across runs). vLLM's engine, the paper's native reference, keeps a slot that names
why it is not run (plots.style.NATIVE_SKIPS); a transformers slot with no row says "not measured yet".
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt

from plots import paper
from plots.bars import grouped_bars
from plots.data import Results, cell, paired_ratio, select
from plots.reproduced import fig6_table, native_cells, native_table
from plots.style import (INDEX_MODE, NATIVE_COMMAND, NATIVE_ONELA, NATIVE_SKIPS, NATIVE_STOCK, PAPER_MODE,
                         REFERENCE_PATHS, WALL_MARKER, colour, display_name, mode_path, no_data, path_handle, save,
                         with_partners)

STEM = "fig6_full_model"
PIPELINE_NOTE = ("vLLM FullState and vLLM prefix-cache replay: vLLM's kernels inside this project's decode pipeline "
                 "(not vLLM's engine)")
SPEEDUP_NOTE = ("above OneLA: its speedup over Controlled FullState on that cell; bold: the paper's mode (the "
                "paper's comparison); \"index\": the index mode")
NATIVE_NOTE = ("lower row, per decode call: bars the GPU time of one decode-forward call, black dash generate's wall "
               "time per decode call;\nabove OneLA inside transformers: its speedup over stock generate (wall, GPU; "
               "same run); above the pipeline's OneLA: its speedup over stock's GPU time (across runs)")
NATIVE_PATHS = ("onela", NATIVE_STOCK, NATIVE_ONELA, *NATIVE_SKIPS)
LOG_SPREAD = 20          # bars spanning more than this factor get a log axis (vLLM prefix-cache replay is ~100x OneLA)


def _prompt_label(n: float) -> str:
    return f"prompt {int(n) // 1024}K ({int(n)} tokens)" if n % 1024 == 0 else f"prompt {int(n)} tokens"


def _bar(rows, path: str, o, measured: set) -> tuple[float, str]:
    """cell(), plus "not measured yet" for a path with no full_model row at all (a paper-mode slot kept beside its
    index mode) and "not run" for a path of the figure with no row for this (prompt, O) cell."""
    v, status = cell(rows, path, "latency_ms", O=o)
    if not status and not math.isfinite(v):
        status = "not run" if path in measured else "not measured yet"
    return v, status


def _speedup_label(rows, o) -> str:
    """OneLA's speedup over Controlled FullState at O=o: the paper's mode first, then the index mode, labelled."""
    key = select(rows[rows["path"] == "onela"], O=o)["shape"]
    parts = []
    for mode, fmt in ((PAPER_MODE, "{:.2f}×"), (INDEX_MODE, "index {:.2f}×")):
        s = paired_ratio(rows, mode_path("controlled_fullstate", mode), "onela").reindex(key).dropna()
        if len(s):
            parts.append(fmt.format(s.median()))
    return "\n".join(parts)


def _native_bar(cells, path: str, prompt, o, measured: set) -> tuple[float, str]:
    """GPU time per decode call of one lower-row bar: the pipeline's OneLA (latency_ms / T), stock generate or
    OneLA inside transformers; else the slot's word (a named skip, "not measured yet", "skipped", "not run")."""
    if path in NATIVE_SKIPS:
        return math.nan, NATIVE_SKIPS[path][0]
    col = {"onela": "pipeline_call_ms", NATIVE_STOCK: "stock_call_ms", NATIVE_ONELA: "hf_call_ms"}[path]
    row = cells[(cells["prompt_len"] == prompt) & (cells["O"] == o)]
    v = float(row[col].iloc[0]) if len(row) else math.nan
    if math.isfinite(v):
        return v, ""
    if path not in measured:
        return math.nan, "not measured yet"
    return math.nan, measured[path].get((prompt, o), "not run")


def _draw_native(ax, res: Results, prompt, Os: list) -> list:
    """The lower panel of one prompt length; returns the paths it keeps slots for."""
    cells = native_cells(res)
    nt = native_table(res)
    measured = {p: {(r["prompt_len"], r["O"]): r["status"] for _, r in nt[nt["path"] == p].iterrows()}
                for p in (NATIVE_STOCK, NATIVE_ONELA) if (nt["path"] == p).any()}
    if len(cells[cells["pipeline_call_ms"].map(math.isfinite)]):
        measured["onela"] = {}
    Os = sorted(set(Os) | set(cells.loc[cells["prompt_len"] == prompt, "O"].dropna()))
    if not Os:
        no_data(ax, f"no native framework rows nor OneLA pipeline rows\n({NATIVE_COMMAND} on a GPU)")
        return list(NATIVE_PATHS)
    paths = list(NATIVE_PATHS)
    drawn = grouped_bars(ax, Os, [f"O={int(o)}" for o in Os], paths,
                         lambda p, o: _native_bar(cells, p, prompt, o, measured))
    for o in Os:
        row = cells[(cells["prompt_len"] == prompt) & (cells["O"] == o)]
        if not len(row):
            continue
        r = row.iloc[0]
        for p, col in ((NATIVE_STOCK, "stock_wall_ms"), (NATIVE_ONELA, "hf_wall_ms")):
            if (p, o) in drawn and math.isfinite(r[col]):
                ax.scatter([drawn[(p, o)][0]], [r[col]], **WALL_MARKER)
                drawn[(p, f"wall{o}")] = (drawn[(p, o)][0], r[col])
        labels = [((NATIVE_ONELA, o), " ".join(f"{r[c]:.1f}×{w}" for c, w in (("hf_wall_x", " wall"),
                                                                          ("hf_call_x", " GPU"))
                                               if math.isfinite(r[c]))),
                  (("onela", o), f"{r['pipeline_x']:.1f}×" if math.isfinite(r["pipeline_x"]) else "")]
        for key, label in labels:
            if key in drawn and label:
                x, h = drawn[key]
                h = max([h] + [v for k, (_, v) in drawn.items() if k == (key[0], f"wall{o}")])
                ax.annotate(label, (x, h), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                            fontsize=7, color=colour("onela"), rotation=90)
    ax.set_xlabel("output tokens O (T = O - 1 decode calls)")
    heights = [h for _, h in drawn.values()]
    if heights and max(heights) > LOG_SPREAD * min(heights):
        ax.set_yscale("log")
        ax.set_ylabel("ms per decode call (log)")
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 1.8)                 # room for the labels above the highest dash
    else:
        ax.set_ylabel("ms per decode call")
        ax.set_ylim(0, (ax.get_ylim()[1] if heights else 1.0) * 1.15)
    if not (nt["path"].isin([NATIVE_STOCK, NATIVE_ONELA])).any():
        ax.text(0.5, 0.97, f"transformers generate: not measured yet ({NATIVE_COMMAND} on a GPU)",
                transform=ax.transAxes, ha="center", va="top", fontsize=8, color="#555555")
    ax.grid(axis="y", alpha=0.3)
    return paths


def draw(res: Results):
    df = fig6_table(res)
    df = df[~df["path"].isin(REFERENCE_PATHS)]
    nt = native_table(res)
    prompts = sorted(set(paper.FIG6_PROMPTS) | set(df["prompt_len"].dropna()) | set(nt["prompt_len"].dropna()))
    fig, axes = plt.subplots(2, len(prompts), figsize=(6.2 * len(prompts), 8.6), squeeze=False,
                             height_ratios=(1.0, 0.9))
    fig.suptitle("Figure 6 - full-model decode-forward time (Qwen3.5-0.8B geometry, R=4, W=256)")
    paths, measured = with_partners(df["path"].unique()), set(df["path"])
    native_paths: list = []
    for ax, low, prompt in zip(axes[0], axes[1], prompts):
        ax.set_title(_prompt_label(prompt))
        low.set_title(f"{_prompt_label(prompt)}: native framework reference, per decode call")
        rows = df[df["prompt_len"] == prompt]
        Os = sorted(rows["O"].dropna().unique())
        native_paths = _draw_native(low, res, prompt, Os)
        if not (rows["status"] == "ok").any():
            no_data(ax, "no ok full_model rows for this prompt length\n(results/full_model.csv)")
            continue
        drawn = grouped_bars(ax, Os, [f"O={int(o)}" for o in Os], paths,
                             lambda p, o: _bar(rows, p, o, measured))
        for o in Os:
            label = _speedup_label(rows, o)
            if ("onela", o) in drawn and label:
                x, h = drawn[("onela", o)]
                bold = not label.startswith("index")
                ax.annotate(label, (x, h), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                            fontsize=7, fontweight="bold" if bold else "normal", color=colour("onela"),
                            rotation=90)
        ax.set_xlabel("output tokens O (T = O - 1 decode calls)")
        heights = [h for _, h in drawn.values()]
        if heights and max(heights) > LOG_SPREAD * min(heights):
            ax.set_yscale("log")
            ax.set_ylabel("decode-forward GPU time (ms, log)")
        else:
            ax.set_ylabel("decode-forward GPU time (ms)")
            ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
        ax.grid(axis="y", alpha=0.3)
    legend = list(dict.fromkeys([*paths, *native_paths]))
    if legend:
        from matplotlib.lines import Line2D
        handles = [path_handle(p) for p in legend] + [Line2D([], [], linestyle="", marker="_", markersize=12,
                                                             markeredgewidth=2.0, color="black")]
        names = [display_name(p) for p in legend] + ["generate's wall time per decode call"]
        ncol = min(len(handles), 4)
        fig.legend(handles, names, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.0))
        rows_ = -(-len(handles) // ncol)
        skips = "; ".join(f"{display_name(p)}: not run, {why}" for p, (_, why) in NATIVE_SKIPS.items())
        fig.text(0.5, -0.01, f"{SPEEDUP_NOTE}.\n{PIPELINE_NOTE}.\n{NATIVE_NOTE}.\n{skips}.", ha="center",
                 va="top", fontsize=8, color="#424242")
        fig.tight_layout(rect=(0, 0.028 * rows_ + 0.01, 1, 1))
    else:
        fig.tight_layout()
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)
