"""results/REPORT.md: every paper number (docs/design.md §7) beside ours, the environment, and what did not run;
and README.md's claims table (between its `<!-- claims:begin -->` / `<!-- claims:end -->` markers), the same
numbers grouped by the paper's claims with the command and the recorded GPU time of each suite.

Generated from results/ alone and deterministic (no timestamp of its own), so regenerating from unchanged
results changes nothing. "ours" for each paper number comes from plots/reproduced.py: a paper FullState number pairs
only with the paper-mode rows (`<system>_paper`), and where it reads a FullState system the index-mode value
follows in its own row (REPORT) or in brackets (README), labelled "index mode" and never paired with the paper's.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from artifact.results import ResultsFileError, read_wall
from plots import fig_beam_scaling, fig_breakdown, paper, targets
from plots.data import NATIVE_SUITE, SHAPE_KEY, SUITES, Results
from plots.reproduced import (MODE_KEYS, index_measures, measures, mode_paths, native_cells, native_measure,
                              native_table, not_in_paper)
from plots.style import (INDEX_MODE, NATIVE_COMMAND, NATIVE_ONELA, NATIVE_SKIPS, NATIVE_STOCK, PAPER_MODE,
                         display_name)

NOT_MEASURED = "not measured yet"
NOT_PAIRED = "not paired"
INDEX_ROW = "↳ same, index mode (not the paper's mode)"
UNIT = {"x": "×", "%": "%", "ms": " ms", "MiB": " MiB", "FLOP/B": " FLOP/B", "min": " min", "": ""}


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


def ours_text(ours, unit: str) -> str:
    """Our value as REPORT and README print it: the primary number (rows within 4.88e-4), or why there is none;
    then each value carried beside it, labelled, in brackets."""
    value = f"none: {ours.missing}" if not ours.measured and ours.missing else fmt(ours.value, unit)
    extra = [f"{label}: {fmt(v, unit)}" for label, v in ours.beside]
    return value + (f" [{'; '.join(extra)}]" if extra else "")


def _names(key: str, mode: str) -> str:
    return ", ".join(f"`{p}`" for p in mode_paths(key, mode))


def paper_vs_ours(res: Results) -> list[str]:
    """One row per paper number, ours from the paper's mode of each FullState system; a number that reads a
    FullState system is followed by its index-mode row (paper column NOT_PAIRED, no ratio)."""
    m, idx = measures(), index_measures()
    rows = []
    for n in paper.NUMBERS:
        ours = m[n.key](res)
        ratio = f"{ours.value / n.value:.2f}" if ours.measured and math.isfinite(ours.value) else "—"
        quantity = n.quantity + ("" if n.in_design else " †")
        value = ours_text(ours, n.unit)
        how = [f"ours: {ours.note}"] if ours.note else []
        if n.key in MODE_KEYS:
            how.insert(0, f"paired with the paper's mode ({_names(n.key, PAPER_MODE)})")
        rows.append([n.where, quantity, n.text + UNIT[n.unit], value, ratio, "; ".join([n.source, *how])])
        if n.key in idx:
            alt = idx[n.key](res)
            rows.append([n.where, INDEX_ROW, NOT_PAIRED, ours_text(alt, n.unit), "—",
                         f"index mode ({_names(n.key, INDEX_MODE)})" + (f"; ours: {alt.note}" if alt.note else "")])
    return _table(["where", "quantity", "paper", "ours", "ours/paper", "source; how ours was computed"], rows)


def baselines_not_in_paper(res: Results) -> list[str]:
    """The numbers of each FullState system the paper does not compare against (plots.style.NOT_IN_PAPER), both
    modes, computed as the paper's numbers are for its baselines; the paper column says it has none."""
    rows = [[display_name(p), f"`{p}`", label, "not in the paper", ours_text(m, unit),
             m.note or ("" if m.measured else "no row yet")]
            for p, label, unit, m in not_in_paper(res)]
    return _table(["system", "path", "quantity", "paper", "ours", "how ours was computed"], rows)


def floors_per_geometry(res: Results) -> list[str]:
    """OneLA's latency / floor_ms per operator geometry, with latency / launch_floor_ms beside it where rows
    have that column (plots.fig_floor_geometry.report_lines)."""
    from plots import fig_floor_geometry
    return fig_floor_geometry.report_lines(res)


def paths_not_measured(res: Results) -> list[str]:
    """Registered paths with no row in any suite (e.g. a mode added after the last GPU run): named, so a reader
    sees they exist and were not measured rather than that they were dropped."""
    from artifact.registry import PATHS
    df = res.all_rows()
    seen = set(df["path"].astype(str)) if len(df) else set()
    missing = [p for p in PATHS if p not in seen]
    if not missing:
        return ["Every registered path has rows."]
    return [f"**Registered paths {NOT_MEASURED}** (no row in any suite): " + ", ".join(f"`{p}`" for p in missing)
            + "."]


def inputs(res: Results) -> list[str]:
    rows = []
    for s in SUITES:
        df = res[s]
        counts = df["status"].value_counts()
        rows.append([s, len(df), *(int(counts.get(k, 0)) for k in ("ok", "skipped", "failed"))])
    out = _table(["suite (results/<suite>.csv)", "rows", "ok", "skipped", "failed"], rows)
    out += ["", *paths_not_measured(res)]
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
    for p in ("vllm", "sglang", "flashinfer-python", "tensorrt_llm", "tensorrt-llm", "fla-core"):
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


def targets_table(res: Results) -> list[str]:
    """The project's own targets (plots/targets.py; their bounds listed in docs/design.md §7): per target its
    bound, our value, met / not met / not measured yet, and the rows it reads (with the command that writes them
    where it is not measured yet)."""
    found = targets.evaluate(res)
    counts = {v: sum(1 for *_, x in found if x == v) for v in (targets.MET, targets.NOT_MET, targets.NOT_MEASURED)}
    rows = []
    for t, m, verdict in found:
        how = [t.source] + ([m.note] if m.note else [])
        if verdict == targets.NOT_MEASURED:
            how.append(f"`{t.command}` writes them")
        bound = fmt(t.bound, t.unit)
        if float(f"{t.bound:.3g}") != t.bound:                  # a bound the display would round: exact digits
            bound = f"{t.bound:g}{UNIT[t.unit]}"
        value = ours_text(m, t.unit)
        if m.measured and fmt(m.value, t.unit) == bound:      # the digits that decide the verdict
            value = f"{m.value:.5g}{UNIT[t.unit]}"
        rows.append([f"`{t.id}`", t.what, f"{t.op} {bound}".replace("<=", "≤").replace(">=", "≥"), value, f"**{verdict}**" if verdict == targets.NOT_MET else verdict,
                     "; ".join(how)])
    return [f"Beyond the paper, the project holds itself to these bounds (docs/design.md §7; computed by "
            f"`plots/targets.py` from the same rows and code as the sections above): {counts[targets.MET]} met, "
            f"{counts[targets.NOT_MET]} not met, {counts[targets.NOT_MEASURED]} {NOT_MEASURED}.", "",
            *_table(["id", "target", "bound", "measured", "verdict", "source rows; how"], rows)]


# ---------------------------------------------------------------- Fig 6's native framework reference
NATIVE_TIME_ESTIMATE = "6-8 min (estimate)"      # tools.hf_generate at its default cells, until a wall record exists
NATIVE_SPEEDUPS = (            # native_cells column, what it is
    ("pipeline_x", "OneLA (this pipeline) over stock transformers generate, GPU time per decode call (across runs)"),
    ("hf_wall_x", "OneLA inside transformers over stock generate, wall time per decode call (same run)"),
    ("hf_call_x", "OneLA inside transformers over stock generate, GPU time per decode call (same run)"),
    ("hf_prefill_x", "OneLA inside transformers over stock generate, prefill GPU time (same run)"))


def _span(m) -> str:
    """A native measure as "smallest – largest", or why there is none."""
    if not m.measured:
        return ours_text(m, "x")
    hi = dict(m.beside).get("largest", m.value)
    return fmt(m.value, "x") if hi == m.value else f"{fmt(m.value, 'x')} – {fmt(hi, 'x')}"


def _native_ms(nt, path: str, cell, v: float) -> str:
    """One native system's ms at a (prompt, O) cell: the value, else its row's status (a skip, a failure), else
    "not measured yet"."""
    if math.isfinite(v):
        return fmt(v, "ms")
    rows = nt[(nt["path"] == path) & (nt["prompt_len"] == cell["prompt_len"]) & (nt["O"] == cell["O"])]
    return str(rows["status"].iloc[-1]) if len(rows) else NOT_MEASURED


def native_reference(res: Results) -> list[str]:
    """Fig 6's native framework reference: per (prompt, O) cell, the pipeline's OneLA beside stock transformers
    generate and OneLA inside it (GPU time and wall time per decode call, prefill), the speedups over stock, the
    beams' agreement; vLLM's engine as the named skip it is."""
    nt, cells = native_table(res), native_cells(res)
    lines = [f"`{NATIVE_COMMAND}` (results/{NATIVE_SUITE}.csv and its side table; docs/methods.md §12): "
             "transformers' own `generate(num_beams=W)` on the pipeline's weights and prompts, stock and with OneLA "
             "inside it. GPU time per decode call: CUDA events around each model call generate makes (the stock "
             "cache's beam reorder runs between calls, so it is in the wall time only); wall time per decode call: "
             "(generate's wall time - the prefill's) / T, Python overhead and beam selection included. The "
             "pipeline's OneLA is its full_model row's latency_ms / T, a CUDA graph per call, timed in another run.",
             ""]
    lines += [f"- {display_name(p)}: not run -- {why}" for p, (_, why) in NATIVE_SKIPS.items()]
    timed = nt[nt["status"] == "ok"].drop_duplicates(["path", "run_id", "timer"])
    lines += [f"- {display_name(r.path)}, run {r.run_id}: {r.timer}" for r in timed.itertuples()]
    if not nt["path"].isin([NATIVE_STOCK, NATIVE_ONELA]).any():
        lines.append(f"- {display_name(NATIVE_STOCK)}, {display_name(NATIVE_ONELA)}: {NOT_MEASURED} (no rows in "
                     f"results/{NATIVE_SUITE}.csv; on a GPU: `{NATIVE_COMMAND} --out results`)")
    lines += [""] + [f"- {what}: {_span(native_measure(res, col, what))}" for col, what in NATIVE_SPEEDUPS] + [""]
    rows = []
    for _, c in cells.iterrows():
        same = c["same_selections"]
        agree = ("—" if not isinstance(c["beams_identical"], str) or not c["beams_identical"] else
                 f"{c['beams_identical']}; {int(same) if math.isfinite(same) else '?'} of {int(c['O'])}")
        rows.append([int(c["prompt_len"]), int(c["O"]), fmt(c["pipeline_call_ms"], "ms"),
                     *[_native_ms(nt, NATIVE_STOCK, c, c[f"stock_{m}_ms"]) for m in ("call", "wall", "prefill")],
                     *[_native_ms(nt, NATIVE_ONELA, c, c[f"hf_{m}_ms"]) for m in ("call", "wall", "prefill")],
                     " / ".join(fmt(c[f"hf_{m}_x"], "x") if math.isfinite(c[f"hf_{m}_x"]) else "—"
                                for m in ("call", "wall", "prefill")),
                     fmt(c["pipeline_x"], "x") if math.isfinite(c["pipeline_x"]) else "—", agree])
    return lines + _table(["prompt", "O", "OneLA pipeline GPU / call", "stock GPU / call", "stock wall / call",
                           "stock prefill", "+OneLA GPU / call", "+OneLA wall / call", "+OneLA prefill",
                           "+OneLA over stock (GPU / wall / prefill)", "pipeline OneLA over stock GPU",
                           "beams identical; same selections of O"], rows)


def build(res: Results, figures: list[Path] | None = None, report_dir: Path = Path(".")) -> str:
    lines = ["# Paper vs ours", "",
             "Generated by `python -m plots` (`./run_all.sh figures`) from `results/` alone; do not edit by hand.",
             "\"ours\" is computed from the result rows (only `status == ok` cells within the paper's 4.88e-4 "
             "error bound, with both sides ok on the same shape, feed a ratio: the primary number; where a path's "
             "rows were held to a looser documented gate of their own, the value at that gate is shown beside, "
             "in brackets, labelled); \"paper\" is `plots/paper.py` (paper §4, docs/design.md §7). "
             "† = a number from the paper's text beyond docs/design.md §7's table.", "",
             "FullState pairs like with like: the paper's FullState numbers pair only with each system's paper mode "
             "(`<system>_fullstate_paper`: one persistent pool of R·W states, an explicit per-step copy of the "
             "parents' states timed in the step; named as the paper names it, e.g. \"vLLM FullState\"), and say "
             f"\"{NOT_MEASURED}\" while it has no rows. The index mode (`<system>_fullstate`: two pools, the parent's "
             "state read through an index, no copy; e.g. \"vLLM FullState (index mode)\") follows each such number in "
             f"its own row (↳), \"{NOT_PAIRED}\" with the paper's value (docs/methods.md §4).", "",
             "## Numbers to reproduce", "", *paper_vs_ours(res), "",
             "## Project targets", "", *targets_table(res), "",
             "## Baselines the paper does not compare against", "", *baselines_not_in_paper(res), "",
             "## The native framework reference: transformers' generate (Fig 6, lower row)", "",
             *native_reference(res), "",
             "## Where a decode call's time goes (not in the paper)", "", *fig_breakdown.report_lines(res.root), "",
             "## OneLA against its floors per geometry (not in the paper)", "", *floors_per_geometry(res), "",
             "## Depth and width scaling (beyond the paper)", "", *fig_beam_scaling.report_lines(res), "",
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


# ---------------------------------------------------------------- README.md's claims table
CLAIMS_BEGIN, CLAIMS_END = "<!-- claims:begin -->", "<!-- claims:end -->"
_S = "fig7a.median_speedup."
# (question, the paper's claim, its numbers in plots/paper.py, how they are joined, the suite that measures them)
CLAIMS: list[tuple[str, str, tuple[str, ...], str, str]] = [
    ("Q1", "Fig 6: full-model decode-forward speedup, OneLA over Controlled FullState (R=4 W=256, prompt 1K and "
           "5K, O=3-7), smallest-largest", ("fig6.speedup_vs_controlled.min", "fig6.speedup_vs_controlled.max"),
     " – ", "full_model"),
    ("Q1", "Fig 6: Controlled FullState's distance to vLLM FullState, smallest-largest",
     ("fig6.controlled_vs_vllm.min", "fig6.controlled_vs_vllm.max"), " – ", "full_model"),
    ("Q2", "Fig 7a: median latency speedup over vLLM / SGLang FullState (405 shapes)",
     (_S + "vllm_fullstate", _S + "sglang_fullstate"), " / ", "operator"),
    ("Q2", "Fig 7a: median latency speedup over vLLM / SGLang ReplaySSM (no vLLM GDN ReplaySSM kernel)",
     (_S + "vllm_replayssm", _S + "sglang_replayssm"), " / ", "operator"),
    ("Q2", "Fig 7a: median latency speedup over FlashInfer / TensorRT-LLM",
     (_S + "flashinfer_fullstate", _S + "trtllm_fullstate"), " / ", "operator"),
    ("Q2", "Fig 7a: OneLA latency at R=16 W=512 (Qwen3.5-0.8B heads), O=3 / O=7",
     ("fig7a.onela_largest_qwen.O3", "fig7a.onela_largest_qwen.O7"), " / ", "operator"),
    ("Q2", "Fig 7: OneLA max error against FP32 FullState over the 405 shapes", ("fig7.max_abs_err",), "",
     "operator"),
    ("Q2", "Fig 7b: median persistent-capacity reduction, largest over the baselines",
     ("fig7b.max_median_capacity_reduction",), "", "operator"),
    ("Q3", "Fig 8a: OneLA recurrent-path latency (R=4 W=512), O=3 / O=7",
     ("fig8a.latency.onela.O3", "fig8a.latency.onela.O7"), " / ", "recurrent_path"),
    ("Q3", "Fig 8a: vLLM FullState / OneLA latency, O=3 / O=7",
     ("fig8a.reduction_vs_fullstate.O3", "fig8a.reduction_vs_fullstate.O7"), " / ", "recurrent_path"),
    ("Q3", "Fig 8b: OneLA persistent recurrent-state capacity, O=3 / O=7",
     ("fig8b.capacity.onela.O3", "fig8b.capacity.onela.O7"), " / ", "recurrent_path"),
    ("Q3", "Fig 8b: OneLA recurrent-state writes, O=3 / O=7", ("fig8b.writes.onela.O3", "fig8b.writes.onela.O7"),
     " / ", "recurrent_path"),
    ("Q3", "Fig 8b: vLLM FullState / OneLA capacity, O=3 / O=7",
     ("fig8b.capacity_reduction_vs_fullstate.O3", "fig8b.capacity_reduction_vs_fullstate.O7"), " / ",
     "recurrent_path"),
    ("Q3", "Fig 8c: OneLA DRAM traffic (read + write), O=3", ("fig8c.traffic.onela.O3",), "", "traffic"),
    ("Q3", "Fig 8c: vLLM FullState / vLLM ReplaySSM traffic over OneLA's, O=3 (no vLLM GDN ReplaySSM kernel)",
     ("fig8c.traffic_reduction.vllm_fullstate.O3", "fig8c.traffic_reduction.vllm_replayssm.O3"), " / ", "traffic"),
]


def suite_wall(results_dir: Path, suite: str) -> tuple[float, int, int]:
    """(seconds, rows covered, rows) of the runs behind results/<suite>.csv: each run's recorded wall time
    (env/<run_id>.wall.json, written by every sweep run) pro rata to the share of its cells still in the table."""
    from plots.data import read_csv
    f = Path(results_dir) / f"{suite}.csv"
    if not f.is_file():
        return 0.0, 0, 0
    counts = read_csv(f)["run_id"].value_counts()
    secs, covered = 0.0, 0
    for run_id, n in counts.items():
        try:
            rec = read_wall(results_dir, run_id)
        except ResultsFileError:
            rec = None                     # an unreadable record covers no row, like a missing one
        if rec is None:
            continue
        secs += rec["wall_s"] * min(1.0, int(n) / max(1, int(rec.get("cells", n))))
        covered += int(n)
    return secs, covered, int(counts.sum())


def expected_time(results_dir: Path, suite: str) -> str:
    """A suite's recorded GPU wall time as text ('20 min'), or 'not measured'."""
    secs, covered, rows = suite_wall(results_dir, suite)
    if not covered:
        return "not measured"
    mins = secs / 60
    text = f"{mins:.0f} min" if mins >= 10 else f"{mins:.1f} min"
    return text if covered == rows else f"{text} for {covered} of {rows} cells (the rest: no wall record)"


def claims(res: Results) -> list[str]:
    """One row per claim: the paper's numbers, ours from the paper's mode, then, in brackets, the index mode's
    values of the claim's FullState numbers, labelled and not paired."""
    m, idx = measures(), index_measures()
    by_key = paper.BY_KEY
    times = {s: expected_time(res.root, s) for s in ("operator", "recurrent_path", "traffic", "full_model")}
    native_time = expected_time(res.root, NATIVE_SUITE)
    rows = []
    for q, text, keys, join, suite in CLAIMS:
        nums = [by_key[k] for k in keys]
        ours = join.join(ours_text(m[k](res), by_key[k].unit) for k in keys)
        alt = [ours_text(idx[k](res), by_key[k].unit) if k in idx else "—" for k in keys]
        if any(k in idx for k in keys):
            ours += f" [index mode, {NOT_PAIRED}: {join.join(alt)}]"
        rows.append([q, text, join.join(n.text + UNIT[n.unit] for n in nums), ours,
                     f"`python -m sweeps.run suite={suite}`", times[suite]])
        if keys[0] == "fig6.controlled_vs_vllm.min":
            rows.append(native_claim(res, native_time))
    return _table(["", "paper claim", "paper", "reproduced", "command", "H200 time"], rows)


def native_claim(res: Results, time_text: str) -> list[str]:
    """The claims table's native-framework row: the paper's native reference (vLLM's engine) is a named skip; ours
    is stock transformers generate, OneLA's speedup over it, and OneLA inside it, or "not measured yet"."""
    col, what = NATIVE_SPEEDUPS[0]
    ours = _span(native_measure(res, col, what))
    extra = [f"{label}: {_span(native_measure(res, c, label))}" for c, label in (
        ("hf_wall_x", "OneLA inside transformers, wall / call"), ("hf_prefill_x", "its prefill"))]
    if all(NOT_MEASURED in t for t in [ours, *extra]):
        ours, extra = f"{NOT_MEASURED} (no {NATIVE_SUITE} rows)", []
    skips = "; ".join(f"{display_name(p)}: not run, {why.split(' (')[0]}" for p, (_, why) in NATIVE_SKIPS.items())
    return ["Q1", "Fig 6: native framework reference, OneLA's decode-forward speedup per decode call over stock "
                  "transformers `generate(num_beams=W)` (R=4 W=256, prompt 1K and 5K, O=3-7), smallest-largest",
            f"none: the paper's is vLLM's engine [{skips}]", ours + (f" [{'; '.join(extra)}]" if extra else ""),
            f"`{NATIVE_COMMAND}`", NATIVE_TIME_ESTIMATE if time_text == "not measured" else time_text]


def claims_block(res: Results) -> str:
    """The text between README.md's claims markers (markers excluded)."""
    return "\n".join([
        "Generated by `python -m plots` from the committed `results/` (every number, with how it is computed: "
        "`results/REPORT.md`); do not edit by hand. \"H200 time\": the recorded wall time of the runs behind "
        "the committed rows (`results/env/<run_id>.wall.json`), pro rata to the rows each run still holds.",
        "", *claims(res)])


def update_readme(readme: Path, res: Results) -> bool:
    """Write the claims block into README.md between its markers; True if the file changed."""
    text = readme.read_text()
    if CLAIMS_BEGIN not in text or CLAIMS_END not in text:
        raise ValueError(f"{readme} has no {CLAIMS_BEGIN} ... {CLAIMS_END} markers")
    head, rest = text.split(CLAIMS_BEGIN, 1)
    _, tail = rest.split(CLAIMS_END, 1)
    new = f"{head}{CLAIMS_BEGIN}\n{claims_block(res)}\n{CLAIMS_END}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    """`python -m plots.report expected SUITE [SUITE ...] [--results DIR] [--fallback TEXT]`: recorded GPU times
    (./run_all.sh prints them before each stage)."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m plots.report", description=main.__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("expected", help="each suite's recorded GPU wall time, one line per suite "
                                          "(with several suites: '<suite><TAB><time>')")
    ex.add_argument("suites", nargs="+")
    ex.add_argument("--results", default="results")
    ex.add_argument("--fallback", default="not measured", help="printed when no run of the suite is recorded")
    args = ap.parse_args(argv)
    for suite in args.suites:
        text = expected_time(Path(args.results), suite)
        text = args.fallback if text == "not measured" else text
        print(f"{suite}\t{text}" if len(args.suites) > 1 else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
