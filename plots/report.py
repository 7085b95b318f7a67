"""results/REPORT.md: every paper number (docs/design.md §7) beside ours, the environment, and what did not run.

Generated from results/ alone and deterministic (no timestamp of its own), so regenerating from unchanged
results changes nothing. "ours" for each paper number comes from plots/ours.py.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from plots import fig_breakdown, paper
from plots.data import SHAPE_KEY, SUITES, Results
from plots.ours import measures

NOT_MEASURED = "not measured yet"
UNIT = {"x": "×", "%": "%", "ms": " ms", "MiB": " MiB", "FLOP/B": " FLOP/B", "": ""}


def fmt(v: float, unit: str) -> str:
    if math.isnan(v):
        return NOT_MEASURED
    if math.isinf(v):
        return "inf"
    if unit == "":
        return f"{v:.2e}"
    s = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:#.3g}".rstrip(".")
    return s + UNIT[unit]


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return out


def paper_vs_ours(res: Results) -> list[str]:
    m = measures()
    rows = []
    for n in paper.NUMBERS:
        ours = m[n.key](res)
        ratio = f"{ours.value / n.value:.2f}" if ours.measured and math.isfinite(ours.value) else "—"
        quantity = n.quantity + ("" if n.in_design else " †")
        value = f"none: {ours.missing}" if not ours.measured and ours.missing else fmt(ours.value, n.unit)
        rows.append([n.where, quantity, n.text + UNIT[n.unit], value, ratio,
                     f"{n.source}" + (f"; ours: {ours.note}" if ours.note else "")])
    return _table(["where", "quantity", "paper", "ours", "ours/paper", "source; how ours was computed"], rows)


def inputs(res: Results) -> list[str]:
    rows = []
    for s in SUITES:
        df = res[s]
        counts = df["status"].value_counts()
        rows.append([s, len(df), *(int(counts.get(k, 0)) for k in ("ok", "skipped", "failed"))])
    out = _table(["suite (results/<suite>.csv)", "rows", "ok", "skipped", "failed"], rows)
    if res.notes:
        out += ["", f"**Read but not drawn ({len(res.notes)})**: lines that are not valid rows, torn lines, "
                    "conflicting copies of a cell, unreadable env records."]
        out += [f"- {_cell(n)}" for n in res.notes]
    return out


def _frameworks(rec: dict) -> str:
    """Installed framework versions, else the version whose kernel modules the run's baseline pack held."""
    pk = rec.get("packages", {})
    packed = {}
    pack = rec.get("baseline_pack")
    for fw in (pack if isinstance(pack, dict) else {}).get("frameworks", []):    # a str: why no pack was read
        name, _, ver = fw.get("requirement", "").partition("==")
        packed[name] = ver
    out = []
    for p in ("vllm", "sglang", "flashinfer-python", "tensorrt_llm", "tensorrt-llm"):
        if pk.get(p, "not installed") != "not installed":
            out.append(f"{p} {pk[p]}")
        elif p in packed:
            out.append(f"{p} {packed[p]} (pack)")
    return ", ".join(out) or "none"


def _ceilings(c: dict | None) -> str:
    if not c:
        return "not measured"
    parts = []
    if "copy_bytes_per_s" in c:
        parts.append(f"copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s")
    for k in ("fp32", "tf32", "bf16"):
        if f"{k}_flop_per_s" in c:
            parts.append(f"{k} {c[f'{k}_flop_per_s'] / 1e12:.0f} TFLOP/s")
    return ", ".join(parts)


def environment(res: Results) -> list[str]:
    rows_all = res.all_rows()
    used = rows_all.groupby("run_id")["suite"].agg(lambda s: ", ".join(sorted(set(s)))) if len(rows_all) else {}
    rows = []
    for run_id, suites in dict(used).items():
        rec = res.env.get(run_id)
        if rec is None:
            rows.append([run_id or "(empty run_id)", suites, "env record missing", "", "", "", "", "", "", ""])
            continue
        frameworks = _frameworks(rec)
        rows.append([run_id, suites, rec.get("gpu", "?"), rec.get("nvidia_smi", ""), rec.get("torch", "?"),
                     rec.get("triton", "?"), rec.get("cuda", "?"), frameworks, rec.get("git_commit", "?"),
                     f"{rec.get('date_utc', '?')}; {_ceilings(rec.get('ceilings'))}"])
    if not rows:
        return ["No results rows yet, so no env record is referenced."]
    return _table(["run_id", "suites", "GPU", "nvidia-smi (driver, clocks, power)", "torch", "triton", "CUDA",
                   "frameworks", "git commit", "date (UTC); measured ceilings"], rows)


def _shape(r) -> str:
    return " ".join(f"{k}={r[k]}" for k in SHAPE_KEY if str(r[k]) not in ("", "nan"))


def not_run(res: Results) -> list[str]:
    df = res.all_rows()
    failed = df[df["status"] == "failed"]
    out = [f"**Failed cells ({len(failed)})** — never used in a ratio; grouped by reason, every shape listed."]
    if len(failed):
        rows = []
        for (s, p, reason), grp in failed.groupby(["suite", "path", "reason"], dropna=False, sort=False):
            errs = grp["max_abs_err"].dropna()
            rows.append([s, p, len(grp), "; ".join(_shape(r) for _, r in grp.iterrows()),
                         ", ".join(sorted({str(e) for e in errs})) or "-", reason])
        out += _table(["suite", "path", "cells", "shapes", "max_abs_err", "reason"], rows)
    skipped = df[df["status"] == "skipped"]
    out += ["", f"**Skipped cells ({len(skipped)})**, grouped by reason."]
    if len(skipped):
        g = skipped.groupby(["suite", "path", "reason"], dropna=False)["geometry"]
        out += _table(["suite", "path", "cells", "geometries", "reason"],
                      [[s, p, len(geo), ", ".join(sorted(set(geo.astype(str)))), reason]
                       for (s, p, reason), geo in g])
    return out


def build(res: Results, figures: list[Path] | None = None, report_dir: Path = Path(".")) -> str:
    lines = ["# Paper vs ours", "",
             "Generated by `python -m plots` (`./run_all.sh figures`) from `results/` alone; do not edit by hand.",
             "\"ours\" is computed from the result rows (only `status == ok` cells with both sides ok on the "
             "same shape feed a ratio); \"paper\" is `plots/paper.py` (paper §4, docs/design.md §7). "
             "† = a number from the paper's text beyond docs/design.md §7's table.", "",
             "## Numbers to reproduce", "", *paper_vs_ours(res), "",
             "## Where a decode call's time goes (not in the paper)", "", *fig_breakdown.report_lines(res.root), "",
             "## Inputs", "", *inputs(res), "",
             "## Environment (from results/env/<run_id>.json)", "", *environment(res), "",
             "## Cells that were skipped or failed", "", *not_run(res), ""]
    if figures:
        lines += ["## Figures", ""]
        lines += [f"![{f.stem}]({Path(os.path.relpath(f, report_dir)).as_posix()})" for f in figures
                  if f.suffix == ".png"]
        lines.append("")
    return "\n".join(lines)


def write(res: Results, path: Path, figures: list[Path] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(build(res, figures, path.parent))
    return path
