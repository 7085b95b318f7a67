"""The recorded `model` lineage: tools.record_lineage records the parents of the Qwen3.5 model's own beam search,
the workload loads them with the decode's convention (a reference decode on it reproduces the model's GDN outputs),
refuses what the file does not cover naming the values, and names the file and the command when it is missing;
the coalescence measure (distinct ancestors per depth); beam_scaling records its cells as skips without the file
and measures them with one."""
from __future__ import annotations

import json

import pytest
import torch
from hydra import compose, initialize_config_module

import artifact.workload as workload
import sweeps.schema  # noqa: F401 - registers the structured configs
from artifact.ancestry import build, distinct_ancestors, distinct_per_depth
from artifact.model.config import TINY
from artifact.reference import fullstate_decode
from artifact.workload import LINEAGES, LineageUnavailable, Workload, lineage_file, make_workload
from oracles import replay_decode
from tools import record_lineage

TINY_RUN = dict(preset="tiny", R=2, W=6, O=5, prompt_len=12, seed=3, path="reference_fullstate", device="cpu")


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """The package's lineage folder moved to an empty tmp folder (so the committed file, if any, is not read)."""
    d = tmp_path / "data"
    d.mkdir()
    monkeypatch.setattr(workload, "LINEAGE_DATA_DIR", d)
    return d


def record_tiny(data_dir, dtype: str = "bfloat16") -> None:
    a = TINY_RUN
    rc = record_lineage.main(["--cpu", "--R", str(a["R"]), "--W", str(a["W"]), "--O", str(a["O"]), "--prompt-len",
                              str(a["prompt_len"]), "--seed", str(a["seed"]), "--output", str(lineage_file("model")),
                              "--dtype", dtype])
    assert rc == 0 and lineage_file("model").parent == data_dir


def test_the_tool_records_the_search_with_its_provenance(data_dir, capsys):
    record_tiny(data_dir)
    dec, result = record_lineage.search(**TINY_RUN)
    parents, meta = workload.load_lineage(lineage_file("model"))
    T = TINY_RUN["O"] - 1
    assert parents.shape == (T, 2, 6) and parents.dtype == torch.int32
    assert torch.equal(parents, result.parents[:T])              # the search is seeded: the file is its parents
    assert (parents[0] == 0).all() and int(parents.min()) >= 0 and int(parents.max()) < 6
    for key, want in (("preset", "tiny"), ("seed", 3), ("dtype", "bfloat16"), ("prompt_len", 12), ("path", "reference_fullstate"),
                      ("R", 2), ("W", 6), ("T", T), ("O", 5), ("torch", torch.__version__)):
        assert meta[key] == want, key
    assert meta["git_commit"] and len(meta["distinct_ancestors_last_step"]) == T - 1
    assert json.loads(lineage_file("model").with_suffix(".json").read_text()) == meta
    assert "distinct ancestors" in capsys.readouterr().out


def test_the_workload_follows_the_recorded_beams(data_dir):
    """The model lineage's workload rows are the parents each decode call read: FP32 FullState and FP64 projection
    replay on a workload of the model's own layer-0 GDN inputs and the recorded parents reproduce the outputs the
    search's (exact) stepper produced; the parents one step off do not."""
    record_tiny(data_dir, dtype="float32")                  # fp32 outputs: no bf16 rounding to hide a wrong parent
    dec, result = record_lineage.search(**TINY_RUN, dtype="float32")
    T, R, W = dec.T, dec.R, dec.W
    geo = TINY.geometry
    wl_model = make_workload(geo, R, W, T, lineage="model", seed=0, prompt_len=0)
    assert wl_model.lineage == "model" and torch.equal(wl_model.parents, result.parents[:T])
    io = dec.gdn_io[0]
    qkv = [dec.split_qkv(io["mixed"][t]) for t in range(T)]
    q, k, v = (torch.stack([x[i] for x in qkv]).float() for i in range(3))
    g, beta = torch.stack(io["g"][:T]).float(), torch.stack(io["beta"][:T]).float()

    def decode_err(parents, oracle=fullstate_decode):
        wl = Workload(geo, q, k, v, g, beta, parents, dec.prompt["s_ctx"][0].float(), lineage="model")
        return float((oracle(wl).double() - io["out"].double()).abs().max())
    scale = float(io["out"].abs().max())
    exact = decode_err(wl_model.parents)
    assert exact <= 1e-5 * scale                          # fp32 rounding, nothing more
    assert decode_err(wl_model.parents, replay_decode) <= 1e-5 * scale
    # Parents one step late change the outputs little here (the seeded heads decay fast: A ~ U(0, 16)), but far more
    # than the right parents' rounding (0 on a CPU: the same FP32 update on the same inputs).
    shifted = torch.cat([wl_model.parents[:1], result.parents[2:T + 1]])
    assert decode_err(shifted) > 10 * exact and decode_err(shifted) > 0


def test_refusals_name_the_file_the_command_and_the_values(data_dir):
    path = lineage_file("model")
    with pytest.raises(LineageUnavailable, match=f"{path}.*missing.*python -m tools.record_lineage"):
        make_workload("qwen3_5_0_8b", 2, 6, 3, lineage="model")
    assert "missing" in workload.lineage_unavailable("model", 3, 2, 6)
    record_tiny(data_dir)
    with pytest.raises(LineageUnavailable, match="recorded at W=6: W=5 is not covered"):
        make_workload("qwen3_5_0_8b", 2, 5, 3, lineage="model")
    with pytest.raises(LineageUnavailable, match=r"covers T <= 4, R <= 2: T=5, R=2 is not covered"):
        make_workload("qwen3_5_0_8b", 2, 6, 5, lineage="model")
    with pytest.raises(LineageUnavailable, match=r"T=2, R=3 is not covered"):
        make_workload("qwen3_5_0_8b", 3, 6, 2, lineage="model")
    assert workload.lineage_unavailable("model", 4, 1, 6) is None and workload.lineage_unavailable("beam", 9, 9, 9) is None
    wl = make_workload("qwen3_5_0_8b", 1, 6, 2, lineage="model", prompt_len=0)   # the first T steps, first R requests
    assert torch.equal(wl.parents, workload.load_lineage(path)[0][:2, :1])
    with pytest.raises(ValueError, match="unknown lineage 'greedy'; known: beam, .*, model"):
        make_workload("qwen3_5_0_8b", 2, 4, 2, lineage="greedy")
    with pytest.raises(ValueError, match="'beam' is not a recorded lineage"):
        lineage_file("beam")
    assert "model" not in LINEAGES                        # the synthetic list, which tests and suites iterate


def test_the_recorded_inputs_are_the_beam_lineages():
    """A model workload differs from the beam workload of the same seed in its parents alone."""
    parents = make_workload("qwen3_5_0_8b", 2, 6, 3, lineage="beam", seed=4, prompt_len=0).parents
    assert parents.shape == (3, 2, 6)
    beam = make_workload("qwen3_5_0_8b", 2, 6, 3, lineage="beam", seed=4, prompt_len=0)
    ident = make_workload("qwen3_5_0_8b", 2, 6, 3, lineage="identity", seed=4, prompt_len=0)
    assert all(torch.equal(getattr(beam, n), getattr(ident, n)) for n in ("q", "k", "v", "g", "beta", "s_ctx"))


def test_distinct_ancestors_per_depth():
    parents = torch.tensor([[0, 0, 0, 0], [0, 0, 1, 1], [2, 3, 2, 3]], dtype=torch.int32)[:, None]   # R = 1, W = 4
    assert distinct_ancestors(parents).tolist() == [[1, 2]]       # depth 0: beam 1 alone; depth 1: beams 2 and 3
    assert distinct_ancestors(parents, step=1).tolist() == [[2]]
    assert distinct_ancestors(parents, step=0).shape == (1, 0)
    T, W = 6, 5
    assert (distinct_ancestors(make_workload("gdn_small", 2, W, T, lineage="identity", prompt_len=0).parents) == W).all()
    assert (distinct_ancestors(make_workload("gdn_small", 2, W, T, lineage="single_parent",
                                             prompt_len=0).parents) == 1).all()
    wl = make_workload("gdn_small", 3, 9, T, lineage="beam", seed=7, prompt_len=0)
    tables = build(wl.parents)                           # the definition: distinct slots h_t(b, j) over the beams
    for step in range(T):
        want = [[tables[step, r, :, j].unique().numel() for j in range(step)] for r in range(3)]
        assert distinct_ancestors(wl.parents, step).tolist() == want
        assert distinct_per_depth(tables[step].permute(0, 1, 2), step).tolist() == want
    with pytest.raises(ValueError, match="step=6 in"):
        distinct_ancestors(wl.parents, step=6)


def test_coalescence_lines_compare_with_the_beam_lineage():
    parents = make_workload("qwen3_5_0_8b", 2, 6, 5, lineage="single_parent", seed=1, prompt_len=0).parents
    text = "\n".join(record_lineage.coalescence_lines(parents, seed=1))
    assert "| 0 | 1.0 |" in text and "| 3 | 1.0 |" in text and "records read at step 4" in text


# ---------------------------------------------------------------- beam_scaling with and without the file

BS_RUN = ("suite=beam_scaling", "hardware=cpu", "geometry=smoke_gqa", "shape.R=[1]", "shape.W=[6]", "shape.T=[1,3]",
          "path=[reference_replay,reference_fullstate]", "beam_scaling.width_R=1", "beam_scaling.width_T=3",
          "beam_scaling.width_multiple=6", "beam_scaling.memory_bytes=100000", "tolerance=1e-2", "progress=false")


def cfg_of(*overrides: str):
    with initialize_config_module("sweeps.conf", version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_beam_scaling_records_the_model_cells_as_skips_without_the_file(data_dir, tmp_path):
    from artifact.results import read_rows
    from sweeps.run import EXIT_OK, run_sweep
    from sweeps.suites import beam_scaling as bs
    out = tmp_path / "out"
    assert run_sweep(cfg_of(*BS_RUN, f"results_dir={out}")) == EXIT_OK
    rows = read_rows(out / "beam_scaling.csv")
    model = [r for r in rows if r["lineage"] == "model"]
    assert len(model) == 2 * 2 and all(r["status"] == "skipped" for r in model)
    assert all(str(lineage_file("model")) in r["reason"] and "tools.record_lineage" in r["reason"] for r in model)
    assert all(r["status"] == "ok" for r in rows if r["lineage"] == "beam")

    # with the file (recorded at W = 6) the same cells are measured, per step too; beam rows are not run again
    record_tiny(data_dir)
    assert run_sweep(cfg_of(*BS_RUN, f"results_dir={out}", "redo=[skipped]")) == EXIT_OK
    rows = read_rows(out / "beam_scaling.csv")
    model = [r for r in rows if r["lineage"] == "model"]
    assert len(model) == 4 and all(r["status"] == "ok" for r in model), [r["reason"] for r in model]
    import pandas as pd
    steps = pd.read_csv(out / bs.STEPS_FILE, dtype=str, keep_default_na=False)
    assert {r["config_hash"] for r in model} <= set(steps["config_hash"])

    from plots import fig_beam_scaling as fig
    from plots.data import load_results
    res = load_results(out)
    depth = fig.depth_table(res)
    assert fig.lineages(depth) == ["beam", "model"]
    text = "\n".join(fig.report_lines(res))
    assert "**synthetic beam lineage** (`lineage=beam`)" in text and "(`lineage=model`)" in text
