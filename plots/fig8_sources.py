"""Figure 8 (paper §4.4): where OneLA's gain comes from, at the Qwen geometry with R=4, W=512.

(a) recurrent-state-path latency per path (incl. beam-state maintenance), each bar with its roofline floor
    (max of compulsory bytes / measured copy bandwidth and FLOPs / measured matrix rate, docs/design.md §5);
(b) persistent recurrent-state capacity and bytes written to recurrent state;
(c) physical DRAM traffic (read + write, hardware counters), arithmetic intensity written on each bar.
(a) and (b) come from the recurrent_path suite, (c) from the traffic suite. Diamonds: the paper's values.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from plots import paper
from plots.bars import bar_label, bar_x, crowded, floor_ticks, grouped_bars, paper_markers
from plots.data import Results, cell
from plots.ours import fig8_table
from plots.style import MIB, REFERENCE_PATHS, no_data, ordered, paper_handle, plain_log, save, short

STEM = "fig8_sources"


def _table(res: Results, metric: str):
    df = fig8_table(res, metric)
    return df[~df["path"].isin(REFERENCE_PATHS)]


def _latency(ax, res: Results) -> bool:
    df = _table(res, "latency_ms")
    ax.set_title("(a) recurrent-path latency")
    if not (df["status"] == "ok").any():
        no_data(ax, "no ok recurrent_path rows at R=4 W=512 Qwen\n(results/recurrent_path.csv)")
        return False
    Os, paths = sorted(df["O"].dropna().unique()), ordered(df["path"].unique())
    drawn = grouped_bars(ax, Os, [f"O={int(o)}" for o in Os], paths,
                         lambda p, o: cell(df, p, "latency_ms", O=o), value_fmt=short)
    floors = {(p, o): cell(df, p, "floor_ms", O=o)[0] for p in paths for o in Os}
    has_floor = floor_ticks(ax, drawn, floors, 0.8 / len(paths))
    pts = [(bar_x(Os, paths, p, o), paper.value(f"fig8a.latency.{p}.O{int(o)}")) for p in paths for o in Os
           if f"fig8a.latency.{p}.O{int(o)}" in paper.BY_KEY]
    paper_markers(ax, pts)
    ax.set_yscale("log")
    ax.set_ylabel("latency over T = O - 1 steps (ms, log)")
    return has_floor


def _bytes(ax, res: Results) -> None:
    df = _table(res, "persistent_bytes")
    ax.set_title("(b) persistent state and state writes")
    if not (df["status"] == "ok").any():
        no_data(ax, "no ok recurrent_path rows at R=4 W=512 Qwen\n(results/recurrent_path.csv)")
        return
    Os, paths = sorted(df["O"].dropna().unique()), ordered(df["path"].unique())
    groups = [(m, o) for m in ("persistent_bytes", "written_bytes") for o in Os]
    labels = [f"{'capacity' if m == 'persistent_bytes' else 'writes'}\nO={int(o)}" for m, o in groups]

    def value(p, g):
        v, status = cell(df, p, g[0], O=g[1])
        return v / MIB, status
    grouped_bars(ax, groups, labels, paths, value, value_fmt=short)
    keys = {("persistent_bytes", o): f"fig8b.capacity.onela.O{int(o)}" for o in Os}
    keys.update({("written_bytes", o): f"fig8b.writes.onela.O{int(o)}" for o in Os})
    if "onela" in paths:
        paper_markers(ax, [(bar_x(groups, paths, "onela", g), paper.value(k)) for g, k in keys.items()
                           if k in paper.BY_KEY])
    ax.set_yscale("log")
    ax.set_ylabel("recurrent state (MiB, log)")


def _traffic(ax, res: Results) -> None:
    df = _table(res, "dram_bytes")
    ax.set_title("(c) DRAM traffic; AI = arithmetic intensity (FLOP/B)")
    if not (df["status"] == "ok").any():
        no_data(ax, "no ok traffic rows at R=4 W=512 Qwen\n(results/traffic.csv)")
        return
    Os, paths = sorted(df["O"].dropna().unique()), ordered(df["path"].unique())

    def value(p, o):
        v, status = cell(df, p, "dram_bytes", O=o)
        return v / MIB, status
    drawn = grouped_bars(ax, Os, [f"O={int(o)}" for o in Os], paths, value)
    for (p, o), (x, h) in drawn.items():
        ai, _ = cell(df, p, "arith_intensity", O=o)
        ai_txt = f"AI {ai:.3g}" if math.isfinite(ai) else "AI n/a"
        bar_label(ax, x, h, f"{short(h)} MiB{', ' if crowded(paths) else chr(10)}{ai_txt}", crowded(paths))
    if "onela" in paths:
        paper_markers(ax, [(bar_x(Os, paths, "onela", o), paper.value(f"fig8c.traffic.onela.O{int(o)}"))
                           for o in Os if f"fig8c.traffic.onela.O{int(o)}" in paper.BY_KEY])
    ax.set_yscale("log")
    ax.set_ylabel("DRAM bytes read + written (MiB, log)")


def _headroom(ax, factor: float) -> None:
    """Room above the tallest bar for its label on a log axis, with plain-number ticks."""
    if ax.get_yscale() == "log":
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * factor)
        plain_log(ax)


def _paths(res: Results) -> list[str]:
    """Every path any Fig 8 panel draws."""
    return ordered(set().union(*(_table(res, m)["path"].unique() for m in ("latency_ms", "dram_bytes"))))


def draw(res: Results):
    many = crowded(_paths(res))
    # Up to four paths (the paper's three plus ours): one row, as in the paper; more: one panel per row.
    fig, axes = plt.subplots(*((3, 1) if many else (1, 3)), figsize=(15, 11) if many else (15, 4.8))
    fig.suptitle("Figure 8 - sources of the gain: recurrent-state path at the Qwen geometry "
                 "(HK=HV=16, K=V=128), R=4, W=512")
    has_floor = _latency(axes[0], res)
    _bytes(axes[1], res)
    _traffic(axes[2], res)
    handles = {}
    # vertical labels need more room; (c)'s ("16,000 MiB, AI 1.2") most
    for ax, factor in zip(axes, (10, 10, 40) if many else (4, 4, 4)):
        _headroom(ax, factor)
        ax.grid(axis="y", which="major", alpha=0.3)
        for h, lb in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lb, h)
    extra = [(paper_handle(), "paper (§4.4)")]
    if has_floor:
        extra.insert(0, (Line2D([], [], color="black", linewidth=1.6), "roofline floor"))
    hs = list(handles.values()) + [h for h, _ in extra]
    lbs = list(handles) + [lb for _, lb in extra]
    fig.legend(hs, lbs, loc="lower center", ncol=len(lbs) if len(lbs) <= 6 else (len(lbs) + 1) // 2,
               frameon=False)
    fig.tight_layout(rect=(0, 0.07 if many else 0.06, 1, 1))
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)
