"""The traffic suite's measurement method (sweeps/suites/traffic.py and its child process, traffic_child.py):
ncu output parsing, method fallback, the accounting of drain and copies, FLOP counts, and the parent/child
wiring. GPU tests check the method on a copy of known size (the calibration) and a FullState run's writes
against the bytes it must write."""
from __future__ import annotations

import json
import math
import os
import shutil
import stat
import sys
from types import SimpleNamespace

import pytest
import torch

from artifact.workload import Geometry
from sweeps.suites import traffic, traffic_child
from sweeps.suites.traffic import (ATTEMPTS, DRAIN_KERNEL, NcuOutput, NcuResult, Outcome, TrafficOptions, calibrate,
                                   calibration_note, measure_with_fallback, ncu_outcome, parse_ncu_output,
                                   per_kernel_outcome, to_bytes)
from sweeps.suites.traffic_child import analytic_flops

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def _row(i, name, metric, unit, value):
    return (f'"{i}","4242","python3.12","127.0.0.1","{name}","1","7","(128, 1, 1)","(8, 2, 64)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


def _details_log(kernels, errors=(), failed=()):
    """A log as `ncu --csv --page details --log-file` leaves it: PROF lines, errors, then the table."""
    lines = ["==PROF== Connected to process 4242 (/opt/torch/.venv/bin/python3.12)"]
    lines += [f'==PROF== Profiling "{n}": 0%....50%....100% - 1 pass' for n, *_ in kernels]
    lines += [f"==ERROR== {e}" for e in errors]
    lines += [f'==ERROR== Failed to profile "{n}" in process 4242' for n in failed]
    lines += ["==PROF== Disconnected from process 4242", HEADER]
    for i, (name, read, write, unit) in enumerate(kernels):
        lines.append(_row(i, name, "dram__bytes_read.sum", unit, read))
        lines.append(_row(i, name, "dram__bytes_write.sum", unit, write))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- parsing

def test_parse_details_layout_units_and_separators():
    log = _details_log([("_onela_step_kernel", "52,461,312", "25,165,824", "byte"),
                        ("_onela_step_kernel", "60,000,000", "26,000,000", "byte"),
                        (DRAIN_KERNEL, "268.44", "3.5", "Mbyte")])
    out = parse_ncu_output(log)
    assert [r.name for r in out.results] == ["_onela_step_kernel", "_onela_step_kernel", DRAIN_KERNEL]
    assert out.results[0].read == 52_461_312 and out.results[0].write == 25_165_824
    assert out.results[2].read == pytest.approx(268.44e6) and out.results[2].write == pytest.approx(3.5e6)
    assert out.passes == [1, 1, 1] and not out.errors and not out.failed


def test_parse_records_kernels_ncu_could_not_profile():
    log = _details_log([("_l2_read_kernel", "1,000", "2,000", "byte")],
                       errors=["Failed to prepare kernel for profiling", "Unknown Error on device 0."],
                       failed=["fused_recurrent_gated_delta_rule_fwd_kernel"])
    out = parse_ncu_output(log)
    assert out.failed == ["fused_recurrent_gated_delta_rule_fwd_kernel"]
    o = ncu_outcome(ATTEMPTS["ncu-kernel"], out, census=None)
    assert o.status == "failed"
    assert "fused_recurrent_gated_delta_rule_fwd_kernel" in o.message
    assert "Failed to prepare kernel for profiling" in o.message


def test_parse_raw_layout_with_units_row():
    log = "\n".join([
        "==PROF== Connected to process 7",
        '"ID","Process ID","Process Name","Host Name","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum"',
        '"","","","","","Kbyte","Kbyte"',
        '"0","7","python3","h","copy_kernel","2,048.50","1,024"',
        '"1","7","python3","h","_l2_read_kernel","5","0"',
    ])
    out = parse_ncu_output(log)
    assert [(r.name, r.read, r.write) for r in out.results] == [("copy_kernel", 2_048_500.0, 1_024_000.0),
                                                                 ("_l2_read_kernel", 5000.0, 0.0)]


def test_units_and_missing_values():
    assert to_bytes("1,234", "byte") == 1234
    assert to_bytes("2", "Gbyte") == 2e9
    assert to_bytes("1", "MiB") == 2 ** 20
    assert to_bytes("n/a", "byte") is None
    with pytest.raises(ValueError, match="unknown byte unit"):
        to_bytes("1", "furlong")


# ---------------------------------------------------------------- accounting

def test_per_kernel_sums_drain_writes_but_not_its_reads():
    entries = [("k_step", 100.0, 10.0), ("k_step", 200.0, 20.0), (DRAIN_KERNEL, 5000.0, 7.0)]
    o = per_kernel_outcome(entries, census={"kernels": ["k_step", "k_step"], "copies": []})
    assert o.status == "ok" and o.kernels == 2
    assert o.read == 300.0 and o.write == 37.0


def test_per_kernel_rejects_missing_kernels_drain_and_values():
    census = {"kernels": ["a", "b", "c"], "copies": []}
    o = per_kernel_outcome([("a", 1.0, 1.0), ("b", 1.0, 1.0), (DRAIN_KERNEL, 1.0, 1.0)], census)
    assert o.status == "failed" and "measured 2 kernels but one run launches 3" in o.message
    assert per_kernel_outcome([("a", 1.0, 1.0)], None).status == "failed"          # no drain
    assert per_kernel_outcome([("a", None, 1.0), (DRAIN_KERNEL, 1.0, 1.0)], None).status == "failed"


def test_copies_from_census_are_added_by_size():
    census = {"kernels": ["k"], "copies": [{"name": "Memcpy DtoD (Device -> Device)", "bytes": 1000},
                                           {"name": "Memset (Device)", "bytes": 64},
                                           {"name": "Memcpy HtoD (Pinned -> Device)", "bytes": 8}]}
    o = per_kernel_outcome([("k", 10.0, 20.0), (DRAIN_KERNEL, 0.0, 5.0)], census)
    assert o.status == "ok"
    assert o.read == 10 + 1000 and o.write == 20 + 5 + 1000 + 64 + 8
    assert "3 memcpy/memset" in o.message


def test_range_outcome_uses_run_reads_and_both_ranges_writes():
    out = NcuOutput(results=[NcuResult(0, "range 0", 111.0, 22.0), NcuResult(1, "range 1", 9999.0, 3.0)])
    o = ncu_outcome(ATTEMPTS["ncu-app-range"], out, census=None)
    assert (o.status, o.read, o.write) == ("ok", 111.0, 25.0)
    bad = ncu_outcome(ATTEMPTS["ncu-app-range"], NcuOutput(results=out.results[:1]), census=None)
    assert bad.status == "failed"


# ---------------------------------------------------------------- fallback

def _ladder(*names):
    return [ATTEMPTS[n] for n in names]


def test_fallback_moves_on_until_a_method_measures_and_keeps_the_failures():
    answers = {"ncu-kernel": Outcome("failed", message="ncu could not profile ['fused_recurrent']"),
               "ncu-kernel-retry": Outcome("failed", message="timed out after 300 s"),
               "ncu-app-range": Outcome("ok", 10.0, 20.0)}
    seen = []

    def run_one(a):
        seen.append(a.name)
        return answers[a.name]

    o, used, failures = measure_with_fallback(_ladder("ncu-kernel", "ncu-kernel-retry", "ncu-app-range",
                                                      "pm-sampling"), run_one)
    assert o.status == "ok" and used.name == "ncu-app-range"
    assert seen == ["ncu-kernel", "ncu-kernel-retry", "ncu-app-range"]
    assert failures[0].startswith("ncu-kernel: ncu could not profile") and "timed out" in failures[1]


def test_fallback_stops_on_skip_or_a_failure_of_the_path_itself():
    o, used, _ = measure_with_fallback(_ladder("ncu-kernel", "pm-sampling"),
                                       lambda a: Outcome("skipped", message="vllm not installed"))
    assert (o.status, used.name) == ("skipped", "ncu-kernel")
    calls = []
    o, used, _ = measure_with_fallback(
        _ladder("ncu-kernel", "pm-sampling"),
        lambda a: calls.append(a) or Outcome("failed", message="max_abs_err 1e-2 > tolerance", final=True))
    assert o.status == "failed" and len(calls) == 1


def test_fallback_reports_every_method_when_none_measures():
    o, used, failures = measure_with_fallback(_ladder("ncu-kernel", "pm-sampling", "torch-profiler"),
                                              lambda a: Outcome("failed", message=f"{a.method} broke"))
    assert o.status == "failed" and used is None and len(failures) == 3
    for name in ("ncu-kernel", "pm-sampling", "torch-profiler"):
        assert name in o.message


def test_calibration_ratios_and_note():
    opts = TrafficOptions(calibrate_bytes=(1 << 30, 16 << 20))

    def run_one(a, args):
        n = int(args[args.index("--nbytes") + 1])
        return Outcome("ok", 1.02 * n, 0.97 * n, child={"expected_read": n, "expected_write": n})

    cal = calibrate(ATTEMPTS["ncu-kernel"], opts, workdir=None, run_one=run_one)
    assert cal["sizes"][str(1 << 30)]["read_ratio"] == pytest.approx(1.02)
    assert cal["sizes"][str(16 << 20)]["write_ratio"] == pytest.approx(0.97)
    assert calibration_note(cal) == "calib copy 1GiB r/w 1.020/0.970, 16MiB r/w 1.020/0.970"


def test_options_from_cfg_reads_overrides_and_rejects_unknown_attempts():
    from omegaconf import OmegaConf
    opts = traffic.options_from_cfg(OmegaConf.create({"traffic": {"ladder": ["ncu-app-range"], "timeout_s": 60}}))
    assert opts.ladder == ("ncu-app-range",) and opts.timeout_s == 60 and opts.census is True
    assert traffic.options_from_cfg(OmegaConf.create({})).ladder == traffic.DEFAULT_LADDER
    with pytest.raises(ValueError, match="unknown attempts"):
        traffic.options_from_cfg({"traffic": {"ladder": ["nsys"]}})


# ---------------------------------------------------------------- parent/child wiring (a fake ncu)

FAKE_NCU = r'''#!{python}
"""Stands in for ncu: records its flags, writes a canned log and the child's JSON, as the real pair would."""
import json, sys
argv = sys.argv[1:]
log = argv[argv.index("--log-file") + 1]
out = argv[argv.index("--out") + 1]
csv = {csv!r}
open(log, "w").write(csv)
json.dump({{"status": "ok", "stage": "region", "ncu_argv": argv, "persistent_bytes": 123}}, open(out, "w"))
'''


def test_run_attempt_wires_ncu_flags_log_and_child(tmp_path):
    log = _details_log([("k_step", "1,000", "500", "byte"), (DRAIN_KERNEL, "9,000", "25", "byte")])
    script = tmp_path / "fake_ncu"
    script.write_text(FAKE_NCU.format(python=sys.executable, csv=log))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    opts = TrafficOptions(ncu=str(script))
    o = traffic.run_attempt(ATTEMPTS["ncu-kernel"], ["--target", "copy", "--nbytes", "64"], opts, tmp_path,
                            census={"kernels": ["k_step"], "copies": []})
    assert (o.status, o.read, o.write, o.kernels) == ("ok", 1000.0, 525.0, 1)
    argv = o.child["ncu_argv"]
    for flag in ("--profile-from-start off", "--clock-control none", "--cache-control none",
                 "--replay-mode kernel", "--print-units base"):
        assert flag in " ".join(argv)
    assert argv[argv.index("--metrics") + 1] == "dram__bytes_read.sum,dram__bytes_write.sum"
    assert argv[argv.index("--method") + 1] == "ncu" and "sweeps.suites.traffic_child" in argv


def test_range_replays_leave_out_profile_from_start(tmp_path):
    """ncu refuses --profile-from-start in range replay ("Option profile-from-start is not supported during range
    replay"), so range replays go without it."""
    for name, wanted in (("ncu-kernel", True), ("ncu-application", True), ("ncu-app-range", False),
                         ("ncu-range", False)):
        argv = " ".join(traffic.ncu_argv("ncu", ATTEMPTS[name], tmp_path / "log"))
        assert ("--profile-from-start off" in argv) == wanted, (name, argv)


def test_run_attempt_without_ncu_fails_with_the_reason(tmp_path):
    o = traffic.run_attempt(ATTEMPTS["ncu-kernel"], ["--target", "copy", "--nbytes", "64"],
                            TrafficOptions(ncu="no-such-ncu-binary"), tmp_path, census=None)
    assert o.status == "failed" and "not found" in o.message


def test_measure_cell_row_names_the_method_its_calibration_and_earlier_failures(tmp_path, monkeypatch):
    from artifact.results import COLUMNS
    child = {"status": "ok", "persistent_bytes": 10, "written_bytes": 5, "flops": 400.0,
             "flops_source": "cost()", "compulsory_bytes": 90.0, "max_abs_err": 1e-5}
    census = {"kernels": ["k"], "copies": []}
    monkeypatch.setattr(traffic, "_census", lambda *a: (census, None))

    def fake_attempt(attempt, target_args, opts, workdir, census_arg, device=None):
        if "--nbytes" in target_args:                                  # the calibration copies
            n = int(target_args[target_args.index("--nbytes") + 1])
            return Outcome("ok", 1.01 * n, 0.99 * n, child={"expected_read": n, "expected_write": n})
        assert census_arg is census and "--cell" in target_args
        if attempt.name == "ncu-kernel":
            return Outcome("failed", message="ncu could not profile ['fused_recurrent']")
        return Outcome("ok", 80.0, 20.4, kernels=1, child=child)

    monkeypatch.setattr(traffic, "run_attempt", fake_attempt)
    cell = {"suite": "traffic", "path": "onela", "geometry": "qwen3_5_0_8b", "R": 4, "W": 512, "T": 2,
            "prompt_len": 1024, "lineage": "beam", "seed": 0, "config_hash": "h1"}
    cals = {}
    row = traffic.measure_cell(cell, TrafficOptions(calibrate_bytes=(1 << 30,)), tmp_path, cals)
    assert set(row) <= set(COLUMNS)
    assert (row["status"], row["dram_read_bytes"], row["dram_write_bytes"], row["flops"]) == ("ok", 80, 20, 400.0)
    assert row["reason"].startswith("method ncu-kernel-retry;") and "calib copy 1GiB r/w 1.010/0.990" in row["reason"]
    assert "earlier: ncu-kernel: ncu could not profile ['fused_recurrent']" in row["reason"]
    assert list(cals) == ["ncu-kernel-retry"]
    side = json.loads((tmp_path / "h1.json").read_text())
    assert side["attempt"] == "ncu-kernel-retry" and side["census"] == census


def test_measure_cell_reason_names_a_paths_own_gate(tmp_path, monkeypatch):
    """Like the operator suite: a path checked at its own documented tolerance says so in the row's reason."""
    child = {"status": "ok", "persistent_bytes": 10, "written_bytes": 5, "flops": 4.0, "flops_source": "cost()",
             "compulsory_bytes": 9.0, "max_abs_err": 6e-4, "tolerance": 1e-3}
    monkeypatch.setattr(traffic, "_census", lambda *a: ({"kernels": ["k"], "copies": []}, None))
    monkeypatch.setattr(traffic, "run_attempt", lambda attempt, args, *a, **k: Outcome(
        "ok", 8.0, 2.0, kernels=1, child=child if "--cell" in args else {"expected_read": 8, "expected_write": 2}))
    cell = {"suite": "traffic", "path": "vllm_prefix_replay", "geometry": "qwen3_5_0_8b", "R": 4, "W": 512, "T": 2,
            "prompt_len": 1024, "lineage": "beam", "seed": 0, "config_hash": "h2", "tolerance": 4.88e-4}
    row = traffic.measure_cell(cell, TrafficOptions(calibrate_bytes=(8,)), tmp_path, {})
    assert row["status"] == "ok"
    assert row["reason"].startswith("gated at vllm_prefix_replay's documented tolerance 1.00e-03, not the run's 4.88e-04;")
    child.update(tolerance=4.88e-4)
    row = traffic.measure_cell(cell, TrafficOptions(calibrate_bytes=(8,)), tmp_path, {})
    assert row["reason"].startswith("method ")                   # the run's own gate: nothing to say


# ---------------------------------------------------------------- FLOPs

def test_analytic_flops_by_hand_on_a_tiny_shape():
    geo = Geometry(hk=1, hv=2, k=2, v=3)          # VK = 6
    R, W, T = 1, 2, 2                             # 4 (beam, value head) pairs per step
    # fullstate, per pair and step: S k 2*6 + update 3*6 + S q 2*6 + delta 3*3 = 51
    assert analytic_flops("fullstate", geo, R, W, T)["total"] == 4 * 2 * 51
    # projection replay: t=0: 4*6 + (6*3 + 2*2) = 46; t=1: 46 + one record (4*2 + 4*3) = 66
    assert analytic_flops("projection_replay", geo, R, W, T)["total"] == 4 * (46 + 66)
    # state replay with a 1-token tail: t=0 replays 1 token (2*6 + 3*6 + 3*3 = 39) then 51; t=1 replays 2
    assert analytic_flops("state_replay", geo, R, W, T, replay_tail=1)["total"] == 4 * ((39 + 51) + (2 * 39 + 51))
    with pytest.raises(ValueError):
        analytic_flops("chunked", geo, R, W, T)


@pytest.mark.parametrize("algorithm", ["fullstate", "projection_replay"])
def test_state_products_match_torch_flop_counter_on_the_references(algorithm):
    from torch.utils.flop_counter import FlopCounterMode

    from artifact.reference import fullstate_decode
    from oracles import replay_decode
    from artifact.workload import make_workload
    geo = Geometry(hk=2, hv=4, k=8, v=16)
    wl = make_workload(geo, 2, 3, 3, prompt_len=4)
    with FlopCounterMode(display=False) as fc:
        (fullstate_decode if algorithm == "fullstate" else replay_decode)(wl, torch.float64)
    assert analytic_flops(algorithm, geo, 2, 3, 3)["state_matvec"] == fc.get_total_flops()


def test_projection_replay_count_is_onelas_own_cost():
    onela = pytest.importorskip("kernels.onela")
    from artifact.workload import make_workload
    wl = make_workload(Geometry(2, 4, 8, 16), 2, 5, 4, prompt_len=4)
    assert onela.onela_cost(wl)["flops"] == analytic_flops("projection_replay", wl.geometry, 2, 5, 4)["total"]


def test_onela_step_bytes_split_the_compulsory_bytes_by_step():
    """tools.measure_launch_floor streams each step's bytes: per step they add up to onela_cost's total, every step
    writes the same (o, the new GTR) plus its ancestry row, and a step reads more than step 0 by exactly the
    distinct ancestral records it replays."""
    onela = pytest.importorskip("kernels.onela")
    from artifact.ancestry import build
    from artifact.workload import make_workload
    geo = Geometry(2, 4, 8, 16)
    wl = make_workload(geo, 2, 5, 4, lineage="beam", seed=1, prompt_len=4)
    steps = onela.onela_step_bytes(wl)
    assert len(steps) == 4 and sum(r + w for r, w in steps) == onela.onela_cost(wl)["compulsory_bytes"]
    anc = build(wl.parents)
    record = geo.hv * (4 + 2 * geo.v) + geo.hk * 2 * geo.k
    for t, (read, written) in enumerate(steps):
        distinct = sum(anc[t, r, :, j].unique().numel() for r in range(2) for j in range(t))
        assert read - steps[0][0] == distinct * record
        assert written - steps[0][1] == 2 * 5 * t * 8


def test_path_flops_prefers_cost_then_the_algorithm_class():
    from artifact.paths import get_path
    from artifact.workload import make_workload
    wl = make_workload(Geometry(1, 2, 4, 4), 1, 2, 2, prompt_len=2)
    flops, source, _ = traffic_child.path_flops(get_path("reference_fullstate"), wl)
    assert source == "analytic:fullstate" and flops == analytic_flops("fullstate", wl.geometry, 1, 2, 2)["total"]
    modelled = SimpleNamespace(name="x", cost=lambda wl: {"flops": 7, "compulsory_bytes": 9, "rate": "tf32"})
    assert traffic_child.path_flops(modelled, wl) == (7.0, "cost()", 9.0)
    replay = SimpleNamespace(name="vllm_prefix_replay", cost=lambda wl: None)
    flops, source, _ = traffic_child.path_flops(replay, wl)
    assert math.isnan(flops) and "replay_tail_len" in source
    replay.replay_tail_len = 3
    assert traffic_child.path_flops(replay, wl)[0] == analytic_flops("state_replay", wl.geometry, 1, 2, 2, 3)["total"]


# ---------------------------------------------------------------- the child on a CPU, and the runner off-GPU

def _child(tmp_path, cell, method="dry"):
    out = tmp_path / "child.json"
    traffic_child.main(["--target", "path", "--cell", json.dumps(cell), "--method", method, "--out", str(out),
                        "--device", "cpu"])
    return json.loads(out.read_text())


def test_child_builds_the_sweeps_workload_checks_and_counts(tmp_path):
    cell = {"path": "reference_fullstate", "geometry": "qwen3_5_0_8b", "R": 1, "W": 2, "T": 2, "prompt_len": 3,
            "lineage": "beam", "seed": 0}
    rec = _child(tmp_path, cell)
    assert rec["status"] == "ok", rec
    assert rec["max_abs_err"] <= 1e-6                      # the reference checked against itself
    geo = Geometry(16, 16, 128, 128)
    assert rec["flops"] == analytic_flops("fullstate", geo, 1, 2, 2)["total"]
    assert rec["persistent_bytes"] == 1 * 2 * geo.state_bytes
    assert _child(tmp_path, cell, method="ncu")["status"] == "failed"   # counters need a GPU, and say so


def test_drain_and_copy_kernels_read_and_copy_what_they_should(device):
    """The helper kernels of the region: the drain reads every element once; the copy copies."""
    from sweeps.suites.traffic_child import _calib_copy_kernel, read_all
    x = torch.randn(5000, device=device)
    partial = torch.zeros(3, device=device)
    read_all(x, partial, block=256)                  # 7 rounds of 3 programs x 256, the last one partial
    assert float(partial.sum()) == pytest.approx(float(x.sum()), abs=1e-2)
    dst = torch.empty_like(x)
    _calib_copy_kernel[(triton_cdiv(x.numel(), 1024),)](x, dst, x.numel(), BLOCK=1024)
    assert torch.equal(dst, x)


def triton_cdiv(a, b):
    return -(-a // b)


def test_child_reports_a_skip_for_a_path_that_cannot_run(tmp_path, monkeypatch):
    from artifact import paths
    monkeypatch.setitem(paths.PATHS, "ghost", "no_such_module:Ghost")
    rec = _child(tmp_path, {"path": "ghost", "geometry": "not_registered", "HK": 2, "HV": 2, "K": 16, "V": 16,
                            "R": 1, "W": 2, "T": 2, "prompt_len": 3})
    assert rec["status"] == "skipped" and "no_such_module" in rec["reason"]


def test_run_cells_off_gpu_yields_each_cell_skipped_and_unchanged(tmp_path):
    cells = [{"suite": "traffic", "path": "onela", "R": 4, "config_hash": "abc"},
             {"suite": "traffic", "path": "vllm_fullstate", "R": 4, "config_hash": "def"}]
    started = []
    ctx = SimpleNamespace(results_dir=tmp_path, run_id="r", on_gpu=False, device=torch.device("cpu"),
                          started=started.append)
    rows = list(traffic.run_cells(None, cells, ctx))
    assert [r["config_hash"] for r in rows] == ["abc", "def"] and started == cells
    assert all(r["status"] == "skipped" and "GPU" in r["reason"] for r in rows)


# ---------------------------------------------------------------- on the H200

needs_ncu = pytest.mark.skipif(shutil.which("ncu") is None, reason="Nsight Compute (ncu) not on PATH")


def gpu_shared_by_workers(workers: int, gpus: int) -> str | None:
    """Why a test that reads device-wide DRAM counters cannot run in this pytest session (None: it can). ncu counts
    every kernel's bytes on the GPU, so pytest-xdist workers sharing it add their traffic to the count."""
    if workers > max(gpus, 1):
        return (f"ncu's DRAM counters are device-wide and {workers} pytest-xdist workers share {max(gpus, 1)} GPU(s): "
                f"run this test without -n, or with -n at most the GPU count")
    return None


@pytest.fixture
def gpu_to_itself():
    reason = gpu_shared_by_workers(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
                                   int(os.environ.get("ONELA_XDIST_GPUS", "1")))
    if reason:
        pytest.skip(reason)


def test_device_wide_counters_skip_only_where_workers_share_a_gpu():
    assert gpu_shared_by_workers(1, 1) is None and gpu_shared_by_workers(8, 8) is None
    assert gpu_shared_by_workers(1, 0) is None          # no xdist: the conftest records no GPU count
    reason = gpu_shared_by_workers(12, 1)
    assert reason and "12 pytest-xdist workers share 1 GPU" in reason
    assert gpu_shared_by_workers(9, 8)


def _copy_ratios(attempt_name, tmp_path, sizes=(1 << 30, 16 << 20)):
    cal = calibrate(ATTEMPTS[attempt_name], TrafficOptions(calibrate_bytes=sizes), tmp_path)
    return cal, [(s["read_ratio"], s["write_ratio"]) for s in cal["sizes"].values()]


@pytest.mark.gpu
@needs_ncu
@pytest.mark.parametrize("attempt", ["ncu-kernel", "ncu-app-range"])
def test_ncu_counts_a_copy_of_known_size(attempt, tmp_path, gpu_to_itself):
    """1 GiB: the copy itself; 16 MiB: fits in L2, so its writes reach DRAM only through the drain. Both methods
    count a few MiB of writes more than the copy makes, whatever its size (H200: 3.5-3.8 MiB at 16 MiB, 2.8-3.3 MiB
    at 1 GiB in the calibrations of `results/experiments/traffic_calibration/`): the bound says so."""
    cal, ratios = _copy_ratios(attempt, tmp_path)
    (big_r, big_w), (small_r, small_w) = ratios
    assert big_r == pytest.approx(1.0, rel=0.05) and big_w == pytest.approx(1.0, rel=0.05), cal
    assert small_r == pytest.approx(1.0, rel=0.05), cal
    excess_mib = (small_w - 1.0) * 16
    assert -0.8 <= excess_mib <= 5.0, cal          # the drain sees the writes; the excess stays a few MiB


@pytest.mark.gpu
def test_pm_sampling_counts_a_copy_of_known_size(tmp_path, gpu_to_itself):
    pytest.importorskip("cupti.pm_sampling", reason="cupti-python not installed (a fallback method)")
    cal, ratios = _copy_ratios("pm-sampling", tmp_path, sizes=(1 << 30,))
    read, write = ratios[0]
    assert read == pytest.approx(1.0, rel=0.05) and write == pytest.approx(1.0, rel=0.05), cal


@pytest.mark.gpu
@needs_ncu
def test_fullstate_run_writes_at_least_its_states(tmp_path, gpu_to_itself):
    """The plain-torch FullState stores a fresh fp32 state per beam every step, 256 MiB a step here (> L2):
    its counted DRAM writes must cover them, and its reads the parents' states of steps 1..T-1."""
    cell = {"suite": "traffic", "path": "reference_fullstate", "geometry": "qwen3_5_0_8b", "R": 1, "W": 256,
            "T": 3, "prompt_len": 64, "lineage": "beam", "seed": 0, "config_hash": "gpu_fullstate"}
    ctx = SimpleNamespace(results_dir=tmp_path, run_id="gpu", on_gpu=True, device=torch.device("cuda"),
                          started=lambda c: None)
    cfg = {"traffic": {"ladder": ["ncu-kernel", "ncu-kernel-retry", "ncu-app-range"],
                       "calibrate_bytes": [16 << 20]}}
    (row,) = traffic.run_cells(cfg, [cell], ctx)
    assert row["status"] == "ok", row["reason"]
    state_step = 256 * Geometry(16, 16, 128, 128).state_bytes
    assert row["dram_write_bytes"] >= 0.95 * 3 * state_step, row
    assert row["dram_read_bytes"] >= 0.95 * 2 * state_step, row
    assert row["flops"] == analytic_flops("fullstate", Geometry(16, 16, 128, 128), 1, 256, 3)["total"]
    assert os.path.exists(tmp_path / "traffic" / "gpu" / "gpu_fullstate.json")


def test_the_drain_kernel_has_the_name_the_runner_looks_for():
    from sweeps.suites import traffic_child
    assert getattr(traffic_child._l2_read_kernel, "fn", traffic_child._l2_read_kernel).__name__ == DRAIN_KERNEL
