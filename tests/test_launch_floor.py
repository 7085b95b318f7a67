"""The launch-aware floor (artifact/launch_floor.py, the `launch_floor_ms` column): the schema takes tables with
and without the column, per-step bytes come from the cost models, one measurement per distinct stream, the
operator runner fills the column only on a timed GPU row, and the per-geometry floor figure and REPORT section
draw both ratios (or the one, saying why). GPU tests check the floor against copy bandwidth and OneLA against it.
"""
from __future__ import annotations

import csv
import io
import math
import types

import numpy as np
import pytest
import torch

import artifact.launch_floor as lf
from artifact.results import (ADDED_COLUMNS, COLUMNS, ResultsFileError, append_row, is_results_header, read_table,
                              row_problems, upgrade_table)

LEGACY = [c for c in COLUMNS if c not in ADDED_COLUMNS]


def _row(h: str, **values) -> dict:
    r = {c: "" for c in COLUMNS} | {
        "suite": "smoke", "path": "onela", "geometry": "smoke_gqa", "R": "2", "W": "5", "T": "2", "O": "3",
        "HK": "2", "HV": "4", "K": "16", "V": "32", "prompt_len": "32", "lineage": "beam", "seed": "0",
        "status": "ok", "max_abs_err": "0.001", "tolerance": "0.01", "config_hash": h * 16, "run_id": "smoke-a"}
    return r | values


def _line(r: dict, columns) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow([r[c] for c in columns])
    return buf.getvalue()


# ---------------------------------------------------------------- the schema

def test_the_column_sits_beside_the_floor_and_is_a_measured_number():
    assert "launch_floor_ms" in ADDED_COLUMNS
    assert COLUMNS.index("launch_floor_ms") == COLUMNS.index("floor_bound") + 1
    for ok in ("", "0.0421", "nan"):
        assert row_problems(_row("a", launch_floor_ms=ok)) == [], ok
    assert row_problems(_row("a", launch_floor_ms="-1"))
    assert row_problems(_row("a", launch_floor_ms="fast"))


def test_a_table_without_the_column_reads_with_it_empty(tmp_path):
    p = tmp_path / "operator.csv"
    p.write_text(",".join(LEGACY) + "\n" + _line(_row("a", floor_ms="0.03"), LEGACY))
    t = read_table(p)
    assert not t.refused and t.columns == LEGACY
    (r,) = t.rows
    assert list(r) == COLUMNS and r["launch_floor_ms"] == "" and r["floor_ms"] == "0.03"
    # a line of the new schema in an old-header file has one field too many: refused, named
    with open(p, "a") as f:
        f.write(_line(_row("b", launch_floor_ms="0.05"), COLUMNS))
    assert "fields, expected" in read_table(p).refused[0].why


@pytest.mark.parametrize("header", [[c for c in COLUMNS if c != "floor_ms"],               # a column not added later
                                    LEGACY + ["launch_floor_ms"]])                          # the added one misplaced
def test_other_headers_are_still_refused(tmp_path, header):
    assert not is_results_header(header)
    p = tmp_path / "operator.csv"
    p.write_text(",".join(header) + "\n")
    with pytest.raises(ResultsFileError, match="columns differ"):
        read_table(p)


def test_a_table_with_the_column_reads_it(tmp_path):
    p = tmp_path / "operator.csv"
    append_row(p, _row("a", latency_ms="0.05", launch_floor_ms="0.04"))
    (r,) = read_table(p).rows
    assert r["launch_floor_ms"] == "0.04"
    assert p.read_text().split("\n", 1)[0] == ",".join(COLUMNS)


def test_appending_to_an_old_table_rewrites_it_in_the_schema_keeping_every_line(tmp_path):
    """The old rows keep their values (the new column empty); a row with a bad value stays refused for it, a
    truncated line and a torn last line stay byte for byte: the upgrade neither repairs nor hides a line."""
    p = tmp_path / "operator.csv"
    mangled = _line(_row("b", max_abs_err="abc"), LEGACY)
    truncated = _line(_row("e"), LEGACY)[:60] + "\r\n"
    torn = _line(_row("c"), LEGACY)[:40]
    p.write_bytes((",".join(LEGACY) + "\r\n" + _line(_row("a", floor_ms="0.03"), LEGACY) + mangled + truncated
                   + torn).encode())
    assert upgrade_table(p) and not upgrade_table(p)             # once; a table in the schema is left alone
    data = p.read_bytes().decode()
    assert data.split("\n", 1)[0] == ",".join(COLUMNS) + "\r"
    assert truncated in data and data.endswith(torn)
    t = read_table(p)
    assert [r["config_hash"] for r in t.rows] == ["a" * 16] and t.rows[0]["floor_ms"] == "0.03"
    assert ["max_abs_err 'abc' is not a number" in r.why for r in t.refused] == [True, False]
    assert "fields, expected" in t.refused[1].why and t.torn == torn
    p.write_text(",".join(LEGACY) + "\n" + _line(_row("a", floor_ms="0.03"), LEGACY))
    append_row(p, _row("d", latency_ms="0.05", launch_floor_ms="0.04"))
    rows = {r["config_hash"][0]: r for r in read_table(p).whole()}
    assert rows["a"]["launch_floor_ms"] == "" and rows["a"]["floor_ms"] == "0.03"
    assert rows["d"]["launch_floor_ms"] == "0.04"


# ---------------------------------------------------------------- per-step bytes

def test_every_cost_model_gives_its_bytes_step_by_step():
    """Every registered path declares an algorithm, whose cost gives T per-step byte and FLOP counts adding up to its
    totals (the launch floor streams the bytes, beam_scaling floors each step); OneLA's are its (read, written) pairs,
    FullState's step 0 reads R states where later steps read N."""
    from artifact.cost import FullState, ProjectionReplay
    from artifact.paths import PATHS, get_path
    from artifact.workload import Geometry, make_workload
    wl = make_workload(Geometry(2, 4, 16, 32), 2, 5, 3, lineage="beam", seed=1, prompt_len=4)
    for name in PATHS:
        cost = get_path(name).cost(wl)
        assert cost is not None, name
        assert len(cost["step_bytes"]) == 3 and sum(cost["step_bytes"]) == cost["compulsory_bytes"], name
        assert len(cost["step_flops"]) == 3 and sum(cost["step_flops"]) == cost["flops"], name
    assert get_path("onela").cost(wl)["step_bytes"] == [r + w for r, w in ProjectionReplay().step_read_write(wl)]
    steps, sb = FullState().cost(wl)["step_bytes"], wl.geometry.state_bytes
    assert steps[1] - steps[0] == (wl.R * wl.W - wl.R) * sb and steps[1] == steps[2]


# ---------------------------------------------------------------- the stream and its cache

def test_the_stream_moves_each_steps_bytes_in_disjoint_aligned_slices():
    plan = lf.plan_stream([800, 8, 1, 80_000])
    assert plan.elements == (100, 1, 1, 10_000)                             # ceil(bytes / 8) each way
    assert all(o % lf.ALIGN_ELEMENTS == 0 for o in plan.offsets)
    spans = sorted(zip(plan.offsets, plan.elements))
    assert all(a + n <= b for (a, n), (b, _) in zip(spans, spans[1:]))    # no launch re-reads another's bytes
    assert all(o + n <= plan.capacity for o, n in spans)


def test_each_launch_copies_exactly_its_slice(device):
    """The copy kernel (the Triton interpreter on a CPU) moves each launch's elements and nothing else."""
    plan = lf.plan_stream([8 * 5000, 8 * 70, 8 * 4097])
    src = torch.arange(plan.capacity, dtype=torch.int32, device=device) + 1
    dst = torch.zeros_like(src)
    for o, n in zip(plan.offsets, plan.elements):
        lf.stream_copy(src[o:o + n], dst[o:o + n])
    covered = torch.zeros(plan.capacity, dtype=torch.bool, device=device)
    for o, n in zip(plan.offsets, plan.elements):
        covered[o:o + n] = True
    assert int(covered.sum()) == sum(plan.elements)
    assert torch.equal(dst[covered], src[covered]) and not dst[~covered].any()


def test_past_the_ring_the_slices_wrap_and_a_step_larger_than_it_gets_its_own_size():
    ring = 4096 * lf.ELEMENT_BYTES
    plan = lf.plan_stream([8 * 3000, 8 * 3000, 8 * 100], ring_bytes=ring)
    assert plan.capacity == 4096 and plan.offsets == (0, 0, 3008)
    big = lf.plan_stream([8 * 10_000, 8 * 10], ring_bytes=ring)
    assert big.capacity == 10_048 and big.offsets == (0, 0)


def test_the_cache_key_is_the_per_step_bytes_the_timer_and_the_device():
    key = lf.cache_key([10, 20], 10, 50, "cuda:0")
    assert key == lf.cache_key((np.int64(10), 20), 10.0, 50, torch.device("cuda", 0))
    assert key != lf.cache_key([20, 10], 10, 50, "cuda:0")                # the same total split otherwise
    assert key != lf.cache_key([30], 10, 50, "cuda:0")
    assert key != lf.cache_key([10, 20], 25, 100, "cuda:0")
    assert key != lf.cache_key([10, 20], 10, 50, "cuda:1")


def test_one_measurement_per_distinct_stream_and_none_on_a_cpu(monkeypatch):
    calls = []
    monkeypatch.setattr(lf, "_MEASURED", {})
    monkeypatch.setattr(lf, "_time_stream", lambda steps, w, r, dev: calls.append(list(steps)) or 0.01 * len(calls))
    assert math.isnan(lf.launch_floor_ms([10, 20], 10, 50, "cpu")) and not calls
    assert lf.launch_floor_ms([10, 20], 10, 50, "cuda:0") == 0.01
    assert lf.launch_floor_ms((10, 20), 10, 50, "cuda:0") == 0.01          # cached: not measured again
    assert lf.launch_floor_ms([20, 10], 10, 50, "cuda:0") == 0.02
    assert lf.launch_floor_ms([10, 20], 25, 100, "cuda:0") == 0.03
    assert calls == [[10, 20], [20, 10], [10, 20]]


# ---------------------------------------------------------------- the operator runner

def _ctx(charges):
    """A context whose phase clock records the shared label each phase is booked under."""
    import contextlib
    return types.SimpleNamespace(warmup_ms=10, rep_ms=50,
                                 phase=lambda name, shared=None: charges.append(shared) or contextlib.nullcontext())


def test_the_runner_fills_the_column_of_a_timed_gpu_row_from_the_cost_model(monkeypatch):
    from sweeps.suites import operator
    seen, charges = [], []
    monkeypatch.setattr(operator, "launch_floor_ms", lambda steps, w, r, dev: seen.append((steps, w, r)) or 0.04)
    gpu_wl = types.SimpleNamespace(device=torch.device("cuda", 0), T=3)
    row = {"reason": "", "latency_ms": 0.05, "floor_ms": 0.01}
    cost = {"compulsory_bytes": 11, "step_bytes": [4, 4, 3]}
    operator._launch_floor(row, cost, gpu_wl, _ctx(charges))
    assert row["launch_floor_ms"] == 0.04 and seen == [([4, 4, 3], 10, 50)] and charges == [operator.LAUNCH_FLOOR]
    for wl, latency in ((gpu_wl, math.nan), (types.SimpleNamespace(device=torch.device("cpu"), T=3), 0.05)):
        row = {"reason": "", "latency_ms": latency, "floor_ms": 0.01}                    # untimed, or on a CPU: left empty
        operator._launch_floor(row, cost, wl, _ctx(charges))
        assert "launch_floor_ms" not in row
    assert len(seen) == 1


def test_a_floor_that_cannot_be_measured_leaves_the_column_empty_and_says_why(monkeypatch):
    from sweeps.suites import operator

    def boom(*a):
        raise RuntimeError("no stream today")
    monkeypatch.setattr(operator, "launch_floor_ms", boom)
    row = {"reason": "a note", "latency_ms": 0.05, "floor_ms": 0.01}
    operator._launch_floor(row, {"compulsory_bytes": 11, "step_bytes": [4, 4, 3]},
                           types.SimpleNamespace(device=torch.device("cuda"), T=3), _ctx([]))
    assert "launch_floor_ms" not in row
    assert row["reason"] == "a note launch floor not measured: RuntimeError: no stream today"


def test_cpu_rows_of_the_smoke_suite_leave_the_column_empty(tmp_path):
    from hydra import compose, initialize_config_module

    import sweeps.schema  # noqa: F401 - registers the structured configs
    from artifact.results import read_rows
    from sweeps.run import EXIT_OK, run_sweep
    with initialize_config_module("sweeps.conf", version_base="1.3"):
        cfg = compose("config", overrides=["suite=smoke", "path=[onela]", f"results_dir={tmp_path}",
                                           "progress=false"])
    assert run_sweep(cfg) == EXIT_OK
    rows = read_rows(tmp_path / "smoke.csv")
    assert rows and all(r["launch_floor_ms"] == "" for r in rows)


# ---------------------------------------------------------------- the figure and REPORT

def _operator_results(tmp_path, launch_factor: float | None, geometries=None):
    from test_plots import operator_rows, write_results

    from plots.data import load_results
    tmp_path.mkdir(parents=True, exist_ok=True)
    rows = operator_rows(Rs=(4, 16), Ts=(2, 6))
    if launch_factor is not None:
        for r in rows:
            if r["path"] == "onela" and (geometries is None or r["geometry"] in geometries):
                r["launch_floor_ms"] = r["latency_ms"] / launch_factor
    return load_results(write_results(tmp_path, rows))


def _boxes(ax, gid):
    return [p for p in ax.patches if p.get_gid() == gid]


def test_the_floor_figure_draws_both_ratios_per_geometry(tmp_path):
    from test_plots import FAKE_GEOMETRIES, series, texts

    from plots import fig_floor_geometry
    from plots.style import setup
    setup()
    fig = fig_floor_geometry.draw(_operator_results(tmp_path, 1.25))
    ax = fig.axes[0]
    assert series(ax) == {f"series:{g}" for g in FAKE_GEOMETRIES}
    assert all(len(_boxes(ax, f"series:{g}")) == 2 for g in FAKE_GEOMETRIES)
    t = texts(fig)
    assert t.count("2.00×") == 3 and t.count("1.25×") == 3                 # floor = lat / 2, launch = lat / 1.25
    assert "latency / launch_floor_ms" in t and fig_floor_geometry.NO_LAUNCH_NOTE not in t
    assert "n=4 / 4" in t


def test_the_floor_figure_without_the_column_draws_one_ratio_and_says_so(tmp_path):
    from test_plots import FAKE_GEOMETRIES, texts

    from plots import fig_floor_geometry
    from plots.style import setup
    setup()
    fig = fig_floor_geometry.draw(_operator_results(tmp_path, None))
    ax = fig.axes[0]
    assert all(len(_boxes(ax, f"series:{g}")) == 1 for g in FAKE_GEOMETRIES)
    t = texts(fig)
    assert t.count("2.00×") == 3 and fig_floor_geometry.NO_LAUNCH_NOTE in t
    assert "latency / launch_floor_ms" not in t


def test_the_report_sets_the_launch_aware_ratio_beside_the_floor_where_rows_have_it(tmp_path):
    from plots import report
    res = _operator_results(tmp_path / "a", 1.25, geometries={"fake_qwen"})
    text = report.build(res)
    assert "## OneLA against its floors per geometry (not in the paper)" in text
    lines = {ln.split(" | ")[0].lstrip("| "): ln for ln in text.splitlines() if ln.startswith("| fake_")}
    assert "| 2.00× | 4 | 1.25× | 4 |" in lines["fake_qwen"]
    assert "| 2.00× | 4 | — | 0 |" in lines["fake_wide"]
    none = report.build(_operator_results(tmp_path / "b", None))
    section = none.split("## OneLA against its floors per geometry")[1].split("\n## ")[0]
    assert "No row has launch_floor_ms yet" in section and "1.25×" not in section


# ---------------------------------------------------------------- GPU

@pytest.fixture(scope="module")
def ceilings():
    from artifact.measure import measure_ceilings
    return measure_ceilings()


@pytest.mark.gpu
def test_gpu_the_launch_floor_of_known_bytes_is_no_faster_than_copy_bandwidth(ceilings):
    """Two launches moving 256 MiB each (read + written) cannot beat the measured copy bandwidth; 5 % below it
    is allowed for the two kernels' medians (the ceiling is torch's copy of 2 GiB, this a Triton copy)."""
    steps = [256 << 20, 256 << 20]
    t = lf.launch_floor_ms(steps, 10, 50)
    assert t >= 0.95 * sum(steps) / ceilings["copy_bytes_per_s"] * 1e3
    assert lf.launch_floor_ms(list(steps), 10, 50) == t                    # cached: the same measurement


@pytest.mark.gpu
def test_gpu_onela_at_a_small_cell_is_not_below_its_launch_floor(ceilings):
    """One small Qwen3.5-0.8B cell through the operator runner: both floors filled, and OneLA's latency at
    least 0.9 x the time of its streaming launches (the kernels do all the streaming and more)."""
    from artifact.reference import fullstate_decode
    from artifact.results import config_hash
    from artifact.workload import GEOMETRIES, make_workload
    from sweeps.suites.operator import run_cell
    geo = GEOMETRIES["qwen3_5_0_8b"]
    wl = make_workload("qwen3_5_0_8b", 4, 128, 2, lineage="beam", seed=0, device="cuda")
    cell = dict(suite="operator", path="onela", geometry="qwen3_5_0_8b", R=4, W=128, T=2, O=3, HK=geo.hk,
                HV=geo.hv, K=geo.k, V=geo.v, prompt_len=wl.prompt_len, lineage="beam", seed=0, tolerance=4.88e-4,
                run_id="test", git_commit="test")
    cell["config_hash"] = config_hash(cell)
    ctx = types.SimpleNamespace(tolerance=4.88e-4, warmup_ms=10, rep_ms=50, time_it=True, ceilings=ceilings,
                                device=torch.device("cuda"))
    row = run_cell(cell, wl, fullstate_decode(wl), ctx)
    assert row["status"] == "ok", row
    assert row["floor_ms"] > 0 and row["launch_floor_ms"] > 0
    assert row["latency_ms"] >= 0.9 * row["launch_floor_ms"], row


def test_launch_floor_is_measured_only_under_the_floor_bound(monkeypatch):
    """Cells whose bandwidth floor exceeds LAUNCH_FLOOR_MAX_FLOOR_MS keep the column empty, unmeasured; cells
    under it are measured with the cell's timer settings."""
    import types
    from sweeps.suites import operator as op
    calls = []
    monkeypatch.setattr(op, "launch_floor_ms", lambda steps, w, r, dev: calls.append(steps) or 0.123)
    wl = types.SimpleNamespace(device=torch.device("cuda"), T=2)
    ctx = types.SimpleNamespace(warmup_ms=10, rep_ms=50)
    cost = {"compulsory_bytes": 4000, "step_bytes": [1000, 3000]}
    big = {"latency_ms": 9.0, "floor_ms": op.LAUNCH_FLOOR_MAX_FLOOR_MS * 1.01, "reason": ""}
    op._launch_floor(big, cost, wl, ctx)
    assert "launch_floor_ms" not in big and calls == []
    small = {"latency_ms": 0.2, "floor_ms": 0.1, "reason": ""}
    op._launch_floor(small, cost, wl, ctx)
    assert small["launch_floor_ms"] == 0.123 and calls == [[1000, 3000]]
