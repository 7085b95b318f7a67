"""Figure 6 (paper §4.2): full-model decode-forward GPU time per path, by prompt length and O.

Each bar is the decode-forward GPU time summed over the T = O - 1 decode calls of one beam search (Qwen3.5-0.8B
geometry, R=4, W=256). Above OneLA's bar: its speedup over Controlled FullState on the same cell, the
comparison the paper reports as 1.54-2.46x. The vLLM bars are vLLM's kernels inside this project's decode
pipeline (vLLM's engine pins another torch than the GPU host's), and the legend says so (PIPELINE_NAMES).
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt

from plots import paper
from plots.bars import grouped_bars
from plots.data import Results, cell, paired_ratio, select
from plots.ours import fig6_table
from plots.style import REFERENCE_PATHS, colour, display_name, no_data, ordered, save

STEM = "fig6_full_model"
PIPELINE_NAMES = {"vllm_fullstate": "vLLM FullState kernel (our pipeline)",
                  "vllm_prefix_replay": "vLLM prefix-cache replay kernels (our pipeline)"}
LOG_SPREAD = 20          # bars spanning more than this factor get a log axis (vLLM prefix-cache replay is ~100x OneLA)


def _prompt_label(n: float) -> str:
    return f"prompt {int(n) // 1024}K ({int(n)} tokens)" if n % 1024 == 0 else f"prompt {int(n)} tokens"


def _bar(rows, path: str, o) -> tuple[float, str]:
    """cell(), plus "not run" for a path of the figure with no row for this (prompt, O) cell."""
    v, status = cell(rows, path, "latency_ms", O=o)
    if not status and not math.isfinite(v):
        status = "not run"
    return v, status


def draw(res: Results):
    df = fig6_table(res)
    df = df[~df["path"].isin(REFERENCE_PATHS)]
    prompts = sorted(set(paper.FIG6_PROMPTS) | set(df["prompt_len"].dropna()))
    fig, axes = plt.subplots(1, len(prompts), figsize=(5.2 * len(prompts), 4.2), squeeze=False)
    fig.suptitle("Figure 6 - full-model decode-forward time (Qwen3.5-0.8B geometry, R=4, W=256)")
    paths = ordered(df["path"].unique())
    for ax, prompt in zip(axes[0], prompts):
        ax.set_title(_prompt_label(prompt))
        rows = df[df["prompt_len"] == prompt]
        if not (rows["status"] == "ok").any():
            no_data(ax, "no ok full_model rows for this prompt length\n(results/full_model.csv)")
            continue
        Os = sorted(rows["O"].dropna().unique())
        drawn = grouped_bars(ax, Os, [f"O={int(o)}" for o in Os], paths,
                             lambda p, o: _bar(rows, p, o))
        speed = paired_ratio(rows, "controlled_fullstate", "onela")
        for o in Os:
            key = select(rows[rows["path"] == "onela"], O=o)["shape"]
            s = speed.reindex(key).dropna()
            if ("onela", o) in drawn and len(s):
                x, h = drawn[("onela", o)]
                ax.annotate(f"{s.median():.2f}×", (x, h), xytext=(0, 3), textcoords="offset points",
                            ha="center", va="bottom", fontsize=8, fontweight="bold", color=colour("onela"))
        ax.set_xlabel("output tokens O (T = O - 1 decode calls)")
        heights = [h for _, h in drawn.values()]
        if heights and max(heights) > LOG_SPREAD * min(heights):
            ax.set_yscale("log")
            ax.set_ylabel("decode-forward GPU time (ms, log)")
        else:
            ax.set_ylabel("decode-forward GPU time (ms)")
            ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = next(((h, lb) for h, lb in (a.get_legend_handles_labels() for a in axes[0]) if h),
                           ([], []))
    if handles:
        names = {display_name(p): n for p, n in PIPELINE_NAMES.items()}
        labels = [names.get(lb, lb) for lb in labels]
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False,
                   bbox_to_anchor=(0.5, -0.02))
        fig.text(0.99, -0.06, "bold label: OneLA speedup over Controlled FullState on that cell", ha="right",
                 fontsize=8, color=colour("onela"))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)
