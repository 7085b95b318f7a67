"""Figure 6 (paper §4.2): full-model decode-forward GPU time per path, by prompt length and O.

Each bar is the decode-forward GPU time summed over the T = O - 1 decode calls of one beam search (Qwen3.5-0.8B
geometry, R=4, W=256). Each FullState path is drawn in the paper's mode under the paper's name (e.g. "Controlled
FullState": one pool, an explicit per-step state copy) and, hatched beside it, in the index mode ("(index mode)":
two pools, the parent read through an index); a paper-mode slot with no row says "not measured yet". Above
OneLA's bar: its speedup over Controlled FullState on the same cell, the comparison the paper reports as
1.54-2.46x, in bold against the paper's mode, and below it, labelled "index", against the index mode. The vLLM
bars are vLLM's kernels inside this project's decode pipeline (vLLM's engine pins another torch than the GPU
host's), and the figure says so under its legend (PIPELINE_NOTE).
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt

from plots import paper
from plots.bars import grouped_bars
from plots.data import Results, cell, paired_ratio, select
from plots.reproduced import fig6_table
from plots.style import (INDEX_MODE, PAPER_MODE, REFERENCE_PATHS, colour, display_name, mode_path, no_data,
                         path_handle, save, with_partners)

STEM = "fig6_full_model"
PIPELINE_NOTE = ("vLLM FullState and vLLM prefix-cache replay: vLLM's kernels inside this project's decode pipeline "
                 "(not vLLM's engine)")
SPEEDUP_NOTE = ("above OneLA: its speedup over Controlled FullState on that cell; bold: the paper's mode (the "
                "paper's comparison); \"index\": the index mode")
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


def draw(res: Results):
    df = fig6_table(res)
    df = df[~df["path"].isin(REFERENCE_PATHS)]
    prompts = sorted(set(paper.FIG6_PROMPTS) | set(df["prompt_len"].dropna()))
    fig, axes = plt.subplots(1, len(prompts), figsize=(6.2 * len(prompts), 4.6), squeeze=False)
    fig.suptitle("Figure 6 - full-model decode-forward time (Qwen3.5-0.8B geometry, R=4, W=256)")
    paths, measured = with_partners(df["path"].unique()), set(df["path"])
    for ax, prompt in zip(axes[0], prompts):
        ax.set_title(_prompt_label(prompt))
        rows = df[df["prompt_len"] == prompt]
        if not (rows["status"] == "ok").any():
            no_data(ax, "no ok full_model rows for this prompt length\n(results/full_model.csv)")
            continue
        Os = sorted(rows["O"].dropna().unique())
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
    if paths and (df["status"] == "ok").any():
        ncol = min(len(paths), 4)
        fig.legend([path_handle(p) for p in paths], [display_name(p) for p in paths], loc="lower center",
                   ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.0))
        rows_ = -(-len(paths) // ncol)
        fig.text(0.5, -0.01, f"{SPEEDUP_NOTE}.\n{PIPELINE_NOTE}.", ha="center", va="top", fontsize=8,
                 color="#424242")
        fig.tight_layout(rect=(0, 0.05 * rows_ + 0.02, 1, 1))
    else:
        fig.tight_layout()
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)
