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
