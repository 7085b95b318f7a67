"""The exact references agree: projection replay == per-beam FullState in fp64; fp32 FullState is close."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from artifact.reference import fullstate_decode
from artifact.workload import GEOMETRIES, LINEAGES, Geometry, make_workload
from oracles import replay_decode


@pytest.mark.parametrize("lineage", LINEAGES)
@pytest.mark.parametrize("T", range(1, 7))
def test_replay_equals_fullstate_every_lineage_and_T(lineage, T):
    wl = make_workload("qwen3_5_0_8b", R=2, W=5, T=T, lineage=lineage, seed=T, prompt_len=12)
    ref = fullstate_decode(wl, torch.float64)
    assert torch.allclose(replay_decode(wl), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_replay_equals_fullstate_every_geometry(name):
    wl = make_workload(name, R=2, W=3, T=4, lineage="beam", seed=3, prompt_len=8)
    ref = fullstate_decode(wl, torch.float64)
    assert torch.allclose(replay_decode(wl), ref, rtol=0, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(hk=st.sampled_from([1, 2, 4]), group=st.sampled_from([1, 4]), k=st.sampled_from([4, 8, 16]),
       v=st.sampled_from([4, 12, 16]), R=st.integers(1, 3), W=st.integers(1, 9), T=st.integers(1, 6),
       lineage=st.sampled_from(LINEAGES), seed=st.integers(0, 10_000))
def test_replay_equals_fullstate_random(hk, group, k, v, R, W, T, lineage, seed):
    """HV = HK and HV = 4 HK, W not a power of two, T from 1 to 6, every lineage kind."""
    wl = make_workload(Geometry(hk, hk * group, k, v), R, W, T, lineage=lineage, seed=seed, prompt_len=6)
    ref = fullstate_decode(wl, torch.float64)
    assert torch.allclose(replay_decode(wl), ref, rtol=0, atol=1e-12)


def test_fp32_fullstate_within_bound_of_fp64():
    wl = make_workload("qwen3_5_0_8b", R=2, W=16, T=6, seed=5, prompt_len=64)
    ref = fullstate_decode(wl, torch.float64)
    err = (fullstate_decode(wl, torch.float32).double() - ref).abs().max().item()
    assert 0 < err < 1e-6, err
    assert ref.abs().max() > 1e-2  # a real output magnitude, not a trivially small one


def test_prefill_state_has_post_prefill_magnitude():
    """s_ctx comes from running the recurrence, so it is neither zero nor i.i.d. noise of unit scale."""
    wl = make_workload("qwen3_5_0_8b", R=1, W=2, T=1, seed=0, prompt_len=64)
    s = wl.s_ctx
    assert torch.isfinite(s).all() and 0.05 < s.abs().max() < 10
    wl0 = make_workload("qwen3_5_0_8b", R=1, W=2, T=1, seed=0, prompt_len=0)
    assert wl0.s_ctx.abs().max() == 0


@pytest.mark.parametrize("lineage", LINEAGES)
@pytest.mark.parametrize("beams", [1, 2, 4])
def test_chained_fullstate_equals_the_per_step_reference(lineage, beams):
    """fullstate_chains (blocks of beams along their ancestral chains, for widths whose states do not fit) gives the
    per-step FullState reference's outputs: exactly in fp64's rounding, and within fp32's in fp32."""
    wl = make_workload(Geometry(2, 4, 16, 32), R=2, W=5, T=5, lineage=lineage, seed=7, prompt_len=12)
    for dtype, atol in ((torch.float64, 1e-12), (torch.float32, 1e-6)):
        ref = fullstate_decode(wl, dtype)
        got = fullstate_decode(wl, dtype, beams=beams)
        assert got.dtype == dtype and torch.allclose(got, ref, rtol=0, atol=atol)
    assert fullstate_decode(wl, beams=wl.W).equal(fullstate_decode(wl))      # a block of every beam: per step


def test_prefill_fullstate_reference_and_model_recurrence_take_one_gdn_step():
    """The workload's prefill, the FullState reference's update and the model's token-by-token GDN are one step
    (artifact.gdn.gdn_step): over the same tokens from the same state they reach bit-identical fp32 states, and
    the TRT-LLM adapter's layout probe decodes one token as the reference does."""
    from oracles import recurrent_gated_delta
    from artifact.reference import fullstate_update
    from artifact.workload import prefill_state
    from baselines.trtllm_fullstate import _one_step
    geo, L, R = Geometry(2, 4, 16, 8), 7, 3
    gen = torch.Generator().manual_seed(11)
    q, k = (torch.randn(L, R, geo.hk, geo.k, generator=gen).bfloat16() for _ in range(2))
    v = torch.randn(L, R, geo.hv, geo.v, generator=gen).bfloat16()
    g, beta = -torch.rand(L, R, geo.hv, generator=gen), torch.rand(L, R, geo.hv, generator=gen)
    s_prefill = prefill_state(k, v, g, beta)
    S = torch.zeros(R, 1, geo.hv, geo.v, geo.k)
    for i in range(L):
        S, o = fullstate_update(S, q[i][:, None], k[i][:, None], v[i][:, None], g[i][:, None], beta[i][:, None],
                                geo, torch.float32)
    _, s_model = recurrent_gated_delta(*(x.transpose(0, 1) for x in (q, k, v, g, beta)))
    assert torch.equal(S[:, 0], s_prefill) and torch.equal(s_model, s_prefill)
    half = torch.full((1, 1, geo.hv), 0.5)
    _, o = fullstate_update(s_prefill[:1, None], q[0, :1, None], k[0, :1, None], v[0, :1, None], half.log(), half,
                            geo, torch.float32)
    probe = _one_step(s_prefill[0], q[0, 0], k[0, 0], v[0, 0], 0.5, 0.5, geo)
    assert torch.allclose(probe, o[0, 0], rtol=0, atol=1e-6)
