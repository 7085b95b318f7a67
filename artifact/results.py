"""Results I/O (docs/design.md §6): tidy CSV rows appended and flushed per cell, an env record per run.

One schema for every suite, so files never become a sparse union of columns. A row is keyed by its
`config_hash` (everything that defines the cell, nothing measured); a re-run skips hashes already present.
`run_id` names the env record (results/env/<run_id>.json) of the run that produced the row.
"""
from __future__ import annotations

import csv
import datetime
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

COLUMNS = [
    "suite", "path", "geometry", "R", "W", "T", "O", "HK", "HV", "K", "V", "prompt_len", "lineage", "seed",
    "status", "reason", "latency_ms", "p20_ms", "p80_ms", "floor_ms", "floor_bound", "timer",
    "persistent_bytes", "written_bytes", "dram_read_bytes", "dram_write_bytes", "flops", "compulsory_bytes",
    "max_abs_err", "tolerance", "config_hash", "run_id", "git_commit",
]
STATUSES = ("ok", "skipped", "failed")

# Fields that define a cell (hashed); measured fields never enter the hash.
KEY_FIELDS = ("suite", "path", "geometry", "R", "W", "T", "HK", "HV", "K", "V", "prompt_len", "lineage", "seed")


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


def append_row(csv_path: str | os.PathLike, row: dict) -> None:
    """Append one row and flush it to disk, so a killed sweep loses no finished cell."""
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise ValueError(f"append_row: unknown columns {sorted(unknown)}")
    if row.get("status") not in STATUSES:
        raise ValueError(f"append_row: status must be one of {STATUSES}, got {row.get('status')!r}")
    csv_path = Path(csv_path)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    new = not csv_path.exists() or csv_path.stat().st_size == 0
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="raise")
        if new:
            w.writeheader()
        w.writerow({c: row.get(c, "") for c in COLUMNS})
        f.flush()
        os.fsync(f.fileno())


def finished_hashes(csv_path: str | os.PathLike) -> set[str]:
    """Config hashes already recorded (any status), tolerating a torn last line from a killed run."""
    csv_path = Path(csv_path)
    if not csv_path.exists():
        return set()
    out = set()
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            h = row.get("config_hash")
            if h and row.get("status") in STATUSES:
                out.add(h)
    return out


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


def verify_env(path: str | os.PathLike, root: str | os.PathLike = _ROOT) -> tuple[bool | None, str]:
    """(True / False / None, message): does env record `path`'s source_sha256 match its git_commit's sources?
    None when the record predates the digest or names no usable commit."""
    rec = json.loads(Path(path).read_text())
    commit, digest = str(rec.get("git_commit", "")).split("+")[0], rec.get("source_sha256")
    if Path(path).name.count(".") > 1 and "git_commit" not in rec:      # RUN.wall.json, RUN.traffic.json
        return None, "a side file of its run's env record, which carries the commit"
    if not digest:
        return None, "no source_sha256 (an env record written before the digest existed)"
    if not commit or commit == "unknown":
        return None, f"git_commit {rec.get('git_commit')!r} names no commit"
    try:
        want = source_digest_at(commit, root)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"cannot read commit {commit!r} here: {' '.join(str(e).split())[:120]}"
    if want == digest:
        return True, f"sources match {commit[:12]}"
    return False, (f"sources do NOT match git_commit {commit[:12]}: the run's code differs from that commit "
                   f"(a mistyped ONELA_GIT_COMMIT, or uncommitted changes)")


def _version(mod: str) -> str:
    try:
        from importlib.metadata import version
        return version(mod)
    except Exception:  # noqa: BLE001 - any failure means "not installed"
        return "not installed"


def env_record(extra: dict | None = None) -> dict:
    """GPU, driver, clocks, library versions and commit: what a reader needs to trust a results file."""
    import torch
    rec = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "python": platform.python_version(),
        "torch": torch.__version__, "triton": _version("triton"), "cuda": torch.version.cuda,
        "git_commit": git_commit(),
        "source_sha256": source_digest(),
        "packages": {p: _version(p) for p in ("vllm", "sglang", "flashinfer-python", "tensorrt_llm",
                                              "hydra-core", "numpy", "pandas")},
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        rec.update(gpu=p.name, gpu_count=torch.cuda.device_count(), sm_count=p.multi_processor_count,
                   gpu_memory_bytes=p.total_memory)
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
                                "clocks.max.mem,power.limit", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
            rec["nvidia_smi"] = q[0] if q else "no output"
        except (OSError, subprocess.SubprocessError) as e:
            rec["nvidia_smi"] = f"unavailable: {e}"
    else:
        rec["gpu"] = "none (CPU; Triton interpreter)"
    rec.update(extra or {})
    return rec


def write_env(path: str | os.PathLike, extra: dict | None = None) -> dict:
    rec = env_record(extra)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(rec, indent=2, default=str) + "\n")
    return rec


def main(argv: list[str] | None = None) -> int:
    """`python -m artifact.results verify ENV.json [...]`: check each env record's sources against its commit."""
    import sys
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] != "verify":
        print("usage: python -m artifact.results verify ENV.json [ENV.json ...]", file=sys.stderr)
        return 2
    bad = 0
    for p in argv[1:]:
        ok, msg = verify_env(p)
        bad += ok is False
        print(f"{'ok' if ok else 'MISMATCH' if ok is False else 'unchecked'}  {p}: {msg}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
