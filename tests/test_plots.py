"""The reporting stage (plots/) on synthetic result tables built here, in tmp_path.

Every number in these fixtures is FAKE (simple formulas, labelled "FAKE" in the env record); the tests check
that the figures draw what the tables hold, that REPORT.md covers every paper number, and that a failed or
skipped cell never feeds a ratio. Nothing is written into results/.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from artifact.results import COLUMNS, config_hash
from plots import __main__ as plots_main
from plots import (fig6_full_model, fig7_generality, fig8_sources, fig_beam_scaling, fig_breakdown, fig_floor_geometry,
                   paper, report)
from plots.data import load_results, paired_ratio, read_csv
from plots.ours import measures
from plots.style import setup

QWEN = (16, 16, 128, 128)
FAKE_GEOMETRIES = {"fake_qwen": QWEN, "fake_wide": (4, 16, 128, 256), "fake_big": (8, 8, 256, 256)}
# Synthetic baseline/OneLA latency factors, exact on every shape so medians are known.
FAKE_LATENCY_FACTOR = {"vllm_fullstate": 40.0, "sglang_fullstate": 42.0, "vllm_prefix_replay": 17.0,
                       "sglang_replayssm": 18.0, "flashinfer_fullstate": 41.0, "trtllm_fullstate": 46.0,
                       "controlled_fullstate": 38.0}
FULL_MODEL_PATHS = {"onela": 1.0, "controlled_fullstate": 2.0, "vllm_fullstate": 2.16, "vllm_prefix_replay": 2.5}


def _row(suite, path, geo, R, W, T, prompt_len=1024, **measured):
    """A valid results row (artifact.results.row_problems): an ok row carries the error its gate compared."""
    hk, hv, k, v = FAKE_GEOMETRIES[geo]
    row = dict(suite=suite, path=path, geometry=geo, R=R, W=W, T=T, O=T + 1, HK=hk, HV=hv, K=k, V=v,
               prompt_len=prompt_len, lineage="beam", seed=0, status="ok", run_id="fake-run",
               git_commit="fake", max_abs_err=1e-4, tolerance=4.88e-4)
    row.update(measured)
    row["config_hash"] = config_hash(row)
    return row


def _onela_latency(geo, R, W, T):
    hk, hv, k, v = FAKE_GEOMETRIES[geo]
    return 1e-3 * R * W * T * hv * (k + v) / (16 * 256 * 128)


def operator_rows(Rs=(4, 16), Ws=(512,), Ts=(2, 6)):
    rows = []
    for geo in FAKE_GEOMETRIES:
        hk, hv, k, v = FAKE_GEOMETRIES[geo]
        for R in Rs:
            for W in Ws:
                for T in Ts:
                    lat = _onela_latency(geo, R, W, T)
                    cap = R * hv * v * k * 4
                    rows.append(_row("operator", "onela", geo, R, W, T, latency_ms=lat, floor_ms=lat / 2,
                                     floor_bound="memory", persistent_bytes=cap, max_abs_err=1e-4))
                    for b, f in FAKE_LATENCY_FACTOR.items():
                        rows.append(_row("operator", b, geo, R, W, T, latency_ms=lat * f,
                                         persistent_bytes=cap * (10 if "replay" in b else 20)))
    return rows


def fig8_rows():
    rows = []
    for T in (2, 6):
        lat = {"onela": 0.1 * T, "vllm_prefix_replay": 1.5 * T, "vllm_fullstate": 4.0 * T}
        for p, x in lat.items():
            cap = {"onela": 50 * T, "vllm_prefix_replay": 900.0, "vllm_fullstate": 2048.0}[p] * 2 ** 20
            rows.append(_row("recurrent_path", p, "fake_qwen", 4, 512, T, latency_ms=x, floor_ms=x / 3,
                             persistent_bytes=cap, written_bytes=cap / 2))
            dram = {"onela": 200, "vllm_prefix_replay": 8000, "vllm_fullstate": 16000}[p] * 2 ** 20
            rows.append(_row("traffic", p, "fake_qwen", 4, 512, T, dram_read_bytes=dram * 0.75,
                             dram_write_bytes=dram * 0.25, flops=dram * (30 if p == "onela" else 1)))
    return rows


def full_model_rows():
    rows = []
    for prompt in (1024, 5120):
        for T in range(2, 7):
            for p, f in FULL_MODEL_PATHS.items():
                rows.append(_row("full_model", p, "fake_qwen", 4, 256, T, prompt_len=prompt,
                                 latency_ms=(10 + T * (3 if prompt == 1024 else 6)) * f))
    return rows


def write_results(root, rows, env=True):
    """Write rows into root/<suite>.csv in the real schema, plus a FAKE env record."""
    df = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df:
            df[c] = ""
    for suite, part in df.groupby("suite"):
        part[COLUMNS].to_csv(root / f"{suite}.csv", index=False)
    if env:
        (root / "env").mkdir(exist_ok=True)
        (root / "env" / "fake-run.json").write_text(json.dumps({
            "gpu": "FAKE GPU (test fixture)", "torch": "0.0-fake", "triton": "0.0-fake",
            "packages": {"vllm": "0.0-fake"}, "git_commit": "fake", "nvidia_smi": "fake",
            "ceilings": {"copy_bytes_per_s": 4e12, "bf16_flop_per_s": 8e14}, "date_utc": "1970-01-01"}))
    return root


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    write_results(root, operator_rows() + fig8_rows() + full_model_rows())
    from test_breakdown import fake_rows            # the per-component breakdown's own FAKE table
    pd.DataFrame(fake_rows()).to_csv(root / fig_breakdown.CSV_NAME, index=False)
    from test_beam_scaling import fake_beam_rows    # the beam_scaling suite's FAKE tables
    fake_beam_rows(root)
    setup()
    return load_results(root)


def series(ax) -> set[str]:
    """Paths (or geometries) really drawn on an axis: artists tagged by plots.style.mark_series."""
    return {a.get_gid() for a in ax.findobj() if (a.get_gid() or "").startswith("series:")}


def texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))


def test_fig6_bars_per_path_and_speedup_labels(fake):
    fig = fig6_full_model.draw(fake)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert series(ax) == {f"series:{p}" for p in FULL_MODEL_PATHS}
        bars = [a for a in ax.patches if a.get_gid() == "series:onela"]
        assert len(bars) == 5  # O = 3..7
    assert texts(fig).count("2.00×") == 10  # controlled / onela = 2.0 on every (prompt, O) cell


def test_fig7_one_box_per_baseline_with_medians(fake):
    fig = fig7_generality.draw(fake)
    expected = {f"series:{b}" for b in FAKE_LATENCY_FACTOR}
    assert series(fig.axes[0]) == expected and series(fig.axes[1]) == expected
    t = texts(fig)
    for f in FAKE_LATENCY_FACTOR.values():
        assert f"{f:.1f}×" in t
    assert "(n=12)" in t  # 3 geometries x R{4,16} x T{2,6}


def test_fig8_three_panels_with_floors_and_ai(fake):
    fig = fig8_sources.draw(fake)
    paths = {"series:onela", "series:vllm_prefix_replay", "series:vllm_fullstate"}
    assert all(series(ax) == paths for ax in fig.axes[:3])
    t = texts(fig)
    assert "roofline floor" in t and "FLOP/B" in t and "AI 30" in t  # AI of fake onela = 30
    floor_lines = [c for c in fig.axes[0].collections if c.__class__.__name__ == "LineCollection"]
    assert len(floor_lines) == 6  # one per bar: 3 paths x O{3, 7}


def test_fig8_more_than_four_paths_still_draws_each(tmp_path):
    extra = [_row("recurrent_path", p, "fake_qwen", 4, 512, T, latency_ms=1.0 + T, persistent_bytes=2 ** 30,
                  written_bytes=2 ** 29) for p in ("controlled_fullstate", "sglang_fullstate") for T in (2, 6)]
    extra.append(_row("recurrent_path", "trtllm_fullstate", "fake_qwen", 4, 512, 2, status="failed",
                      reason="FAKE failed"))
    fig = fig8_sources.draw(load_results(write_results(tmp_path, fig8_rows() + extra)))
    assert series(fig.axes[0]) == {f"series:{p}" for p in ("onela", "vllm_prefix_replay", "vllm_fullstate",
                                                              "controlled_fullstate", "sglang_fullstate")}
    assert "failed" in texts(fig)  # the failed cell is named where its bar would be, not drawn


def test_floor_view_one_box_per_geometry(fake):
    fig = fig_floor_geometry.draw(fake)
    assert series(fig.axes[0]) == {f"series:{g}" for g in FAKE_GEOMETRIES}
    assert "2.00×" in texts(fig)  # fake floor = latency / 2


def test_python_m_plots_writes_nonempty_images_and_report(fake, tmp_path):
    written = plots_main.main(["--results", str(fake.root), "--out", str(tmp_path / "fig"),
                               "--report", str(tmp_path / "REPORT.md")])
    pngs = [p for p in written if p.suffix == ".png"]
    n = len(plots_main.FIGURES)
    assert len(pngs) == n and len([p for p in written if p.suffix == ".pdf"]) == n
    import matplotlib.image as mpimg
    for p in pngs:
        img = mpimg.imread(p)
        assert img.shape[0] > 300 and img.shape[1] > 500 and img[..., :3].std() > 0.05, p
    assert (tmp_path / "REPORT.md").read_text().count("![") == n


def test_report_has_every_paper_number_and_ours(fake):
    text = report.build(fake)
    assert set(measures()) == set(paper.BY_KEY)
    for n in paper.NUMBERS:
        line = next((ln for ln in text.splitlines() if f"| {report._cell(n.quantity)}" in ln
                     and f"| {n.text}{report.UNIT[n.unit]} |" in ln), None)
        assert line is not None, n.key
        assert report.NOT_MEASURED not in line, n.key
    assert "| 40.0× | 0.99 |" in text           # fake vLLM FullState factor 40 vs paper 40.5
    assert "FAKE GPU (test fixture)" in text and "copy 4.00 TB/s" in text


def test_empty_results_say_not_measured_and_no_data(tmp_path):
    res = load_results(tmp_path)
    text = report.build(res)
    # a paper system with no released GDN kernel says so whatever was measured; every other number is not yet
    no_kernel = [n for n in paper.NUMBERS if any(f".{s}." in f"{n.key}." for s in paper.NO_KERNEL)]
    assert no_kernel and text.count("none: no GDN kernel") == len(no_kernel)
    # + the breakdown section + the line naming the registered paths with no rows (here: all of them)
    # + the depth and width scaling section
    assert text.count(report.NOT_MEASURED) == len(paper.NUMBERS) - len(no_kernel) + 3
    for mod in (fig6_full_model, fig7_generality, fig8_sources, fig_floor_geometry, fig_breakdown, fig_beam_scaling):
        assert "no data yet" in texts(mod.draw(res))


def test_failed_and_skipped_cells_never_feed_a_ratio(tmp_path):
    rows = operator_rows(Rs=(4,), Ts=(2,))
    # Poison: a failed OneLA cell with a tiny latency, a failed baseline with a huge one, a skipped OneLA
    # cell, and an "ok" row without a finite latency. None may enter any ratio.
    poison = {"fake_qwen": ("onela", "failed", 1e-9), "fake_wide": ("vllm_fullstate", "failed", 1e9),
              "fake_big": ("onela", "skipped", 1e-9)}
    for r in rows:
        p, status, lat = poison[r["geometry"]]
        if r["path"] == p:
            r.update(status=status, latency_ms=lat, reason=f"FAKE {status}")
        if r["path"] == "sglang_fullstate" and r["geometry"] == "fake_wide":
            r["latency_ms"] = math.inf
    write_results(tmp_path, rows)
    res = load_results(tmp_path)
    ops = res["operator"]
    assert len(paired_ratio(ops, "vllm_fullstate")) == 0           # onela failed/skipped, or baseline failed
    assert len(paired_ratio(ops, "sglang_fullstate")) == 0         # the remaining shape has inf latency
    assert len(paired_ratio(ops, "trtllm_fullstate")) == 1         # only fake_wide has both ok
    assert paired_ratio(ops, "trtllm_fullstate").iloc[0] == pytest.approx(46.0)
    text = report.build(res)
    lines = text.splitlines()
    vllm = next(ln for ln in lines if "median latency speedup over vLLM FullState" in ln)
    assert "| none: failed |" in vllm and report.NOT_MEASURED not in vllm      # a failed cell is no "not yet"
    assert "OneLA 1 ok, 1 failed, 1 skipped; vLLM FullState 2 ok, 1 failed" in vllm
    assert "| 46.0× |" in next(ln for ln in lines if "median latency speedup over TRT-LLM" in ln)
    assert "FAKE failed" in text and "FAKE skipped" in text and "Failed cells (2)" in text


def test_a_time_ratio_pairs_only_cells_of_one_run(tmp_path):
    """A resumed suite can split one shape's paths over two runs; a latency ratio then has no pair there
    (speed ratios are measured in one run), while a byte ratio (persistent capacity) still pairs."""
    rows = operator_rows(Rs=(4,), Ts=(2,))
    for r in rows:
        if r["geometry"] == "fake_wide" and r["path"] == "onela":
            r["run_id"] = "fake-run-2"
    write_results(tmp_path, rows)
    ops = load_results(tmp_path)["operator"]
    lat = paired_ratio(ops, "vllm_fullstate")
    assert len(lat) == len(FAKE_GEOMETRIES) - 1 and not any("fake_wide" in s for s in lat.index)
    assert len(paired_ratio(ops, "vllm_fullstate", metric="persistent_bytes")) == len(FAKE_GEOMETRIES)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ok", "failed", "skipped"]), st.sampled_from(["ok", "failed", "skipped"]),
                          st.sampled_from([0.5, 2.0, math.nan, math.inf, 0.0, -1.0])), min_size=1, max_size=8))
def test_paired_ratio_uses_only_both_ok_finite(cells):
    rows = []
    for i, (sb, so, lat) in enumerate(cells):
        rows.append(dict(path="vllm_fullstate", shape=str(i), status=sb, latency_ms=4.0))
        rows.append(dict(path="onela", shape=str(i), status=so, latency_ms=lat))
    r = paired_ratio(pd.DataFrame(rows), "vllm_fullstate")
    want = {str(i): 4.0 / lat for i, (sb, so, lat) in enumerate(cells)
            if sb == so == "ok" and np.isfinite(lat) and lat > 0}
    assert r.to_dict() == pytest.approx(want)


def test_torn_line_shards_and_repeats(tmp_path):
    rows = fig8_rows()
    write_results(tmp_path, rows)
    csv = tmp_path / "recurrent_path.csv"
    csv.write_text(csv.read_text() + "recurrent_path,onela,fake_qwen,4,512,2,3,16,16,128,128,,beam,0,ok,,0.0")
    assert len(read_csv(csv)) == 6                      # the torn last line is dropped
    shard = pd.read_csv(tmp_path / "traffic.csv", dtype=str, keep_default_na=False)
    shard.to_csv(tmp_path / "traffic.gpu1.csv", index=False)   # the same cells again, in a shard
    res = load_results(tmp_path)
    assert len(res["traffic"]) == 6 and len(res["recurrent_path"]) == 6
    assert res["traffic"]["arith_intensity"].max() == pytest.approx(30.0)


def test_report_names_registered_paths_without_rows_and_styles_every_path():
    """A registered path with no row in any suite (the paper-mode FullState paths until their GPU run) is named
    in REPORT as not measured yet; every registered path has a display name and colour."""
    from pathlib import Path

    from artifact.paths import PATHS
    from plots.style import PATH_STYLE
    assert set(PATHS) <= set(PATH_STYLE)
    res = load_results(Path(__file__).resolve().parent.parent / "results")
    line = " ".join(report.paths_not_measured(res))
    assert report.NOT_MEASURED in line
    for p in ("controlled", "vllm", "sglang", "flashinfer", "trtllm"):
        assert f"`{p}_fullstate_paper`" in line and f"`{p}_fullstate`" not in line
