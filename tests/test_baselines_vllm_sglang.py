"""vLLM / SGLang adapters: slot mapping on CPU against stand-in kernels, the real kernels on the GPU.

The CPU stand-ins implement each framework kernel's documented contract (which slot is read, which is
written, how gates are formed) in plain torch; they test this repository's slot mapping, gathers and gate
conversion, not the frameworks. The frameworks' own kernels run in the `gpu` tests (their fla kernels do
not run under Triton's CPU interpreter: see baselines/_common.py).
"""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from artifact.gdn import l2norm
from artifact.measure import check_and_time
from artifact.paths import UnavailablePath, get_path
from artifact.reference import fullstate_decode
from artifact.workload import LINEAGES, Geometry, Shape, make_workload
from baselines import _common

REPO = Path(__file__).resolve().parent.parent
# The ReplaySSM adapters (vllm_prefix_replay, sglang_replayssm) are tested in tests/test_baselines_replayssm.py.
PATH_NAMES = ["vllm_fullstate", "sglang_fullstate"]


def _gdn_token(S, q, k, v, g, beta, scale):
    """One token for rows of states S [n, HV, V, K]; q, k [n, H, K] raw; v [n, HV, V]; g, beta [n, HV]."""
    grp = S.shape[1] // q.shape[1]
    qh = (l2norm(q.float()) * scale).repeat_interleave(grp, 1)
    kh = l2norm(k.float()).repeat_interleave(grp, 1)
    S = S * torch.exp(g)[..., None, None]
    delta = beta[..., None] * (v.float() - torch.einsum("nhvk,nhk->nhv", S, kh))
    S = S + delta[..., None] * kh[:, :, None, :]
    return S, torch.einsum("nhvk,nhk->nhv", S, qh)


def fake_vllm_fused_recurrent(q, k, v, g, beta, scale, initial_state, inplace_final_state,
                              ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel):
    """vLLM's contract for one token per sequence: read slot idx[n, accepted-1], write slot idx[n, 0]."""
    assert inplace_final_state and use_qk_l2norm_in_kernel and q.shape[1] == 1
    n = torch.arange(q.shape[0])
    read = ssm_state_indices[n, num_accepted_tokens.long() - 1].long()
    write = ssm_state_indices[:, 0].long()
    assert bool((read > 0).all()) and bool((write > 0).all()), "slot 0 is vLLM's null slot"
    S, o = _gdn_token(initial_state[read], q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], scale)
    initial_state[write] = S
    return o[:, None].to(q.dtype), initial_state


def fake_sglang_packed_decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                              use_qk_l2norm_in_kernel):
    """SGLang's contract: read and write slot idx[n] in place; gates from a, b, A_log, dt_bias."""
    assert use_qk_l2norm_in_kernel
    HV, V, K = initial_state.shape[1:]
    H = (mixed_qkv.shape[1] - HV * V) // (2 * K)
    q, k, v = mixed_qkv.split([H * K, H * K, HV * V], dim=1)
    x = a + dt_bias
    g = -torch.exp(A_log) * torch.where(x <= 20.0, F.softplus(x), x)
    idx = ssm_state_indices.long()
    S, o = _gdn_token(initial_state[idx], q.view(-1, H, K), k.view(-1, H, K), v.view(-1, HV, V), g,
                      torch.sigmoid(b), scale)
    initial_state[idx] = S
    out.copy_(o[:, None].to(out.dtype))
    return out, initial_state


STAND_INS = {
    "vllm_fullstate": ("baselines.vllm_fullstate", fake_vllm_fused_recurrent),
    "sglang_fullstate": ("baselines.sglang_fullstate", fake_sglang_packed_decode),
}


@pytest.mark.parametrize("name", PATH_NAMES)
def test_adapter_module_imports_without_its_framework(name):
    path = get_path(name)
    assert not isinstance(path, UnavailablePath), path.supports(None, None, "cpu")
    assert path.name == name


def test_missing_framework_is_a_reason(tmp_path):
    """With no pack and no installed framework, supports() names the import failure (fresh interpreter)."""
    code = textwrap.dedent("""
        from artifact.paths import get_path
        from artifact.workload import Geometry, Shape
        for name in %r:
            print(name, "::", get_path(name).supports(Geometry(16, 16, 128, 128), Shape(2, 6, 3), "cuda"))
        """ % PATH_NAMES)
    env = {"ONELA_BASELINE_PACK": str(tmp_path / "absent"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.strip().splitlines():
        name, reason = line.split(" :: ")
        if reason == "None":        # only if this host has the framework installed for real
            continue
        assert "cannot import" in reason, line


@pytest.mark.parametrize("name", sorted(STAND_INS))
@pytest.mark.parametrize("lineage", LINEAGES)
@pytest.mark.parametrize("geo", [Geometry(2, 2, 16, 8), Geometry(1, 3, 8, 16)])
def test_slot_mapping_against_kernel_contract(monkeypatch, name, lineage, geo):
    module, fake = STAND_INS[name]
    monkeypatch.setattr(f"{module}.kernel", lambda: fake)
    wl = make_workload(geo, 2, 5, 4, lineage=lineage, device="cpu", prompt_len=6)
    wl.g.mul_(0.02)   # long-memory heads, so a wrong parent state shows in the outputs
    path = get_path(name)
    ref = fullstate_decode(wl)
    tol = float(ref.abs().max()) * 2.0 ** -8     # bf16 outputs: |o| ~ 1 at these tiny K, V
    res = check_and_time(path, wl, ref, tolerance=tol, time_it=False)
    assert res.status == "ok", res.reason
    n_state = geo.hv * geo.v * geo.k * 4
    assert res.persistent_bytes == path.stepper.persistent_bytes() > 2 * wl.R * wl.W * n_state - 1
    # a wrong parent must be caught: the same path on a permuted lineage differs from the reference
    if lineage == "beam":
        wl2 = make_workload(geo, 2, 5, 4, lineage="reversed", device="cpu", prompt_len=6)
        wl2.g.copy_(wl.g)
        wl2.parents.copy_(wl.parents.flip(-1))
        bad = check_and_time(get_path(name), wl2, ref, tolerance=tol, time_it=False)
        assert bad.status == "failed"


def test_gates_to_logits_round_trip():
    wl = make_workload("qwen3_5_0_8b", 2, 4, 3, device="cpu", prompt_len=0)
    g, beta = wl.g.reshape(-1, 16), wl.beta.reshape(-1, 16)
    a, b = torch.empty_like(g), torch.empty_like(g)
    _common.gates_to_logits(g, beta, a, b)
    torch.testing.assert_close(-F.softplus(a), g, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(torch.sigmoid(b), beta, rtol=1e-6, atol=1e-7)
    # strong decay: expm1(-g) overflows fp32 below g = -88.7; the logit must stay finite and round-trip
    g = torch.tensor([[-0.0, -1e-6, -88.0, -89.0, -112.0]])
    a = torch.empty_like(g)
    _common.gates_to_logits(g, torch.full_like(g, 0.5), a, torch.empty_like(g))
    assert torch.isfinite(a[:, 1:]).all(), a
    torch.testing.assert_close(-F.softplus(a), g, rtol=1e-5, atol=1e-7)


def test_grid_limit_is_reported():
    from artifact.limits import grid_reason
    assert grid_reason(65535, "x") is None
    assert "65536 > 65535" in grid_reason(65536, "R*W*HV")


def test_fullstate_cost_counts_state_traffic():
    """Step 0 reads each request's s_ctx once (R states), later steps every parent (N); every step writes N.
    (Counting N reads at step 0 would put the FullState floor above the measured FullState times.)"""
    from artifact.cost import FullState
    wl = make_workload("qwen3_5_0_8b", 2, 4, 3, device="cpu", prompt_len=0)
    sb, R, N, T = 16 * 128 * 128 * 4, 2, 8, 3
    c = FullState().cost(wl)
    assert c["rate"] == "fp32_flop_per_s"
    states = (R + N + 2 * (T - 1) * N) * sb
    assert states < c["compulsory_bytes"] < states * 1.05
    assert FullState(1, 1).cost(wl)["compulsory_bytes"] - c["compulsory_bytes"] == T * N * 2 * sb


# ---------------------------------------------------------------- GPU: the frameworks' own kernels


GPU_GEOMETRIES = [Geometry(16, 16, 128, 128), Geometry(16, 64, 128, 128), Geometry(4, 16, 128, 256)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", PATH_NAMES + [f"{n}_paper" for n in PATH_NAMES])
@pytest.mark.parametrize("geo", GPU_GEOMETRIES, ids=lambda g: f"{g.hk}-{g.hv}-{g.k}-{g.v}")
@pytest.mark.parametrize("lineage", LINEAGES)
def test_framework_kernel_matches_reference(name, geo, lineage):
    wl = make_workload(geo, 2, 6, 3, lineage=lineage, device="cuda", prompt_len=256)
    path = get_path(name)
    why = path.supports(geo, wl.shape, wl.device)
    assert why is None, why
    res = check_and_time(path, wl, fullstate_decode(wl), time_it=False)
    print(f"{name} {geo} {lineage}: {res.status} err={res.max_abs_err:.3e} persistent={res.persistent_bytes}")
    assert res.status == "ok", res.reason
    assert res.persistent_bytes > 0 and res.written_bytes > 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["vllm_fullstate", "sglang_fullstate"])
def test_too_large_grid_is_a_reason(name):
    why = get_path(name).supports(Geometry(16, 16, 128, 128), Shape(16, 512, 2), torch.device("cuda"))
    assert why is not None and "65535" in why, why


# ---------------------------------------------------------------- paper mode: one pool, explicit reorder


@pytest.mark.parametrize("name", sorted(STAND_INS))
@pytest.mark.parametrize("lineage", LINEAGES)
def test_paper_mode_reorders_one_pool_against_kernel_contract(monkeypatch, name, lineage):
    """`<system>_fullstate_paper`: the same adapter with one beam pool (plus vLLM's null and context slots) and
    a transient workspace of R*W states reported apart. At t >= 1 vLLM's stand-in reads each beam's fixed
    workspace row and writes the beam's own slot; SGLang's reads and writes each beam's own slot. Either way
    only the explicit gather can bring a parent's state."""
    module, fake = STAND_INS[name]
    calls = []

    def spy(*args, **kw):
        idx = kw["ssm_state_indices"]
        calls.append(idx.clone())
        return fake(*args, **kw)

    monkeypatch.setattr(f"{module}.kernel", lambda: spy)
    geo = Geometry(2, 2, 16, 8)
    R, W, T = 2, 5, 4
    wl = make_workload(geo, R, W, T, lineage=lineage, device="cpu", prompt_len=6)
    wl.g.mul_(0.02)
    ref = fullstate_decode(wl)
    tol = float(ref.abs().max()) * 2.0 ** -8
    path = get_path(f"{name}_paper")
    res = check_and_time(path, wl, ref, tolerance=tol, time_it=False)
    assert res.status == "ok", res.reason
    st, sb, N = path.stepper, geo.state_bytes, R * W
    fixed = 1 + R if name == "vllm_fullstate" else 0          # vLLM's null slot and R context slots
    assert res.persistent_bytes == st.persistent_bytes() == (fixed + N) * sb
    assert path.workspace_bytes() == st.workspace_bytes() == N * sb
    index = get_path(name)
    index.prepare(wl)
    assert index.persistent_bytes() - res.persistent_bytes == N * sb and index.workspace_bytes() == 0
    if name == "vllm_fullstate":
        assert res.written_bytes == (R + T * N + (T - 1) * N) * sb   # one gather per step t >= 1
        ws0, beam = 1 + R + N, torch.arange(N).int()
        assert all(torch.equal(c[:, 1], ws0 + beam) for c in calls[1:])     # reads: the workspace rows
        assert all(torch.equal(c[:, 0], 1 + R + beam) for c in calls)       # writes: the beam's own slot
        assert torch.equal(calls[0][:, 1], (1 + torch.arange(R)).repeat_interleave(W).int())   # t = 0: context
    else:
        assert res.written_bytes == (N + T * N + 2 * (T - 1) * N) * sb
        assert all(torch.equal(c, calls[0]) for c in calls)     # the same in-place slots every step
    assert path.cost(wl)["compulsory_bytes"] > index.cost(wl)["compulsory_bytes"]
