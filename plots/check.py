"""`python -m plots.check [RUN_DIR] [--reference results]`: does a run agree with the committed results and the paper?

A run folder is what `python -m sweeps.run ... results_dir=RUN_DIR` writes (`./run_all.sh quick` makes one):
`<suite>.csv` files and `env/<run_id>.json` records. Its rows are matched to the reference's rows (default:
the committed `results/`) by `config_hash`, which hashes everything that defines a cell (suite, path, geometry,
shape, prompt length, lineage, seed) and nothing measured. Every paper number of `plots/paper.py` is then
computed, by the same code as `results/REPORT.md` (`plots/reproduced.py`), twice: on this run's matched rows and on the
reference's rows of the same cells, so a run of a few cells is compared with the committed values *of those
cells*. A paper FullState number pairs only with the paper's mode of each FullState system (`<system>_paper`), as in
REPORT; its index-mode value (`<system>`) is a line of its own, marked "[index mode]", compared run against
reference and never paired with the paper's value. Beside them: per suite and path, the latency ratio run /
reference and whether the byte counts agree.

Gates (the verdict column; every tolerance is here, in TOLERANCES):
  - correctness, always: no cell of the run failed (a failed cell is a wrong answer, a crash or an error
    above its gate), and OneLA's largest error is within the paper's 4.88e-4;
  - against the reference, only when both ran on the same GPU model (the env records' `gpu`): byte counts
    from the paths' tensors (capacity, writes) exactly; latencies and latency ratios within 15 %; DRAM
    traffic (hardware counters) within 10 %; the Fig 6 |Controlled - vLLM| percentage within 3 points.
    On another GPU model the values are printed and marked "other GPU", never failed.
A cell that ran in the reference but was skipped in this run (e.g. a framework baseline without the baseline
pack) is "not run", never a failure; its reason is listed. The paper's values are printed for reading: the
reproduction differs from the paper by design in places (README, docs/methods.md), so they gate nothing.

Exit status: 0 every gate holds; 1 a correctness gate failed or a number left its tolerance; 2 nothing could
be compared (no row of RUN_DIR matches a reference row, or RUN_DIR holds no results).
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from plots import paper
from plots.data import Results, load_results
from plots.reproduced import MODE_KEYS, index_measures, measures, mode_paths
from plots.report import NOT_PAIRED, UNIT, fmt
from plots.style import INDEX_MODE, PAPER_MODE, display_name, ordered

CHECKED_SUITES = ("operator", "recurrent_path", "traffic", "full_model")
EXIT_OK, EXIT_FAIL, EXIT_NOTHING = 0, 1, 2

# kind -> (how a run value is compared with the reference value, tolerance)
TOLERANCES = {
    "latency": ("relative", 0.15),     # a time or a ratio of times, same GPU model
    "bytes": ("relative", 1e-9),       # byte counts from the paths' tensors: exact
    "traffic": ("relative", 0.10),     # DRAM bytes from hardware counters (L2 hits vary between runs)
    "percent": ("absolute", 3.0),      # a percentage difference of two latencies, in points
    "error": ("bound", float(paper.value("fig7.max_abs_err"))),   # OneLA's max error: the paper's bound
}

# The kind of every paper number (plots/paper.py keys), by prefix; first match wins.
KIND_BY_PREFIX = (
    ("fig6.controlled_vs_vllm", "percent"),
    ("fig6.", "latency"),
    ("fig7.max_abs_err", "error"),
    ("fig7a.", "latency"),
    ("fig7b.", "bytes"),
    ("fig8a.", "latency"),
    ("fig8b.", "bytes"),
    ("fig8c.", "traffic"),
)

OK, FAIL, NOT_RUN, NO_REF, OTHER_GPU, INFO = "ok", "FAIL", "not run", "no reference", "other GPU", "info"


def kind_of(key: str) -> str:
    for prefix, kind in KIND_BY_PREFIX:
        if key.startswith(prefix):
            return kind
    raise KeyError(f"no tolerance kind for paper number {key!r}")


@dataclass
class Line:
    metric: str
    paper: str
    reference: str
    run: str
    ratio: str
    verdict: str
    note: str = ""


def _ratio(run: float, ref: float) -> str:
    if not (math.isfinite(run) and math.isfinite(ref)) or ref == 0:
        return "—"
    return f"{run / ref:.3f}"


def judge(kind: str, run: float, ref: float, same_gpu: bool) -> str:
    """The verdict of one number: OK / FAIL / NOT_RUN / NO_REF / OTHER_GPU / INFO (measured in neither)."""
    how, tol = TOLERANCES[kind]
    if how == "bound":                                  # a correctness gate: holds on any GPU
        if math.isnan(run):
            return NOT_RUN
        return OK if run <= tol else FAIL
    if math.isnan(run) and math.isnan(ref):
        return INFO                                     # measured in neither (e.g. TensorRT-LLM)
    if math.isnan(run):
        return NOT_RUN
    if math.isnan(ref):
        return NO_REF
    if not same_gpu:
        return OTHER_GPU
    if how == "absolute":
        return OK if abs(run - ref) <= tol else FAIL
    if ref == 0:
        return OK if run == 0 else FAIL
    return OK if abs(run / ref - 1) <= tol else FAIL


def tolerance_text(kind: str) -> str:
    how, tol = TOLERANCES[kind]
    if how == "bound":
        return f"<= {tol:.3g}"
    if how == "absolute":
        return f"±{tol:g} points"
    return "exact" if tol < 1e-6 else f"±{tol:.0%}"


def restrict(res: Results, keys: dict[str, set]) -> Results:
    """The same Results with each suite's rows limited to the given config hashes."""
    suites = {s: (df[df["config_hash"].isin(keys.get(s, set()))].reset_index(drop=True) if len(df) else df)
              for s, df in res.suites.items()}
    return Results(res.root, suites, res.env)


def gpus(res: Results, suites=CHECKED_SUITES, keys: dict[str, set] | None = None) -> set[str]:
    """GPU models named by the env records of the runs behind the (matched) rows; '?' for a missing record."""
    out = set()
    for s in suites:
        df = res[s]
        if keys is not None:
            df = df[df["config_hash"].isin(keys.get(s, set()))]
        for run_id in df["run_id"].unique():
            rec = res.env.get(run_id)
            out.add(str(rec.get("gpu", "?")) if rec else "?")
    return out


def _ok_metric(df: pd.DataFrame, metric: str) -> pd.Series:
    rows = df[df["status"] == "ok"].set_index("config_hash")[metric]
    return rows[np.isfinite(rows) & (rows > 0)]


def per_path_lines(run: Results, ref: Results, same_gpu: bool) -> list[Line]:
    """Per suite and path: latency run / reference over the matched ok cells, and the byte counts."""
    lines = []
    for s in CHECKED_SUITES:
        a, b = run[s], ref[s]
        if not len(a) or not len(b):
            continue
        for p in ordered(set(a["path"]) & set(b["path"])):
            pa, pb = a[a["path"] == p], b[b["path"] == p]
            n = len(pa)
            if s == "traffic":
                ra, rb = _ok_metric(pa, "dram_bytes"), _ok_metric(pb, "dram_bytes")
                kind, label, unit = "traffic", "DRAM bytes", "MiB"
            else:
                ra, rb = _ok_metric(pa, "latency_ms"), _ok_metric(pb, "latency_ms")
                kind, label, unit = "latency", "latency", "ms"
            both = ra.index.intersection(rb.index)
            name = f"{s}: {display_name(p)} {label}"
            if not len(both):
                why = _skip_reason(pa) if len(ra) == 0 and len(rb) else ""
                verdict = NOT_RUN if len(rb) else NO_REF
                if not len(rb) and not len(ra):
                    verdict = INFO
                    why = "skipped in both: " + (_skip_reason(pa) or "no value")
                lines.append(Line(f"{name} ({n} cells)", "", f"{len(rb)} ok", f"{len(ra)} ok", "—", verdict, why))
                continue
            r = (ra[both] / rb[both])
            med = float(r.median())
            scale = 2 ** 20 if unit == "MiB" else 1.0
            verdict, note = judge(kind, med, 1.0, same_gpu), ""
            if kind == "latency" and _eager_timed(pa, pb, both):
                verdict, note = INFO, EAGER_NOTE
            lines.append(Line(f"{name}, median run/ref over {len(both)} of {n} cells ({tolerance_text(kind)})", "",
                              f"{float(rb[both].median()) / scale:.4g} {unit}",
                              f"{float(ra[both].median()) / scale:.4g} {unit}",
                              f"{med:.3f} ({float(r.min()):.3f}-{float(r.max()):.3f})", verdict, note))
            if s != "traffic":
                lines.append(_bytes_line(s, p, pa, pb, same_gpu))
    return lines


# A path timed eagerly (a Python loop of launches no CUDA graph can hold: the torch references) measures the
# host's launch rate as much as the GPU, so its latency moves with the machine's CPU and load; it is shown, not gated.
EAGER_NOTE = "eager-timed (host launch bound): shown, not gated"


def _eager_timed(pa: pd.DataFrame, pb: pd.DataFrame, hashes: pd.Index) -> bool:
    timers = pd.concat([df[df["config_hash"].isin(hashes)]["timer"] for df in (pa, pb) if "timer" in df])
    return bool(len(timers)) and bool(timers.astype(str).str.startswith("eager").all())


def _bytes_line(suite: str, path: str, pa: pd.DataFrame, pb: pd.DataFrame, same_gpu: bool) -> Line:
    cols = ["persistent_bytes", "written_bytes"]
    a = pa[pa["status"] == "ok"].set_index("config_hash")[cols]
    b = pb[pb["status"] == "ok"].set_index("config_hash")[cols]
    both = a.index.intersection(b.index)
    name = f"{suite}: {display_name(path)} capacity and writes (bytes, exact)"
    if not len(both):
        return Line(name, "", "", "", "—", NOT_RUN if len(b) else NO_REF)
    x, y = a.loc[both].fillna(-1), b.loc[both].fillna(-1)
    differ = int((x != y).any(axis=1).sum())
    if not same_gpu:
        verdict = OTHER_GPU
    else:
        verdict = OK if differ == 0 else FAIL
    return Line(name, "", f"{len(both)} cells", f"{len(both) - differ} equal", "—", verdict,
                f"{differ} cell(s) differ" if differ else "")


def _skip_reason(df: pd.DataFrame) -> str:
    reasons = df.loc[df["status"] == "skipped", "reason"].astype(str)
    if not len(reasons):
        return ""
    top = reasons.value_counts().index[0]
    return top if len(top) <= 160 else top[:157] + "..."


INDEX_MARK = "[index mode]"


def paper_lines(run: Results, ref: Results, same_gpu: bool) -> list[Line]:
    """Every paper number with the paper's mode of each FullState system, then, for a number that reads a
    FullState system, the same number in the index mode (marked INDEX_MARK, paper column NOT_PAIRED)."""
    m, idx = measures(), index_measures()
    lines = []
    for n in paper.NUMBERS:
        kind = kind_of(n.key)
        for mode, f in ((PAPER_MODE, m[n.key]), (INDEX_MODE, idx.get(n.key))):
            if f is None:
                continue
            a, b = f(run), f(ref)
            verdict = judge(kind, a.value, b.value, same_gpu)
            note = _why_not(run, n.key, mode) if verdict in (NOT_RUN, INFO) else ""
            if verdict == INFO:
                note = "measured in neither; " + note
            mark = f" {INDEX_MARK}" if mode == INDEX_MODE else ""
            lines.append(Line(f"{n.where}: {n.quantity}{mark} ({tolerance_text(kind)})",
                              NOT_PAIRED if mode == INDEX_MODE else n.text + UNIT[n.unit],
                              fmt(b.value, n.unit), fmt(a.value, n.unit), _ratio(a.value, b.value), verdict, note))
    return lines


def _why_not(run: Results, key: str, mode: str = PAPER_MODE) -> str:
    """A short reason for a paper number this run could not compute: the skip reasons of the paths it needs (the
    FullState ones in `mode`), or which of them has no row among the cells matched with the reference."""
    names = mode_paths(key, mode) if key in MODE_KEYS else [p for p in paper.FIG7_BASELINES if p in key]
    suite = "operator" if key.startswith("fig7") else "full_model" if key.startswith("fig6") else \
        "traffic" if key.startswith("fig8c") else "recurrent_path"
    df = run[suite]
    if not len(df):
        return f"no {suite} rows matched"
    if absent := [p for p in names if not (df["path"] == p).any()]:
        return "no row among the matched cells of " + ", ".join(display_name(p) for p in absent)
    for p in names:
        why = _skip_reason(df[df["path"] == p])
        if why:
            return f"{display_name(p)}: {why}"
    return "cells not in this run"


def correctness_lines(run: Results) -> list[Line]:
    rows = run.all_rows()
    failed = rows[rows["status"] == "failed"] if len(rows) else rows
    detail = ""
    if len(failed):
        first = failed.iloc[0]
        detail = (f"e.g. {first['suite']} {first['path']} {first['geometry']} R={first['R']} W={first['W']} "
                  f"T={first['T']}: {str(first['reason'])[:120]}")
    errs = rows[(rows["path"] == "onela") & rows["status"].isin(["ok", "failed"])]["max_abs_err"].dropna() \
        if len(rows) else pd.Series(dtype=float)
    worst = float(errs.max()) if len(errs) else math.nan
    bound = TOLERANCES["error"][1]
    return [
        Line("correctness: failed cells in this run (every suite)", "", "", str(len(failed)), "—",
             OK if not len(failed) else FAIL, detail),
        Line(f"correctness: OneLA max |o - o_FP32 FullState| over this run's checked cells (<= {bound:.3g})",
             f"{bound:.3g}", "", fmt(worst, ""), "—", judge("error", worst, math.nan, True)),
    ]


def table(lines: list[Line]) -> str:
    head = ["metric", "paper", "reference", "this run", "ratio", "verdict"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for ln in lines:
        verdict = ln.verdict + (f": {ln.note}" if ln.note else "")
        cells = [ln.metric, ln.paper, ln.reference, ln.run, ln.ratio, verdict]
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out)


def check(run_dir: Path, ref_dir: Path, ref: Results | None = None) -> tuple[int, str]:
    """(exit status, the report text). `ref`: the reference already loaded from ref_dir (tests reuse it)."""
    if not run_dir.is_dir():
        return EXIT_NOTHING, f"[check] {run_dir} is not a folder"
    run = load_results(run_dir)
    ref = ref if ref is not None else load_results(ref_dir)
    present = {s: len(df) for s, df in run.suites.items() if len(df)}
    out = [f"[check] run {run_dir}/ against reference {ref_dir}/"]
    if not present:
        return EXIT_NOTHING, "\n".join(out + [f"[check] no results rows in {run_dir}: it holds no <suite>.csv "
                                              f"({', '.join(CHECKED_SUITES)}); nothing to compare"])
    keys = {s: set(run[s]["config_hash"]) & set(ref[s]["config_hash"]) for s in CHECKED_SUITES}
    matched = {s: len(k) for s, k in keys.items() if k}
    out.append("[check] rows: " + ", ".join(f"{s} {n}" for s, n in present.items()) +
               "; matched by config_hash: " + (", ".join(f"{s} {n}" for s, n in matched.items()) or "none"))
    lines = correctness_lines(run)
    if not matched:
        out.append(table(lines))
        out.append(f"[check] no row of {run_dir} matches a reference row by config_hash: the reference holds the "
                   f"cells of {', '.join(CHECKED_SUITES)} as committed (a smoke run, a CPU run or other shapes "
                   f"match none); nothing to compare against")
        failed = any(ln.verdict == FAIL for ln in lines)
        return (EXIT_FAIL if failed else EXIT_NOTHING), "\n".join(out)
    run_m, ref_m = restrict(run, keys), restrict(ref, keys)
    run_gpu, ref_gpu = gpus(run, keys=keys), gpus(ref, keys=keys)
    same_gpu = len(ref_gpu) == 1 and run_gpu == ref_gpu and "?" not in run_gpu
    out.append(f"[check] GPU: this run {', '.join(sorted(run_gpu))}; reference {', '.join(sorted(ref_gpu))}"
               + ("" if same_gpu else " -- not the same model: timings and bytes are shown, not judged"))
    lines += paper_lines(run_m, ref_m, same_gpu)
    lines += per_path_lines(run_m, ref_m, same_gpu)
    out.append(table(lines))
    counts = pd.Series([ln.verdict for ln in lines]).value_counts()
    out.append("[check] " + ", ".join(f"{v}: {int(counts.get(v, 0))}" for v in (OK, FAIL, NOT_RUN, NO_REF, OTHER_GPU,
                                                                                  INFO) if counts.get(v, 0)))
    if (counts.get(FAIL, 0)) > 0:
        out.append("[check] FAILED: " + "; ".join(ln.metric for ln in lines if ln.verdict == FAIL))
        return EXIT_FAIL, "\n".join(out)
    out.append("[check] passed: every correctness gate holds and every compared number is within its tolerance")
    return EXIT_OK, "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m plots.check", description=__doc__.split("\n\n")[0],
                                 epilog="Exit status: 0 every gate holds; 1 a gate failed; 2 nothing to compare.")
    ap.add_argument("run_dir", nargs="?", default="results",
                    help="a run folder (<suite>.csv + env/); default results/, i.e. the committed results "
                         "against themselves and the paper")
    ap.add_argument("--reference", default="results", help="the reference results folder (default: results/)")
    ap.add_argument("--out", default=None, help="also write the report to this file")
    args = ap.parse_args(argv)
    code, text = check(Path(args.run_dir), Path(args.reference))
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
