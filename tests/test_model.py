"""Full-model decode (Fig 6): prefill, pipeline, beam search, paths, checkpoints, the Fig 6 runner.

CPU tests use the TINY config (4 layers, GDN + gated attention, GQA in both). GPU tests (`pytest -m gpu`) cover
graph capture, the prompt-attention kernels and the full Qwen3.5-0.8B geometry.
"""
import dataclasses
import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from artifact.measure import DEFAULT_TOLERANCE
from artifact.model.attention import prompt_attention, select_prompt_attention, shared_prefix_attention
from artifact.model.beam import BeamResult, first_beams, select_beams
from artifact.model.stepper_gate import poison, stepper_max_abs_err
from artifact.model.config import QWEN3_5_0_8B, TINY, ModelConfig, hybrid_pattern
from artifact.model.decode import BeamDecoder
from artifact.model.gdn_chunk import chunk_gated_delta
from artifact.model.network import HybridModel
from artifact.model.prefill import prefill, random_prompts
from artifact.model.safetensors_io import load_file, save_file
from artifact.model.weights import load_hf_checkpoint, random_weights, save_hf_checkpoint
from artifact.reference import TorchFullStateStepper
from artifact.results import COLUMNS
from artifact.workload import prefill_state
from oracles import recurrent_gated_delta, sequence_logits, sequences

R, W, T, L = 2, 6, 4, 11


@pytest.fixture(scope="module")
def fp32():
    m = HybridModel.random(TINY, seed=1, dtype=torch.float32)
    return m, prefill(m, random_prompts(R, L, TINY.vocab_size, seed=3), replay_block=4)


def decode(model, ps, path, **kw):
    d = BeamDecoder(model, path, R, W, T, L, **kw)
    d.load_prompt(ps)
    return d, d.run()


# ---- GDN prefill ----

def _gdn_inputs(B, n, hk, hv, K, V, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, n, hk, K, generator=g), torch.randn(B, n, hk, K, generator=g),
            torch.randn(B, n, hv, V, generator=g), -3 * torch.rand(B, n, hv, generator=g),
            torch.rand(B, n, hv, generator=g))


@pytest.mark.parametrize("n,chunk,hk,hv", [(1, 64, 2, 2), (70, 16, 2, 4), (128, 64, 1, 3), (33, 8, 4, 4)])
def test_chunked_gdn_equals_recurrence(n, chunk, hk, hv):
    q, k, v, g, beta = _gdn_inputs(2, n, hk, hv, 16, 8)
    S0 = 0.1 * torch.randn(2, hv, 8, 16)
    o_ref, S_ref = recurrent_gated_delta(q, k, v, g, beta, S0, dtype=torch.float64)
    o, S = chunk_gated_delta(q, k, v, g, beta, S0, chunk=chunk, dtype=torch.float64)
    assert (o - o_ref).abs().max() < 1e-12 and (S - S_ref).abs().max() < 1e-12
    o32, S32 = chunk_gated_delta(q, k, v, g, beta, S0, chunk=chunk)
    assert (o32 - o_ref).abs().max() < 1e-5 and (S32 - S_ref).abs().max() < 1e-5


def test_chunked_gdn_state_equals_workload_prefill_state():
    """The matrix-form prefill gives artifact.workload.prefill_state's token-by-token S_ctx."""
    q, k, v, g, beta = _gdn_inputs(3, 100, 2, 4, 16, 8, seed=1)
    _, S = chunk_gated_delta(q, k, v, g, beta, dtype=torch.float64)
    ref = prefill_state(k.transpose(0, 1), v.transpose(0, 1), g.transpose(0, 1), beta.transpose(0, 1),
                        dtype=torch.float64)
    assert (S - ref).abs().max() < 1e-12


def test_gdn_rejects_bad_shapes():
    q, k, v, g, beta = _gdn_inputs(1, 5, 2, 4, 16, 8)
    with pytest.raises(ValueError, match="g"):
        chunk_gated_delta(q, k, v, g[..., :3], beta)
    with pytest.raises(ValueError, match="initial_state"):
        chunk_gated_delta(q, k, v, g, beta, initial_state=torch.zeros(1, 4, 16, 8))


def test_prefill_block_checkpoint_and_tail(fp32):
    """ReplaySSM's start: the state at the last block boundary plus the tail inputs replay to S_ctx."""
    m, ps = fp32
    assert ps.boundary == 8 and len(ps.s_ctx) == len(ps.s_boundary) == len(TINY.gdn_layers)
    for s_ctx, s_b, tail, conv in zip(ps.s_ctx, ps.s_boundary, ps.tail, ps.conv_tail):
        assert tail["q"].shape == (L - 8, R, 2, 16) and tail["v"].shape == (L - 8, R, 4, 16)
        assert tail["g"].shape == tail["beta"].shape == (L - 8, R, 4)
        assert conv.shape == (R, TINY.linear_conv_kernel_dim - 1, TINY.conv_dim)
        _, S = recurrent_gated_delta(*(tail[n].transpose(0, 1) for n in ("q", "k", "v", "g", "beta")),
                                     initial_state=s_b)
        assert (S - s_ctx).abs().max() < 1e-5 and s_ctx.abs().max() > 1e-3


# ---- the decode pipeline ----

@pytest.mark.parametrize("path", ["reference_fullstate", "reference_replay"])
def test_decode_matches_the_no_cache_oracle(fp32, path):
    """Decode call t's logits for every beam = the logits of re-running the whole model over prompt + that beam's
    tokens (no cache at all): the conv windows, prompt/decode KV, rotary positions and GDN states all line up."""
    m, ps = fp32
    prompt = random_prompts(R, L, TINY.vocab_size, seed=3)
    _, res = decode(m, ps, path)
    for t in range(T):
        prefix = sequences(BeamResult(res.tokens[: t + 1], res.parents[: t + 1], res.scores, res.hidden))
        full = torch.cat([prompt[:, None, :].expand(R, W, L), prefix], dim=2).reshape(R * W, -1)
        oracle = sequence_logits(m, full)[:, -1].reshape(R, W, -1)
        assert (m.logits(res.hidden[t]).float() - oracle).abs().max() < 2e-5, t


def test_fullstate_and_replay_give_the_same_beams_at_fp32(fp32):
    m, ps = fp32
    _, a = decode(m, ps, "reference_fullstate")
    _, b = decode(m, ps, "reference_replay")
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents)
    assert (a.hidden - b.hidden).abs().max() < 1e-5
    # a real beam search: children duplicate some parents, others die, order changes
    p = a.parents[1:]
    assert any(len(set(row.tolist())) < W for row in p.reshape(-1, W))
    assert (p != torch.arange(W, dtype=p.dtype)).any()


def test_controlled_fullstate_paper_mode_decodes_the_index_modes_beams(device):
    """Fig 6 runs Controlled FullState in both modes: the paper's (one pool, an explicit per-step copy of the
    parents' states, `controlled_fullstate_paper`) decodes the same beams, bit for bit, as the index mode (two pools,
    parents read through an index), through a beam search whose children duplicate and drop parents, and both
    follow the FP32 FullState reference; the paper mode keeps one pool, half the index mode's."""
    m = HybridModel.random(TINY, seed=1, dtype=torch.float32, device=device)
    ps = prefill(m, random_prompts(R, L, TINY.vocab_size, seed=3, device=device), replay_block=4)
    (di, a), (dp, b) = decode(m, ps, "controlled_fullstate"), decode(m, ps, "controlled_fullstate_paper")
    _, ref = decode(m, ps, "reference_fullstate")
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents) and torch.equal(a.hidden, b.hidden)
    assert torch.equal(a.tokens, ref.tokens) and (a.hidden - ref.hidden).abs().max() < 1e-3
    p = a.parents[1:]
    assert any(len(set(row.tolist())) < W for row in p.reshape(-1, W))      # the reorder duplicates parents
    assert 2 * dp.steppers[0].persistent_bytes() == di.steppers[0].persistent_bytes()
    assert dp.steppers[0].written_bytes() > di.steppers[0].written_bytes()  # plus the copy of every state


def test_decoder_modes_follow_what_each_path_declares(fp32):
    """The core asks a path what it is, never its name: every registered path's beam-state mode and prompt-tail
    replay are its class's `keeps_ancestry` / `replays_prompt_tail`, and a new path class that declares them is
    treated so without any list in the core to edit."""
    from artifact.model.beam_state import beam_state_mode
    from artifact.paths import PATHS, UnavailablePath, get_path
    from artifact.reference import ReferenceFullStatePath
    expect_ancestry, expect_tail = {"onela", "reference_replay"}, {"vllm_prefix_replay"}
    for name in PATHS:
        path = get_path(name)
        assert not isinstance(path, UnavailablePath), path.reason
        assert beam_state_mode(path) == ("ancestry" if name in expect_ancestry else "copy"), name
        assert path.replays_prompt_tail == (name in expect_tail), name

    class NewAncestryPath(ReferenceFullStatePath):
        name = "a_new_path"
        keeps_ancestry = True
    assert beam_state_mode(NewAncestryPath()) == "ancestry"
    m, ps = fp32
    for name, mode in (("reference_replay", "ancestry"), ("reference_fullstate", "copy")):
        d = BeamDecoder(m, name, R, W, T, L)
        assert d.tree.mode == mode and not d.uses_tail, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ancestry_and_copy_state_modes_decode_identically(dtype):
    """Conv windows and decode KV through the ancestry index (no copies) == per-beam copies, bit for bit."""
    m = HybridModel.random(TINY, seed=2, dtype=dtype)
    ps = prefill(m, random_prompts(R, L, TINY.vocab_size, seed=4))
    a = decode(m, ps, "reference_fullstate", state_mode="copy")[1]
    b = decode(m, ps, "reference_fullstate", state_mode="ancestry")[1]
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents) and torch.equal(a.hidden, b.hidden)


def test_bf16_logits_within_tolerance_on_the_same_beams():
    """At bf16, paths may break near-ties differently, so the replay path follows FullState's beams (teacher
    forcing) and its logits must stay within tolerance, call by call."""
    m = HybridModel.random(TINY, seed=1, dtype=torch.bfloat16)
    ps = prefill(m, random_prompts(R, L, TINY.vocab_size, seed=3))
    _, a = decode(m, ps, "reference_fullstate")
    d = BeamDecoder(m, "reference_replay", R, W, T, L)
    d.load_prompt(ps)
    b = d.run(forced=a)
    assert torch.equal(b.tokens, a.tokens) and torch.equal(b.parents, a.parents)
    scale = max(m.logits(a.hidden[t]).float().abs().max() for t in range(T))
    err = max((m.logits(a.hidden[t]).float() - m.logits(b.hidden[t]).float()).abs().max() for t in range(T))
    assert err <= 1e-2 * scale, (err, scale)
    assert stepper_max_abs_err(d, b) < DEFAULT_TOLERANCE


def test_gate_catches_a_stepper_that_ignores_parents(fp32):
    class NoParents(TorchFullStateStepper):
        def step(self, t, q, k, v, g, beta, parents, out):
            return super().step(t, q, k, v, g, beta, torch.zeros_like(parents), out)

    m, ps = fp32
    d = BeamDecoder(m, "reference_fullstate", R, W, T, L)
    d.steppers = [NoParents(TINY.geometry, R, W, T, "cpu") for _ in d.steppers]
    d.load_prompt(ps)
    assert stepper_max_abs_err(d, d.run()) > 4 * DEFAULT_TOLERANCE
    good, res = decode(m, ps, "reference_fullstate")
    assert stepper_max_abs_err(good, res) < 1e-6
    poison(good)                                  # an unwritten output is never a pass
    assert stepper_max_abs_err(good, res) == math.inf


def test_beam_selection_is_the_global_top_w():
    g = torch.Generator().manual_seed(0)
    logits, scores = torch.randn(3, 4, 7, generator=g), torch.randn(3, 4, generator=g)
    top, par, tok = select_beams(logits, scores)
    cand = scores[:, :, None] + torch.log_softmax(logits, -1)
    for r in range(3):
        want = sorted(((float(cand[r, b, v]), b, v) for b in range(4) for v in range(7)), reverse=True)[:4]
        assert [(b, v) for _, b, v in want] == list(zip(par[r].tolist(), tok[r].tolist()))
        assert torch.allclose(top[r], torch.tensor([s for s, _, _ in want]))
    with pytest.raises(ValueError, match="W=8"):
        first_beams(torch.randn(2, 7), 8)


@pytest.mark.parametrize("compiled", [False, True])
def test_shared_prefix_attention_equals_full_softmax(compiled):
    """Prompt part + each beam's own KV, merged by log-sum-exp, is one softmax over both; also with the merge
    torch.compile'd (fullgraph) as the Fig 6 runner uses it."""
    if compiled and not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("torch.compile on a CPU needs a C++ compiler (g++ / c++ not found)")
    from artifact.model.attention import merge_own_kv
    merge = torch.compile(merge_own_kv, fullgraph=True, dynamic=False) if compiled else merge_own_kv
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 4, 16, generator=g)
    kp, vp = torch.randn(2, 2, 9, 16, generator=g), torch.randn(2, 2, 9, 16, generator=g)
    ko, vo = torch.randn(2, 3, 2, 2, 16, generator=g), torch.randn(2, 3, 2, 2, 16, generator=g)
    out = shared_prefix_attention("math", q, kp, vp, ko, vo, 0.25, merge=merge)
    assert out.shape == q.shape and out.dtype == q.dtype
    for r in range(2):
        for b in range(3):
            for h in range(4):
                kv = h // 2
                keys = torch.cat([kp[r, kv], ko[r, b, :, kv]])
                vals = torch.cat([vp[r, kv], vo[r, b, :, kv]])
                want = torch.softmax(keys @ q[r, b, h] * 0.25, 0) @ vals
                assert torch.allclose(out[r, b, h], want, atol=1e-5)
    assert select_prompt_attention("cpu", torch.bfloat16, 16) == "math"
    with pytest.raises(ValueError, match="bogus"):
        prompt_attention("bogus", q, kp, vp, 1.0)


def test_decoder_rejects_bad_input(fp32):
    m, ps = fp32
    with pytest.raises(ValueError, match="W=98"):
        BeamDecoder(m, "reference_fullstate", R, 98, T, L)
    with pytest.raises(ValueError, match="prompt_len"):
        BeamDecoder(m, "reference_fullstate", R, W, T, L + 1).load_prompt(ps)
    with pytest.raises(ValueError, match="unknown path"):
        BeamDecoder(m, "no_such_path", R, W, T, L)
    with pytest.raises(ValueError, match="T must"):
        BeamDecoder(m, "reference_fullstate", R, W, 0, L)


# ---- configs and checkpoints ----

def test_qwen3_5_0_8b_geometry():
    c = QWEN3_5_0_8B
    assert c.num_hidden_layers == 24 and len(c.gdn_layers) == 18 and len(c.attn_layers) == 6
    assert c.layer_types[:4] == ("linear_attention",) * 3 + ("full_attention",)
    assert (c.geometry.hk, c.geometry.hv, c.geometry.k, c.geometry.v) == (16, 16, 128, 128)
    assert c.rotary_dim == 64 and c.conv_dim == 6144 and c.vocab_size == 248320 and c.tie_word_embeddings


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="hidden_size"):
        dataclasses.replace(TINY, hidden_size=0)
    with pytest.raises(ValueError, match="layer_types"):
        dataclasses.replace(TINY, layer_types=("linear_attention", "mamba"))
    with pytest.raises(ValueError, match="num_key_value_heads"):
        dataclasses.replace(TINY, num_key_value_heads=3)
    with pytest.raises(ValueError, match="head_dim"):
        ModelConfig.from_hf({"text_config": {k: v for k, v in TINY.to_hf_text_config().items() if k != "head_dim"}})


def test_config_from_a_released_style_config_json():
    """Qwen3.5's config.json nests the text model under text_config, keeps rope settings in rope_parameters
    (with M-RoPE sections) and may give the layer pattern as full_attention_interval."""
    text = {"vocab_size": 248320, "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 24,
            "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 16,
            "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "rms_norm_eps": 1e-6,
            "mamba_ssm_dtype": "float32", "attn_output_gate": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                                "mrope_section": [11, 11, 10], "mrope_interleaved": True}}
    cfg = ModelConfig.from_hf({"model_type": "qwen3_5", "tie_word_embeddings": True, "text_config": text})
    assert cfg == QWEN3_5_0_8B


def test_safetensors_round_trip(tmp_path):
    ts = {"a": torch.randn(3, 4).bfloat16(), "b": torch.arange(5, dtype=torch.int64), "c": torch.randn(2, 1, 3)}
    save_file(ts, tmp_path / "x.safetensors")
    back = load_file(tmp_path / "x.safetensors")
    assert set(back) == set(ts) and all(torch.equal(back[n], ts[n]) and back[n].dtype == ts[n].dtype for n in ts)


@pytest.mark.parametrize("shards", [1, 3])
def test_hf_checkpoint_round_trip(tmp_path, shards, fp32):
    """A tiny checkpoint in Qwen3.5's Hugging Face layout, written by the test, loads back to the same model."""
    w = random_weights(TINY, seed=1)
    save_hf_checkpoint(tmp_path, TINY, {n: t.bfloat16() for n, t in w.items()}, shards=shards)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "qwen3_5" and config["text_config"]["linear_num_value_heads"] == 4
    cfg, loaded = load_hf_checkpoint(tmp_path)
    assert cfg == TINY and all(torch.equal(loaded[n], w[n].bfloat16()) for n in w)
    a = HybridModel.from_hf(tmp_path, torch.float32)
    b = HybridModel(TINY, {n: t.bfloat16() for n, t in w.items()}, torch.float32)
    ps = prefill(a, random_prompts(R, L, TINY.vocab_size, seed=3))
    assert torch.equal(ps.logits_last, prefill(b, random_prompts(R, L, TINY.vocab_size, seed=3)).logits_last)


def test_hf_checkpoint_text_only_layout_untied_and_errors(tmp_path):
    cfg = dataclasses.replace(TINY, tie_word_embeddings=False)
    w = random_weights(cfg, seed=5)
    save_file({("lm_head.weight" if n == "lm_head.weight" else "model." + n): t for n, t in w.items()}
              | {"mtp.fc.weight": torch.zeros(2, 2), "model.visual.x": torch.zeros(1)},
              tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_hf_text_config()))
    got_cfg, got = load_hf_checkpoint(tmp_path)
    assert got_cfg == cfg and set(got) == set(w) and torch.equal(got["lm_head.weight"], w["lm_head.weight"])
    bad = {n: t for n, t in w.items() if n != "layers.0.linear_attn.A_log"}
    save_file({"model." + n: t for n, t in bad.items()}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="layers.0.linear_attn.A_log"):
        load_hf_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="config.json"):
        load_hf_checkpoint(tmp_path / "nowhere")


# ---- the Fig 6 runner ----

def _cells(paths, Ts=(2,)):
    from artifact.results import config_hash
    geo = TINY.geometry
    out = []
    for T_ in Ts:
        for p in paths:
            c = dict(suite="full_model", path=p, geometry="tiny", R=2, W=4, T=T_, O=T_ + 1, HK=geo.hk, HV=geo.hv,
                     K=geo.k, V=geo.v, prompt_len=9, lineage="beam", seed=0, tolerance=DEFAULT_TOLERANCE)
            c["config_hash"] = config_hash(c)
            out.append(c)
    return out


def test_run_cells_on_cpu_rows(tmp_path):
    from sweeps.suites.full_model import run_cells
    ctx = SimpleNamespace(device=torch.device("cpu"), tolerance=DEFAULT_TOLERANCE, time_it=False,
                          results_dir=tmp_path, started=lambda c: None)
    cells = _cells(["reference_fullstate", "reference_replay", "vllm_fullstate"], Ts=(1, 3))
    rows = list(run_cells({"full_model": {"model": "tiny", "cpu": True}}, cells, ctx))
    assert len(rows) == len(cells) and all(set(r) <= set(COLUMNS) for r in rows)
    for r in rows:
        if r["path"].startswith("reference"):
            assert r["status"] == "ok" and r["max_abs_err"] < DEFAULT_TOLERANCE and r["persistent_bytes"] > 0, r
        else:
            assert r["status"] in ("skipped", "ok"), r
    assert not list(tmp_path.iterdir())                  # rows only: the suite writes no side table
    skipped = list(run_cells({}, cells[:1], ctx))[0]     # the 0.8B model is a GPU job
    assert skipped["status"] == "skipped" and "CUDA GPU" in skipped["reason"]
    with pytest.raises(ValueError, match="repeat"):
        list(run_cells({"full_model": {"repeat": 3}}, cells[:1], ctx))


def test_run_cells_books_the_shared_model_and_prefills_apart_from_the_paths(tmp_path, monkeypatch):
    """Under a sweep's RunContext the model and the prompt prefills are booked under INPUTS (built once for the
    cells that share them), each cell's decode under its path, and on a CPU nothing is released between cells
    (no device memory is held)."""
    from sweeps.context import ROW, RunContext
    from sweeps.suites import full_model
    built, released = [], []
    real_prefill = full_model.FullModelInputs.prompt

    def prompt(self, *a, **k):
        before = len(self._prompts)
        out = real_prefill(self, *a, **k)
        built.extend([a[1:]] * (len(self._prompts) - before))
        return out
    monkeypatch.setattr(full_model.FullModelInputs, "prompt", prompt)
    monkeypatch.setattr("artifact.measure.free_device_memory", lambda device: released.append(device))
    ctx = RunContext(device=torch.device("cpu"), ceilings=None, tolerance=DEFAULT_TOLERANCE, warmup_ms=1, rep_ms=1,
                     time_it=False, run_id="r", git_commit="c", results_dir=tmp_path)
    rows = list(full_model.run_cells({"full_model": {"model": "tiny", "cpu": True}},
                                     _cells(["reference_fullstate", "reference_replay"]), ctx))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    shared, phases, _ = ctx.take_charges()
    assert built == [(2, 9, 0)] and not released          # one real prefill (no graphs on a CPU: no decoy)
    assert set(shared) == {full_model.INPUTS, full_model.RELEASE} and shared[full_model.INPUTS] > 0
    assert {ph for (owner, ph) in phases if owner == full_model.INPUTS} == {"setup"}
    assert {ph for (owner, ph) in phases if owner == ROW} == {"setup", "capture"}     # CPU: gated, never timed


def test_one_cell_measurement_captures_on_the_decoy_and_gates_on_the_real_prompt(monkeypatch):
    """artifact.model.cell, the measurement both the suite and the breakdown take: the graphs are captured while
    the decoy prompt is loaded, the search is replayed and gated on the real one, and a failing gate is never
    timed. (The capture here is a stand-in that records the prompt it sees and replays eager calls.)"""
    from artifact.model import cell
    inputs = cell.FullModelInputs("cpu", dtype="float32", replay_block=4)
    m = inputs.model("tiny", 1)
    real, decoy = inputs.prompt(m, R, L, 0), inputs.prompt(m, R, L, 0, decoy=True)
    assert inputs.prompt(m, R, L, 0) is real and not torch.equal(real.s_ctx[0], decoy.s_ctx[0])
    seen = []

    def fake_capture(dec):
        seen.append(dec.prompt["s_ctx"][0].clone())
        dec.graphs = [SimpleNamespace(replay=lambda t=t: dec.forward(t)) for t in range(dec.T)]
    monkeypatch.setattr(cell, "uses_graphs", lambda model, path: True)
    monkeypatch.setattr(cell, "capture", fake_capture)
    gated = cell.gated_decode(inputs, m, "reference_replay", R, W, T, L, 0, DEFAULT_TOLERANCE)
    (captured,) = seen
    assert torch.equal(captured, decoy.s_ctx[0])                           # captured on the decoy
    assert torch.equal(gated.decoder.prompt["s_ctx"][0], real.s_ctx[0])    # replayed on the real prompt
    assert gated.graphs and gated.passed and gated.reason == "" and gated.max_abs_err < DEFAULT_TOLERANCE
    failed = cell.GatedDecode(gated.decoder, gated.result, True, math.nan, DEFAULT_TOLERANCE)
    assert not failed.passed and "max_abs_err nan > tolerance" in failed.reason
    with pytest.raises(RuntimeError, match="not timed"):
        failed.time(3, 1)
    for bad in (0, -1.0, math.nan, "1e-3"):
        with pytest.raises(ValueError, match="tolerance"):
            cell.gated_decode(inputs, m, "reference_replay", R, W, T, L, 0, bad)
    with pytest.raises(ValueError, match="replay_block"):
        cell.FullModelInputs("cpu", replay_block=0)


def test_each_full_model_run_gets_its_own_inductor_cache(tmp_path, monkeypatch):
    """A run's compiled kernels are autotuned in that run: no shared default Inductor cache (its tuned picks
    would carry over between runs), but a cache the user names is kept."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from sweeps.suites.full_model import private_inductor_cache
    for given in (None, default_cache_dir()):           # unset, or the default Inductor itself wrote back
        if given is None:
            monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        else:
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", given)
        mine = private_inductor_cache()
        assert mine != default_cache_dir() and not any(Path(mine).iterdir()), mine
        assert private_inductor_cache() == mine                 # once per process, not per cell
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "named"))
    assert private_inductor_cache() == str(tmp_path / "named")


def test_profile_writes_a_per_kernel_table(tmp_path):
    from sweeps.suites.full_model import run_cells
    ctx = SimpleNamespace(device=torch.device("cpu"), tolerance=DEFAULT_TOLERANCE, time_it=False,
                          results_dir=tmp_path, started=lambda c: None)
    cells = _cells(["reference_fullstate"], Ts=(2,))
    rows = list(run_cells({"full_model": {"model": "tiny", "cpu": True, "profile": str(tmp_path / "prof")}},
                          cells, ctx))
    assert rows[0]["status"] == "ok", rows[0]
    (table,) = (tmp_path / "prof").glob("reference_fullstate_*_O3.txt")
    assert "aten::" in table.read_text() and "Self CPU" in table.read_text()


def test_full_model_floor_is_model_part_plus_each_gdn_layers_path_cost():
    """floor_ms of a full-model cell: weights once per call, logits, prompt + decode K/V, the activations in the
    path's beam-state mode, 2 N FLOPs per matrix element, attention; plus the path's own cost() once per GDN
    layer, each part at its own rate."""
    from artifact.model.cost import activation_bytes, decode_floor, model_part
    from artifact.cost import FullState
    from artifact.paths import get_path
    m = HybridModel.random(TINY, seed=0)                           # bf16
    R, W, T, L, N = 2, 4, 3, 9, 8
    parents = torch.randint(0, W, (T, R, W), generator=torch.Generator().manual_seed(0))
    mats = [t for layer in m.layers for t in layer.values() if t.dim() >= 2] + [m.lm_head]
    weights = sum(t.numel() * t.element_size() for layer in m.layers for t in layer.values()) \
        + m.lm_head.numel() * 2 + m.final_norm.numel() * 4
    kv = 2 * TINY.num_key_value_heads * TINY.head_dim * 2
    n_attn = len(TINY.attn_layers)
    for mode in ("ancestry", "copy"):
        nb, nf = model_part(m, R, W, T, L, mode)
        acts = sum(activation_bytes(TINY, R, W, T, 2, mode).values())
        assert nb == acts + sum(weights + N * TINY.vocab_size * 2 + n_attn * (R * L + N * (t + 1)) * kv
                                for t in range(T))
        assert nf == sum(2 * N * sum(t.numel() for t in mats)
                         + n_attn * 4 * N * TINY.num_attention_heads * TINY.head_dim * (L + t + 1) for t in range(T))
    ceil = {"copy_bytes_per_s": 1e12, "bf16_flop_per_s": 1e15, "tf32_flop_per_s": 1e14, "fp32_flop_per_s": 1e13}
    wl = SimpleNamespace(geometry=TINY.geometry, R=R, W=W, T=T, parents=parents, q=torch.empty(0, dtype=m.dtype))
    rec = FullState().cost(wl)
    d = decode_floor(m, get_path("controlled_fullstate"), R, W, T, L, parents, ceil)
    n_gdn = len(TINY.gdn_layers)
    assert d["compulsory_bytes"] == nb + n_gdn * rec["compulsory_bytes"]            # nb: copy mode
    t_mem = d["compulsory_bytes"] / 1e12 * 1e3
    t_flop = (nf / 1e15 + n_gdn * rec["flops"] / 1e13) * 1e3
    assert d["floor_ms"] == pytest.approx(max(t_mem, t_flop))
    onela = decode_floor(m, get_path("onela"), R, W, T, L, parents, ceil)
    assert onela["compulsory_bytes"] < d["compulsory_bytes"]        # no per-beam states
    assert onela["compulsory_bytes"] - model_part(m, R, W, T, L, "ancestry")[0] == \
        n_gdn * get_path("onela").cost(wl)["compulsory_bytes"]
    replay = get_path("reference_replay")                          # OneLA's algorithm: OneLA's bytes
    assert decode_floor(m, replay, R, W, T, L, parents, ceil)["compulsory_bytes"] == onela["compulsory_bytes"]
    replay.algorithm = None
    assert decode_floor(m, replay, R, W, T, L, parents, ceil) == {}            # no algorithm, no cost(): none


@pytest.mark.parametrize("mode", ["ancestry", "copy"])
def test_activation_bytes_are_each_passs_inputs_and_outputs_once(mode):
    """The floor's activations, tensor by tensor (artifact.model.cost module docstring): each pass of a decode
    call reads its inputs and writes its outputs once; the conv windows and decode KV as the mode keeps them
    (beam_state); the stepper's q, k, v, g, beta and o are its cost()'s, not here."""
    from artifact.model.cost import activation_bytes
    c = TINY
    R, W, T, e = 2, 3, 5, 2
    N, H, I, C, Vd, HV = R * W, c.hidden_size, c.intermediate_size, c.conv_dim, c.value_dim, c.linear_num_value_heads
    P, heads = c.linear_conv_kernel_dim - 1, c.num_attention_heads
    nq, nkv = heads * c.head_dim, c.num_key_value_heads * c.head_dim
    Lyr, G, A = len(c.layer_types), len(c.gdn_layers), len(c.attn_layers)
    want = {k: 0 for k in ("embed", "norms", "mlp", "lm_head", "gdn_proj", "gdn_conv", "gdn_norm", "attn_proj",
                           "attn_qk_norm_rope", "kv_state", "attn_prompt", "attn_decode_kv")}
    for t in range(T):
        x = N * H * e                                                  # one residual-stream-sized activation
        want["embed"] += x                                             # token embeddings out
        want["norms"] += (2 * Lyr + 1) * 2 * x                         # every norm: x in, normed out
        want["mlp"] += Lyr * (x + N * 2 * I * e                        # gate_up: normed in, [gate | up] out
                              + N * 2 * I * e + N * I * e              # silu * up
                              + N * I * e + 2 * x)                     # down: h and x in, x out
        want["lm_head"] += x                                           # hidden in
        want["gdn_proj"] += G * (x + N * (C + Vd + 2 * HV) * e         # in_proj
                                 + N * Vd * e + 2 * x)                 # out_proj: normed o and x in, x out
        entry_rows = [R if (s < 0 if mode == "ancestry" else t == 0) else N for s in range(t - P, t)]
        want["gdn_conv"] += G * (N * C * e + N * 2 * HV * e            # q|k|v, [b | a] in
                                 + N * C * e + 2 * N * HV * 4          # conv out, gates out (fp32)
                                 + sum(entry_rows) * C * e             # each beam's window in
                                 + (1 if mode == "ancestry" else P) * N * C * e)   # slot / child's window out
        want["gdn_norm"] += G * 3 * N * Vd * e                         # o, z in; normed out
        want["attn_proj"] += A * (x + N * (2 * nq + 2 * nkv) * e       # qkv_proj
                                  + N * nq * e + 2 * x)                # o_proj: gated o and x in, x out
        want["attn_qk_norm_rope"] += A * 2 * N * (nq + 2 * nkv) * e    # q, k, v in; q out, k, v stored
        want["kv_state"] += A * 2 * N * t * 2 * nkv * e if mode == "copy" else 0    # the fork
        want["attn_prompt"] += A * (2 * N * nq * e + N * heads * 4)    # q in; o_p, lse out
        want["attn_decode_kv"] += A * (4 * N * nq * e + N * heads * 4)  # o_p, q, gate, lse in; gated o out
    got = activation_bytes(c, R, W, T, e, mode)
    assert dict(got) == want
    with pytest.raises(ValueError, match="beam-state mode"):
        activation_bytes(c, R, W, T, e, "paged")


def test_full_model_rows_carry_their_floor():
    from sweeps.suites.full_model import run_cells
    pytest.importorskip("kernels.onela")
    ceil = {"copy_bytes_per_s": 4e12, "bf16_flop_per_s": 7e14, "tf32_flop_per_s": 3.6e14, "fp32_flop_per_s": 5e13}
    ctx = SimpleNamespace(device=torch.device("cpu"), tolerance=DEFAULT_TOLERANCE, time_it=False, ceilings=ceil,
                          results_dir=None, started=lambda c: None)
    (row,) = list(run_cells({"full_model": {"model": "tiny", "cpu": True}},
                            _cells(["onela"]), ctx))
    assert row["status"] == "ok", row
    assert row["floor_ms"] > 0 and row["floor_bound"] and row["compulsory_bytes"] > 0 and row["flops"] > 0


def test_triton_paths_in_the_pipeline_under_the_interpreter():
    """onela (ancestry) and controlled_fullstate (copies) in the full pipeline: the gate passes and both follow
    the same beams as FP32 FullState (run by the Triton interpreter on CPU hosts)."""
    pytest.importorskip("kernels.onela")
    m = HybridModel.random(TINY, seed=1, dtype=torch.float32)
    ps = prefill(m, random_prompts(2, 5, TINY.vocab_size, seed=3))
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cuda":
        m = HybridModel.random(TINY, seed=1, dtype=torch.float32, device=dev)
        ps = prefill(m, random_prompts(2, 5, TINY.vocab_size, seed=3, device=dev))
    ref = BeamDecoder(m, "reference_fullstate", 2, 3, 2, 5)
    ref.load_prompt(ps)
    want = ref.run()
    for path in ("onela", "controlled_fullstate"):
        d = BeamDecoder(m, path, 2, 3, 2, 5)
        d.load_prompt(ps)
        got = d.run(forced=want)
        assert stepper_max_abs_err(d, got) < DEFAULT_TOLERANCE, path
        assert (got.hidden.float() - want.hidden.float()).abs().max() < 5e-2, path


# ---- GPU ----

@pytest.mark.gpu
def test_gpu_prompt_attention_kernels_match_math():
    impl = select_prompt_attention("cuda", torch.bfloat16, 256)
    print("prompt attention kernel:", impl)
    assert impl in ("cudnn", "flash", "efficient")
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(4, 256, 8, 256, generator=g, device="cuda").bfloat16()
    kp, vp = (torch.randn(4, 2, 1024, 256, generator=g, device="cuda").bfloat16() for _ in range(2))
    ko, vo = (torch.randn(4, 256, 3, 2, 256, generator=g, device="cuda").bfloat16() for _ in range(2))
    a = shared_prefix_attention(impl, q, kp, vp, ko, vo, 256 ** -0.5).float()
    b = shared_prefix_attention("math", q, kp, vp, ko, vo, 256 ** -0.5).float()
    assert (a - b).abs().max() < 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize("L", [1024, 5120])
def test_gpu_cudnn_prompt_attention_matches_flash(L):
    """cuDNN's attention at Fig 6's prompt part (R=4, Hkv=2, W G = 1,024 queries, D = 256, prompt 1K and 5K):
    picked by the probe on the H200, and its output and LSE agree with FlashAttention's and with fp32 math,
    eagerly and replayed from a CUDA graph with new inputs copied in (as the decode replays it; cuDNN 9.14 cannot
    be graph-captured at non-causal L > 1,024). Prints each impl's device time."""
    from triton.testing import do_bench
    print("cuDNN", torch.backends.cudnn.version(), "torch", torch.__version__)
    assert select_prompt_attention("cuda", torch.bfloat16, 256) == "cudnn"
    g = torch.Generator(device="cuda").manual_seed(L)
    new = lambda *shape: torch.randn(*shape, generator=g, device="cuda").bfloat16()   # noqa: E731
    q, kp, vp = new(4, 2, 1024, 256), new(4, 2, L, 256), new(4, 2, L, 256)
    scale = 256 ** -0.5
    o_m, lse_m = prompt_attention("math", q, kp, vp, scale)
    for impl in ("cudnn", "flash"):
        o, lse = prompt_attention(impl, q, kp, vp, scale)
        assert o.shape == q.shape and lse.shape == q.shape[:-1] and lse.dtype == torch.float32, impl
        assert (o.float() - o_m).abs().max() < 2e-2 and (lse - lse_m).abs().max() < 1e-3, impl
        us = do_bench(lambda: prompt_attention(impl, q, kp, vp, scale), warmup=5, rep=50) * 1e3
        print(f"L={L} {impl}: {us:.1f} us per layer")
    o_f, lse_f = prompt_attention("flash", q, kp, vp, scale)
    o_c, lse_c = prompt_attention("cudnn", q, kp, vp, scale)
    assert (o_c.float() - o_f.float()).abs().max() < 2e-2 and (lse_c - lse_f).abs().max() < 1e-3
    bufs = [torch.zeros_like(t) for t in (q, kp, vp)]                                # captured on zeros
    graph = torch.cuda.CUDAGraph()
    prompt_attention("cudnn", *bufs, scale)                                          # warm-up outside capture
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        o_g, lse_g = prompt_attention("cudnn", *bufs, scale)
    for buf, t in zip(bufs, (q, kp, vp)):
        buf.copy_(t)
    graph.replay()
    torch.cuda.synchronize()
    assert (o_g.float() - o_m).abs().max() < 2e-2 and (lse_g - lse_m).abs().max() < 1e-3   # stale: O(1)


def _small_qwen(device="cuda"):
    """The Qwen3.5-0.8B layer geometry with 8 layers (6 GDN + 2 attention) and a 4096-token vocabulary."""
    cfg = dataclasses.replace(QWEN3_5_0_8B, vocab_size=4096, layer_types=hybrid_pattern(8, 4))
    return HybridModel.random(cfg, seed=0, dtype=torch.bfloat16, device=device)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["onela", "controlled_fullstate", "vllm_fullstate", "vllm_prefix_replay"])
def test_gpu_graph_replay_equals_eager_and_passes_the_gate(path):
    """Per-call CUDA graphs captured on a decoy prompt, replayed on the real one (following the eager decode's
    beams): the same hidden states as the eager decode, and the GDN outputs pass the FP32 FullState gate."""
    from artifact.model.graphs import capture, time_decode
    from artifact.paths import get_path
    from artifact.workload import Shape
    m = _small_qwen()
    reason = get_path(path).supports(m.cfg.geometry, Shape(2, 16, 3), torch.device("cuda"))
    if reason:
        pytest.skip(reason)
    Lp = 600                                                    # crosses one 576-token ReplaySSM block
    ps = prefill(m, random_prompts(2, Lp, m.cfg.vocab_size, seed=1, device="cuda"), replay_block=576)
    decoy = prefill(m, random_prompts(2, Lp, m.cfg.vocab_size, seed=2, device="cuda"), replay_block=576)
    d = BeamDecoder(m, path, 2, 16, 3, Lp)
    d.load_prompt(ps)
    eager = d.run()
    assert stepper_max_abs_err(d, eager) < DEFAULT_TOLERANCE
    d.load_prompt(decoy)
    capture(d)
    d.load_prompt(ps)
    poison(d)
    replay = d.run(use_graphs=True, forced=eager)
    scale = eager.hidden.float().abs().max()
    assert (replay.hidden.float() - eager.hidden.float()).abs().max() < 0.05 * scale    # stale data: O(scale)
    assert stepper_max_abs_err(d, replay) < DEFAULT_TOLERANCE
    free = d.run(use_graphs=True)
    print(path, "free-running replay picks the eager beams:", torch.equal(free.tokens, eager.tokens))
    t = time_decode(d, repeats=3, warmup=1)
    print(path, "decode-forward ms", t.median_ms)
    assert t.median_ms > 0 and t.replays == 3


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["onela", "controlled_fullstate"])
def test_gpu_compiled_pipeline_matches_eager(path):
    """torch.compile'd non-recurrent ops (what the Fig 6 runner uses on a GPU), captured in graphs, in both
    beam-state modes (the conv windows are the graphs' own outputs, read by the next call's graph): same decode
    as the eager ops on the same beams over more calls than the conv window, and the gate passes."""
    from artifact.model.graphs import capture
    m = _small_qwen()
    T_ = m.cfg.linear_conv_kernel_dim + 1
    ps = prefill(m, random_prompts(2, 300, m.cfg.vocab_size, seed=1, device="cuda"))
    eager_dec = BeamDecoder(m, path, 2, 16, T_, 300)
    eager_dec.load_prompt(ps)
    eager = eager_dec.run()
    d = BeamDecoder(m, path, 2, 16, T_, 300, compile=True)
    d.load_prompt(ps)
    capture(d)
    for _ in range(2):                          # a second search replays over the first one's buffers
        got = d.run(use_graphs=True, forced=eager)
        assert (got.hidden.float() - eager.hidden.float()).abs().max() < 0.05 * eager.hidden.float().abs().max()
        assert stepper_max_abs_err(d, got) < DEFAULT_TOLERANCE


@pytest.mark.gpu
def test_gpu_decode_matches_the_no_cache_oracle_fp32():
    m = HybridModel.random(TINY, seed=1, dtype=torch.float32, device="cuda")
    prompt = random_prompts(R, L, TINY.vocab_size, seed=3, device="cuda")
    ps = prefill(m, prompt)
    for path in ("reference_fullstate", "reference_replay"):
        _, res = decode(m, ps, path)
        for t in range(T):
            prefix = sequences(BeamResult(res.tokens[: t + 1], res.parents[: t + 1], res.scores, res.hidden))
            full = torch.cat([prompt[:, None, :].expand(R, W, L), prefix], dim=2).reshape(R * W, -1)
            oracle = sequence_logits(m, full)[:, -1].reshape(R, W, -1)
            assert (m.logits(res.hidden[t]).float() - oracle).abs().max() < 1e-4, (path, t)


@pytest.mark.gpu
def test_gpu_full_geometry_cells(tmp_path):
    """The real Fig 6 geometry end to end through the runner at a small beam (R=2, W=16, T=2, prompt 600)."""
    from sweeps.suites.full_model import run_cells
    ctx = SimpleNamespace(device=torch.device("cuda"), tolerance=DEFAULT_TOLERANCE, time_it=True,
                          results_dir=tmp_path, started=lambda c: None)
    geo = QWEN3_5_0_8B.geometry
    cells = [dict(suite="full_model", path=p, geometry="qwen3_5_0_8b", R=2, W=16, T=2, O=3, HK=geo.hk,
                  HV=geo.hv, K=geo.k, V=geo.v, prompt_len=600, lineage="beam", seed=0, config_hash=p)
             for p in ("onela", "controlled_fullstate", "vllm_fullstate", "vllm_prefix_replay")]
    rows = list(run_cells({"full_model": {"repeats": 3, "warmup": 1, "compile": False}}, cells, ctx))
    for r in rows:
        print(r["path"], r["status"], r.get("latency_ms"), r.get("max_abs_err"), r.get("reason"))
    assert all(r["status"] in ("ok", "skipped") for r in rows)
    assert rows[0]["status"] == "ok" or rows[0]["path"] != "onela"


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                    reason="torch.compile on a CPU needs a C++ compiler (g++ / c++ not found)")
def test_conv_windows_of_both_modes_follow_the_lineage():
    """ConvHistory + conv_gates, eager and compiled (fullgraph, on CPU here; what the Fig 6 runner does on a GPU),
    in both beam-state modes over more steps than the window, with parents that duplicate, drop and reorder
    beams: every beam's window equals its lineage's last P inputs (kept here independently, as Python lists per
    beam), bit for bit in both modes; the conv and the gates equal layers' on the explicit window; copy mode's kept
    tensors are the child's own materialised window (fresh, contiguous, [parent's P - 1 newest, x]); and the
    compiled pass is one fused kernel besides the gates' (Inductor's CPU code, a proxy of the GPU launch count)."""
    import re

    from torch._inductor.utils import run_and_get_code

    from artifact.model.beam_state import BeamTree, ConvHistory, window
    from artifact.model.blocks import conv_gates
    from artifact.model.layers import causal_conv_step
    torch.manual_seed(0)
    R, W, T, C, HV, width = 2, 5, 6, 12, 3, 4
    P = width - 1
    tail = torch.randn(R, P, C).to(torch.bfloat16)
    w = torch.randn(C, width)
    A_log, dt_bias = torch.rand(HV), torch.ones(HV)
    gen = torch.Generator().manual_seed(1)
    steps = []
    for t in range(T):
        parents = torch.randint(0, W, (R, W), generator=gen, dtype=torch.int32) if t else torch.zeros(R, W,
                                                                                                      dtype=torch.int32)
        proj = torch.randn(R, W, C + 4 + 2 * HV, generator=gen).to(torch.bfloat16)    # qkv | z | b | a
        steps.append((parents, proj[..., :C], proj[..., C + 4:]))
    ps = torch.stack([p for p, _, _ in steps[1:]])
    assert (ps != torch.arange(W, dtype=ps.dtype)).any() and any(len(set(r.tolist())) < W for r in ps.reshape(-1, W))
    # the lineage: seq[r][b] = beam b's inputs, oldest first, starting with the prompt tail
    seq = [[list(tail[r].unbind(0)) for _ in range(W)] for r in range(R)]
    want_win = []
    for t, (parents, x, _) in enumerate(steps):
        if t:
            seq = [[seq[r][int(parents[r, b])] + [steps[t - 1][1][r, int(parents[r, b])]] for b in range(W)]
                   for r in range(R)]
        want_win.append([torch.stack([torch.stack(seq[r][b][-P:]) for b in range(W)]) for r in range(R)])
    compiled = torch.compile(conv_gates, fullgraph=True, dynamic=False, options={"assert_indirect_indexing": False})
    got_mixed = {}
    for mode in ("ancestry", "copy"):
        for name, fn in (("eager", conv_gates), ("compiled", compiled)):
            tree = BeamTree(mode, R, W, T, "cpu")
            conv = ConvHistory(tree, C, width, torch.bfloat16, "cpu")
            conv.prompt_tail.copy_(tail)
            assert conv.carry == (0 if mode == "ancestry" else P - 1)
            for t, (parents, x, ba) in enumerate(steps):
                tree.parents.copy_(parents)
                tree.advance(t)
                hist = conv.history(t)
                win = torch.stack([window(h) for h in hist], dim=2)                        # [R, W, P, C]
                assert torch.equal(win, torch.stack(want_win[t])), (mode, name, t)
                mixed, (beta, g), kept = fn(x, hist, conv.carry, w, ba, A_log, dt_bias)
                conv.keep(t, kept)
                explicit = list(torch.stack(want_win[t]).unbind(2))
                torch.testing.assert_close(mixed.float(), causal_conv_step(explicit, x, w).float(), atol=1e-2, rtol=0)
                assert g.is_contiguous() and beta.is_contiguous()              # ba = [b | a]
                softplus = torch.nn.functional.softplus
                torch.testing.assert_close(g, -torch.exp(A_log) * softplus(ba[..., HV:].float() + 1))
                torch.testing.assert_close(beta, torch.sigmoid(ba[..., :HV].float()))
                assert len(kept) == conv.carry + 1 and all(k.is_contiguous() for k in kept)
                assert torch.equal(kept[-1], x) and kept[-1].data_ptr() != x.data_ptr()
                if mode == "copy":                   # the child's own window, for the next step's fork
                    assert torch.equal(torch.stack(kept, dim=2), torch.cat([win[:, :, 1:], x[:, :, None]], dim=2))
                got_mixed[mode, name, t] = mixed
            if mode == "copy":
                assert len({k.data_ptr() for k in conv.window}) == P
    for key, mixed in got_mixed.items():
        assert torch.equal(mixed, got_mixed[("ancestry",) + key[1:]]), key
    # the compiled pass: one kernel for the conv and every window store (plus the gates'), no gather of its own
    tree = BeamTree("copy", R, W, T, "cpu")
    conv = ConvHistory(tree, C, width, torch.bfloat16, "cpu")
    conv.keep(0, [torch.randn(R, W, C).to(torch.bfloat16) for _ in range(P)])
    _, codes = run_and_get_code(torch.compile(conv_gates, fullgraph=True, dynamic=False),
                                steps[1][1], conv.history(1), conv.carry, w, steps[1][2], A_log, dt_bias)
    code = "\n".join(codes)
    assert 1 <= len(re.findall(r"^cpp_fused_\w+ = async_compile", code, re.M)) <= 2, code
    assert not re.search(r"extern_kernels\.\w+\(|torch\.ops\.aten\.", code), code


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                    reason="torch.compile on a CPU needs a C++ compiler (g++ / c++ not found)")
def test_ancestry_kv_is_gathered_inside_the_compiled_merge():
    """KvHistory in ancestry mode hands the merge (store, index, current) tuples that it gathers itself; the
    merge, eager and compiled (fullgraph), gives what copy mode's explicitly forked KV gives, at every step."""
    from artifact.model.attention import merge_own_kv
    from artifact.model.beam_state import BeamTree, KvHistory
    torch.manual_seed(1)
    R, W, T, H, G, D = 2, 4, 4, 2, 2, 8
    trees = {m: BeamTree(m, R, W, T, "cpu") for m in ("ancestry", "copy")}
    kvs = {m: KvHistory(trees[m], H, D, torch.float32, "cpu") for m in trees}
    compiled = torch.compile(merge_own_kv, fullgraph=True, dynamic=False)
    for t in range(T):
        parents = torch.randint(0, W, (R, W), dtype=torch.int32)
        for m, tree in trees.items():
            tree.parents.copy_(parents)
            tree.advance(t)
        k, v = torch.randn(R, W, H, D), torch.randn(R, W, H, D)
        o_p, lse_p, qg = torch.randn(R, W, H, G, D), torch.randn(R, W, H, G), torch.randn(R, W, H, G, D)
        own = {m: kvs[m].step(t, k, v) for m in kvs}
        assert isinstance(own["ancestry"][0], tuple) == (t > 0)
        want = merge_own_kv(o_p, lse_p, qg, *own["copy"], 0.3)
        for fn in (merge_own_kv, compiled):
            torch.testing.assert_close(fn(o_p, lse_p, qg, *own["ancestry"], 0.3), want)
