"""Results-file housekeeping around artifact.results' append-only CSVs: torn-tail repair, schema check,
row removal for `redo`, the shard merge, and folding a re-run into a results table.

Every table is read through artifact.results.read_table (every line checked; a refused line is named with its
file and line, never taken as a row) and written under its lock (artifact.results.table_lock). Every rewrite
goes to a temporary file that replaces the original atomically (os.replace), so a kill at any moment leaves
either the old or the new file, never a mix.
"""
from __future__ import annotations

import contextlib
import csv
import re
from pathlib import Path

from artifact.results import (COLUMNS, PROVENANCE, ResultsFileError, TableBusy, atomic_write_bytes, read_rows,
                              read_table, table_lock, write_rows)

__all__ = ["COLUMNS", "PROVENANCE", "ResultsFileError", "TableBusy", "check_header", "drop_rows", "fold_rerun",
           "merge_shards", "read_rows", "repair_tail", "shard_files", "write_rows"]


def repair_tail(csv_path: Path) -> int:
    """Cut a torn last line (a kill mid-write leaves one without its newline); return the bytes removed.
    Only the table's writer (holding its lock) may call this: another process's half-written line is torn too."""
    if not csv_path.exists():
        return 0
    data = csv_path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    keep = data[: data.rfind(b"\n") + 1]
    atomic_write_bytes(csv_path, keep)
    return len(data) - len(keep)


def check_header(csv_path: Path) -> None:
    """Refuse to append to a file written with another schema (it would become a sparse union of columns)."""
    read_table(csv_path)


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


def _whole_rows(path: Path, notes: list[str]) -> list[dict]:
    """A table's rows for a merge: every line must be valid (else ResultsFileError naming them); a torn last
    line (a killed job's) is left out, and said so in `notes`."""
    table = read_table(path)
    rows = table.whole(torn="skip")
    if table.torn is not None:
        notes.append(f"{path}: left out its torn last line (a killed run's; running that job again records "
                     f"the cell): {table.torn[:80]!r}")
    return rows


def merge_shards(results_dir: Path, suite: str, notes: list[str] | None = None) -> tuple[Path, int]:
    """Merge every shard file of `suite` into results/<suite>.csv (rows already there are kept).

    Every file is read whole (an invalid line refuses the merge, naming it; a shard's torn last line is left
    out and noted in `notes`). A config_hash present twice must carry the same values (provenance columns
    aside) or the merge is refused, naming the hash, the files and the differing columns. Holds the merged
    table's lock and every shard's (a shard still running refuses the merge). Shard files are left in place,
    so the merge can be repeated. Returns the merged path and the number of rows added.
    """
    results_dir = Path(results_dir)
    notes = [] if notes is None else notes
    target = results_dir / f"{suite}.csv"
    shards = shard_files(results_dir, suite)
    if not shards:
        raise ResultsFileError(f"no shard files {suite}.shard<i>-of-<n>.csv in {results_dir}")
    with contextlib.ExitStack() as locks:
        for p in [target, *shards]:
            locks.enter_context(table_lock(p))
        merged: dict[str, tuple[dict, Path]] = {}
        before = 0
        for p in [target, *shards]:
            rows = _whole_rows(p, notes)
            before += len(rows) if p == target else 0
            for r in rows:
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
        write_rows(target, [r for r, _ in merged.values()])
    return target, len(merged) - before


def _side_tables(rerun_dir: Path, suite: str) -> list[Path]:
    """The suite's side tables in a re-run folder: <suite>_*.csv files keyed by config_hash. A file of that name
    pattern without a config_hash column is a table of its own (e.g. full_model_breakdown.csv), not a side table."""
    out = []
    for p in sorted(rerun_dir.glob(f"{suite}_*.csv")):
        with open(p, newline="") as f:
            if "config_hash" in (csv.DictReader(f).fieldnames or ()):
                out.append(p)
    return out


def _folded_side_rows(target: Path, source: Path, hashes: set) -> tuple[list[dict], list[str]] | None:
    """Side table `target` where the rows of `hashes` are `source`'s: replaced, added, or -- where `source` has
    none for a folded cell -- dropped, since a side row belongs to the run of its cell's row; in target's columns.
    None when nothing changes."""
    with open(source, newline="") as f:
        reader = csv.DictReader(f)
        cols = list(reader.fieldnames or ())
        new = {r["config_hash"]: r for r in reader if r["config_hash"] in hashes}
    old = []
    if target.exists():
        with open(target, newline="") as f:
            reader = csv.DictReader(f)
            cols, old = list(reader.fieldnames or cols), list(reader)
    if not new and not any(r["config_hash"] in hashes for r in old):
        return None
    seen = {r["config_hash"] for r in old}
    kept = [new.get(r["config_hash"], r) for r in old if r["config_hash"] not in hashes or r["config_hash"] in new]
    return kept + [r for h, r in new.items() if h not in seen], cols


def fold_rerun(results_dir: Path, suite: str, rerun_dir: Path, keep_paths: tuple[str, ...] = (),
               notes: list[str] | None = None) -> dict:
    """Fold the rows of a re-run (another results folder, e.g. a geometry re-run after a kernel change, or a
    `redo=...` into a copy of the table) into results/<suite>.csv: each row of a run the table does not hold yet
    replaces the row of the same config_hash (or is added), except rows of `keep_paths` (e.g. a baseline whose
    package the re-run machine lacked). Rows of runs the table already holds -- a copied table's old rows, or a
    re-run folded before -- are left alone, so folding is idempotent and never brings an old row back. The env
    records (env/<run_id>.json, .wall.json) of every run whose rows came in are copied beside the table.
    A side table of the suite (<suite>_*.csv beside it, rows keyed by config_hash, e.g. beam_scaling_steps.csv)
    follows its rows: the re-run's side rows of every folded config_hash replace the table's (none: the old side
    row goes with its superseded row).
    Both tables are read whole (an invalid line refuses the fold, naming it; the re-run's torn last line is
    left out and noted in `notes`) and both are locked while the fold runs.
    Returns {"replaced", "added", "kept", "runs", "orphaned"}: `orphaned` names the <suite> env records (and
    their side files) left with no row (superseded runs; delete them, git keeps them)."""
    results_dir, rerun_dir = Path(results_dir), Path(rerun_dir)
    notes = [] if notes is None else notes
    target, source = results_dir / f"{suite}.csv", rerun_dir / f"{suite}.csv"
    if not source.exists():
        raise ResultsFileError(f"no results file {source}")
    with table_lock(target), table_lock(source):
        rows = _whole_rows(target, notes) if target.exists() else []     # a suite's first rows start its table
        incoming = _whole_rows(source, notes)
        index = {r["config_hash"]: i for i, r in enumerate(rows)}
        held = {r["run_id"] for r in rows}
        counts = {"replaced": 0, "added": 0, "kept": 0}
        runs: set[str] = set()
        folded: set[str] = set()          # config_hashes whose row came in: their side-table rows follow
        for r in incoming:
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
        sides = [(results_dir / p.name, _folded_side_rows(results_dir / p.name, p, folded))
                 for p in _side_tables(rerun_dir, suite)]          # every table read before any file is written
        (results_dir / "env").mkdir(exist_ok=True)
        for run in sorted(runs):   # the record and its side files (.wall.json, the traffic suite's .traffic.json)
            for src in sorted((rerun_dir / "env").glob(f"{run}.*json")):
                atomic_write_bytes(results_dir / "env" / src.name, src.read_bytes())
        for side, folded_rows in sides:
            if folded_rows is not None:
                write_rows(side, *folded_rows)
        write_rows(target, rows)
    live = {r["run_id"] for r in rows}
    orphaned = sorted(f.name for f in (results_dir / "env").glob(f"{suite}-*.json")     # side files included
                      if f.name.split(".", 1)[0] not in live)
    return {**counts, "runs": sorted(runs), "orphaned": orphaned}
