"""Reading results/ and pairing cells: the only code between the CSVs and every figure or ratio.

Rules (docs/design.md §5-6): only `status == ok` rows with a finite, positive metric feed a ratio, and a pair needs
both paths ok on the same shape, joined on SHAPE_KEY (never on suite or path). Missing files are empty
tables, not errors: the figures then say "no data yet" and REPORT.md says "not measured yet".
"""
from __future__ import annotations

import io
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from artifact.results import COLUMNS, STATUSES

SUITES = ("operator", "recurrent_path", "traffic", "full_model", "smoke")
SHAPE_KEY = ("geometry", "R", "W", "T", "prompt_len", "lineage", "seed")
NUMERIC = ("R", "W", "T", "O", "HK", "HV", "K", "V", "prompt_len", "seed", "latency_ms", "p20_ms", "p80_ms",
           "floor_ms", "persistent_bytes", "written_bytes", "dram_read_bytes", "dram_write_bytes", "flops",
           "compulsory_bytes", "max_abs_err", "tolerance")


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


def read_csv(path: Path) -> pd.DataFrame:
    """One results CSV; a torn last line (a killed sweep) and rows with an unknown status are dropped."""
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        _note(f"{path}: dropped a torn last line")
    if not text.strip():
        return pd.DataFrame(columns=COLUMNS)
    df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        _note(f"{path}: columns {missing} absent; read as empty")
        for c in missing:
            df[c] = ""
    bad = ~df["status"].isin(STATUSES)
    if bad.any():
        _note(f"{path}: dropped {int(bad.sum())} rows whose status is not one of {STATUSES}")
        df = df[~bad]
    return df.reset_index(drop=True)


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


def load_suite(results_dir: str | Path, suite: str) -> pd.DataFrame:
    """results/<suite>.csv plus any shards results/<suite>.*.csv; one row per cell (the last one written)."""
    results_dir = Path(results_dir)
    files = [results_dir / f"{suite}.csv"] + sorted(results_dir.glob(f"{suite}.*.csv"))
    frames = [read_csv(f) for f in files if f.is_file()]
    if not frames:
        return _typed(pd.DataFrame(columns=COLUMNS))
    df = pd.concat(frames, ignore_index=True)
    ident = df["config_hash"].where(df["config_hash"] != "",
                                    df[["suite", "path", *SHAPE_KEY]].astype(str).agg("|".join, axis=1))
    dup = ident.duplicated(keep="last")
    if dup.any():
        _note(f"{suite}: {int(dup.sum())} repeated cells; keeping the last row written for each")
        df = df[~dup]
    return _typed(df.reset_index(drop=True))


@dataclass
class Results:
    """Every suite's table plus the env records, as read from one results directory."""

    root: Path
    suites: dict[str, pd.DataFrame]
    env: dict[str, dict] = field(default_factory=dict)

    def __getitem__(self, suite: str) -> pd.DataFrame:
        return self.suites[suite]

    def all_rows(self) -> pd.DataFrame:
        return pd.concat([d for d in self.suites.values() if len(d)] or [self.suites[SUITES[0]]],
                         ignore_index=True)


def load_results(results_dir: str | Path = "results") -> Results:
    root = Path(results_dir)
    suites = {s: load_suite(root, s) for s in SUITES}
    env = {}
    for f in sorted((root / "env").glob("*.json")):
        if "." in f.stem:                  # a side file (<run_id>.traffic.json, .wall.json), not an env record
            continue
        try:
            env[f.stem] = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as e:
            _note(f"{f}: unreadable env record ({e})")
    return Results(root, suites, env)


def _ok_rows(df: pd.DataFrame, path: str, metric: str) -> pd.DataFrame:
    """`path`'s ok rows with a finite positive `metric`, indexed by shape (the last row of a shape kept)."""
    rows = df[(df["path"] == path) & (df["status"] == "ok")].set_index("shape")
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
    """(median ok value, "") for one bar, or (NaN, why there is none: failed / skipped / no value / "")."""
    v, n = median_ok(df, path, metric, **where)
    if n:
        return v, ""
    rows = select(df[df["path"] == path], **where)
    if not len(rows):
        return math.nan, ""
    for status in ("failed", "skipped"):
        if (rows["status"] == status).any():
            return math.nan, status
    return math.nan, "no value"
