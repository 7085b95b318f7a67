"""The reporting stage (plots/) on synthetic result tables built here, in tmp_path.

Every number in these fixtures is FAKE (simple formulas, labelled "FAKE" in the env record); the tests check
that the figures draw what the tables hold, that REPORT.md covers every paper number, that a failed or
skipped cell never feeds a ratio, and that the paper's FullState numbers pair only with the paper-mode rows
(`*_fullstate_paper`), whether the index-mode rows are there beside them or alone. Nothing is written into results/.
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
from plots.reproduced import MODE_KEYS, index_measures, measures, not_in_paper
from plots.style import INDEX_MODE, PAPER_MODE, colour, display_name, hatch, setup

QWEN = (16, 16, 128, 128)
FAKE_GEOMETRIES = {"fake_qwen": QWEN, "fake_wide": (4, 16, 128, 256), "fake_big": (8, 8, 256, 256)}
# Synthetic baseline/OneLA latency factors, exact on every shape so medians are known.
FAKE_LATENCY_FACTOR = {"vllm_fullstate": 40.0, "sglang_fullstate": 42.0, "vllm_prefix_replay": 17.0,
                       "sglang_replayssm": 18.0, "flashinfer_fullstate": 41.0, "trtllm_fullstate": 46.0,
                       "controlled_fullstate": 38.0, "fla_fullstate": 44.0}
# The paper-mode FullState paths: factors unlike their index modes' and below the replay paths' (so every number
# over all baselines, e.g. the smallest speedup at the largest Qwen shape, differs between the modes); one pool.
FAKE_PAPER_FACTOR = {"vllm_fullstate_paper": 12.0, "sglang_fullstate_paper": 13.0, "flashinfer_fullstate_paper": 14.0,
                     "trtllm_fullstate_paper": 15.0, "controlled_fullstate_paper": 11.0, "fla_fullstate_paper": 16.0}
FULL_MODEL_PATHS = {"onela": 1.0, "controlled_fullstate": 2.0, "vllm_fullstate": 2.16, "vllm_prefix_replay": 2.5}
FULL_MODEL_PAPER = {"controlled_fullstate_paper": 2.5, "vllm_fullstate_paper": 2.75}


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


def operator_rows(Rs=(4, 16), Ws=(512,), Ts=(2, 6), paper=True):
    """Every shape: OneLA, the index-mode and replay baselines, and with `paper` the paper-mode FullState paths."""
    factors = {**FAKE_LATENCY_FACTOR, **(FAKE_PAPER_FACTOR if paper else {})}
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
                    for b, f in factors.items():
                        rows.append(_row("operator", b, geo, R, W, T, latency_ms=lat * f,
                                         persistent_bytes=cap * (10 if "replay" in b or "paper" in b else 20)))
    return rows


def fig8_rows(paper=True):
    """Fig 8's cell: OneLA, vLLM prefix-cache replay, vLLM FullState in the index mode and, with `paper`, in the
    paper's mode (one pool, writes and traffic up by the state copy)."""
    rows = []
    for T in (2, 6):
        lat = {"onela": 0.1 * T, "vllm_prefix_replay": 1.5 * T, "vllm_fullstate": 4.0 * T,
               **({"vllm_fullstate_paper": 5.0 * T} if paper else {})}
        for p, x in lat.items():
            cap = {"onela": 50 * T, "vllm_prefix_replay": 900.0, "vllm_fullstate": 2048.0,
                   "vllm_fullstate_paper": 1024.0}[p] * 2 ** 20
            rows.append(_row("recurrent_path", p, "fake_qwen", 4, 512, T, latency_ms=x, floor_ms=x / 3,
                             persistent_bytes=cap, written_bytes=cap / 2 * (3 if "paper" in p else 1)))
            dram = {"onela": 200, "vllm_prefix_replay": 8000, "vllm_fullstate": 16000,
                    "vllm_fullstate_paper": 24000}[p] * 2 ** 20
            flops = {"onela": dram * 30, "vllm_fullstate_paper": 16000 * 2 ** 20}   # the copy adds bytes, no FLOPs
            rows.append(_row("traffic", p, "fake_qwen", 4, 512, T, dram_read_bytes=dram * 0.75,
                             dram_write_bytes=dram * 0.25, flops=flops.get(p, dram)))
    return rows


def fla_fig8_rows():
    """Fig 8's cell for fla FullState (a system not in the paper), both modes: 4.4 T ms index, 4.6 T ms paper."""
    rows = []
    for T in (2, 6):
        for p, x, cap in (("fla_fullstate", 4.4 * T, 2048.0), ("fla_fullstate_paper", 4.6 * T, 1024.0)):
            rows.append(_row("recurrent_path", p, "fake_qwen", 4, 512, T, latency_ms=x, floor_ms=x / 3,
                             persistent_bytes=cap * 2 ** 20, written_bytes=cap * 2 ** 20))
            rows.append(_row("traffic", p, "fake_qwen", 4, 512, T, dram_read_bytes=18000 * 2 ** 20,
                             dram_write_bytes=6000 * 2 ** 20, flops=24000 * 2 ** 20))
    return rows


def full_model_rows(paper=True):
    rows = []
    for prompt in (1024, 5120):
        for T in range(2, 7):
            for p, f in {**FULL_MODEL_PATHS, **(FULL_MODEL_PAPER if paper else {})}.items():
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


def _fake_results(root, paper: bool):
    write_results(root, operator_rows(paper=paper) + fig8_rows(paper=paper) + full_model_rows(paper=paper))
    from test_breakdown import fake_rows            # the per-component breakdown's own FAKE table
    pd.DataFrame(fake_rows()).to_csv(root / fig_breakdown.CSV_NAME, index=False)
    from test_beam_scaling import fake_beam_rows    # the beam_scaling suite's FAKE tables
    fake_beam_rows(root)
    setup()
    return load_results(root)


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """Both FullState modes measured."""
    return _fake_results(tmp_path_factory.mktemp("results"), paper=True)


@pytest.fixture(scope="module")
def fake_index_only(tmp_path_factory):
    """Only the index-mode FullState rows: the committed results until the paper-mode paths are measured."""
    return _fake_results(tmp_path_factory.mktemp("results_index"), paper=False)


def series(ax) -> set[str]:
    """Paths (or geometries) really drawn on an axis: artists tagged by plots.style.mark_series."""
    return {a.get_gid() for a in ax.findobj() if (a.get_gid() or "").startswith("series:")}


def texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))


def paper_row(lines: list[str], quantity: str) -> str:
    """REPORT's row of the paper number whose quantity starts with `quantity` (the paper pairing)."""
    return next(ln for ln in lines if ln.startswith("| ") and f"| {quantity}" in ln)


def index_row(lines: list[str], quantity: str) -> str:
    """The index-mode row that follows that paper number's row."""
    i = lines.index(paper_row(lines, quantity))
    assert report.INDEX_ROW in lines[i + 1], lines[i + 1]
    return lines[i + 1]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def test_fig6_bars_per_path_and_speedup_labels(fake):
    fig = fig6_full_model.draw(fake)
    assert len(fig.axes) == 4             # the pipeline's rows above, the native framework reference below
    for ax in fig.axes[:2]:
        assert series(ax) == {f"series:{p}" for p in {**FULL_MODEL_PATHS, **FULL_MODEL_PAPER}}
        bars = [a for a in ax.patches if a.get_gid() == "series:onela"]
        assert len(bars) == 5  # O = 3..7
        assert all(a.get_hatch() for a in ax.patches if a.get_gid() == "series:controlled_fullstate")
        assert not any(a.get_hatch() for a in ax.patches if a.get_gid() == "series:controlled_fullstate_paper")
    t = texts(fig)
    # over Controlled FullState in the paper's mode (2.5) first, then the index mode's (2.0), labelled
    assert t.count("2.50×\nindex 2.00×") == 10
    assert "vLLM's kernels inside this project's decode pipeline" in t
    assert "Controlled FullState (index mode)" in t and "Controlled FullState" in t.replace(" (index mode)", "")


def test_fig7_one_box_per_baseline_with_medians(fake):
    fig = fig7_generality.draw(fake)
    expected = {f"series:{b}" for b in {**FAKE_LATENCY_FACTOR, **FAKE_PAPER_FACTOR}}
    assert series(fig.axes[0]) == expected and series(fig.axes[1]) == expected
    t = texts(fig)
    for f in {**FAKE_LATENCY_FACTOR, **FAKE_PAPER_FACTOR}.values():
        assert f"{f:.1f}×" in t
    assert "(n=12)" in t  # 3 geometries x R{4,16} x T{2,6}
    assert "not measured yet" not in t


def test_fig7_slot_of_an_unimportable_framework_names_it_in_full_words(tmp_path):
    """A path whose framework could not be imported keeps a slot that names the distribution and the missing
    module, not a wrapped prefix of the import path; other reasons are kept as recorded."""
    reason = ("tensorrt-llm==1.2.0: cannot import tensorrt_llm._torch.modules.fla.fused_sigmoid_gating_recurrent "
              "from pack /x/.baseline_pack/site: ModuleNotFoundError: No module named 'tensorrt_llm' (a stub)")
    assert fig7_generality.slot_reason(reason) == "tensorrt-llm==1.2.0: no module 'tensorrt_llm' here"
    assert fig7_generality.slot_reason("not natively supported: K=40") == "not natively supported: K=40"
    rows = operator_rows(Rs=(4,), Ts=(2,))
    for r in rows:
        if r["path"] == "sglang_fullstate":
            r.update(status="skipped", reason=reason, latency_ms="")
    t = texts(fig7_generality.draw(load_results(write_results(tmp_path, rows))))
    assert "'tensorrt_llm'" in t
    assert "fused_sig" not in t


def test_fig8_three_panels_with_floors_and_ai(fake):
    fig = fig8_sources.draw(fake)
    paths = {"series:onela", "series:vllm_prefix_replay", "series:vllm_fullstate", "series:vllm_fullstate_paper"}
    assert all(series(ax) == paths for ax in fig.axes[:3])
    t = texts(fig)
    assert "roofline floor" in t and "FLOP/B" in t and "AI 30" in t  # AI of fake onela = 30
    floor_lines = [c for c in fig.axes[0].collections if c.__class__.__name__ == "LineCollection"]
    assert len(floor_lines) == 8  # one per bar: 4 paths x O{3, 7}


def test_fig8_more_than_four_paths_still_draws_each(tmp_path):
    extra = [_row("recurrent_path", p, "fake_qwen", 4, 512, T, latency_ms=1.0 + T, persistent_bytes=2 ** 30,
                  written_bytes=2 ** 29) for p in ("controlled_fullstate", "sglang_fullstate") for T in (2, 6)]
    extra.append(_row("recurrent_path", "trtllm_fullstate", "fake_qwen", 4, 512, 2, status="failed",
                      reason="FAKE failed"))
    fig = fig8_sources.draw(load_results(write_results(tmp_path, fig8_rows() + extra)))
    assert series(fig.axes[0]) == {f"series:{p}" for p in ("onela", "vllm_prefix_replay", "vllm_fullstate",
                                                              "vllm_fullstate_paper", "controlled_fullstate",
                                                              "sglang_fullstate")}
    t = texts(fig)
    assert "failed" in t  # the failed cell is named where its bar would be, not drawn
    # the paper modes of the index-mode paths without paper-mode rows keep their slot, which says so
    assert "not measured yet" in t and "SGLang FullState" in t.replace("SGLang FullState (index mode)", "")


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
    assert "| 12.0× | 0.30 |" in text           # fake vLLM FullState (paper mode) factor 12 vs paper 40.5
    assert "FAKE GPU (test fixture)" in text and "copy 4.00 TB/s" in text


def test_empty_results_say_not_measured_and_no_data(tmp_path):
    res = load_results(tmp_path)
    text = report.build(res)
    # a paper system with no released GDN kernel says so whatever was measured; every other number is not yet
    no_kernel = [n for n in paper.NUMBERS if any(f".{s}." in f"{n.key}." for s in paper.NO_KERNEL)]
    assert no_kernel and text.count("none: no GDN kernel") == len(no_kernel)
    # + each FullState number's index-mode row, the header's word on the pairing, the breakdown section, the
    # line naming the registered paths with no rows (here: all of them), the depth and width scaling section and
    # each number of the systems not in the paper, the native framework reference's line and speedups, and the
    # project targets' count line and each target's value and verdict
    from plots.targets import TARGETS
    assert text.count(report.NOT_MEASURED) == (len(paper.NUMBERS) - len(no_kernel) + len(MODE_KEYS) + 4
                                               + len(not_in_paper(res)) + 1 + len(report.NATIVE_SPEEDUPS)
                                               + 1 + 2 * len(TARGETS))
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
    assert len(paired_ratio(ops, "vllm_fullstate_paper")) == 1     # untouched by the poison, paper mode
    assert len(paired_ratio(ops, "vllm_fullstate")) == 0           # onela failed/skipped, or baseline failed
    assert len(paired_ratio(ops, "sglang_fullstate")) == 0         # the remaining shape has inf latency
    assert len(paired_ratio(ops, "trtllm_fullstate")) == 1         # only fake_wide has both ok
    assert paired_ratio(ops, "trtllm_fullstate").iloc[0] == pytest.approx(46.0)
    text = report.build(res)
    lines = text.splitlines()
    vllm = index_row(lines, "median latency speedup over vLLM FullState")
    assert "| none: failed |" in vllm and report.NOT_MEASURED not in vllm      # a failed cell is no "not yet"
    assert "OneLA 1 ok, 1 failed, 1 skipped; vLLM FullState (index mode) 2 ok, 1 failed" in vllm
    assert "| 46.0× |" in index_row(lines, "median latency speedup over TRT-LLM")
    assert "| 15.0× |" in paper_row(lines, "median latency speedup over TRT-LLM")
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
    rows = fig8_rows(paper=False)
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
    """A registered path with no row in any suite (e.g. a mode added after the last GPU run; here the committed
    results without the paper-mode FullState paths' rows) is named in REPORT as not measured yet; with rows of every
    registered path it says so; every registered path has a display name and colour."""
    import dataclasses
    from pathlib import Path

    from artifact.paths import PATHS
    from plots.style import PATH_STYLE
    assert set(PATHS) <= set(PATH_STYLE)
    res = load_results(Path(__file__).resolve().parent.parent / "results")
    paper = [p for p in PATHS if p.endswith("_fullstate_paper")]
    without = dataclasses.replace(res, suites={s: d[~d["path"].isin(paper)] if len(d) else d
                                               for s, d in res.suites.items()})
    line = " ".join(report.paths_not_measured(without))
    assert report.NOT_MEASURED in line
    for p in ("controlled", "vllm", "sglang", "flashinfer", "trtllm"):
        assert f"`{p}_fullstate_paper`" in line and f"`{p}_fullstate`" not in line
    everything = {s: d for s, d in res.suites.items()}
    everything["smoke"] = pd.DataFrame({"path": list(PATHS)})
    assert report.paths_not_measured(dataclasses.replace(res, suites=everything)) == ["Every registered path has rows."]


# ---- like with like: the paper's FullState numbers pair only with the paper-mode rows ----

def test_mode_keys_are_exactly_the_numbers_that_read_a_fullstate_system(fake):
    """On rows where the two modes differ everywhere, the paper numbers whose value changes with the mode are
    exactly MODE_KEYS (those REPORT follows with an index-mode row): none reads a FullState path unnoticed."""
    by_paper, by_index = measures(PAPER_MODE), measures(INDEX_MODE)
    differ = set()
    for k in by_paper:
        a, b = by_paper[k](fake).value, by_index[k](fake).value
        if not (a == b or (math.isnan(a) and math.isnan(b))):
            differ.add(k)
    assert differ == set(MODE_KEYS)
    assert all(by_paper[k](fake).measured and by_index[k](fake).measured for k in MODE_KEYS)


def test_report_pairs_the_paper_with_the_paper_mode_and_shows_the_index_mode_beside(fake):
    text = report.build(fake)
    lines = text.splitlines()
    m, idx = measures(), index_measures()
    for n in paper.NUMBERS:
        if n.key not in MODE_KEYS:
            continue
        row = next(ln for ln in lines if f"| {report._cell(n.quantity)}" in ln and f"| {n.text}{report.UNIT[n.unit]} |"
                   in ln)
        alt = lines[lines.index(row) + 1]
        want, other = m[n.key](fake).value, idx[n.key](fake).value
        assert cells(row)[3] == report.fmt(want, n.unit) != report.fmt(other, n.unit), n.key
        assert cells(row)[4] == f"{want / n.value:.2f}"
        assert "_fullstate_paper`" in cells(row)[5] and "_fullstate`" not in cells(row)[5].replace("_paper`", "")
        # the index mode: its own row, labelled, not paired with the paper's value
        assert cells(alt)[1] == report.INDEX_ROW and cells(alt)[2] == report.NOT_PAIRED and cells(alt)[4] == "—"
        assert cells(alt)[3] == report.fmt(other, n.unit), n.key
    assert "| 12.0× | 0.30 |" in paper_row(lines, "median latency speedup over vLLM FullState")
    assert "| 40.0× | — |" in index_row(lines, "median latency speedup over vLLM FullState")
    # Fig 6: OneLA vs Controlled FullState in the paper's mode (2.5x), the index mode's 2.0x beside it
    assert "| 2.50× | 1.62 |" in paper_row(lines, "full-model decode-forward, OneLA vs Controlled FullState")
    assert "| 2.00× | — |" in index_row(lines, "full-model decode-forward, OneLA vs Controlled FullState")
    # README's claims: the paper's mode, then the index mode in brackets, labelled
    claims = "\n".join(report.claims(fake))
    assert "| 12.0× / 13.0× [index mode, not paired: 40.0× / 42.0×] |" in claims


def test_index_mode_rows_alone_pair_nothing_with_the_paper(fake_index_only):
    """The committed state until the paper-mode paths are measured: every paper FullState number says "not
    measured yet" (no ratio to the paper), naming the paper-mode path it waits for; the index-mode value sits in
    its own row. A number that reads no FullState system is unchanged."""
    res = fake_index_only
    lines = report.build(res).splitlines()
    idx = index_measures()
    for n in paper.NUMBERS:
        row = next(ln for ln in lines if f"| {report._cell(n.quantity)}" in ln and f"| {n.text}{report.UNIT[n.unit]} |"
                   in ln)
        if n.key not in MODE_KEYS:
            assert report.NOT_MEASURED not in row, n.key
            continue
        assert cells(row)[3] == report.NOT_MEASURED and cells(row)[4] == "—", n.key
        assert "no row yet of" in cells(row)[5], n.key
        alt = lines[lines.index(row) + 1]
        assert cells(alt)[1] == report.INDEX_ROW and cells(alt)[3] == report.fmt(idx[n.key](res).value, n.unit)
        assert idx[n.key](res).measured, n.key
    claims = "\n".join(report.claims(res))
    assert f"| {report.NOT_MEASURED} / {report.NOT_MEASURED} [index mode, not paired: 40.0× / 42.0×] |" in claims


def _diamond_xs(ax) -> list[float]:
    return [float(x) for c in ax.collections if c.__class__.__name__ == "PathCollection"
            for x, _ in c.get_offsets()]


def test_figures_render_index_only_and_never_draw_the_paper_at_the_index_mode(fake_index_only):
    res = fake_index_only
    for mod in (fig6_full_model, fig7_generality, fig8_sources):
        t = texts(mod.draw(res))
        assert "not measured yet" in t and "(index mode)" in t, mod.__name__
    # Fig 8a: the paper's vLLM FullState diamonds sit at the (empty) paper-mode slot, off the index-mode bars
    fig = fig8_sources.draw(res)
    bars = [a for a in fig.axes[0].patches if a.get_gid() == "series:vllm_fullstate"]
    assert bars and all(a.get_hatch() for a in bars)
    for x in _diamond_xs(fig.axes[0]):
        assert not any(b.get_x() <= x <= b.get_x() + b.get_width() for b in bars), x
    assert len(_diamond_xs(fig.axes[0])) == 4         # OneLA and vLLM FullState at O=3 and O=7
    # Fig 7a: each FullState diamond is at its paper-mode slot (n=0), not beside the hatched index-mode box
    fig = fig7_generality.draw(res)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    boxes = {b: i + 1 for i, b in enumerate(labels)}
    index_at = [boxes[lb] for lb in labels if "(index" in lb]
    xs = _diamond_xs(ax)
    assert len(xs) == 5                                 # the paper's five medians (no vLLM ReplaySSM kernel)
    assert all(min(abs(x - i) for i in index_at) > 0.5 for x in xs)
    assert sum("(n=0)" in lb for lb in labels) == 6    # vLLM, SGLang, FlashInfer, TRT-LLM, Controlled, fla: paper mode


def test_figures_render_both_modes_with_the_paper_at_the_paper_mode(fake):
    fig = fig8_sources.draw(fake)
    t = texts(fig)
    # every slot is measured but fla's (a system not in the paper, no rows in this cell: 2 paths x 8 bar groups)
    assert t.count("not measured yet") == 16 and "fla FullState" in t
    paper_bars = [a for a in fig.axes[0].patches if a.get_gid() == "series:vllm_fullstate_paper"]
    assert paper_bars and not any(a.get_hatch() for a in paper_bars)
    for x in _diamond_xs(fig.axes[0]):
        if not any(b.get_x() <= x <= b.get_x() + b.get_width() * 1.5 for b in paper_bars):
            onela = [a for a in fig.axes[0].patches if a.get_gid() == "series:onela"]
            assert any(b.get_x() <= x <= b.get_x() + b.get_width() * 1.5 for b in onela), x


def test_one_naming_rule_for_the_fullstate_systems():
    """The paper's mode carries the paper's name, the index mode the same name + " (index mode)", same colour,
    hatched; no other path is named as a mode."""
    from artifact.paths import PATHS
    from plots.style import FULLSTATE_SYSTEMS
    papers = [p for p in PATHS if p.endswith("_fullstate_paper")]
    assert len(papers) == len(FULLSTATE_SYSTEMS) == 6
    for p in papers:
        idx = p.removesuffix("_paper")
        assert idx in PATHS
        assert display_name(p).endswith("FullState") and "paper" not in display_name(p).lower()
        assert display_name(idx) == display_name(p) + " (index mode)"
        assert colour(p) == colour(idx) and hatch(idx) and not hatch(p)
    assert display_name("vllm_fullstate_paper") == "vLLM FullState"
    assert display_name("controlled_fullstate_paper") == "Controlled FullState"
    for p in set(PATHS) - set(papers) - {p.removesuffix("_paper") for p in papers}:
        assert "(index mode)" not in display_name(p) and not hatch(p), p
    assert len({display_name(p) for p in PATHS}) == len(PATHS)


def test_systems_not_in_the_paper_keep_slots_and_report_rows(tmp_path):
    """fla (plots.style.NOT_IN_PAPER): a slot in Figs 7 and 8 in both modes and REPORT rows saying "not in the
    paper", from its rows where it has them, "not measured yet" where it has none; never in a paper claim."""
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    fake = load_results(write_results(tmp_path / "with", operator_rows() + fig8_rows() + fla_fig8_rows()
                                      + full_model_rows()))
    fig = fig8_sources.draw(fake)
    assert "not measured yet" not in texts(fig)
    assert {"series:fla_fullstate", "series:fla_fullstate_paper"} <= series(fig.axes[0])
    lines = report.build(fake).splitlines()
    section = lines[lines.index("## Baselines the paper does not compare against"):]
    rows = [cells(ln) for ln in section[4:section.index("", 2)]]
    speed = {r[1]: r[4] for r in rows if r[2].startswith("Fig 7a")}
    assert speed == {"`fla_fullstate_paper`": "16.0×", "`fla_fullstate`": "44.0×"}
    assert all(r[3] == "not in the paper" for r in rows)
    lat = {(r[1], r[2]): r[4] for r in rows if r[2].startswith("Fig 8a: its latency")}
    assert lat[("`fla_fullstate`", "Fig 8a: its latency / OneLA's, O=3")] == "44.0×"        # 4.4 T / 0.1 T
    assert lat[("`fla_fullstate_paper`", "Fig 8a: its latency / OneLA's, O=7")] == "46.0×"
    assert not any("`fla_" in ln or "fla FullState" in ln for ln in report.paper_vs_ours(fake))
    # without fla rows: its slots say so, and the paper's numbers are the same
    empty = [r for r in operator_rows() + fig8_rows() + full_model_rows() if not r["path"].startswith("fla_")]
    res = load_results(write_results(tmp_path / "without", empty))
    for mod in (fig7_generality, fig8_sources):
        fig = mod.draw(res)
        t = texts(fig)
        assert t.count("not measured yet") >= 2 and "fla" in t, mod.__name__
        assert not any("series:fla_" in gid for ax in fig.axes for gid in series(ax)), mod.__name__
    assert report.paper_vs_ours(res) == report.paper_vs_ours(fake)
    section = report.baselines_not_in_paper(res)
    assert all("not measured yet" in ln for ln in section[2:]) and len(section) == 2 + len(not_in_paper(res))


# ---- Fig 6's native framework reference: transformers' generate (tools.hf_generate's table, FAKE here) ----
# GPU ms per decode call (FAKE): stock generate 30, OneLA inside it 6; wall ms per decode call 107 and 20; prefill
# 7200 and 100 ms. Stock runs at prompt 1K only (5K: a skipped row, as the tool records it).
FAKE_NATIVE = {"hf_generate": dict(call=30.0, wall=107.0, prefill=7200.0),
               "hf_generate_onela": dict(call=6.0, wall=20.0, prefill=100.0)}


def native_rows(root, run_id="fake-run"):
    """hf_generate rows at the Fig 6 cell in root/hf_generate.csv and their side table (tools.hf_generate's
    columns), all FAKE; returns the rows."""
    from artifact.results import append_csv
    from tools.hf_generate import TIME_COLUMNS, TIMES
    rows, times = [], []
    for prompt in (1024, 5120):
        for T in range(2, 7):
            for p, v in FAKE_NATIVE.items():
                if p == "hf_generate" and prompt == 5120:
                    rows.append(_row("hf_generate", p, "fake_qwen", 4, 256, T, prompt_len=prompt, status="skipped",
                                     run_id=run_id, reason="FAKE: stock generate not run at prompt 5120",
                                     max_abs_err=""))
                    continue
                r = _row("hf_generate", p, "fake_qwen", 4, 256, T, prompt_len=prompt, run_id=run_id,
                         latency_ms=v["call"] * T, max_abs_err=0.05, tolerance=0.5)
                rows.append(r)
                times.append(dict(config_hash=r["config_hash"], run_id=run_id, path=p, prompt_len=prompt, O=T + 1,
                                  T=T, prefill_ms=v["prefill"], decode_call_ms=v["call"],
                                  decode_call_wall_ms=v["wall"], beams_identical_to_stock=(
                                      "True" if p == "hf_generate_onela" and prompt == 1024 else ""),
                                  same_selections_as_stock=T + 1 if p == "hf_generate_onela" and prompt == 1024
                                  else ""))
    df = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df:
            df[c] = ""
    df[COLUMNS].to_csv(root / "hf_generate.csv", index=False)
    append_csv(root / TIMES, TIME_COLUMNS, [{c: str(t.get(c, "")) for c in TIME_COLUMNS} for t in times])
    return rows


def test_native_reference_speedups_figure_and_report(tmp_path):
    """From a FAKE hf_generate table beside the FAKE pipeline rows: per Fig 6 cell the speedups over stock
    transformers generate -- OneLA inside it (same run: GPU 30/6, wall 107/20, prefill 7200/100) and the pipeline's
    OneLA (across runs: 30 / (latency_ms / T)) -- drawn in Fig 6's lower row and tabled in REPORT and the claims
    table; a skipped stock cell is named, never a ratio; no paper number moves."""
    from plots.data import NATIVE_TIMES
    from plots.reproduced import native_cells
    from tools.hf_generate import TIMES
    assert NATIVE_TIMES == TIMES
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    base = operator_rows(Rs=(4,), Ts=(2,)) + fig8_rows() + full_model_rows()
    without = load_results(write_results(tmp_path / "without", base))
    write_results(tmp_path / "with", base)
    native_rows(tmp_path / "with")
    res = load_results(tmp_path / "with")
    per_cell = native_cells(res).set_index(["prompt_len", "O"])
    assert len(per_cell) == 10
    for T in range(2, 7):
        one_k, five_k = per_cell.loc[(1024, T + 1)], per_cell.loc[(5120, T + 1)]
        assert one_k["hf_call_x"] == pytest.approx(5.0) and one_k["hf_wall_x"] == pytest.approx(5.35)
        assert one_k["hf_prefill_x"] == pytest.approx(72.0)
        assert one_k["pipeline_call_ms"] == pytest.approx((10 + 3 * T) / T)        # full_model_rows' OneLA / T
        assert one_k["pipeline_x"] == pytest.approx(30.0 * T / (10 + 3 * T))
        assert five_k["hf_call_ms"] == pytest.approx(6.0) and math.isnan(five_k["stock_call_ms"])
        assert math.isnan(five_k["hf_wall_x"]) and math.isnan(five_k["pipeline_x"])
    # Fig 6: the lower row draws both transformers systems and the pipeline's OneLA, with the speedup labels
    fig = fig6_full_model.draw(res)
    low = fig.axes[2:]
    assert series(low[0]) == {"series:onela", "series:hf_generate", "series:hf_generate_onela"}
    assert series(low[1]) == {"series:onela", "series:hf_generate_onela"}
    t = texts(fig)
    assert t.count("5.3× wall 5.0× GPU") == 5 and f"{30.0 * 2 / 16:.1f}×" in t
    assert "skipped" in t and "not run: torch 2.14 pin" in t and "not measured yet" not in t
    assert "vLLM 0.33 pins torch 2.14" in t
    # REPORT: the table per cell and the spans; the claims table's native row
    lines = report.native_reference(res)
    row = next(ln for ln in lines if ln.startswith("| 1024 | 3 |"))
    assert cells(row)[3:10] == ["30.0 ms", "107 ms", "7,200 ms", "6.00 ms", "20.0 ms", "100 ms",
                                   "5.00× / 5.35× / 72.0×"]
    assert cells(row)[10] == report.fmt(30.0 * 2 / 16, "x") and cells(row)[11] == "True; 3 of 3"
    row5k = next(ln for ln in lines if ln.startswith("| 5120 | 3 |"))
    assert cells(row5k)[3:6] == ["skipped"] * 3 and cells(row5k)[9] == "— / — / —"
    speeds = [30.0 * T / (10 + 3 * T) for T in range(2, 7)]
    span = f"{report.fmt(min(speeds), 'x')} – {report.fmt(max(speeds), 'x')}"
    assert any(ln.startswith("- OneLA (this pipeline)") and ln.endswith(span) for ln in lines)
    native = next(r for r in report.claims(res) if "native framework reference" in r)
    assert f"| {span} [OneLA inside transformers, wall / call: 5.35×; its prefill: 72.0×] |" in native
    assert "`python -m tools.hf_generate` | 6-8 min (estimate) |" in native
    # the kernel suites' numbers ignore the native rows (their own beam-score tolerance is no looser gate)
    assert report.paper_vs_ours(res) == report.paper_vs_ours(without)


def test_native_reference_not_measured_yet(tmp_path):
    """No hf_generate table: Fig 6's lower row keeps the transformers slots saying "not measured yet" and vLLM's
    engine its named skip; REPORT and the claims table say "not measured yet", never a number."""
    res = load_results(write_results(tmp_path, full_model_rows()))
    t = texts(fig6_full_model.draw(res))
    assert "transformers generate: not measured yet" in t and t.count("not measured yet") >= 1 + 2 * 10
    assert t.count("not run: torch 2.14 pin") == 10
    lines = report.native_reference(res)
    assert any("transformers generate (stock), transformers generate + OneLA: not measured yet" in ln for ln in lines)
    assert all(f"{report.NOT_MEASURED}" in ln for ln in lines if ln.startswith("- OneLA"))
    assert all(cells(ln)[3] == report.NOT_MEASURED for ln in lines if ln.startswith("| 1024 "))
    native = next(r for r in report.claims(res) if "native framework reference" in r)
    assert "| not measured yet (no hf_generate rows) |" in native
    assert "vLLM 0.33 pins torch 2.14" in native



# ---------------------------------------------------------------- the project's own targets (plots/targets.py)

def _verdicts(res) -> dict[str, tuple[float, str]]:
    from plots import targets
    return {t.id: (m.value, v) for t, m, v in targets.evaluate(res)}


def test_targets_met_not_met_and_not_measured(fake):
    """On the FAKE tables: a target the rows meet, one they miss, and those whose rows are absent, each come out
    so, with the value the fixture's formulas give; REPORT's section says the same."""
    from plots import targets
    got = _verdicts(fake)
    # full_model_rows: vLLM FullState 2.16x OneLA, Controlled 2.0x (index mode): |2 / 2.16 - 1| = 7.4 %
    assert got["fig6_controlled_vllm_index"][0] == pytest.approx((1 - 2.0 / 2.16) * 100) and got["fig6_controlled_vllm_index"][1] == \
        targets.MET
    assert got["fig6_index"][0] == pytest.approx(2.0) and got["fig6_index"][1] == targets.NOT_MET
    # fake_beam_rows: OneLA's step 0.02 + 0.003 t ms, Controlled FullState 0.9 ms; cumulative T a + b t T / 2
    # over a floor of T a / 3
    assert got["depth_vs_fullstate"] == (pytest.approx(0.9 / (0.02 + 0.003 * 30)), targets.MET)
    assert got["cumulative_floor"] == (pytest.approx((31 * 0.02 + 0.003 * 30 * 31 / 2) / (31 * 0.02 / 3)),
                                       targets.NOT_MET)
    for absent in ("hf_prefill", "hf_decode_wall", "run_all_quick", "run_all_full", "step_floor", "step8"):
        assert math.isnan(got[absent][0]) and got[absent][1] == targets.NOT_MEASURED, absent
    lines = report.targets_table(fake)
    row = next(ln for ln in lines if ln.startswith("| `run_all_full` |"))
    assert cells(row)[3:5] == [report.NOT_MEASURED, report.NOT_MEASURED] and "`./run_all.sh` writes them" in row
    assert cells(next(ln for ln in lines if ln.startswith("| `fig6_index` |")))[2:5] == ["≥ 3.00×", "2.00×",
                                                                                          "**not met**"]
    assert "## Project targets" in report.build(fake)


def test_step_targets_read_the_deepest_decodes_steps(tmp_path):
    """The per-step targets read the deepest OneLA decode's own steps (steps_ms) against floors interpolated
    between the depth cells: 1.5x every floor meets both; step 8 tripled misses both. Where that decode lists
    each step's own floor (steps_floor_ms), those are used instead."""
    from plots import targets
    from test_beam_scaling import FAKE_FIT, fake_beam_rows
    a, b = FAKE_FIT["onela"]
    floors = [0.5 * a / 4] + [(a + b * t) / 4 for t in range(1, 31)]     # fake_beam_rows' step / 4, linear in t
    for name, scale8 in (("met", 1.0), ("missed", 3.0)):
        root = tmp_path / name
        root.mkdir()
        fake_beam_rows(root)
        side = pd.read_csv(root / fig_beam_scaling.STEPS_CSV)
        ms = [1.5 * f * (scale8 if t == 8 else 1.0) for t, f in enumerate(floors)]
        side["steps_ms"] = ""
        side.loc[(side["path"] == "onela") & (side["step"] == 30), "steps_ms"] = ";".join(f"{x:.9g}" for x in ms)
        side.to_csv(root / fig_beam_scaling.STEPS_CSV, index=False)
        got = _verdicts(load_results(root))
        if name == "met":
            assert got["step_floor"] == (pytest.approx(1.5), targets.MET)
            assert got["step8"] == (pytest.approx((a + 8 * b) / (a + 7 * b)), targets.MET)
        else:
            assert got["step_floor"] == (pytest.approx(4.5), targets.NOT_MET)
            assert got["step8"] == (pytest.approx(3 * (a + 8 * b) / (a + 7 * b)), targets.NOT_MET)
    # where the deepest decode lists every step's own floor, those are the floors: none interpolated
    side = pd.read_csv(root / fig_beam_scaling.STEPS_CSV)
    own = [f * (2.0 if t == 5 else 1.0) for t, f in enumerate(floors)]      # step 5's floor twice the line's
    side["steps_floor_ms"] = ""
    side.loc[(side["path"] == "onela") & (side["step"] == 30), "steps_floor_ms"] = ";".join(f"{x:.9g}" for x in own)
    side.to_csv(root / fig_beam_scaling.STEPS_CSV, index=False)
    res = load_results(root)
    steps = fig_beam_scaling.decode_steps(fig_beam_scaling.of_lineage(fig_beam_scaling.depth_table(res), "beam"))
    assert not steps["interpolated"].any() and steps["floor_ms"].tolist() == pytest.approx(own)
    assert _verdicts(res)["step_floor"] == (pytest.approx(4.5), targets.NOT_MET)   # step 8 tripled, as before


def test_run_time_targets_read_the_stages_file(tmp_path):
    """A run's stages.tsv summed: 11.7 min misses the quick run's 10; a stage that exited non-zero misses it
    whatever the time; no folder is not measured yet."""
    from plots import targets
    (tmp_path / targets.QUICK_RUN).mkdir()
    stages = tmp_path / targets.QUICK_RUN / targets.STAGES
    stages.write_text("suite a\t300\t0\nsuite b\t400\t0\n")
    got = _verdicts(load_results(tmp_path))
    assert got["run_all_quick"] == (pytest.approx(700 / 60), targets.NOT_MET)
    assert got["run_all_full"][1] == targets.NOT_MEASURED
    stages.write_text("suite a\t100\t0\nsuite b\t200\t1\n")
    assert _verdicts(load_results(tmp_path))["run_all_quick"] == (pytest.approx(5.0), targets.NOT_MET)
    stages.write_text("suite a\t100\t0\n")
    assert _verdicts(load_results(tmp_path))["run_all_quick"][1] == targets.MET


def test_every_target_is_listed_in_the_design_and_a_bad_comparison_is_refused():
    from pathlib import Path

    from plots import targets
    design = Path(__file__).resolve().parents[1] / "docs" / "design.md"
    section = design.read_text().split("## 7.")[1].split("\n## ")[0]
    assert [t.id for t in targets.TARGETS if f"`{t.id}`" not in section] == []
    assert set(targets.BY_ID) == {t.id for t in targets.TARGETS}
    with pytest.raises(ValueError, match="op '=='"):
        targets.Target("x", "x", "x", "==", 1.0, "x", lambda r: None, "x")
