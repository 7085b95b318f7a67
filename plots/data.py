"""Reading results/ and pairing cells: the only code between the CSVs and every figure or ratio.

Rules (docs/design.md §5-6): only `status == ok` rows with a finite, positive metric feed a ratio, and a pair needs
both paths ok on the same shape, joined on SHAPE_KEY (never on suite or path). One gate: a row counts only where
its max_abs_err is within the paper's bound (PRIMARY_GATE, 4.88e-4); a path gated at a looser documented
tolerance (the row's `tolerance` column says which) has its own-gate numbers computed inside `own_gates()`, and
shown beside the primary ones, labelled, never instead of them. Missing, empty and header-only
files are empty tables, not errors: the figures then say "no data yet" and REPORT.md says "not measured yet".
Every table is read by artifact.results.read_table, the reader the sweeps use: a line that is not a valid row
(or a torn last line, or a file of another schema) is never drawn, and is named -- file and line, with the
repair command -- on stderr and in REPORT.md (`Results.notes`). The side tables beside a suite's table
(beam_scaling_steps.csv, full_model_breakdown.csv, ...) are read by artifact.results.read_side_table
(`side_frame`).
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from artifact.limits import DEFAULT_TOLERANCE
from artifact.results import COLUMNS, ResultsFileError, differing_columns, read_side_table, read_table, repair_command

SUITES = ("operator", "recurrent_path", "traffic", "full_model", "smoke", "beam_scaling", "hf_generate")
# The native framework reference of Fig 6 (tools.hf_generate): its rows in results/hf_generate.csv (the results
# schema, suite hf_generate) and its per-row timings in the side table beside it, joined on (config_hash, run_id).
# Its rows' max_abs_err is a beam score against the uncached forward, held to the row's own tolerance, not the
# operator gate: they count when ok (plots.reproduced.native_table), and no kernel-suite number reads them.
NATIVE_SUITE = "hf_generate"
NATIVE_TIMES = "hf_generate_times.csv"          # tools.hf_generate.TIMES (a test holds them equal)
SHAPE_KEY = ("geometry", "R", "W", "T", "prompt_len", "lineage", "seed")
NUMERIC = ("R", "W", "T", "O", "HK", "HV", "K", "V", "prompt_len", "seed", "latency_ms", "p20_ms", "p80_ms",
           "floor_ms", "launch_floor_ms", "persistent_bytes", "written_bytes", "dram_read_bytes", "dram_write_bytes",
           "flops", "compulsory_bytes", "max_abs_err", "tolerance")


PRIMARY_GATE = DEFAULT_TOLERANCE    # the paper's error bound, every run's default gate (artifact.limits)
_GATE = [PRIMARY_GATE]          # the bound rows are held to here; None: each row's own tolerance (own_gates)


@contextlib.contextmanager
def own_gates():
    """Within this block, an ok row counts at the gate it was held to (its `tolerance` column), not the paper's
    4.88e-4: for the looser-gate numbers shown beside the primary ones."""
    _GATE.append(None)
    try:
        yield
    finally:
        _GATE.pop()


def gate() -> float | None:
    """The error bound rows are held to now: PRIMARY_GATE, or None inside own_gates()."""
    return _GATE[-1]


def within_gate(df: pd.DataFrame) -> pd.Series:
    """True for rows whose max_abs_err is within the current gate (every row inside own_gates(): an ok row is
    within its own tolerance by construction, tests/test_results_gate.py)."""
    g = gate()
    if g is None or "max_abs_err" not in df.columns:
        return pd.Series(True, index=df.index)
    return ~(df["max_abs_err"] > g)          # a row without a number is refused by the reader before this


def _note(msg: str) -> None:
    print(f"[plots] {msg}", file=sys.stderr)


def _key_part(raw: str) -> str:
    """'1024', '1024.0' and ' 1024' name the same shape."""
    raw = raw.strip()
    try:
        x = float(raw)
    except ValueError:
        return raw
    return str(int(x)) if math.isfinite(x) and x == int(x) else raw


def _say(notes: list[str] | None, msg: str) -> None:
    _note(msg)
    if notes is not None:
        notes.append(msg)


def read_csv(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """One results CSV's valid rows (all text, in COLUMNS, plus `source`: '<file> line <n>'). Refused lines, a
    torn last line and a file of another schema are left out and named in `notes` (and on stderr)."""
    path = Path(path)
    try:
        table = read_table(path)
    except ResultsFileError as e:
        _say(notes, f"{e} -- not drawn")
        table = None
    if table is not None:
        for msg in table.problems():
            _say(notes, f"{msg} -- not drawn")
        if table.refused:
            _say(notes, f"{path}: repair with `{repair_command(path)}`")
        if table.torn is not None:
            _say(notes, f"{path}: left out its torn last line (a killed run's; the next run of the suite cuts it "
                        f"and measures the cell): {table.torn[:80]!r}")
    rows = table.rows if table is not None else []
    df = pd.DataFrame(rows, columns=COLUMNS, dtype=str) if rows else pd.DataFrame(columns=COLUMNS, dtype=str)
    df["source"] = [f"{path.name} line {n}" for n in table.lines] if rows else pd.Series(dtype=str)
    return df


def side_frame(root: str | Path, name: str, numeric) -> pd.DataFrame:
    """The side table `root/name` (artifact.results.read_side_table) as text columns, those for which
    `numeric(column)` holds as numbers (empty text: NaN). Empty when the file is absent or empty; a torn last line
    is left out and a file the reader refuses is drawn as empty, both named on stderr."""
    path = Path(root) / name
    try:
        table = read_side_table(path)
    except ResultsFileError as e:
        _note(f"{e} -- not drawn")
        return pd.DataFrame()
    if table.torn is not None:
        _note(f"{path}: left out its torn last line: {table.torn[:80]!r}")
    if not table.columns:
        return pd.DataFrame()
    df = pd.DataFrame(table.rows, columns=table.columns, dtype=str)
    for c in df.columns:
        if numeric(c):
            df[c] = pd.to_numeric(df[c].replace("", np.nan), errors="coerce")
    return df


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["shape"] = df[list(SHAPE_KEY)].apply(lambda r: "|".join(_key_part(str(v)) for v in r), axis=1) \
        if len(df) else pd.Series(dtype=str)
    for c in NUMERIC:
        df[c] = pd.to_numeric(df[c].replace("", np.nan), errors="coerce")
    # O is the paper's output-token count; derive it where a row left it empty (T = O - 1).
    df["O"] = df["O"].fillna(df["T"] + 1)
    # Fig 8c: physical DRAM traffic and arithmetic intensity (paper §4.4) from the counter columns.
    df["dram_bytes"] = df["dram_read_bytes"] + df["dram_write_bytes"]
    df["arith_intensity"] = df["flops"] / df["dram_bytes"]
    return df


def load_suite(results_dir: str | Path, suite: str, notes: list[str] | None = None) -> pd.DataFrame:
    """results/<suite>.csv plus any shards results/<suite>.*.csv; one row per cell. A cell in several files
    (a shard and the merged table) is drawn once; if the files disagree on it, the first file's row is drawn
    (the merged table's) and the disagreement is named in `notes`."""
    results_dir = Path(results_dir)
    files = [results_dir / f"{suite}.csv"] + sorted(results_dir.glob(f"{suite}.*.csv"))
    frames = [df for f in files if f.is_file() and len(df := read_csv(f, notes))]
    if not frames:
        return _typed(pd.DataFrame(columns=[*COLUMNS, "source"], dtype=str))
    df = pd.concat(frames, ignore_index=True)
    dup = df["config_hash"].duplicated(keep="first")
    if dup.any():
        first = df[~dup].set_index("config_hash", drop=False)
        for _, r in df[dup].iterrows():
            kept = first.loc[r["config_hash"]]
            diff = differing_columns(kept.to_dict(), r.to_dict())
            if diff:
                _say(notes, f"{suite}: config_hash {r['config_hash']} differs between {kept['source']} and "
                            f"{r['source']} in {diff}; drawing the first (settle it with `python -m sweeps.merge "
                            f"suite={suite}`, which refuses the conflict and names it)")
        df = df[~dup]
    return _typed(df.reset_index(drop=True))


@dataclass
class Results:
    """Every suite's table plus the env records, as read from one results directory."""

    root: Path
    suites: dict[str, pd.DataFrame]
    env: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)     # what was read but not drawn, and why

    def __getitem__(self, suite: str) -> pd.DataFrame:
        return self.suites[suite]

    def all_rows(self) -> pd.DataFrame:
        return pd.concat([d for d in self.suites.values() if len(d)] or [self.suites[SUITES[0]]],
                         ignore_index=True)


def load_results(results_dir: str | Path = "results") -> Results:
    root = Path(results_dir)
    notes: list[str] = []
    suites = {s: load_suite(root, s, notes) for s in SUITES}
    env = {}
    for f in sorted((root / "env").glob("*.json")):
        if "." in f.stem:                  # a side file (<run_id>.traffic.json, .wall.json), not an env record
            continue
        try:
            rec = json.loads(f.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            _say(notes, f"{f}: unreadable env record ({type(e).__name__}: {e})")
            continue
        if isinstance(rec, dict):
            env[f.stem] = rec
        else:
            _say(notes, f"{f}: unreadable env record (a JSON {type(rec).__name__}, not an object)")
    return Results(root, suites, env, notes)


def _ok_rows(df: pd.DataFrame, path: str, metric: str) -> pd.DataFrame:
    """`path`'s ok rows within the gate (within_gate) with a finite positive `metric`, indexed by shape (the last
    row of a shape kept)."""
    rows = df[(df["path"] == path) & (df["status"] == "ok") & within_gate(df)].set_index("shape")
    rows = rows[np.isfinite(rows[metric]) & (rows[metric] > 0)]
    return rows[~rows.index.duplicated(keep="last")]


def ok_values(df: pd.DataFrame, path: str, metric: str) -> pd.Series:
    """metric of `path`'s ok rows with a finite positive value, indexed by shape."""
    return _ok_rows(df, path, metric)[metric]


def paired_ratio(df: pd.DataFrame, baseline: str, target: str = "onela", metric: str = "latency_ms") -> pd.Series:
    """baseline / target of `metric` on every shape where both are ok; indexed by shape. A time (`*_ms`) is
    paired only within one run (same run_id): a speed ratio is measured in one run. (A resumed suite can
    split one shape's paths over two runs at a piece boundary.)"""
    b, t = _ok_rows(df, baseline, metric), _ok_rows(df, target, metric)
    both = b.index.intersection(t.index)
    if metric.endswith("_ms") and "run_id" in df.columns:
        both = both[(b.loc[both, "run_id"] == t.loc[both, "run_id"]).to_numpy()]
    return (b.loc[both, metric] / t.loc[both, metric]).rename(f"{baseline}/{target} {metric}")


def select(df: pd.DataFrame, **where) -> pd.DataFrame:
    """Rows whose columns equal the given values (numbers compare as numbers)."""
    mask = pd.Series(True, index=df.index)
    for col, val in where.items():
        mask &= df[col] == val
    return df[mask]


def median_ok(df: pd.DataFrame, path: str, metric: str, **where) -> tuple[float, int]:
    """Median of `metric` over `path`'s ok rows matching `where` (NaN if none), and how many rows fed it."""
    vals = ok_values(select(df, **where), path, metric)
    return (float(vals.median()) if len(vals) else math.nan), len(vals)


def cell(df: pd.DataFrame, path: str, metric: str, **where) -> tuple[float, str]:
    """(median ok value, "") for one bar, or (NaN, why there is none: failed / skipped / "err > 4.88e-4" (ok at
    a looser gate of its own, not at the paper's) / no value / "")."""
    v, n = median_ok(df, path, metric, **where)
    if n:
        return v, ""
    rows = select(df[df["path"] == path], **where)
    if not len(rows):
        return math.nan, ""
    ok = rows[rows["status"] == "ok"]
    if len(ok) and gate() is not None and (ok["max_abs_err"] > gate()).all():
        return math.nan, f"max err {ok['max_abs_err'].max():.2g} > {gate():.3g}"
    for status in ("failed", "skipped"):
        if (rows["status"] == status).any():
            return math.nan, status
    return math.nan, "no value"
