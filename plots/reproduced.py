"""Our counterpart of every paper number (plots/paper.py), computed from results/ only.

Each measure takes the loaded Results and returns a Measured with a note on what fed it. A NaN value is either
"not measured yet" (a path it needs has no row in the cells it reads; the note names it) or, with `missing` set,
rows that exist but give no value (e.g. OneLA failed there): the note then counts each path's rows by status.
Ratios come only from `data.paired_ratio` (both sides ok on the same shape).

The paper's FullState numbers pair only with the paper's mode of each FullState system (`<system>_paper`: one
pool, an explicit per-step state copy; plots.style.mode_path): `measures()`. The same numbers in the index mode
(`<system>`: two pools, the parent read through an index) are `index_measures()`, shown beside and never paired
with the paper's; a key reads a FullState system exactly when it is in MODE_KEYS (a test checks this on rows where
the two modes differ).

Every value is the primary number: only rows within the paper's 4.88e-4 count (plots.data.PRIMARY_GATE). Where
rows held to a looser documented gate of their own would change it, that value is carried `beside`, labelled.
A paper system no released framework provides for GDN (paper.NO_KERNEL: vLLM ReplaySSM) gets no value: its
measure says why and carries, beside and unpaired, the path shown in its place and the released ReplaySSM kernel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from plots import paper
from plots.data import (NATIVE_SUITE, NATIVE_TIMES, PRIMARY_GATE, Results, median_ok, ok_values, own_gates,
                        paired_ratio, select, side_frame)
from plots.style import (FULLSTATE_SYSTEMS, INDEX_MODE, MIB, NATIVE_ONELA, NATIVE_STOCK, PAPER_MODE, REFERENCE_PATHS,
                         display_name, mode_path,
                         not_in_paper_paths, ordered)


@dataclass(frozen=True)
class Measured:
    value: float
    note: str = ""
    missing: str = ""    # value NaN although rows exist: "failed", "skipped", "no ok pair" (the note says more),
    #                      or NO_GDN_KERNEL (a paper system with no released GDN kernel)
    beside: tuple[tuple[str, float], ...] = ()   # labelled values shown beside, never in place of, `value`

    @property
    def measured(self) -> bool:
        return not math.isnan(self.value)


NOT_YET = Measured(math.nan)
NO_GDN_KERNEL = "no GDN kernel"


def unmeasured(df: pd.DataFrame, *paths: str) -> list[str]:
    """The paths among `paths` with no row at all in `df`: never run on those cells."""
    present = set(df["path"])
    return [p for p in dict.fromkeys(paths) if p not in present]


def not_yet(paths: list[str]) -> Measured:
    """NOT_YET, naming the paths with no row yet."""
    return Measured(math.nan, "no row yet of " + ", ".join(display_name(p) for p in paths))


def missing(df: pd.DataFrame, *paths: str) -> Measured:
    """No value from `df` (the rows a measure reads) for a measure that needs every one of `paths`: NOT_YET if one
    of them has no row there (never run on those cells), else why not -- each path's rows counted by status
    ("OneLA 2 failed, 1 ok; vLLM FullState 3 ok")."""
    if absent := unmeasured(df, *paths):
        return not_yet(absent)
    parts, statuses = [], set()
    for p in dict.fromkeys(paths):
        rows = df[df["path"] == p]
        counts = rows["status"].value_counts()
        statuses |= set(counts.index)
        parts.append(f"{display_name(p)} " + ", ".join(f"{int(counts[s])} {s}" for s in ("ok", "failed", "skipped")
                                                       if s in counts))
    word = "failed" if "failed" in statuses else "skipped" if "skipped" in statuses else "no ok pair"
    return Measured(math.nan, "no value from these rows: " + "; ".join(parts), word)


def paper_baselines(mode: str = PAPER_MODE) -> list[str]:
    """The paths of the paper's six Fig 7 baselines in `mode` (the ReplaySSM paths are the same in both)."""
    return [mode_path(b, mode) for b in paper.FIG7_BASELINES]


def baselines_in(df: pd.DataFrame) -> list[str]:
    """Every path compared against OneLA (all but OneLA and the plain-torch oracles): the paper's six in the paper's
    order, each FullState system's index mode right after its paper mode, then the rest."""
    present = {p for p in df["path"].unique() if p != "onela" and p not in REFERENCE_PATHS}
    first = [p for b in paper.FIG7_BASELINES for p in dict.fromkeys((mode_path(b, PAPER_MODE), b)) if p in present]
    return first + ordered(present - set(first))


# ---- Fig 6 ----
def fig6_table(res: Results) -> pd.DataFrame:
    """Full-model rows of the paper's cell (R=4 W=256)."""
    return select(res["full_model"], **paper.FIG6_CELL)


def fig6_speedups(res: Results, mode: str = PAPER_MODE) -> pd.Series:
    """Controlled FullState (in `mode`) / OneLA decode-forward time, per paired (prompt, O)."""
    return paired_ratio(fig6_table(res), mode_path("controlled_fullstate", mode), "onela")


def fig6_controlled_vs_vllm_pct(res: Results, mode: str = PAPER_MODE) -> pd.Series:
    """|Controlled FullState / vLLM FullState - 1| in %, per paired (prompt, O), both in `mode`."""
    c, v = mode_path("controlled_fullstate", mode), mode_path("vllm_fullstate", mode)
    return (paired_ratio(fig6_table(res), c, v) - 1).abs() * 100


def _extreme(s: pd.Series, fn: str, what: str, none: Measured = NOT_YET) -> Measured:
    if not len(s):
        return none
    return Measured(float(getattr(s, fn)()), f"{fn} over {len(s)} paired {what}")


# ---- Fig 6's native framework reference (tools.hf_generate; beyond the paper's pipeline) ----
# Per Fig 6 cell, from the hf_generate rows and their side table: each system's GPU time per decode call (`call`:
# the row's latency_ms, the T calls summed, / T, as a pipeline row gives it), generate's wall time per decode call
# (`wall`: Python overhead and beam selection included) and the prefill's GPU time (`prefill`).
NATIVE_METRICS = {"call": "latency_ms", "wall": "decode_call_wall_ms", "prefill": "prefill_ms"}
_NATIVE_TEXT = ("config_hash", "run_id", "path", "transformers", "beams_identical_to_stock")


def native_table(res: Results) -> pd.DataFrame:
    """The hf_generate rows of the Fig 6 cell (R=4 W=256), each with its side-table timings (joined on config_hash
    and run_id; NaN where the side table has no line for it) and `call_ms`, GPU time per decode call."""
    df = select(res[NATIVE_SUITE], **paper.FIG6_CELL)
    times = side_frame(res.root, NATIVE_TIMES, lambda c: c not in _NATIVE_TEXT)
    keep = [c for c in times.columns if c in ("config_hash", "run_id") or c not in df.columns]
    if len(times) and {"config_hash", "run_id"} <= set(times.columns):
        times = times[keep].drop_duplicates(["config_hash", "run_id"], keep="last")
        df = df.merge(times, on=["config_hash", "run_id"], how="left")
    for c in ("prefill_ms", "decode_call_wall_ms", "same_selections_as_stock", "beams_identical_to_stock"):
        if c not in df.columns:
            df[c] = math.nan
    df = df.copy()
    df["call_ms"] = df["latency_ms"] / df["T"]
    return df


def _native_ok(df: pd.DataFrame, path: str) -> pd.DataFrame:
    """`path`'s ok rows, one per shape (the last); an hf_generate row's own gate (its beam scores against the
    uncached forward) decided `ok`, so no operator gate applies."""
    rows = df[(df["path"] == path) & (df["status"] == "ok")]
    rows = rows[(rows["call_ms"] > 0) & rows["call_ms"].map(math.isfinite)].set_index("shape")
    return rows[~rows.index.duplicated(keep="last")]


def native_cells(res: Results) -> pd.DataFrame:
    """One row per Fig 6 (prompt_len, O) that any native system or the pipeline's OneLA has: each system's ms and
    the speedups over stock generate. `hf_<metric>_x`: stock / OneLA inside transformers, paired only within one
    run; `pipeline_x`: stock's GPU time per decode call / the pipeline's OneLA row's (latency_ms / T), across runs
    (two tools, each cell timed in its own run); NaN where a side is missing."""
    df = native_table(res)
    stock, hf = _native_ok(df, NATIVE_STOCK), _native_ok(df, NATIVE_ONELA)
    fig6 = fig6_table(res)
    pipe = ok_values(fig6, "onela", "latency_ms")
    t = fig6.drop_duplicates("shape").set_index("shape")["T"] if len(fig6) else pd.Series(dtype=float)
    pipe_call = (pipe / t.reindex(pipe.index)).dropna()
    shapes = list(dict.fromkeys([*df["shape"], *pipe_call.index]))
    where = {**df.drop_duplicates("shape").set_index("shape")[["prompt_len", "O"]].T.to_dict(),
             **(fig6.drop_duplicates("shape").set_index("shape")[["prompt_len", "O"]].T.to_dict() if len(fig6)
                else {})}
    out = []
    for sh in shapes:
        r = dict(shape=sh, prompt_len=where[sh]["prompt_len"], O=where[sh]["O"],
                 pipeline_call_ms=float(pipe_call.get(sh, math.nan)))
        for tag, rows in (("stock", stock), ("hf", hf)):
            for m in NATIVE_METRICS:
                col = "call_ms" if m == "call" else NATIVE_METRICS[m]
                r[f"{tag}_{m}_ms"] = float(rows.loc[sh, col]) if sh in rows.index else math.nan
        same_run = sh in stock.index and sh in hf.index and stock.loc[sh, "run_id"] == hf.loc[sh, "run_id"]
        for m in NATIVE_METRICS:
            r[f"hf_{m}_x"] = r[f"stock_{m}_ms"] / r[f"hf_{m}_ms"] if same_run else math.nan
        r["pipeline_x"] = r["stock_call_ms"] / r["pipeline_call_ms"]
        r["beams_identical"] = hf.loc[sh, "beams_identical_to_stock"] if same_run else ""
        r["same_selections"] = hf.loc[sh, "same_selections_as_stock"] if same_run else math.nan
        out.append(r)
    cols = ["shape", "prompt_len", "O", "pipeline_call_ms",
            *[f"{t}_{m}_ms" for t in ("stock", "hf") for m in NATIVE_METRICS],
            *[f"hf_{m}_x" for m in NATIVE_METRICS], "pipeline_x", "beams_identical", "same_selections"]
    return pd.DataFrame(out, columns=cols).sort_values(["prompt_len", "O"]).reset_index(drop=True)


def native_measure(res: Results, column: str, what: str) -> Measured:
    """The smallest and largest of a native_cells speedup column: value = the smallest, beside it the largest;
    NOT_YET naming the native system without any row."""
    df = native_table(res)
    if absent := unmeasured(df, NATIVE_STOCK, *([NATIVE_ONELA] if column.startswith("hf_") else [])):
        return not_yet(absent)
    s = native_cells(res)[column].dropna()
    s = s[s.map(math.isfinite)]
    if not len(s):
        return missing(df, NATIVE_STOCK, *([NATIVE_ONELA] if column.startswith("hf_") else []))
    return Measured(float(s.min()), f"{what}; smallest over {len(s)} (prompt, O) cells", beside=(
        ("largest", float(s.max())),))


# ---- Fig 7 ----
def fig7_ratios(res: Results, metric: str) -> dict[str, pd.Series]:
    """baseline -> baseline/OneLA ratio of `metric` over every paired operator-suite shape."""
    df = res["operator"]
    out = {b: paired_ratio(df, b, "onela", metric) for b in baselines_in(df)}
    return {b: r for b, r in out.items() if len(r)}


def _median_speedup(res: Results, baseline: str) -> Measured:
    r = fig7_ratios(res, "latency_ms").get(baseline)
    if r is None:
        return missing(res["operator"], "onela", baseline)
    return Measured(float(r.median()), f"median over {len(r)} paired shapes within {PRIMARY_GATE:.3g}")


def _largest_qwen_latency(res: Results, O: int) -> Measured:
    v, n = median_ok(res["operator"], "onela", "latency_ms", O=O, **paper.FIG7_LARGEST_QWEN)
    return Measured(v, f"{n} cell(s)") if n else missing(select(res["operator"], O=O, **paper.FIG7_LARGEST_QWEN),
                                                         "onela")


def _largest_qwen_speedups(res: Results, mode: str) -> dict[str, pd.Series]:
    """The paper's "16.0-56.5x over the baselines supporting this shape": framework baselines only, in `mode`."""
    df = select(res["operator"], **paper.FIG7_LARGEST_QWEN)
    df = df[df["O"].isin([3, 7])]
    return {b: r for b in paper_baselines(mode) if len(r := paired_ratio(df, b, "onela"))}


def _largest_qwen_extreme(res: Results, fn: str, mode: str) -> Measured:
    """Over the paper's baselines, so NOT_YET while one of them has no row at that shape (the value over the others
    would silently drop it); a baseline that ran and skipped the shape (it does not support it) is left out."""
    df = select(res["operator"], **paper.FIG7_LARGEST_QWEN)
    df = df[df["O"].isin([3, 7])]
    if len(df) and (absent := unmeasured(df, *paper_baselines(mode))):
        return not_yet(absent)
    per = _largest_qwen_speedups(res, mode)
    if not per:
        return missing(df, "onela", *paper_baselines(mode))
    best = {b: float(getattr(r, fn)()) for b, r in per.items()}
    b = (min if fn == "min" else max)(best, key=best.get)
    return Measured(best[b], f"{fn} over {len(per)} baselines at O=3/7; {display_name(b)}")


def _max_abs_err(res: Results) -> Measured:
    df = res["operator"]
    rows = df[(df["path"] == "onela") & df["status"].isin(["ok", "failed"])]
    err = rows["max_abs_err"].dropna()
    if not len(err):
        return NOT_YET
    failed = int((rows["status"] == "failed").sum())
    return Measured(float(err.max()), f"max over {len(err)} checked OneLA cells ({failed} failed)")


def _max_median_capacity(res: Results, mode: str) -> Measured:
    """The largest of the paper's baselines' medians, so NOT_YET while one of them has no operator row."""
    baselines = paper_baselines(mode)
    if len(res["operator"]) and (absent := unmeasured(res["operator"], *baselines)):
        return not_yet(absent)
    med = {b: float(r.median()) for b, r in fig7_ratios(res, "persistent_bytes").items() if b in baselines}
    if not med:
        return missing(res["operator"], "onela", *baselines)
    b = max(med, key=med.get)
    return Measured(med[b], f"largest of {len(med)} baseline medians: {display_name(b)}")


# ---- Fig 8 ----
FIG8_SUITE = {"latency_ms": "recurrent_path", "persistent_bytes": "recurrent_path",
              "written_bytes": "recurrent_path", "dram_bytes": "traffic", "arith_intensity": "traffic"}


def fig8_table(res: Results, metric: str) -> pd.DataFrame:
    """Rows of the paper's Fig 8 cell (R=4 W=512 Qwen) from the suite that measures `metric`."""
    return select(res[FIG8_SUITE[metric]], **paper.FIG8_CELL)


def fig8_value(res: Results, path: str, metric: str, O: int, scale: float = 1.0) -> Measured:
    v, n = median_ok(fig8_table(res, metric), path, metric, O=O)
    if not n:
        df = fig8_table(res, metric)
        return missing(df[df["O"] == O], path)
    return Measured(v / scale, f"{n} cell(s)" if n > 1 else "")


def fig8_ratio(res: Results, num: str, den: str, metric: str, O: int) -> Measured:
    df = fig8_table(res, metric)
    r = paired_ratio(df[df["O"] == O], num, den, metric)
    if not len(r):
        return missing(df[df["O"] == O], num, den)
    return Measured(float(r.median()), f"median of {len(r)} pairs" if len(r) > 1 else "")


def _all_measures(mode: str) -> dict:
    """key -> function(Results) -> Measured for every paper key of a path we run, with each FullState system in
    `mode`, plus the same keys for the paths shown beside a paper system we cannot run (paper.NO_KERNEL) and for
    the ReplaySSM kernel."""
    ctl, vllm = mode_path("controlled_fullstate", mode), mode_path("vllm_fullstate", mode)
    m = {
        "fig6.speedup_vs_controlled.min": lambda r: _extreme(fig6_speedups(r, mode), "min", "(prompt, O) cells",
                                                             missing(fig6_table(r), ctl, "onela")),
        "fig6.speedup_vs_controlled.max": lambda r: _extreme(fig6_speedups(r, mode), "max", "(prompt, O) cells",
                                                             missing(fig6_table(r), ctl, "onela")),
        "fig6.controlled_vs_vllm.min": lambda r: _extreme(
            fig6_controlled_vs_vllm_pct(r, mode), "min", "(prompt, O) cells", missing(fig6_table(r), ctl, vllm)),
        "fig6.controlled_vs_vllm.max": lambda r: _extreme(
            fig6_controlled_vs_vllm_pct(r, mode), "max", "(prompt, O) cells", missing(fig6_table(r), ctl, vllm)),
        "fig7a.onela_largest_qwen.O3": lambda r: _largest_qwen_latency(r, 3),
        "fig7a.onela_largest_qwen.O7": lambda r: _largest_qwen_latency(r, 7),
        "fig7a.speedup_largest_qwen.min": lambda r: _largest_qwen_extreme(r, "min", mode),
        "fig7a.speedup_largest_qwen.max": lambda r: _largest_qwen_extreme(r, "max", mode),
        "fig7.max_abs_err": _max_abs_err,
        "fig7b.max_median_capacity_reduction": lambda r: _max_median_capacity(r, mode),
        "fig8c.ai.onela.O3": lambda r: fig8_value(r, "onela", "arith_intensity", 3),
        "fig8c.traffic.onela.O3": lambda r: fig8_value(r, "onela", "dram_bytes", 3, MIB),
    }
    beside = [p for _, p in paper.NO_KERNEL.values()] + [paper.REPLAYSSM_KERNEL]
    for b in paper.FIG7_BASELINES:
        m[f"fig7a.median_speedup.{b}"] = lambda r, b=mode_path(b, mode): _median_speedup(r, b)
    for O in (3, 7):
        for p in ("onela", "vllm_fullstate", *beside):
            m[f"fig8a.latency.{p}.O{O}"] = lambda r, p=mode_path(p, mode), O=O: fig8_value(r, p, "latency_ms", O)
        m[f"fig8a.reduction_vs_fullstate.O{O}"] = lambda r, O=O: fig8_ratio(r, vllm, "onela", "latency_ms", O)
        for what, metric in (("capacity", "persistent_bytes"), ("writes", "written_bytes")):
            m[f"fig8b.{what}.onela.O{O}"] = lambda r, metric=metric, O=O: fig8_value(r, "onela", metric, O, MIB)
            m[f"fig8b.{what}_reduction_vs_fullstate.O{O}"] = \
                lambda r, metric=metric, O=O: fig8_ratio(r, vllm, "onela", metric, O)
    for b in ("vllm_fullstate", *beside):
        p = mode_path(b, mode)
        m[f"fig8c.traffic_reduction.{b}.O3"] = lambda r, p=p: fig8_ratio(r, p, "onela", "dram_bytes", 3)
        m[f"fig8c.ai_gain.{b}.O3"] = lambda r, p=p: fig8_ratio(r, "onela", p, "arith_intensity", 3)
    return m


def _median_ratio(res: Results, baseline: str, metric: str, what: str) -> Measured:
    r = fig7_ratios(res, metric).get(baseline)
    if r is None:
        return missing(res["operator"], "onela", baseline)
    return Measured(float(r.median()), f"median over {len(r)} paired {what} within {PRIMARY_GATE:.3g}")


# The numbers of a FullState system the paper does not compare against (plots.style.NOT_IN_PAPER), each computed as
# its paper counterpart is for the paper's baselines: (label, unit, function(Results, path) -> Measured).
NOT_IN_PAPER_MEASURES: list[tuple[str, str, object]] = [
    ("Fig 7a: median latency speedup of OneLA over it (operator suite)", "x",
     lambda r, p: _median_ratio(r, p, "latency_ms", "shapes")),
    ("Fig 7b: median persistent-capacity reduction of OneLA over it (operator suite)", "x",
     lambda r, p: _median_ratio(r, p, "persistent_bytes", "shapes")),
    *[(f"Fig 8a: recurrent-path latency (R=4 W=512 Qwen), O={O}", "ms",
       lambda r, p, O=O: fig8_value(r, p, "latency_ms", O)) for O in (3, 7)],
    *[(f"Fig 8a: its latency / OneLA's, O={O}", "x",
       lambda r, p, O=O: fig8_ratio(r, p, "onela", "latency_ms", O)) for O in (3, 7)],
    *[(f"Fig 8b: persistent recurrent-state capacity, O={O}", "MiB",
       lambda r, p, O=O: fig8_value(r, p, "persistent_bytes", O, MIB)) for O in (3, 7)],
    ("Fig 8c: its DRAM traffic / OneLA's, O=3", "x", lambda r, p: fig8_ratio(r, p, "onela", "dram_bytes", 3)),
]


def not_in_paper(res: Results) -> list[tuple[str, str, str, Measured]]:
    """(path, label, unit, Measured) for every NOT_IN_PAPER system's paths (the paper's mode first) and measure."""
    return [(p, label, unit, f(res, p)) for p in not_in_paper_paths() for label, unit, f in NOT_IN_PAPER_MEASURES]


def loose_gates(res: Results) -> dict[str, float]:
    """path -> the looser gate its ok rows were held to (their `tolerance` above the paper's 4.88e-4)."""
    rows = res.all_rows()
    if not len(rows):
        return {}
    rows = rows[rows["suite"] != NATIVE_SUITE]         # a beam-score tolerance, not a looser operator gate
    ok = rows[(rows["status"] == "ok") & (rows["tolerance"] > PRIMARY_GATE)]
    return {p: float(t) for p, t in ok.groupby("path")["tolerance"].max().items()}


def own_gate_label(res: Results) -> str:
    gates = loose_gates(res)
    return "at the rows' own gates" + (" (" + ", ".join(f"{display_name(p)} {t:g}" for p, t in gates.items()) + ")"
                            if gates else "")


def _differs(a: float, b: float) -> bool:
    return not (a == b or (math.isnan(a) and math.isnan(b)))


def _with_own_gate(f):
    """f, plus beside it its value at the rows' own gates where that differs from the primary one."""
    def g(res: Results) -> Measured:
        primary = f(res)
        if primary.missing == NO_GDN_KERNEL or not loose_gates(res):
            return primary
        with own_gates():
            own = f(res)
        if _differs(own.value, primary.value):
            return replace(primary, beside=primary.beside + ((own_gate_label(res), own.value),))
        return primary
    return g


def _no_kernel(key: str, system: str, m: dict):
    """The measure of a paper number of `system` (paper.NO_KERNEL): no value; beside it, unpaired, the same
    number for the path shown in its place and for the released ReplaySSM kernel (each with its own-gate value
    where that differs)."""
    why, stand_in = paper.NO_KERNEL[system]

    def f(res: Results) -> Measured:
        beside: list[tuple[str, float]] = []
        for p, label in ((stand_in, "not paired"), (paper.REPLAYSSM_KERNEL, "the ReplaySSM kernel")):
            k = key.replace(system, p)
            if k not in m:
                continue
            v = m[k](res)
            gates = loose_gates(res)
            if v.measured:
                beside.append((f"{display_name(p)}, {label}", v.value))
            within = "" if v.measured else f", every row above {PRIMARY_GATE:.3g}"
            beside += [(f"{display_name(p)}, {label}, at its own {gates[p]:g} gate{within}" if p in gates else
                        f"{display_name(p)} {lb}", x) for lb, x in v.beside]
        return Measured(math.nan, why, NO_GDN_KERNEL, tuple(beside))
    return f


def _reads_fullstate(key: str) -> bool:
    """Whether the paper number `key` reads a FullState system: Fig 6 (Controlled FullState in every number),
    a FullState system named in the key, and the numbers over every Fig 7 baseline."""
    return key.startswith("fig6.") or "fullstate" in key or key.startswith(
        ("fig7a.speedup_largest_qwen.", "fig7b.max_median_capacity_reduction"))


# The paper numbers that read a FullState system: each has an index-mode counterpart (index_measures()).
MODE_KEYS = tuple(n.key for n in paper.NUMBERS if _reads_fullstate(n.key))


def measures(mode: str = PAPER_MODE) -> dict:
    """paper key -> function(Results) -> Measured, every FullState system in `mode` (the paper's by default: the
    pairing with the paper's numbers). Every key of paper.NUMBERS has one (a test checks)."""
    m = {k: _with_own_gate(f) for k, f in _all_measures(mode).items()}
    out = {}
    for n in paper.NUMBERS:
        system = next((s for s in paper.NO_KERNEL if f".{s}." in f"{n.key}."), None)
        out[n.key] = _no_kernel(n.key, system, m) if system else m[n.key]
    return out


def index_measures() -> dict:
    """MODE_KEYS -> function(Results) -> Measured with every FullState system in the index mode: the same numbers
    for the index-mode rows, shown beside the paper pairing, labelled, and never paired with the paper's value."""
    m = measures(INDEX_MODE)
    return {k: m[k] for k in MODE_KEYS}


def mode_paths(key: str, mode: str) -> list[str]:
    """The FullState paths the paper number `key` reads in `mode` (for labels and notes); [] for a key of MODE_KEYS'
    complement."""
    if not _reads_fullstate(key):
        return []
    if key.startswith("fig6.speedup"):
        systems = ["controlled_fullstate"]
    elif key.startswith("fig6."):
        systems = ["controlled_fullstate", "vllm_fullstate"]
    elif key.startswith(("fig7a.speedup_largest_qwen.", "fig7b.")):
        systems = [b for b in paper.FIG7_BASELINES if b in FULLSTATE_SYSTEMS]
    else:
        systems = [s for s in FULLSTATE_SYSTEMS if f".{s}." in f"{key}."] or ["vllm_fullstate"]   # *_vs_fullstate
    return [mode_path(s, mode) for s in systems]
