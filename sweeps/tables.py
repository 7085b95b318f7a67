"""Results-file housekeeping around artifact.results' append-only CSVs: torn-tail repair, schema check,
row removal for `redo`, the shard merge, and folding a re-run into a results table.

Every rewrite goes to a temporary file that replaces the original atomically (os.replace), so a kill at
any moment leaves either the old or the new file, never a mix.
"""
from __future__ import annotations

import csv
import os
import re
from pathlib import Path

from artifact.results import COLUMNS, STATUSES

# Columns that identify a row's origin rather than its value: merged duplicates may differ only in these.
PROVENANCE = ("run_id",)


class ResultsFileError(RuntimeError):
    """A results file this sweep cannot safely append to or merge (named in the message)."""


def repair_tail(csv_path: Path) -> int:
    """Cut a torn last line (a kill mid-write leaves one without its newline); return the bytes removed."""
    if not csv_path.exists():
        return 0
    data = csv_path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    keep = data[: data.rfind(b"\n") + 1]
    _atomic_write_bytes(csv_path, keep)
    return len(data) - len(keep)


def check_header(csv_path: Path) -> None:
    """Refuse to append to a file written with another schema (it would become a sparse union of columns)."""
    if not csv_path.exists() or csv_path.stat().st_size == 0:
        return
    with open(csv_path, newline="") as f:
        header = next(csv.reader(f), [])
    if header != COLUMNS:
        missing = [c for c in COLUMNS if c not in header]
        extra = [c for c in header if c not in COLUMNS]
        raise ResultsFileError(f"{csv_path}: columns differ from artifact.results.COLUMNS (missing {missing}, "
                               f"extra {extra}); move the file away or re-create it")


def read_rows(csv_path: Path) -> list[dict]:
    """Complete rows of a results file (a torn or status-less last line is ignored)."""
    if not csv_path.exists():
        return []
    with open(csv_path, newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("config_hash") and r.get("status") in STATUSES]


def write_rows(csv_path: Path, rows: list[dict], columns: list[str] = COLUMNS) -> None:
    """Write `rows` atomically (a temp file, fsync'd, then renamed) in `columns` (the results schema unless a
    side table's own)."""
    tmp = csv_path.with_name(csv_path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="raise")
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in columns})
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, csv_path)


def drop_rows(csv_path: Path, hashes: set[str], statuses: tuple[str, ...]) -> int:
    """Remove rows whose config_hash is in `hashes` and status in `statuses` (for `redo`); return how many."""
    rows = read_rows(csv_path)
    keep = [r for r in rows if not (r["config_hash"] in hashes and r["status"] in statuses)]
    if len(keep) != len(rows):
        write_rows(csv_path, keep)
    return len(rows) - len(keep)


def shard_files(results_dir: Path, suite: str) -> list[Path]:
    """results/<suite>.shard<i>-of-<n>.csv, ordered by (n, i)."""
    pat = re.compile(rf"{re.escape(suite)}\.shard(\d+)-of-(\d+)\.csv")
    found = [(p, pat.fullmatch(p.name)) for p in results_dir.glob(f"{suite}.shard*-of-*.csv")]
    return [p for p, m in sorted(((p, m) for p, m in found if m), key=lambda pm: (int(pm[1][2]), int(pm[1][1])))]


def merge_shards(results_dir: Path, suite: str) -> tuple[Path, int]:
    """Merge every shard file of `suite` into results/<suite>.csv (rows already there are kept).

    A config_hash present twice must carry the same values (provenance columns aside) or the merge is
    refused, naming the hash, the files and the differing columns. Shard files are left in place, so the
    merge can be repeated. Returns the merged path and the number of rows added.
    """
    results_dir = Path(results_dir)
    target = results_dir / f"{suite}.csv"
    shards = shard_files(results_dir, suite)
    if not shards:
        raise ResultsFileError(f"no shard files {suite}.shard<i>-of-<n>.csv in {results_dir}")
    for p in [target, *shards]:
        check_header(p)
    merged: dict[str, tuple[dict, Path]] = {}
    for p in [target, *shards]:
        for r in read_rows(p):
            h = r["config_hash"]
            if h in merged:
                old, src = merged[h]
                diff = [c for c in COLUMNS if c not in PROVENANCE and old.get(c, "") != r.get(c, "")]
                if diff:
                    raise ResultsFileError(f"config_hash {h}: {src.name} and {p.name} disagree on {diff} "
                                           f"({[old[c] for c in diff]} vs {[r[c] for c in diff]}); refusing "
                                           "to merge (remove the stale row or file)")
                continue
            merged[h] = (r, p)
    before = len(read_rows(target))
    write_rows(target, [r for r, _ in merged.values()])
    return target, len(merged) - before


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fold_side_table(target: Path, source: Path, hashes: set) -> None:
    """Replace (or add) the rows of `hashes` in side table `target` by `source`'s, keeping target's columns."""
    with open(source, newline="") as f:
        new = {r["config_hash"]: r for r in csv.DictReader(f) if r["config_hash"] in hashes}
    if not new:
        return
    old, cols = [], list(next(iter(new.values())).keys())
    if target.exists():
        with open(target, newline="") as f:
            reader = csv.DictReader(f)
            cols, old = list(reader.fieldnames or cols), list(reader)
    seen = {r["config_hash"] for r in old}
    write_rows(target, [new.get(r["config_hash"], r) for r in old] + [r for h, r in new.items() if h not in seen],
               cols)


def fold_rerun(results_dir: Path, suite: str, rerun_dir: Path, keep_paths: tuple[str, ...] = ()) -> dict:
    """Fold the rows of a re-run (another results folder, e.g. a geometry re-run after a kernel change, or a
    `redo=...` into a copy of the table) into results/<suite>.csv: each row of a run the table does not hold yet
    replaces the row of the same config_hash (or is added), except rows of `keep_paths` (e.g. a baseline whose
    package the re-run machine lacked). Rows of runs the table already holds -- a copied table's old rows, or a
    re-run folded before -- are left alone, so folding is idempotent and never brings an old row back. The env
    records (env/<run_id>.json, .wall.json) of every run whose rows came in are copied beside the table.
    A side table of the suite (<suite>_*.csv beside it, rows keyed by config_hash, e.g. full_model_recurrent.csv)
    follows its rows: the re-run's side rows of every folded config_hash replace the table's.
    Returns {"replaced", "added", "kept", "runs", "orphaned"}: `orphaned` names the <suite> env records (and
    their side files) left with no row (superseded runs; delete them, git keeps them)."""
    results_dir, rerun_dir = Path(results_dir), Path(rerun_dir)
    target, source = results_dir / f"{suite}.csv", rerun_dir / f"{suite}.csv"
    for p in (target, source):
        if not p.exists():
            raise ResultsFileError(f"no results file {p}")
        check_header(p)
    rows = read_rows(target)
    index = {r["config_hash"]: i for i, r in enumerate(rows)}
    held = {r["run_id"] for r in rows}
    counts = {"replaced": 0, "added": 0, "kept": 0}
    runs: set[str] = set()
    folded: set[str] = set()          # config_hashes whose row came in: their side-table rows follow
    for r in read_rows(source):
        if r["run_id"] in held:
            continue
        if r["path"] in keep_paths:
            counts["kept"] += 1
            continue
        i = index.get(r["config_hash"])
        if i is None:
            index[r["config_hash"]] = len(rows)
            rows.append(r)
            counts["added"] += 1
        else:
            rows[i] = r
            counts["replaced"] += 1
        runs.add(r["run_id"])
        folded.add(r["config_hash"])
    missing = [run for run in sorted(runs) if not (rerun_dir / "env" / f"{run}.json").exists()]
    if missing:
        raise ResultsFileError(f"{rerun_dir / 'env'} lacks the env record of run(s) {missing}; "
                               "a row is only kept beside its run's env record")
    (results_dir / "env").mkdir(exist_ok=True)
    for run in sorted(runs):     # the record and its side files (.wall.json, the traffic suite's .traffic.json)
        for src in sorted((rerun_dir / "env").glob(f"{run}.*json")):
            _atomic_write_bytes(results_dir / "env" / src.name, src.read_bytes())
    for side_src in sorted(rerun_dir.glob(f"{suite}_*.csv")):
        _fold_side_table(results_dir / side_src.name, side_src, folded)
    write_rows(target, rows)
    live = {r["run_id"] for r in rows}
    orphaned = sorted(f.name for f in (results_dir / "env").glob(f"{suite}-*.json")     # side files included
                      if f.name.split(".", 1)[0] not in live)
    return {**counts, "runs": sorted(runs), "orphaned": orphaned}
