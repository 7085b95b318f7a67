"""The results store (docs/design.md §6): the one module that writes, reads, repairs, diffs, merges and folds
results tables, and reads the records beside them. Tidy CSV rows appended and flushed per cell.

One schema for every suite, so files never become a sparse union of columns. A row is keyed by its
`config_hash` (everything that defines the cell, nothing measured); a re-run skips hashes already present.
`run_id` (new_run_id) names the env record (results/env/<run_id>.json, artifact.env_record) of the run that
produced the row.

Every reader of a results table (the sweep's resume, the merges, the figures) goes through `read_table`, which
checks every line against the schema (`row_problems`) and names the file and line of anything it refuses;
`append_row` checks a row the same way before writing it, so what is written reads back. A table written before
a column of ADDED_COLUMNS existed reads with that column empty, and the first append rewrites it in COLUMNS
(`upgrade_table`). `table_lock` gives a table one writer at a time. Two rows of one cell differ where
`differing_columns` says so. `repair_table` moves refused lines aside (`python -m artifact.results repair FILE`);
`merge_shards` and `fold_rerun` join tables (python -m sweeps.merge); `read_side_table` reads the tables beside a
suite's, `read_wall` a run's wall record, and `phase_table` where the runs' time went by phase (`python -m
artifact.results phases DIR ...`). `python -m artifact.results verify ENV.json ...` checks env records against the
code they name. This module imports no torch: the reporting stage (plots/) reads through it.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import fcntl
import hashlib
import io
import json
import math
import os
import platform
import re
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

COLUMNS = [
    "suite", "path", "geometry", "R", "W", "T", "O", "HK", "HV", "K", "V", "prompt_len", "lineage", "seed",
    "status", "reason", "latency_ms", "p20_ms", "p80_ms", "floor_ms", "floor_bound", "launch_floor_ms", "timer",
    "persistent_bytes", "written_bytes", "dram_read_bytes", "dram_write_bytes", "flops", "compulsory_bytes",
    "max_abs_err", "tolerance", "config_hash", "run_id", "git_commit",
]
STATUSES = ("ok", "skipped", "failed")

# Columns a table may lack: a header that is COLUMNS without some of these (the others in COLUMNS' order) is a
# results header, and its rows read with the missing columns empty. Tables committed before a column joined the
# schema stay readable as they are; nothing else may be missing.
ADDED_COLUMNS = ("launch_floor_ms",)

# Fields that define a cell (hashed); measured fields never enter the hash.
KEY_FIELDS = ("suite", "path", "geometry", "R", "W", "T", "HK", "HV", "K", "V", "prompt_len", "lineage", "seed")

# What a valid row holds (row_problems): integer fields with their minimum, measured numbers (empty, or a number
# >= 0; nan / inf allowed, e.g. a failed cell's max_abs_err), and text fields that may not be empty.
INT_FIELDS = {"R": 1, "W": 1, "T": 1, "O": 2, "HK": 1, "HV": 1, "K": 1, "V": 1, "prompt_len": 0, "seed": 0}
MEASURED_FIELDS = ("latency_ms", "p20_ms", "p80_ms", "floor_ms", "launch_floor_ms", "persistent_bytes",
                   "written_bytes", "dram_read_bytes", "dram_write_bytes", "flops", "compulsory_bytes", "max_abs_err")
NAME_FIELDS = ("suite", "path", "geometry", "lineage", "run_id")
_HASH = re.compile(r"[0-9a-f]{16}")
_SUITE = re.compile(r"[a-z][a-z0-9_]*")


class ResultsFileError(RuntimeError):
    """A results file that cannot be read, appended to or merged safely (the message names it and says what to do)."""


class TableBusy(ResultsFileError):
    """Another process holds the table's lock (table_lock)."""


def config_hash(cell: dict) -> str:
    """Hash of the cell's KEY_FIELDS. A `join_key` in `cell` replaces the suite in the hash: suites that
    measure the same cells with different instruments (recurrent_path and traffic) share one, so their
    rows join on config_hash."""
    missing = [f for f in KEY_FIELDS if f not in cell]
    if missing:
        raise ValueError(f"config_hash: cell lacks key fields {missing}")
    key = {f: cell[f] for f in KEY_FIELDS}
    if cell.get("join_key"):
        key["suite"] = cell["join_key"]
    blob = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def new_run_id(suite: str, shard: tuple[int, int] | None = None) -> str:
    """A new run's id, `<suite>-<UTC start, %Y%m%dT%H%M%SZ>[-s<i>of<n>]-<6 hex>`: it names the run's env record
    (env/<run_id>.json) and its side files; ids of one suite sort by start time, and the random tail keeps two
    runs started in the same second (the shards of one multirun) apart. Every writer of results builds its run
    ids here (the sweeps, tools.bench, tools.decode_breakdown)."""
    if not _SUITE.fullmatch(suite):
        raise ValueError(f"new_run_id: suite {suite!r} is not a lower-case identifier")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    part = f"-s{shard[0]}of{shard[1]}" if shard is not None else ""
    return f"{suite}-{stamp}{part}-{uuid.uuid4().hex[:6]}"


def _number(text: str) -> float | None:
    """The float a field spells, or None if it spells none (float() alone would take '1_0' and ' 1 ')."""
    if text != text.strip() or "_" in text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def row_problems(row: dict) -> list[str]:
    """Why `row` (field -> text, as a CSV holds it) is not a valid results row; [] if it is.

    Every column present; status one of STATUSES; names non-empty (suite a lower-case identifier); the integer
    fields integers at or above their minimum, with O = T + 1; every measured field empty or a number >= 0;
    tolerance a finite number > 0; config_hash 16 hex digits; an ok row's max_abs_err a finite number (the gate
    compared it with a tolerance); a failed or skipped row's reason non-empty."""
    missing = [c for c in COLUMNS if row.get(c) is None]
    if missing:
        return [f"no value for {missing}"]
    out = []
    status = row["status"]
    if status not in STATUSES:
        out.append(f"status {status!r} is not one of {STATUSES}")
    for c in NAME_FIELDS:
        if not row[c].strip():
            out.append(f"{c} is empty")
    if row["suite"] and not _SUITE.fullmatch(row["suite"]):
        out.append(f"suite {row['suite']!r} is not a lower-case identifier")
    ints = {}
    for c, low in INT_FIELDS.items():
        text = row[c]
        if not re.fullmatch(r"-?[0-9]+", text):
            out.append(f"{c} {text!r} is not an integer")
        elif int(text) < low:
            out.append(f"{c}={text} is below {low}")
        else:
            ints[c] = int(text)
    if "O" in ints and "T" in ints and ints["O"] != ints["T"] + 1:
        out.append(f"O={ints['O']} is not T + 1 = {ints['T'] + 1}")
    for c in MEASURED_FIELDS:
        text = row[c]
        if text == "":
            continue
        x = _number(text)
        if x is None:
            out.append(f"{c} {text!r} is not a number")
        elif x < 0:
            out.append(f"{c}={text} is negative")
    tol = _number(row["tolerance"])
    if tol is None or not math.isfinite(tol) or not tol > 0:
        out.append(f"tolerance {row['tolerance']!r} is not a finite number > 0")
    if not _HASH.fullmatch(row["config_hash"]):
        out.append(f"config_hash {row['config_hash']!r} is not 16 hex digits")
    if status == "ok":
        err = _number(row["max_abs_err"])
        if err is None or not math.isfinite(err):
            out.append(f"an ok row needs a finite max_abs_err, got {row['max_abs_err']!r}")
    elif status in ("failed", "skipped") and not row["reason"].strip():
        out.append(f"a {status} row needs a reason")
    return out


def _as_text(row: dict) -> dict:
    """A row as its CSV line will spell it (None and missing fields are empty)."""
    return {c: "" if row.get(c) is None else str(row[c]) for c in COLUMNS}


def check_row(row: dict) -> list[str]:
    """Why `row` (field -> value) would not read back as a valid row once written; [] if it would."""
    text = _as_text(row)
    problems = row_problems(text)
    broken = [c for c, v in text.items() if "\n" in v or "\r" in v]
    if broken:
        problems.append(f"{broken} hold a line break")
    return problems


def append_row(csv_path: str | os.PathLike, row: dict) -> None:
    """Append one row and flush it to disk, so a killed sweep loses no finished cell. The row is checked as it
    will read back (row_problems); one line per row, so a field may not hold a line break. A table whose header
    lacks some ADDED_COLUMNS is rewritten in COLUMNS first (upgrade_table), so every line of it has one schema."""
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise ValueError(f"append_row: unknown columns {sorted(unknown)}")
    text = _as_text(row)
    problems = check_row(row)
    if problems:
        raise ValueError("append_row: invalid row: " + "; ".join(problems))
    upgrade_table(csv_path)
    append_csv(csv_path, COLUMNS, [text])


def is_results_header(header: list[str]) -> bool:
    """True for COLUMNS, and for COLUMNS without some of ADDED_COLUMNS (a table written before they existed)."""
    return header == [c for c in COLUMNS if c in header] and set(COLUMNS) - set(header) <= set(ADDED_COLUMNS)


def _header_of(path: Path) -> list[str] | None:
    """The first line of a table as CSV fields (None when the file is missing, empty or not a CSV line)."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
        return next(csv.reader([first.rstrip(b"\r\n").decode("utf-8")], strict=True), []) if first else None
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def upgrade_table(csv_path: str | os.PathLike) -> bool:
    """Rewrite a table whose header lacks some ADDED_COLUMNS in COLUMNS, the missing fields empty; True if it
    was rewritten. Each complete line that is one CSV record of the old header's fields is rewritten in COLUMNS
    (a valid row stays valid, an invalid one keeps its problem); any other line (a truncated or mangled one, a
    torn last line) is kept byte for byte, so the rewrite neither hides nor repairs anything the reader refuses.
    Atomic (a temp file, then rename); the caller holds the table's lock."""
    path = Path(csv_path)
    header = _header_of(path)
    if header is None or header == COLUMNS or not is_results_header(header):
        return False
    data = path.read_bytes()
    lines = data.split(b"\n")
    out = [",".join(COLUMNS).encode() + (b"\r" if lines[0].endswith(b"\r") else b"")]
    for i, raw in enumerate(lines[1:], start=1):
        complete = i < len(lines) - 1             # the last piece has no line end: torn (or empty)
        fields = None
        if complete:
            try:
                fields = next(csv.reader([raw.rstrip(b"\r").decode("utf-8")], strict=True), [])
            except (UnicodeDecodeError, csv.Error):
                fields = None
        if fields is not None and len(fields) == len(header):
            buf = io.StringIO()
            values = dict(zip(header, fields))
            csv.writer(buf, lineterminator="").writerow([values.get(c, "") for c in COLUMNS])
            out.append(buf.getvalue().encode() + (b"\r" if raw.endswith(b"\r") else b""))
        else:
            out.append(raw)
    atomic_write_bytes(path, b"\n".join(out))
    return True


def append_csv(csv_path: str | os.PathLike, columns, rows: list[dict]) -> None:
    """Append rows (missing fields empty) under `columns`, writing the header into a new or empty file, and
    flush them to disk: the one writer of the suites' tables and of the side tables beside them. The append
    holds an exclusive lock on the file and is one write, so the shards of a suite, which share its side
    tables, never interleave their lines or write the header twice. A file whose header is not `columns` (a
    table written by an older version, resumed by this one) is refused, naming both: its lines would not line
    up."""
    csv_path = Path(csv_path)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "a+", newline="") as f:
        fcntl.flock(f, fcntl.LOCK_EX)           # released when the file closes
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="raise")
        if os.fstat(f.fileno()).st_size == 0:
            w.writeheader()
        else:
            f.seek(0)
            header = next(csv.reader([f.readline()]), [])
            if header != list(columns):
                raise ValueError(f"{csv_path}: its header {header} is not this table's columns {list(columns)}; "
                                 f"write to a new results folder")
        w.writerows({c: r.get(c, "") for c in columns} for r in rows)
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())


# ---------------------------------------------------------------- reading a table

@dataclass
class Refused:
    """A line of a results table that is not a valid row: its 1-based line number, why, and its text."""

    line: int
    why: str
    text: str


@dataclass
class Table:
    """What `read_table` found in one file: the valid rows (each with its line number), the refused lines, and
    the torn last line a killed writer leaves (text without its line end; None if the file ends cleanly)."""

    path: Path
    columns: list[str] = field(default_factory=lambda: list(COLUMNS))     # the file's header
    rows: list[dict] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    torn: str | None = None

    def whole(self, torn: str = "refuse") -> list[dict]:
        """The rows, if every line is a valid row; else ResultsFileError naming every refused line and how to
        repair the file. torn="refuse" refuses a torn last line too; "skip" leaves it out (the caller says so)."""
        problems = self.problems()
        if self.torn is not None and torn == "refuse":
            problems.append(f"{self.path}: the last line is torn (no line end; a killed writer's): "
                            f"{_clip(self.torn)}")
        if problems:
            n = len(self.refused) + (self.torn is not None and torn == "refuse")
            raise ResultsFileError(f"{self.path}: {n} line(s) refused:\n  " + "\n  ".join(problems)
                                   + f"\nrepair: {repair_command(self.path)}  (moves them to "
                                   f"{self.path}.refused; the next run of the suite measures their cells again)")
        return self.rows

    def problems(self, limit: int = 10) -> list[str]:
        """One line per refused line (the first `limit`), '<file> line <n>: <why>: <text>'."""
        out = [f"{self.path} line {r.line}: {r.why}: {_clip(r.text)}" for r in self.refused[:limit]]
        if len(self.refused) > limit:
            out.append(f"... and {len(self.refused) - limit} more refused line(s)")
        return out


def _in_columns(header: list[str], fields: list[str]) -> dict:
    """A line's fields under its file's header as a row of every column of COLUMNS (the missing ones empty)."""
    values = dict(zip(header, fields))
    return {c: values.get(c, "") for c in COLUMNS}


def _csv_line(row: dict) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([row[c] for c in COLUMNS])
    return buf.getvalue()


def _clip(text: str, n: int = 100) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def repair_command(path: str | os.PathLike) -> str:
    return f"python -m artifact.results repair {path}"


def read_table(path: str | os.PathLike) -> Table:
    """Read a results table, checking every line: the header must be COLUMNS (or COLUMNS without some of
    ADDED_COLUMNS, whose fields then read empty); each following line must be one CSV record of exactly the
    header's columns (UTF-8) that passes row_problems, with a config_hash no earlier line holds (one row per
    cell). Rows come back with every column of COLUMNS. Lines that fail are returned as `refused`, never as rows;
    a last line without its line end (a killed writer's) is returned as `torn`. A missing or empty file is an
    empty table.
    Raises ResultsFileError when the file cannot be read or its header is not the schema's."""
    path = Path(path)
    table = Table(path)
    if not path.exists():
        return table
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ResultsFileError(f"{path}: cannot read: {e}") from None
    raw = data.split(b"\n")
    if raw[-1]:
        table.torn = raw[-1].decode("utf-8", "replace")
    raw = raw[:-1]                       # complete lines (each ended by \n)
    if not raw:
        return table
    try:
        header = next(csv.reader([raw[0].rstrip(b"\r").decode("utf-8")], strict=True), [])
    except (UnicodeDecodeError, csv.Error) as e:
        raise ResultsFileError(f"{path} line 1: not a results header ({e}); move the file away") from None
    if not is_results_header(header):
        missing = [c for c in COLUMNS if c not in header]
        extra = [c for c in header if c not in COLUMNS]
        raise ResultsFileError(f"{path}: columns differ from artifact.results.COLUMNS (missing {missing}, "
                               f"extra {extra}{', order differs' if not missing and not extra else ''}); "
                               "move the file away or re-create it")
    table.columns = header
    seen: dict[str, int] = {}
    for n, line in enumerate(raw[1:], start=2):
        line = line.rstrip(b"\r")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            table.refused.append(Refused(n, f"not UTF-8 text (byte {line[e.start]:#04x} at column {e.start + 1})",
                                         line.decode("utf-8", "replace")))
            continue
        try:
            fields = next(csv.reader([text], strict=True), [])
        except csv.Error as e:
            table.refused.append(Refused(n, f"not one CSV record ({e})", text))
            continue
        if len(fields) != len(header):
            why = "an empty line" if not text.strip() else \
                f"{len(fields)} fields, expected {len(header)} (a truncated or mangled line)"
            table.refused.append(Refused(n, why, text))
            continue
        row = _in_columns(header, fields)
        problems = row_problems(row)
        if problems:
            table.refused.append(Refused(n, "; ".join(problems), text))
            continue
        h = row["config_hash"]
        if h in seen:
            table.refused.append(Refused(n, f"config_hash {h} is already recorded at line {seen[h]} "
                                            "(one row per cell)", text))
            continue
        seen[h] = n
        table.rows.append(row)
        table.lines.append(n)
    return table


def read_rows(path: str | os.PathLike, torn: str = "refuse") -> list[dict]:
    """The rows of a results table that must be whole (read_table(path).whole(torn))."""
    return read_table(path).whole(torn)


def write_rows(csv_path: str | os.PathLike, rows: list[dict], columns: list[str] = COLUMNS) -> None:
    """Write `rows` atomically (a temp file, fsync'd, then renamed) in `columns` (the results schema unless a
    side table's own)."""
    csv_path = Path(csv_path)
    tmp = csv_path.with_name(csv_path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="raise")
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in columns})
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, csv_path)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


PROVENANCE = ("run_id",)   # columns that say where a row came from, not what it measured


def differing_columns(a: dict, b: dict) -> list[str]:
    """The columns of COLUMNS, provenance aside, in which two rows of one cell differ: [] when they record the
    same measurement. The one test of "same cell, different values" (the repair, the shard merge, the figures'
    reading of a cell in two files)."""
    return [c for c in COLUMNS if c not in PROVENANCE and a.get(c, "") != b.get(c, "")]


def repair_table(path: str | os.PathLike, torn_only: bool = False, held: bool = False) -> dict:
    """Make a results table whole: keep its valid rows; move every refused line, the torn last line, and the
    rows of a cell recorded twice with different values (which one is right cannot be told) to `<file>.refused`
    (appended, each after a '# line <n>: <why>' note); a cell recorded twice with the same values (provenance
    aside) keeps its first row. The next run of the suite measures the cells that lost their row.
    torn_only: move the torn last line alone (what a killed writer leaves; the sweep's resume does this) and
    leave every other byte as it is. Holds the table's lock, unless `held` says the caller holds it (only the
    holder may cut a torn line: another writer's half-written line is torn too).
    Returns {"kept", "moved": [(line, why)], "refused_file"}."""
    path = Path(path)
    with contextlib.nullcontext() if held else table_lock(path):
        table = read_table(path)
        moved: list[Refused] = []
        if table.torn is not None:
            moved.append(Refused(len(table.rows) + len(table.refused) + 2, "torn last line (no line end)",
                                 table.torn))
        keep = table.rows
        if not torn_only:
            refused, conflicted = _refused_and_conflicts(table)
            moved += refused
            keep = []
            for r, n in zip(table.rows, table.lines):
                if r["config_hash"] in conflicted:
                    moved.append(Refused(n, f"config_hash {r['config_hash']} is recorded again later with other "
                                            "values; neither row is kept", _csv_line(r)))
                else:
                    keep.append(r)
        refused_file = path.with_name(path.name + ".refused")
        if moved:
            with open(refused_file, "a", encoding="utf-8") as f:
                for ref in sorted(moved, key=lambda r: r.line):
                    f.write(f"# line {ref.line}: {ref.why}\n{ref.text}\n")
            if torn_only:
                data = path.read_bytes()
                atomic_write_bytes(path, data[: data.rfind(b"\n") + 1])
            else:
                write_rows(path, keep)
    return {"kept": len(keep), "moved": [(r.line, r.why) for r in sorted(moved, key=lambda r: r.line)],
            "refused_file": refused_file}


def _refused_and_conflicts(table: Table) -> tuple[list[Refused], set[str]]:
    """The refused lines of `table` (a repeated cell's line saying whether it repeats its first row's values),
    and the config_hashes recorded twice with different values."""
    first = {r["config_hash"]: r for r in table.rows}
    out, conflicted = [], set()
    for ref in table.refused:
        m = re.match(r"config_hash ([0-9a-f]{16}) is already recorded at line (\d+)", ref.why)
        if m:
            diff = differing_columns(first[m[1]], _in_columns(table.columns, next(csv.reader([ref.text]))))
            if diff:
                conflicted.add(m[1])
            ref = Refused(ref.line, f"{ref.why}, with other values in {diff}" if diff else
                          f"{ref.why}, with the same values", ref.text)
        out.append(ref)
    return out, conflicted


# ---------------------------------------------------------------- one writer per table

def _lock_path(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.name + ".lock")


def _holder(lock: Path) -> str:
    """Who wrote the lock file (pid, host, start, command), for the message a second writer sees."""
    try:
        rec = json.loads(lock.read_text() or "{}")
    except (OSError, ValueError):
        rec = {}
    if not rec:
        return "a sharded run reading it, or a merge"
    return f"pid {rec.get('pid')} on {rec.get('host')} since {rec.get('since')}: {rec.get('command')}"


@contextlib.contextmanager
def table_lock(csv_path: str | os.PathLike, shared: bool = False):
    """Hold `<table>.lock` while writing (or, shared, reading) a results table; raise TableBusy at once if
    another process holds it (exclusive against any holder; shared against an exclusive one). Shards of one
    run read the merged table with shared locks while each writes its own shard file under an exclusive lock.

    An flock (released by the kernel however the holder dies, so a killed run leaves no stale lock). The lock
    file is removed by its last holder; an acquirer checks that the file it locked is still the one at the path,
    so a lock taken on a file removed meanwhile is retried."""
    csv_path = Path(csv_path)
    lock = _lock_path(csv_path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TableBusy(f"{csv_path} has another writer ({_holder(lock)}); nothing was done. Wait for it "
                            "to end (or stop it), then run the same command again; or write elsewhere "
                            "(results_dir=...)") from None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        if not shared:
            import sys
            argv = getattr(sys, "orig_argv", sys.argv)
            command = " ".join([Path(argv[0]).name, *argv[1:]]) if argv else "?"
            info = {"pid": os.getpid(), "host": platform.node(), "command": command,
                    "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        yield lock
    finally:
        try:
            if shared:      # the last shared holder removes the file; another holder keeps it
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(lock)
        except (BlockingIOError, FileNotFoundError):
            pass
        os.close(fd)


# ---------------------------------------------------------------- editing, merging and folding tables
# Every table is read whole through read_table and written under its lock; every rewrite goes to a temporary
# file that replaces the original atomically (os.replace), so a kill at any moment leaves the old or the new file.

def drop_rows(csv_path: str | os.PathLike, hashes: set[str], statuses: tuple[str, ...]) -> int:
    """Remove the rows whose config_hash is in `hashes` and status in `statuses` (a sweep's `redo`); return how
    many. The caller holds the table's lock."""
    rows = read_rows(csv_path)
    keep = [r for r in rows if not (r["config_hash"] in hashes and r["status"] in statuses)]
    if len(keep) != len(rows):
        write_rows(csv_path, keep)
    return len(rows) - len(keep)


def shard_files(results_dir: str | os.PathLike, suite: str) -> list[Path]:
    """results/<suite>.shard<i>-of-<n>.csv, ordered by (n, i)."""
    pat = re.compile(rf"{re.escape(suite)}\.shard(\d+)-of-(\d+)\.csv")
    found = [(p, pat.fullmatch(p.name)) for p in Path(results_dir).glob(f"{suite}.shard*-of-*.csv")]
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


def merge_shards(results_dir: str | os.PathLike, suite: str, notes: list[str] | None = None) -> tuple[Path, int]:
    """Merge every shard file of `suite` into results/<suite>.csv (rows already there are kept).

    Every file is read whole (an invalid line refuses the merge, naming it; a shard's torn last line is left
    out and noted in `notes`). A config_hash present twice must carry the same values (differing_columns) or
    the merge is refused, naming the hash, the files and the differing columns. Holds the merged table's lock
    and every shard's (a shard still running refuses the merge). Shard files are left in place, so the merge
    can be repeated. Returns the merged path and the number of rows added."""
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
                    diff = differing_columns(old, r)
                    if diff:
                        raise ResultsFileError(f"config_hash {h}: {src.name} and {p.name} disagree on {diff} "
                                               f"({[old[c] for c in diff]} vs {[r[c] for c in diff]}); refusing "
                                               "to merge (remove the stale row or file)")
                    continue
                merged[h] = (r, p)
        write_rows(target, [r for r, _ in merged.values()])
    return target, len(merged) - before


@dataclass
class SideTable:
    """A CSV beside a suite's table with columns of its own (append_csv writes it): its header and its rows as
    text, and its torn last line (None if the file ends cleanly)."""

    path: Path
    columns: list[str] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    torn: str | None = None


def read_side_table(path: str | os.PathLike) -> SideTable:
    """Read a side table (e.g. beam_scaling_steps.csv, full_model_breakdown.csv): every complete line must be one
    UTF-8 CSV record of exactly the header's fields, else ResultsFileError naming the file and line; a last line
    without its line end (a killed writer's) is returned as `torn`, never as a row. A missing or empty file is
    an empty table. The one reader of side tables (the fold below, the figures)."""
    path = Path(path)
    table = SideTable(path)
    try:
        data = path.read_bytes() if path.exists() else b""
    except OSError as e:
        raise ResultsFileError(f"{path}: cannot read: {e}") from None
    raw = data.split(b"\n")
    if raw[-1]:
        table.torn = raw[-1].decode("utf-8", "replace")
    for n, line in enumerate(raw[:-1], start=1):
        try:
            fields = next(csv.reader([line.rstrip(b"\r").decode("utf-8")], strict=True), [])
        except (UnicodeDecodeError, csv.Error) as e:
            raise ResultsFileError(f"{path} line {n}: not one UTF-8 CSV record ({e})") from None
        if n == 1:
            table.columns = fields
        elif len(fields) != len(table.columns):
            raise ResultsFileError(f"{path} line {n}: {len(fields)} fields, expected {len(table.columns)} "
                                   "(a truncated or mangled line)")
        else:
            table.rows.append(dict(zip(table.columns, fields)))
    return table


def side_tables(results_dir: str | os.PathLike, suite: str) -> list[Path]:
    """The suite's side tables in a results folder: <suite>_*.csv files keyed by config_hash. A file of that name
    pattern without a config_hash column is a table of its own (e.g. full_model_breakdown.csv), not a side table."""
    return [p for p in sorted(Path(results_dir).glob(f"{suite}_*.csv"))
            if "config_hash" in read_side_table(p).columns]


def _folded_side_rows(target: Path, source: Path, hashes: set) -> tuple[list[dict], list[str]] | None:
    """Side table `target` where the rows of `hashes` are `source`'s: replaced, added, or -- where `source` has
    none for a folded cell -- dropped, since a side row belongs to the run of its cell's row; in target's columns.
    None when nothing changes."""
    src, old = read_side_table(source), read_side_table(target)
    new = {r["config_hash"]: r for r in src.rows if r["config_hash"] in hashes}
    cols = old.columns or src.columns
    if not new and not any(r["config_hash"] in hashes for r in old.rows):
        return None
    seen = {r["config_hash"] for r in old.rows}
    kept = [new.get(r["config_hash"], r) for r in old.rows
            if r["config_hash"] not in hashes or r["config_hash"] in new]
    return kept + [r for h, r in new.items() if h not in seen], cols


def fold_rerun(results_dir: str | os.PathLike, suite: str, rerun_dir: str | os.PathLike,
               keep_paths: tuple[str, ...] = (), notes: list[str] | None = None) -> dict:
    """Fold the rows of a re-run (another results folder, e.g. a geometry re-run after a kernel change, or a
    `redo=...` into a copy of the table) into results/<suite>.csv: each row of a run the table does not hold yet
    replaces the row of the same config_hash (or is added), except rows of `keep_paths` (e.g. a baseline whose
    package the re-run machine lacked). Rows of runs the table already holds -- a copied table's old rows, or a
    re-run folded before -- are left alone, so folding is idempotent and never brings an old row back. The env
    records (env/<run_id>.json, .wall.json) of every run whose rows came in are copied beside the table.
    A side table of the suite (side_tables: <suite>_*.csv beside it, rows keyed by config_hash) follows its
    rows: the re-run's side rows of every folded config_hash replace the table's (none: the old side row goes
    with its superseded row).
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
                 for p in side_tables(rerun_dir, suite)]          # every table read before any file is written
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


# ---------------------------------------------------------------- the records beside the tables

def read_wall(results_dir: str | os.PathLike, run_id: str) -> dict | None:
    """A run's wall record, <results_dir>/env/<run_id>.wall.json (the sweep writes it at the end of every run:
    wall_s, cells, by_path, shared); None when there is none. ResultsFileError when it is not a JSON object
    with a number `wall_s` (the message names the file)."""
    f = Path(results_dir) / "env" / f"{run_id}.wall.json"
    return read_wall_file(f) if f.is_file() else None


def read_wall_file(f: str | os.PathLike) -> dict:
    """One wall record read from its file (read_wall's check: a JSON object with a number `wall_s`)."""
    f = Path(f)
    try:
        rec = json.loads(f.read_text())
        float(rec["wall_s"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise ResultsFileError(f"{f}: unreadable wall record ({type(e).__name__})") from None
    return rec


# What a run's wall record splits each path's and each shared label's time into (its `phases` mapping, booked by
# sweeps.context.RunContext.phase), in the order a table shows them:
#   setup         building what a cell or shape runs on: its workload, the path object and supports(), a model and
#                 its prompt prefills
#   reference     the FP32 FullState reference a gate compares with
#   capture       the first calls (JIT compiles, autotuning, torch.compile), prepare and the CUDA graph capture; in
#                 the full model also the gate's one replayed search (artifact.model.cell.gated_decode does both)
#   gate          the gated run (a graph replay, or the eager run of a path that cannot be captured, whose first
#                 call compiles) and its comparison with the reference
#   timing        the timer (artifact.timing): its warm-up and timed replays
#   launch_floor  timing the streaming launches of launch_floor_ms
#   census, counters, calibration
#                 the traffic suite's child processes: the kernel census, the counter attempts, the method's
#                 calibration copies
#   release       returning memory (gc and the allocator's cache)
#   record        appending the row to its table (flushed to disk)
#   other         the rest of the owner's time: cost models, floors, bookkeeping
PHASES = ("setup", "reference", "capture", "gate", "timing", "launch_floor", "census", "counters", "calibration",
          "release", "record", "other")
_STAGE = re.compile(r"([a-z][a-z0-9_]*)-\d{8}T\d{6}Z")


def wall_stage(rec: dict) -> str:
    """The stage (suite) a wall record belongs to: its `suite`, else the suite its run_id starts with."""
    if rec.get("suite"):
        return str(rec["suite"])
    m = _STAGE.match(str(rec.get("run_id", "")))
    return m.group(1) if m else str(rec.get("run_id") or "?")


def wall_files(paths) -> list[Path]:
    """The wall records the arguments name: files as given; a folder's `*.wall.json`, or its env/'s."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.wall.json")) or sorted((p / "env").glob("*.wall.json"))
            if not found:
                raise ResultsFileError(f"{p}: no wall records (*.wall.json) in it or in its env/")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise ResultsFileError(f"{p}: no such file or folder")
    return out


def phase_table(records: list[dict]) -> list[dict]:
    """Per stage and owner (a path or a shared label), summed over the records: cells, wall seconds and seconds
    by phase (PHASES; `unsplit` for a record written before wall records had phases), then one `(all)` line per
    stage with its records' wall_s and the time booked to no owner (start-up after the first cell, the work after
    the last row). Stages and owners in the order first met."""
    table: dict[str, dict[str, dict]] = {}
    totals: dict[str, dict] = {}
    for rec in records:
        stage = wall_stage(rec)
        owners = table.setdefault(stage, {})
        total = totals.setdefault(stage, {"wall_s": 0.0, "cells": 0, "records": 0})
        total["wall_s"] += float(rec["wall_s"])
        total["cells"] += int(rec.get("cells", 0))
        total["records"] += 1
        walls = {p: (float(w["wall_s"]), int(w.get("cells", 0))) for p, w in rec.get("by_path", {}).items()}
        walls.update({k: (float(s), 0) for k, s in rec.get("shared", {}).items()})
        split = rec.get("phases")
        for owner, (secs, cells) in walls.items():
            line = owners.setdefault(owner, {"cells": 0, "wall_s": 0.0, "phases": {}})
            line["cells"] += cells
            line["wall_s"] += secs
            parts = split.get(owner, {}) if split is not None else {"unsplit": secs}
            for ph, s in parts.items():
                line["phases"][ph] = line["phases"].get(ph, 0.0) + float(s)
    out = []
    for stage, owners in table.items():
        for owner, line in sorted(owners.items(), key=lambda kv: -kv[1]["wall_s"]):
            out.append({"stage": stage, "owner": owner, **line})
        booked = sum(line["wall_s"] for line in owners.values())
        t = totals[stage]
        out.append({"stage": stage, "owner": "(all)", "cells": t["cells"], "wall_s": t["wall_s"],
                    "phases": {"unbooked": max(t["wall_s"] - booked, 0.0)}, "records": t["records"]})
    return out


def format_phase_table(lines: list[dict]) -> str:
    """phase_table's lines as one Markdown table: a column per phase that holds any time (PHASES' order, then
    `unsplit` and `unbooked`), seconds to 0.1 s, '' where an owner has none of it."""
    used = {ph for line in lines for ph, s in line["phases"].items() if s > 0}
    cols = [p for p in PHASES if p in used] + [p for p in ("unsplit", "unbooked") if p in used]
    head = ["stage", "path or shared work", "cells", "wall s"] + cols
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in lines:
        label = line["owner"] if line["owner"] != "(all)" else f"(all: {line['records']} record(s))"
        cells = [line["stage"], label, str(line["cells"] or ""), f"{line['wall_s']:.1f}"]
        cells += [f"{line['phases'][c]:.1f}" if line["phases"].get(c, 0) > 0 else "" for c in cols]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def git_commit() -> str:
    """This checkout's commit (12 hex digits, "+dirty" with uncommitted changes to tracked files), or the
    ONELA_GIT_COMMIT environment variable where it is set (a copy of the tree without .git, e.g. a GPU host)."""
    if os.environ.get("ONELA_GIT_COMMIT"):
        return os.environ["ONELA_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10)
        commit = out.stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


SOURCE_DIRS = ("artifact", "kernels", "baselines", "sweeps")
_ROOT = Path(__file__).resolve().parent.parent


def _digest(items) -> str:
    h = hashlib.sha256()
    for path, data in items:
        h.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def source_digest(root: str | os.PathLike = _ROOT) -> str:
    """sha256 over the project's Python sources as they are on disk (path and bytes of every *.py under
    SOURCE_DIRS, sorted): the code that produced a record. GPU machines get a copy of the tree without .git, so
    their git_commit is whatever ONELA_GIT_COMMIT says; `python -m artifact.results verify ENV.json` checks it
    against this digest (a typed or stale hash, or uncommitted code, shows up as a mismatch)."""
    root = Path(root)
    files = sorted(p.relative_to(root).as_posix() for d in SOURCE_DIRS for p in (root / d).rglob("*.py"))
    return _digest((f, (root / f).read_bytes()) for f in files)


def source_digest_at(commit: str, root: str | os.PathLike = _ROOT) -> str:
    """source_digest of the tree committed as `commit` (read from git, not the working tree)."""
    def git(*args) -> bytes:
        return subprocess.run(["git", *args], capture_output=True, check=True, cwd=root, timeout=60).stdout
    names = git("ls-tree", "-r", "--name-only", commit, "--", *SOURCE_DIRS).decode().splitlines()
    files = sorted(n for n in names if n.endswith(".py"))
    return _digest((f, git("show", f"{commit}:{f}")) for f in files)


VERDICTS = ("ok", "side", "unchecked", "MISMATCH", "UNREADABLE", "ORPHAN")


def verify_env(path: str | os.PathLike, root: str | os.PathLike = _ROOT) -> tuple[str, str]:
    """(verdict, message) for one file of results/env/:
    ok          an env record whose source_sha256 matches the sources of its git_commit
    MISMATCH    it does not (a mistyped ONELA_GIT_COMMIT, or uncommitted changes)
    unchecked   it cannot be checked here: no source_sha256 (written before the digest existed), or a
                git_commit this clone does not hold (unknown, fake, or removed from history)
    side        a run's side file (RUN.wall.json, RUN.traffic.json) beside its run's env record RUN.json
    ORPHAN      a side file with no env record beside it
    UNREADABLE  not a JSON object (missing, empty -- as a full disk leaves it --, or cut short)"""
    path = Path(path)
    try:
        rec = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return "UNREADABLE", f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
    if not isinstance(rec, dict):
        return "UNREADABLE", f"a JSON {type(rec).__name__}, not an object"
    if path.name.count(".") > 1 and "git_commit" not in rec:      # RUN.wall.json, RUN.traffic.json
        run = path.name.split(".", 1)[0]
        if (path.parent / f"{run}.json").is_file():
            return "side", f"a side file of {run}.json, which carries the commit (checked on its own)"
        return "ORPHAN", f"a side file whose env record {run}.json is not beside it"
    commit, digest = str(rec.get("git_commit", "")).split("+")[0], rec.get("source_sha256")
    if not digest:
        return "unchecked", "no source_sha256 (an env record written before the digest existed)"
    if not commit or commit == "unknown":
        return "unchecked", f"git_commit {rec.get('git_commit')!r} names no commit"
    try:
        want = source_digest_at(commit, root)
    except (OSError, subprocess.SubprocessError) as e:
        err = getattr(e, "stderr", b"") or b""
        why = err.decode(errors="replace") if isinstance(err, bytes) else str(err)
        return "unchecked", f"commit {commit!r} is not in this clone: {' '.join((why or str(e)).split())[:120]}"
    if want == digest:
        return "ok", f"sources match {commit[:12]}"
    return "MISMATCH", (f"sources do NOT match git_commit {commit[:12]}: the run's code differs from that commit "
                        "(a mistyped ONELA_GIT_COMMIT, or uncommitted changes)")


USAGE = """usage:
  python -m artifact.results verify [--allow-unchecked] ENV.json [ENV.json ...]
      check each env record's sources against its commit; exit 0 when every file is ok (or a side file beside
      its record, or, with --allow-unchecked, a record that cannot be checked here), 1 otherwise
  python -m artifact.results repair TABLE.csv [TABLE.csv ...]
      move a results table's refused lines (and a torn last line) to TABLE.csv.refused, keep its valid rows
  python -m artifact.results phases WALL.json|DIR [...]
      where the runs' time went: one Markdown table per stage (suite), path or shared work, and phase (PHASES),
      summed over the wall records given (a folder: its *.wall.json, or its env/'s)"""


def main(argv: list[str] | None = None) -> int:
    """`python -m artifact.results verify|repair ...` (USAGE). Exit 0 / 1 as USAGE says; 2 on bad usage."""
    import sys
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd, args = (argv[0], argv[1:]) if argv else ("", [])
    flags = [a for a in args if a.startswith("-")]
    files = [a for a in args if not a.startswith("-")]
    allowed = {"verify": {"--allow-unchecked"}, "repair": set(), "phases": set()}
    if cmd not in allowed or not files or set(flags) - allowed[cmd]:
        why = (f"unknown command {cmd!r}" if cmd not in allowed else "no file given" if not files
               else f"unknown option(s) {sorted(set(flags) - allowed[cmd])}")
        print(f"{why}\n{USAGE}", file=sys.stderr)
        return 2
    if cmd == "phases":
        try:
            records = [read_wall_file(f) for f in wall_files(files)]
        except ResultsFileError as e:
            print(f"[phases] {e}", file=sys.stderr)
            return 1
        print(format_phase_table(phase_table(records)))
        return 0
    if cmd == "repair":
        code = 0
        for f in files:
            try:
                done = repair_table(f)
            except ResultsFileError as e:
                print(f"[repair] {e}", file=sys.stderr)
                code = 1
                continue
            if not done["moved"]:
                print(f"[repair] {f}: every line is a valid row ({done['kept']}); nothing to repair")
                continue
            print(f"[repair] {f}: kept {done['kept']} row(s); moved {len(done['moved'])} line(s) to "
                  f"{done['refused_file']}; run the suite again to measure their cells:")
            for line, why in done["moved"]:
                print(f"  line {line}: {why}")
        return code
    allow = "--allow-unchecked" in flags
    counts = dict.fromkeys(VERDICTS, 0)
    for f in files:
        verdict, msg = verify_env(f)
        counts[verdict] += 1
        print(f"{verdict}  {f}: {msg}")
    failing = ("MISMATCH", "UNREADABLE", "ORPHAN") + (() if allow else ("unchecked",))
    bad = sum(counts[v] for v in failing)
    print(f"[verify] {len(files)} file(s): " + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
          + ("" if not counts["unchecked"] else " (allowed by --allow-unchecked)" if allow else
             "; an unchecked record fails: pass --allow-unchecked to accept records that cannot be checked here"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
