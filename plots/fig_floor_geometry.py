"""Not in the paper: how close OneLA gets to its floors on each of the nine operator geometries.

For every ok OneLA operator-suite cell, two ratios (1 = at that floor; docs/methods.md §1, "Floors"):
- latency / floor_ms: the floor is the larger of compulsory bytes / measured copy bandwidth and FLOPs / measured
  matrix rate, one stream with no launch in it;
- latency / launch_floor_ms: the floor is T launches of a streaming copy kernel, launch t moving step t's
  compulsory bytes, one CUDA graph timed like the cell (artifact.launch_floor), which a one-launch-per-step
  kernel cannot beat by streaming faster.
One box per geometry and ratio over its R x W x T shapes, same box convention as Figure 7; the tick says which
bound dominates floor_ms. Rows measured before launch_floor_ms existed leave it empty: they enter the first
ratio only, and where no row has it the figure draws the first ratio alone and says so.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from plots.data import Results
from plots.style import colour, mark_series, no_data, plain_log, save

STEM = "fig_floor_geometry"
FLOORS = ("floor_ms", "launch_floor_ms")
LABEL = {"floor_ms": "latency / floor_ms (bytes at copy bandwidth, or FLOPs at the matrix rate)",
         "launch_floor_ms": "latency / launch_floor_ms (T streaming launches in one graph, the cell's timer)"}
LAUNCH_FACE = "#ffffff"          # the launch-aware box: hollow, hatched in OneLA's colour
NO_LAUNCH_NOTE = ("launch_floor_ms is empty in every row (measured before the column existed): "
                  "latency / floor_ms only")


def _onela_ok(df):
    return df[(df["path"] == "onela") & (df["status"] == "ok")]


def floor_ratios(res: Results, column: str = "floor_ms") -> dict[str, "np.ndarray"]:
    """geometry -> OneLA latency / `column` over its ok cells where `column` is a finite positive number,
    geometries ordered by state size HV*K*V (geometries with no such cell left out)."""
    df = _onela_ok(res["operator"])
    r = df["latency_ms"] / df[column]
    df = df.assign(ratio=r)[np.isfinite(r) & (df[column] > 0)]
    size = df.groupby("geometry")[["HV", "K", "V"]].first().prod(axis=1).sort_values(kind="stable")
    return {g: df.loc[df["geometry"] == g, "ratio"].to_numpy() for g in size.index}


def _order(res: Results, geometries) -> list[str]:
    """Geometries by state size HV*K*V (stable), as floor_ratios orders them."""
    df = _onela_ok(res["operator"])
    size = df.groupby("geometry")[["HV", "K", "V"]].first().prod(axis=1).sort_values(kind="stable")
    return [g for g in size.index if g in geometries]


def _tick(df, g: str, n: dict) -> str:
    rows = _onela_ok(df[df["geometry"] == g])
    hk, hv, k, v = (int(rows[c].iloc[0]) for c in ("HK", "HV", "K", "V"))
    bound = rows["floor_bound"].str.split(":").str[0].value_counts()
    bound_txt = f"{bound.index[0]}, " if len(bound) and bound.index[0] else ""
    cells = " / ".join(f"{n[c]}" for c in FLOORS if c in n)
    return f"{g}\n{hk}/{hv}/{k}/{v}\n{bound_txt}n={cells}"


def draw(res: Results):
    fig, ax = plt.subplots(figsize=(13, 4.8))
    ax.set_title("OneLA latency / its floors per geometry (operator suite; not a paper figure)")
    ratios = {c: floor_ratios(res, c) for c in FLOORS}
    drawn = [c for c in FLOORS if ratios[c]]
    if not drawn:
        no_data(ax, "no ok OneLA operator rows with a floor_ms\n(results/operator.csv)")
        return fig
    names = _order(res, set().union(*(ratios[c] for c in drawn)))
    width = 0.6 / len(drawn)
    handles = []
    def x(i: int, c: str) -> float:      # a geometry's boxes side by side, centred on its tick
        here = [d for d in drawn if names[i] in ratios[d]]
        return i + 1 + (here.index(c) - (len(here) - 1) / 2) * (width + 0.04)

    for c in drawn:
        present = [i for i, g in enumerate(names) if g in ratios[c]]
        bp = ax.boxplot([ratios[c][names[i]] for i in present], positions=[x(i, c) for i in present],
                        whis=(5, 95), showfliers=False, patch_artist=True, widths=width,
                        medianprops=dict(color="black", linewidth=1.5))
        launch = c == "launch_floor_ms"
        for k, (i, box) in enumerate(zip(present, bp["boxes"])):
            box.set_facecolor(LAUNCH_FACE if launch else colour("onela"))
            box.set_alpha(1.0 if launch else 0.6)
            if launch:
                box.set_hatch("///")
                box.set_edgecolor(colour("onela"))
            mark_series([box], names[i])
            top = bp["whiskers"][2 * k + 1].get_ydata().max()
            ax.annotate(f"{np.median(ratios[c][names[i]]):.2f}×", (x(i, c), top), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7 if launch else 8,
                        fontweight="bold")
        handles.append(Patch(facecolor=LAUNCH_FACE if launch else colour("onela"), alpha=1.0 if launch else 0.6,
                             hatch="///" if launch else None, edgecolor=colour("onela") if launch else "black",
                             label=LABEL[c]))
    ax.set_xticks(range(1, len(names) + 1),
                  [_tick(res["operator"], g, {c: len(ratios[c][g]) for c in drawn if g in ratios[c]})
                   for g in names], fontsize=8)
    ax.set_xlim(0.4, len(names) + 0.6)
    line = ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", label="at the floor (ratio 1)")
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, 0.8), hi * 1.6)
    plain_log(ax)
    ax.set_ylabel("OneLA latency / floor (log; 1 = at the floor)")
    ax.set_xlabel("geometry: name, HK/HV/K/V, floor_ms's dominant bound (memory / compute), cells (per ratio); "
                  "box: median and IQR, whiskers: 5th-95th percentile")
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.legend(handles=[*handles, line], loc="upper left", frameon=False, fontsize=8)
    if "launch_floor_ms" not in drawn:
        ax.text(0.99, 0.97, NO_LAUNCH_NOTE, transform=ax.transAxes, ha="right", va="top", fontsize=8,
                color="#616161", wrap=True)
    fig.tight_layout()
    return fig


def report_lines(res: Results) -> list[str]:
    """REPORT.md's lines: per geometry, OneLA's median latency / floor_ms and, beside it where rows have the
    column, its median latency / launch_floor_ms, each with the cells it rests on."""
    ratios = {c: floor_ratios(res, c) for c in FLOORS}
    if not ratios["floor_ms"] and not ratios["launch_floor_ms"]:
        return ["No ok OneLA operator-suite row with a floor yet (`results/operator.csv`)."]
    names = _order(res, set(ratios["floor_ms"]) | set(ratios["launch_floor_ms"]))
    out = ["OneLA's operator-suite latency over its floors, median over each geometry's ok cells (Figure "
           "`fig_floor_geometry`; docs/methods.md §1, \"Floors\"): floor_ms streams the compulsory bytes as one "
           "copy at the measured copy bandwidth (or runs the FLOPs at the matrix rate), launch_floor_ms is T "
           "launches of a streaming copy kernel, one per step, in one graph timed like the cell."]
    if not ratios["launch_floor_ms"]:
        out.append("No row has launch_floor_ms yet (rows measured before the column existed): '—'.")
    out += ["", "| geometry | HK/HV/K/V | latency / floor_ms | cells | latency / launch_floor_ms | cells |",
            "|---|---|---|---|---|---|"]
    df = _onela_ok(res["operator"])
    for g in names:
        rows = df[df["geometry"] == g]
        geo = "/".join(str(int(rows[c].iloc[0])) for c in ("HK", "HV", "K", "V"))
        cells = []
        for c in FLOORS:
            r = ratios[c].get(g)
            cells += [f"{np.median(r):.2f}×", str(len(r))] if r is not None and len(r) else ["—", "0"]
        out.append(f"| {g} | {geo} | " + " | ".join(cells) + " |")
    return out


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)
