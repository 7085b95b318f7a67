"""DRAM traffic and arithmetic intensity of each path (paper §4.4, Fig 8c; docs/design.md §5): the `traffic`
suite's runner.

For every cell, a fresh child process (`python -m sweeps.suites.traffic_child`) runs the path's whole T-step
run() once, eagerly, after prepare, warm-up and the FP32 FullState check, and a *method* reads the DRAM counters
dram__bytes_read.sum / dram__bytes_write.sum over it. Methods are tried in order until one has measured the
whole run; the row names the method that produced its numbers and every earlier attempt's failure:

  ncu-kernel         Nsight Compute, kernel replay: one counter result per kernel, summed
  ncu-kernel-retry   the same in a new process ("Failed to prepare kernel for profiling" is intermittent)
  ncu-app-range      Nsight Compute application range replay: counters over the whole run, no per-kernel
                     preparation (and memcpys inside the range are counted by the hardware)
  ncu-range          Nsight Compute in-process range replay (same, API capture instead of re-running)
  ncu-application    Nsight Compute, per kernel, application replay instead of kernel replay
  pm-sampling        CUPTI PM sampling through cupti-python: device-wide counters over the run's time window
  torch-profiler     torch.profiler's experimental per-kernel CUPTI metrics (inactive in some torch builds)
  (ncu-kernel-cache-all is opt-in: ncu's default cache flush loses each kernel's dirty L2 residue)

Cache policy (all methods): caches are not flushed between kernels (--cache-control none), so the sum is the
traffic of the run as it happens. Before the run, a clean read of a 4xL2 buffer empties L2 without leaving dirty
lines; after it, a second clean read (the drain, its own range) evicts what the run left dirty, and those write-
backs count as the run's writes; the drain's reads do not count. A census child (torch.profiler trace, no counters)
lists the kernels and copies of one run: a per-kernel result must have measured exactly those kernels, and
memcpy/memset bytes, which per-kernel profiling cannot see, are added from their sizes (the reason says so). Before
the first cell, one discarded child runs it under the first method (`prime`: a fresh machine's first profiled
process counts extra writes). Each method is calibrated once per run on a kernel copy of known size (1 GiB, and 16
MiB that fits in L2 so its writes are seen only through the drain): measured/expected goes into the reason and
results/env/<run_id>.traffic.json. Per-kernel bytes of every cell: results/traffic/<run_id>/.

FLOPs: the child counts them (traffic_child.path_flops: the path's cost model, artifact.cost, the count every
floor uses). Arithmetic intensity = flops / (dram_read_bytes +
dram_write_bytes). This module takes the names both sides share (the metrics, the drain kernel's name) from
the child's module; the child imports nothing from here.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from artifact.measure import untimed
from sweeps.context import phase_clock

# The counters the child collects, and the name of its L2 drain kernel (`traffic_child._l2_read_kernel`), by which
# the runner tells the drain from the run's kernels. Defined here, not in the child: this module is imported with
# the sweep's configs, before a CPU run sets TRITON_INTERPRET, and so must not import triton.
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
DRAIN_KERNEL = "_l2_read_kernel"

CALIBRATION = "(counter calibration)"      # the wall record's label of the priming and calibration children
REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_MODULE = "sweeps.suites.traffic_child"


# ---------------------------------------------------------------- Nsight Compute output

_BYTE_UNITS = {"byte": 1, "bytes": 1, "b": 1, "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9,
               "gb": 1e9, "tbyte": 1e12, "tb": 1e12, "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3}


def to_bytes(value: str, unit: str) -> float | None:
    """An ncu metric value in bytes (ncu prints '1,234,567' and SI-scaled units unless --print-units base);
    None for 'n/a' or an empty cell. An unknown unit raises: a mis-scaled number must never pass."""
    v = (value or "").strip().replace(",", "")
    if v.lower() in ("", "n/a", "nan", "(!) n/a"):
        return None
    u = (unit or "byte").strip().lower()
    if u not in _BYTE_UNITS:
        raise ValueError(f"unknown byte unit {unit!r} in ncu output")
    return float(v) * _BYTE_UNITS[u]


@dataclass
class NcuResult:
    """One profiled result: a kernel (kernel / application replay) or a range (range replays)."""

    id: int
    name: str
    read: float | None = None
    write: float | None = None


@dataclass
class NcuOutput:
    results: list[NcuResult]
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)     # names ncu said it could not profile
    passes: list[int] = field(default_factory=list)


_FAILED = re.compile(r'Failed to profile (?:kernel |range )?"([^"]*)"')
_PASSES = re.compile(r'==PROF== Profiling "[^"]*".*?(\d+) pass')


def _csv_block(lines: list[str]) -> list[str]:
    for i, line in enumerate(lines):
        if line.lstrip().startswith('"ID"'):
            return [ln for ln in lines[i:] if ln.lstrip().startswith('"')]
    return []


def parse_ncu_output(text: str) -> NcuOutput:
    """Parse what `ncu --csv --log-file F` writes: ==PROF==/==ERROR==/==WARNING== lines and one CSV table, in
    the details layout (one row per result and metric) or the raw layout (one row per result, a column per
    metric, a units row under the header)."""
    lines = text.splitlines()
    out = NcuOutput(results=[])
    for line in lines:
        s = line.strip()
        if s.startswith("==ERROR=="):
            out.errors.append(s[len("==ERROR=="):].strip())
            m = _FAILED.search(s)
            if m:
                out.failed.append(m.group(1))
        elif s.startswith("==WARNING=="):
            out.warnings.append(s[len("==WARNING=="):].strip())
        elif s.startswith("==PROF=="):
            m = _PASSES.search(s)
            if m:
                out.passes.append(int(m.group(1)))
    rows = list(csv.reader(io.StringIO("\n".join(_csv_block(lines)))))
    if not rows:
        return out
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}
    name_col = next((col[c] for c in ("Kernel Name", "Range Name", "Name", "Function Name") if c in col), None)
    by_id: dict[int, NcuResult] = {}

    def result(row) -> NcuResult:
        rid = int(row[col["ID"]].replace(",", ""))
        if rid not in by_id:
            by_id[rid] = NcuResult(rid, row[name_col] if name_col is not None else f"result {rid}")
        return by_id[rid]

    if "Metric Name" in col:
        for row in rows[1:]:
            if len(row) < len(header) or row[col["Metric Name"]] not in METRICS:
                continue
            value = to_bytes(row[col["Metric Value"]], row[col["Metric Unit"]] if "Metric Unit" in col else "byte")
            setattr(result(row), "read" if row[col["Metric Name"]] == METRICS[0] else "write", value)
    else:
        units = None
        for row in rows[1:]:
            if len(row) < len(header):
                continue
            if not row[col["ID"]].strip():
                units = row
                continue
            r = result(row)
            for metric, attr in zip(METRICS, ("read", "write")):
                if metric in col:
                    unit = units[col[metric]] if units else "byte"
                    setattr(r, attr, to_bytes(row[col[metric]], unit))
    out.results = [by_id[k] for k in sorted(by_id)]
    return out


# ---------------------------------------------------------------- attempts and their outcomes

@dataclass(frozen=True)
class Attempt:
    name: str
    method: str                   # ncu | pm_sampling | torch_profiler
    ncu_flags: tuple = ()
    per_kernel: bool = True       # one result per kernel (drain found by name) or per range (drain = 2nd)
    about: str = ""


# Kernel and application replays profile only inside cudaProfilerStart/Stop with --profile-from-start off;
# range replays take their ranges from those calls themselves and refuse the flag ("==ERROR== Option
# profile-from-start is not supported during range replay", ncu on the H200).
_IN_RANGES = ("--profile-from-start", "off")
_KERNEL = (*_IN_RANGES, "--replay-mode", "kernel", "--cache-control", "none")
ATTEMPTS = {a.name: a for a in (
    Attempt("ncu-kernel", "ncu", _KERNEL, True, "Nsight Compute kernel replay, per-kernel counters summed"),
    Attempt("ncu-kernel-retry", "ncu", _KERNEL, True, "Nsight Compute kernel replay, second fresh process"),
    Attempt("ncu-app-range", "ncu", ("--replay-mode", "app-range", "--cache-control", "none"), False,
            "Nsight Compute application range replay, counters over the whole run"),
    Attempt("ncu-range", "ncu", ("--replay-mode", "range", "--cache-control", "none"), False,
            "Nsight Compute range replay, counters over the whole run"),
    Attempt("ncu-application", "ncu", (*_IN_RANGES, "--replay-mode", "application", "--cache-control", "none"),
            True, "Nsight Compute application replay, per-kernel counters summed"),
    Attempt("ncu-kernel-cache-all", "ncu", (*_IN_RANGES, "--replay-mode", "kernel", "--cache-control", "all"),
            True, "Nsight Compute kernel replay with caches flushed before each kernel: writes are a lower bound"),
    Attempt("pm-sampling", "pm_sampling", (), False, "CUPTI PM sampling (cupti-python) over the run's window"),
    Attempt("torch-profiler", "torch_profiler", (), True, "torch.profiler CUPTI metrics per kernel"),
)}
DEFAULT_LADDER = ("ncu-kernel", "ncu-kernel-retry", "ncu-app-range", "ncu-range", "ncu-application",
                  "pm-sampling", "torch-profiler")


@dataclass
class Outcome:
    status: str                   # ok | failed | skipped
    read: float = math.nan
    write: float = math.nan
    kernels: int | None = None
    message: str = ""             # why it failed, or notes on an ok result
    child: dict = field(default_factory=dict)
    detail: dict = field(default_factory=dict)
    final: bool = False           # a failure no other method can fix (the path itself failed)


def _copy_bytes(census: dict | None) -> tuple[float, float, str]:
    """Device-memory bytes of the memcpys/memsets in a census (read, written), from their sizes."""
    if not census or not census.get("copies"):
        return 0.0, 0.0, ""
    r = w = 0.0
    for c in census["copies"]:
        n, name = float(c.get("bytes", 0)), c.get("name", "").lower()
        if "memset" in name or "htod" in name:
            w += n
        elif "dtoh" in name:
            r += n
        else:                     # DtoD, PtoP, unknown: read and written on this device
            r, w = r + n, w + n
    return r, w, f"+{len(census['copies'])} memcpy/memset ({r:.0f} B read, {w:.0f} B written) from their sizes"


def per_kernel_outcome(entries: list[tuple[str, float | None, float | None]], census: dict | None) -> Outcome:
    """Sum per-kernel counters: reads of the run's kernels, writes of the run's kernels plus the drain's."""
    missing = [n for n, r, w in entries if r is None or w is None or math.isnan(r) or math.isnan(w)]
    if missing:
        return Outcome("failed", message=f"no counter values for {len(missing)} kernel(s): {missing[:4]}")
    run = [(n, r, w) for n, r, w in entries if DRAIN_KERNEL not in n]
    drain = [(n, r, w) for n, r, w in entries if DRAIN_KERNEL in n]
    if not drain:
        return Outcome("failed", message="the drain kernel was not measured, so dirty L2 residue is unaccounted")
    if census is not None and len(run) != len(census.get("kernels", [])):
        return Outcome("failed", message=f"measured {len(run)} kernels but one run launches "
                                         f"{len(census.get('kernels', []))} (census)")
    cr, cw, note = _copy_bytes(census)
    read = sum(r for _, r, _ in run) + cr
    write = sum(w for _, _, w in run) + sum(w for _, _, w in drain) + cw
    detail = {"per_kernel": [{"name": n, "read": r, "write": w} for n, r, w in entries]}
    return Outcome("ok", read, write, kernels=len(run), message=note, detail=detail)


def ncu_outcome(attempt: Attempt, out: NcuOutput, census: dict | None) -> Outcome:
    broken = [e for e in out.errors if "fail" in e.lower() or "error occurred" in e.lower()]
    if out.failed or broken or (out.errors and not out.results):
        what = f"could not profile {sorted(set(out.failed))}" if out.failed else "profiled nothing"
        return Outcome("failed", message=f"ncu {what}: {' | '.join(dict.fromkeys(out.errors))[:300]}")
    if attempt.per_kernel:
        o = per_kernel_outcome([(r.name, r.read, r.write) for r in out.results], census)
    else:
        if len(out.results) != 2 or any(r.read is None or r.write is None for r in out.results):
            return Outcome("failed", message=f"expected 2 measured ranges (run, drain), got {len(out.results)}")
        run, drain = out.results
        o = Outcome("ok", run.read, run.write + drain.write, message="",
                    detail={"ranges": [r.__dict__ for r in out.results]})
    if o.status == "ok" and any(p > 1 for p in out.passes):
        o.message = (o.message + f"; ncu needed up to {max(out.passes)} passes").strip("; ")
    return o


# ---------------------------------------------------------------- running children

@dataclass
class TrafficOptions:
    """The traffic suite's settings (`traffic:` in a sweep config, when the schema has it)."""

    ladder: tuple = DEFAULT_LADDER
    ncu: str = "ncu"
    timeout_s: int = 300
    census: bool = True
    check: bool = True
    calibrate_bytes: tuple = (1 << 30, 16 << 20)
    pm_interval_ns: int = 20000


def options_from_cfg(cfg) -> TrafficOptions:
    node = None
    try:
        node = cfg.get("traffic") if cfg is not None else None
    except Exception:  # noqa: BLE001 - a struct config without the key
        node = None
    opts = TrafficOptions()
    for f in fields(TrafficOptions):
        if node is not None and f.name in node and node[f.name] is not None:
            val = node[f.name]
            setattr(opts, f.name, tuple(val) if isinstance(getattr(opts, f.name), tuple) else val)
    unknown = [n for n in opts.ladder if n not in ATTEMPTS]
    if unknown:
        raise ValueError(f"traffic.ladder: unknown attempts {unknown}; known: {', '.join(ATTEMPTS)}")
    return opts


def child_argv(target_args: list[str], method: str, out: Path, opts: TrafficOptions, device: str | None) -> list[str]:
    argv = [sys.executable, "-m", CHILD_MODULE, *target_args, "--method", method, "--out", str(out),
            "--pm-interval-ns", str(opts.pm_interval_ns)]
    if device:
        argv += ["--device", device]
    if not opts.check:
        argv.append("--no-check")
    return argv


def ncu_argv(ncu: str, attempt: Attempt, log: Path) -> list[str]:
    return [ncu, "--clock-control", "none", *attempt.ncu_flags,
            "--metrics", ",".join(METRICS), "--csv", "--page", "details", "--print-units", "base",
            "--log-file", str(log)]


def _tail(text: str, n: int = 400) -> str:
    return " ".join(text.split())[-n:]


def run_attempt(attempt: Attempt, target_args: list[str], opts: TrafficOptions, workdir: Path,
                census: dict | None, device: str | None = None) -> Outcome:
    """One child under one method; a failure of any kind comes back as an Outcome, never an exception."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        out, log = Path(tmp) / "child.json", Path(tmp) / "ncu.log"
        argv = child_argv(target_args, attempt.method, out, opts, device)
        if attempt.method == "ncu":
            exe = shutil.which(opts.ncu)
            if exe is None:
                return Outcome("failed", message=f"{opts.ncu!r} not found on PATH")
            argv = ncu_argv(exe, attempt, log) + argv
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=opts.timeout_s, cwd=REPO_ROOT)
        except subprocess.TimeoutExpired:
            return Outcome("failed", message=f"timed out after {opts.timeout_s} s")
        if not out.exists():
            extra = _tail(log.read_text(errors="replace")) if log.exists() else ""
            return Outcome("failed", message=f"child wrote no result (rc={proc.returncode}): "   # ncu says why
                                             f"{_tail(proc.stderr)} {_tail(proc.stdout)} {extra}".strip())
        child = json.loads(out.read_text())
        if attempt.method == "ncu" and child.get("free_bytes_at_region") is not None:
            free_note = f" (GPU memory free at the region: {child['free_bytes_at_region'] / 2**30:.1f} GiB)"
        else:
            free_note = ""
        if child.get("status") != "ok":
            return Outcome(child.get("status", "failed"), message=child.get("reason", ""), child=child,
                           final=child.get("stage") == "setup" or child.get("status") == "skipped")
        if attempt.method == "ncu":
            text = log.read_text(errors="replace") if log.exists() else ""
            parsed = parse_ncu_output(text)
            if not parsed.results and not parsed.errors:      # an ncu that ignored --log-file
                text = proc.stdout + "\n" + proc.stderr
                parsed = parse_ncu_output(text)
            o = ncu_outcome(attempt, parsed, census)
            if o.status != "ok":
                o.message += free_note
            o.detail["ncu_log_tail"] = [ln for ln in text.splitlines() if ln.startswith("==")][-20:]
        elif attempt.method == "pm_sampling":
            m = child.get("measured", {})
            o = Outcome("ok", float(m["read"]), float(m["write"]), message="; ".join(m.get("notes", [])),
                        detail={"windows": m.get("windows")})
        else:
            pk = child.get("measured", {}).get("per_kernel", [])
            o = per_kernel_outcome([(e["name"], e["read"], e["write"]) for e in pk], census)
        o.child = child
        return o


def measure_with_fallback(attempts: list[Attempt], run_one) -> tuple[Outcome, Attempt | None, list[str]]:
    """Try each attempt until one measures; a skip or a failure of the path itself ends the ladder."""
    failures: list[str] = []
    for a in attempts:
        o = run_one(a)
        if o.status == "ok":
            return o, a, failures
        if o.status == "skipped" or o.final:
            return o, a, failures
        failures.append(f"{a.name}: {o.message[:240]}")
    return Outcome("failed", message="no method measured the run: " + " || ".join(failures)), None, failures


def calibrate(attempt: Attempt, opts: TrafficOptions, workdir: Path, device: str | None = None,
              run_one=None) -> dict:
    """measured / expected bytes of kernel copies of known sizes, under `attempt` (the method's check)."""
    run_one = run_one or (lambda a, args: run_attempt(a, args, opts, workdir, None, device))
    sizes = {}
    for n in opts.calibrate_bytes:
        o = run_one(attempt, ["--target", "copy", "--nbytes", str(int(n))])
        exp_r, exp_w = o.child.get("expected_read", n), o.child.get("expected_write", n)
        sizes[str(int(n))] = {"status": o.status, "message": o.message,
                              "read_ratio": o.read / exp_r if o.status == "ok" else math.nan,
                              "write_ratio": o.write / exp_w if o.status == "ok" else math.nan}
    return {"attempt": attempt.name, "about": attempt.about, "sizes": sizes}


def calibration_note(cal: dict) -> str:
    parts = []
    for n, s in cal["sizes"].items():
        size = f"{int(n) / 2**30:g}GiB" if int(n) >= 2**30 else f"{int(n) / 2**20:g}MiB"
        parts.append(f"{size} r/w {s['read_ratio']:.3f}/{s['write_ratio']:.3f}" if s["status"] == "ok"
                     else f"{size} failed")
    return "calib copy " + ", ".join(parts)


# ---------------------------------------------------------------- the suite runner

def _census(cell_args, opts, workdir, device) -> tuple[dict | None, Outcome | None]:
    """The kernels and copies of one run (None if the census itself failed; an Outcome if the path can't run).
    The census child skips the FP32 check: the measuring child gates the same run, and the census lists the
    region's kernels, which the check (before the region) does not change."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        out = Path(tmp) / "census.json"
        argv = child_argv(cell_args, "census", out, replace(opts, check=False), device)
        try:
            subprocess.run(argv, capture_output=True, text=True, timeout=opts.timeout_s, cwd=REPO_ROOT)
        except subprocess.TimeoutExpired:
            return None, None
        if not out.exists():
            return None, None
        rec = json.loads(out.read_text())
    if rec.get("status") == "skipped" or (rec.get("status") == "failed" and rec.get("stage") == "setup"):
        return None, Outcome(rec["status"], message=rec.get("reason", ""), child=rec, final=True)
    return (rec.get("census") if rec.get("status") == "ok" else None), None


def _num(x):
    """A number for a CSV cell; '' where there is none (never a silent 0)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return ""
    return "" if math.isnan(v) else v


def _cell_target(cell: dict) -> tuple[dict, list[str]]:
    """The cell's fields a child needs, and the child's arguments that name it as its target."""
    cell_json = {k: cell.get(k) for k in ("path", "geometry", "HK", "HV", "K", "V", "R", "W", "T", "prompt_len",
                                          "lineage", "seed") if k in cell}
    cell_args = ["--target", "path", "--cell", json.dumps(cell_json, default=str)]
    if cell.get("tolerance") not in (None, ""):
        cell_args += ["--tolerance", str(cell["tolerance"])]
    return cell_json, cell_args


def prime(cell: dict, opts: TrafficOptions, workdir: Path, device: str | None = None) -> dict:
    """One discarded child: `cell` under the ladder's first method, before any row is measured. The first
    profiled process on a fresh machine counts ~9 MiB more DRAM writes than every later one (docs/methods.md
    §6); this child pays that, and its bytes go to the run's env record only, never to a row."""
    cell_json, cell_args = _cell_target(cell)
    o = run_attempt(ATTEMPTS[opts.ladder[0]], cell_args, opts, workdir, None, device)
    return {"attempt": opts.ladder[0], "cell": cell_json, "status": o.status, "message": o.message[:400],
            "dram_read_bytes": _num(o.read) if o.status == "ok" else "",
            "dram_write_bytes": _num(o.write) if o.status == "ok" else ""}


def measure_cell(cell: dict, opts: TrafficOptions, workdir: Path, calibrations: dict, device: str | None = None,
                 on_calibration=None, phase=None) -> dict:
    """The measured fields of one cell's row (status, reason, dram_*_bytes, flops, ...). `phase(name, shared=None)`
    (sweeps.context.RunContext.phase) books the census child, the counter attempts and a method's first
    calibration (under CALIBRATION: it serves every later cell) to the run's wall record."""
    phase = phase or untimed
    cell_json, cell_args = _cell_target(cell)
    with phase("census"):
        census, stop = _census(cell_args, opts, workdir, device) if opts.census else (None, None)
    ladder = [ATTEMPTS[n] for n in opts.ladder]
    if stop is not None:
        outcome, used, failures = stop, None, []
    else:
        with phase("counters"):
            outcome, used, failures = measure_with_fallback(
                ladder, lambda a: run_attempt(a, cell_args, opts, workdir, census, device))
    c = outcome.child
    row = {"status": outcome.status, "persistent_bytes": c.get("persistent_bytes", ""),
           "written_bytes": c.get("written_bytes", ""), "flops": _num(c.get("flops")),
           "compulsory_bytes": _num(c.get("compulsory_bytes")), "max_abs_err": _num(c.get("max_abs_err")),
           "timer": "", "dram_read_bytes": "", "dram_write_bytes": ""}
    gate = ""
    if c.get("tolerance") is not None and cell.get("tolerance") not in (None, ""):
        from artifact.measure import gate_note
        gate = gate_note(cell_json["path"], float(c["tolerance"]), float(cell["tolerance"]))
        row["tolerance"] = float(c["tolerance"])         # the gate applied; the reason names the run's
    if outcome.status != "ok":
        row["reason"] = "; ".join(n for n in (gate, outcome.message) if n)
    else:
        row["dram_read_bytes"], row["dram_write_bytes"] = round(outcome.read), round(outcome.write)
        if used.name not in calibrations:
            with phase("calibration", shared=CALIBRATION):
                calibrations[used.name] = calibrate(used, opts, workdir, device)
            if on_calibration:
                on_calibration(calibrations)
        notes = [gate, f"method {used.name}", f"{outcome.kernels} kernels" if outcome.kernels else "",
                 outcome.message, calibration_note(calibrations[used.name]),
                 f"flops {c.get('flops_source', '?')}",
                 "" if census is not None else
                 ("census off" if not opts.census else "census failed: kernel count unchecked")]
        if failures:
            notes.append("earlier: " + " || ".join(failures))
        row["reason"] = "; ".join(n for n in notes if n)
    row["reason"] = row["reason"][:1500]
    side = {"cell": cell_json, "attempt": used.name if used else None, "outcome": outcome.__dict__,
            "failures": failures, "census": census}
    name = cell.get("config_hash") or re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(str(v) for v in cell_json.values()))
    (workdir / f"{name}.json").write_text(json.dumps(side, indent=1, default=str))
    return row


def run_cells(cfg, cells: list[dict], ctx):
    """The traffic suite's runner (sweeps.context: run_cells(cfg, cells, ctx) yields each cell once)."""
    opts = options_from_cfg(cfg)
    workdir = (Path(ctx.results_dir) / "traffic" / ctx.run_id).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    calib_file = Path(ctx.results_dir) / "env" / f"{ctx.run_id}.traffic.json"
    calibrations: dict = {}
    priming: dict = {}

    def save(cal):
        calib_file.parent.mkdir(parents=True, exist_ok=True)
        calib_file.write_text(json.dumps({"metrics": METRICS, "ladder": list(opts.ladder), "priming": priming,
                                          "calibrations": cal}, indent=1, default=str))

    device = str(ctx.device) if ctx.on_gpu else None
    if ctx.on_gpu:
        import torch
        torch.cuda.empty_cache()          # leave the children the memory this process is not using
        if cells:
            with phase_clock(ctx)("calibration", shared=CALIBRATION):
                priming.update(prime(cells[0], opts, workdir, device))
            save(calibrations)
    for cell in cells:
        ctx.started(cell)
        row = dict(cell)
        if not ctx.on_gpu:
            row.update(status="skipped", reason="traffic needs a CUDA GPU with readable hardware counters")
        else:
            try:
                row.update(measure_cell(cell, opts, workdir, calibrations, device, on_calibration=save,
                                        phase=phase_clock(ctx)))
            except Exception as e:  # noqa: BLE001 - one broken cell must not stop the suite
                row.update(status="failed", reason=f"traffic runner: {type(e).__name__}: {e}")
        yield row


# ---------------------------------------------------------------- command line

def _cli_cell(argv) -> int:
    import argparse
    from types import SimpleNamespace
    ap = argparse.ArgumentParser(prog="python -m sweeps.suites.traffic cell")
    ap.add_argument("--path", required=True)
    ap.add_argument("--geometry", default="qwen3_5_0_8b")
    ap.add_argument("--R", type=int, default=4)
    ap.add_argument("--W", type=int, default=512)
    ap.add_argument("--T", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=None)
    ap.add_argument("--lineage", default="beam")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ladder", default=",".join(DEFAULT_LADDER))
    ap.add_argument("--results-dir", default="results/traffic_cli")
    a = ap.parse_args(argv)
    import torch
    cfg = {"traffic": {"ladder": a.ladder.split(",")}}
    ctx = SimpleNamespace(results_dir=a.results_dir, run_id="cli", device=torch.device("cuda"),
                          on_gpu=torch.cuda.is_available(), started=lambda c: None)
    cell = {"suite": "traffic", "path": a.path, "geometry": a.geometry, "R": a.R, "W": a.W, "T": a.T,
            "prompt_len": a.prompt_len, "lineage": a.lineage, "seed": a.seed}
    for row in run_cells(cfg, [cell], ctx):
        print(json.dumps(row, default=str))
    return 0


def _cli_calibrate(argv) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m sweeps.suites.traffic calibrate")
    ap.add_argument("--attempts", default="ncu-kernel,ncu-app-range")
    ap.add_argument("--sizes", default=f"{1 << 30},{16 << 20}")
    ap.add_argument("--workdir", default="results/traffic_cli")
    a = ap.parse_args(argv)
    opts = TrafficOptions(calibrate_bytes=tuple(int(s) for s in a.sizes.split(",")))
    workdir = Path(a.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    for name in a.attempts.split(","):
        print(json.dumps(calibrate(ATTEMPTS[name], opts, workdir), default=str))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {"cell": _cli_cell, "calibrate": _cli_calibrate}
    if not argv or argv[0] not in commands:
        print("usage: python -m sweeps.suites.traffic {cell|calibrate} ...  (the child: python -m "
              f"{CHILD_MODULE} ...)", file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
