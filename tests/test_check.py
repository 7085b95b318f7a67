"""`python -m plots.check` (plots/check.py) on run folders made here from the committed results.

A "run" is a copy of committed rows (the cells `./run_all.sh quick` measures), re-labelled as a new run with its
own env record, then perturbed the way a real rerun or a broken one would be. Nothing is written into results/.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from artifact.results import COLUMNS, read_rows
from plots import check
from plots.data import load_results

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
BASELINES = ("vllm_fullstate", "vllm_prefix_replay", "sglang_fullstate", "sglang_replayssm", "flashinfer_fullstate",
             "trtllm_fullstate")
NO_PACK = "cannot import vllm.model_executor.layers.fla.ops from pack .baseline_pack/site (no baseline pack built)"


@functools.cache
def _committed(suite: str) -> pd.DataFrame:
    """The committed table through the store's reader: every column of COLUMNS (those it lacks, empty)."""
    return pd.DataFrame(read_rows(RESULTS / f"{suite}.csv"), columns=COLUMNS, dtype=str)


def _read(suite: str) -> pd.DataFrame:
    return _committed(suite).copy()


QUICK_SUITES = sorted(p.stem for p in (REPO / "sweeps" / "conf" / "suite").glob("quick_*.yaml"))


@functools.cache
def _quick_hashes() -> dict[str, frozenset]:
    """The config_hash of every cell `./run_all.sh quick` runs on a GPU, by results table (composed from
    sweeps/conf/suite/quick_*.yaml, so these rows follow the quick path's configs)."""
    import torch
    from hydra import compose, initialize_config_module

    import sweeps.schema  # noqa: F401 - registers the structured configs
    from sweeps.spec import shard_cells, validate
    out: dict[str, set] = {}
    with initialize_config_module("sweeps.conf", version_base="1.3"):
        for suite in QUICK_SUITES:
            spec = validate(compose("config", overrides=[f"suite={suite}"]))
            out.setdefault(spec.suite, set()).update(c["config_hash"] for c in shard_cells(spec, torch.device("cuda")))
    return {s: frozenset(h) for s, h in out.items()}


def quick_rows() -> dict[str, pd.DataFrame]:
    """The committed rows of the cells `./run_all.sh quick` runs (sweeps/conf/suite/quick_*.yaml)."""
    tables = {}
    for suite, hashes in _quick_hashes().items():
        df = _read(suite)
        tables[suite] = df[df.config_hash.isin(hashes)]
    return tables


def write_run(root: Path, tables: dict[str, pd.DataFrame], gpu: str = "NVIDIA H200", run_id: str = "quick-test",
              scale: float = 1.0, no_pack: bool = False) -> Path:
    """A run folder: the tables as one new run (latencies x scale), its env record naming `gpu`."""
    root.mkdir(parents=True, exist_ok=True)
    for suite, df in tables.items():
        df = df.copy()
        df["run_id"] = run_id
        lat = pd.to_numeric(df["latency_ms"].replace("", np.nan))
        df["latency_ms"] = (lat * scale).map(lambda x: "" if pd.isna(x) else repr(float(x)))
        if no_pack:
            base = df.path.str.removesuffix("_paper").isin(BASELINES)
            for c in ("latency_ms", "p20_ms", "p80_ms", "persistent_bytes", "written_bytes", "dram_read_bytes",
                      "dram_write_bytes", "max_abs_err"):
                df.loc[base, c] = ""
            df.loc[base, "status"] = "skipped"
            df.loc[base, "reason"] = NO_PACK
        df[COLUMNS].to_csv(root / f"{suite}.csv", index=False)
    (root / "env").mkdir(exist_ok=True)
    (root / "env" / f"{run_id}.json").write_text(json.dumps({"run_id": run_id, "gpu": gpu}))
    return root


@pytest.fixture(scope="module")
def reference():
    return load_results(RESULTS)


@pytest.fixture
def run_check(reference):
    """check.check against the committed results (loaded once for the module), as `python -m plots.check` prints."""
    def run(path: Path) -> tuple[int, str]:
        code, text = check.check(path, RESULTS, ref=reference)
        return code, text
    return run


def line(out: str, start: str) -> str:
    hits = [ln for ln in out.splitlines() if ln.startswith(f"| {start}")]
    assert hits, f"no line starting {start!r}"
    return hits[0]


def test_committed_results_pass_against_themselves(capsys, tmp_path):
    """The command line: `python -m plots.check` = the committed results against themselves and the paper."""
    code = check.main(["--out", str(tmp_path / "check.txt")])
    out = capsys.readouterr().out
    assert code == check.EXIT_OK, out
    assert "[check] passed" in out and "FAIL" not in out
    assert "| metric | paper | reference | this run | ratio | verdict |" in out
    assert (tmp_path / "check.txt").read_text().strip() == out.strip()


def test_quick_run_without_the_pack_passes_and_names_what_did_not_run(tmp_path, run_check):
    """The H200 quick path without a baseline pack: OneLA and the controlled paths compared, the framework
    rows 'not run' with their reason, latencies 5 % off still within tolerance."""
    run = write_run(tmp_path / "run", quick_rows(), scale=1.05, no_pack=True)
    code, out = run_check(run)
    assert code == check.EXIT_OK, out
    assert "ok" in line(out, "Fig 8a: recurrent-path latency, R=4 W=512 Qwen, OneLA, O=3")
    assert "1.050" in line(out, "Fig 8a: recurrent-path latency, R=4 W=512 Qwen, OneLA, O=3")
    assert "not run" in line(out, "Fig 8a: vLLM FullState / OneLA latency, O=3 [index mode]")
    assert "no baseline pack" in out
    assert "ok" in line(out, "Fig 7a: OneLA latency, R=16 W=512")
    assert "ok" in line(out, "Fig 8b: OneLA persistent recurrent-state capacity, O=3")
    assert "ok" in line(out, "full_model: OneLA latency")
    assert "not run" in line(out, "operator: vLLM FullState (index mode) latency")
    # the paper's numbers pair with the paper-mode rows, which the run lacks here: never with the index mode's
    assert "not run" in line(out, "Fig 8a: vLLM FullState / OneLA latency, O=3 (")
    assert "ok" in line(out, "Fig 6: full-model decode-forward, OneLA vs Controlled FullState (R=4 W=256, prompt "
                             "1K/5K, O=3-7), smallest speedup (")


@pytest.mark.parametrize("what", ["latency", "bytes", "failed", "traffic"])
def test_a_tampered_run_fails(tmp_path, run_check, what):
    tables = quick_rows()
    rp = tables["recurrent_path"].copy()
    onela = rp.index[(rp.path == "onela") & (rp["T"] == "2")][0]
    if what == "latency":
        rp.loc[onela, "latency_ms"] = repr(float(rp.loc[onela, "latency_ms"]) * 1.3)
    elif what == "bytes":
        rp.loc[onela, "persistent_bytes"] = str(int(rp.loc[onela, "persistent_bytes"]) + 4096)
    elif what == "failed":
        rp.loc[onela, "status"] = "failed"
        rp.loc[onela, "reason"] = "max_abs_err 3.1e-2 > tolerance 4.88e-4"
    else:
        tr = tables["traffic"].copy()
        i = tr.index[tr.path == "onela"][0]
        tr.loc[i, "dram_read_bytes"] = str(int(float(tr.loc[i, "dram_read_bytes"]) * 1.5))
        tables["traffic"] = tr
    tables["recurrent_path"] = rp
    code, out = run_check(write_run(tmp_path / "run", tables))
    assert code == check.EXIT_FAIL, out
    assert "[check] FAILED" in out
    expect = {"latency": "Fig 8a: recurrent-path latency, R=4 W=512 Qwen, OneLA, O=3", "bytes": "recurrent_path: OneLA capacity and writes",
              "failed": "correctness: failed cells in this run", "traffic": "Fig 8c: OneLA DRAM traffic"}[what]
    assert "FAIL" in line(out, expect)


def test_an_eager_timed_path_is_shown_not_gated(tmp_path, run_check):
    """The torch references run as eager launch loops: their latency follows the host, so 25 % off is shown only;
    the same change on a graph-timed path fails (test_a_tampered_run_fails)."""
    tables = quick_rows()
    rp = tables["recurrent_path"].copy()
    eager = rp.path == "reference_replay"
    assert eager.any() and rp.loc[eager, "timer"].str.startswith("eager").all()
    rp.loc[eager, "latency_ms"] = rp.loc[eager, "latency_ms"].map(lambda x: repr(float(x) * 0.75))
    tables["recurrent_path"] = rp
    code, out = run_check(write_run(tmp_path / "run", tables))
    assert code == check.EXIT_OK, out
    got = line(out, "recurrent_path: Reference replay (torch) latency")
    assert "0.750" in got and "info" in got and "eager-timed" in got


def test_another_gpu_model_is_shown_not_judged(tmp_path, run_check):
    run = write_run(tmp_path / "run", quick_rows(), gpu="NVIDIA H100 80GB HBM3", scale=1.4)
    code, out = run_check(run)
    assert code == check.EXIT_OK, out
    assert "not the same model" in out
    assert "other GPU" in line(out, "Fig 8a: recurrent-path latency, R=4 W=512 Qwen, OneLA, O=3")


def test_a_run_with_no_matching_rows_says_so(tmp_path, run_check):
    smoke = _read("recurrent_path").head(4).copy()
    smoke["suite"] = "smoke"
    smoke["config_hash"] = ["0000000000000000", "1111111111111111", "2222222222222222", "3333333333333333"]
    code, out = run_check(write_run(tmp_path / "run", {"smoke": smoke}))
    assert code == check.EXIT_NOTHING, out
    assert "no row of" in out and "matches a reference row" in out


def test_an_empty_folder_has_nothing_to_compare(tmp_path, run_check):
    (tmp_path / "empty").mkdir()
    code, out = run_check(tmp_path / "empty")
    assert code == check.EXIT_NOTHING and "no results rows" in out
    code, out = run_check(tmp_path / "missing")
    assert code == check.EXIT_NOTHING and "not a folder" in out


def test_every_paper_number_has_a_tolerance():
    from plots import paper
    for n in paper.NUMBERS:
        assert check.kind_of(n.key) in check.TOLERANCES


def _as_paper_mode(df: pd.DataFrame, index_path: str, scale: float) -> pd.DataFrame:
    """FAKE paper-mode rows: `index_path`'s rows renamed `<index_path>_paper`, latencies x scale, hashed anew."""
    from artifact.results import config_hash
    rows = df[df.path == index_path].copy()
    rows["path"] = index_path + "_paper"
    lat = pd.to_numeric(rows["latency_ms"].replace("", np.nan))
    rows["latency_ms"] = (lat * scale).map(lambda x: "" if pd.isna(x) else repr(float(x)))
    rows["config_hash"] = [config_hash(r) for r in rows.to_dict("records")]
    return rows


def test_the_check_pairs_the_paper_with_the_paper_mode(tmp_path):
    """With paper-mode rows in the reference and the run, the paper's vLLM FullState numbers are computed on them
    and gated there (a paper-mode latency 30 % off fails the paper pairing's line); the index-mode line beside it
    compares the index-mode rows and holds."""
    rp = _read("recurrent_path")
    rp = rp[rp.path != "vllm_fullstate_paper"]         # the measured paper-mode rows give way to the fake ones
    ref_tables = {"recurrent_path": pd.concat([rp, _as_paper_mode(rp, "vllm_fullstate", 1.2)])}
    ref_dir = write_run(tmp_path / "ref", ref_tables, run_id="ref-fake")
    run_tables = {"recurrent_path": pd.concat([rp, _as_paper_mode(rp, "vllm_fullstate", 1.2 * 1.3)])}
    run_dir = write_run(tmp_path / "run", run_tables)
    code, out = check.check(run_dir, ref_dir)
    assert code == check.EXIT_FAIL, out
    paper_line = line(out, "Fig 8a: vLLM FullState / OneLA latency, O=3 (")
    assert "FAIL" in paper_line and "| 39.7× |" in paper_line and "1.300" in paper_line
    index_line = line(out, "Fig 8a: vLLM FullState / OneLA latency, O=3 [index mode]")
    assert "| ok |" in index_line and f"| {check.NOT_PAIRED} |" in index_line
    assert "FAIL" in line(out, "recurrent_path: vLLM FullState latency")
    assert "ok" in line(out, "recurrent_path: vLLM FullState (index mode) latency")
