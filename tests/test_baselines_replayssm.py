"""ReplaySSM adapters (vllm_prefix_replay, sglang_replayssm): sequence and slot mapping on CPU, the real kernels on GPU.

vLLM's chunk kernels do not run under Triton's CPU interpreter (baselines/_common.py), so on CPU the vLLM path
runs against torch stand-ins written from the documented contract of `fused_post_conv_prep` and the varlen
`chunk_gated_delta_rule` (they test this repository's sequence building, gathers, metadata and gate conversion,
not vLLM). SGLang's ReplaySSM kernel does run under the interpreter, but the interpreter's bf16 `tl.dot` gives
garbage (checked: exact in fp32, ~1e8 off in bf16), so its CPU tests run the real kernel on fp32 inputs.
"""
import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from artifact.gdn import l2norm
from artifact.measure import DEFAULT_TOLERANCE, check_and_time, max_abs_err
from artifact.paths import StepperPath, UnavailablePath, get_path
from artifact.reference import fullstate_decode, full_precision
from artifact.workload import LINEAGES, Geometry, Shape, make_workload
from baselines import _load

REPO = Path(__file__).resolve().parent.parent
CHUNK = 64


# ---------------------------------------------------------------- stand-ins (kernel contracts in torch)

def fake_post_conv_prep(conv_output, a, b, A_log, dt_bias, num_k_heads, head_k_dim, head_v_dim,
                        apply_l2norm=True, output_g_exp=False):
    """vLLM's fused_post_conv_prep contract: split packed [q | k | v] rows, L2-normalise q and k (stored in the
    input dtype), g = -exp(A_log)·softplus(a + dt_bias) (threshold 20), beta = sigmoid(b), both fp32."""
    assert conv_output.dim() == 2 and not output_g_exp
    L, H, K, V, HV = conv_output.shape[0], num_k_heads, head_k_dim, head_v_dim, A_log.shape[0]
    assert conv_output.shape[1] == 2 * H * K + HV * V
    q, k, v = conv_output.split([H * K, H * K, HV * V], dim=1)
    q, k = q.reshape(L, H, K), k.reshape(L, H, K)
    if apply_l2norm:
        q, k = l2norm(q.float()).to(conv_output.dtype), l2norm(k.float()).to(conv_output.dtype)
    x = a.float() + dt_bias
    g = -torch.exp(A_log) * torch.where(x <= 20.0, F.softplus(x), x)
    return q, k, v.reshape(L, HV, V), g, torch.sigmoid(b.float())


def fake_chunk_gated_delta_rule(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                                chunk_indices, chunk_offsets, use_qk_l2norm_in_kernel):
    """vLLM's varlen chunk_gated_delta_rule contract: batch 1, sequence i is rows cu[i]:cu[i+1] starting from
    initial_state[i]; chunk_indices / chunk_offsets as fla's prepare_chunk_indices / _offsets (chunk 64)."""
    assert q.shape[0] == 1 and not use_qk_l2norm_in_kernel and q.dtype != torch.float32
    cu = cu_seqlens.tolist()
    n = len(cu) - 1
    assert initial_state.shape[0] == n and initial_state.dtype == torch.float32
    counts = [-(-(cu[i + 1] - cu[i]) // CHUNK) for i in range(n)]
    want_idx = [[i, j] for i in range(n) for j in range(counts[i])]
    assert chunk_indices.tolist() == want_idx
    assert chunk_offsets.tolist() == [sum(counts[:i]) for i in range(n + 1)]
    grp = v.shape[2] // q.shape[2]
    o = torch.empty(v.shape, dtype=torch.float32)
    for i in range(n):
        S = initial_state[i].clone()
        for r in range(cu[i], cu[i + 1]):
            kh = k[0, r].float().repeat_interleave(grp, 0)
            qh = q[0, r].float().repeat_interleave(grp, 0) * scale
            S = S * torch.exp(g[0, r])[:, None, None]
            delta = beta[0, r][:, None] * (v[0, r].float() - torch.einsum("hvk,hk->hv", S, kh))
            S = S + delta[:, :, None] * kh[:, None, :]
            o[0, r] = torch.einsum("hvk,hk->hv", S, qh)
    return o.to(q.dtype), None


@pytest.fixture
def vllm_stand_ins(monkeypatch):
    monkeypatch.setattr("baselines.vllm_prefix_replay.kernel", lambda: fake_chunk_gated_delta_rule)
    monkeypatch.setattr("baselines.vllm_prefix_replay.prep_kernel", lambda: fake_post_conv_prep)


def _sglang_runs_here(geo, shape, device="cpu") -> None:
    why = get_path("sglang_replayssm").supports(geo, shape, torch.device(device))
    if why:
        pytest.skip(why)


# ---------------------------------------------------------------- helpers

def _tail_inputs(geo, R, L, seed, device, dtype=torch.bfloat16):
    """Prompt-tail inputs {"q","k","v","g","beta"} [L, R, H(, D)] with the workload's distributions and gates."""
    tw = make_workload(geo, R, L, 1, lineage="identity", seed=seed, device=device, prompt_len=0, dtype=dtype)
    return {n: getattr(tw, n)[0].transpose(0, 1).contiguous() for n in ("q", "k", "v", "g", "beta")}


def _continue_state(S, tail, geo):
    """Ground truth: the GDN recurrence over the tail from state S, in fp64 (inputs normalised as
    docs/design.md §1)."""
    S = S.double()
    for i in range(tail["k"].shape[0]):
        kh = l2norm(tail["k"][i].double()).repeat_interleave(geo.group, dim=1)
        S = S * torch.exp(tail["g"][i].double())[..., None, None]
        delta = tail["beta"][i].double()[..., None] * (tail["v"][i].double() - torch.einsum("rhvk,rhk->rhv", S, kh))
        S = S + delta[..., None] * kh[:, :, None, :]
    return S.float()


def _decode_with_tail(stepper, wl, checkpoint, tail, out):
    stepper.reset(checkpoint, tail=tail)
    for t in range(wl.T):
        stepper.step(t, wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t], out[t])
    return out


def _tail_case(geo, R, W, T, L_tail, device, prompt_len):
    """(workload whose s_ctx is the checkpoint, tail, FP32 FullState reference from the full post-prefill state)."""
    wl = make_workload(geo, R, W, T, lineage="beam", device=device, prompt_len=prompt_len)
    tail = _tail_inputs(geo, R, L_tail, seed=1, device=device)
    wl.g.mul_(0.1)          # longer memory than the model-like gates, so the tail and the checkpoint matter
    tail["g"].mul_(0.1)
    full = dataclasses.replace(wl, s_ctx=_continue_state(wl.s_ctx, tail, geo))
    return wl, tail, fullstate_decode(full), full


# ---------------------------------------------------------------- CPU

@pytest.mark.parametrize("name", ["vllm_prefix_replay", "sglang_replayssm"])
def test_adapter_registers_and_declares_tail(name):
    path = get_path(name)
    assert not isinstance(path, UnavailablePath), path.supports(None, None, "cpu")
    assert isinstance(path, StepperPath) and path.name == name
    assert path.replay_tail_len == 0
    wl = make_workload("qwen3_5_0_8b", 2, 4, 3, device="cpu", prompt_len=0)
    c = path.cost(wl)
    assert c["rate"] == "fp32_flop_per_s" and c["flops"] > 0
    # every beam reads at least one checkpoint per step
    assert c["compulsory_bytes"] > wl.T * wl.R * wl.W * wl.geometry.state_bytes


def test_missing_framework_is_a_reason(tmp_path):
    """With no pack and no installed framework, supports() names the import failure (fresh interpreter)."""
    code = textwrap.dedent("""
        from artifact.paths import get_path
        from artifact.workload import Geometry, Shape
        for name in ("vllm_prefix_replay", "sglang_replayssm"):
            print(name, "::", get_path(name).supports(Geometry(16, 16, 128, 128), Shape(2, 6, 3), "cuda"))
        """)
    env = {"ONELA_BASELINE_PACK": str(tmp_path / "absent"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        name, reason = line.split(" :: ")
        if reason != "None":        # None only if this host has the framework installed for real
            assert "cannot import" in reason, line


def test_vllm_replay_declares_k_not_v_unsupported(monkeypatch):
    """vLLM's post-conv prep kernel does not compile for K != V (its two branches type mask_2d differently;
    a shape it cannot build is a skip): supports() says so before anything is built, K = V passes."""
    from baselines import vllm_prefix_replay as m
    monkeypatch.setattr(m._load, "unavailable_reason", lambda spec, modules: None)
    monkeypatch.setattr(m, "vllm_reason", lambda geometry, shape, device: None)
    monkeypatch.setattr(m, "memory_reason", lambda need, device, what: None)
    path = get_path("vllm_prefix_replay")
    for geo in (Geometry(4, 4, 128, 256), Geometry(6, 6, 256, 512), Geometry(4, 16, 128, 256)):
        why = path.supports(geo, Shape(2, 4, 3), torch.device("cuda"))
        assert why and f"K={geo.k} != V={geo.v}" in why and "mask_2d" in why, why
    assert path.supports(Geometry(16, 16, 128, 128), Shape(2, 4, 3), torch.device("cuda")) is None


@pytest.mark.parametrize("lineage", LINEAGES)
@pytest.mark.parametrize("geo", [Geometry(2, 2, 16, 8), Geometry(1, 3, 8, 16)])
def test_vllm_sequences_against_kernel_contract(vllm_stand_ins, lineage, geo):
    wl = make_workload(geo, 2, 5, 4, lineage=lineage, device="cpu", prompt_len=6)
    wl.g.mul_(0.02)   # long-memory heads, so a wrong ancestor token shows in the outputs
    path = get_path("vllm_prefix_replay")
    ref = fullstate_decode(wl)
    tol = float(ref.abs().max()) * 2.0 ** -6      # bf16 q̂, k̂ (as vLLM stores them) at these tiny K, V
    res = check_and_time(path, wl, ref, tolerance=tol, time_it=False)
    assert res.status == "ok", res.reason
    st = path.stepper
    # no per-beam state is kept: the only tensor of per-beam states is the per-step initial-state workspace
    assert res.persistent_bytes == st.persistent_bytes() > wl.R * geo.state_bytes
    per_beam_states = [n for n, x in vars(st).items() if isinstance(x, torch.Tensor)
                       and x.numel() * x.element_size() >= wl.R * wl.W * geo.state_bytes]
    assert per_beam_states == ["h0"] and st.workspace_bytes() == wl.R * wl.W * geo.state_bytes
    if lineage == "beam":     # a wrong ancestry must be caught
        wl2 = dataclasses.replace(wl.clone(), lineage="reversed")
        wl2.parents.copy_(wl.parents.flip(-1))
        assert check_and_time(get_path("vllm_prefix_replay"), wl2, ref, tolerance=tol, time_it=False).status == "failed"


@pytest.mark.parametrize("L_tail", [1, 5])
def test_vllm_prompt_tail_equals_full_prefill_state(vllm_stand_ins, L_tail):
    from baselines.vllm_prefix_replay import VllmPrefixReplayStepper
    geo = Geometry(1, 2, 8, 8)
    wl, tail, ref, full = _tail_case(geo, 2, 3, 3, L_tail, "cpu", prompt_len=6)
    st = VllmPrefixReplayStepper(geo, 2, 3, 3, "cpu")
    out = torch.empty(ref.shape, dtype=torch.bfloat16)
    with full_precision():
        _decode_with_tail(st, wl, wl.s_ctx, tail, out)
    tol = float(ref.abs().max()) * 2.0 ** -6      # bf16 q̂, k̂ (as vLLM stores them) at tiny K, V
    assert st.replay_tail_len == L_tail
    assert max_abs_err(out, ref) <= tol
    # the tail matters: decoding from the checkpoint without it is far off
    assert max_abs_err(fullstate_decode(wl), ref) > 10 * tol
    # a later decode without a tail re-plans and matches the plain decode again
    with full_precision():
        _decode_with_tail(st, full, full.s_ctx, None, out)
    assert st.replay_tail_len == 0 and max_abs_err(out, ref) <= tol


def test_vllm_batch_split_at_int32_row_offsets(vllm_stand_ins, monkeypatch):
    """A replay batch whose token rows would overflow fused_post_conv_prep's int32 offsets runs as sub-batches
    of whole sequences with the same outputs (here the limit is shrunk so 6 beams split 2 + 2 + 2)."""
    from baselines import vllm_prefix_replay as m
    assert m.sub_batch_size(1024, 454, 6144) == 769          # the full model's 448-token tail, O=7
    assert m.sub_batch_size(2048, 7, 6144) == 2048           # the operator suite: one batch
    with pytest.raises(ValueError, match="exceeds int32"):
        m.sub_batch_size(4, 2 ** 20, 2 ** 12)
    geo = Geometry(1, 2, 8, 8)
    wl, tail, ref, _ = _tail_case(geo, 2, 3, 3, 5, "cpu", prompt_len=6)
    qkv = 2 * geo.hk * geo.k + geo.hv * geo.v
    monkeypatch.setattr(m, "INT32_ELEMS", 2 * (5 + 3) * qkv + 7)
    st = m.VllmPrefixReplayStepper(geo, 2, 3, 3, "cpu")
    out = torch.empty(ref.shape, dtype=torch.bfloat16)
    with full_precision():
        _decode_with_tail(st, wl, wl.s_ctx, tail, out)
    assert st.batches == [(0, 2), (2, 4), (4, 6)]
    assert max_abs_err(out, ref) <= float(ref.abs().max()) * 2.0 ** -6


def test_vllm_chunk_metadata_is_vllms(monkeypatch):
    """Our host-built varlen metadata equals vLLM's own prepare_chunk_indices / prepare_chunk_offsets."""
    from baselines import vllm_prefix_replay as m
    try:
        index = _load.load(m.PACK_SPEC, "vllm.third_party.flash_linear_attention.ops.index")
        torch_utils = _load.load(m.PACK_SPEC, "vllm.utils.torch_utils")
    except ImportError as e:
        pytest.skip(str(e))
    monkeypatch.setattr(torch_utils, "PIN_MEMORY", False)       # no pinned memory on a CPU-only host
    for n, L in [(3, 1), (4, 64), (5, 65), (2, 130)]:
        md = m.chunk_metadata(n, L, "cpu")
        for ours, theirs in ((md["chunk_indices"], index.prepare_chunk_indices(md["cu_seqlens"], CHUNK)),
                             (md["chunk_offsets"], index.prepare_chunk_offsets(md["cu_seqlens"], CHUNK))):
            assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)
        assert md["last"].tolist() == [(i + 1) * L - 1 for i in range(n)]


@pytest.mark.parametrize("lineage", LINEAGES)
def test_sglang_slots_with_real_kernel_fp32(lineage):
    geo = Geometry(1, 2, 32, 16)
    _sglang_runs_here(geo, Shape(2, 3, 3))
    wl = make_workload(geo, 2, 3, 3, lineage=lineage, device="cpu", prompt_len=6, dtype=torch.float32)
    wl.g.mul_(0.02)
    ref = fullstate_decode(wl)
    path = get_path("sglang_replayssm")
    res = check_and_time(path, wl, ref, tolerance=1e-5, time_it=False)
    assert res.status == "ok", res.reason
    assert res.persistent_bytes >= wl.R * wl.W * geo.state_bytes    # a checkpoint slot per beam
    if lineage == "beam":
        wl2 = dataclasses.replace(wl.clone(), lineage="reversed")
        wl2.parents.copy_(wl.parents.flip(-1))
        assert check_and_time(get_path("sglang_replayssm"), wl2, ref, tolerance=1e-5,
                              time_it=False).status == "failed"


def test_sglang_refuses_prompt_tail_and_unsupported_shapes():
    from baselines.sglang_replayssm import SglangReplaySSMStepper, tail_reason
    geo = Geometry(1, 2, 32, 16)
    tail = _tail_inputs(geo, 2, 3, seed=1, device="cpu")
    assert "prompt tail" in tail_reason(tail)
    assert tail_reason(None) is None and tail_reason({n: x[:0] for n, x in tail.items()}) is None
    path = get_path("sglang_replayssm")
    if path.supports(geo, Shape(2, 3, 3), torch.device("cpu")) is None:      # kernel importable here
        st = SglangReplaySSMStepper(geo, 2, 3, 3, "cpu")
        with pytest.raises(ValueError, match="prompt tail"):
            st.reset(torch.zeros(2, 2, 16, 32), tail=tail)
        assert "K=48" in path.supports(Geometry(1, 2, 48, 16), Shape(2, 3, 3), torch.device("cpu"))
        assert "ring length" in path.supports(geo, Shape(2, 3, 17), torch.device("cpu"))


# ---------------------------------------------------------------- GPU: the frameworks' own kernels

GPU_GEOMETRIES = [Geometry(16, 16, 128, 128), Geometry(16, 64, 128, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["vllm_prefix_replay", "sglang_replayssm"])
@pytest.mark.parametrize("geo", GPU_GEOMETRIES, ids=lambda g: f"{g.hk}-{g.hv}-{g.k}-{g.v}")
@pytest.mark.parametrize("lineage", LINEAGES)
def test_framework_replay_matches_reference(name, geo, lineage):
    wl = make_workload(geo, 2, 6, 3, lineage=lineage, device="cuda", prompt_len=256)
    path = get_path(name)
    why = path.supports(geo, wl.shape, wl.device)
    assert why is None, why
    res = check_and_time(path, wl, fullstate_decode(wl), time_it=False)
    print(f"{name} {geo} {lineage}: {res.status} err={res.max_abs_err:.3e} persistent={res.persistent_bytes} "
          f"written={res.written_bytes}")
    assert res.status == "ok", res.reason
    assert res.persistent_bytes > 0 and res.written_bytes > 0


@pytest.mark.gpu
@pytest.mark.parametrize("L_tail", [5, 62])      # 62: the sequences cross the 64-token chunk boundary at t = 2
def test_vllm_prompt_tail_on_gpu(L_tail):
    """reset(checkpoint, tail) replays the tail through vLLM's kernels: equals decoding from the full
    post-prefill state, eagerly and as a captured CUDA graph replayed on fresh inputs."""
    from baselines.vllm_prefix_replay import VllmPrefixReplayStepper
    geo = GPU_GEOMETRIES[0]
    assert get_path("vllm_prefix_replay").supports(geo, Shape(2, 6, 3), torch.device("cuda")) is None
    wl, tail, ref, _ = _tail_case(geo, 2, 6, 3, L_tail, "cuda", prompt_len=256)
    st = VllmPrefixReplayStepper(geo, 2, 6, 3, "cuda")
    out = torch.empty(ref.shape, dtype=torch.bfloat16, device="cuda")
    _decode_with_tail(st, wl, wl.s_ctx, tail, out)
    torch.cuda.synchronize()
    eager = max_abs_err(out, ref)
    assert max_abs_err(fullstate_decode(wl), ref) > 10 * DEFAULT_TOLERANCE       # the tail matters
    # captured on scrambled inputs, replayed on the real ones
    static_wl, static_tail, ckpt = wl.clone(), {n: x.clone() for n, x in tail.items()}, wl.s_ctx.clone()
    static_wl.q.neg_(), static_tail["v"].neg_(), ckpt.neg_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _decode_with_tail(st, static_wl, ckpt, static_tail, out)
    static_wl.copy_(wl)
    ckpt.copy_(wl.s_ctx)
    for n, x in tail.items():
        static_tail[n].copy_(x)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    captured = max_abs_err(out, ref)
    print(f"vllm_prefix_replay tail={L_tail}: eager err={eager:.3e} captured err={captured:.3e}")
    assert eager <= DEFAULT_TOLERANCE and captured <= DEFAULT_TOLERANCE
