"""The per-component decode breakdown (artifact.model.breakdown, tools.decode_breakdown, plots.fig_breakdown):
kernel attribution on synthetic profiler traces, the component floors against the Fig 6 floor, the tool on the
tiny model (CPU, eager), and the figure / REPORT section with and without data. The GPU run is the lead's
(`python -m tools.decode_breakdown`); nothing here is a performance number."""
from __future__ import annotations

import csv
import json
import math

import pandas as pd
import pytest
import torch

from artifact.model import breakdown as bd
from artifact.model.regions import COMPONENTS, PREFIX, REGIONS, region

UNATTR = bd.UNATTRIBUTED
CEILINGS = {"copy_bytes_per_s": 4e12, "bf16_flop_per_s": 7e14, "tf32_flop_per_s": 3.6e14, "fp32_flop_per_s": 5e13}


# ---- regions ----

def test_every_region_maps_to_known_components_with_odd_phases():
    for name, spec in REGIONS.items():
        parts = (spec,) if isinstance(spec, str) else spec
        assert set(parts) <= set(COMPONENTS), name
        assert len(parts) % 2 == 1, name
    assert {c for s in REGIONS.values() for c in ((s,) if isinstance(s, str) else s)} == set(COMPONENTS)
    with pytest.raises(ValueError, match="unknown decode region"):
        region("mlp_typo")


def test_regions_are_no_ops_unless_a_profiler_records():
    from contextlib import nullcontext
    assert isinstance(region("lm_head"), nullcontext)


# ---- GEMM phases ----

def test_split_phases_follows_the_gemms_of_a_block():
    phases = REGIONS["mlp"]            # ln2 | gate_up | silu*up | down (adding into x) | nothing
    names = ["triton_per_fused_rms_0", "Memset (Device)", "sm90_xmma_gemm_bf16", "splitKreduce_kernel",
             "triton_poi_fused_silu_mul_1", "nvjet_sm90_tst_128x64"]
    memsets = [n.startswith("Memset") for n in names]
    assert bd.split_phases(names, memsets, phases) == ["norms", "mlp", "mlp", "mlp", "mlp", "mlp"]
    # one GEMM where the block has two: not split
    assert bd.split_phases(names[:5], memsets[:5], phases) is None
    assert bd.split_phases(["aten::to", "aten::matmul"], [False, False], REGIONS["attn_norm_proj"]) == \
        ["norms", "attn_proj"]
    # our kernels: the norm, the gate_up GEMM with the SwiGLU in its epilogue, then the down GEMM -- two GEMMs
    # back to back, the phase between them empty
    ours = ["_rms_norm_kernel", "_gemm_kernel", "_gemm_kernel"]
    assert bd.split_phases(ours, [False] * 3, phases) == ["norms", "mlp", "mlp"]
    assert bd.split_phases(ours[:2], [False] * 2, phases) is None
    # the second GEMM's workspace memset right after the first GEMM starts the second
    assert bd.split_phases([*ours[:2], "Memset (Device)", "nvjet_sm90_tst_128x64"], [False, False, True, False],
                           phases) == ["norms", "mlp", "mlp", "mlp"]


# ---- attribution on synthetic traces ----

class Trace:
    """A Chrome trace as torch.profiler writes it: ranges (user_annotation), launches (cuda_runtime) with a
    correlation id, device ops (kernel / gpu_memcpy) carrying the same id."""

    def __init__(self):
        self.events, self.corr = [], 0

    def range(self, name, ts, dur):
        self.events.append({"ph": "X", "cat": "user_annotation", "name": PREFIX + name, "ts": ts, "dur": dur,
                            "pid": 1, "tid": 1})

    def launch(self, ts, name="cudaLaunchKernel"):
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": 1, "pid": 1,
                            "tid": 1, "args": {"correlation": self.corr}})
        return self.corr

    def op(self, corr, name, start, dur, cat="kernel"):
        self.events.append({"ph": "X", "cat": cat, "name": name, "ts": start, "dur": dur, "pid": 0, "tid": 7,
                            "args": {"correlation": corr}})

    def dict(self):
        return {"traceEvents": list(self.events)}


# one call: (region, kernels) in launch order; mlp has 2 GEMMs
CALL = [("embed", ["embedding_kernel"]),
        ("attn_norm_proj", ["triton_rms_0", "nvjet_qkv"]),
        ("attn_prompt", ["copy_kernel", "flash_fwd_splitkv_kernel", "flash_fwd_splitkv_combine_kernel"]),
        ("gdn_recurrent", ["reduce_kernel", "Memcpy DtoH (Device -> Pageable)", "_onela_main_ws_kernel"]),
        ("attn_o_proj", ["nvjet_o"]),
        ("mlp", ["triton_rms_1", "nvjet_gu", "triton_silu_2", "nvjet_dn"]),
        ("lm_head", ["nvjet_lm"])]
EAGER_ONLY = {"reduce_kernel", "Memcpy DtoH (Device -> Pageable)"}    # the host-side parents check


def eager_trace(calls=2):
    tr, t = Trace(), 0.0
    for _ in range(calls):
        call_start = t
        for name, kernels in CALL:
            start = t
            for k in kernels:
                c = tr.launch(t + 1)
                tr.op(c, k, t + 5, 2.0, "gpu_memcpy" if k.startswith("Memcpy") else "kernel")
                t += 10
            tr.range(name, start, t - start)
        tr.range("call", call_start - 0.5, t - call_start + 1)
        t += 100                                      # beam selection between calls: outside every range
        c = tr.launch(t - 50)
        tr.op(c, "topk_kernel", t - 45, 9.0)
    return tr.dict()


def graph_trace(calls=2, gap=1.0, extra=False):
    """Each call one cudaGraphLaunch; its kernels back to back with `gap` us between them, minus the eager-only
    ones; `extra` adds a replay kernel with no eager twin."""
    tr, t = Trace(), 0.0
    for _ in range(calls):
        c = tr.launch(t + 1, "cudaGraphLaunch")
        tr.range("call", t, 3)
        dev = t + 50
        names = [k for _, ks in CALL for k in ks if k not in EAGER_ONLY]
        if extra:
            names.insert(3, "graph_only_kernel")
        for k in names:
            tr.op(c, k, dev, 2.0)
            dev += 2.0 + gap
        t = dev + 100
    return tr.dict()


def test_eager_kernels_take_their_region_and_phase():
    ops, ranges, real = bd.parse_trace(eager_trace())
    assert real and len(ops) == 2 * (sum(len(k) for _, k in CALL) + 1)
    lab = bd.label_eager(ops, ranges)
    assert len(lab.ops) == 2 and not lab.notes
    comps = dict(zip([o.name for o in lab.ops[1]], lab.components[1]))
    assert comps["embedding_kernel"] == "embed" and comps["nvjet_qkv"] == "attn_proj"
    assert comps["triton_rms_0"] == "norms" and comps["flash_fwd_splitkv_kernel"] == "attn_prompt"
    assert comps["nvjet_o"] == "attn_proj" and [comps[k] for k in CALL[5][1]] == ["norms", "mlp", "mlp", "mlp"]
    assert "topk_kernel" not in comps                       # beam selection is outside the calls
    pc = bd.per_call(lab)
    assert pc["mlp"]["ops"] == 3 and pc["mlp"]["us"] == pytest.approx(6.0)
    assert pc["gdn_recurrent"]["ops"] == 3


def test_replayed_kernels_take_their_eager_twins_components():
    ops, ranges, _ = bd.parse_trace(eager_trace())
    eager = bd.label_eager(ops, ranges)
    gops, granges, _ = bd.parse_trace(graph_trace(gap=1.0))
    lab = bd.label_replay(gops, granges, eager)
    n = sum(len(k) for _, k in CALL) - len(EAGER_ONLY)
    assert [len(x) for x in lab.ops] == [n, n] and not lab.notes
    assert UNATTR not in {c for cs in lab.components for c in cs}
    pc = bd.per_call(lab)
    assert pc["gdn_recurrent"]["ops"] == 1 and pc["mlp"]["ops"] == 3 and pc["attn_prompt"]["ops"] == 3
    assert pc["_span"]["us"] == pytest.approx(n * 2.0 + (n - 1) * 1.0)
    assert pc[bd.IDLE]["us"] == pytest.approx((n - 1) * 1.0)            # the gaps between the replay's kernels
    assert sum(v["us"] for k, v in pc.items() if not k.startswith("_")) == pytest.approx(pc["_span"]["us"])
    rows = bd.kernel_table(lab, eager)
    assert rows[0]["eager_us"] == 2.0 and {r["component"] for r in rows} <= set(COMPONENTS)
    # a replay kernel without an eager twin is counted, as unattributed, and noted
    lab2 = bd.label_replay(*bd.parse_trace(graph_trace(extra=True))[:2], eager)
    assert bd.per_call(lab2)[UNATTR]["ops"] == 1 and any("no eager twin" in n for n in lab2.notes)


def test_device_time_per_call_counts_what_each_call_launched():
    """device_us_per_call: per decode call, the device time (union of intervals) and count of the ops launched
    inside it; beam selection between calls is left out."""
    n = sum(len(k) for _, k in CALL)
    assert bd.device_us_per_call(eager_trace(calls=3)) == [(2.0 * n, n)] * 3
    tr = Trace()
    tr.range("call", 0, 10)
    for start in (20, 25, 40):                          # launched in the call; two overlap on the device
        tr.op(tr.launch(1 + start / 10), "k", start, 10.0)
    tr.op(tr.launch(50), "after", 60, 5.0)              # outside the call
    assert bd.device_us_per_call(tr.dict()) == [(25.0, 3)]


def test_an_overlapping_kernel_counts_from_the_end_of_the_one_before_it():
    """Under programmatic dependent launch b starts while a runs and waits for it: a keeps its whole time, b
    counts from a's end, and the components plus idle make the span."""
    tr = Trace()
    c = tr.launch(1, "cudaGraphLaunch")
    tr.range("call", 0, 3)
    tr.op(c, "a", 10, 10.0)
    tr.op(c, "b", 15, 10.0)        # starts before a ends
    tr.op(c, "c", 30, 5.0)
    tr.op(c, "d", 31, 2.0)         # wholly inside c: nothing of its own
    ops, ranges, _ = bd.parse_trace(tr.dict())
    assert bd.own_us(ops) == [10.0, 5.0, 5.0, 0.0] and bd.busy_us(ops) == pytest.approx(20.0)
    comps = [["mlp", "norms", "lm_head", "norms"]]
    pc = bd.per_call(bd.label_replay(ops, ranges, bd.Labelled([ops], comps, comps)))
    assert (pc["mlp"]["us"], pc["norms"]["us"], pc["lm_head"]["us"]) == (10.0, 5.0, 5.0)
    assert pc[bd.IDLE]["us"] == pytest.approx(5.0) and pc["_span"]["us"] == 25.0 and pc["norms"]["ops"] == 2


def test_a_kernel_without_its_launch_call_is_placed_by_its_external_id():
    """A trace without the runtime / driver call of a launch: the kernel's external id names the host op that
    was open at the launch (here an aten op inside the region), whose start places it."""
    tr = Trace()
    tr.range("call", 0, 100)
    tr.range("gdn_conv", 10, 20)
    tr.events.append({"ph": "X", "cat": "cpu_op", "name": "triton_poi_fused_conv", "ts": 12, "dur": 2, "pid": 1,
                      "tid": 1, "args": {"External id": 42}})
    tr.events.append({"ph": "X", "cat": "kernel", "name": "triton_poi_fused_conv", "ts": 40, "dur": 3,
                      "pid": 0, "tid": 7, "args": {"correlation": 999, "External id": 42}})
    lab = bd.label_eager(*bd.parse_trace(tr.dict())[:2])
    assert lab.components == [["gdn_conv"]]


def test_a_block_whose_gemms_do_not_show_is_kept_whole_and_noted():
    tr = Trace()
    tr.range("call", 0, 100)
    for i, k in enumerate(["triton_rms_0", "nvjet_gu", "triton_silu_1"]):
        tr.op(tr.launch(10 + i), k, 20 + 5 * i, 1.0)
    tr.range("mlp", 5, 50)
    lab = bd.label_eager(*bd.parse_trace(tr.dict())[:2])
    assert lab.components == [["unsplit:mlp"] * 3] and "GEMM" in lab.notes[0]


def test_cpu_run_uses_top_level_ops_without_views():
    m = torch.randn(8, 8)
    from torch.profiler import record_function
    trace = bd.trace_of(lambda: _cpu_work(m, record_function), cuda=False)
    ops, ranges, real = bd.parse_trace(trace)
    assert not real
    names = [o.name for o in ops]
    assert "aten::matmul" in names and "aten::mm" not in names and "aten::t" not in names


def _cpu_work(m, record_function):
    with record_function(PREFIX + "call"):
        with record_function(PREFIX + "lm_head"):
            (m @ m.t()).relu()


# ---- floors ----

@pytest.mark.parametrize("path", ["onela", "controlled_fullstate"])
def test_component_costs_add_up_to_the_fig6_floor(path):
    """Every byte and FLOP of decode_floor belongs to exactly one component; each component's floor is at most
    the whole model's, and together (each at its own bound) at least it."""
    from artifact.model.config import TINY
    from artifact.model.cost import component_costs, component_floor, decode_floor, model_components, model_part
    from artifact.model.network import HybridModel
    from artifact.paths import get_path
    m = HybridModel.random(TINY, seed=0)
    R, W, T, L = 2, 4, 3, 9
    parents = torch.randint(0, W, (T, R, W), generator=torch.Generator().manual_seed(0))
    costs = component_costs(m, get_path(path), R, W, T, L, parents)
    whole = decode_floor(m, get_path(path), R, W, T, L, parents, CEILINGS)
    assert set(costs) == set(COMPONENTS)
    assert sum(c["compulsory_bytes"] for c in costs.values()) == whole["compulsory_bytes"]
    assert sum(c["flops"] for c in costs.values()) == whole["flops"]
    assert model_part(m, R, W, T, L) == tuple(map(sum, zip(*model_components(m, R, W, T, L).values())))
    floors = [component_floor(c, CEILINGS, T)[0] for c in costs.values()]
    assert max(floors) <= whole["floor_ms"] / T * (1 + 1e-12)
    assert sum(floors) >= whole["floor_ms"] / T * (1 - 1e-12)
    assert costs["lm_head"]["compulsory_bytes"] >= T * m.lm_head.numel() * 2       # weights + logits
    assert costs["attn_prompt"]["flops"] > 0 and costs["ancestry"] == {"compulsory_bytes": 0, "flops": 0,
                                                                        "rate": "bf16_flop_per_s"}
    assert component_floor(costs["ancestry"], CEILINGS, T) == (0.0, "")
    # tied embeddings: the lookup reads no separate weight; the embedded tokens are written once per call
    assert costs["embed"]["compulsory_bytes"] == T * R * W * TINY.hidden_size * 2 and not costs["embed"]["flops"]
    for c in ("gdn_conv", "gdn_norm", "attn_qk_norm_rope", "norms"):     # activations have a floor
        assert component_floor(costs[c], CEILINGS, T)[0] > 0, c
    # the decode KV's fork copies: copy mode only (ancestry mode's K/V are stored by the q / k norm pass)
    assert (component_floor(costs["kv_state"], CEILINGS, T)[0] > 0) == (path == "controlled_fullstate")


# ---- the tool, end to end on the CPU ----

def test_tool_on_the_tiny_model_writes_rows_tables_and_env(tmp_path):
    pytest.importorskip("kernels.onela")
    from tools import decode_breakdown as tool
    out = tmp_path / "res"
    assert tool.main(["--cpu", "--out", str(out), "--R", "2", "--W", "4", "--prompts", "9", "--O", "3",
                      "--ceilings", json.dumps(CEILINGS)]) == 0
    rows = list(csv.DictReader(open(out / tool.CSV_NAME)))
    assert rows and set(rows[0]) == set(tool.COLUMNS)
    for path in ("onela", "controlled_fullstate"):
        mine = {r["component"]: r for r in rows if r["path"] == path}
        assert set(mine) == {*COMPONENTS, "idle", "span", "total"}, set(mine)     # nothing unattributed
        for c in ("mlp", "gdn_proj", "attn_proj", "gdn_recurrent", "gdn_conv", "gdn_norm", "attn_qk_norm_rope",
                  "attn_prompt", "attn_decode_kv", "norms", "lm_head"):
            assert float(mine[c]["measured_ms"]) > 0, (path, c)
        # copy mode forks the decode KV (kv_state); ancestry mode's step K/V are the q / k norm pass's stores
        assert (float(mine["kv_state"]["measured_ms"]) > 0) == (path == "controlled_fullstate"), path
        assert float(mine["mlp"]["max_abs_err"]) < 4.88e-4
        assert mine["mlp"]["method"] == "eager" and math.isnan(float(mine["total"]["measured_ms"]))
        parts = sum(float(mine[c]["bytes"]) for c in COMPONENTS)
        assert parts == pytest.approx(float(mine["total"]["bytes"]), rel=1e-12)
        assert float(mine["total"]["floor_ms"]) > 0 and mine["total"]["bound"]
    assert float({r["component"]: r for r in rows if r["path"] == "onela"}["ancestry"]["measured_ms"]) > 0
    (env,) = (out / "env").glob("full_model_breakdown-*.json")
    rec = json.loads(env.read_text())
    assert rec["ceilings"] == CEILINGS and len(rec["cells"]) == 2 and rec["suite"] == "full_model_breakdown"
    tables = sorted((out / "full_model_breakdown" / rec["run_id"]).glob("*.csv"))
    assert [t.name for t in tables] == ["controlled_fullstate_L9_O3.csv", "onela_L9_O3.csv"]


def test_a_cell_whose_attribution_fails_keeps_its_traces_and_the_run_goes_on(tmp_path, monkeypatch):
    from tools import decode_breakdown as tool

    def broken(dec, graphs, traces=None):
        traces["eager"] = {"traceEvents": []}
        raise ValueError("FAKE attribution failure")
    monkeypatch.setattr(bd, "breakdown", broken)
    out = tmp_path / "res"
    assert tool.main(["--cpu", "--out", str(out), "--paths", "reference_fullstate", "--R", "2", "--W", "4",
                      "--prompts", "9", "5", "--O", "2"]) == 1
    rec = json.loads(next((out / "env").glob("*.json")).read_text())
    assert [c["error"] for c in rec["cells"]] == ["ValueError: FAKE attribution failure"] * 2
    assert len(list(out.rglob("eager_trace.json.gz"))) == 2 and not (out / tool.CSV_NAME).exists()


def test_a_second_run_into_the_folder_skips_the_cells_it_holds(tmp_path, monkeypatch):
    """./run_all.sh resumed runs the tool again into its run folder: cells already broken down by the same code
    are skipped, the others run, so the table holds each cell once per code; a run of other code measures them
    again beside the earlier rows (the breakdown's before and after)."""
    import csv
    from tools import decode_breakdown as tool
    out = tmp_path / "res"
    args = ["--cpu", "--out", str(out), "--paths", "reference_fullstate", "--R", "2", "--W", "4", "--O", "2"]
    monkeypatch.setenv("ONELA_GIT_COMMIT", "0123456789ab")
    assert tool.main(args + ["--prompts", "9"]) == 0
    assert tool.main(args + ["--prompts", "9", "5"]) == 0

    def totals():
        with open(out / tool.CSV_NAME, newline="") as f:
            return [(r["prompt_len"], r["git_commit"]) for r in csv.DictReader(f) if r["component"] == tool.TOTAL]
    assert totals() == [("9", "0123456789ab"), ("5", "0123456789ab")]
    monkeypatch.setenv("ONELA_GIT_COMMIT", "0123456789ab+dirty")
    assert tool.main(args + ["--prompts", "9"]) == 0
    assert totals()[2:] == [("9", "0123456789ab+dirty")]


def test_same_code_matches_a_commit_in_either_length_and_its_suffix():
    from tools.decode_breakdown import same_code
    full = "a9b11f1cb255f9778f87ee46f0f375b7bcf74ab1"
    assert same_code(full, "a9b11f1cb255") and same_code("a9b11f1cb255+dirty", full[:20] + "+dirty")
    assert not same_code(full, "a9b11f1cb256") and not same_code(full, "a9b11f1cb255+dirty")
    assert not same_code("", "") and not same_code("unknown", "a9b11f1cb255")


def test_a_cell_that_fails_the_gate_is_recorded_and_not_broken_down(tmp_path):
    """The breakdown takes the full_model suite's measurement: a decode over the gate's tolerance is a failed
    cell (its reason in the env record), never timed or attributed; a tolerance that is no number is refused."""
    from tools import decode_breakdown as tool
    out = tmp_path / "res"
    assert tool.main(["--cpu", "--out", str(out), "--paths", "reference_fullstate", "--R", "2", "--W", "4",
                      "--prompts", "9", "--O", "2", "--tolerance", "1e-30"]) == 1
    rec = json.loads(next((out / "env").glob("*.json")).read_text())
    (cell,) = rec["cells"]
    assert cell["error"].startswith("GateFailed: max_abs_err") and "> tolerance 1.000e-30" in cell["error"]
    assert not (out / tool.CSV_NAME).exists()
    with pytest.raises(SystemExit):
        tool.parse_args(["--tolerance", "0"])


# ---- figure and REPORT section ----

def fake_rows(run_id="fake-run"):
    rows = []
    for prompt in (1024, 5120):
        for path, rec in (("onela", 0.2), ("controlled_fullstate", 7.0)):
            comp = {c: (0.1, 0.05) for c in COMPONENTS}
            comp["gdn_recurrent"] = (rec, rec / 2)
            comp["embed"] = (0.01, 0.0)
            comp["idle"] = (0.05, math.nan)
            for c, (m, f) in comp.items():
                rows.append({"run_id": run_id, "path": path, "model": "fake", "R": 4, "W": 256, "T": 4, "O": 5,
                             "prompt_len": prompt, "component": c, "measured_ms": m, "floor_ms": f,
                             "method": "graph"})
            rows.append({"run_id": run_id, "path": path, "model": "fake", "R": 4, "W": 256, "T": 4, "O": 5,
                         "prompt_len": prompt, "component": "total", "measured_ms": 5.0, "floor_ms": 2.5,
                         "method": "graph"})
    return rows


def test_figure_and_report_section_from_a_fake_csv(tmp_path):
    from plots import fig_breakdown
    from plots.data import load_results
    from plots.style import setup
    setup()
    pd.DataFrame(fake_rows()).to_csv(tmp_path / fig_breakdown.CSV_NAME, index=False)
    res = load_results(tmp_path)
    fig = fig_breakdown.draw(res)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        gids = {a.get_gid() for a in ax.patches}
        assert gids == {"series:onela", "series:controlled_fullstate"}
        assert len([a for a in ax.patches if a.get_gid() == "series:onela"]) == len(COMPONENTS) + 1  # + idle
    lines = fig_breakdown.report_lines(tmp_path)
    text = "\n".join(lines)
    assert "first run" not in text and "**prompt 1K, O=5**" in text and "**prompt 5K, O=5**" in text
    assert "| gdn_recurrent | 0.2 | 0.1 | 2.0× | 7 | 3.5 | 2.0× |" in text
    assert "Controlled FullState (index mode): most time above its floor in gdn_recurrent (+3.5 ms, 2.0×)" in text
    assert "the modelled floors add up to 4.1 ms (each at its own bound; the whole model's: 2.5 ms)" in text
    assert "| gdn_norm | 0.1 | 0.05 | 2.0× |" in text                  # an activation floor: the ratio is shown


def test_an_earlier_run_of_a_cell_is_shown_as_the_first_run(tmp_path):
    """A table with two runs of a cell (the tool keeps each code's): the latest run's bars, ratios and totals, and
    the first run's measured times as dashed outlines and a column per path -- the breakdown before and after."""
    from plots import fig_breakdown
    from plots.data import load_results
    from plots.style import setup
    setup()
    old = [dict(r, measured_ms=2 * r["measured_ms"], git_commit="a9b11f1cb255f9778f87ee46f0f375b7bcf74ab1")
           for r in fake_rows("fake-old") if r["prompt_len"] == 1024]
    new = [dict(r, git_commit="0123456789ab") for r in fake_rows("fake-run")]
    pd.DataFrame(old + new).to_csv(tmp_path / fig_breakdown.CSV_NAME, index=False)
    assert set(fig_breakdown.load(tmp_path)["run_id"]) == {"fake-run"}
    assert set(fig_breakdown.load_first(tmp_path)["prompt_len"]) == {1024}
    fig = fig_breakdown.draw(load_results(tmp_path))
    one_k, five_k = fig.axes[:2]
    assert len([a for a in one_k.patches if a.get_gid() == "first run:onela"]) == len(COMPONENTS) + 1
    assert not [a for a in five_k.patches if str(a.get_gid()).startswith("first run")]
    assert "OneLA 5.00 ms (floor 2.50; first run 10.00)" in one_k.get_title()
    assert any("first run (a9b11f1cb255)" in t.get_text() for t in fig.legends[0].get_texts())
    text = "\n".join(fig_breakdown.report_lines(tmp_path))
    assert "run(s) fake-old; first run (a9b11f1cb255)" in text
    assert "| gdn_recurrent | 0.2 | 0.1 | 2.0× | 0.4 | 7 | 3.5 | 2.0× | 14 |" in text     # prompt 1K: both runs
    assert "| total | 5 | 2.5 | 2.0× | 10 | 5 | 2.5 | 2.0× | 10 |" in text
    assert "| gdn_recurrent | 0.2 | 0.1 | 2.0× | 7 | 3.5 | 2.0× |" in text                  # prompt 5K: one run


def test_weights_only_floors_of_older_runs_hide_their_activation_parts_ratio(tmp_path):
    """A run whose model kept a conv_state component counted weights alone in the element-wise parts' floors:
    their measured / floor is '—' and they leave the modelled-floor sum."""
    from plots import fig_breakdown
    rows = fake_rows()
    rows += [dict(r, component="conv_state", measured_ms=0.2, floor_ms=math.nan) for r in rows
             if r["component"] == "embed"]
    pd.DataFrame(rows).to_csv(tmp_path / fig_breakdown.CSV_NAME, index=False)
    text = "\n".join(fig_breakdown.report_lines(tmp_path))
    assert "| gdn_norm | 0.1 | 0.05 | — |" in text
    assert "the modelled floors add up to 3.9 ms" in text


def test_no_csv_says_not_measured_and_draws_no_data(tmp_path):
    from plots import fig_breakdown, report
    from plots.data import load_results
    res = load_results(tmp_path)
    assert fig_breakdown.report_lines(tmp_path)[0].startswith(report.NOT_MEASURED)
    texts = "\n".join(t.get_text() for t in fig_breakdown.draw(res).findobj(lambda a: hasattr(a, "get_text")))
    assert "no data yet" in texts


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["onela", "controlled_fullstate"])
def test_gpu_replayed_kernels_are_all_attributed(path):
    """On the GPU (tiny model, compiled blocks, per-call graphs): the replay is labelled through the eager
    search ("graph" method), no compiled block is left unsplit, only a few kernels per call lack an eager twin
    (the replay's own prologue: 3.7 per call on this model, 7-8 of ~415 at Qwen3.5-0.8B, 0.2 % of its time, in
    the H200 run of results/full_model_breakdown.csv), and the components plus idle cover the profiled span (to
    rounding of the profiler's microsecond timestamps)."""
    from artifact.model.config import TINY
    from artifact.model.decode import BeamDecoder
    from artifact.model.graphs import capture
    from artifact.model.network import HybridModel
    from artifact.model.prefill import prefill, random_prompts
    m = HybridModel.random(TINY, seed=0, device="cuda")
    ps = prefill(m, random_prompts(2, 9, TINY.vocab_size, 0, "cuda"))
    dec = BeamDecoder(m, path, 2, 4, 3, 9, compile=True)
    dec.load_prompt(ps)
    capture(dec)
    lab, eager = bd.breakdown(dec, graphs=True)
    assert lab is not eager and len(lab.ops) == 3
    assert not [n for n in lab.notes if "unsplit" in n or "not attributable" in n], lab.notes
    pc = bd.per_call(lab)
    assert pc.get(UNATTR, {"ops": 0})["ops"] <= 8, bd.kernel_table(lab, eager)
    for c in ("mlp", "gdn_proj", "attn_proj", "gdn_recurrent", "gdn_conv", "attn_prompt", "lm_head", "norms"):
        assert pc[c]["us"] > 0, c
    # the conv, its windows' upkeep and the gates: at most two kernels per GDN layer in either beam-state mode
    assert pc["gdn_conv"]["ops"] <= 2 * len(TINY.gdn_layers), bd.kernel_table(lab, eager)
    busy = sum(v["us"] for k, v in pc.items() if not k.startswith("_"))
    assert busy >= pc["_span"]["us"] * (1 - 1e-4)
