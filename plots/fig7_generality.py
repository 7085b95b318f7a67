"""Figure 7 (paper §4.3): baseline / OneLA ratios over every paired operator-suite shape.

(a) captured latency, (b) persistent recurrent-state capacity. One box per baseline: box = median and
interquartile range, whiskers = 5th-95th percentile (the paper's convention; points beyond are not drawn),
median written above. A shape enters only where both the baseline and OneLA are ok on it (plots.data).
Each FullState framework sits in the paper's mode under the paper's name (e.g. "vLLM FullState": one pool, an
explicit per-step state copy), its index mode right beside it, hatched and labelled "(index mode)" (two pools, the
parent read through an index). The paper's per-baseline latency medians are the hollow diamonds, drawn only at the
paper's mode (none beside vLLM's prefix-cache replay: the paper's vLLM ReplaySSM is another mechanism,
plots.paper.NO_KERNEL). Only rows within the paper's 4.88e-4 error bound count (plots.data); a baseline whose
median at its own looser gate differs has that median written, labelled, under its name. A paper baseline with no
paired shape keeps its slot, which says why ("not measured yet" while it has no row), beside the paper's diamond.
A FullState system the paper does not compare against (plots.style.NOT_IN_PAPER, e.g. fla) keeps a slot in both
modes after the paper's six, with no diamond.
"""
from __future__ import annotations

import re
import textwrap

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from plots import paper
from plots.bars import paper_markers
from plots.data import PRIMARY_GATE, Results, own_gates
from plots.reproduced import baselines_in, fig7_ratios, paper_baselines
from plots.style import (INDEX_HATCH, INDEX_MODE, PAPER_MODE, colour, display_name, hatch, mark_series, mode_of,
                         mode_path, no_data, not_in_paper_paths, ordered, paper_handle, partner, plain_log, save)

STEM = "fig7_generality"
PANELS = (("latency_ms", "(a) captured latency: baseline / OneLA", "median speedup"),
          ("persistent_bytes", "(b) persistent state capacity: baseline / OneLA", "capacity reduction"))
NOT_MEASURED = "not measured yet"


def slots(res: Results) -> list[str]:
    """The baselines Fig 7 gives a slot: every one in operator.csv, the paper's six in the paper's mode and the
    systems not in the paper in both modes whether or not they have rows, and the paper-mode partner of every
    index-mode FullState path; the paper's six first (each FullState system's paper mode, then its index mode),
    then the rest."""
    present = set(baselines_in(res["operator"]))
    want = (present | set(paper_baselines(PAPER_MODE)) | set(not_in_paper_paths())
            | {partner(p) for p in present if mode_of(p) == INDEX_MODE})
    first = [p for b in paper.FIG7_BASELINES for p in dict.fromkeys((mode_path(b, PAPER_MODE), b)) if p in want]
    return first + ordered(want - set(first))


def not_measured(res: Results, metric: str = "latency_ms") -> dict[str, str]:
    """Slot -> why it has no paired operator-suite shape: NOT_MEASURED for a path with no row, else its most common
    skip / fail reason."""
    df = res["operator"]
    paired = fig7_ratios(res, metric)
    out = {}
    for b in slots(res):
        if b in paired:
            continue
        rows = df[df["path"] == b]
        bad = rows.loc[rows["status"] != "ok", "reason"].astype(str)
        out[b] = NOT_MEASURED if not len(rows) else bad.value_counts().index[0] if len(bad) else "no ok pair"
    return out


def slot_reason(reason: str) -> str:
    """A skip reason short enough for a slot: a framework that could not be imported reads "<dist>: no module
    '<name>' here" (the import path and pack location stay in REPORT.md's skip table); any other reason is kept."""
    missing = re.search(r"No module named '([^']+)'", reason)
    if "cannot import" in reason and missing:
        return f"{reason.split(':', 1)[0]}: no module '{missing.group(1)}' here"
    return reason


def _name(path: str) -> str:
    return "\n".join(textwrap.wrap(display_name(path), 12))


def _panel(ax, res: Results, ratios: dict, title: str, paper_medians: dict, absent: dict,
           own: dict | None = None) -> None:
    ax.set_title(title)
    if not ratios:
        no_data(ax, "no paired ok operator-suite cells\n(results/operator.csv)")
        return
    own = own or {}
    names = [b for b in slots(res) if b in ratios or b in absent] + [b for b in ratios if b not in slots(res)]
    at = {b: i + 1 for i, b in enumerate(names)}
    boxed = [b for b in names if b in ratios]
    bp = ax.boxplot([ratios[b].to_numpy() for b in boxed], positions=[at[b] for b in boxed], whis=(5, 95),
                    showfliers=False, patch_artist=True, widths=0.6, medianprops=dict(color="black", linewidth=1.5))
    for i, (b, box) in enumerate(zip(boxed, bp["boxes"])):
        box.set_facecolor(colour(b))
        box.set_alpha(0.85)
        if hatch(b):
            box.set_hatch(hatch(b))
        mark_series([box], b)
        med = float(ratios[b].median())
        top = bp["whiskers"][2 * i + 1].get_ydata().max()
        ax.annotate(f"{med:.1f}×", (at[b], top), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8, fontweight="bold")
    for b in names:
        if b in ratios:
            continue
        why = "\n".join(textwrap.wrap(slot_reason(absent[b]), 16, break_on_hyphens=False, break_long_words=False)[:6])
        ax.text(at[b], 0.5, why if absent[b] == NOT_MEASURED else "not measured:\n" + why,
                transform=ax.get_xaxis_transform(), ha="center", va="center", fontsize=6.5, color="#616161",
                bbox=dict(boxstyle="round", facecolor="#f5f5f5", edgecolor="#bdbdbd"))
    # beside the slot (not on it), so the paper's diamond never hides our median line
    paper_markers(ax, [(at[b] + 0.38, paper_medians[b]) for b in names if b in paper_medians])
    ticks = []
    for b in names:
        t = f"{_name(b)}\n(n={len(ratios[b]) if b in ratios else 0})"
        if b in own:
            med, n = own[b]
            t += f"\nown gate:\n{med:.1f}× (n={n})"
        ticks.append(t)
    ax.set_xticks(range(1, len(ticks) + 1), ticks, fontsize=8)
    ax.set_xlim(0.4, len(ticks) + 0.6)
    ax.axhline(1.0, color="#9e9e9e", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, 0.8), hi * 2.0)
    plain_log(ax)
    ax.set_ylabel("ratio, baseline / OneLA (log)")
    ax.grid(axis="y", which="major", alpha=0.3)


def draw(res: Results):
    fig, axes = plt.subplots(2, 1, figsize=(15, 10))
    fig.suptitle("Figure 7 - OneLA against each baseline over the operator suite (whiskers: 5th-95th "
                 f"percentile; shapes within the paper's {PRIMARY_GATE:.3g} error bound)")
    # the paper's medians sit at the paper's mode of each system: never at an index-mode box
    paper_lat = {mode_path(b, PAPER_MODE): paper.value(f"fig7a.median_speedup.{b}") for b in paper.FIG7_BASELINES
                 if f"fig7a.median_speedup.{b}" in paper.BY_KEY}
    for ax, (metric, title, _) in zip(axes, PANELS):
        ratios = fig7_ratios(res, metric)
        with own_gates():
            loose = fig7_ratios(res, metric)
        own = {b: (float(r.median()), len(r)) for b, r in loose.items()
               if b not in ratios or len(r) != len(ratios[b])}
        _panel(ax, res, ratios, title, paper_lat if metric == "latency_ms" else {}, not_measured(res, metric), own)
    fig.legend([paper_handle(), Line2D([], [], color="#9e9e9e", linestyle="--"),
                Patch(facecolor="white", edgecolor="black", hatch=INDEX_HATCH)],
               ["paper's median (paper §4.3), at the paper's mode", "parity (ratio 1)",
                "index mode: two pools, the parent's state read through an index (not the paper's mode; not paired)"],
               loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)
