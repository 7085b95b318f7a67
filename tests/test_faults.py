"""Faults a user can cause without meaning to, on CPU: two runs into one results folder killed at random points,
a gate switched off (tolerance=inf, a NaN output), rows gated at another tolerance, a '+key=' override no schema
knows, a config Hydra cannot compose. Each must leave the table whole -- every cell exactly once, every line a
valid row -- or be refused with a line naming what is wrong and the exit status sweeps/README.md documents."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module

import sweeps.schema  # noqa: F401 - registers the structured configs
from artifact.paths import DecodePath
from artifact.reference import fullstate_decode
from artifact.results import read_table, table_lock
from sweeps.run import EXIT_BUSY, EXIT_CONFIG, EXIT_FAILED, EXIT_OK, run_sweep
from sweeps.spec import ConfigError, shard_cells, validate
from sweeps.suites import operator as operator_runner

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def cfg_of(*overrides: str):
    with initialize_config_module("sweeps.conf", version_base="1.3"):
        return compose("config", overrides=list(overrides))


def start(tmp: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """`python -m sweeps.run ...` in `tmp`, started and left running; returns it and the file of its stderr."""
    e = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    n = len(list(tmp.glob("run*.err")))
    err = tmp / f"run{n}.err"
    proc = subprocess.Popen([sys.executable, "-m", "sweeps.run", *args, "progress=false"], cwd=tmp, env=e,
                            stdout=open(tmp / f"run{n}.out", "w"), stderr=open(err, "w"))
    return proc, err


def whole(csv_path: Path) -> list[dict]:
    """The table's rows; fails the test if any line is not a valid row or the last line is torn."""
    table = read_table(csv_path)
    assert not table.refused and table.torn is None, (table.problems(), table.torn)
    return table.rows


@pytest.mark.slow
def test_two_writers_killed_at_random_points_leave_each_cell_once(tmp_path):
    """Two `python -m sweeps.run suite=smoke` into one folder, started at once and SIGKILLed at a random moment
    of the writer's work, four times; then two clean resumes at once. One writer holds the table at a time (the other exits 73 naming the
    holder), a kill loses no finished row and tears at most the line being written, which the next writer cuts:
    at the end every cell's config_hash is in the table exactly once and every line is a valid row."""
    args = ("suite=smoke", "shape.T=[2,3,4]", f"results_dir={tmp_path / 'r'}")     # 30 cells, 12 checked
    out = tmp_path / "r" / "smoke.csv"
    rng = random.Random(int(os.environ.get("ONELA_FAULT_SEED", "36")))
    log = []
    for round_ in range(4):
        runs = [start(tmp_path, *args), start(tmp_path, *args)]
        t0 = time.monotonic()         # kill at a random moment of the writer's work: after it took the table
        while time.monotonic() - t0 < 120 and all(p.poll() is None for p, _ in runs) and not any(
                "to run ->" in err.with_suffix(".out").read_text() for _, err in runs):
            time.sleep(0.02)
        delay = rng.uniform(0.0, 4.0)
        time.sleep(delay)
        codes = []
        for p, _ in runs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            codes.append(p.wait())
        table = read_table(out)               # a kill leaves at most a torn last line, nothing else
        log.append((round_, round(delay, 1), codes, len(table.rows)))
        assert all(c in (EXIT_OK, EXIT_BUSY, -signal.SIGKILL) for c in codes), log
        assert not table.refused, (log, table.problems())
        assert len({r["config_hash"] for r in table.rows}) == len(table.rows), log
    runs = [start(tmp_path, *args), start(tmp_path, *args)]       # two clean resumes at once
    codes = [p.wait(timeout=300) for p, _ in runs]
    errs = [err.read_text() for _, err in runs]
    assert sorted(codes) in ([EXIT_OK, EXIT_OK], [EXIT_OK, EXIT_BUSY]), (log, codes, errs)
    for code, err in zip(codes, errs):
        if code == EXIT_BUSY:
            assert "has another writer (pid" in err and "nothing was done" in err, err
    rows = whole(out)
    expected = [c["config_hash"] for c in shard_cells(validate(cfg_of(*args)), CPU)]
    counts = Counter(r["config_hash"] for r in rows)
    assert sorted(counts) == sorted(expected) and set(counts.values()) == {1}, (log, counts)
    assert not list((tmp_path / "r").glob("*.lock")), "a lock file outlived its holders"
    busy = [f.read_text() for f in tmp_path.glob("run*.err") if "has another writer" in f.read_text()]
    print(f"rounds (round, kill after s, exit codes): {log}; final {codes}; {len(busy)} refused writer(s)")


# ---------------------------------------------------------------- the gate cannot be switched off

@pytest.mark.parametrize("override", ["tolerance=inf", "tolerance=nan", "tolerance=-1", "tolerance=0"])
def test_the_gate_cannot_be_switched_off(override):
    with pytest.raises(ConfigError, match=r"config key tolerance=.*must be a finite number > 0"):
        validate(cfg_of("suite=smoke", override))
    with pytest.raises(ConfigError, match=r"config key traffic.check=False: the correctness gate cannot be"):
        validate(cfg_of("suite=traffic", "traffic.check=false"))


class _NanPath(DecodePath):
    """A path whose output is NaN everywhere (a kernel that wrote nothing)."""

    capturable = False

    def prepare(self, wl):
        self.ref = fullstate_decode(wl)

    def run(self, wl):
        return torch.full_like(self.ref, float("nan"))

    def persistent_bytes(self):
        return 1

    def written_bytes(self):
        return 1


def test_a_nan_output_fails_at_any_finite_tolerance(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(operator_runner, "get_path", lambda name: _NanPath())
    cfg = cfg_of("suite=smoke", "geometry=smoke_mha", "shape.T=[2]", "path=[onela]", "tolerance=1e300",
                 f"results_dir={tmp_path}", "progress=false")
    assert run_sweep(cfg) == EXIT_FAILED
    (row,) = whole(tmp_path / "smoke.csv")
    assert row["status"] == "failed" and row["max_abs_err"] == "inf" and "> tolerance" in row["reason"]


def test_rows_gated_at_another_tolerance_are_gated_again(tmp_path, capsys, monkeypatch):
    """The tolerance is not part of config_hash (the committed rows keep their hashes), so a run at another
    tolerance does not skip a row gated at the old one as "already recorded": it removes it, says so, and
    measures the cell again; each cell stays in the table once."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    base = ("suite=smoke", "geometry=smoke_mha", "shape.T=[2]", "path=[reference_fullstate,reference_replay]",
            f"results_dir={tmp_path}", "progress=false")
    assert run_sweep(cfg_of(*base)) == EXIT_OK
    first = whole(tmp_path / "smoke.csv")
    assert {r["tolerance"] for r in first} == {"0.000488"}
    capsys.readouterr()
    assert run_sweep(cfg_of(*base, "tolerance=0.05")) == EXIT_OK
    captured = capsys.readouterr()
    assert "2 recorded row(s) of the selected cells were gated at tolerance 0.000488" in captured.err
    assert "2 to run" in captured.out
    rows = whole(tmp_path / "smoke.csv")
    assert sorted(r["config_hash"] for r in rows) == sorted(r["config_hash"] for r in first)
    assert {r["tolerance"] for r in rows} == {"0.05"} and {r["run_id"] for r in rows}.isdisjoint(
        {r["run_id"] for r in first})
    assert run_sweep(cfg_of(*base, "tolerance=0.05")) == EXIT_OK        # same tolerance: a plain resume
    assert "0 to run" in capsys.readouterr().out


def test_a_shard_does_not_regate_the_merged_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    base = ("suite=smoke", "geometry=smoke_mha", "path=[reference_fullstate]", f"results_dir={tmp_path}",
            "progress=false")
    assert run_sweep(cfg_of(*base)) == EXIT_OK
    assert run_sweep(cfg_of(*base, "tolerance=0.05", "shard.count=2", "shard.index=0")) == EXIT_CONFIG
    assert "a shard does not rewrite the merged table" in capsys.readouterr().err


# ---------------------------------------------------------------- keys no schema knows; exit codes

@pytest.mark.parametrize("override,named", [
    ("+shape.RR=[4]", "config key shape.RR: no schema knows this key"),
    ("+foo=1", "config key foo: no schema knows this key"),
    ("+timer.rep=5", "config key timer.rep: no schema knows this key"),
    ("+full_model.repeatz=5", "config key full_model.repeatz: no schema knows this key"),
    ("+hardware.gpus=2", "config key hardware.gpus: no schema knows this key"),
])
def test_plus_overrides_are_refused_unless_a_schema_knows_the_key(override, named):
    with pytest.raises(ConfigError, match=named):
        validate(cfg_of("suite=smoke", override))


def test_config_errors_exit_2_from_the_command_line(tmp_path):
    """Errors Hydra raises while composing (a misspelt key, an unknown option, a wrong type, a '+' key) exit 2
    like the config errors sweeps.spec finds; `--help`-style usage errors are argparse's 2 as well."""
    e = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    for override, said in (("shape.RR=[4]", "shape.RR"), ("suite=opertor", "opertor"), ("shape.R=[four]", "shape.R"),
                           ("+shape.RR=[4]", "config key shape.RR"), ("tolerance=inf", "config key tolerance"),
                           ("--bogus", "unrecognized arguments")):
        args = [override] if override.startswith(("suite=", "--")) else ["suite=smoke", override]
        p = subprocess.run([sys.executable, "-m", "sweeps.run", *args], cwd=tmp_path, env=e, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == EXIT_CONFIG and said in p.stderr, (override, p.returncode, p.stderr[-500:])


def test_a_failed_multirun_job_exits_with_its_single_runs_status_in_one_line(tmp_path, monkeypatch):
    """Under -m, a job with failed cells, a bad config or a busy results table makes the multirun exit 1, 2 or 73,
    as that run alone would, with one line naming the job and no traceback; also where the job ran in a
    launcher's worker process (joblib), from which its status comes back pickled."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(operator_runner, "get_path", lambda name: _NanPath())
    res = tmp_path / "r"
    cell = ("suite=smoke", "geometry=smoke_mha", "shape.T=[2]", "path=[onela]", f"results_dir={res}")
    assert run_sweep(cfg_of(*cell, "progress=false")) == EXIT_FAILED        # a failed row, recorded
    e = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}

    def multirun(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sweeps.run", "-m", *args, "progress=false"], cwd=tmp_path, env=e,
                              capture_output=True, text=True, timeout=120)
    failed = multirun(*cell)              # the recorded failure fails the job, which runs nothing
    with table_lock(res / "smoke.csv"):
        busy = multirun(*cell)
    bad = multirun("suite=smoke", "path=[onela]", "launcher=joblib_gpus", "shard.count=2", "hardware=cpu", "seed=-1",
                   f"results_dir={res}")
    for p, code, job, said in ((failed, EXIT_FAILED, "#0 (suite=smoke", "failed cells"),
                               (busy, EXIT_BUSY, "#0 (suite=smoke", "another run is writing its results table"),
                               (bad, EXIT_CONFIG, "#0 (shard.index=0 ", "a bad config")):
        assert p.returncode == code, (code, p.returncode, p.stderr[-2000:])
        said_lines = [ln for ln in p.stderr.splitlines() if ln.startswith("[sweeps] multirun job")]
        assert len(said_lines) == 1 and said_lines[0].startswith(f"[sweeps] multirun job {job}"), p.stderr[-2000:]
        assert f": exit {code}, {said}" in said_lines[0], said_lines
        assert "Traceback" not in p.stderr and "SweepFailed" not in p.stderr, p.stderr[-2000:]
    assert "config key seed=-1: must be >= 0" in bad.stderr
