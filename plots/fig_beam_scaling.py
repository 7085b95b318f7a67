"""Not in the paper: how per-step latency grows with decode depth, and how wide a beam search each path fits
(results/beam_scaling.csv and its side tables beam_scaling_steps.csv and beam_scaling_width.csv, written by
`python -m sweeps.run suite=beam_scaling`; sweeps/suites/beam_scaling.py says what each holds).

(a) per-step latency against depth, one line per path: the time of the last step of an O-token decode (step
    t = O - 2, which replays t ancestral records), dashed at that step's floor; OneLA's and the best FullState
    path's least-squares lines (a + b t over the steps t >= 1) and where they cross, measured or fitted;
(b) cumulative latency of the whole O-token decode (the operator suite's latency), dashed at its floor;
(c) width: per path the widest W whose persistent + workspace bytes fit the GPU (bar) and the width cell measured
    near that limit (dot), labelled with its latency per beam.
`report_lines` writes REPORT.md's section from the same tables.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from plots.data import Results, side_frame, within_gate
from plots.style import REFERENCE_PATHS, colour, display_name, mark_series, no_data, ordered, plain_log, save

STEM = "fig_beam_scaling"
SUITE = "beam_scaling"
STEPS_CSV, WIDTH_CSV = "beam_scaling_steps.csv", "beam_scaling_width.csv"
NOT_MEASURED = "not measured yet"
COMMAND = "python -m sweeps.run suite=beam_scaling"
FIT_FROM = 1          # the fit leaves out step 0: it reads S_ctx (and holds the reset), not parent states
BASE_LINEAGE = "beam"  # the synthetic lineage of every depth and width cell; others run the depth grid again
LINEAGE_LABELS = {"beam": "synthetic beam lineage",
                  "model": "model lineage (Qwen3.5-0.8B's own beam search, recorded)"}
LINEAGE_STYLE = {"beam": dict(linestyle="-", marker="o"), "model": dict(linestyle="-.", marker="s")}
STEPS_LIST = "steps_ms"   # a depth cell's every step's median time, ';'-joined, step 0 first (text, not a number)
STEPS_FLOORS = "steps_floor_ms"   # ... and every step's own floor, the same way


def is_fullstate(path: str) -> bool:
    return "_fullstate" in path and path not in REFERENCE_PATHS


def load_side(root, name: str) -> pd.DataFrame:
    """A side table as text columns, with its measured columns numeric; empty if the file is absent."""
    return side_frame(root, name, lambda c: c not in (STEPS_LIST, STEPS_FLOORS) and (
        c.endswith(("_ms", "_bytes", "_W", "_a", "_b", "_flops")) or c in ("R", "W", "T", "O", "step", "max_abs_err")))


def _joined(res: Results, side_name: str) -> pd.DataFrame:
    """The suite's rows joined with their side-table rows of the same run (a cell measured again keeps the
    side row of the run whose row the table holds)."""
    rows = res.suites.get(SUITE)
    side = load_side(res.root, side_name)
    if rows is None or not len(rows) or not len(side):
        return pd.DataFrame()
    side = side.drop_duplicates(["config_hash", "run_id"], keep="last").rename(
        columns={c: f"side_{c}" for c in ("status", "reason", "max_abs_err", "timer")})
    keep = [c for c in side.columns if c not in rows.columns or c in ("config_hash", "run_id")]
    return rows.merge(side[keep], on=["config_hash", "run_id"], how="inner")


def depth_table(res: Results) -> pd.DataFrame:
    """One row per ok depth cell within the gate: path, O, t (= O - 2, the last step), step_ms (+ p20 / p80 and
    floor), latency_ms (cumulative) and its floor. A cell whose per-step run did not pass has no step_ms."""
    df = _joined(res, STEPS_CSV)
    if not len(df):
        return df
    df = df[(df["status"] == "ok") & within_gate(df)].copy()
    ok_steps = (df["side_status"] == "ok") & np.isfinite(df["step_ms"]) & (df["step_ms"] > 0)
    df.loc[~ok_steps, ["step_ms", "step_p20_ms", "step_p80_ms"]] = np.nan
    df["t"] = df["T"] - 1
    return df.sort_values(["lineage", "path", "O"]).reset_index(drop=True)


def lineages(depth: pd.DataFrame) -> list[str]:
    """The lineages of the depth rows, the synthetic `beam` first: each is its own set of lines, never mixed."""
    found = sorted(set(depth["lineage"])) if len(depth) else []
    return sorted(found, key=lambda x: (x != BASE_LINEAGE, x))


def of_lineage(depth: pd.DataFrame, lineage: str) -> pd.DataFrame:
    """The depth rows of one lineage."""
    return depth[depth["lineage"] == lineage] if len(depth) else depth


def lineage_label(lineage: str) -> str:
    return LINEAGE_LABELS.get(lineage, f"lineage {lineage}")


def _step_list(row, column: str) -> np.ndarray | None:
    """A ';'-joined list column of a steps row as floats (None where the row has none)."""
    text = str(row[column]) if column in row.index else ""
    return np.array([float(x) for x in text.split(";")]) if any(ch.isdigit() for ch in text) else None


def decode_steps(depth: pd.DataFrame, path: str = "onela") -> pd.DataFrame:
    """Every step t of `path`'s deepest depth cell that lists its steps' times (STEPS_LIST), from depth_table rows
    of one lineage (of_lineage): `ms`, that decode's own step t; `floor_ms`, step t's own floor where the cell
    lists them (STEPS_FLOORS), else the step_floor_ms of the depth cell whose last step is t, linearly
    interpolated over t between depth cells where no cell ends at t (`interpolated` True there: tables written
    before the steps' floors were listed). Empty when no such cell exists."""
    cols = ["step", "ms", "floor_ms", "interpolated"]
    if not len(depth) or STEPS_LIST not in depth.columns:
        return pd.DataFrame(columns=cols)
    d = depth[(depth["path"] == path) & depth[STEPS_LIST].astype(str).str.contains(r"\d", regex=True)]
    if not len(d):
        return pd.DataFrame(columns=cols)
    deepest = d.sort_values("O").iloc[-1]
    ms = _step_list(deepest, STEPS_LIST)
    own = _step_list(deepest, STEPS_FLOORS)
    if own is not None and len(own) == len(ms):
        return pd.DataFrame({"step": np.arange(len(ms)), "ms": ms, "floor_ms": own, "interpolated": False})
    fl = depth[(depth["path"] == path) & np.isfinite(depth["step_floor_ms"])].drop_duplicates("t", keep="last")
    fl = fl.sort_values("t")
    steps = np.arange(len(ms))
    floor = np.interp(steps, fl["t"], fl["step_floor_ms"]) if len(fl) else np.full(len(ms), np.nan)
    out = pd.DataFrame({"step": steps, "ms": ms, "floor_ms": floor, "interpolated": ~np.isin(steps, fl["t"])})
    return out[steps <= (fl["t"].max() if len(fl) else -1)].reset_index(drop=True)


def width_table(res: Results) -> pd.DataFrame:
    """One row per width cell (any status): its W, the path's limits and byte model, and, where ok within the
    gate, its latency and latency per beam (us)."""
    df = _joined(res, WIDTH_CSV)
    if not len(df):
        return df
    df = df.copy()
    ok = (df["status"] == "ok") & within_gate(df) & np.isfinite(df["latency_ms"])
    df["per_beam_us"] = np.where(ok, df["latency_ms"] * 1e3 / (df["R"] * df["W"]), np.nan)
    df["state_bytes"] = df["persistent_a"] + df["workspace_a"] + (df["persistent_b"] + df["workspace_b"]) * df["W"]
    return df.sort_values("path", key=lambda s: s.map({p: i for i, p in enumerate(ordered(s))})) \
        .reset_index(drop=True)


def fit_line(t, y) -> tuple[float, float] | None:
    """Least-squares (a, b) of y = a + b t over the points with t >= FIT_FROM and a finite y; None with < 2."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    keep = (t >= FIT_FROM) & np.isfinite(y)
    if keep.sum() < 2 or len(set(t[keep])) < 2:
        return None
    b, a = np.polyfit(t[keep], y[keep], 1)
    return float(a), float(b)


@dataclass
class Crossover:
    """Where OneLA's per-step latency reaches one FullState path's: `kind` is "measured" (between two measured
    depths, interpolated linearly; at or below the first common depth when OneLA is already slower there),
    "fitted" (beyond the measured depths: the two least-squares lines meet), "never" (OneLA's line does not
    rise faster) or "none" (too few points)."""

    path: str
    kind: str
    t: float = math.nan              # depth: the step index, i.e. the ancestral records replayed
    onela_fit: tuple | None = None
    fullstate_fit: tuple | None = None

    @property
    def O(self) -> float:            # the O-token decode whose last step is step t
        return self.t + 2

    def text(self) -> str:
        fits = ""
        if self.onela_fit and self.fullstate_fit:
            fits = (f"OneLA {_line(self.onela_fit)} us, {display_name(self.path)} {_line(self.fullstate_fit)} us "
                    f"(least squares over the measured steps t >= {FIT_FROM})")
        if self.kind == "measured":
            return f"measured: at t = {self.t:.3g} (O = {self.O:.3g}), between measured depths; {fits}"
        if self.kind == "fitted":
            return f"fitted: t = {self.t:,.0f} (O = {self.O:,.0f}), beyond the measured depths; {fits}"
        if self.kind == "never":
            return f"never on the fitted lines: OneLA's per-step latency does not rise faster; {fits}"
        return "too few depths with both per-step times to say"


def crossover(depth: pd.DataFrame, fullstate: str) -> Crossover:
    """Crossover of OneLA's per-step latency with `fullstate`'s (Crossover's kinds) from depth_table rows of one
    lineage (of_lineage)."""
    one = depth[(depth["path"] == "onela")].set_index("t")["step_ms"].dropna()
    fs = depth[(depth["path"] == fullstate)].set_index("t")["step_ms"].dropna()
    one, fs = one[~one.index.duplicated(keep="last")], fs[~fs.index.duplicated(keep="last")]
    common = sorted(set(one.index) & set(fs.index))
    fo, ff = fit_line(one.index, one.values), fit_line(fs.index, fs.values)
    out = Crossover(fullstate, "none", onela_fit=fo, fullstate_fit=ff)
    prev = None
    for t in common:
        gap = fs[t] - one[t]
        if gap <= 0:
            if prev is None:
                out.kind, out.t = "measured", float(t)
            else:
                t0, g0 = prev
                out.kind, out.t = "measured", float(t0 + g0 / (g0 - gap) * (t - t0))
            return out
        prev = (t, gap)
    if fo is None or ff is None:
        return out
    (ao, bo), (af, bf) = fo, ff
    if bo <= bf:
        out.kind = "never"
        return out
    out.kind, out.t = "fitted", (af - ao) / (bo - bf)
    return out


def crossovers(depth: pd.DataFrame) -> list[Crossover]:
    """One Crossover per FullState path with per-step times in depth_table rows of one lineage (of_lineage), the
    earliest first: the first is the best FullState
    path's (the one OneLA's per-step latency reaches at the smallest depth; by its fitted per-step latency at
    the deepest common depth where none is reached)."""
    if not len(depth) or not (depth["path"] == "onela").any():
        return []
    paths = [p for p in ordered(depth["path"].unique()) if is_fullstate(p)
             and depth.loc[depth["path"] == p, "step_ms"].notna().any()]
    found = [crossover(depth, p) for p in paths]
    rank = {"measured": 0, "fitted": 0, "never": 1, "none": 2}

    def fs_at_depth(c: Crossover) -> float:
        if not c.fullstate_fit:
            return math.inf
        a, b = c.fullstate_fit
        return a + b * depth["t"].max()
    return sorted(found, key=lambda c: (rank[c.kind], c.t if rank[c.kind] == 0 else fs_at_depth(c)))


# ---------------------------------------------------------------- the figure

def _style(lineage: str) -> dict:
    return LINEAGE_STYLE.get(lineage, dict(linestyle=":", marker="^"))


def _label(path: str, lineage: str) -> str:
    return display_name(path) if lineage == BASE_LINEAGE else f"{display_name(path)}, {lineage} lineage"


def _floor_style(lineage: str) -> dict:
    """Floors dashed; another lineage's floors dotted and fainter, so they read apart from the beam lineage's."""
    return dict(linestyle="--", alpha=0.8) if lineage == BASE_LINEAGE else dict(linestyle=(0, (1, 2)), alpha=0.6)


def _depth_panel(ax, depth: pd.DataFrame, best: Crossover | None) -> None:
    """One line per (path, lineage): a lineage's lines are never joined with another's. The crossover drawn is the
    beam lineage's (REPORT states each lineage's)."""
    ax.set_title("(a) per-step latency vs depth (last step of an O-token decode)")
    steps = depth[depth["step_ms"].notna()] if len(depth) else depth
    if not len(steps):
        no_data(ax, f"no ok per-step rows\n(results/{STEPS_CSV}: {COMMAND})")
        return
    for lin in lineages(steps):
        sl = of_lineage(steps, lin)
        for p in ordered(sl["path"].unique()):
            d = sl[sl["path"] == p].sort_values("O")
            line = ax.errorbar(d["O"], d["step_ms"], yerr=[d["step_ms"] - d["step_p20_ms"],
                                                           d["step_p80_ms"] - d["step_ms"]],
                               markersize=3.5, linewidth=1.3, capsize=2, color=colour(p), label=_label(p, lin),
                               **_style(lin))
            mark_series(line.lines[:1], p)
            fl = d[np.isfinite(d["step_floor_ms"])]
            if len(fl):
                ax.plot(fl["O"], fl["step_floor_ms"], linewidth=0.9, color=colour(p), **_floor_style(lin))
    o_max = float(steps["O"].max())
    if best is not None and best.onela_fit and best.fullstate_fit:
        far = best.O if best.kind in ("measured", "fitted") and best.O <= 4 * o_max else o_max
        xs = np.linspace(FIT_FROM + 2, max(o_max, far), 100)
        for p, (a, b) in (("onela", best.onela_fit), (best.path, best.fullstate_fit)):
            ax.plot(xs, a + b * (xs - 2), linestyle=":", linewidth=1.2, color=colour(p))
        if best.kind in ("measured", "fitted"):
            label = f"crossover with {display_name(best.path)}: O = {best.O:,.3g} ({best.kind})"
            if best.O <= 4 * o_max:
                ax.axvline(best.O, color="black", linewidth=0.9, linestyle="-.")
                ax.annotate(label, (best.O, 0.97), xycoords=("data", "axes fraction"), rotation=90, ha="right",
                            va="top", fontsize=8)
            else:
                ax.text(0.98, 0.03, label + ", beyond the axis", transform=ax.transAxes, fontsize=8, ha="right",
                        va="bottom")
        else:
            ax.text(0.98, 0.03, f"OneLA vs {display_name(best.path)}: {best.kind} crossover", fontsize=8,
                    transform=ax.transAxes, ha="right", va="bottom")
    ax.set_yscale("log")
    plain_log(ax)
    ax.set_xlabel("output tokens O (the step timed is t = O - 2: it replays t ancestral records)")
    ax.set_ylabel("one step's latency (ms, log); dashed: its floor")
    ax.grid(which="major", alpha=0.3)


def _cumulative_panel(ax, depth: pd.DataFrame) -> None:
    ax.set_title("(b) cumulative latency of the O-token decode")
    if not len(depth):
        no_data(ax, f"no ok beam_scaling rows\n(results/{SUITE}.csv: {COMMAND})")
        return
    for lin in lineages(depth):
        dl = of_lineage(depth, lin)
        for p in ordered(dl["path"].unique()):
            d = dl[dl["path"] == p].sort_values("O")
            line, = ax.plot(d["O"], d["latency_ms"], markersize=3.5, linewidth=1.3, color=colour(p),
                            label=_label(p, lin), **_style(lin))
            mark_series([line], p)
            fl = d[np.isfinite(d["floor_ms"])]
            if len(fl):
                ax.plot(fl["O"], fl["floor_ms"], linewidth=0.9, color=colour(p), **_floor_style(lin))
    ax.set_yscale("log")
    plain_log(ax)
    ax.set_xlabel("output tokens O (T = O - 1 decode steps)")
    ax.set_ylabel("latency of all T steps (ms, log); dashed: floor")
    ax.grid(which="major", alpha=0.3)


def _width_panel(ax, width: pd.DataFrame) -> None:
    ax.set_title("(c) widest beam on this GPU (bar) and the cell measured (dot)")
    rows = width[width["limit_W"].notna() | width["per_beam_us"].notna()] if len(width) else width
    if not len(rows):
        no_data(ax, f"no width cells\n(results/{WIDTH_CSV}: {COMMAND})")
        return
    paths = ordered(rows["path"].unique())
    for i, p in enumerate(paths):
        r = rows[rows["path"] == p].iloc[-1]
        if np.isfinite(r["limit_W"]):
            bar = ax.barh(i, r["limit_W"], color=colour(p), alpha=0.45, edgecolor="black", linewidth=0.4)
            mark_series(bar, p)
        if np.isfinite(r["per_beam_us"]):
            ax.plot([r["W"]], [i], marker="o", color=colour(p), markeredgecolor="black")
            ax.annotate(f"W={int(r['W']):,}: {r['per_beam_us']:.3g} us/beam", (r["W"], i), xytext=(4, 4),
                        textcoords="offset points", fontsize=7)
        else:
            ax.annotate(f"W={int(r['W']):,}: {r['status']}", (max(r["W"], 1), i), xytext=(4, 4),
                        textcoords="offset points", fontsize=7, color="#757575")
    ax.set_yticks(range(len(paths)), [display_name(p) for p in paths], fontsize=7)
    ax.set_xscale("log")
    cells = ", ".join(sorted({f"R={int(r)} O={int(o)}" for r, o in zip(rows["R"], rows["O"])}))
    ax.set_xlabel(f"beams per request W (log); width cells at {cells}")
    ax.grid(axis="x", which="major", alpha=0.3)


def draw(res: Results):
    depth, width = depth_table(res), width_table(res)
    found = crossovers(of_lineage(depth, BASE_LINEAGE)) if len(depth) else []
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.4))
    others = [x for x in lineages(depth) if x != BASE_LINEAGE]
    also = f"; also on the {', '.join(others)} lineage ({'/'.join(_style(x)['linestyle'] for x in others)})" \
        if others else ""
    fig.suptitle("Depth and width scaling (not a paper figure): Qwen3.5-0.8B GDN geometry, depth at R=4 W=512 "
                 f"on the synthetic beam lineage{also}")
    _depth_panel(axes[0], depth, found[0] if found else None)
    _cumulative_panel(axes[1], depth)
    _width_panel(axes[2], width)
    handles = {}
    for ax in axes[:2]:
        for h, lb in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lb, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(len(handles), 5),
                   frameon=False, fontsize=8)
    fig.tight_layout(rect=(0, 0.08 if handles else 0, 1, 1))
    return fig


def render(res: Results, out_dir) -> list:
    return save(draw(res), out_dir, STEM)


# ---------------------------------------------------------------- REPORT.md

def _ms(v: float) -> str:
    return "—" if not np.isfinite(v) else f"{v:.4g}"


def _us(ms: float) -> str:
    """A fit coefficient given in ms, in us to 4 significant digits (rounding noise of a flat line is 0)."""
    us = round(ms * 1e3, 6) + 0.0
    return f"{us:.4g}"


def _line(fit: tuple) -> str:
    a, b = (float(_us(x)) for x in fit)
    return f"{a:.4g} {'-' if b < 0 else '+'} {abs(b):.4g} t"


def _table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]


def _depth_lines(depth: pd.DataFrame) -> list[str]:
    """REPORT's per-step and cumulative tables and crossovers of the depth rows of one lineage."""
    out = []
    steps = depth[depth["step_ms"].notna()] if len(depth) else depth
    if len(steps):
        Os = sorted(steps["O"].unique())
        rows = []
        for p in ordered(steps["path"].unique()):
            d = steps[steps["path"] == p].set_index("O")
            d = d[~d.index.duplicated(keep="last")]
            fit = fit_line(d["t"], d["step_ms"])
            rows.append([display_name(p), *(_ms(d["step_ms"].get(o, np.nan)) for o in Os),
                         "—" if fit is None else _line(fit)])
        out += ["", "Per-step latency (ms) at each O, and the least-squares line a + b t (us) over the steps "
                    f"t >= {FIT_FROM}:", "",
                *_table(["path", *(f"O={int(o)}" for o in Os), "fit (us)"], rows)]
        found = crossovers(depth)
        if found:
            out += ["", "Depth at which OneLA's per-step latency reaches each FullState path's (first: the best "
                        "FullState path, the one reached first):", ""]
            out += _table(["FullState path", "crossover"], [[display_name(c.path), c.text()] for c in found])
    cum = depth[depth["latency_ms"].notna()] if len(depth) else depth
    if len(cum):
        Os = sorted(cum["O"].unique())
        rows = []
        for p in ordered(cum["path"].unique()):
            d = cum[cum["path"] == p].set_index("O")
            d = d[~d.index.duplicated(keep="last")]
            rows.append([display_name(p), *(f"{_ms(d['latency_ms'].get(o, np.nan))} / "
                                             f"{_ms(d['floor_ms'].get(o, np.nan))}" for o in Os)])
        out += ["", "Cumulative latency of the whole O-token decode / its floor (ms):", "",
                *_table(["path", *(f"O={int(o)}" for o in Os)], rows)]
    return out


def _unmeasured_lineages(res: Results, measured: list[str]) -> list[str]:
    """A line per lineage of the suite's depth rows with no ok row: how many cells, and why (their first reason)."""
    rows = res.suites.get(SUITE)
    if rows is None or not len(rows) or "lineage" not in rows:
        return []
    out = []
    for lin in sorted(set(rows["lineage"]) - set(measured)):
        d = rows[rows["lineage"] == lin]
        reasons = [r for r in d["reason"].astype(str) if r and r != "nan"]
        why = f": {reasons[0]}" if reasons else ""
        out.append(f"- {lineage_label(lin)} (`{lin}`): no ok depth cell; {len(d)} recorded as "
                   f"{', '.join(sorted(set(d['status'])))}{why}")
    return out


def report_lines(res: Results) -> list[str]:
    """REPORT.md's section: per lineage, per-step latency by depth with its fit, the crossover with each FullState
    path (measured or fitted, said which) and the cumulative latency; then the width cells with each path's limit."""
    depth, width = depth_table(res), width_table(res)
    if not len(depth) and not len(width):
        return [f"Depth and width scaling: {NOT_MEASURED} (`{COMMAND}` writes `{SUITE}.csv`, `{STEPS_CSV}` and "
                f"`{WIDTH_CSV}`)."]
    out = ["Beyond the paper: OneLA replays every ancestral record at every step, so its per-step work grows "
           "with depth while FullState's does not; its capacity grows with W x depth, FullState's with "
           "W x V x K. Per-step latency is the last step of an O-token decode (t = O - 2), each step timed on "
           "its own in a decode replayed step by step, gated like the whole decode (docs/methods.md §10)."]
    for lin in lineages(depth):
        out += ["", f"**{lineage_label(lin)}** (`lineage={lin}`), depth cells at R=4 W=512:"]
        out += _depth_lines(of_lineage(depth, lin))
    missing = _unmeasured_lineages(res, lineages(depth))
    if missing:
        out += ["", "Lineages of the depth grid without an ok cell:", "", *missing]
    if len(width):
        rows = []
        for _, r in width.iterrows():
            share = f" ({r['W'] / r['limit_W']:.0%} of the limit)" if np.isfinite(r["limit_W"]) else ""
            rows.append([display_name(r["path"]), f"R={int(r['R'])} O={int(r['O'])}",
                         "—" if not np.isfinite(r["capacity_W"]) else f"{int(r['capacity_W']):,}",
                         "—" if not np.isfinite(r["limit_W"]) else f"{int(r['limit_W']):,}", r["limited_by"],
                         f"{int(r['W']):,}{share}", r["status"], _ms(r["latency_ms"]), _ms(r["per_beam_us"]),
                         f"{r['state_bytes'] / 2**30:.3g}" if r["state_bytes"] > 0 else "—"])
        memory = width["memory_bytes"].dropna()
        held = f"{memory.iloc[0] / 2**30:.1f} GiB" if len(memory) else "the device's memory"
        out += ["", f"Width: the widest W whose persistent + workspace bytes (read off the path's tensors at small "
                    f"widths, affine in W) fit {held}, lowered to the path's own supports() limit; the measured cell "
                    "is the widest W a little below that limit whose path + harness bytes fit (the harness keeps "
                    "every step's inputs and the FP32 reference beside the path).", "",
                *_table(["path", "cell", "capacity W", "limit W", "limited by", "measured W", "status",
                         "latency (ms)", "per beam (us)", "state at W (GiB)"], rows)]
    return out
