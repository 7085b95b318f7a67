"""The beam_scaling suite (beyond the paper): it runs on CPU through the real entry point and writes rows the
results store accepts, its width cells sit at each path's limit, the crossover fit finds a known crossover on
FAKE rows, and the figure and REPORT section draw from FAKE rows (and say "not measured yet" without them)."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_module

import sweeps.schema  # noqa: F401 - registers the structured configs
from artifact.results import COLUMNS, config_hash, read_rows
from plots import fig_beam_scaling as fig
from plots import report
from plots.data import load_results
from plots.style import setup
from sweeps.run import EXIT_OK, run_sweep
from sweeps.spec import ConfigError, shape_cells, validate
from sweeps.suites import beam_scaling as bs

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
# Tiny GQA geometry (K = 16), two depths, three beams; width cells against a FAKE 200 kB "device", so each path's
# width cell is a few beams. Tolerance 1e-2 as the smoke suite's (tiny K, interpreter bf16: sweeps/conf/suite/smoke.yaml).
CPU_RUN = ("suite=beam_scaling", "hardware=cpu", "geometry=smoke_gqa", "shape.R=[1]", "shape.W=[3]", "shape.T=[1,3]",
           "path=[onela,controlled_fullstate,controlled_fullstate_paper,vllm_fullstate]", "beam_scaling.width_R=1",
           "beam_scaling.width_T=2", "beam_scaling.width_multiple=4", "beam_scaling.memory_bytes=200000",
           "tolerance=1e-2")


def cfg_of(*overrides: str):
    with initialize_config_module("sweeps.conf", version_base="1.3"):
        return compose("config", overrides=list(overrides))


# ---------------------------------------------------------------- the suite on CPU, through the entry point

def test_suite_runs_on_cpu_through_the_entry_point(tmp_path, capsys):
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    p = subprocess.run([sys.executable, "-m", "sweeps.run", *CPU_RUN, "results_dir=out", "progress=false"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    out = tmp_path / "out"
    rows = read_rows(out / "beam_scaling.csv")             # every line passes the results store's checks
    spec = validate(cfg_of(*CPU_RUN))
    cells = [c for s in shape_cells(spec, CPU) for c in s]
    assert sorted(r["config_hash"] for r in rows) == sorted(c["config_hash"] for c in cells)
    # the depth grid again on the recorded `model` lineage: its data covers W=512 only (and may be absent), so every
    # one of its cells is a recorded skip naming why, never a failure
    model = [r for r in rows if r["lineage"] == "model"]
    assert len(model) == 2 * 4 and all(r["status"] == "skipped" and "lineage 'model'" in r["reason"] for r in model)
    rows = [r for r in rows if r["lineage"] == "beam"]
    by = {(r["path"], int(r["W"]), int(r["T"])): r for r in rows}
    for path in ("onela", "controlled_fullstate", "controlled_fullstate_paper"):
        for T in (1, 3):
            assert by[(path, 3, T)]["status"] == "ok", by[(path, 3, T)]
    assert all(r["status"] == "skipped" and "vllm" in r["reason"] for r in rows if r["path"] == "vllm_fullstate")

    steps = pd.read_csv(out / bs.STEPS_FILE, dtype=str, keep_default_na=False)
    depth_ok = [r for r in rows if r["status"] == "ok" and r["W"] == "3"]
    assert sorted(steps["config_hash"]) == sorted(r["config_hash"] for r in depth_ok)
    assert (steps["status"] == "ok").all() and (steps["step"].astype(int) == steps["T"].astype(int) - 1).all()
    assert (steps["step_compulsory_bytes"].astype(float) > 0).all()
    assert (steps["max_abs_err"].astype(float) <= 1e-2).all()   # the per-step run is gated too

    width = pd.read_csv(out / bs.WIDTH_FILE, dtype=str, keep_default_na=False).set_index("path")
    assert set(width.index) == {"onela", "controlled_fullstate", "controlled_fullstate_paper", "vllm_fullstate"}
    why = width.loc["vllm_fullstate", "limited_by"]           # no framework here: said, with the reason
    assert "capacity not computed" in why or "vLLM" in why, why
    for path in ("onela", "controlled_fullstate", "controlled_fullstate_paper"):
        w = width.loc[path]
        W, limit, a, b = int(w["W"]), int(w["limit_W"]), int(w["persistent_a"]), int(w["persistent_b"])
        assert w["status"] == "ok" and int(w["T"]) == 2 and W % 4 == 0 and 0 < W <= limit
        assert limit == int(w["capacity_W"]) == (200000 - a - int(w["workspace_a"])) // (b + int(w["workspace_b"]))
        row = by[(path, W, 2)]
        assert int(row["persistent_bytes"]) == a + b * W       # the byte model is the path's real tensors
    # OneLA's records grow with W x depth only: it fits far more beams than a FullState path's V x K states
    assert int(width.loc["onela", "capacity_W"]) > 10 * int(width.loc["controlled_fullstate", "capacity_W"])

    text = "\n".join(fig.report_lines(load_results(out)))
    assert fig.NOT_MEASURED not in text and "OneLA" in text and "capacity W" in text

    assert run_sweep(cfg_of(*CPU_RUN, f"results_dir={out}", "progress=false")) == EXIT_OK
    assert "0 to run" in capsys.readouterr().out                 # a re-run measures nothing again


def test_width_cells_are_one_per_path_and_never_repeat_a_grid_cell():
    spec = validate(cfg_of(*CPU_RUN))
    shapes = shape_cells(spec, CPU)
    hashes = [c["config_hash"] for s in shapes for c in s]
    assert len(hashes) == len(set(hashes))
    # the grid on the run's lineage, the same grid on the recorded `model` lineage, then the width cells
    assert [s[0]["lineage"] for s in shapes[:4]] == ["beam", "beam", "model", "model"]
    assert [s[0]["T"] for s in shapes[2:4]] == spec.T and all(c["W"] == 3 for s in shapes[2:4] for c in s)
    grid = {c["config_hash"] for s in shapes[:4] for c in s}
    width = [c for s in shapes[4:] for c in s]
    assert all(c["lineage"] == "beam" for c in width)
    assert {c["path"] for c in width} == set(spec.paths) and all(c["T"] == 2 and c["R"] == 1 for c in width)
    assert not grid & {c["config_hash"] for c in width}
    # a path whose plan falls back to the grid's W at a depth of the grid: that grid cell serves as its width cell
    same = validate(cfg_of(*CPU_RUN, "shape.T=[1,2]"))
    assert "vllm_fullstate" not in {c["path"] for s in shape_cells(same, CPU)[4:] for c in s}
    # without depth_lineages the grid is the run's lineage alone
    only = validate(cfg_of(*CPU_RUN, "beam_scaling.depth_lineages=[]"))
    assert {c["lineage"] for s in shape_cells(only, CPU) for c in s} == {"beam"}


@pytest.mark.parametrize("override,named", [
    ("beam_scaling.width_fill=0", "beam_scaling.width_fill"), ("beam_scaling.width_T=0", "beam_scaling.width_T"),
    ("beam_scaling.memory_bytes=0", "beam_scaling.memory_bytes"),
    ("beam_scaling.step_repeats=0", "beam_scaling.step_repeats"),
    ("beam_scaling.depth_lineages=[model,greedy]", "beam_scaling.depth_lineages"),
])
def test_bad_settings_fail_naming_the_key(override, named):
    with pytest.raises(ConfigError, match=f"config key {named}"):
        validate(cfg_of("suite=beam_scaling", override))


def test_the_byte_model_refuses_what_is_not_affine():
    assert bs._affine([4, 8, 12], [100, 180, 260], "x") == (20, 20)
    with pytest.raises(ValueError, match="not affine"):
        bs._affine([4, 8, 12], [100, 180, 270], "x")


def test_step_cost_is_the_difference_of_prefix_costs():
    """beam_scaling's per-step floor takes step t's terms of the cost model; they equal the cost of steps 0..t less
    the cost of steps 0..t-1 (a cost of step t depends on nothing later), and add up to the whole decode's."""
    import dataclasses

    from artifact.paths import get_path
    from artifact.workload import Geometry, make_workload
    wl = make_workload(Geometry(2, 4, 16, 32), 1, 5, 4, seed=1)

    def prefix(n):
        return dataclasses.replace(wl, q=wl.q[:n], k=wl.k[:n], v=wl.v[:n], g=wl.g[:n], beta=wl.beta[:n],
                                   parents=wl.parents[:n])
    for name in ("onela", "controlled_fullstate_paper", "sglang_replayssm", "vllm_prefix_replay",
                 "reference_replay"):
        path = get_path(name)
        total = path.cost(wl)
        parts = bs.step_costs(path, wl)
        assert len(parts) == wl.T
        assert sum(p["compulsory_bytes"] for p in parts) == total["compulsory_bytes"]
        assert sum(p["flops"] for p in parts) == total["flops"]
        assert parts[0]["compulsory_bytes"] != parts[2]["compulsory_bytes"]
        for t in range(wl.T):
            hi = path.cost(prefix(t + 1))
            lo = path.cost(prefix(t)) if t else {"compulsory_bytes": 0, "flops": 0}
            assert parts[t]["compulsory_bytes"] == hi["compulsory_bytes"] - lo["compulsory_bytes"], (name, t)
            assert parts[t]["flops"] == hi["flops"] - lo["flops"], (name, t)
    # each step's own floor: bytes over the copy bandwidth, or FLOPs over the matrix rate where those take longer
    ceilings = {"copy_bytes_per_s": 4e12, "fp32_flop_per_s": 5e13, "tf32_flop_per_s": 4e14, "bf16_flop_per_s": 7e14}
    parts = bs.step_costs(get_path("onela"), wl)
    floors = bs.step_floors(parts, ceilings)
    assert len(floors) == wl.T and floors[0][0] < floors[-1][0]          # later steps replay more records
    for (ms, bound), p in zip(floors, parts):
        assert bound == "memory" and ms == pytest.approx(p["compulsory_bytes"] / 4e12 * 1e3)
    slow = {**ceilings, "copy_bytes_per_s": 1e18}
    assert all(b.startswith("compute:") for _, b in bs.step_floors(parts, slow))


# ---------------------------------------------------------------- FAKE rows: the fit, the figure, REPORT

FAKE_FIT = {"onela": (0.02, 0.003), "controlled_fullstate": (0.9, 0.0), "vllm_fullstate": (1.1, 0.0)}
FAKE_OS = (2, 3, 4, 5, 7, 8, 12, 16, 24, 32)


def fake_beam_rows(root: Path, fits: dict = FAKE_FIT, Os=FAKE_OS, model_fits: dict | None = None) -> Path:
    """beam_scaling.csv and its side tables with FAKE per-step times a + b t (t = O - 2) exactly, step 0 off the
    line (it is left out of the fit), and one width cell per path; with `model_fits`, the depth rows again on the
    `model` lineage with those lines."""
    rows, steps, width = [], [], []
    limits = {"onela": (756825, 117056), "controlled_fullstate": (14200, 13696), "vllm_fullstate": (1023, 960)}
    depth = [("beam", p, ab) for p, ab in fits.items()] + [("model", p, ab) for p, ab in (model_fits or {}).items()]
    for lineage, path, (a, b) in depth:
        for O in Os:
            T, t = O - 1, O - 2
            step = a + b * t if t else 0.5 * a
            row = dict(suite="beam_scaling", path=path, geometry="qwen3_5_0_8b", R=4, W=512, T=T, O=O, HK=16, HV=16,
                       K=128, V=128, prompt_len=1024, lineage=lineage, seed=0, status="ok", latency_ms=T * a + b * t * T / 2,
                       floor_ms=T * a / 3, max_abs_err=1e-4, tolerance=4.88e-4, run_id="fake-run", git_commit="fake")
            row["config_hash"] = config_hash(row)
            rows.append(row)
            steps.append(dict(config_hash=row["config_hash"], run_id="fake-run", path=path, status="ok", step=t,
                              step_ms=step, step_p20_ms=step * 0.98, step_p80_ms=step * 1.02, step_floor_ms=step / 4))
    for path in fits:
        cap, W = limits[path]
        row = dict(suite="beam_scaling", path=path, geometry="qwen3_5_0_8b", R=4, W=W, T=6, O=7, HK=16, HV=16, K=128,
                   V=128, prompt_len=1024, lineage="beam", seed=0, status="ok", latency_ms=W * 1e-3, max_abs_err=1e-4,
                   tolerance=4.88e-4, run_id="fake-run", git_commit="fake")
        row["config_hash"] = config_hash(row)
        rows.append(row)
        width.append(dict(config_hash=row["config_hash"], run_id="fake-run", path=path, status="ok",
                          memory_bytes=150e9, capacity_W=cap, limit_W=cap, limited_by="memory: FAKE",
                          persistent_a=4 << 20, persistent_b=198336 if path == "onela" else 8 << 20,
                          workspace_a=0, workspace_b=0))
    df = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df:
            df[c] = ""
    df[COLUMNS].to_csv(root / "beam_scaling.csv", index=False)
    pd.DataFrame(steps).to_csv(root / bs.STEPS_FILE, index=False)
    pd.DataFrame(width).to_csv(root / bs.WIDTH_FILE, index=False)
    return root


def test_crossover_fit_finds_the_known_crossover(tmp_path):
    depth = fig.depth_table(load_results(fake_beam_rows(tmp_path)))
    found = fig.crossovers(depth)
    assert [c.path for c in found] == ["controlled_fullstate", "vllm_fullstate"]     # the best FullState first
    best = found[0]
    assert best.kind == "fitted" and best.t == pytest.approx((0.9 - 0.02) / 0.003) and best.O == best.t + 2
    assert best.onela_fit == pytest.approx((0.02, 0.003)) and best.fullstate_fit == pytest.approx((0.9, 0.0))
    assert "fitted: t = 293" in best.text() and "OneLA 20 + 3 t us" in best.text()


def test_crossover_within_the_measured_depths_is_measured(tmp_path):
    depth = fig.depth_table(load_results(fake_beam_rows(tmp_path, {"onela": (0.1, 0.1),
                                                                     "controlled_fullstate": (1.25, 0.0)})))
    c = fig.crossover(depth, "controlled_fullstate")
    assert c.kind == "measured" and c.t == pytest.approx(11.5)        # between the measured t = 10 and t = 14
    flat = fig.crossover(fig.depth_table(load_results(fake_beam_rows(
        tmp_path, {"onela": (0.1, 0.0), "controlled_fullstate": (1.0, 0.01)}))), "controlled_fullstate")
    assert flat.kind == "never"


def test_fit_line_leaves_out_step_zero():
    t = np.array([0, 1, 2, 3])
    assert fig.fit_line(t, [100.0, 1.0, 2.0, 3.0]) == pytest.approx((0.0, 1.0))
    assert fig.fit_line([0, 1], [1.0, 2.0]) is None


def test_figure_draws_every_path_and_the_crossover(tmp_path):
    setup()
    res = load_results(fake_beam_rows(tmp_path))
    f = fig.draw(res)
    drawn = [{a.get_gid() for a in ax.findobj() if (a.get_gid() or "").startswith("series:")} for ax in f.axes]
    want = {f"series:{p}" for p in FAKE_FIT}
    assert drawn[0] == drawn[1] == drawn[2] == want
    text = "\n".join(t.get_text() for t in f.findobj(lambda a: hasattr(a, "get_text")))
    assert "crossover with Controlled FullState (index mode): O = 295 (fitted), beyond the axis" in text
    assert "W=117,056" in text and "us/beam" in text
    files = fig.render(res, tmp_path / "figs")
    assert [p.suffix for p in files] == [".png", ".pdf"] and all(p.stat().st_size > 10_000 for p in files)


def test_report_section_with_and_without_rows(tmp_path):
    empty = load_results(tmp_path)
    lines = fig.report_lines(empty)
    assert len(lines) == 1 and lines[0].count(fig.NOT_MEASURED) == 1
    assert "## Depth and width scaling (beyond the paper)" in report.build(empty)
    (tmp_path / "full").mkdir()
    full = fake_beam_rows(tmp_path / "full")
    text = "\n".join(fig.report_lines(load_results(full)))
    assert fig.NOT_MEASURED not in text.lower()
    assert "fitted: t = 293 (O = 295), beyond the measured depths" in text
    assert "| OneLA | " in text and "| 20 + 3 t |" in text and "| 900 + 0 t |" in text  # per-step table, fit (us)
    assert "756,825" in text and "117,056 (15% of the limit)" in text  # width: limit and the measured cell
    assert "## Depth and width scaling (beyond the paper)" in report.build(load_results(full))


def test_lineages_are_never_mixed_in_one_line(tmp_path):
    """Depth rows of the beam and the model lineage: the figure draws one line per (path, lineage), the crossover
    and REPORT's tables are per lineage, and a lineage's fit is its own rows' alone."""
    setup()
    res = load_results(fake_beam_rows(tmp_path, model_fits={"onela": (0.02, 0.001),
                                                             "controlled_fullstate": (0.9, 0.0)}))
    depth = fig.depth_table(res)
    assert fig.lineages(depth) == ["beam", "model"]
    model = fig.crossovers(fig.of_lineage(depth, "model"))
    assert [c.path for c in model] == ["controlled_fullstate"] and model[0].t == pytest.approx((0.9 - 0.02) / 0.001)
    f = fig.draw(res)
    for ax in f.axes[:2]:
        labels = ax.get_legend_handles_labels()[1]
        assert len(labels) == 5 and sorted(lb for lb in labels if ", model lineage" in lb) == [
            "Controlled FullState (index mode), model lineage", "OneLA, model lineage"], labels
    text = "\n".join(fig.report_lines(res))
    beam, model_text = text.split("(`lineage=model`)")
    assert "(`lineage=beam`)" in beam and "| 20 + 3 t |" in beam and "| 20 + 1 t |" not in beam
    assert "| 20 + 1 t |" in model_text and "fitted: t = 880 (O = 882)" in model_text
    assert "| 20 + 3 t |" not in model_text.split("Width:")[0]


def test_max_abs_err_in_chunks_is_the_whole_max(monkeypatch):
    from artifact import measure
    out, ref = torch.randn(3, 5, 7), torch.randn(3, 5, 7)
    whole = float((out.double() - ref.double()).abs().max())
    monkeypatch.setattr(measure, "ERR_CHUNK", 4)
    assert measure.max_abs_err(out, ref) == whole
    out[2, 4, 6] = math.nan
    assert measure.max_abs_err(out, ref) == math.inf


@pytest.mark.gpu
def test_gpu_per_step_times_add_up_to_about_the_whole_decode():
    """check_and_time_steps on a GPU: gated, one Timing per step, and their sum near the whole-decode time (each
    step is its own graph launch: a few us each on top, and no overlap across steps)."""
    from artifact.measure import check_and_time, check_and_time_steps
    from artifact.paths import get_path
    from artifact.reference import fullstate_decode
    from artifact.workload import GEOMETRIES, make_workload
    wl = make_workload(GEOMETRIES["qwen3_5_0_8b"], 4, 512, 6, device="cuda")
    ref = fullstate_decode(wl)
    whole = check_and_time(get_path("onela"), wl, ref)
    steps = check_and_time_steps(get_path("onela"), wl, ref, repeats=20)
    assert steps.status == "ok" and len(steps.steps) == 6 and steps.max_abs_err <= 4.88e-4
    total = sum(t.median_ms for t in steps.steps)
    assert 0.7 * whole.latency_ms < total < 1.5 * whole.latency_ms + 0.05, (total, whole.latency_ms)
    assert steps.steps[5].median_ms > steps.steps[1].median_ms      # deeper steps replay more records
