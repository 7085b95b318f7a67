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
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from artifact.workload import Geometry
from sweeps.suites import traffic, traffic_child
from sweeps.suites.traffic import (ATTEMPTS, DRAIN_KERNEL, NcuOutput, NcuResult, Outcome, TrafficOptions, calibrate,
                                   calibration_note, measure_with_fallback, ncu_outcome, parse_ncu_output,
                                   per_kernel_outcome, to_bytes)

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


def test_only_the_measuring_child_runs_the_fp32_check(tmp_path, monkeypatch):
    """The census child lists the kernels of the run and is started without the check (--no-check); the child that
    measures the counters checks the same run against FP32 FullState, as the run's options say."""
    started = []

    def run(argv, **kw):
        started.append(argv)
        out = Path(argv[argv.index("--out") + 1])
        out.write_text(json.dumps({"status": "ok", "census": {"kernels": ["k"], "copies": []}}))
        return subprocess.CompletedProcess(argv, 0, "", "")
    monkeypatch.setattr(traffic.subprocess, "run", run)
    args = ["--target", "path", "--cell", "{}"]
    for check in (True, False):
        started.clear()
        opts = TrafficOptions(check=check, ladder=("torch-profiler",))
        assert traffic._census(args, opts, tmp_path, "cuda:0")[0] == {"kernels": ["k"], "copies": []}
        traffic.run_attempt(ATTEMPTS["torch-profiler"], args, opts, tmp_path, None, "cuda:0")
        census, measuring = started
        assert census[census.index("--method") + 1] == "census" and "--no-check" in census
        assert ("--no-check" in measuring) is (not check)


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


# ---------------------------------------------------------------- FLOPs: the one cost model

def _fullstate_flops(geo, R, W, T):
    from artifact.cost import FullState
    return sum(FullState().step_flops(geo, R * W, T))


def test_flops_of_each_algorithm_by_hand_on_a_tiny_shape():
    """docs/methods.md §1, "The cost model", counted by hand: HK=1 HV=2 K=2 V=3 (VK = 6), per beam and step."""
    from artifact.cost import FullState, ProjectionReplay, RecordReplay, TokenReplay
    geo = Geometry(hk=1, hv=2, k=2, v=3)
    norms = 1 * 2 * 3 * 2                                   # q-hat and k-hat: 3K each per key head
    # FullState: per value head S k 2VK + decay VK + update 2VK + S q 2VK = 7VK, delta 2V; 2 (7*6 + 2*3) + 12
    assert FullState().step_flop_parts(geo, 0) == {"state_products": 2 * 24, "state_updates": 2 * 18,
                                                   "records": 0, "vectors": 2 * 6, "norms": norms}
    assert FullState().step_flops(geo, 4, 2) == [4 * 108, 4 * 108]
    # projection replay: 4VK + per record 4V (value heads) and 4K (key heads) + 6V + 2K
    assert ProjectionReplay().step_flops(geo, 1, 3) == [2 * (24 + 18) + 4 + norms + 32 * t for t in range(3)]
    assert ProjectionReplay().step_flops(geo, 1, 3) == [100, 132, 164]
    # GQA: the K-dots are per key head, so 4 value heads on one key head add 4 x 4V but 4K once per record
    gqa = Geometry(hk=1, hv=4, k=2, v=3)
    assert ProjectionReplay().step_flops(gqa, 1, 2)[1] - ProjectionReplay().step_flops(gqa, 1, 2)[0] == 4 * 12 + 8
    # record replay: VK (1 + 2t) + 4VK + 4V per value head, 2K + norms per key head
    assert RecordReplay().step_flops(geo, 1, 3) == [100, 124, 148]
    # token replay with a 1-token tail: each replayed token 5VK + 2V per value head + 3K, then a FullState token
    assert TokenReplay().step_flops(geo, 1, 2, tail_len=1) == [78 + 108, 2 * 78 + 108]
    with pytest.raises(ValueError, match="tail_len=1"):
        FullState().step_flops(geo, 1, 2, tail_len=1)
    with pytest.raises(ValueError, match="rate='fp16_flop_per_s'"):
        FullState(rate="fp16_flop_per_s").cost(SimpleNamespace(geometry=geo, R=1, W=1, T=1,
                                                               q=torch.empty(0, dtype=torch.bfloat16)))


@pytest.mark.parametrize("name", ["reference_fullstate", "reference_replay"])
def test_state_products_match_torch_flop_counter_on_the_references(name):
    """The cost model's products with a [V, K] state are what torch.utils.flop_counter counts when the plain-torch
    reference runs (its einsums; the element-wise work it does not count)."""
    from torch.utils.flop_counter import FlopCounterMode

    from artifact.paths import get_path
    from artifact.reference import fullstate_decode
    from oracles import replay_decode
    from artifact.workload import make_workload
    geo = Geometry(hk=2, hv=4, k=8, v=16)
    wl = make_workload(geo, 2, 3, 3, prompt_len=4)
    with FlopCounterMode(display=False) as fc:
        (fullstate_decode if name == "reference_fullstate" else replay_decode)(wl, torch.float64)
    algorithm = get_path(name).algorithm
    assert sum(2 * 3 * algorithm.step_flop_parts(geo, t)["state_products"] for t in range(3)) == fc.get_total_flops()


def test_every_caller_counts_a_paths_flops_and_bytes_alike():
    """The traffic child's FLOPs (Fig 8c's arithmetic intensity), the operator row's flops and floor inputs, the
    launch floor's per-step bytes, beam_scaling's per-step floors and the full model's recurrent part all come from
    the path's one cost(), for every registered path; OneLA and its plain-torch reference, and every FullState path,
    count the same FLOPs."""
    from artifact.model.config import TINY
    from artifact.model.cost import recurrent_part
    from artifact.paths import PATHS, get_path
    from artifact.workload import make_workload
    from sweeps.suites import beam_scaling
    geo = TINY.geometry
    model = SimpleNamespace(cfg=TINY, dtype=torch.bfloat16)
    wl = make_workload(geo, 2, 3, 3, lineage="beam", seed=2, prompt_len=4)
    flops = {}
    for name in PATHS:
        path = get_path(name)
        cost = path.cost(wl)
        assert cost is not None, name
        flops[name] = cost["flops"]
        assert traffic_child.path_flops(path, wl)[::2] == (float(cost["flops"]), float(cost["compulsory_bytes"]))
        steps = beam_scaling.step_costs(path, wl)
        assert [s["flops"] for s in steps] == cost["step_flops"] and sum(cost["step_flops"]) == cost["flops"]
        assert [s["compulsory_bytes"] for s in steps] == cost["step_bytes"]
        rec = recurrent_part(path, model, 2, 3, 3, wl.parents)
        n = len(TINY.gdn_layers)
        assert (rec["compulsory_bytes"], rec["flops"]) == (n * cost["compulsory_bytes"], n * cost["flops"]), name
    assert flops["onela"] == flops["reference_replay"]
    fullstate = {n: f for n, f in flops.items() if get_path(n).algorithm.name == "fullstate"}
    assert len(fullstate) == 13 and len(set(fullstate.values())) == 1, fullstate
    assert flops["reference_fullstate"] == _fullstate_flops(geo, 2, 3, 3)


def test_path_flops_says_why_there_is_no_count():
    from artifact.workload import make_workload
    wl = make_workload(Geometry(1, 2, 4, 4), 1, 2, 2, prompt_len=2)
    none = SimpleNamespace(name="x", cost=lambda wl: None)
    flops, source, _ = traffic_child.path_flops(none, wl)
    assert math.isnan(flops) and "declares no algorithm" in source

    def broken(wl):
        raise KeyError("q")
    flops, source, _ = traffic_child.path_flops(SimpleNamespace(name="y", cost=broken), wl)
    assert math.isnan(flops) and "cost() raised KeyError" in source


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
    assert rec["flops"] == _fullstate_flops(geo, 1, 2, 2)
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


@pytest.mark.parametrize("method", ["ncu", "pm_sampling", "torch_profiler"])
def test_the_child_settles_the_path_before_the_region_and_allocates_nothing_between(method, monkeypatch):
    """The plan around the measured region, with the GPU faked: the L2 buffers are allocated (and written) before
    the cell's workload exists; after the warm-ups and the check the path runs once more untimed (the settle run,
    whose freed blocks the region's run() takes again), then L2 is cleaned, the region runs, the drain follows.
    No buffer is made and nothing is released between the settle run and the region."""
    events = []

    class Bufs:
        b, nbytes = "B", 1

        def __init__(self, device):
            events.append("buffers")

        def clean(self):
            events.append("clean")

        def drain(self):
            events.append("drain")

        def read(self, buf):
            events.append("drain")

    class Target:
        info, skip_reason, fail_reason = {}, None, None

        def __init__(self, cell, device, check, tolerance):
            events.append("target")

        def run(self):
            events.append("run")

        def settle(self):
            events.append("settle")

    monkeypatch.setattr(traffic_child, "L2Buffers", Bufs)
    monkeypatch.setattr(traffic_child, "PathTarget", Target)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: events.append("sync"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (1, 2))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("empty_cache"))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: events.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: events.append("stop"))
    ran = {}
    monkeypatch.setattr(traffic_child, "region_pm_sampling", lambda t, b, i: ran.update(
        pm=[b.clean(), t.run(), b.drain()]) or {})
    monkeypatch.setattr(traffic_child, "region_torch_profiler", lambda t, b: ran.update(
        tp=[b.clean(), t.run(), b.drain()]) or {})
    args = traffic_child.parse_args(["--target", "path", "--cell", "{}", "--method", method, "--out", "x",
                                     "--device", "cuda"])
    rec = {"status": "ok"}
    traffic_child.run_child(args, rec)
    assert rec["status"] == "ok" and rec["stage"] == "region", rec
    plan = [e for e in events if e not in ("start", "stop", "sync")]
    assert plan == ["buffers", "target", "settle", "clean", "run", "drain"], events
    between = events[events.index("settle") + 1:events.index("run")]
    assert set(between) <= {"sync", "clean", "start"} and between[0] == "sync", events   # settled, then cleaned


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


def test_run_cells_primes_once_on_a_gpu_and_keeps_the_priming_out_of_every_row(tmp_path, monkeypatch):
    """A fresh machine's first profiled process counts extra writes (docs/methods.md §6): one discarded child runs
    the first cell under the ladder's first method before any row is measured; its bytes go to the env record."""
    calls = []

    def fake_attempt(attempt, target_args, opts, workdir, census_arg, device=None):
        calls.append((attempt.name, json.loads(target_args[target_args.index("--cell") + 1])["R"]
                      if "--cell" in target_args else "copy"))
        if "--nbytes" in target_args:
            n = int(target_args[target_args.index("--nbytes") + 1])
            return Outcome("ok", n, n, child={"expected_read": n, "expected_write": n})
        first = len(calls) == 1
        return Outcome("ok", 80.0, 29.0 if first else 20.0, kernels=1, child={"status": "ok", "flops": 1.0})

    monkeypatch.setattr(traffic, "run_attempt", fake_attempt)
    monkeypatch.setattr(traffic, "_census", lambda *a: ({"kernels": ["k"], "copies": []}, None))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    cells = [{"suite": "traffic", "path": "onela", "geometry": "qwen3_5_0_8b", "R": r, "W": 512, "T": 2,
              "prompt_len": 1024, "lineage": "beam", "seed": 0, "config_hash": f"p{r}"} for r in (4, 16)]
    ctx = SimpleNamespace(results_dir=tmp_path, run_id="r", on_gpu=True, device="cuda:0", started=lambda c: None)
    cfg = {"traffic": {"ladder": ["ncu-kernel"], "calibrate_bytes": [16 << 20]}}
    rows = list(traffic.run_cells(cfg, cells, ctx))
    assert calls == [("ncu-kernel", 4), ("ncu-kernel", 4), ("ncu-kernel", "copy"), ("ncu-kernel", 16)]
    assert [r["dram_write_bytes"] for r in rows] == [20, 20]
    rec = json.loads((tmp_path / "env" / "r.traffic.json").read_text())
    assert rec["priming"]["status"] == "ok" and rec["priming"]["dram_write_bytes"] == 29.0
    assert rec["priming"]["cell"]["R"] == 4 and rec["priming"]["attempt"] == "ncu-kernel"


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
    assert row["flops"] == _fullstate_flops(Geometry(16, 16, 128, 128), 1, 256, 3)
    assert os.path.exists(tmp_path / "traffic" / "gpu" / "gpu_fullstate.json")


def test_the_drain_kernel_has_the_name_the_runner_looks_for():
    from sweeps.suites import traffic_child
    assert getattr(traffic_child._l2_read_kernel, "fn", traffic_child._l2_read_kernel).__name__ == DRAIN_KERNEL


@pytest.mark.gpu
@needs_ncu
def test_repeated_onela_traffic_runs_agree_within_2_percent(tmp_path, gpu_to_itself):
    """The Fig 8 cell (R=4 W=512 O=3) measured three times, each in its own child process: the read + write
    totals agree within 2 % (docs/methods.md, "DRAM traffic"). A fresh machine's first profiled process is the case
    to watch (the suite's discarded priming child takes it): run this test first thing on one
    (`python -m pytest -m gpu tests/test_traffic.py -k repeated`); the log prints the priming child's bytes too."""
    cells = [{"suite": "traffic", "path": "onela", "geometry": "qwen3_5_0_8b", "R": 4, "W": 512, "T": 2,
              "prompt_len": 1024, "lineage": "beam", "seed": 0, "config_hash": f"repeat{i}"} for i in range(3)]
    ctx = SimpleNamespace(results_dir=tmp_path, run_id="gpu", on_gpu=True, device=torch.device("cuda"),
                          started=lambda c: None)
    cfg = {"traffic": {"ladder": ["ncu-kernel", "ncu-kernel-retry", "ncu-app-range"],
                       "calibrate_bytes": [16 << 20]}}
    rows = list(traffic.run_cells(cfg, cells, ctx))
    assert all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    totals = [r["dram_read_bytes"] + r["dram_write_bytes"] for r in rows]
    priming = json.loads((tmp_path / "env" / "gpu.traffic.json").read_text())["priming"]
    print(f"priming: {priming['status']}, read {priming['dram_read_bytes'] / 2**20:.1f} MiB, "
          f"written {priming['dram_write_bytes'] / 2**20:.1f} MiB" if priming["status"] == "ok" else priming)
    for r in rows:     # the runs' MiB, for the log (-rA)
        print(f"read {r['dram_read_bytes'] / 2**20:.1f} MiB, written {r['dram_write_bytes'] / 2**20:.1f} MiB")
    assert max(totals) <= 1.02 * min(totals), [t / 2**20 for t in totals]
