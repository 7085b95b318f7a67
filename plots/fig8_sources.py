"""Figure 8 (paper §4.4): where OneLA's gain comes from, at the Qwen geometry with R=4, W=512.

(a) recurrent-state-path latency per path (incl. beam-state maintenance), each bar with its roofline floor
    (max of compulsory bytes / measured copy bandwidth and FLOPs / measured matrix rate, docs/design.md §5);
(b) persistent recurrent-state capacity and bytes written to recurrent state;
(c) physical DRAM traffic (read + write, hardware counters), arithmetic intensity written on each bar.
(a) and (b) come from the recurrent_path suite, (c) from the traffic suite. Each FullState framework is drawn in
the paper's mode under the paper's name (e.g. "vLLM FullState": one pool, an explicit per-step state copy) and,
hatched beside it, in the index mode ("vLLM FullState (index mode)": two pools, the parent read through an
index); a paper-mode slot with no row says "not measured yet". Diamonds: the paper's values, hollow where the
paper prints them, grey where derived from its OneLA values and its ratios; each sits at the right edge of its bar
(the paper's FullState values at the paper's mode, never at the index mode) so the bar's value label reads in
full. The paper's vLLM ReplaySSM has no GDN kernel in any released vLLM (plots.paper.NO_KERNEL): its values are
triangles at SGLang's ReplaySSM kernel, not at vLLM's prefix-cache replay. A bar whose rows are all above the
paper's 4.88e-4 error bound is not drawn; its slot says so. A FullState system the paper does not compare against
(plots.style.NOT_IN_PAPER, e.g. fla) has a bar in both modes in every panel, with no diamond.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from plots import paper
from plots.bars import bar_label, bar_x, crowded, floor_ticks, grouped_bars
from plots.data import Results, cell
from plots.reproduced import fig8_table
from plots.style import (INDEX_HATCH, MIB, PAPER_MARKER, PAPER_MODE, REFERENCE_PATHS, display_name, mode_path,
                         no_data, not_in_paper_paths, paper_handle, path_handle, plain_log, save, short,
                         with_partners)

DERIVED_MARKER = {**PAPER_MARKER, "facecolor": "#bdbdbd"}
REPLAYSSM_MARKER = {**PAPER_MARKER, "marker": "^", "s": 34}


def _paper_points(ax, groups: list, paths: list[str], metric_O) -> None:
    """The paper's values of every system it reports for each group (metric_O(group) -> (metric, O)), each at
    the right edge of its bar: a FullState system's at its paper mode, the paper's vLLM ReplaySSM at SGLang's
    ReplaySSM kernel (no GDN kernel in vLLM)."""
    width = 0.8 / max(len(paths), 1)
    for system in ("onela", "vllm_fullstate", *paper.NO_KERNEL):
        at = paper.REPLAYSSM_KERNEL if system in paper.NO_KERNEL else mode_path(system, PAPER_MODE)
        if at not in paths:
            continue
        for g in groups:
            metric, O = metric_O(g)
            got = paper.fig8_paper_value(system, metric, int(O))
            if got is None:
                continue
            v, derived = got
            style = REPLAYSSM_MARKER if system in paper.NO_KERNEL else DERIVED_MARKER if derived else PAPER_MARKER
            if system in paper.NO_KERNEL and derived:
                style = {**style, "facecolor": DERIVED_MARKER["facecolor"]}
            ax.scatter([bar_x(groups, paths, at, g) + width * 0.36], [v], **style)


def legend_markers() -> list:
    from matplotlib.lines import Line2D
    kw = dict(linestyle="", markersize=6, markeredgecolor="black")
    return [(paper_handle(), "paper (§4.4)"),
            (Line2D([], [], marker="D", markerfacecolor="#bdbdbd", **kw), "paper, derived from its ratios"),
            (Line2D([], [], marker="^", markerfacecolor="white", **kw),
             "paper's vLLM ReplaySSM (no GDN kernel in vLLM), at SGLang ReplaySSM"),
            (Patch(facecolor="white", edgecolor="black", hatch=INDEX_HATCH), "index mode (not the paper's mode)")]

STEM = "fig8_sources"


def _table(res: Results, metric: str):
    df = fig8_table(res, metric)
    return df[~df["path"].isin(REFERENCE_PATHS)]


def _cell(df, path: str, metric: str, **where) -> tuple[float, str]:
    """cell(), and "not measured yet" for a path with no row in the panel (a paper-mode slot kept beside its index
    mode)."""
    if not (df["path"] == path).any():
        return float("nan"), "not measured yet"
    return cell(df, path, metric, **where)


def _slots(df) -> list[str]:
    """The bars of a panel: every path with a row, each index mode's paper-mode partner, and both modes of every
    system not in the paper (plots.style.NOT_IN_PAPER), "not measured yet" where they have no row."""
    return with_partners(set(df["path"].unique()) | set(not_in_paper_paths()))


def _latency(ax, res: Results) -> bool:
    df = _table(res, "latency_ms")
    ax.set_title("(a) recurrent-path latency")
    if not (df["status"] == "ok").any():
        no_data(ax, "no ok recurrent_path rows at R=4 W=512 Qwen\n(results/recurrent_path.csv)")
        return False
    Os, paths = sorted(df["O"].dropna().unique()), _slots(df)
    drawn = grouped_bars(ax, Os, [f"O={int(o)}" for o in Os], paths,
                         lambda p, o: _cell(df, p, "latency_ms", O=o), value_fmt=short)
    floors = {(p, o): cell(df, p, "floor_ms", O=o)[0] for p in paths for o in Os}
    has_floor = floor_ticks(ax, drawn, floors, 0.8 / len(paths))
    _paper_points(ax, Os, paths, lambda o: ("latency_ms", o))
    ax.set_yscale("log")
    ax.set_ylabel("latency over T = O - 1 steps (ms, log)")
    return has_floor


def _bytes(ax, res: Results) -> None:
    df = _table(res, "persistent_bytes")
    ax.set_title("(b) persistent state and state writes")
    if not (df["status"] == "ok").any():
        no_data(ax, "no ok recurrent_path rows at R=4 W=512 Qwen\n(results/recurrent_path.csv)")
        return
    Os, paths = sorted(df["O"].dropna().unique()), _slots(df)
    groups = [(m, o) for m in ("persistent_bytes", "written_bytes") for o in Os]
    labels = [f"{'capacity' if m == 'persistent_bytes' else 'writes'}\nO={int(o)}" for m, o in groups]

    def value(p, g):
        v, status = _cell(df, p, g[0], O=g[1])
        return v / MIB, status
    grouped_bars(ax, groups, labels, paths, value, value_fmt=short)
    _paper_points(ax, groups, paths, lambda g: g)
    ax.set_yscale("log")
    ax.set_ylabel("recurrent state (MiB, log)")


def _traffic(ax, res: Results) -> None:
    df = _table(res, "dram_bytes")
    ax.set_title("(c) DRAM traffic; AI = arithmetic intensity (FLOP/B)")
    if not (df["status"] == "ok").any():
        no_data(ax, "no ok traffic rows at R=4 W=512 Qwen\n(results/traffic.csv)")
        return
    Os, paths = sorted(df["O"].dropna().unique()), _slots(df)

    def value(p, o):
        v, status = _cell(df, p, "dram_bytes", O=o)
        return v / MIB, status
    drawn = grouped_bars(ax, Os, [f"O={int(o)}" for o in Os], paths, value)
    for (p, o), (x, h) in drawn.items():
        ai, _ = cell(df, p, "arith_intensity", O=o)
        ai_txt = f"AI {ai:.3g}" if math.isfinite(ai) else "AI n/a"
        bar_label(ax, x, h, f"{short(h)} MiB{', ' if crowded(paths) else chr(10)}{ai_txt}", crowded(paths))
    _paper_points(ax, Os, paths, lambda o: ("dram_bytes", o))
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
    return with_partners(set().union(*(_table(res, m)["path"].unique() for m in ("latency_ms", "dram_bytes")),
                                     not_in_paper_paths()))


def draw(res: Results):
    many = crowded(_paths(res))
    # Up to four paths (the paper's three plus ours): one row, as in the paper; more: one panel per row.
    fig, axes = plt.subplots(*((3, 1) if many else (1, 3)), figsize=(15, 11) if many else (15, 4.8))
    fig.suptitle("Figure 8 - sources of the gain: recurrent-state path at the Qwen geometry "
                 "(HK=HV=16, K=V=128), R=4, W=512")
    has_floor = _latency(axes[0], res)
    _bytes(axes[1], res)
    _traffic(axes[2], res)
    # vertical labels need more room; (c)'s ("16,000 MiB, AI 1.2") most
    for ax, factor in zip(axes, (10, 10, 40) if many else (4, 4, 4)):
        _headroom(ax, factor)
        ax.grid(axis="y", which="major", alpha=0.3)
    # one entry per path of any panel (a slot with no bar included: its text says why), then the markers
    paths = _paths(res)
    extra = legend_markers()
    if has_floor:
        extra.insert(0, (Line2D([], [], color="black", linewidth=1.6), "roofline floor"))
    hs = [path_handle(p) for p in paths] + [h for h, _ in extra]
    lbs = [display_name(p) for p in paths] + [lb for _, lb in extra]
    ncol = len(lbs) if len(lbs) <= 6 else 5 if many else (len(lbs) + 1) // 2
    rows = -(-len(lbs) // ncol) if lbs else 0
    fig.legend(hs, lbs, loc="lower center", ncol=ncol, frameon=False)
    fig.tight_layout(rect=(0, (0.02 + 0.022 * rows) if many else 0.06, 1, 1))
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)
