"""The one entry point of every experiment: `python -m sweeps.run suite=<name> [overrides]` (sweeps/README.md).

One run: validate the config -> take the lock of its results table (one writer per table) -> check every
recorded line (artifact.results.read_table) -> enumerate this shard's cells -> drop those already recorded at
this tolerance (resume; rows recorded at another tolerance are run again) -> write the env record
results/env/<run_id>.json (with the GPU's ceilings, measured once) -> hand the remaining cells to the suite's
runner and append each row it yields, flushed, as it comes -> print a summary.

Exit status: 0 all recorded cells ok or skipped; 1 a cell failed (this run or recorded earlier), the runner
crashed or could not be loaded, or the results table holds lines that are not valid rows (named, with the
repair command); 2 a bad config or usage (also a config Hydra cannot compose); 73 another run is writing the
same results table (nothing was done); 75 stopped by `budget_min` with cells left (re-run the same command to
continue). Under -m (multirun) every job runs, and the multirun exits with the status of the first job (in job
order) that exits 1, 2 or 73, said in one line naming that job.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

import sweeps.schema  # noqa: F401 - registers the schemas and generated groups with the ConfigStore
from artifact.measure import run_tolerance, same_tolerance
from artifact.env_record import write_env
from artifact.results import (PHASES, ResultsFileError, TableBusy, append_row, check_row, drop_rows, git_commit,
                              new_run_id, read_table, repair_table, table_lock, write_rows)
from sweeps.context import RunContext, one_line, shape_label
from sweeps.runners import RunnerUnavailable, load_runner
from sweeps.spec import ConfigError, SweepSpec, check_folder, results_dir_of, shard_cells, validate

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_BUSY, EXIT_INCOMPLETE = 0, 1, 2, 73, 75
# The wall record's label of a path's phase timed after the runner's last row (none is expected: a runner's work
# for a cell comes before its row).
AFTER_LAST_ROW = "(after the last row)"
# Test hook (tests/test_sweeps.py): SIGKILL this process right after the N-th row of the run is written.
KILL_AFTER_ENV = "ONELA_SWEEP_KILL_AFTER"


# What a multirun's one-line message says of a job's exit status.
EXIT_MEANING = {EXIT_FAILED: "failed cells, a runner that crashed or could not load, or a results table with "
                             "lines that are not rows",
                EXIT_CONFIG: "a bad config", EXIT_BUSY: "another run is writing its results table"}


class SweepFailed(RuntimeError):
    """Raised at the end of a multirun job whose single run would exit 1, 2 or 73, so that Hydra's launcher marks
    the job failed; `cli` then exits with that status, in one line naming the job, instead of Hydra's
    traceback and exit 1."""

    def __init__(self, job: str, code: int):
        super().__init__(job, code)         # as args: it is pickled back from a launcher's worker process
        self.job, self.code = job, code

    def __str__(self) -> str:
        return f"multirun job {self.job}: exit {self.code}, {EXIT_MEANING.get(self.code, 'failed')}"


def pin_visible_gpu(gpu: int) -> str:
    """Make physical GPU `gpu` this process's only visible device (CUDA_VISIBLE_DEVICES), before CUDA starts.

    One job per GPU then cannot touch another job's GPU, also through a framework kernel that assumes device 0.
    An existing CUDA_VISIBLE_DEVICES list is indexed, so a launcher given GPUs "4,5" pins job 1 to GPU 5.
    Returns the list as it was ("" if unset)."""
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible and gpu >= len(visible):
        raise ConfigError(f"config key hardware.gpu={gpu!r}: CUDA_VISIBLE_DEVICES={','.join(visible)!r} "
                          f"has {len(visible)} GPU(s)")
    before = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[gpu].strip() if visible else str(gpu)
    os.environ["ONELA_PINNED_GPU"] = str(gpu)
    return before


def resolve_device(hw) -> "torch.device":
    """The run's device. hardware.gpu=i pins physical GPU i through CUDA_VISIBLE_DEVICES *before* anything
    asks CUDA for its devices (torch.cuda.is_available() starts the driver, which then ignores a later
    change); if CUDA had already started in this process the pin cannot take, and GPU i is selected by index
    instead. os.environ["ONELA_GPU_PINNING"] says which happened (the env record keeps it)."""
    import torch
    before = pin_visible_gpu(hw.gpu) if hw.gpu is not None and hw.device != "cpu" else None
    want = hw.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cpu":
        # Triton kernels must run under the interpreter on a CPU host; set before anything imports triton.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"config key hardware.device={hw.device!r}: no CUDA GPU on this host")
    n = torch.cuda.device_count()
    if hw.gpu is None:
        idx = torch.cuda.current_device()
    elif n == 1 and os.environ.get("ONELA_PINNED_GPU") == str(hw.gpu):
        idx = 0                                   # the only visible device is the assigned one
        os.environ["ONELA_GPU_PINNING"] = "CUDA_VISIBLE_DEVICES"
    else:
        idx = hw.gpu                              # CUDA started before the pin: select by index
        if before:                                # and child processes see what this one sees
            os.environ["CUDA_VISIBLE_DEVICES"] = before
        else:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        os.environ["ONELA_GPU_PINNING"] = "torch.cuda.set_device (CUDA had started before the pin)"
    if idx >= n:
        raise ConfigError(f"config key hardware.gpu={hw.gpu!r}: this host has {n} GPU(s)")
    torch.cuda.set_device(idx)
    name = torch.cuda.get_device_name(idx)
    if hw.expect_gpu and hw.expect_gpu not in name:
        raise ConfigError(f"config key hardware.expect_gpu={hw.expect_gpu!r}: GPU {idx} is {name!r}")
    return torch.device("cuda", idx)


def _gpu_uuid(device) -> str | None:
    """The physical GPU's UUID, so two shards' env records prove they ran on different GPUs."""
    if device.type != "cuda":
        return None
    import torch
    return str(getattr(torch.cuda.get_device_properties(device), "uuid", "")) or None


def _recorded(spec: SweepSpec, out_csv: Path, results_dir: Path) -> dict[str, dict]:
    """Rows already recorded for this suite: this run's file, and the merged file when sharded. Every line must
    be a valid row (ResultsFileError naming the rest, with the repair command)."""
    files = [out_csv] + ([results_dir / f"{spec.suite}.csv"] if spec.sharded else [])
    return {r["config_hash"]: r for p in files for r in read_table(p).whole()}


def _other_tolerance(rows, selected: set[str], tolerance: float) -> list[dict]:
    """The rows of selected cells recorded by a run at a tolerance other than this run's (a row's `tolerance` is
    the gate applied to it; a path held to its own looser gate names the run's in its reason)."""
    return [r for r in rows if r["config_hash"] in selected and not same_tolerance(run_tolerance(r), tolerance)]


def run_sweep(cfg: DictConfig) -> int:
    """Run (or resume) one sweep; return the exit status (see module docstring)."""
    try:
        spec = validate(cfg)
        device = resolve_device(cfg.hardware)
        results_dir = results_dir_of(cfg, device.type)
        check_folder("results_dir", results_dir, cfg.results_dir or str(results_dir))
    except ConfigError as e:
        print(f"[sweeps] bad config: {e}", file=sys.stderr)
        return EXIT_CONFIG
    out_csv = spec.csv_path(results_dir)
    try:
        with contextlib.ExitStack() as locks:
            # Before anything reads or repairs the table: a second writer's torn-tail repair would cut the
            # first writer's line in the middle of its write.
            locks.enter_context(table_lock(out_csv))
            if spec.sharded:          # the shards read the merged table: no merge may rewrite it meanwhile
                locks.enter_context(table_lock(results_dir / f"{spec.suite}.csv", shared=True))
            return _run_locked(cfg, spec, device, results_dir, out_csv)
    except TableBusy as e:
        print(f"[sweeps] {e}", file=sys.stderr)
        return EXIT_BUSY


def _run_locked(cfg, spec: SweepSpec, device, results_dir: Path, out_csv: Path) -> int:
    cells = shard_cells(spec, device)
    selected = {c["config_hash"] for c in cells}
    try:
        cut = repair_table(out_csv, torn_only=True, held=True)
        if cut["moved"]:
            print(f"[sweeps] {out_csv}: moved a torn last line left by a killed run to {cut['refused_file']}",
                  file=sys.stderr)
        own = read_table(out_csv).whole()
        if cfg.redo:
            n = drop_rows(out_csv, selected, tuple(cfg.redo))
            print(f"[sweeps] redo={list(cfg.redo)}: removed {n} recorded row(s) to run them again")
            own = read_table(out_csv).whole()
        regate = _other_tolerance(own, selected, spec.tolerance)
        if regate:
            # The tolerance is not in config_hash (committed rows keep their hash): a row gated at another
            # tolerance is not this cell's answer, so it is measured again, never skipped as recorded.
            was = sorted({r["tolerance"] for r in regate})
            gone = {r["config_hash"] for r in regate}
            write_rows(out_csv, [r for r in own if r["config_hash"] not in gone])
            print(f"[sweeps] tolerance={spec.tolerance:g}: {len(regate)} recorded row(s) of the selected cells "
                  f"were gated at tolerance {', '.join(was)}; removed them, running those cells again at "
                  f"{spec.tolerance:g}", file=sys.stderr)
        recorded = _recorded(spec, out_csv, results_dir)
    except ResultsFileError as e:
        print(f"[sweeps] {e}", file=sys.stderr)
        return EXIT_FAILED
    if spec.sharded:
        elsewhere = _other_tolerance(recorded.values(), selected, spec.tolerance)
        if elsewhere:
            print(f"[sweeps] bad config: config key tolerance={spec.tolerance!r}: "
                  f"{results_dir / (spec.suite + '.csv')} records {len(elsewhere)} of this shard's cells at "
                  f"tolerance {', '.join(sorted({r['tolerance'] for r in elsewhere}))}; a shard does not rewrite "
                  "the merged table: run them again unsharded, or keep that tolerance", file=sys.stderr)
            return EXIT_CONFIG
    pending = [c for c in cells if c["config_hash"] not in recorded]
    print(f"[sweeps] suite={spec.suite} shard={spec.shard_index}/{spec.shard_count} device={device}: "
          f"{len(cells)} cells, {len(cells) - len(pending)} already recorded, {len(pending)} to run -> {out_csv}")
    if not pending:
        return _summary(spec, cells, recorded, {}, None, remaining=0)

    try:
        runner = load_runner(spec.runner)
    except RunnerUnavailable as e:
        print(f"[sweeps] suite {spec.suite} cannot run: {e}", file=sys.stderr)
        return EXIT_FAILED
    ctx = _make_context(cfg, spec, device, results_dir)
    new_rows, crash = _drive(cfg, runner, pending, ctx, out_csv, spec.suite)
    remaining = len([c for c in pending if c["config_hash"] not in new_rows])
    return _summary(spec, cells, recorded, new_rows, crash, remaining)


def _baseline_pack_record() -> dict | str:
    """Which framework wheels the baseline kernels load from (baselines/pack.py's manifest), by file + sha256:
    the frameworks are not pip-installed on the GPU host, so env_record's package versions cannot say it."""
    try:
        from baselines._load import pack_dir
        manifest = json.loads((pack_dir() / "MANIFEST.json").read_text())
        return {"dir": str(pack_dir()), "frameworks": [
            {"requirement": f.get("requirement"), "adapters": f.get("adapters"), "wheels": f.get("wheels")}
            for f in manifest.get("frameworks", [])]}
    except Exception as e:  # noqa: BLE001 - no pack is a fact to record, not an error
        return f"none: {type(e).__name__}: {e}"


def _make_context(cfg, spec: SweepSpec, device, results_dir: Path) -> RunContext:
    ceilings = None
    if device.type == "cuda" and cfg.hardware.measure_ceilings:
        from artifact.measure import measure_ceilings
        print("[sweeps] measuring copy bandwidth and matrix rates for the floors ...")
        ceilings = measure_ceilings()
    run_id = new_run_id(spec.suite, (spec.shard_index, spec.shard_count) if spec.sharded else None)
    commit = git_commit()
    extra = {"run_id": run_id, "suite": spec.suite, "device": str(device), "assigned_gpu": cfg.hardware.gpu,
             "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "gpu_pinning": os.environ.get("ONELA_GPU_PINNING"), "gpu_uuid": _gpu_uuid(device),
             "shard": {"index": spec.shard_index, "count": spec.shard_count}, "ceilings": ceilings,
             "timer": OmegaConf.to_container(cfg.timer), "tolerance": spec.tolerance,
             "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
             "triton_cache_autotuning": os.environ.get("TRITON_CACHE_AUTOTUNING", ""), "argv": sys.argv,
             "baseline_pack": _baseline_pack_record(),
             "config": OmegaConf.to_container(cfg, resolve=True)}
    write_env(results_dir / "env" / f"{run_id}.json", extra)
    return RunContext(device=device, ceilings=ceilings, tolerance=spec.tolerance,
                      warmup_ms=cfg.timer.warmup_ms, rep_ms=cfg.timer.rep_ms, time_it=device.type == "cuda",
                      run_id=run_id, git_commit=commit, results_dir=results_dir)


def _drive(cfg, runner, pending: list[dict], ctx: RunContext, out_csv: Path, suite: str):
    """Feed the runner, write each row as it comes; stop at budget_min. Returns (rows by hash, crash text)."""
    from tqdm import tqdm
    cells = [{**c, "run_id": ctx.run_id, "git_commit": ctx.git_commit} for c in pending]
    by_hash = {c["config_hash"]: c for c in cells}
    new_rows: dict[str, dict] = {}
    current: list[dict] = []
    bar = tqdm(total=len(cells), unit="cell", disable=not cfg.progress, dynamic_ncols=True, file=sys.stderr)

    def on_start(cell):
        current[:] = [cell]
        bar.set_postfix_str(f"{shape_label(cell)} {cell['path']}", refresh=True)

    ctx.on_start = on_start
    kill_after = int(os.environ.get(KILL_AFTER_ENV, "0") or 0)
    t_begin = time.monotonic()
    deadline = t_begin + 60 * cfg.budget_min if cfg.budget_min else None
    crash = None
    wall = Counter()                  # by path: seconds until each of its rows, less the work booked elsewhere,
                                      # plus the work booked to it by name (RunContext.phase(..., path=name))
    shared = Counter()                # seconds of work no path owns (RunContext.phase(..., shared=label)), by label
    phases: dict[str, Counter] = {}   # path or shared label -> phase -> seconds (RunContext.phase)
    t_last = t_begin

    def book(path: str | None) -> float:
        """Take the charges booked since the last row into shared, wall and phases; the row's own phases go to
        `path` (None: after the last row, where only shared and named paths' work is left), those booked to a
        named path to that path. Returns the seconds taken that are not the row's own."""
        taken, split, named = ctx.take_charges()
        for (owner, name), secs in split.items():
            if not owner and path is None:
                owner = AFTER_LAST_ROW
                taken[owner] = taken.get(owner, 0.0) + secs
            phases.setdefault(owner or path, Counter())[name] += secs
        shared.update(taken)
        wall.update(named)
        return sum(taken.values()) + sum(named.values())
    rows = runner(cfg, cells, ctx)
    try:
        for row in rows:
            h = row.get("config_hash")
            cell = by_hash.get(h)
            if cell is None or h in new_rows:
                raise RuntimeError(f"runner yielded {'a second row for' if cell else 'an unknown'} cell {h!r}")
            # a row's tolerance is the gate applied: a path's own looser gate, named with the run's in its reason
            changed = [k for k, v in cell.items() if row.get(k) != v and not (
                k == "tolerance" and same_tolerance(run_tolerance(row), float(v)))]
            if changed:
                raise RuntimeError(f"runner changed the defining fields {changed} of cell {h}")
            row["reason"] = one_line(row.get("reason", ""))
            problems = check_row(row)
            if problems:          # a row that would not read back is recorded as this cell's failure
                row = {**cell, "status": "failed",
                       "reason": one_line(f"the runner yielded an invalid row: {'; '.join(problems)}")}
            with ctx.phase("record"):
                append_row(out_csv, row)
            new_rows[h] = row
            now = time.monotonic()
            elsewhere = book(row["path"])         # shared per-shape work and other paths' own, booked apart
            wall[row["path"]] += max(now - t_last - elsewhere, 0.0)
            t_last = now
            bar.update(1)
            if kill_after and len(new_rows) >= kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            if deadline is not None and time.monotonic() > deadline and len(new_rows) < len(cells):
                print(f"\n[sweeps] budget_min={cfg.budget_min} reached; stopping", file=sys.stderr)
                break
    except Exception as e:  # noqa: BLE001 - the runner crashed: record the cell it was on, report, stop
        crash = f"{type(e).__name__}: {e}"
        if current and current[0]["config_hash"] not in new_rows:
            row = {**current[0], "status": "failed", "reason": one_line(f"runner crashed: {crash}")}
            append_row(out_csv, row)
            new_rows[row["config_hash"]] = row
    finally:
        if hasattr(rows, "close"):
            rows.close()
        bar.close()
        book(None)                                # the runner's work after its last row (a last release)
        _write_wall(ctx, suite, wall, shared, phases, time.monotonic() - t_begin, new_rows)
    return new_rows, crash


def _write_wall(ctx: RunContext, suite: str, wall: Counter, shared: Counter, phases: dict[str, Counter],
                total_s: float, new_rows: dict) -> None:
    """results/env/<run_id>.wall.json: this run's wall time and where it went, by path, plus the work no path
    owns (`shared`: a shape's workload + reference build, memory release between shapes); the README's suite
    times come from these. Run start-up (ceilings, imports) is the rest of wall_s. `phases` splits each path's
    and each shared label's seconds by phase (artifact.results.PHASES); a path's time outside its timed phases
    is its `other`, so an owner's phases add up to its wall_s (phases to the millisecond, wall_s to 0.1 s).
    `python -m artifact.results phases` prints them as a table."""
    cells = Counter(r["path"] for r in new_rows.values())
    owners = {**wall, **shared}
    split = {}
    for owner, secs in sorted(owners.items(), key=lambda kv: -kv[1]):
        parts = phases.get(owner, Counter())
        parts["other"] += max(secs - sum(v for k, v in parts.items() if k != "other"), 0.0)
        split[owner] = {ph: round(parts[ph], 3) for ph in PHASES if round(parts[ph], 3) > 0}
    rec = {"run_id": ctx.run_id, "suite": suite, "wall_s": round(total_s, 1), "cells": len(new_rows),
           "by_path": {p: {"wall_s": round(s, 1), "cells": cells[p]} for p, s in wall.most_common()},
           "shared": {k: round(s, 1) for k, s in shared.most_common()},
           "phases": split}
    path = ctx.results_dir / "env" / f"{ctx.run_id}.wall.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"[sweeps] {len(new_rows)} cells in {total_s:.0f} s; by path: "
          + ", ".join(f"{p} {s:.0f} s" for p, s in wall.most_common())
          + "".join(f", {k} {s:.0f} s" for k, s in shared.most_common()))


def _summary(spec: SweepSpec, cells: list[dict], recorded: dict, new_rows: dict, crash, remaining: int) -> int:
    """Counts over every selected cell (recorded earlier or now); the failed cells; the exit status."""
    rows = [new_rows.get(c["config_hash"]) or recorded.get(c["config_hash"]) for c in cells]
    rows = [r for r in rows if r]
    counts = Counter(r["status"] for r in rows)
    oom = sum(1 for r in rows if r["status"] == "skipped" and str(r["reason"]).startswith("out of memory"))
    print(f"\n[sweeps] {spec.suite} (shard {spec.shard_index}/{spec.shard_count}): "
          f"ok {counts['ok']}, skipped {counts['skipped']} ({oom} out of memory), failed {counts['failed']}, "
          f"not run {remaining}  [{len(new_rows)} ran now, {len(rows) - len(new_rows)} recorded earlier]")
    skip_reasons = Counter(f"{r['path']}: {r['reason']}" for r in rows if r["status"] == "skipped")
    for reason, n in sorted(skip_reasons.items()):
        print(f"  skipped x{n}  {reason[:200]}")
    for r in rows:
        if r["status"] == "failed":
            print(f"  FAILED  {r['path']:<22} {shape_label(r)}  {r['reason']}")
    if crash:
        print(f"[sweeps] the runner crashed: {crash}", file=sys.stderr)
    if counts["failed"] or crash:
        return EXIT_FAILED
    if remaining:
        print(f"[sweeps] {remaining} cell(s) not run yet: re-run the same command to continue")
        return EXIT_INCOMPLETE
    return EXIT_OK


class HydraFolderCheck(Callback):
    """Hydra callback (conf/config.yaml): Hydra's own output folder, hydra.run.dir of a run or hydra.sweep.dir of
    a multirun, naming a file (or a path under one) exits EXIT_CONFIG naming the key, before Hydra makes the
    folder (its mkdir would end in a FileExistsError or NotADirectoryError traceback and exit 1)."""

    def on_run_start(self, config, **kwargs) -> None:
        _check_hydra_folder(config, "hydra.run.dir")

    def on_multirun_start(self, config, **kwargs) -> None:
        _check_hydra_folder(config, "hydra.sweep.dir")


def _check_hydra_folder(config, key: str) -> None:
    given = OmegaConf.select(config, key)
    try:
        check_folder(key, Path(str(given)), given)
    except ConfigError as e:
        print(f"[sweeps] bad config: {e}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None       # Hydra turns a callback's exception into a warning


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> int:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    _TASK_STARTED.append(True)
    code = run_sweep(cfg)
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        if code in EXIT_MEANING:
            raise SweepFailed(f"#{hc.job.num} ({' '.join(hc.overrides.task)})", code)
        return code
    sys.exit(code)


_TASK_STARTED: list[bool] = []
# The launcher configs' Hydra plugins (conf/launcher), by the executor module each imports (a word of the plugin's
# launcher and module names): the options that need it, the plugin's requirement (pyproject.toml's `launchers`).
LAUNCHER_PACKAGES = {"submitit": ("launcher=slurm and launcher=slurm_local", "hydra-submitit-launcher==1.2.0"),
                     "joblib": ("launcher=joblib_gpus", "hydra-joblib-launcher==1.2.0")}


def _is_config_error(e: BaseException) -> bool:
    from hydra.errors import (ConfigCompositionException, MissingConfigException, OverrideParseException,
                              SearchPathException)
    from omegaconf.errors import OmegaConfBaseException
    return isinstance(e, (ConfigCompositionException, MissingConfigException, OverrideParseException,
                          SearchPathException, OmegaConfBaseException))


def _missing_launcher(e: BaseException) -> str | None:
    """What to install, where `e` says a launcher's package is missing: Hydra finds no launcher config of that
    name (its plugin is not installed), or the plugin cannot import its executor (submitit, joblib)."""
    if isinstance(e, ModuleNotFoundError):
        name = e.name or ""
        what, plugin_missing = f"no module {name!r}", name.split(".")[0] not in LAUNCHER_PACKAGES
    elif _is_config_error(e):
        m = re.search(r"Could not (?:find|load) 'hydra/launcher/(\w+)'", str(e))
        if not m:
            return None
        name, what, plugin_missing = m.group(1), f"Hydra has no launcher {m.group(1)!r}", True
    else:
        return None
    for executor, (options, plugin) in LAUNCHER_PACKAGES.items():
        if executor in name:
            package = plugin.split("==")[0] if plugin_missing else executor
            return (f"{options}: the package {package} is not installed ({what}); "
                    f"pip install -e '.[launchers]' (or pip install {plugin} {executor})")
    return None


def cli() -> None:
    """`python -m sweeps.run`: Hydra's main, with a config Hydra cannot compose (a misspelt key or option, a
    wrong type, an unparsable override) exiting EXIT_CONFIG like every other config error. Hydra reports such
    an error and exits 1 (hydra._internal.utils.run_and_report, called from two of its modules); an error of
    Hydra's or OmegaConf's config types raised before the task starts becomes EXIT_CONFIG; so does a launcher
    whose package is missing, in one line naming it and how to install it. A multirun job's SweepFailed (from
    this or a launcher's worker process; Hydra raises the first failed job's) exits with that job's status, in
    one line naming the job."""
    import hydra._internal.hydra as hydra_core
    import hydra._internal.utils as hydra_utils
    report = hydra_utils.run_and_report

    def run_and_report(func):
        raised: list[BaseException] = []

        def recorded():
            try:
                return func()
            except SweepFailed as e:
                print(f"[sweeps] {e}", file=sys.stderr)
                raise SystemExit(e.code) from None
            except Exception as e:
                missing = None if _TASK_STARTED else _missing_launcher(e)
                if missing:
                    print(f"[sweeps] {missing}", file=sys.stderr)
                    raise SystemExit(EXIT_CONFIG) from None
                raised.append(e)
                raise
        try:
            return report(recorded)
        except SystemExit as e:
            if e.code == 1 and raised and not _TASK_STARTED and _is_config_error(raised[0]):
                raise SystemExit(EXIT_CONFIG) from None
            raise
    hydra_utils.run_and_report = hydra_core.run_and_report = run_and_report
    try:
        main()
    finally:
        hydra_utils.run_and_report = hydra_core.run_and_report = report


if __name__ == "__main__":
    cli()
