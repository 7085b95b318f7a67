"""Not in the paper: how close OneLA gets to its roofline floor on each of the nine operator geometries.

For every ok OneLA operator-suite cell with a floor, latency / floor (1 = at the floor; docs/design.md §5: the floor is
the larger of compulsory bytes / measured copy bandwidth and FLOPs / measured matrix rate). One box per
geometry over its R x W x T shapes, same box convention as Figure 7; the tick says which bound dominates.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from plots.data import Results
from plots.style import colour, mark_series, no_data, plain_log, save

STEM = "fig_floor_geometry"


def floor_ratios(res: Results) -> dict[str, "np.ndarray"]:
    """geometry -> OneLA latency / floor over its ok cells, geometries ordered by state size HV*K*V."""
    df = res["operator"]
    df = df[(df["path"] == "onela") & (df["status"] == "ok")]
    r = df["latency_ms"] / df["floor_ms"]
    df = df.assign(ratio=r)[np.isfinite(r) & (df["floor_ms"] > 0)]
    size = df.groupby("geometry")[["HV", "K", "V"]].first().prod(axis=1).sort_values(kind="stable")
    return {g: df.loc[df["geometry"] == g, "ratio"].to_numpy() for g in size.index}


def _tick(df, g: str, n: int) -> str:
    rows = df[(df["geometry"] == g) & (df["path"] == "onela") & (df["status"] == "ok")]
    hk, hv, k, v = (int(rows[c].iloc[0]) for c in ("HK", "HV", "K", "V"))
    bound = rows["floor_bound"].str.split(":").str[0].value_counts()
    bound_txt = f"{bound.index[0]}, " if len(bound) and bound.index[0] else ""
    return f"{g}\n{hk}/{hv}/{k}/{v}\n{bound_txt}n={n}"


def draw(res: Results):
    fig, ax = plt.subplots(figsize=(13, 4.8))
    ax.set_title("OneLA latency / roofline floor per geometry (operator suite; not a paper figure)")
    ratios = floor_ratios(res)
    if not ratios:
        no_data(ax, "no ok OneLA operator rows with a floor_ms\n(results/operator.csv)")
        return fig
    names = list(ratios)
    bp = ax.boxplot([ratios[g] for g in names], whis=(5, 95), showfliers=False, patch_artist=True, widths=0.6,
                    medianprops=dict(color="black", linewidth=1.5))
    for i, (g, box) in enumerate(zip(names, bp["boxes"])):
        box.set_facecolor(colour("onela"))
        box.set_alpha(0.6)
        mark_series([box], g)
        top = bp["whiskers"][2 * i + 1].get_ydata().max()
        ax.annotate(f"{np.median(ratios[g]):.2f}×", (i + 1, top), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8, fontweight="bold")
    ax.set_xticks(range(1, len(names) + 1), [_tick(res["operator"], g, len(ratios[g])) for g in names],
                  fontsize=8)
    ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", label="roofline floor (ratio 1)")
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, 0.8), hi * 1.6)
    plain_log(ax)
    ax.set_ylabel("OneLA latency / floor (log; 1 = at the floor)")
    ax.set_xlabel("geometry: name, HK/HV/K/V, the floor's dominant bound (memory / compute), cells; "
                  "box: median and IQR, whiskers: 5th-95th percentile")
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.legend(loc="upper left", frameon=False)
    fig.tight_layout()
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)
