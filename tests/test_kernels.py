"""Our Triton kernels (onela, controlled_fullstate) against the exact references.

On a CPU host they run under the Triton interpreter on small shapes (CI); on the H200 the `gpu` tests run
the named geometries against the FP32 FullState gate at the paper's tolerance. The interpreter rounds bf16
more coarsely than the GPU (docs/design.md §2), so CPU tolerances are separate from the GPU's.
"""
import math
import random
import re

import pytest
import torch

from artifact.measure import DEFAULT_TOLERANCE, check_and_time, max_abs_err
from artifact.paths import get_path
from artifact.reference import fullstate_decode
from artifact.workload import GEOMETRIES, LINEAGES, Geometry, make_workload
from artifact.reference import TorchFullStateStepper
from kernels.fullstate import ControlledFullStatePaperStepper, ControlledFullStateStepper
from kernels.onela import OneLA, OneLAStepper, launch_config, onela_naive, step_launches
from oracles import replay_decode

SMALL = [  # (geometry, R, W, T): W not a power of two, T = 1, HV = 4 HK, K != V
    (Geometry(2, 4, 16, 16), 2, 5, 3),
    (Geometry(1, 4, 32, 16), 1, 20, 4),
    (Geometry(2, 2, 16, 32), 2, 17, 1),
    (Geometry(2, 8, 16, 16), 1, 19, 6),
]
# fp32 outputs vs fp64 with bf16 GTRs: relative to max|o| (these tiny-K shapes have |o| ~ 0.3, not the 0.1 of
# K = 128); the interpreter's bf16 rounding is coarser than the GPU's (docs/design.md §2), hence two bounds.
CPU_REL_TOL, GPU_REL_TOL = 8e-3, 4e-3   # tiny K: |delta| (k.q) is large, so bf16 records cost ~0.5%


def _run(stepper_cls, wl, out_dtype=torch.float32, *ctor_args):
    st = stepper_cls(wl.geometry, wl.R, wl.W, wl.T, wl.device, *ctor_args)   # ctor_args: e.g. a config
    return st, _decode(st, wl, out_dtype)


def _decode(st, wl, out_dtype=torch.float32):
    """Stepper `st`'s decode of workload `wl`: the outputs (NaN where never written)."""
    out = torch.full((wl.T, wl.R, wl.W, wl.geometry.hv, wl.geometry.v), math.nan, dtype=out_dtype,
                     device=wl.device)
    st.reset(wl.s_ctx)
    for t in range(wl.T):
        st.step(t, wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t], out[t])
    return out


CASES = [(OneLAStepper, lineage, *shape) for lineage in LINEAGES for shape in SMALL] + [
    # the FullState kernel runs one program per beam and head: slow under the interpreter, so fewer cases
    (ControlledFullStateStepper, lineage, *SMALL[i]) for lineage, i in (("beam", 0), ("reversed", 1), ("beam", 2))
] + [(ControlledFullStatePaperStepper, lineage, *SMALL[i]) for lineage, i in (("beam", 0), ("reversed", 1))]


@pytest.mark.parametrize("stepper_cls,lineage,geo,R,W,T", CASES)
def test_kernel_matches_fp64_reference(stepper_cls, lineage, geo, R, W, T, device):
    wl = make_workload(geo, R, W, T, lineage=lineage, seed=R * 31 + W, device=device, prompt_len=16)
    ref = fullstate_decode(wl, torch.float64)
    _, out = _run(stepper_cls, wl)
    assert torch.isfinite(out).all(), "an output element was never written (poisoned NaN survived)"
    err = (out.double() - ref).abs().max().item()
    tol = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref.abs().max().item()
    if issubclass(stepper_cls, ControlledFullStateStepper):
        tol = 1e-5   # fp32 state, no bf16 records
    assert err <= tol, f"max abs err {err:.3e} > {tol:.1e}"


def test_onela_k_chunked_projection_is_the_same_math(device):
    """The main kernel's K-chunked projection (BK < K: the K = 256 tiles) gives the one-tile outputs; forced here
    at K = 32 with two chunks of 16."""
    geo, R, W, T = SMALL[1]
    wl = make_workload(geo, R, W, T, lineage="beam", seed=5, device=device, prompt_len=16)
    outs = [_run(OneLAStepper, wl, torch.float32, cfg)[1] for cfg in (None, {"BK": 16})]
    assert torch.isfinite(outs[1]).all()
    # the same bf16 products summed in another order; that can flip a bf16 record's rounding (~1e-5 of |o|)
    assert (outs[0] - outs[1]).abs().max().item() <= 2e-4 * outs[0].abs().max().item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_onela_k256_and_fp32_inputs_match_fp64_reference(dtype, device):
    """K = 256 runs the K-chunked projection with u_q against S's bf16 hi + lo planes (s_lo "q"); K <= 128 takes S
    rounded to bf16 in both projections ("none"). fp32 q, k are split into a bf16 part and a residual. Each stays
    within the fp64 reference's bound."""
    assert launch_config(128, 128, 512)["s_lo"] == "none" and launch_config(256, 256, 512)["s_lo"] == "q"
    for geo in (Geometry(1, 2, 256, 32), SMALL[1][0]):
        wl = make_workload(geo, 1, 5, 3, lineage="beam", seed=9, device=device, prompt_len=16, dtype=dtype)
        ref = fullstate_decode(wl, torch.float64)
        tol = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref.abs().max().item()
        st, out = _run(OneLAStepper, wl, torch.float32)
        assert st.config["BK"] == min(geo.k, 64 if geo.k > 128 else geo.k)
        assert torch.isfinite(out).all()
        assert (out.double() - ref).abs().max().item() <= tol, (geo, dtype)


@pytest.mark.parametrize("cfg", [{"beam_iters": 2}, {"beam_iters": 3}, {"BV": 8}, {"beam_iters": 2, "BV": 8}])
def test_onela_tiles_give_the_one_tile_per_program_outputs(cfg, device):
    """A program running several beam tiles (beam_iters, the S tile split once for all of them) or a V tile narrower
    than V (BV: several programs per head, only the first writes the records) writes the same outputs and
    ancestry rows, partial last tiles and idle iterations included (W=20 or 19 at BB=16)."""
    for geo, R, W, T in (SMALL[1], SMALL[3]):
        wl = make_workload(geo, R, W, T, lineage="beam", seed=R * 7 + W, device=device, prompt_len=16)
        (st0, out0), (st1, out1) = (_run(OneLAStepper, wl, torch.float32, {"BB": 16, "beam_iters": 1, **c})
                                    for c in ({}, cfg))
        assert torch.isfinite(out1).all(), "an output element was never written (poisoned NaN survived)"
        assert (out1 - out0).abs().max().item() <= 1e-5 * out0.abs().max().item(), (geo, R, W, T)
        assert torch.equal(st1.anc[(T - 1) % 2], st0.anc[(T - 1) % 2])
        for a, b in zip(st1.store.tensors(), st0.store.tensors()):
            assert torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-6), (geo, R, W, T, cfg)


@pytest.mark.parametrize("geo,R,W,T,lineage", [
    (Geometry(1, 2, 16, 16), 1, 5, 12, "beam"),         # the replay loop, the pipelined prep kernel from step 8
    (Geometry(1, 2, 48, 16), 1, 3, 33, "reversed"),     # pipelined steps 8 to 32: G = 2, K padded to 64
    (Geometry(1, 1, 16, 16), 1, 2, 40, "beam"),         # pipelined steps 8 to 39
])
def test_onela_decodes_of_any_depth_match_fp64_reference(geo, R, W, T, lineage, device):
    """Every depth runs: from step 8 (and where step x G passes 20) the prep kernel takes the depth axis in a
    run-time loop carrying the alpha products, one depth per iteration, within the fp64 reference's bound as the
    shallow steps are, and writes the ancestry rows the parents build (interpreter: tiny shapes)."""
    from artifact.ancestry import build as build_ancestry
    wl = make_workload(geo, R, W, T, lineage=lineage, seed=T, device=device, prompt_len=16)
    ref = fullstate_decode(wl, torch.float64)
    st, out = _run(OneLAStepper, wl, torch.float32)
    assert torch.isfinite(out).all(), "an output element was never written (poisoned NaN survived)"
    tol = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref.abs().max().item()
    assert (out.double() - ref).abs().max().item() <= tol
    anc = build_ancestry(wl.parents.cpu())[T - 1]
    assert torch.equal(st.anc[(T - 1) % 2][..., :T - 1].cpu(), anc[..., :T - 1].to(torch.int32))


@pytest.mark.parametrize("geo,R,W,T,lineage,dtype", [
    (Geometry(2, 2, 32, 16), 2, 32, 12, "beam", torch.bfloat16),    # the route from step 8: two tiles a request
    (Geometry(1, 2, 16, 32), 1, 48, 11, "reversed", torch.bfloat16),  # G = 2 (a key head's k-hat rows for two heads)
    (Geometry(1, 1, 16, 16), 1, 16, 10, "beam", torch.float32),     # fp32 q, k: their bf16 residuals in the dots
])
def test_onela_record_major_route_matches_the_depth_loop_and_fp64(geo, R, W, T, lineage, dtype, device):
    """From RECORDS_FROM_STEP the record-major route (tree order, per-tile record lists, the replay as small
    products) gives the depth loop's outputs within the same-math bound, and the fp64 reference's; it writes the
    same records and ancestry, its order is the ancestry rows' sorted order (the first step's radix sort, then one
    sort a step), and each record's cumulative gate is the sum of its chain's log alphas."""
    from tools.gather_bench import tree_order
    from kernels.onela.plan import RECORDS_FROM_STEP, _TREE_BEAMS, step_launches as plan
    wl = make_workload(geo, R, W, T, lineage=lineage, seed=T + W, device=device, prompt_len=16, dtype=dtype)
    cfg = launch_config(geo.k, geo.v, W, R, geo.hv, G=geo.group)
    assert cfg["tree"] and "tree_step" in plan(cfg, geo, R, W, RECORDS_FROM_STEP) and \
        "tree_step" not in plan(cfg, geo, R, W, RECORDS_FROM_STEP - 1)
    ref = fullstate_decode(wl, torch.float64)
    st1, out1 = _run(OneLAStepper, wl, torch.float32)
    st0, out0 = _run(OneLAStepper, wl, torch.float32, {"tree": False})
    assert st1.tree is not None and st0.tree is None
    assert torch.isfinite(out1).all(), "an output element was never written (poisoned NaN survived)"
    tol = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref.abs().max().item()
    assert (out1.double() - ref).abs().max().item() <= tol
    # the same products summed in another order; that can flip a bf16 record's rounding (~1e-5 of |o|)
    assert (out1 - out0).abs().max().item() <= 2e-4 * out0.abs().max().item()
    assert torch.equal(out1[:RECORDS_FROM_STEP], out0[:RECORDS_FROM_STEP])
    if W // _TREE_BEAMS % 2 == 0:    # as on a GPU of one SM: each step-kernel program runs several tiles
        assert plan(cfg, geo, R, W, RECORDS_FROM_STEP, n_sm=1)["tree_step"][1]["ITERS"] > 1
        st2 = OneLAStepper(wl.geometry, R, W, T, wl.device)
        st2.n_sm = 1
        assert torch.equal(_decode(st2, wl), out1)
    assert torch.equal(st1.anc[(T - 1) % 2], st0.anc[(T - 1) % 2])
    torch.testing.assert_close(st1.store.khat.float(), st0.store.khat.float(), rtol=0, atol=0)
    torch.testing.assert_close(st1.store.delta.float(), st0.store.delta.float(), rtol=2 ** -7, atol=1e-6)
    assert torch.equal(st1.tree.order.cpu(), tree_order(st1.anc[(T - 1) % 2].cpu(), T - 1))
    assert torch.equal(torch.gather(st1.tree.rank[(T - 1) % 2], 1, st1.tree.order.long()).cpu(),
                       torch.arange(W, dtype=torch.int32).expand(R, W))
    # each live beam's chain: gcum of its depth-j record = the sum of the log alphas down to j
    table = st1.anc[(T - 1) % 2].long()                                   # [R, W, T]
    for j in range(T - 1):
        slot = table[:, :, j][:, None, :].expand(R, geo.hv, W)
        want = sum(torch.gather(st1.store.alpha[i].transpose(1, 2).log(), 2, table[:, :, i][:, None, :].expand(
            R, geo.hv, W)) for i in range(j + 1))
        got = torch.gather(st1.tree.gcum[j], 2, slot)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _coef_tables(wl, cfg):
    """The `onela` stepper's T-step decode under launch config `cfg`: (stepper, outputs, [the coefficient rows step
    t writes -- 3 + 2t of them -- for each t], [the ancestry row columns step t writes -- t of them -- for each
    t])."""
    st = OneLAStepper(wl.geometry, wl.R, wl.W, wl.T, wl.device, cfg)
    out = torch.full((wl.T, wl.R, wl.W, wl.geometry.hv, wl.geometry.v), math.nan, device=wl.device)
    st.reset(wl.s_ctx)
    tables, ancestry = [], []
    for t in range(wl.T):
        st.step(t, wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t], out[t])
        tables.append(st.coef[:3 + 2 * t].clone())
        ancestry.append(st.anc[t % 2][..., :t].clone())
    return st, out, tables, ancestry


def _coef_reference(wl, store, anc, t):
    """Step t's coefficient table [3 + 2t, R, HV, W] from its definition, in fp64, over the records in `store` and
    the ancestry table `anc` [R, W, T] of step t: row 0 = c_{-1} inv_q, 1 = c_{-1} inv_k, 2 = k-hat_t . q-hat,
    3 + 2j = c_j (k-hat_j . q-hat), 4 + 2j = c_j (k-hat_j . k-hat), where c_j = alpha_t prod_{j < i < t} alpha_i
    over beam b's ancestral records, inv_q = |q|^-1 K^-1/2, inv_k = |k|^-1 and q-hat, k-hat this step's normed
    rows. Returns the table and the bound an fp32 evaluation of it lies within: (2K + t + 16) fp32 rounding
    units of the table with every dot's terms taken in absolute value (a sum of K terms, its squared-norm factor,
    t + 2 products, a reciprocal square root), plus fp32's smallest normal number times the row's factor other
    than c and once more (the product chain and the product may fall below it, where the GPU flushes to zero)."""
    from artifact.ancestry import gather_beams
    geo = wl.geometry
    q, k = wl.q[t].double(), wl.k[t].double()                                       # [R, W, HK, K]
    inv_q = torch.rsqrt((q * q).sum(-1) + 1e-6) * geo.k ** -0.5                     # [R, W, HK]
    inv_k = torch.rsqrt((k * k).sum(-1) + 1e-6)

    def per_hv(x):                                                                  # [R, W, HK] -> [R, W, HV]
        return x.repeat_interleave(geo.group, dim=-1)

    def dots(a, b, inv):                                                            # a . b and |a| . |b|, by inv
        return per_hv((a * b).sum(-1) * inv), per_hv((a * b).abs().sum(-1) * inv)

    rows = [None] * (3 + 2 * t)                     # (c, the dot, its absolute sum) per row
    c = store.alpha[t].double()                                                     # [R, W, HV]
    for j in range(t - 1, -1, -1):
        slot = anc[:, :, j]
        k_j = gather_beams(store.khat[j], slot).double()
        rows[3 + 2 * j] = (c, *dots(k_j, q, inv_q))
        rows[4 + 2 * j] = (c, *dots(k_j, k, inv_k))
        c = c * gather_beams(store.alpha[j], slot).double()
    rows[0] = (c, per_hv(inv_q), per_hv(inv_q))
    rows[1] = (c, per_hv(inv_k), per_hv(inv_k))
    rows[2] = (torch.ones_like(c), *dots(q, k, inv_q * inv_k))
    c, dot, dot_abs = (torch.stack([r[i] for r in rows]).permute(0, 1, 3, 2) for i in range(3))
    tiny = torch.finfo(torch.float32).tiny
    return c * dot, (2 * geo.k + t + 16) * 2.0 ** -24 * c * dot_abs + tiny * (dot_abs + 1)


def _check_coef_tables(wl, st, tables, ancestry):
    """Each step's ancestry row columns (`_coef_tables`) equal to those the parents build, and its coefficient table
    within fp32 rounding of `_coef_reference` over the stepper's records where a prep kernel wrote it (not at a
    step 0 in one launch, whose main kernel keeps its coefficients in registers)."""
    from artifact.ancestry import build as build_ancestry
    built = build_ancestry(wl.parents)
    for t, (table, anc) in enumerate(zip(tables, ancestry)):
        assert torch.equal(anc, built[t][..., :t]), t
        if not {"prep", "prep_pipe"} & set(step_launches(st.config, wl.geometry, wl.R, wl.W, t)):
            continue
        want, bound = _coef_reference(wl, st.store, built[t], t)
        assert ((table.double() - want).abs() <= bound).all(), t


def _within_one_ulp(a, b):
    """Whether a and b (one dtype) differ by at most one unit in the last place of the larger magnitude, in their
    dtype: two roundings of fp32 values an fp32 rounding apart."""
    big = torch.maximum(a.float().abs(), b.float().abs())
    _, exponent = torch.frexp(big)                                  # big = m 2^e, m in [0.5, 1)
    ulp = torch.ldexp(torch.full_like(big, torch.finfo(a.dtype).eps / 2), exponent)
    return bool(((a.float() - b.float()).abs() <= ulp).all())


@pytest.mark.skipif(torch.cuda.is_available(), reason="moves the pipelined form's first step: interpreter only")
@pytest.mark.parametrize("geo,W,T", [(Geometry(1, 3, 48, 16), 5, 12), (Geometry(2, 4, 16, 32), 37, 11),
                                     (Geometry(1, 4, 16, 16), 20, 9), (Geometry(1, 1, 256, 16), 3, 10)])
def test_onela_pipelined_prep_writes_what_the_one_tile_kernel_writes(geo, W, T, device, monkeypatch):
    """The pipelined prep kernel (here from step 1) writes bit for bit the coefficient table the main kernel reads,
    the ancestry rows and the records that the one-tile kernel (here at every step, its unroll limits lifted:
    the interpreter compiles nothing) writes, at every step, and both write the coefficient table of its
    definition (`_coef_reference`) and the ancestry the parents build: G = 3, 2, 4 and 1 value heads' alpha
    chains, K padded to 64, K = 256 (16-beam tiles), W = 37 and 20 (pipelined tiles of 32 beams, the last
    partial). The gates are scaled so that the deepest records still weigh in o."""
    import kernels.onela.plan as plan
    wl = make_workload(geo, 1, W, T, lineage="beam", seed=W + T, device=device, prompt_len=16)
    wl.g = wl.g * 0.01
    runs = {}
    with monkeypatch.context() as m:
        m.setattr(plan, "_PIPE_FROM_STEP", T)
        m.setattr(plan, "_PREP_UNROLL_STEPS", T)
        m.setattr(plan, "_PREP_UNROLL_MAX", T * geo.group)
        assert all("prep" in step_launches(launch_config(geo.k, geo.v, W), geo, 1, W, t) for t in range(1, T))
        runs["one-tile"] = _coef_tables(wl, None)
    with monkeypatch.context() as m:
        m.setattr(plan, "_PIPE_FROM_STEP", 1)
        launches = step_launches(launch_config(geo.k, geo.v, W), geo, 1, W, 1)
        assert "prep_pipe" in launches and launches["prep_pipe"][1]["STAGES"] == 0     # the interpreter's loop
        runs["pipelined"] = _coef_tables(wl, None)
    st0, out0, coef0, anc0 = runs["one-tile"]
    st1, out1, coef1, anc1 = runs["pipelined"]
    assert torch.isfinite(out0).all()
    assert all(torch.equal(a, b) for a, b in zip(coef1, coef0))
    assert torch.equal(out1, out0) and torch.equal(st1.anc, st0.anc)
    assert all(torch.equal(a, b) for a, b in zip(st1.store.tensors(), st0.store.tensors()))
    for st, coef, anc in ((st0, coef0, anc0), (st1, coef1, anc1)):
        _check_coef_tables(wl, st, coef, anc)


def test_onela_launch_config_names_an_unknown_key(device):
    """A launch config override takes only `CONFIG_KEYS`; another key is refused when the stepper is made and by
    the tools' --config, naming it."""
    from tools import launch_config_arg
    geo = Geometry(1, 1, 16, 16)
    with pytest.raises(ValueError, match=re.escape("unknown launch config key(s) ['tile']")):
        OneLAStepper(geo, 1, 5, 3, device, {"tile": 4})
    import argparse
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape("unknown launch config key(s) ['prep']")):
        launch_config_arg('{"prep": "tiles"}')
    assert launch_config_arg('{"ws": false}') == {"ws": False}


@pytest.mark.gpu
@pytest.mark.parametrize("name,R,W,T", [("qwen3_5_0_8b", 4, 512, 31), ("qwen3_5_397b", 2, 64, 12),
                                        ("gdn_1_3b", 2, 128, 20), ("qwen3_5_9b", 1, 37, 18)])
def test_gpu_pipelined_prep_writes_the_defined_coefficient_table(name, R, W, T, monkeypatch):
    """On the H200 the pipelined prep kernel (the default from step 8, and from step 6 at G = 4) writes at every
    step the coefficient table of its definition (`_coef_reference`, within fp32 rounding) and the ancestry the
    parents build; where the one-tile kernel can still be launched (up to step 16 and 20 unrolled columns: a
    second decode with the pipelined kernel moved there) it writes that kernel's table (the dots' fp32 sums may
    round apart in the last bit if the compiler orders them otherwise: rtol 1e-6) and the same k-hat and alpha
    records to one unit in the last place (the norms' sums may round apart too); both decodes pass the FP32
    FullState gate. G = 1, 2 and 4, K = 256, W = 37 (partial beam tiles), through step 30. Their delta records
    come from the same main kernel and may round apart wherever a coefficient did, and a delta one bf16 unit
    apart feeds every later step's replay: the gate checks them through the outputs."""
    import kernels.onela.plan as plan
    wl = make_workload(name, R, W, T, lineage="beam", seed=T, device="cuda")
    ref = fullstate_decode(wl)
    st1, out1, coef1, anc1 = _coef_tables(wl, {"ws": False})
    assert "prep_pipe" in st1.kernel_info, st1.kernel_info
    _check_coef_tables(wl, st1, coef1, anc1)
    with monkeypatch.context() as m:
        m.setattr(plan, "_PIPE_FROM_STEP", plan._PREP_UNROLL_STEPS + 1)
        st0, out0, coef0, _ = _coef_tables(wl, {"ws": False})
    for t in (t for t in range(T) if not plan.prep_is_deep(t, wl.geometry.group)):     # the one-tile kernel's steps
        assert torch.allclose(coef1[t], coef0[t], rtol=1e-6, atol=1e-30), t
    assert torch.equal(st1.anc, st0.anc)
    for a, b in ((st1.store.alpha, st0.store.alpha), (st1.store.khat, st0.store.khat)):
        assert _within_one_ulp(a, b), a.shape
    assert max_abs_err(out1, ref) <= DEFAULT_TOLERANCE and max_abs_err(out0, ref) <= DEFAULT_TOLERANCE


def test_onela_refuses_only_depths_its_offsets_cannot_index(device):
    """No depth limit of the kernels' own: supports() takes T = 64 and 1000, and refuses T < 1 and a shape whose
    coefficient table outgrows int32 offsets, naming the number, as the stepper does before it allocates. On a
    GPU it also refuses what CUDA's grid cannot launch (y / z extents of 65,535), naming it; the interpreter has
    no such limit."""
    from artifact.workload import Shape
    from kernels.onela.plan import shape_supports
    geo = Geometry(1, 2, 16, 16)
    for T in (32, 33, 64, 1000):
        assert get_path("onela").supports(geo, Shape(1, 5, T), device) is None
    assert "T=0 decode steps unsupported" in shape_supports(0)
    big = Geometry(16, 64, 128, 128)
    reason = get_path("onela").supports(big, Shape(64, 4096, 100), device)
    assert "(3 + 2T) * R * HV * W = 3405774848 entries exceed int32 offsets (2147483647)" in reason, reason
    assert get_path("onela").supports(big, Shape(64, 4096, 60), device) is None
    with pytest.raises(ValueError, match=re.escape("exceed int32 offsets")):
        OneLAStepper(big, 64, 4096, 100, device)
    assert "R=4096 x HV=16 = 65536 request heads unsupported" in shape_supports(2, 4096, 1, 16)
    assert shape_supports(2, 4095, 1, 16) is None and shape_supports(2, 4096, 1, 16, on_gpu=False) is None
    assert "W=4194241 beams unsupported: 65536 beam tiles" in shape_supports(2, 1, 4194241, 1)
    assert shape_supports(2, 1, 4194240, 1) is None


@pytest.mark.parametrize("stepper_cls", [OneLAStepper, ControlledFullStateStepper])
@pytest.mark.parametrize("geo", [Geometry(1, 2, 48, 48), Geometry(2, 2, 96, 80), Geometry(1, 3, 16, 112)])
def test_head_sizes_that_are_not_powers_of_two_match_fp64_reference(stepper_cls, geo, device):
    """K and V any multiple of 16 (the key tiles padded to the next power of two and masked, the value tiles the
    largest power of two dividing V, a K-chunked projection where K is no power of two), G = 3 included."""
    wl = make_workload(geo, 1, 6, 3, lineage="beam", seed=geo.k + geo.v, device=device, prompt_len=16)
    ref = fullstate_decode(wl, torch.float64)
    st, out = _run(stepper_cls, wl, torch.float32)
    assert torch.isfinite(out).all(), "an output element was never written (poisoned NaN survived)"
    tol = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref.abs().max().item()
    if stepper_cls is ControlledFullStateStepper:
        tol = 1e-5
    assert (out.double() - ref).abs().max().item() <= tol, geo
    if stepper_cls is OneLAStepper:
        assert geo.v % st.config["BV"] == 0 and geo.k % st.config["BK"] == 0


# A sample of the CPU contract grid: T 1..12, W 1 / 5 / 17 / 64, K and V multiples of 16 (powers of two or not),
# G 1-3, and shapes supports() must refuse (a coefficient table past int32 offsets, K or V off the grid).
_CPU_CONTRACT = [(1, 1, 16, 16, 1), (2, 5, 32, 48, 2), (5, 17, 48, 16, 3), (8, 64, 16, 32, 1), (9, 5, 64, 16, 2),
                 (12, 17, 16, 80, 1), (12, 1, 32, 32, 3), (12, 2**27, 16, 16, 1), (3, 5, 24, 16, 1),
                 (3, 5, 16, 520, 1)]


def test_supports_is_a_promise_on_a_sampled_grid(device):
    """Every sampled shape supports() accepts runs under the interpreter (or on the GPU), writes every output
    element and is within the fp64 reference's bound; every shape it refuses names the reason."""
    from artifact.workload import Shape
    accepted = 0
    for T, W, K, V, G in _CPU_CONTRACT:
        geo = Geometry(1, G, K, V)
        reason = get_path("onela").supports(geo, Shape(1, W, T), device)
        if reason:
            assert "unsupported" in reason, reason
            continue
        accepted += 1
        wl = make_workload(geo, 1, W, T, lineage="beam", seed=T * W, device=device, prompt_len=16)
        ref = fullstate_decode(wl, torch.float64)
        _, out = _run(OneLAStepper, wl, torch.float32)
        assert torch.isfinite(out).all(), (T, W, K, V, G)
        tol = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref.abs().max().item()
        assert (out.double() - ref).abs().max().item() <= tol, (T, W, K, V, G)
    assert accepted == len(_CPU_CONTRACT) - 3


def test_onela_launch_config_rules():
    """The adopted plan (kernels/NOTES.md, "Triton kernels"): the most beam tiles per program, up to 8, that keep
    ~2 programs per SM, only where the S tile is one tile (K <= 128); small grids keep one tile per program; PDL
    waits before the beam loop when there is one, after the one tile's projections otherwise, and not at all
    where the GPU has no programmatic dependent launch; step 0 is one launch where the S tile spans K and a key
    head has at most 2 value heads; the warp-specialised kernel where K is one of WS_HEAD_DIMS (128, 256) and V one
    of WS_VALUE_DIMS (128, 256, 512)."""
    from kernels.onela.ws import WS_HEAD_DIMS, WS_VALUE_DIMS, ws_shape_supports
    assert WS_HEAD_DIMS == (128, 256) and WS_VALUE_DIMS == (128, 256, 512)
    assert all(ws_shape_supports(GEOMETRIES[g], 64) is None for g in GEOMETRIES)     # every named geometry
    assert "needs K in 128, 256 and V in 128, 256, 512" in ws_shape_supports(Geometry(1, 1, 64, 128), 64)
    assert "W=96 not a multiple of 64" in ws_shape_supports(GEOMETRIES["gdn_1_3b"], 96)
    iters = {(R, W): launch_config(128, 128, W, R, 16, n_sm=132)["beam_iters"]
             for R in (4, 8, 16) for W in (128, 256, 512)}
    assert iters == {(4, 128): 1, (4, 256): 1, (4, 512): 2, (8, 128): 1, (8, 256): 2, (8, 512): 4,
                     (16, 128): 2, (16, 256): 4, (16, 512): 8}
    assert launch_config(256, 256, 512, 16, 16)["beam_iters"] == 1           # K-chunked: no S tile to keep
    # many value heads: the grid allows 8 tiles per program, but a (request, head) has only W / BB beam tiles
    assert launch_config(128, 128, 128, 16, 64)["beam_iters"] == 2
    assert launch_config(128, 128, 256, 16, 64)["beam_iters"] == 4
    assert launch_config(128, 128, 512, 4, 16, n_sm=264)["beam_iters"] == 1    # twice the SMs: no loop
    assert launch_config(128, 128, 512, 4, 16)["pdl"] == 2 and launch_config(128, 128, 128, 4, 16)["pdl"] == 1
    assert launch_config(256, 256, 512, 16, 16)["pdl"] == 1
    assert launch_config(128, 128, 512, 4, 16, pdl_ok=False)["pdl"] == 0
    assert launch_config(128, 128, 512, 4, 16)["fuse_step0"] and launch_config(128, 128, 512, 4, 32, G=2)["fuse_step0"]
    assert not launch_config(256, 256, 512, 16, 16)["fuse_step0"]
    assert not launch_config(128, 256, 512, 4, 16, G=4)["fuse_step0"]
    assert launch_config(128, 256, 512)["ws"] and not launch_config(128, 64, 512)["ws"]
    assert launch_config(256, 256, 512)["ws"] and launch_config(256, 512, 512)["ws"]     # range_k256_v256, gdn_1_3b
    assert not any(launch_config(K, V, 512)["ws"] for K, V in ((64, 128), (192, 256), (512, 512), (128, 384)))
    # the Triton plan: step 0 alone where fuse_step0, prep + main after it (and at every step at G > 2)
    fused = launch_config(128, 128, 512, 4, 16)
    assert set(step_launches(fused, GEOMETRIES["qwen3_5_0_8b"], 4, 512, 0, interpret=False)) == {"main"}
    assert set(step_launches(fused, GEOMETRIES["qwen3_5_0_8b"], 4, 512, 1, interpret=False)) == {"prep", "main"}


def test_onela_records_match_replay_and_never_move(device):
    """The kernel's GTRs equal the reference replay's (to bf16), and a later step never rewrites an earlier one."""
    wl = make_workload(Geometry(2, 4, 16, 16), 2, 9, 4, lineage="beam", seed=7, device=device, prompt_len=16)
    st = OneLAStepper(wl.geometry, wl.R, wl.W, wl.T, wl.device)
    out = torch.empty(wl.R, wl.W, 4, 16, dtype=torch.float32, device=device)
    st.reset(wl.s_ctx)
    snaps = []
    for t in range(wl.T):
        st.step(t, wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t], out)
        for j, snap in enumerate(snaps):
            assert all(torch.equal(x[j], s) for x, s in zip(st.store.tensors(), snap)), f"step {j} record moved"
        snaps.append(tuple(x[t].clone() for x in st.store.tensors()))
    from artifact.gtr import GtrStore
    ref_store = GtrStore(wl.geometry, wl.R, wl.W, wl.T, device=device, record_dtype=torch.float64,
                         alpha_dtype=torch.float64)
    replay_decode(wl, store=ref_store)
    assert torch.allclose(st.store.alpha.double(), ref_store.alpha, rtol=1e-6, atol=1e-7)
    assert torch.allclose(st.store.khat.double(), ref_store.khat, atol=8e-3)
    assert torch.allclose(st.store.delta.double(), ref_store.delta, atol=4e-3, rtol=1e-2)


def test_paths_pass_the_gate_on_cpu(device):
    """The registered paths through the one gate the sweep uses (bf16 outputs like the frameworks')."""
    wl = make_workload(Geometry(2, 4, 16, 16), 2, 6, 3, seed=3, device=device, prompt_len=16)
    ref = fullstate_decode(wl)
    for name in ("onela", "controlled_fullstate", "controlled_fullstate_paper"):
        # bf16 outputs at |o| ~ 0.3 (tiny K): half a bf16 ulp is 1e-3, plus the records' rounding
        res = check_and_time(get_path(name), wl, ref, tolerance=0.015 * ref.abs().max().item(), time_it=False)
        assert res.status == "ok", (name, res.reason)
        assert res.persistent_bytes > 0 and res.written_bytes > 0


def test_paper_capacity_and_writes_from_real_tensors():
    """Fig 8b: at R=4 W=512 Qwen geometry OneLA keeps 36.3 / 101 MiB and writes 32.3 / 96.8 MiB (O=3 / O=7)."""
    geo = GEOMETRIES["qwen3_5_0_8b"]
    mib = 2 ** 20
    for T, persistent, written in ((2, 36.3, 32.3), (6, 101, 96.8)):
        st = OneLAStepper(geo, 4, 512, T, "cpu" if not torch.cuda.is_available() else "cuda")
        # the paper prints 3 significant digits
        assert math.isclose(st.persistent_bytes() / mib, persistent, rel_tol=0.003), st.persistent_bytes() / mib
        assert math.isclose(st.written_bytes() / mib, written, rel_tol=0.003), st.written_bytes() / mib
        # the ws kernel (the K = 128 default on Hopper) reads S_ctx's bf16 rounding, made at reset where it can
        # run: counted on top (2 MiB); elsewhere (this CPU host) no copy is made
        assert st.config["ws"] is True
        before = st.persistent_bytes()
        st.reset(torch.zeros(4, geo.hv, geo.v, geo.k, device=st.device))
        hopper = st.device.type == "cuda" and torch.cuda.get_device_capability(st.device)[0] == 9
        assert st.persistent_bytes() - before == (2 * mib if hopper else 0) == \
            (4 * geo.hv * geo.v * geo.k * 2 if hopper else 0)
        fs = ControlledFullStateStepper.__new__(ControlledFullStateStepper)   # accounting only: no 4 GiB pools
        fs.geometry, fs.R, fs.W, fs.T = geo, 4, 512, T
        assert fs.written_bytes() / st.written_bytes() > 100


def test_bad_input_is_rejected_before_launch(device):
    wl = make_workload(Geometry(2, 4, 16, 16), 2, 5, 2, seed=1, device=device, prompt_len=4)
    with pytest.raises(ValueError, match="K=40 unsupported"):
        OneLAStepper(Geometry(2, 4, 40, 16), 2, 5, 2, device)
    with pytest.raises(ValueError, match="V=24 unsupported"):
        ControlledFullStateStepper(Geometry(2, 4, 16, 24), 2, 5, 2, device)
    assert "K=40 unsupported (a multiple of 16 in 16..512)" in get_path("onela").supports(
        Geometry(2, 4, 40, 16), wl.shape, device)
    assert "V=528 unsupported" in get_path("controlled_fullstate").supports(Geometry(2, 4, 16, 528), wl.shape, device)
    with pytest.raises(ValueError, match="BV=32, BK=16 must divide V=16"):
        OneLAStepper(wl.geometry, 2, 5, 2, device, {"BV": 32})
    with pytest.raises(ValueError, match=r"unknown launch config key\(s\) \['bv'\]"):
        OneLAStepper(wl.geometry, 2, 5, 2, device, {"bv": 32})
    st = OneLAStepper(wl.geometry, 2, 5, 2, device)
    st.reset(wl.s_ctx)
    out = torch.empty(2, 5, 4, 16, device=device)
    with pytest.raises(ValueError, match="q, k, v must share one dtype"):
        st.step(0, wl.q[0].float(), wl.k[0], wl.v[0], wl.g[0], wl.beta[0], wl.parents[0], out)
    with pytest.raises(ValueError, match=r"v has shape \(2, 5, 4, 8\)"):
        st.step(0, wl.q[0], wl.k[0], wl.v[0][..., :8], wl.g[0], wl.beta[0], wl.parents[0], out)
    st.step(0, wl.q[0], wl.k[0], wl.v[0], wl.g[0], wl.beta[0], wl.parents[0], out)
    bad = wl.parents[1].clone()
    bad[1, 2] = 5
    with pytest.raises(ValueError, match=r"parents out of range: values in \[0, 5\]"):
        st.step(1, wl.q[1], wl.k[1], wl.v[1], wl.g[1], wl.beta[1], bad, out)
    st.step(1, wl.q[1], wl.k[1], wl.v[1], wl.g[1], wl.beta[1], wl.parents[1], out)   # a refused step is not taken
    with pytest.raises(RuntimeError, match=r"step\(2\) after all T=2 steps since reset"):
        st.step(2, wl.q[1], wl.k[1], wl.v[1], wl.g[1], wl.beta[1], wl.parents[1], out)
    with pytest.raises(ValueError, match="s_ctx must be"):
        st.reset(wl.s_ctx.double())


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_gpu_every_geometry_within_paper_tolerance(name):
    """On the H200, both kernels pass the FP32 FullState gate at 4.88e-4 on every geometry and lineage."""
    for lineage in LINEAGES:
        wl = make_workload(name, 2, 37, 5, lineage=lineage, seed=11, device="cuda")
        ref = fullstate_decode(wl)
        for path in ("onela", "controlled_fullstate"):
            res = check_and_time(get_path(path), wl, ref, tolerance=DEFAULT_TOLERANCE, time_it=False)
            assert res.status == "ok", (path, lineage, res.reason)


def test_bench_validates_its_arguments_before_it_needs_a_gpu(capsys):
    """`tools.bench` names a bad value and exits 2 before it looks for a GPU."""
    from tools.bench import main
    for argv, message in ((["--R", "0"], "--R must be >= 1, got [0]"), (["--O", "1"], "--O must be >= 2, got [1]"),
                          (["--config", '{"s_lo": "qk"}'], "unknown launch config key(s) ['s_lo']"),
                          (["--paths", "onela", "bogus"], "unknown path(s) ['bogus']"),
                          (["--geometry", "bogus"], "invalid choice: 'bogus'")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err, argv


def _graph_replays(cfg, wl, n):
    """The `onela` path under launch config `cfg` (None: the default): its T-step decode captured in one CUDA graph
    and replayed n times into a NaN-poisoned output; returns (stepper, [output of each replay])."""
    from artifact.timing import capture_graph
    from tools.bench import ConfiguredOneLA
    path = ConfiguredOneLA(cfg) if cfg is not None else get_path("onela")
    path.prepare(wl)
    graph, out = capture_graph(lambda: path.run(wl))
    replays = []
    for _ in range(n):
        out.fill_(math.nan)
        graph.replay()
        replays.append(out.clone())
    torch.cuda.synchronize()
    return path.stepper, replays


@pytest.mark.gpu
@pytest.mark.parametrize("ws", [False, True])
@pytest.mark.parametrize("name,R,W,T", [("qwen3_5_0_8b", 4, 512, 6), ("qwen3_5_0_8b", 2, 37, 5),
                                        ("gdn_1_3b", 4, 512, 10), ("qwen3_5_0_8b", 1, 64, 40)])
def test_gpu_pdl_launches_give_bit_identical_graph_replays(name, R, W, T, ws):
    """Programmatic dependent launch (each launch may start while the previous one finishes, its reads of this
    step's inputs before the grid-dependency wait and everything else after it) changes no result: a CUDA graph of
    the T-step decode, replayed many times, writes bit for bit the outputs, GTRs and ancestry of plain launches --
    a read moved above the wait that depends on the previous launch would show as a mismatch. For the Triton
    kernels (ws False) and the default, which at W=512 is the warp-specialised kernel (at K = 256 too, gdn_1_3b,
    with the prep kernel before it past step 7); at T = 40 the pipelined prep kernel from step 8 too."""
    wl = make_workload(name, R, W, T, lineage="beam", seed=R + W, device="cuda")
    results = []
    for cfg in ({"pdl": 0}, {"pdl": 1}, {"pdl": 2}):     # 1: wait after the first projections, 2: before them
        results.append((cfg, *_graph_replays({**cfg, "ws": ws}, wl, 8)))
    (_, st0, base), *pdl_runs = results
    for cfg, st1, replays in pdl_runs:
        for i, o in enumerate(replays + base):
            assert torch.equal(o, base[0]), f"{cfg}: replay {i} differs"
        assert torch.equal(st1.anc, st0.anc)
        for a, b in zip(st1.store.tensors(), st0.store.tensors()):
            assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("name,R,W,T", [("qwen3_5_0_8b", 4, 512, 6), ("qwen3_5_9b", 3, 192, 5),
                                        ("qwen3_5_397b", 2, 64, 4), ("kimi_linear", 1, 128, 6),
                                        ("gdn_small", 3, 192, 6), ("range_hk4_hv16", 2, 128, 5),
                                        ("range_k256_v256", 4, 512, 6), ("range_k256_v256", 1, 64, 10),
                                        ("gdn_1_3b", 4, 512, 9), ("gdn_1_3b", 1, 64, 12),
                                        ("qwen3_5_0_8b", 1, 64, 40), ("gdn_1_3b", 1, 64, 34)])
def test_gpu_ws_kernel_matches_the_triton_kernels(name, R, W, T):
    """The warp-specialised Gluon kernel (kernels/onela/ws.py) -- the whole step in one launch, and after the prep
    kernel at G > 2's deeper steps and past step 7 -- passes the FP32 FullState gate, writes the Triton kernels'
    ancestry exactly and their GTRs to within bf16 rounding (the one-launch form computes the norms and dots in
    another order), and its captured graph (PDL launches) replays bit for bit. The interpreter cannot run Gluon:
    this is its correctness test. R=4 W=512 gives programs several tiles across a head change; G = 2 and 4 share
    key heads; V = 256 and 512 run each value head as 128-column chunks; K = 256 (range_k256_v256, gdn_1_3b) as two
    128-column key blocks, at R = 1 and 4, W = 64 and 512, down to step 11. T = 40 and 34: from step 8 the
    record-major route with its warp-specialised step kernel (K = V = 128), or the pipelined prep kernel and past
    step 31 the Triton main kernel (K = 256), take over within the decode, within the same gate."""
    from kernels.onela.plan import RECORDS_FROM_STEP, prep_is_deep
    from kernels.onela.tree_ws import tree_ws_supports
    from kernels.onela.ws import ws_fuses_step, ws_runs_step
    wl = make_workload(name, R, W, T, lineage="beam", seed=5, device="cuda")
    ref = fullstate_decode(wl)
    base, _ = _graph_replays({"ws": False}, wl, 1)      # the Triton kernels
    st, replays = _graph_replays(None, wl, 4)
    geo = wl.geometry
    route = launch_config(geo.k, geo.v, W, R, geo.hv, G=geo.group)["tree"]
    want = {"ws_step"}
    for t in range(T):
        if route and t >= RECORDS_FROM_STEP:      # the record-major route, its step kernel warp-specialised
            want |= {"tree_lists", "tree_ws" if tree_ws_supports(geo, W) else "tree_step"}
        elif not ws_fuses_step(wl.geometry, t):
            want |= {"ws_main" if ws_runs_step(wl.geometry, t) else "main",
                     "prep_pipe" if t >= 8 or prep_is_deep(t, wl.geometry.group) else "prep"}
    assert set(st.kernel_info) == want, st.kernel_info
    assert max_abs_err(replays[0], ref) <= DEFAULT_TOLERANCE
    for o in replays[1:]:
        assert torch.equal(o, replays[0])
    assert torch.equal(st.anc, base.anc)
    for a, b in zip(st.store.tensors(), base.store.tensors()):
        a, b = a.float(), b.float()
        assert ((a - b).abs() <= 2 ** -6 * b.abs() + 1e-4 * b.abs().max()).all(), a.shape


@pytest.mark.gpu
@pytest.mark.parametrize("name,R,W,T,lineage", [("qwen3_5_0_8b", 4, 512, 12, "model"),
                                                ("qwen3_5_0_8b", 1, 64, 40, "beam"),
                                                ("qwen3_5_9b", 2, 192, 11, "reversed")])
def test_gpu_tree_ws_kernel_matches_the_triton_route(name, R, W, T, lineage):
    """The route's warp-specialised step kernel (kernels/onela/tree_ws.py: 32-position tiles, loads by a producer
    warp ahead of the consumer's wgmmas) passes the FP32 FullState gate and gives the Triton route's outputs within
    its same-math bound, the same ancestry and order, k-hat_t and delta_t within bf16 rounding, and replays its
    captured graph (PDL launches) bit for bit. Eight tiles a program across both pairs (R = 4, W = 512, the
    recorded lineage), one tile a program to step 39 (W = 64: the second pair idle), G = 2 and two tiles a program
    of six a request (W = 192)."""
    wl = make_workload(name, R, W, T, lineage=lineage, seed=7, device="cuda")
    ref = fullstate_decode(wl)
    base, base_out = _graph_replays({"ws": False}, wl, 1)       # the Triton kernels, the Triton route
    st, replays = _graph_replays(None, wl, 4)
    assert {"tree_lists", "tree_ws"} <= set(st.kernel_info) and "tree_step" not in st.kernel_info, st.kernel_info
    assert max_abs_err(replays[0], ref) <= DEFAULT_TOLERANCE
    for o in replays[1:]:
        assert torch.equal(o, replays[0])
    o, b = replays[0].float(), base_out[0].float()
    assert (o - b).abs().max().item() <= 2e-3 * b.abs().max().item()
    assert torch.equal(st.anc, base.anc) and torch.equal(st.tree.order, base.tree.order)
    for a, b in zip(st.store.tensors(), base.store.tensors()):
        a, b = a.float(), b.float()
        assert ((a - b).abs() <= 2 ** -6 * b.abs() + 1e-3 * b.abs().max()).all(), a.shape


def _as_conv_split(q, k, v):
    """q, k, v [R, W, H, D] as the model hands them over: views into one [R, W, HK*K + HK*K + HV*V] conv output."""
    mixed = torch.cat([q.flatten(-2), k.flatten(-2), v.flatten(-2)], dim=-1)
    qs, ks, vs = torch.split(mixed, [q[0, 0].numel(), k[0, 0].numel(), v[0, 0].numel()], dim=-1)
    return qs.unflatten(-1, q.shape[-2:]), ks.unflatten(-1, k.shape[-2:]), vs.unflatten(-1, v.shape[-2:])


def test_ws_runs_the_whole_step_in_one_launch_except_deep_steps_of_wide_groups():
    """The warp-specialised kernel does the whole step in one launch where a key head has at most two value heads;
    where it has more (G = 4: qwen3_5_397b), at steps 0-1 only, the prep kernel then it at the deeper steps (at
    K = 256 step 0 alone where a value head runs as four chunks: gdn_1_3b, V = 512); and
    nowhere past step 7, where the one-launch kernel's shared memory would exceed sm_90's. At K = 128 a k-hat_t
    buffer of its own (one ring entry fewer) at the one-launch steps 0-1; at K = 256 (gdn_1_3b) one q, k stage and
    a [128, 256] S tile leave the ring 3 entries in one launch and 4 after the prep kernel, and k-hat_t goes
    through the o_t / delta_t staging buffers. From step 8 (and past step 20 / G in a group of G) the prep kernel
    is the pipelined one, in beam tiles of 32 (16 at K = 256); past step 31 the Triton main kernel runs, and at
    K = 128 it runs after the prep kernel past step 5 (the ws kernel's unrolled replay spills there). Where K and V
    are at most 128 the record-major route takes every step from RECORDS_FROM_STEP instead."""
    from kernels.onela.plan import RECORDS_FROM_STEP
    for geometry, one_launch in (("qwen3_5_0_8b", range(8)), ("qwen3_5_397b", (0, 1)), ("gdn_1_3b", (0,)),
                                 ("range_k256_v256", range(8)), ("range_hk4_hv16", (0, 1))):
        geo = GEOMETRIES[geometry]
        cfg = launch_config(geo.k, geo.v, 512, 4, geo.hv, 132, geo.group)
        # the record-major route, its step kernel warp-specialised at K = V = 128 (32-position tiles)
        tree = ["tree_lists", "tree_ws" if (geo.k, geo.v) == (128, 128) else "tree_step"]
        for t in list(range(10)) + [31]:        # past step 7 the one-launch kernel's shared memory would not fit
            launches = step_launches(cfg, geo, 4, 512, t, interpret=False, ws_ok=True)
            if cfg["tree"] and t >= RECORDS_FROM_STEP:      # K, V <= 128: the record-major route
                assert sorted(launches) == tree, (geometry, t)
                assert launches["tree_lists"][1]["BB"] == (32 if "tree_ws" in launches else 16)
                if "tree_ws" in launches:
                    assert launches["tree_ws"][0] == (2, 4 * geo.hv) and launches["tree_ws"][1]["ITERS"] == 8
                    assert "tree_ws" not in step_launches(cfg, geo, 4, 512, t, interpret=False, ws_ok=False)
                continue
            prep = "prep_pipe" if t >= 8 or t * geo.group > 20 else "prep"
            if t not in one_launch and geo.k == 128 and t > 5:     # K = 128 after the prep kernel: Triton main
                assert sorted(launches) == ["main", prep], (geometry, t)
                continue
            assert sorted(launches) == (["ws"] if t in one_launch else [prep, "ws"]), (geometry, t)
            const = launches["ws"][1]
            nr = (4 if t <= 1 else 5) if geo.k == 128 else (3 if t in one_launch else 4)
            assert const["FUSE"] == (t in one_launch) and const["KH_OWN"] == (t <= 1 and geo.k == 128) and \
                const["NR"] == nr, (geometry, t, const)
            assert launches["ws"][1]["TPC"] <= 8 or not const["FUSE"]
            assert launches["ws"][0] == (132,)
        for t in (32, 40, 1000):    # past step 31 the Triton kernels after the pipelined prep kernel
            launches = step_launches(cfg, geo, 4, 512, t, interpret=False, ws_ok=True)
            assert cfg["tree"] == (geo.k <= 128 and geo.v <= 128), geometry
            if cfg["tree"]:
                assert sorted(launches) == tree, (geometry, t)
                launches = step_launches({**cfg, "tree": False}, geo, 4, 512, t, interpret=False, ws_ok=True)
            assert sorted(launches) == ["main", "prep_pipe"], (geometry, t)
            grid, const, opts = launches["prep_pipe"]
            bb = 32 if geo.k == 128 else 16
            assert const["BB"] == bb and grid == (512 // bb, 4 * geo.hk) and const["STAGES"] > 1, (geometry, t)
        assert "ws" not in step_launches({**cfg, "ws": False}, geo, 4, 512, 1, interpret=False, ws_ok=True)


def test_ws_takes_the_models_conv_split_and_rejects_other_layouts():
    """The warp-specialised kernel reads q, k, v as evenly spaced rows (TMA / cp.async), so the model's split of
    its conv output qualifies; rows it cannot address that way, unaligned ones or another dtype go to the Triton
    kernels with the reason named (layout only: this runs on CPU)."""
    from kernels.onela import ws_layout_supports
    wl = make_workload("qwen3_5_0_8b", 2, 64, 2, lineage="beam", seed=0)
    q, k, v = wl.q[0], wl.k[0], wl.v[0]
    out = torch.empty(2, 64, 16, 128, dtype=torch.bfloat16)
    assert ws_layout_supports(64, q, k, v, out) is None
    qs, ks, vs = _as_conv_split(q, k, v)
    assert qs.stride(1) == 3 * 16 * 128 and ws_layout_supports(64, qs, ks, vs, out) is None
    wide = torch.zeros(2, 64, 16 * 128 + 1, dtype=torch.bfloat16)    # a view one element in: not 16-byte aligned
    shifted = wide[..., 1:].unflatten(-1, (16, 128))
    assert "k is not laid out" in ws_layout_supports(64, q, shifted, v, out)
    assert "v is not laid out" in ws_layout_supports(64, q, k, v.transpose(2, 3), out)
    out_t = torch.empty(2, 16, 64, 128, dtype=torch.bfloat16).transpose(1, 2)
    assert "out is not laid out" in ws_layout_supports(64, q, k, v, out_t)
    assert "q dtype torch.float32" in ws_layout_supports(64, q.float(), k, v, out)


@pytest.mark.gpu
def test_gpu_ws_kernel_reads_the_models_conv_split():
    """q, k, v as views into one conv output (the full model's layout) run the warp-specialised kernel and give
    bit for bit what contiguous copies give, within the FP32 FullState gate."""
    wl = make_workload("qwen3_5_0_8b", 4, 256, 4, lineage="beam", seed=3, device="cuda")
    ref = fullstate_decode(wl)
    outs = []
    for split in (False, True):
        st = OneLAStepper(wl.geometry, wl.R, wl.W, wl.T, "cuda")
        out = torch.full((wl.T, wl.R, wl.W, 16, 128), math.nan, dtype=torch.bfloat16, device="cuda")
        st.reset(wl.s_ctx)
        for t in range(wl.T):
            q, k, v = _as_conv_split(wl.q[t], wl.k[t], wl.v[t]) if split else (wl.q[t], wl.k[t], wl.v[t])
            st.step(t, q, k, v, wl.g[t], wl.beta[t], wl.parents[t], out[t])
        assert set(st.kernel_info) == {"ws_step"}, st.kernel_info
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert max_abs_err(outs[1], ref) <= DEFAULT_TOLERANCE


def test_compile_report_compiles_hopper_kernels_without_a_gpu(sm90_compile):
    """`tools.compile_report` compiles the launch's kernels for sm_90a on this host (ptxas ships with Triton) and reports
    registers / spills per step; at K = 256 the Triton main kernel (the fallback there, with ws off) issues each
    K-chunk's q, k and S loads (16 128-bit loads per thread) before the chunk's first fp32 -> bf16 convert (the
    other order serialises them: kernels/NOTES.md, "Triton kernels")."""
    def inspect(*args):
        return sm90_compile(["-m", "tools.compile_report", *args]).splitlines()

    lines = [ln for ln in inspect("--geometry", "gdn_small", "--R", "1", "--W", "48", "--O", "3", "--steps", "1")
             if ln.startswith("step 1 ")]     # W = 48: not a multiple of the ws kernel's 64-beam tile
    assert [ln.split()[2] for ln in lines] == ["prep", "main"]
    for ln in lines:
        assert 0 < int(ln.split(":")[1].split()[0]) <= 255, ln

    # past step 31 (W = 64: the ws kernel's shape): the pipelined prep kernel, then the Triton main kernel; the prep
    # kernel in 128 registers (4 programs per SM) at any depth, its gathers cp.async copies (LDGSTS: the loop is
    # software-pipelined, its waits leave copy groups in flight), 16 bytes spilled at most
    out = inspect("--geometry", "gdn_1_3b", "--R", "1", "--W", "64", "--O", "64", "--steps", "32", "62", "--order")
    for step in (32, 62):
        lines = [ln for ln in out if ln.startswith(f"step {step} ")]
        prep = lines[0]
        assert [ln.split()[2] for ln in lines] == ["prep_pipe", "main"], out
        registers, _, spilled = prep.split(":")[1].split()[:3]
        assert int(registers) <= 128 and int(spilled) <= 16, prep
        assert "LDGSTS" in out[out.index(prep) + 1], out
        waits = out[out.index(prep) + 2]
        assert waits.startswith("  cp.async waits") and max(map(int, waits.split(":")[1].split(","))) > 0, out

    out = inspect("--geometry", "range_k256_v256", "--R", "16", "--O", "3", "--steps", "1", "--order",
                  "--config", '{"ws": false}')
    order = out[out.index(next(ln for ln in out if ln.startswith("step 1 main"))) + 1]
    head = order.split("F2F")[0]
    assert sum(int(part.split(" x")[1]) for part in head.split(" | ") if part.strip().startswith("LDG")) >= 16

    # the warp-specialised Gluon kernel (the interpreter cannot run it; this is its CPU check): what the stepper
    # launches, no spills at the deepest step (gdn_small's step 5, V = 256 as two 128-column chunks, spills 8
    # bytes and no more), shared memory in the 227 KB an sm_90 block may take, and its async machinery in the SASS
    # (TMA loads, cp.async gathers, wgmma, TMA stores). G > 2: the prep kernel first at steps past 1 (at K = 256
    # and V = 512, four value chunks, past step 0). K = 256 (two key blocks, V = 256 and 512): none at step 5
    # either, nor at step 31 (the pipelined prep kernel, then ws).
    for geometry, kernels5, spill5, steps in (
            ("qwen3_5_0_8b", ["ws"], 0, (0, 5)), ("qwen3_5_397b", ["prep", "ws"], 0, (0, 5)),
            ("gdn_small", ["ws"], 8, (0, 5)), ("range_hk4_hv16", ["prep", "ws"], 0, (0, 5)),
            ("range_k256_v256", ["ws"], 0, (0, 5)), ("gdn_1_3b", ["prep", "ws"], 0, (0, 5, 31))):
        out = inspect("--geometry", geometry, "--O", str(max(steps) + 2), "--steps", *map(str, steps), "--order")
        for step in steps:
            lines = [ln for ln in out if ln.startswith(f"step {step} ")]
            want = {0: ["ws"], 5: kernels5, 31: ["prep_pipe", "ws"]}[step]
            assert [ln.split()[2] for ln in lines] == want, (geometry, step, out)
            ws = lines[-1]
            spilled = int(ws.split(" bytes spilled")[0].split()[-1])
            assert spilled <= (spill5 if step == 5 else 0) and int(ws.split(", ")[-1].split()[0]) <= 227 * 1024, ws
            order = out[out.index(ws) + 1]
            assert all(op in order for op in ("UTMALDG", "LDGSTS", "HGMMA", "UTMASTG")), order


def test_compile_report_refuses_impossible_values_before_compiling(capsys):
    """`tools.compile_report` names a bad value and exits 2 (never a report for R = 0 or a step past O)."""
    from tools.compile_report import main
    for argv, message in ((["--R", "0"], "--R must be >= 1, got 0"),
                          (["--O", "3", "--steps", "5"], "--steps [5] out of range 0..1"),
                          (["--config", '{"ws_ring": 4}'], "unknown launch config key(s) ['ws_ring']")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err, argv


def test_public_op_matches_the_naive_reference_and_refuses_misuse(device):
    """`kernels.onela.OneLA` -- reset, then one call per step -- returns `onela_naive`'s outputs (fp64, one
    explicit state per beam) within the CPU/GPU bound on a grouped geometry, W not a power of two, a real beam
    lineage; its docstring example runs; it refuses a step before reset or past max_steps, and bad sizes."""
    import doctest

    import kernels.onela.op
    assert doctest.testmod(kernels.onela.op, raise_on_error=False).failed == 0
    geo, R, W, T = SMALL[0]
    wl = make_workload(geo, R, W, T, lineage="beam", seed=4, device=device, prompt_len=16)
    op = OneLA(R, W, T, num_k_heads=geo.hk, num_v_heads=geo.hv, head_k_dim=geo.k, head_v_dim=geo.v, device=device)
    with pytest.raises(RuntimeError, match="call reset"):
        op.step(wl.q[0], wl.k[0], wl.v[0], wl.g[0], wl.beta[0], wl.parents[0])
    op.reset(wl.s_ctx)
    outs = torch.stack([op.step(wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t]) for t in range(T)])
    with pytest.raises(RuntimeError, match="max_steps=3"):
        op.step(wl.q[0], wl.k[0], wl.v[0], wl.g[0], wl.beta[0], wl.parents[0])
    ref = onela_naive(wl.s_ctx, wl.q, wl.k, wl.v, wl.g, wl.beta, wl.parents)
    assert torch.allclose(ref, fullstate_decode(wl, torch.float64))
    tol = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref.abs().max().item() + 2 ** -9 * ref.abs().max().item()
    assert outs.dtype == torch.bfloat16 and (outs.double() - ref).abs().max().item() <= tol   # bf16 outputs
    assert op.capacity_bytes == op._stepper.persistent_bytes() > 0
    with pytest.raises(ValueError, match="num_v_heads=3 is not a multiple of num_k_heads=2"):
        OneLA(1, 4, 2, num_k_heads=2, num_v_heads=3, head_k_dim=16, head_v_dim=16, device=device)
    with pytest.raises(ValueError, match="beam_width must be a positive int, got 0"):
        OneLA(1, 0, 2, num_k_heads=2, num_v_heads=2, head_k_dim=16, head_v_dim=16, device=device)


def test_check_parents_false_leaves_the_range_check_and_its_host_sync_to_the_caller(device):
    """OneLA(check_parents=False) takes a step without reading its parents on the host (the range check's
    sync); by default an out-of-range parent is refused. The parents here are the lineage's own (in range), with
    their min / max made to fail: only the default op reads them."""
    geo = Geometry(2, 4, 16, 16)
    wl = make_workload(geo, 2, 5, 2, seed=1, device=device, prompt_len=4)
    ops = {flag: OneLA(2, 5, 2, num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16, device=device,
                       check_parents=flag) for flag in (True, False)}
    parents = wl.parents[1].clone()

    def host_read(*_a, **_k):
        raise AssertionError("parents read on the host")
    parents.min = parents.max = host_read
    for flag, op in ops.items():
        op.reset(wl.s_ctx)
        op.step(wl.q[0], wl.k[0], wl.v[0], wl.g[0], wl.beta[0], wl.parents[0])
    ops[False].step(wl.q[1], wl.k[1], wl.v[1], wl.g[1], wl.beta[1], parents)
    assert ops[False].steps_done == 2
    with pytest.raises(AssertionError, match="parents read on the host"):
        ops[True].step(wl.q[1], wl.k[1], wl.v[1], wl.g[1], wl.beta[1], parents)


@pytest.mark.parametrize("stepper_cls", [OneLAStepper, ControlledFullStateStepper])
def test_fp16_inputs_are_refused_naming_the_dtypes_taken(stepper_cls, device):
    """fp16 q/k/v are refused before any launch, naming the dtypes the kernels take (bf16 or fp32)."""
    wl = make_workload(Geometry(2, 4, 16, 16), 2, 5, 2, seed=1, device=device, prompt_len=4)
    st = stepper_cls(wl.geometry, 2, 5, 2, device)
    st.reset(wl.s_ctx)
    out = torch.empty(2, 5, 4, 16, device=device, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"dtype torch.float16; the op takes torch.bfloat16 or torch.float32"):
        st.step(0, wl.q[0].half(), wl.k[0].half(), wl.v[0].half(), wl.g[0], wl.beta[0], wl.parents[0], out)
    op = OneLA(2, 5, 2, num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16, device=device)
    op.reset(wl.s_ctx)
    with pytest.raises(ValueError, match=r"the op takes torch.bfloat16 or torch.float32"):
        op.step(wl.q[0].half(), wl.k[0].half(), wl.v[0].half(), wl.g[0], wl.beta[0], wl.parents[0])
    assert op.steps_done == 0                                       # a refused step is not taken


@pytest.mark.parametrize("arg", ["q", "k", "v", "g", "beta", "parents"])
def test_a_tensor_on_another_device_is_refused_naming_it(arg, device):
    """Each tensor argument of a step (and s_ctx at reset) on a device other than the op's is refused by name,
    before Triton would fail on a pointer it cannot access. Off a GPU the op's device is faked: the stepper is
    made on `device`, then told it runs on "meta", where every other argument lies (a meta tensor has shape,
    dtype and strides, so every earlier check reads it), and the named one stays on `device`."""
    geo = Geometry(2, 4, 16, 16)
    wl = make_workload(geo, 2, 5, 2, seed=1, device=device, prompt_len=4)
    op = OneLA(2, 5, 2, num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16, device=device)
    op.reset(wl.s_ctx)
    args = dict(q=wl.q[0], k=wl.k[0], v=wl.v[0], g=wl.g[0], beta=wl.beta[0], parents=wl.parents[0],
                out=torch.empty(2, 5, 4, 16, device=device, dtype=wl.q.dtype))
    op._stepper.device = torch.device("meta")
    # out follows q (Stepper.check_call refuses an out on another device than q's, naming out)
    stay = {arg, "out"} if arg == "q" else {arg}
    args = {n: (x if n in stay else x.to("meta")) for n, x in args.items()}
    with pytest.raises(ValueError, match=rf"^{arg} is on {device}, the op on meta"):
        op.step(**args)
    assert op.steps_done == 0
    op._stepper.device = torch.device(device)
    with pytest.raises(ValueError, match=r"^s_ctx is on meta, the op on"):
        op.reset(wl.s_ctx.to("meta"))


@pytest.mark.gpu
def test_gpu_parents_on_the_cpu_is_refused_naming_it():
    """On the GPU: parents left on the CPU is named by the op's check, not by Triton's pointer error."""
    geo = Geometry(2, 4, 16, 16)
    wl = make_workload(geo, 2, 5, 2, seed=1, device="cuda", prompt_len=4)
    op = OneLA(2, 5, 2, num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16, device="cuda")
    op.reset(wl.s_ctx)
    with pytest.raises(ValueError, match=r"^parents is on cpu, the op on cuda"):
        op.step(wl.q[0], wl.k[0], wl.v[0], wl.g[0], wl.beta[0], wl.parents[0].cpu())


def test_kernel_functions_take_bundled_arguments():
    """Every Gluon function of the warp-specialised kernels (the step-0..7 kernel and the route's step kernel)
    takes at most 20 parameters (their arguments travel as tuples: buffers, barriers, pointers, sizes; the TMA
    descriptors one by one into the kernel only), and the Triton kernels group inputs, records and strides
    (checked on the source with ast, so it holds on any host)."""
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1] / "kernels" / "onela"
    counts = {}
    for name in ("ws.py", "tree_ws.py", "triton_kernels.py"):
        for node in ast.walk(ast.parse((root / name).read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d).split("(")[0].endswith("jit") for d in node.decorator_list):
                counts[(name, node.name)] = len(node.args.args)
    assert counts[("ws.py", "onela_ws_kernel")] <= 19 and counts[("ws.py", "_producer")] <= 17
    assert max(n for (f, _), n in counts.items() if f in ("ws.py", "tree_ws.py")) <= 20, counts
    assert ("tree_ws.py", "onela_tree_ws_kernel") in counts
    assert max(n for (f, _), n in counts.items() if f == "triton_kernels.py") <= 26, counts


# The contract grid of the onela path (sampled): depths across the one-launch limit (7 / 8), the pipelined prep
# kernel (from step 8, or past 20 / G) and the Triton main kernel (past step 31),
# beam widths not a multiple of the 64-beam tile, head sizes of both kernels (powers of two and other multiples of
# 16 up to 512) and a few unsupported ones, groups 1-8.
_CONTRACT = [(T, W, K, V, G) for T, W, (K, V), G in (
    (1, 1, (128, 128), 1), (9, 512, (128, 128), 1), (12, 64, (128, 128), 1), (16, 37, (128, 128), 4),
    (8, 37, (256, 256), 1), (9, 64, (256, 512), 1), (9, 1, (64, 64), 8), (20, 37, (64, 128), 3),
    (5, 64, (128, 192), 1), (5, 64, (128, 384), 2), (4, 64, (96, 128), 1), (3, 37, (320, 192), 2),
    (3, 64, (512, 512), 1), (4, 64, (40, 128), 1), (4, 64, (128, 528), 1), (33, 64, (128, 128), 1))]
# plus a seeded sample of the whole grid: T 1..32, W {1, 37, 64, 512}, K {64, 128, 256},
# V {64, 128, 192, 256, 384, 512}, G {1, 2, 3, 4, 8}
_CONTRACT += random.Random(33).sample(
    [(T, W, K, V, G) for T in range(1, 33) for W in (1, 37, 64, 512) for K in (64, 128, 256)
     for V in (64, 128, 192, 256, 384, 512) for G in (1, 2, 3, 4, 8)], 24)
# K = 64 at depth with W = 512: the smallest key size at the deepest steps, where the error is largest (docs/design.md §2)
_CONTRACT += [(32, 512, 64, 512, 8), (32, 512, 64, 128, 4), (24, 512, 64, 256, 8), (32, 37, 64, 512, 1),
              (28, 512, 64, 64, 8), (32, 512, 64, 384, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("T,W,K,V,G", _CONTRACT, ids=[f"T{T}-W{W}-K{K}-V{V}-G{G}" for T, W, K, V, G in _CONTRACT])
def test_gpu_supports_is_a_promise(T, W, K, V, G):
    """supports() is a promise: on the H200, a sampled shape it accepts compiles, launches, passes the FP32
    FullState gate at 4.88e-4 as a suite cell would, and run again with a NaN-poisoned output, writes every element
    within 4.88e-4 of the fp64 reference; a shape it refuses names the reason. One case per shape, so that
    `pytest -n` spreads the compiles; each prints its outcome (the note's accepted / run / passed counts)."""
    from artifact.workload import Shape
    geo = Geometry(2, 2 * G, K, V)
    reason = get_path("onela").supports(geo, Shape(2, W, T), "cuda")
    if reason:
        print(f"contract T={T} W={W} K={K} V={V} G={G}: refused ({reason})")
        assert "unsupported" in reason, reason
        return
    wl = make_workload(geo, 2, W, T, lineage="beam", seed=T + W, device="cuda")
    res = check_and_time(get_path("onela"), wl, fullstate_decode(wl), tolerance=DEFAULT_TOLERANCE, time_it=False)
    assert res.status == "ok", res.reason
    _, out = _run(OneLAStepper, wl, torch.float32)
    assert torch.isfinite(out).all(), "an output element was never written (poisoned NaN survived)"
    err64 = (out.double() - fullstate_decode(wl, torch.float64)).abs().max().item()
    print(f"contract T={T} W={W} K={K} V={V} G={G}: passed, error {res.max_abs_err:.2e} against FP32 FullState, "
          f"{err64:.2e} against fp64")
    assert err64 <= DEFAULT_TOLERANCE


def test_controlled_fullstate_paper_mode_gathers_into_one_pool(device):
    """Paper mode keeps one pool of R*W states (half the index mode's two) plus a transient workspace of the
    same size, reported apart; each step t >= 1 gathers the parents' states of step t - 1 into the workspace,
    and after every step the pool holds each beam's own state (the fp64 reference's)."""
    geo, R, W, T = SMALL[0]
    wl = make_workload(geo, R, W, T, lineage="reversed", seed=11, device=device, prompt_len=16)
    ref = TorchFullStateStepper(geo, R, W, T, device, torch.float64)
    st = ControlledFullStatePaperStepper(geo, R, W, T, device)
    idx = ControlledFullStateStepper(geo, R, W, T, device)
    n_state = R * W * geo.state_bytes
    assert st.persistent_bytes() == n_state and idx.persistent_bytes() == 2 * n_state
    assert st.workspace_bytes() == n_state and idx.workspace_bytes() == 0
    assert st.written_bytes() == (2 * T - 1) * n_state and idx.written_bytes() == T * n_state
    assert ControlledFullStatePaperStepper(geo, R, W, 1, device).workspace_bytes() == 0
    out = torch.empty(R, W, geo.hv, geo.v, dtype=torch.float32, device=device)
    ref_out = torch.empty(R, W, geo.hv, geo.v, dtype=torch.float64, device=device)
    st.reset(wl.s_ctx)
    ref.reset(wl.s_ctx)
    prev = None
    for t in range(T):
        args = (wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t])
        st.step(t, *args, out)
        ref.step(t, *args, ref_out)
        if t > 0:   # the workspace holds the parents' states: the explicit reorder happened
            parents = wl.parents[t].long()
            gathered = torch.stack([prev[r, parents[r]] for r in range(R)])
            torch.testing.assert_close(st.work.view(R, W, *st.work.shape[1:]).double(), gathered,
                                       rtol=0, atol=1e-5)
        prev = ref.S.clone()
        torch.testing.assert_close(st.pools[0].view(R, W, *st.pools[0].shape[1:]).double(), ref.S,
                                   rtol=0, atol=1e-5)
    assert not torch.equal(wl.parents[1:], torch.arange(W, dtype=wl.parents.dtype).expand_as(wl.parents[1:]))


def test_fullstate_paper_paths_are_registered_and_report_a_workspace():
    from artifact.paths import PATHS, DecodePath
    for system in ("controlled", "vllm", "sglang", "flashinfer", "trtllm", "fla"):
        assert f"{system}_fullstate" in PATHS and f"{system}_fullstate_paper" in PATHS
        path = get_path(f"{system}_fullstate_paper")
        assert path.name == f"{system}_fullstate_paper" and isinstance(path, DecodePath)
        assert type(path).__module__ == type(get_path(f"{system}_fullstate")).__module__   # one module, two modes


def test_controlled_fullstate_refuses_grids_cuda_cannot_launch():
    """The FullState kernel's grid takes R x W beams on CUDA's y axis (at most 65,535): supports() and the
    stepper refuse more on a GPU, naming the number, before anything is allocated."""
    from artifact.workload import Shape
    geo = Geometry(1, 1, 16, 16)
    reason = get_path("controlled_fullstate").supports(geo, Shape(4, 16384, 3), "cuda")
    assert "R=4 x W=16384 = 65536 beams unsupported" in reason, reason
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="65536 beams unsupported"):
            ControlledFullStateStepper(geo, 4, 16384, 3, "cuda")


def test_jit_bodies_call_only_device_functions():
    """A @triton.jit / @gluon.jit body calls only other jit functions and triton.language / gluon: Triton's launch
    path refuses any other callable it finds there ("Unsupported function referenced"), and neither the
    interpreter nor an ahead-of-time compile checks that, so a host helper such as `triton.next_power_of_2` in a
    kernel body passes every CPU test and fails its first launch on a GPU. Sizes derived on the host come in as
    constexpr arguments."""
    import ast
    import inspect
    import importlib
    bad = []
    for mod_name in ("kernels.onela.triton_kernels", "kernels.onela.ws", "kernels.onela.records", "kernels.onela.tree",
                     "kernels.fullstate",
                     "artifact.launch_floor"):
        src = inspect.getsource(importlib.import_module(mod_name))
        for fn in ast.walk(ast.parse(src)):
            if not isinstance(fn, ast.FunctionDef) or not any(
                    "jit" in ast.unparse(d) for d in fn.decorator_list):
                continue
            for node in (n for stmt in fn.body for n in ast.walk(stmt)):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    chain = ast.unparse(node.func)
                    if chain.startswith("triton.") and not chain.startswith("triton.language."):
                        bad.append(f"{mod_name}.{fn.name}: {chain}")
    assert not bad, bad
