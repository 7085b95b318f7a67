"""Grouped bars, one colour per path (an index-mode FullState path hatched), shared by Figures 6 and 8.

A cell that was skipped or failed gets its status written where its bar would be, so a missing bar is
never mistaken for a zero or for a cell nobody ran.
"""
from __future__ import annotations

import math
from typing import Callable

from matplotlib.transforms import blended_transform_factory

from plots.style import PAPER_MARKER, colour, display_name, hatch, mark_series

# cell(path, group) -> (value or NaN, status of the row(s) when there is no value: "skipped", "failed" or "")
Cell = Callable[[str, object], tuple[float, str]]


def grouped_bars(ax, groups: list, labels: list[str], paths: list[str], cell: Cell,
                 value_fmt: Callable[[float], str] | None = None) -> dict:
    """Draw one bar per (path, group); return {(path, group): (x, value)} for the bars drawn."""
    width = 0.8 / max(len(paths), 1)
    status_tf = blended_transform_factory(ax.transData, ax.transAxes)
    drawn = {}
    for i, p in enumerate(paths):
        xs, hs = [], []
        for j, g in enumerate(groups):
            x = j - 0.4 + width * (i + 0.5)
            v, status = cell(p, g)
            if math.isfinite(v) and v > 0:
                xs.append(x)
                hs.append(v)
                drawn[(p, g)] = (x, v)
            elif status:
                ax.text(x, 0.02, status, transform=status_tf, rotation=90, ha="center", va="bottom",
                        fontsize=7, color="#b71c1c" if status == "failed" else "#757575")
        bars = ax.bar(xs, hs, width * 0.95, color=colour(p), label=display_name(p), edgecolor="black",
                      linewidth=0.4, hatch=hatch(p))
        mark_series(bars, p)
        if value_fmt:
            for x, h in zip(xs, hs):
                bar_label(ax, x, h, value_fmt(h), crowded(paths))
    ax.set_xticks(range(len(groups)), labels)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    return drawn


def crowded(paths: list[str]) -> bool:
    """More bars per group than horizontal labels fit over: labels turn vertical."""
    return len(paths) > 4


def bar_label(ax, x: float, h: float, text: str, vertical: bool) -> None:
    ax.annotate(text, (x, h), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7,
                rotation=90 if vertical else 0)


def floor_ticks(ax, drawn: dict, floors: dict, width: float) -> bool:
    """A black line across each bar at its roofline floor; True if any was drawn (for the legend)."""
    any_drawn = False
    for key, (x, _) in drawn.items():
        f = floors.get(key, math.nan)
        if math.isfinite(f) and f > 0:
            ax.hlines(f, x - width / 2, x + width / 2, colors="black", linewidth=1.6, zorder=4)
            any_drawn = True
    return any_drawn


def paper_markers(ax, pts: list[tuple[float, float]]) -> bool:
    """The paper's values as hollow diamonds at the given bar positions; True if any was drawn."""
    if pts:
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], **PAPER_MARKER)
    return bool(pts)


def bar_x(groups: list, paths: list[str], path: str, group) -> float:
    """Where grouped_bars puts (path, group), whether or not it drew it (for paper markers)."""
    width = 0.8 / max(len(paths), 1)
    return groups.index(group) - 0.4 + width * (paths.index(path) + 0.5)
