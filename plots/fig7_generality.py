"""Figure 7 (paper §4.3): baseline / OneLA ratios over every paired operator-suite shape.

(a) captured latency, (b) persistent recurrent-state capacity. One box per baseline: box = median and
interquartile range, whiskers = 5th-95th percentile (the paper's convention; points beyond are not drawn),
median written above. A shape enters only where both the baseline and OneLA are ok on it (plots.data).
The paper's per-baseline latency medians are the hollow diamonds (none beside vLLM's prefix-cache replay: the
paper's vLLM ReplaySSM is another mechanism, plots.paper.NO_KERNEL). Only rows within the paper's 4.88e-4 error
bound count (plots.data); a baseline whose median at its own looser gate differs has that median written, labelled,
under its name. A paper baseline with no paired shape keeps its slot, which says "not measured" and why.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

import textwrap

from plots import paper
from plots.data import PRIMARY_GATE, Results, own_gates
from plots.ours import fig7_ratios
from plots.style import PAPER_MARKER, colour, display_name, mark_series, no_data, paper_handle, plain_log, save

STEM = "fig7_generality"
PANELS = (("latency_ms", "(a) captured latency: baseline / OneLA", "median speedup"),
          ("persistent_bytes", "(b) persistent state capacity: baseline / OneLA", "capacity reduction"))


def not_measured(res: Results) -> dict[str, str]:
    """Paper baseline -> why it has no paired operator-suite shape (its most common skip / fail reason)."""
    df = res["operator"]
    out = {}
    for b in paper.FIG7_BASELINES:
        rows = df[df["path"] == b]
        if not len(rows) or (rows["status"] == "ok").any():
            continue
        bad = rows.loc[rows["status"] != "ok", "reason"].astype(str)
        out[b] = bad.value_counts().index[0] if len(bad) else "no ok row"
    return out


def _name(path: str) -> str:
    return "\n".join(textwrap.wrap(display_name(path), 12))


def _panel(ax, ratios: dict, title: str, paper_medians: dict, absent: dict | None = None,
           own: dict | None = None) -> None:
    ax.set_title(title)
    if not ratios:
        no_data(ax, "no paired ok operator-suite cells\n(results/operator.csv)")
        return
    absent, own = absent or {}, own or {}
    names = list(ratios)
    bp = ax.boxplot([ratios[b].to_numpy() for b in names], whis=(5, 95), showfliers=False, patch_artist=True,
                    widths=0.6, medianprops=dict(color="black", linewidth=1.5))
    for i, (b, box) in enumerate(zip(names, bp["boxes"])):
        box.set_facecolor(colour(b))
        box.set_alpha(0.85)
        mark_series([box], b)
        med = float(ratios[b].median())
        top = bp["whiskers"][2 * i + 1].get_ydata().max()
        ax.annotate(f"{med:.1f}×", (i + 1, top), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8, fontweight="bold")
    # beside the box (not on it), so the paper's diamond never hides our median line
    pts = [(i + 1.38, paper_medians[b]) for i, b in enumerate(names) if b in paper_medians]
    if pts:
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], **PAPER_MARKER)
    ticks = []
    for b in names:
        t = f"{_name(b)}\n(n={len(ratios[b])})"
        if b in own:
            med, n = own[b]
            t += f"\nown gate:\n{med:.1f}× (n={n})"
        ticks.append(t)
    for j, (b, why) in enumerate(absent.items()):
        x = len(names) + 1 + j
        why = "\n".join(textwrap.wrap(why, 20, break_on_hyphens=False)[:6])
        ax.text(x, 0.5, "not measured:\n" + why, transform=ax.get_xaxis_transform(),
                ha="center", va="center", fontsize=6.5, color="#616161",
                bbox=dict(boxstyle="round", facecolor="#f5f5f5", edgecolor="#bdbdbd"))
        ticks.append(_name(b) + "\n(n=0)")
    ax.set_xticks(range(1, len(ticks) + 1), ticks)
    ax.set_xlim(0.4, len(ticks) + 0.6)
    ax.axhline(1.0, color="#9e9e9e", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, 0.8), hi * 2.0)
    plain_log(ax)
    ax.set_ylabel("ratio, baseline / OneLA (log)")
    ax.grid(axis="y", which="major", alpha=0.3)


def draw(res: Results):
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    fig.suptitle("Figure 7 - OneLA against each baseline over the operator suite (whiskers: 5th-95th "
                 f"percentile; shapes within the paper's {PRIMARY_GATE:.3g} error bound)")
    paper_lat = {b: paper.value(f"fig7a.median_speedup.{b}") for b in paper.FIG7_BASELINES
                 if f"fig7a.median_speedup.{b}" in paper.BY_KEY}
    absent = not_measured(res)
    for ax, (metric, title, _) in zip(axes, PANELS):
        ratios = fig7_ratios(res, metric)
        with own_gates():
            loose = fig7_ratios(res, metric)
        own = {b: (float(r.median()), len(r)) for b, r in loose.items()
               if b not in ratios or len(r) != len(ratios[b])}
        _panel(ax, ratios, title, paper_lat if metric == "latency_ms" else {}, absent, own)
    fig.legend([paper_handle(), Line2D([], [], color="#9e9e9e", linestyle="--")],
               ["paper's median (paper §4.3)", "parity (ratio 1)"], loc="lower center", ncol=2, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)
