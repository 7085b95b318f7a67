"""FlashInfer and TensorRT-LLM FullState adapters: skip reasons, pack/ship specs, slot logic, and (GPU) the real
kernels against the FP32 FullState reference.

CPU tests drive each adapter's stepper through torch stand-ins that follow the kernels' documented contracts
(pool + read/write slot indices for FlashInfer; one in-place slot and either state layout for TRT-LLM), so
the adapters' beam->slot bookkeeping, gate conversion and layout handling are checked here; the GPU tests
run the frameworks' own kernels.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from artifact.gdn import l2norm
from artifact.measure import check_and_time
from artifact.paths import get_path
from artifact.reference import fullstate_decode
from artifact.workload import GEOMETRIES, LINEAGES, Geometry, Shape, make_workload
from baselines import flashinfer_fullstate as fi, pack, ship_parts, trtllm_fullstate as trt

BASELINES = Path(fi.__file__).resolve().parent
WHEELS = BASELINES.parent / ".whl"
QWEN = GEOMETRIES["qwen3_5_0_8b"]


# ---- torch stand-ins for the two kernels (their documented contracts, fp32 math, bf16 output) ----

def _gates(A_log, a, dt_bias, b):
    x = a.float() + dt_bias
    softplus = torch.where(x <= 20.0, torch.log1p(torch.exp(x)), x)
    return torch.exp(-torch.exp(A_log) * softplus), torch.sigmoid(b.float())


def _update(S, q, k, v, alpha, beta, scale, eps_inside=True):
    """S [B, HV, V, K]; q, k [B, H, K]; v [B, HV, V]; alpha, beta [B, HV] -> (S', o [B, HV, V])."""
    grp = v.shape[1] // q.shape[1]
    if eps_inside:
        qh, kh = l2norm(q.float()), l2norm(k.float())
    else:
        qh = q.float() / (q.float().norm(dim=-1, keepdim=True) + 1e-6)
        kh = k.float() / (k.float().norm(dim=-1, keepdim=True) + 1e-6)
    qh, kh = (qh * scale).repeat_interleave(grp, 1), kh.repeat_interleave(grp, 1)
    S = alpha[..., None, None] * S
    delta = beta[..., None] * (v.float() - torch.einsum("bhvk,bhk->bhv", S, kh))
    S = S + delta[..., None] * kh[:, :, None, :]
    return S, torch.einsum("bhvk,bhk->bhv", S, qh)


def fake_fi_pretranspose(q, k, v, state, A_log, a, dt_bias, b, scale=None, output=None, use_qk_l2norm=True,
                         initial_state=None, initial_state_indices=None, output_state_indices=None,
                         backend="auto", honour_write_indices=True):
    """gated_delta_rule_decode_pretranspose's pool path: read pool[read], write pool[write] (T = 1)."""
    assert state is None and use_qk_l2norm and backend == "flashinfer" and q.shape[1] == 1
    assert initial_state.dtype == torch.float32 and a.dtype == b.dtype == torch.float32
    read = initial_state_indices.long()
    write = output_state_indices.long() if honour_write_indices else read
    alpha, beta = _gates(A_log, a[:, 0], dt_bias, b[:, 0])
    S, o = _update(initial_state[read], q[:, 0], k[:, 0], v[:, 0], alpha, beta, scale)
    initial_state[write] = S
    output.copy_(o[:, None])
    return output, initial_state


def make_fake_trt(layout: str, takes_output: bool):
    """fused_sigmoid_gating_delta_rule_update (varlen, T = 1 per sequence), in-place slot, given layout."""

    def update(A_log, a, dt_bias, softplus_beta, softplus_threshold, q, k, v, b, initial_state_source,
               initial_state_indices, scale=None, use_qk_l2norm_in_kernel=False, cu_seqlens=None, output=None):
        assert softplus_beta == 1.0 and softplus_threshold == 20.0 and use_qk_l2norm_in_kernel
        assert q.shape[0] == 1 and cu_seqlens.numel() == q.shape[1] + 1
        idx = initial_state_indices.long()
        n, HV, V, K = idx.numel(), v.shape[2], v.shape[3], q.shape[3]
        mem = initial_state_source.view(initial_state_source.shape[0], HV, V * K)   # the kernel sees memory
        S = mem[idx].view(n, HV, V, K) if layout == "vk" else mem[idx].view(n, HV, K, V).transpose(-1, -2)
        alpha, beta = _gates(A_log, a, dt_bias, b)
        S, o = _update(S, q[0], k[0], v[0], alpha, beta, scale, eps_inside=False)
        mem[idx] = (S if layout == "vk" else S.transpose(-1, -2)).reshape(n, HV, V * K)
        if output is None:
            return o[None].to(q.dtype)
        output.copy_(o[None])
        return output

    if takes_output:
        def fused_sigmoid_gating_delta_rule_update(*args, output=None, **kw):
            grid_z = min(kw["v"].shape[1] * kw["v"].shape[2], 65535)    # grid-strided, as current sources
            assert grid_z >= 1
            return update(*args, output=output, **kw)
    else:
        def fused_sigmoid_gating_delta_rule_update(*args, **kw):
            return update(*args, **kw)
    return fused_sigmoid_gating_delta_rule_update


def _check(path, wl):
    return check_and_time(path, wl, fullstate_decode(wl), time_it=False)


# ---- specs ----

def test_flashinfer_pack_spec_is_well_formed():
    spec = pack.read_pack_spec(BASELINES / "flashinfer_fullstate.py")
    assert spec == fi.PACK_SPEC
    assert pack.parse_requirement(spec["wheel"]) == ("flashinfer-python", "0.7.2.post1")
    assert fi.KERNEL_MODULE in spec["modules"] and "flashinfer" in spec["stub_packages"]
    for req in fi.SHIP_WHEELS:
        pack.parse_requirement(req)
    assert ship_parts.read_ship_wheels(BASELINES / "flashinfer_fullstate.py") == fi.SHIP_WHEELS


def test_trtllm_declares_no_pack_spec_but_a_valid_load_spec():
    assert pack.read_pack_spec(BASELINES / "trtllm_fullstate.py") is None   # no wheel can be downloaded
    pack.validate_spec(trt.LOAD_SPEC, "trtllm_fullstate.LOAD_SPEC")


@pytest.mark.skipif(not list(WHEELS.glob("flashinfer_python-0.7.2.post1-*.whl")),
                    reason="flashinfer-python 0.7.2.post1 wheel not downloaded into .whl")
def test_flashinfer_modules_are_in_the_wheel():
    files = pack.WheelFiles()
    files.add(pack.find_wheel(WHEELS, fi.PACK_SPEC["wheel"]))
    packed, stubs, external = pack.closure(files, {**{k: [] for k in pack.LIST_KEYS}, **fi.PACK_SPEC})
    assert set(fi.PACK_SPEC["modules"]) <= packed and "flashinfer.gdn_kernels.gdn_decode_pretranspose" in packed
    assert {"cutlass", "tvm_ffi"} <= external       # what SHIP_WHEELS brings


# ---- supports(): skip reasons ----

def _importable(load) -> bool:
    try:
        load()
        return True
    except ImportError:
        return False


def test_flashinfer_missing_package_reason_names_it():
    if _importable(fi.kernel):
        pytest.skip("FlashInfer's GDN decode loads here; nothing is missing")
    why = get_path("flashinfer_fullstate").supports(QWEN, Shape(2, 6, 3), "cpu")
    assert why and "flashinfer-python==0.7.2.post1" in why and "cannot import" in why


def test_trtllm_missing_package_reason_names_it():
    if _importable(trt.kernel):
        pytest.skip("TensorRT-LLM's kernel loads here; nothing is missing")
    why = get_path("trtllm_fullstate").supports(QWEN, Shape(2, 6, 3), "cpu")
    assert why and "tensorrt_llm" in why and "tensorrt-llm==1.2.0" in why and "stub" in why


def test_paths_import_without_frameworks():
    for name in ("flashinfer_fullstate", "trtllm_fullstate"):
        path = get_path(name)
        assert path.name == name and type(path).__name__ != "UnavailablePath"


@pytest.fixture
def fake_fi(monkeypatch):
    monkeypatch.setattr(fi, "kernel", lambda: fake_fi_pretranspose)
    return fake_fi_pretranspose


def test_flashinfer_reasons_device_arch_and_head_dims(fake_fi, monkeypatch):
    path, shape = fi.FlashInferFullStatePath(), Shape(2, 6, 3)
    assert "SM90" in path.supports(QWEN, shape, "cpu")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (8, 0))
    assert "SM80" in path.supports(QWEN, shape, "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (80 << 30, 141 << 30))
    assert path.supports(QWEN, shape, "cuda") is None
    for name in ("gdn_small", "range_k256_v256", "gdn_1_3b"):
        geo = GEOMETRIES[name]
        why = path.supports(geo, shape, "cuda")
        assert why and "not natively supported" in why and f"K={geo.k}, V={geo.v}" in why
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (1 << 30, 141 << 30))
    assert "GiB" in path.supports(QWEN, Shape(16, 512, 3), "cuda")


def test_trtllm_reasons_device_and_grid(monkeypatch):
    path = trt.TrtllmFullStatePath()
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (140 << 30, 141 << 30))
    big = Shape(16, 512, 3)                                        # N * HV = 131072 > 65535
    monkeypatch.setattr(trt, "kernel", lambda: make_fake_trt("kv", takes_output=False))
    assert "CUDA device" in path.supports(QWEN, Shape(2, 6, 3), "cpu")
    assert path.supports(QWEN, Shape(2, 6, 3), "cuda") is None
    assert "65535" in path.supports(QWEN, big, "cuda")
    monkeypatch.setattr(trt, "kernel", lambda: make_fake_trt("vk", takes_output=True))
    assert path.supports(QWEN, big, "cuda") is None                # grid-strided wrapper


# ---- stepper bookkeeping through the stand-ins (CPU) ----

@pytest.mark.parametrize("lineage", LINEAGES)
def test_flashinfer_stepper_matches_reference(fake_fi, lineage):
    wl = make_workload(QWEN, R=2, W=6, T=3, lineage=lineage, seed=3)
    res = _check(fi.FlashInferFullStatePath(), wl)
    assert res.status == "ok", res.reason
    sb = QWEN.state_bytes
    assert res.persistent_bytes == (2 + 2 * 12) * sb and res.written_bytes == (2 + 3 * 12) * sb


def test_flashinfer_check_fails_if_write_indices_were_ignored(monkeypatch):
    """The gate is not vacuous: a kernel writing children back to their parents' slots fails it."""
    monkeypatch.setattr(fi, "kernel", lambda: lambda *a, **kw: fake_fi_pretranspose(*a, **kw,
                                                                                   honour_write_indices=False))
    res = _check(fi.FlashInferFullStatePath(), make_workload(QWEN, R=2, W=6, T=3, lineage="beam", seed=3))
    assert res.status == "failed"


@pytest.mark.parametrize("layout", ["vk", "kv"])       # state [slots, HV, V, K] or [slots, HV, K, V]
def test_trtllm_probe_finds_the_kernels_layout(layout):
    geo = Geometry(2, 4, 16, 32)                       # K != V: the two layouts differ in shape too
    assert trt.probe_state_layout(make_fake_trt(layout, takes_output=True), geo, "cpu") == layout


def test_trtllm_probe_rejects_other_math():
    def tripled_scale(**kw):                           # a kernel whose output is off in both layouts
        return make_fake_trt("vk", True)(**{**kw, "scale": 3 * kw["scale"]})
    with pytest.raises(RuntimeError, match="neither state layout"):
        trt.probe_state_layout(tripled_scale, Geometry(2, 4, 16, 32), "cpu")


@pytest.mark.parametrize("layout,takes_output,lineage",
                         [("vk", True, lin) for lin in LINEAGES] + [("kv", False, "beam")])
def test_trtllm_stepper_matches_reference(monkeypatch, layout, takes_output, lineage):
    monkeypatch.setattr(trt, "kernel", lambda: make_fake_trt(layout, takes_output))
    geo = Geometry(2, 4, 128, 64)                       # GQA, K != V (small: the stand-in is plain torch)
    wl = make_workload(geo, R=2, W=6, T=3, lineage=lineage, seed=5)
    path = trt.TrtllmFullStatePath()
    res = _check(path, wl)
    assert res.status == "ok", res.reason
    assert path.stepper.layout == layout
    sb, n = geo.state_bytes, 12
    assert res.written_bytes == 2 * 3 * n * sb + (0 if layout == "vk" else 2 * sb)


def test_costs_count_the_state_traffic():
    wl = make_workload(QWEN, R=2, W=6, T=3, seed=0)
    c_fi, c_trt = fi.FlashInferFullStatePath().cost(wl), trt.TrtllmFullStatePath().cost(wl)
    R, N, sb = 2, 12, QWEN.state_bytes
    assert c_fi["rate"] == c_trt["rate"] == "fp32_flop_per_s" and c_fi["flops"] == c_trt["flops"] > 0
    assert c_fi["compulsory_bytes"] >= (R + N + 2 * 2 * N) * sb       # step 0 reads s_ctx, later steps parents
    assert c_trt["compulsory_bytes"] - c_fi["compulsory_bytes"] == 3 * 2 * N * sb   # the gather, every step


# ---- ship_parts ----

def test_ship_parts_roundtrip(tmp_path, monkeypatch):
    wheels = []
    for name, size in (("big-1.0-py3-none-any.whl", 2500), ("small-1.0-py3-none-any.whl", 300)):
        p = tmp_path / name
        p.write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        wheels.append(p)
    man = ship_parts.split(wheels, tmp_path / "ship", part_bytes=1000, call_bytes=1400)
    assert [len(w["parts"]) for w in man["wheels"]] == [3, 0]
    calls = sorted((tmp_path / "ship").iterdir())
    sizes = [sum(f.stat().st_size for f in c.iterdir() if f.name != ship_parts.MANIFEST) for c in calls]
    assert all(s <= 1400 for s in sizes) and sizes == sorted(sizes, reverse=True)
    stage = tmp_path / "stage"
    ship_parts.receive(calls[0], stage)
    if len(calls) > 1:
        with pytest.raises(ValueError, match="not yet received"):
            ship_parts.assemble(stage, man)
    for c in calls[1:]:
        ship_parts.receive(c, stage)
    installed = []
    monkeypatch.setattr(ship_parts, "pip_install", lambda ws, target: installed.extend(ws))
    ship_parts.main(["receive", "--from", str(calls[-1]), "--stage", str(stage), "--install", str(tmp_path / "t")])
    assert [w.read_bytes() for w in installed] == [w.read_bytes() for w in wheels]
    (stage / "big-1.0-py3-none-any.whl").unlink()
    part = stage / man["wheels"][0]["parts"][1]
    part.write_bytes(b"y" + part.read_bytes()[1:])
    with pytest.raises(ValueError, match="sha256"):
        ship_parts.assemble(stage, man)


# ---- the real kernels (H200) ----

GPU_GEOMETRIES = ["qwen3_5_0_8b", "qwen3_5_9b", "kimi_linear"]


def _gpu_cell(name: str, geometry: str, lineage: str):
    path = get_path(name)
    geo, shape = GEOMETRIES[geometry], Shape(2, 6, 3)
    why = path.supports(geo, shape, "cuda")
    if why:
        pytest.skip(why)
    wl = make_workload(geo, R=2, W=6, T=3, lineage=lineage, seed=11, device="cuda")
    res = _check(path, wl)
    assert res.status == "ok", res.reason
    assert math.isfinite(res.max_abs_err)
    print(json.dumps({"path": name, "geometry": geometry, "lineage": lineage, "max_abs_err": res.max_abs_err}))


@pytest.mark.gpu
@pytest.mark.parametrize("lineage", LINEAGES)
@pytest.mark.parametrize("geometry", GPU_GEOMETRIES)
@pytest.mark.parametrize("mode", ["", "_paper"])
def test_flashinfer_kernel_matches_reference_gpu(geometry, lineage, mode):
    _gpu_cell("flashinfer_fullstate" + mode, geometry, lineage)


@pytest.mark.gpu
@pytest.mark.parametrize("lineage", LINEAGES)
@pytest.mark.parametrize("geometry", GPU_GEOMETRIES + ["gdn_small", "range_k256_v256"])
@pytest.mark.parametrize("mode", ["", "_paper"])
def test_trtllm_kernel_matches_reference_gpu(geometry, lineage, mode):
    _gpu_cell("trtllm_fullstate" + mode, geometry, lineage)


_V256_PROBE = """
import math, sys, torch
from artifact.workload import GEOMETRIES
from baselines import flashinfer_fullstate as fi
fn = fi.kernel()
geo = GEOMETRIES["gdn_small"]                        # HK = HV = 4, K = 128, V = 256
B, dev = 4, "cuda"
q, k = (torch.randn(B, 1, geo.hk, geo.k, device=dev, dtype=torch.bfloat16) for _ in range(2))
v = torch.randn(B, 1, geo.hv, geo.v, device=dev, dtype=torch.bfloat16)
pool = torch.randn(B, geo.hv, geo.v, geo.k, device=dev) * 0.05
zeros = torch.zeros(geo.hv, device=dev)
a = torch.zeros(B, 1, geo.hv, device=dev)
out = torch.full((B, 1, geo.hv, geo.v), math.nan, device=dev, dtype=torch.bfloat16)
idx = torch.arange(B, dtype=torch.int32, device=dev)
fn(q, k, v, None, zeros, a, zeros, a, scale=geo.k ** -0.5, output=out, use_qk_l2norm=True,
   initial_state=pool, initial_state_indices=idx, output_state_indices=idx, backend="flashinfer")
torch.cuda.synchronize()
print("low rows written", bool(torch.isfinite(out[..., :128].float()).all()))
print("high rows written", bool(torch.isfinite(out[..., 128:].float()).all()))
"""


@pytest.mark.gpu
def test_flashinfer_head_dim_limit_is_the_kernels_gpu():
    """Evidence for the K = V = 128 skip: on a V = 256 head the fp32 kernel either leaves output rows >= 128
    unwritten (poisoned NaN) or faults with an illegal memory access. Probed in a child process,
    since a fault poisons the CUDA context. If this starts failing, FlashInfer lifted the limit and supports()
    should follow."""
    import subprocess
    import sys
    try:
        fi.kernel()
    except ImportError as e:
        pytest.skip(str(e))
    res = subprocess.run([sys.executable, "-c", _V256_PROBE], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parent.parent)
    text = res.stdout + res.stderr
    if res.returncode != 0:
        assert "illegal memory access" in text or "misaligned" in text, text[-2000:]
    else:
        assert "high rows written False" in text, text[-2000:]


def test_free_memory_counts_the_blocks_pytorch_caches_but_does_not_use(monkeypatch):
    """mem_get_info counts PyTorch's cached blocks as taken; a memory check must count them as free (they are
    what the next path allocates from), or a shape after a big one is skipped for memory it could have."""
    from artifact.limits import device_free_bytes, memory_reason
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (3 << 30, 141 << 30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev=None: 130 << 30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev=None: 2 << 30)
    assert device_free_bytes("cuda") == 131 << 30
    assert memory_reason(48 << 30, "cuda", "two pools") is None
    assert "131.00 GiB" in memory_reason(140 << 30, "cuda", "two pools")


def test_one_free_memory_check_serves_our_kernel_and_the_frameworks(monkeypatch):
    """Controlled FullState and the framework adapters ask artifact.limits.memory_reason: the same free bytes, our
    pools held to POOL_SHARE of them; a share outside (0, 1] is refused, naming it."""
    from artifact.limits import memory_reason
    from kernels.fullstate import POOL_SHARE, ControlledFullStatePath
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (10 << 30, 141 << 30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev=None: 0)
    assert memory_reason(9 << 30, "cuda", "x") is None
    assert "80% of the 10.00 GiB" in memory_reason(9 << 30, "cuda", "x", share=POOL_SHARE)
    with pytest.raises(ValueError, match="share=1.5"):
        memory_reason(1, "cuda", "x", share=1.5)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    monkeypatch.setattr("kernels.fullstate.kernel_supports", lambda *a: None)
    n = 9 * 2 ** 30 // 2 // QWEN.state_bytes                    # two pools of n states: 9 GiB
    why = ControlledFullStatePath().supports(QWEN, Shape(1, n, 3), "cuda")
    assert why and "controlled_fullstate: the state pools: 9.00 GiB needed, more than 80% of the 10.00 GiB" in why
    assert ControlledFullStatePath().supports(QWEN, Shape(1, n // 2, 3), "cuda") is None


# ---- paper mode: one pool, explicit reorder through a transient workspace (CPU stand-ins) ----

@pytest.mark.parametrize("lineage", LINEAGES)
def test_flashinfer_paper_mode_reorders_one_pool(fake_fi, monkeypatch, lineage):
    seen = []

    def spy(*a, **kw):
        seen.append((kw["initial_state_indices"].clone(), kw["output_state_indices"].clone()))
        return fake_fi_pretranspose(*a, **kw)

    monkeypatch.setattr(fi, "kernel", lambda: spy)
    wl = make_workload(QWEN, R=2, W=6, T=3, lineage=lineage, seed=3)
    path = fi.FlashInferFullStatePaperPath()
    res = _check(path, wl)
    assert res.status == "ok", res.reason
    sb, N = QWEN.state_bytes, 12
    assert res.persistent_bytes == (2 + N) * sb and path.workspace_bytes() == N * sb
    assert res.written_bytes == (2 + 3 * N + 2 * N) * sb                            # one gather, t >= 1
    beam = torch.arange(N).int()
    assert torch.equal(seen[0][0], torch.arange(2).repeat_interleave(6).int())     # t = 0: context slots
    assert all(torch.equal(r, 2 + N + beam) for r, _ in seen[1:3])                  # later: workspace rows
    assert all(torch.equal(w, 2 + beam) for _, w in seen)                            # writes: own slot
    c_idx, c_pap = fi.FlashInferFullStatePath().cost(wl), path.cost(wl)
    assert c_pap["compulsory_bytes"] - c_idx["compulsory_bytes"] == 2 * 2 * N * sb   # 1 copy, t >= 1


@pytest.mark.parametrize("layout,lineage", [("vk", lin) for lin in LINEAGES] + [("kv", "beam")])
def test_trtllm_paper_mode_reorders_one_pool(monkeypatch, layout, lineage):
    monkeypatch.setattr(trt, "kernel", lambda: make_fake_trt(layout, True))
    geo = Geometry(2, 4, 128, 64)
    wl = make_workload(geo, R=2, W=6, T=3, lineage=lineage, seed=5)
    path = trt.TrtllmFullStatePaperPath()
    res = _check(path, wl)
    assert res.status == "ok", res.reason
    sb, N, ctx = geo.state_bytes, 12, (0 if layout == "vk" else 2 * geo.state_bytes)
    assert res.persistent_bytes == N * sb + ctx and path.workspace_bytes() == N * sb
    assert res.written_bytes == (N + 3 * N + 2 * 2 * N) * sb + ctx
    assert path.stepper.pools.shape[0] == 1
    c_idx, c_pap = trt.TrtllmFullStatePath().cost(wl), path.cost(wl)
    assert c_pap["compulsory_bytes"] - c_idx["compulsory_bytes"] == 2 * 2 * N * sb     # one more copy, t >= 1


def test_paper_mode_check_fails_without_the_gather(monkeypatch):
    """The gate is not vacuous for the paper mode: a reorder that keeps every child on its own slot (identity
    parents, i.e. no gather) fails the check on a permuted lineage."""
    monkeypatch.setattr(trt, "kernel", lambda: make_fake_trt("vk", True))

    class NoGather(trt.TrtllmFullStatePaperStepper):
        def step(self, t, q, k, v, g, beta, parents, out):
            own = torch.arange(self.W, dtype=parents.dtype).expand_as(parents).contiguous()
            return trt.TrtllmFullStatePaperStepper.step(self, t, q, k, v, g, beta, own, out)

    class NoGatherPath(trt.TrtllmFullStatePaperPath):
        stepper_cls = NoGather

    wl = make_workload(Geometry(2, 4, 128, 64), R=2, W=6, T=3, lineage="reversed", seed=5)
    assert _check(trt.TrtllmFullStatePaperPath(), wl).status == "ok"
    assert _check(NoGatherPath(), wl).status == "failed"
