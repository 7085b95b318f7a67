"""The results store: one checked reader (artifact.results.read_table) behind the sweep's resume, the merges and
the figures; one writer per table (table_lock); a repair command for what the reader refuses. Every refused line
is named with its file and line; nothing malformed is ever taken as a row."""
from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

import sweeps.schema  # noqa: F401 - registers the structured configs
from artifact.results import (COLUMNS, ResultsFileError, TableBusy, append_row, differing_columns, fold_rerun,
                              is_results_header, merge_shards, new_run_id, read_rows, read_side_table, read_table,
                              read_wall, repair_table, table_lock, write_rows)
from plots import __main__ as plots_main
from plots.data import load_results
from sweeps.run import EXIT_BUSY, EXIT_FAILED, EXIT_OK, run_sweep

REPO = Path(__file__).resolve().parents[1]


def cfg_of(*overrides: str):
    with initialize_config_module("sweeps.conf", version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _hash(label: str) -> str:
    import hashlib
    return hashlib.sha256(label.encode()).hexdigest()[:16]


def row(h: str, status: str = "ok", **values) -> dict:
    """A valid smoke-suite row of cell `h`."""
    r = {c: "" for c in COLUMNS} | {
        "suite": "smoke", "path": "onela", "geometry": "smoke_gqa", "R": "2", "W": "5", "T": "2", "O": "3",
        "HK": "2", "HV": "4", "K": "16", "V": "32", "prompt_len": "32", "lineage": "beam", "seed": "0",
        "status": status, "max_abs_err": "0.001", "tolerance": "0.01", "config_hash": _hash(h), "run_id": "smoke-a",
        "reason": "" if status == "ok" else f"FAKE {status}"}
    return r | values


def line(r: dict) -> str:
    import csv
    import io
    buf = io.StringIO()
    csv.writer(buf).writerow([r[c] for c in COLUMNS])
    return buf.getvalue()


def corrupt_table(path: Path) -> None:
    """A table as faults leave it: valid rows, a truncated middle line, an ok row whose max_abs_err is not a
    number, bytes that are not UTF-8, a cell recorded twice (ok, then failed), and a torn last line."""
    write_rows(path, [row("a"), row("b")])
    with open(path, "ab") as f:
        f.write(line(row("c"))[:60].encode() + b"\r\n")                       # line 4: truncated
        f.write(line(row("d", max_abs_err="abc")).encode())                    # line 5: mangled value
        f.write(line(row("e")).encode().replace(b"onela", b"on\xffla"))         # line 6: not UTF-8
        f.write(line(row("b", status="failed")).encode())                      # line 7: b again, conflicting
        f.write(line(row("f")).encode())                                       # line 8: fine
        f.write(line(row("g")).encode()[:50])                                  # torn


def test_the_reader_refuses_bad_lines_naming_file_and_line(tmp_path):
    path = tmp_path / "smoke.csv"
    corrupt_table(path)
    table = read_table(path)
    assert [r["config_hash"] for r in table.rows] == [_hash(h) for h in ("a", "b", "f")]
    assert table.lines == [2, 3, 8] and table.torn is not None
    why = {r.line: r.why for r in table.refused}
    assert sorted(why) == [4, 5, 6, 7]
    assert f"fields, expected {len(COLUMNS)} (a truncated or mangled line)" in why[4]
    assert why[5] == "max_abs_err 'abc' is not a number; an ok row needs a finite max_abs_err, got 'abc'"
    assert why[6].startswith("not UTF-8 text (byte 0xff")
    assert why[7] == f"config_hash {_hash('b')} is already recorded at line 3 (one row per cell)"
    with pytest.raises(ResultsFileError) as e:
        read_rows(path)
    text = str(e.value)
    assert f"{path}: 5 line(s) refused" in text and f"{path} line 4: " in text and "the last line is torn" in text
    assert f"repair: python -m artifact.results repair {path}" in text


@pytest.mark.parametrize("bad,why", [
    ({"status": "done"}, "status 'done' is not one of"), ({"R": "2.5"}, "R '2.5' is not an integer"),
    ({"W": "0"}, "W=0 is below 1"), ({"O": "4"}, "O=4 is not T + 1 = 3"),
    ({"latency_ms": "fast"}, "latency_ms 'fast' is not a number"), ({"latency_ms": "-1"}, "latency_ms=-1 is negative"),
    ({"tolerance": "inf"}, "tolerance 'inf' is not a finite number > 0"),
    ({"max_abs_err": "nan"}, "an ok row needs a finite max_abs_err"), ({"config_hash": "h1"}, "16 hex digits"),
    ({"run_id": ""}, "run_id is empty"), ({"suite": "Smoke"}, "not a lower-case identifier"),
    ({"status": "failed", "reason": ""}, "a failed row needs a reason"),
])
def test_append_row_refuses_what_would_not_read_back(tmp_path, bad, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        append_row(tmp_path / "t.csv", row("a") | bad)
    append_row(tmp_path / "t.csv", row("a", status="failed", max_abs_err=float("inf")))   # a failed cell's inf
    with pytest.raises(ValueError, match="hold a line break"):
        append_row(tmp_path / "t.csv", row("b", status="skipped", reason="two\nlines"))
    assert len(read_rows(tmp_path / "t.csv")) == 1


def test_repair_moves_refused_lines_aside_and_the_next_run_measures_their_cells(tmp_path, capsys, monkeypatch):
    """The resume refuses a corrupt table (exit 1) naming file, lines and the repair command; after the repair
    the same command resumes: every cell once, every line a valid row."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    args = ("suite=smoke", "geometry=smoke_mha", "shape.T=[2,3]", "path=[reference_fullstate,reference_replay]",
            f"results_dir={tmp_path}", "progress=false")
    assert run_sweep(cfg_of(*args)) == EXIT_OK
    path = tmp_path / "smoke.csv"
    good = read_rows(path)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2][:40]                                   # a truncated middle line
    lines[3] = lines[3].replace(b",ok,", b",okay,")            # a mangled one
    again = good[0] | {"status": "failed", "reason": "FAKE failed"}      # and a cell recorded again, otherwise
    path.write_bytes(b"\n".join(lines) + line(again).encode())
    capsys.readouterr()
    assert run_sweep(cfg_of(*args)) == EXIT_FAILED
    err = capsys.readouterr().err
    assert f"{path}: 3 line(s) refused" in err and f"{path} line 3: " in err and f"{path} line 4: status 'okay'" in err
    assert f"repair: python -m artifact.results repair {path}" in err
    e = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "artifact.results", "repair", str(path)], env=e, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    assert f"kept 1 row(s); moved 4 line(s) to {path}.refused" in p.stdout
    assert "neither row is kept" in p.stdout
    refused = (tmp_path / "smoke.csv.refused").read_text()
    assert refused.count("# line ") == 4
    assert run_sweep(cfg_of(*args)) == EXIT_OK
    assert "3 to run" in capsys.readouterr().out
    rows = read_rows(path)
    assert sorted(r["config_hash"] for r in rows) == sorted(r["config_hash"] for r in good)
    assert repair_table(path)["moved"] == []                   # nothing left to repair


def test_one_writer_per_table(tmp_path, capsys, monkeypatch):
    """While one process writes a table a second run into it is refused at once (exit 73) with the holder's pid
    and command, and touches nothing; shared holders (shards reading the merged table) coexist but keep a
    merge out; the lock file goes with its last holder."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    path = tmp_path / "smoke.csv"
    write_rows(path, [row("a")])
    before = path.read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from artifact.results import table_lock\n"
        f"with table_lock({str(path)!r}):\n    print('held', flush=True); time.sleep(60)")],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        cfg = cfg_of("suite=smoke", "geometry=smoke_mha", "path=[reference_fullstate]", f"results_dir={tmp_path}",
                     "progress=false")
        assert run_sweep(cfg) == EXIT_BUSY
        err = capsys.readouterr().err
        assert f"{path} has another writer (pid {holder.pid} on " in err and "nothing was done" in err
        assert path.read_bytes() == before and not (tmp_path / "env").exists()
        with pytest.raises(TableBusy):
            repair_table(path)
    finally:
        holder.kill()
        holder.wait()
    with table_lock(path, shared=True), table_lock(path, shared=True):
        with pytest.raises(TableBusy):
            with table_lock(path):
                pass
    assert not (tmp_path / "smoke.csv.lock").exists()
    with table_lock(path):
        assert (tmp_path / "smoke.csv.lock").exists()
    assert not (tmp_path / "smoke.csv.lock").exists()


def test_merges_never_take_a_torn_or_invalid_row(tmp_path):
    notes: list[str] = []
    write_rows(tmp_path / "smoke.shard0-of-2.csv", [row("a")])
    write_rows(tmp_path / "smoke.shard1-of-2.csv", [row("b")])
    with open(tmp_path / "smoke.shard1-of-2.csv", "a") as f:
        f.write(line(row("c"))[:70])                          # a killed job's torn last line
    target, added = merge_shards(tmp_path, "smoke", notes)
    assert added == 2 and [r["config_hash"] for r in read_rows(target)] == [_hash("a"), _hash("b")]
    assert "smoke.shard1-of-2.csv: left out its torn last line" in notes[0]
    with open(tmp_path / "smoke.shard0-of-2.csv", "a") as f:
        f.write(line(row("d", max_abs_err="x")))
        f.write(line(row("e")))
    before = target.read_bytes()
    with pytest.raises(ResultsFileError, match=r"smoke.shard0-of-2.csv line 3: max_abs_err 'x' is not a number"):
        merge_shards(tmp_path, "smoke")
    assert target.read_bytes() == before                      # nothing merged
    with table_lock(tmp_path / "smoke.shard1-of-2.csv"):     # a shard still running
        with pytest.raises(TableBusy, match="smoke.shard1-of-2.csv has another writer"):
            merge_shards(tmp_path, "smoke")
    rerun = tmp_path / "re"
    rerun.mkdir()
    write_rows(rerun / "smoke.csv", [row("a", run_id="smoke-b")])
    with open(rerun / "smoke.csv", "a") as f:
        f.write(line(row("z", run_id="smoke-b"))[:20] + "\n")
    with pytest.raises(ResultsFileError, match=rf"re/smoke.csv line 3: 3 fields, expected {len(COLUMNS)}"):
        fold_rerun(tmp_path, "smoke", rerun)


def test_plots_draw_what_is_there_and_say_what_is_not(tmp_path):
    """An empty file, a header-only one (what `redo=[failed]` leaves when killed before its first row), a torn
    header, and a table with refused lines: the figures and REPORT.md are written, the valid rows are drawn,
    and every line left out is named in REPORT.md."""
    res = tmp_path / "results"
    res.mkdir()
    (res / "smoke.csv").write_text("")
    (res / "operator.csv").write_text(",".join(COLUMNS) + "\r\n")
    (res / "traffic.csv").write_text("suite,pa")
    corrupt_table(res / "full_model.csv")
    written = plots_main.main(["--results", str(res)])
    assert all(p.exists() and p.stat().st_size > 0 for p in written)
    loaded = load_results(res)
    assert len(loaded["full_model"]) == 3 and len(loaded["operator"]) == len(loaded["smoke"]) == 0
    report = (res / "REPORT.md").read_text()
    assert "Read but not drawn" in report
    for n in (4, 5, 6, 7):
        assert f"full_model.csv line {n}: " in report
    assert "traffic.csv: left out its torn last line" in report
    assert f"python -m artifact.results repair {res / 'full_model.csv'}" in report


def test_plots_name_a_cell_two_files_disagree_on(tmp_path, capsys):
    write_rows(tmp_path / "smoke.csv", [row("a")])
    write_rows(tmp_path / "smoke.shard0-of-2.csv", [row("a", status="failed")])
    loaded = load_results(tmp_path)
    assert list(loaded["smoke"]["status"]) == ["ok"]
    assert any(f"config_hash {_hash('a')} differs between smoke.csv line 2 and smoke.shard0-of-2.csv line 2 in "
               "['status', 'reason']" in n for n in loaded.notes)


def test_the_committed_tables_read_whole():
    """Every results table committed under results/ passes the reader (the new checks accept the old rows; a
    table committed before a column of ADDED_COLUMNS existed reads with it empty)."""
    tables = [p for p in (REPO / "results").rglob("*.csv")
              if is_results_header(p.read_text(errors="replace").split("\n", 1)[0].rstrip("\r").split(","))]
    assert {REPO / "results" / f"{s}.csv" for s in ("operator", "recurrent_path", "traffic", "full_model")} \
        <= set(tables)
    for p in tables:
        t = read_table(p)
        assert not t.refused and t.torn is None, (p, t.problems())
        assert all(set(r) == set(COLUMNS) for r in t.rows), p


def _append_many(path, i):
    from artifact.results import append_csv
    for j in range(50):
        append_csv(path, ["shard", "n", "pad"], [{"shard": i, "n": j, "pad": "x" * 500}])


def test_a_side_table_of_another_header_is_refused(tmp_path):
    """append_csv into a table written under other columns (an older version's, resumed) raises, naming both
    headers, and leaves the file as it was."""
    from artifact.results import append_csv
    path = tmp_path / "side.csv"
    append_csv(path, ["a", "b"], [{"a": 1, "b": 2}])
    append_csv(path, ["a", "b"], [{"a": 3}])
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"its header \['a', 'b'\] is not this table's columns \['a', 'b', 'c'\]"):
        append_csv(path, ["a", "b", "c"], [{"a": 4}])
    assert path.read_bytes() == before and before.decode().splitlines() == ["a,b", "1,2", "3,"]


def test_shards_appending_to_one_side_table_never_interleave(tmp_path):
    """The shards of a suite append to its side tables (beam_scaling_steps.csv, beam_scaling_width.csv) at
    once: one header, every line whole, none lost."""
    import multiprocessing
    path = tmp_path / "side.csv"
    procs = [multiprocessing.get_context("fork").Process(target=_append_many, args=(path, i)) for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0] == ["shard", "n", "pad"] and lines.count(["shard", "n", "pad"]) == 1
    assert sorted((int(s), int(n)) for s, n, _ in lines[1:]) == [(i, j) for i in range(6) for j in range(50)]


def test_run_ids_sort_by_start_and_name_their_shard():
    a, b = new_run_id("smoke"), new_run_id("smoke", (1, 4))
    assert re.fullmatch(r"smoke-\d{8}T\d{6}Z-[0-9a-f]{6}", a), a
    assert re.fullmatch(r"smoke-\d{8}T\d{6}Z-s1of4-[0-9a-f]{6}", b), b
    assert a != new_run_id("smoke")
    with pytest.raises(ValueError, match="suite 'Smoke run'"):
        new_run_id("Smoke run")


def test_one_diff_says_where_two_rows_of_a_cell_differ():
    a = row("a")
    assert differing_columns(a, a | {"run_id": "smoke-b"}) == []           # provenance aside
    assert differing_columns(a, a | {"status": "failed", "reason": "x"}) == ["status", "reason"]


def test_side_tables_refuse_a_mangled_line_and_leave_out_a_torn_one(tmp_path):
    from artifact.results import append_csv
    path = tmp_path / "smoke_steps.csv"
    assert read_side_table(path).rows == [] and read_side_table(path).columns == []
    append_csv(path, ["config_hash", "step_ms"], [{"config_hash": _hash("a"), "step_ms": 1.5}])
    with open(path, "a") as f:
        f.write(f"{_hash('b')},2")                                         # a killed writer's torn line
    t = read_side_table(path)
    assert t.rows == [{"config_hash": _hash("a"), "step_ms": "1.5"}] and t.torn == f"{_hash('b')},2"
    with open(path, "a") as f:
        f.write("\n1,2,3\n")
    with pytest.raises(ResultsFileError, match=r"smoke_steps.csv line 4: 3 fields, expected 2"):
        read_side_table(path)


def test_wall_records_read_in_one_place(tmp_path):
    (tmp_path / "env").mkdir()
    assert read_wall(tmp_path, "smoke-a") is None
    (tmp_path / "env" / "smoke-a.wall.json").write_text('{"wall_s": 12.5, "cells": 3}')
    assert read_wall(tmp_path, "smoke-a")["wall_s"] == 12.5
    (tmp_path / "env" / "smoke-b.wall.json").write_text('{"cells": 3}')
    with pytest.raises(ResultsFileError, match=r"smoke-b.wall.json: unreadable wall record \(KeyError\)"):
        read_wall(tmp_path, "smoke-b")
