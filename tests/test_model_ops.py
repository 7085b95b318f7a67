"""Our kernels in the decode pipeline (kernels/model_ops.py, registered in artifact.registry.DECODE_KERNELS) against
the torch blocks they replace on a GPU (artifact.model.blocks).

`conv_gates`: the conv + SiLU, the conv windows' upkeep and the gates of a GDN layer in one Triton launch. CPU
tests run it under the Triton interpreter against the block, in both beam-state modes, over more steps than the
window (step 0 reads the prompt tail only), with odd sizes (a partial channel tile, a partial token tile, a head
count that is not a power of two), x and [b | a] read as the in_proj output's strided columns, each chain of
steps fed by its own kept tensors. fp32 agrees to a few ulp (SiLU's and softplus' exp / log implementations); a
bf16 output is the same fp32 value rounded, so it differs by at most one bf16 ulp, and only where the fp32
values straddle a rounding boundary. The kept tensors are copies: bit for bit.

`attn_pre` (q / k norm + rotary, q prompt-major, k and v into the decode-KV slot), `merge_own_kv` (own-KV merge +
output gate) and `gated_norm` (the GDN output norm, z read through its stride): CPU tests under the interpreter
against the blocks with odd sizes (a partial token / row tile, G = 3 query heads per KV head, D = 24 and V = 24
padded to 32, two key chunks of the merge from step 4 on), q / k / v / gate / z as views into a projection, both
beam-state modes' KV slots and own-KV forms. fp32 agrees to a few ulp; a bf16 output equals the block's fp32
values rounded where the block rounds (the norm before rotary, the merged o before the gate) as the kernel's cast
rounds -- but where a value straddles a rounding boundary (one ulp, under 2 % of elements).
"""
import pytest
import torch

from artifact.model import blocks
from artifact.model.attention import merge_own_kv
from artifact.model.beam_state import BeamTree, ConvHistory, KvHistory, window
from artifact.model.blocks import DecodeOps, conv_gates, decode_kernel
from artifact.model.decode import BeamDecoder
from artifact.model.layers import apply_rotary, causal_conv_step, gated_rms_norm, rms_norm, rotary_cos_sin
from artifact.model.config import TINY
from artifact.model.network import HybridModel
from artifact.model.prefill import prefill, random_prompts
from artifact.registry import DECODE_KERNELS
from kernels import model_ops

pytestmark = pytest.mark.usefixtures("one_thread")

BF16_ULP = 2.0 ** -7          # bf16's spacing relative to a value's leading power of two


def _steps(R, W, T, C, HV, dtype, seed, device="cpu"):
    """Per step: (parents, x, ba) on `device`, x and ba strided views into one in_proj output [q|k|v | z | b | a];
    parents that duplicate, drop and reorder beams."""
    gen = torch.Generator().manual_seed(seed)
    steps = []
    for t in range(T):
        parents = torch.randint(0, W, (R, W), generator=gen, dtype=torch.int32) if t else \
            torch.zeros(R, W, dtype=torch.int32)
        proj = (3 * torch.randn(R, W, C + 7 + 2 * HV, generator=gen)).to(device, dtype)
        steps.append((parents.to(device), proj[..., :C], proj[..., C + 7:]))
    return steps


def _bf16(v: torch.Tensor, interpreted: bool) -> torch.Tensor:
    """fp32 -> bf16 as the kernel's cast does it: round to nearest even on a GPU; Triton 3.6's interpreter
    truncates (its fp32 -> bf16 cast drops the low 16 bits, whatever rounding the kernel asks for)."""
    if not interpreted:
        return v.to(torch.bfloat16)
    return (v.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)


def _assert_conv_close(got, block, hist, x, w, what):
    """The kernel's conv output against the block's: fp32 to a few ulp; bf16 against the block's fp32 value cast
    as the kernel casts, equal but where the two fp32 values straddle a rounding boundary (then one ulp). Where
    the taps' sum nearly cancels, the two fp32 sums (another order of the terms, fused multiply-adds on a GPU)
    differ by a rounding of the terms' magnitude, 2^-20 of sum |w_j h_j|, which can exceed an ulp of the small
    result: that much more is allowed."""
    if x.dtype == torch.float32:
        torch.testing.assert_close(got, block, rtol=1e-6, atol=1e-6, msg=what)
        return
    ref = causal_conv_step([window(h).float() for h in hist], x.float(), w)          # the block's fp32 value
    assert torch.equal(block, ref.to(x.dtype)), what
    want = _bf16(ref, interpreted=x.device.type == "cpu").float()
    terms = x.float().abs() * w[:, -1].abs()
    for j, h in enumerate(hist):
        terms = terms + window(h).float().abs() * w[:, j].abs()
    g = got.float()
    assert ((g - want).abs() <= BF16_ULP * want.abs() + 2.0 ** -20 * terms).all(), what
    assert (g != want).float().mean() < 0.01, what


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["ancestry", "copy"])
@pytest.mark.parametrize("width", [4, 2])
def test_conv_gates_kernel_equals_the_block(dtype, mode, width):
    R, W, T, C, HV = 2, 5, 6, 600, 3            # N = 10 tokens: 3 token tiles of 4; C: 512 + a partial tile
    P = width - 1
    torch.manual_seed(0)
    tail = torch.randn(R, P, C).to(dtype)
    w = torch.randn(C, width)
    A_log, dt_bias = torch.rand(HV), torch.randn(HV)
    trees = {k: BeamTree(mode, R, W, T, "cpu") for k in ("block", "kernel")}
    convs = {k: ConvHistory(trees[k], C, width, dtype, "cpu") for k in trees}
    for conv in convs.values():
        conv.prompt_tail.copy_(tail)
    fns = {"block": conv_gates, "kernel": model_ops.conv_gates}
    seen, alive = set(), []                    # alive: the outputs stay allocated, so a reused address is an alias
    for t, (parents, x, ba) in enumerate(_steps(R, W, T, C, HV, dtype, seed=width)):
        got, hist = {}, {}
        for k, fn in fns.items():
            trees[k].parents.copy_(parents)
            trees[k].advance(t)
            hist[k] = convs[k].history(t)
            got[k] = fn(x, hist[k], convs[k].carry, w, ba, A_log, dt_bias)
            convs[k].keep(t, got[k][2])                         # each chain reads its own kept tensors
        (m0, g0, k0), (m1, g1, k1) = got["block"], got["kernel"]
        what = f"{mode} width={width} {dtype} step {t}"
        assert m1.shape == m0.shape and m1.dtype == m0.dtype and m1.is_contiguous(), what
        _assert_conv_close(m1, m0, hist["kernel"], x, w, what)
        assert g1.shape == g0.shape == (2, R, W, HV) and g1.dtype == torch.float32 and g1.is_contiguous(), what
        torch.testing.assert_close(g1, g0, rtol=1e-6, atol=1e-6, msg=what)
        assert len(k1) == len(k0) == convs["kernel"].carry + 1, what
        assert all(a.is_contiguous() and torch.equal(a, b) for a, b in zip(k1, k0)), what
        fresh = {o.data_ptr() for o in (m1, g1, *k1)}
        assert len(fresh) == 2 + len(k1) and not fresh & (seen | {x.data_ptr(), ba.data_ptr()}), what
        seen |= fresh
        alive.append(got)
    if mode == "ancestry":
        assert convs["kernel"].carry == 0
    else:
        assert convs["kernel"].carry == P - 1


def test_conv_gates_kernel_rejects_bad_input():
    R, W, C, HV, width = 2, 3, 40, 2, 4
    x = torch.randn(R, W, C)
    hist = [torch.randn(R, W, C) for _ in range(width - 1)]
    w, ba, A_log, dt_bias = torch.randn(C, width), torch.randn(R, W, 2 * HV), torch.rand(HV), torch.rand(HV)
    model_ops.conv_gates(x, hist, 0, w, ba, A_log, dt_bias)                     # the arguments below break it
    with pytest.raises(ValueError, match="2 window entries for conv taps of width 4"):
        model_ops.conv_gates(x, hist[:2], 0, w, ba, A_log, dt_bias)
    with pytest.raises(ValueError, match="carry must be an int in \\[0, 3\\], got 4"):
        model_ops.conv_gates(x, hist, 4, w, ba, A_log, dt_bias)
    with pytest.raises(ValueError, match="x has channel stride 2"):
        model_ops.conv_gates(torch.randn(R, W, 2 * C)[..., ::2], hist, 0, w, ba, A_log, dt_bias)
    with pytest.raises(ValueError, match="window entry 1 is torch.bfloat16"):
        model_ops.conv_gates(x, [hist[0], hist[1].bfloat16(), hist[2]], 0, w, ba, A_log, dt_bias)
    with pytest.raises(ValueError, match="window entry 2's index must be an int32 / int64 \\[R=2, W=3\\]"):
        model_ops.conv_gates(x, hist[:2] + [(hist[2], torch.zeros(R, W + 1, dtype=torch.int32))], 0, w, ba,
                             A_log, dt_bias)
    with pytest.raises(ValueError, match="conv_w must be fp32"):
        model_ops.conv_gates(x, hist, 0, w.bfloat16(), ba, A_log, dt_bias)
    with pytest.raises(ValueError, match="ba must be \\[R=2, W=3, 2 HV=4\\]"):
        model_ops.conv_gates(x, hist, 0, w, ba[..., :3], A_log, dt_bias)
    with pytest.raises(ValueError, match="x is torch.int32"):
        model_ops.conv_gates(x.int(), hist, 0, w, ba, A_log, dt_bias)


def test_the_decoder_runs_our_kernels_through_the_registry():
    """DecodeOps(kernels=True) takes every registered kernel in its block's place (the decoder asks for them on a
    CUDA device; here the Triton interpreter runs them), and a decode with them follows the torch blocks' beams
    with the same hidden states, in both beam-state modes."""
    assert set(DECODE_KERNELS) == {"conv_gates", "attn_pre", "merge_own_kv", "gated_norm"}
    ops = DecodeOps(kernels=True)
    for name in DECODE_KERNELS:
        assert getattr(ops, name) is getattr(model_ops, name) is decode_kernel(name)
    assert ops.label == "eager + ours(conv_gates) + ours(attn_pre) + ours(merge_own_kv) + ours(gated_norm)"
    assert ops.mlp_in is DecodeOps().mlp_in is blocks.mlp_in
    with pytest.raises(ValueError, match="no kernel is registered for the block 'mlp_in'"):
        decode_kernel("mlp_in")
    m = HybridModel.random(TINY, seed=1, dtype=torch.float32)
    Lp = 5
    ps = prefill(m, random_prompts(2, Lp, TINY.vocab_size, seed=3))
    for mode in ("ancestry", "copy"):
        ref = BeamDecoder(m, "reference_fullstate", 2, 3, 4, Lp, state_mode=mode)   # T = 4 > the window (3)
        assert ref.ops.kernels == () and ref.ops.label == "eager"                    # a CPU decoder: the blocks
        ref.load_prompt(ps)
        want = ref.run()
        d = BeamDecoder(m, "reference_fullstate", 2, 3, 4, Lp, state_mode=mode)
        d.ops = DecodeOps(kernels=True)
        d.load_prompt(ps)
        got = d.run()
        assert torch.equal(got.tokens, want.tokens) and torch.equal(got.parents, want.parents), mode
        assert (got.hidden - want.hidden).abs().max() < 1e-5, mode


# Compiles _conv_gates_kernel for sm_90a as a launch at the Fig 6 shape specialises it (every size and row stride
# a multiple of 16 elements; conv_w's [C, 4] strides 4 and 1) and prints, per (GATHER, CARRY, dtype), registers,
# stack bytes and the SASS's global loads / stores by width. Run without TRITON_INTERPRET (a kernel defined under
# the interpreter cannot be compiled).
_COMPILE_SM90 = r"""
import re, sys
from collections import Counter
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.model_ops import _conv_gates_kernel as fn, BLOCK_N, BLOCK_C, NUM_WARPS
from tools.compile_report import _cuobjdump
for gather, carry, dt in [((False,) * 3, 0, "*bf16"), ((False, True, True), 0, "*bf16"), ((True,) * 3, 0, "*bf16"),
                          ((True,) * 3, 2, "*bf16"), ((False,) * 3, 2, "*bf16"), ((True,) * 3, 2, "*fp32")]:
    P = len(gather)
    types = {"x_ptr": dt, "win": (dt,) * P, "idx": tuple("*i32" if g else dt for g in gather), "w_ptr": "*fp32",
             "out_ptr": dt, "kept": (dt,) * (carry + 1), "ba_ptr": dt, "alog_ptr": "*fp32", "dtb_ptr": "*fp32",
             "gates_ptr": "*fp32", "win_sr": ("i32",) * P, "win_sw": ("i32",) * P, "idx_sr": ("i32",) * P,
             "idx_sw": ("i32",) * P}
    const = {"sw_j": 1, "GATHER": gather, "CARRY": carry, "BN": BLOCK_N, "BC": BLOCK_C, "BH": 16}
    sig = {a: "constexpr" if a in const else types.get(a, "i32") for a in fn.arg_names}
    attrs = {}
    for i, a in enumerate(fn.arg_names):
        if a in const or a == "sw_c":
            continue
        for key in ([(i, j) for j in range(len(sig[a]))] if isinstance(sig[a], tuple) else [(i,)]):
            attrs[key] = [["tt.divisibility", 16]]
    ck = triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": NUM_WARPS})
    usage = _cuobjdump(ck.asm["cubin"], "--dump-resource-usage")
    ops = Counter(re.findall(r"\b((?:LDG|STG)\.E[.\w]*)", _cuobjdump(ck.asm["cubin"], "-sass")))
    print(dt, P, sum(gather), carry, re.search(r"REG:(\d+)", usage).group(1),
          re.search(r"STACK:(\d+)", usage).group(1), dict(ops))
"""


def test_conv_gates_kernel_compiles_for_hopper_with_128_bit_rows(sm90_compile):
    """The kernel compiles for sm_90a (what the interpreter cannot check: Triton's typing of both branches, its
    constexpr rules), without spills, and at the Fig 6 shape moves each thread's part of a row in 128-bit loads
    and stores: per tensor of the tile (x, P window rows; out, kept) BLOCK_N BLOCK_C / (32 NUM_WARPS) elements,
    16 bytes each."""
    import ast

    stdout = sm90_compile(["-c", _COMPILE_SM90])
    lines = stdout.splitlines()
    assert len(lines) == 6, stdout
    per_thread = model_ops.BLOCK_N * model_ops.BLOCK_C // (32 * model_ops.NUM_WARPS)
    for line in lines:
        dt, P, _, carry, regs, stack, ops = line.split(" ", 6)
        ops = ast.literal_eval(ops)                              # the printed dict of SASS opcode counts
        vectors = per_thread * (2 if dt == "*bf16" else 4) // 16            # 16-byte pieces per tensor and thread
        assert 0 < int(regs) <= 128 and int(stack) == 0, line
        assert ops.get("LDG.E.128", 0) == vectors * (1 + int(P)), line
        assert ops.get("STG.E.128", 0) == vectors * (2 + int(carry)), line


# ---- GPU ----

@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["ancestry", "copy"])
def test_gpu_conv_gates_kernel_equals_the_block_at_the_fig6_shape(mode):
    """R=4, W=256 at Qwen3.5-0.8B's conv (C = 6,144, HV = 16, width 4), bf16, T = 4 steps: the kernel against the
    block, eager and torch.compile'd (what it replaces); prints each step's device time of both. A decoder on the
    GPU runs every registered kernel, this one among them."""
    from triton.testing import do_bench
    from artifact.model.config import QWEN3_5_0_8B as cfg
    R, W, T, C, HV, width = 4, 256, 4, cfg.conv_dim, cfg.linear_num_value_heads, cfg.linear_conv_kernel_dim
    dev, dt = "cuda", torch.bfloat16
    ops = BeamDecoder(HybridModel.random(TINY, seed=0, device=dev), "reference_fullstate", 1, 2, 1, 1).ops
    assert ops.kernels == tuple(DECODE_KERNELS) and "conv_gates" in ops.kernels
    torch.manual_seed(0)
    compiled = torch.compile(conv_gates, fullgraph=True, dynamic=False, options={"assert_indirect_indexing": False})
    tail = torch.randn(R, width - 1, C, device=dev).to(dt)
    w = torch.randn(C, width, device=dev)
    A_log, dt_bias = torch.rand(HV, device=dev), torch.randn(HV, device=dev)
    trees = {k: BeamTree(mode, R, W, T, dev) for k in ("block", "kernel")}
    convs = {k: ConvHistory(trees[k], C, width, dt, dev) for k in trees}
    for conv in convs.values():
        conv.prompt_tail.copy_(tail)
    fns = {"block": compiled, "kernel": model_ops.conv_gates}
    for t, (parents, x, ba) in enumerate(_steps(R, W, T, C, HV, dt, seed=0, device=dev)):
        assert x.stride(1) == C + 7 + 2 * HV                       # read through the in_proj row stride
        got, hist = {}, {}
        for k, fn in fns.items():
            trees[k].parents.copy_(parents)
            trees[k].advance(t)
            hist[k] = convs[k].history(t)
            args = (x, hist[k], convs[k].carry, w, ba, A_log, dt_bias)
            got[k] = fn(*args)
            ms = do_bench(lambda: fn(*args), warmup=5, rep=20)
            print(f"{mode} step {t} {k}: {ms * 1e3:.1f} us")
            convs[k].keep(t, got[k][2])
        (m0, g0, k0), (m1, g1, k1) = got["block"], got["kernel"]
        _assert_conv_close(m1, conv_gates(x, hist["kernel"], convs["kernel"].carry, w, ba, A_log, dt_bias)[0],
                           hist["kernel"], x, w, f"{mode} step {t} vs eager")
        _assert_conv_close(m0, conv_gates(x, hist["block"], convs["block"].carry, w, ba, A_log, dt_bias)[0],
                           hist["block"], x, w, f"{mode} step {t} compiled vs eager")
        torch.testing.assert_close(g1, g0, rtol=1e-5, atol=1e-5)
        assert len(k1) == len(k0) and all(torch.equal(a, b) for a, b in zip(k1, k0))


# ---- attention and norm kernels ----

def _rounded(v32: torch.Tensor, dtype, interpreted: bool) -> torch.Tensor:
    """fp32 values as the kernel's cast to `dtype` gives them."""
    return v32 if dtype == torch.float32 else _bf16(v32, interpreted)


def _assert_rounded_close(got, want32, dtype, interpreted: bool, what: str, slack=None):
    """fp32: within a few ulp. bf16: `want32` cast as the kernel casts, equal but on under 2 % of the elements,
    which are off by at most one ulp of the larger magnitude (plus `slack`, an absolute bound per element where
    an earlier rounding of the kernel feeds this value)."""
    if dtype == torch.float32:
        torch.testing.assert_close(got, want32, rtol=1e-5, atol=1e-5, msg=what)
        return
    want = _rounded(want32, dtype, interpreted).float()
    g = got.float()
    bound = BF16_ULP * torch.maximum(want.abs(), g.abs()) + (0 if slack is None else slack)
    assert ((g - want).abs() <= bound).all(), what
    assert (g != want).float().mean() < 0.02, what


def _attn_inputs(R, W, nq, nkv, D, dtype, device, seed):
    """q, gate, k, v as split_attn_proj gives them (views into one projection output with a pad column)."""
    gen = torch.Generator().manual_seed(seed)
    proj = (2 * torch.randn(R, W, 2 * nq * D + 2 * nkv * D + 7, generator=gen)).to(device, dtype)
    qg = proj[..., : 2 * nq * D].unflatten(-1, (nq, 2 * D))
    k = proj[..., 2 * nq * D: (2 * nq + nkv) * D].unflatten(-1, (nkv, D))
    v = proj[..., (2 * nq + nkv) * D: 2 * (nq + nkv) * D].unflatten(-1, (nkv, D))
    return qg[..., :D], qg[..., D:], k, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["ancestry", "copy"])
def test_attn_pre_kernel_equals_the_block(device, dtype, mode):
    """q normed, rotated and prompt-major, k normed and rotated and v stored into the step's decode-KV slot
    (ancestry: a contiguous slot; copy: a column of each beam's rows)."""
    R, W, nq, nkv, D, rot, t = 2, 5, 6, 2, 24, 8, 1     # N = 10: a partial tile of 8 tokens; G = 3; D padded
    interpreted = device == "cpu"
    q, _, k, v = _attn_inputs(R, W, nq, nkv, D, dtype, device, seed=1)
    gen = torch.Generator().manual_seed(2)
    q_norm, k_norm = (0.5 * torch.randn(D, generator=gen)).to(device), (0.5 * torch.randn(D, generator=gen)).to(device)
    cos, sin = (c[1] for c in rotary_cos_sin(torch.arange(40, 42, device=device), rot, 1e4))
    kvs = {name: KvHistory(BeamTree(mode, R, W, 3, device), nkv, D, dtype, device) for name in ("block", "kernel")}
    outs = {name: fn(q, k, v, q_norm, k_norm, cos, sin, 1e-6, *kvs[name].slot(t))
            for name, fn in (("block", blocks.attn_pre), ("kernel", model_ops.attn_pre))}
    assert kvs["kernel"].slot(t)[0].is_contiguous() == (mode == "ancestry")
    got_q = outs["kernel"]
    assert got_q.shape == (R, nkv, W * nq // nkv, D) and got_q.dtype == dtype and got_q.is_contiguous()
    for name, x, w, got, block in (("q", q, q_norm, got_q, outs["block"]),
                                   ("k", k, k_norm, kvs["kernel"].slot(t)[0], kvs["block"].slot(t)[0])):
        # the block's fp32 values: the norm rounded to the model dtype, then the rotary in fp32
        y = rms_norm(x.float(), w, 1e-6)
        want32 = apply_rotary(_rounded(y, dtype, interpreted).float(), cos, sin)
        assert torch.equal(block.float(), _prompt_major(apply_rotary(y.to(dtype).float(), cos, sin).to(dtype), nkv,
                                                        name).float()), name
        slack = 2 * BF16_ULP * y.abs().amax(-1, keepdim=True)   # a normed value one ulp off moves its pair's outputs
        _assert_rounded_close(got, _prompt_major(want32, nkv, name), dtype, interpreted, f"{mode} {dtype} {name}",
                              None if dtype == torch.float32 else _prompt_major(slack.expand_as(y), nkv, name))
    assert torch.equal(kvs["kernel"].slot(t)[1], v) and torch.equal(kvs["block"].slot(t)[1], v)


def _prompt_major(x, nkv, name):
    """q [R, W, nq, D] as attn_pre lays it out, [R, nkv, W G, D]; k as it is."""
    if name != "q":
        return x
    R, W, nq, D = x.shape
    return x.unflatten(2, (nkv, nq // nkv)).permute(0, 2, 1, 3, 4).reshape(R, nkv, W * (nq // nkv), D)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["ancestry", "copy"])
def test_merge_kernel_equals_the_block(device, dtype, mode):
    """The own-KV merge, with and without the output gate, over T = 11 steps (own keys in one chunk up to
    MERGE_KEYS, then two or three: the running maximum's rescale), on the decoder's views (o_p, lse_p and qg prompt-major; the gate a view into the projection) and KvHistory's own-KV
    forms (ancestry: tensors at step 0, then (store, columns, current) tuples; copy: each beam's rows)."""
    R, W, nq, nkv, D, T = 2, 5, 6, 2, 24, 11
    assert 2 * model_ops.MERGE_KEYS < T
    G, scale, interpreted = nq // nkv, 0.3, device == "cpu"
    gen = torch.Generator().manual_seed(3)
    tree = BeamTree(mode, R, W, T, device)
    kv = KvHistory(tree, nkv, D, dtype, device)
    for t in range(T):
        parents = torch.randint(0, W, (R, W), generator=gen, dtype=torch.int32) if t else torch.zeros(R, W,
                                                                                                     dtype=torch.int32)
        tree.parents.copy_(parents)
        tree.advance(t)
        _, gate, k, v = _attn_inputs(R, W, nq, nkv, D, dtype, device, seed=10 + t)
        own = kv.step(t, k, v)
        assert isinstance(own[0], tuple) == (mode == "ancestry" and t > 0)
        new = lambda *shape: torch.randn(*shape, generator=gen).to(device, dtype)   # noqa: E731
        o_p = new(R, nkv, W * G, D).reshape(R, nkv, W, G, D).permute(0, 2, 1, 3, 4)
        qg = new(R, nkv, W * G, D).reshape(R, nkv, W, G, D).permute(0, 2, 1, 3, 4)
        lse = (3 * torch.randn(R, nkv, W * G, generator=gen)).to(device).reshape(R, nkv, W, G).permute(0, 2, 1, 3)
        ref32 = merge_own_kv(o_p, lse, qg, *own, scale)                           # fp32, ungated
        for g in (None, gate):
            what = f"{mode} {dtype} step {t} gate {g is not None}"
            got = model_ops.merge_own_kv(o_p, lse, qg, *own, scale, dtype, g)
            block = merge_own_kv(o_p, lse, qg, *own, scale, dtype, g)
            assert got.shape == (R, W, nq, D) and got.dtype == dtype and got.is_contiguous(), what
            want32 = ref32 if g is None else _rounded(ref32, dtype, interpreted).float() * torch.sigmoid(g.float())
            if dtype != torch.float32:
                rne = ref32 if g is None else ref32.to(dtype).float() * torch.sigmoid(g.float())
                assert torch.equal(block, rne.to(dtype)), what
            slack = None if g is None else 2 * BF16_ULP * want32.abs()    # the merged o rounded before the gate
            _assert_rounded_close(got, want32, dtype, interpreted, what, slack)
        got32 = model_ops.merge_own_kv(o_p, lse, qg, *own, scale)                  # out_dtype None: fp32
        assert got32.dtype == torch.float32
        torch.testing.assert_close(got32, ref32, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gated_norm_kernel_equals_the_block(device, dtype):
    """rmsnorm(o) w silu(z) with z a strided view into an in_proj-like output; 30 rows: a partial tile of 16."""
    R, W, HV, V = 2, 5, 3, 24
    gen = torch.Generator().manual_seed(4)
    o = torch.randn(R, W, HV, V, generator=gen).to(device, dtype)
    proj = (2 * torch.randn(R, W, HV * V + 40, generator=gen)).to(device, dtype)
    z = proj[..., 11: 11 + HV * V].unflatten(-1, (HV, V))
    w = torch.randn(V, generator=gen).to(device)
    got = model_ops.gated_norm(o, z, w, 1e-6)
    block = blocks.gated_norm(o, z, w, 1e-6)
    want32 = gated_rms_norm(o.float(), z.float(), w, 1e-6, torch.float32).flatten(-2)
    assert got.shape == block.shape == (R, W, HV * V) and got.dtype == dtype and got.is_contiguous()
    assert torch.equal(block, want32.to(dtype))
    _assert_rounded_close(got, want32, dtype, device == "cpu", f"{dtype}")


def test_attention_and_norm_kernels_reject_bad_input():
    R, W, nq, nkv, D = 2, 3, 4, 2, 16
    q, gate, k, v = _attn_inputs(R, W, nq, nkv, D, torch.float32, "cpu", seed=0)
    w, cs = torch.randn(D), torch.randn(4)
    slot = [torch.empty(R, W, nkv, D) for _ in range(2)]
    model_ops.attn_pre(q, k, v, w, w, cs, cs, 1e-6, *slot)                  # the arguments below break it
    with pytest.raises(ValueError, match="attn_pre: 4 query heads are not a multiple of 3 key heads"):
        model_ops.attn_pre(q, torch.randn(R, W, 3, D), v, w, w, cs, cs, 1e-6, *slot)
    with pytest.raises(ValueError, match=r"attn_pre: k_out must be \[2, 3, 2, 16\], got \(2, 3, 2, 8\)"):
        model_ops.attn_pre(q, k, v, w, w, cs, cs, 1e-6, slot[0][..., :8], slot[1])
    with pytest.raises(ValueError, match="attn_pre: q_norm is torch.bfloat16"):
        model_ops.attn_pre(q, k, v, w.bfloat16(), w, cs, cs, 1e-6, *slot)
    with pytest.raises(ValueError, match="attn_pre: rotary dim 3 must be even"):
        model_ops.attn_pre(q, k, v, w, w, cs[:3], cs[:3], 1e-6, *slot)
    with pytest.raises(ValueError, match="attn_pre: v has last-dim stride 2"):
        model_ops.attn_pre(q, k, torch.randn(R, W, nkv, 2 * D)[..., ::2], w, w, cs, cs, 1e-6, *slot)
    G = nq // nkv
    o_p, qg = torch.randn(R, W, nkv, G, D), torch.randn(R, W, nkv, G, D)
    lse, own = torch.randn(R, W, nkv, G), torch.randn(R, W, 2, nkv, D)
    model_ops.merge_own_kv(o_p, lse, qg, own, own.clone(), 0.1)
    with pytest.raises(ValueError, match="merge_own_kv: k_own and v_own must be laid out alike"):
        model_ops.merge_own_kv(o_p, lse, qg, own, torch.randn(R, W, 3, nkv, D), 0.1)
    with pytest.raises(ValueError, match="merge_own_kv: lse_p is torch.bfloat16"):
        model_ops.merge_own_kv(o_p, lse.bfloat16(), qg, own, own, 0.1)
    with pytest.raises(ValueError, match="merge_own_kv: k_own must be a tensor or a .* tuple, got 2 items"):
        model_ops.merge_own_kv(o_p, lse, qg, (own, own), own, 0.1)
    with pytest.raises(ValueError, match=r"merge_own_kv: gate must be \[2, 3, 4, 16\]"):
        model_ops.merge_own_kv(o_p, lse, qg, own, own, 0.1, gate=gate[..., :8])
    with pytest.raises(ValueError, match="merge_own_kv: out_dtype torch.int32"):
        model_ops.merge_own_kv(o_p, lse, qg, own, own, 0.1, torch.int32)
    o = torch.randn(R, W, 2, D)
    with pytest.raises(ValueError, match=r"gated_norm: z must be \[2, 3, 2, 16\]"):
        model_ops.gated_norm(o, o[..., :8], w, 1e-6)
    with pytest.raises(ValueError, match="gated_norm: o is torch.float64"):
        model_ops.gated_norm(o.double(), o, w, 1e-6)


def test_residual_gemm_adds_into_the_residual_stream_in_place():
    """x += a w^T in x's own storage, a given with x's rows of F values in any shape (the merge's [R, W, nq, D])."""
    gen = torch.Generator().manual_seed(5)
    x, w = torch.randn(2, 3, 8, generator=gen), torch.randn(8, 12, generator=gen)
    a = torch.randn(2, 3, 4, 3, generator=gen)
    want = x + a.flatten(-2) @ w.t()
    ptr = x.data_ptr()
    assert blocks.residual_gemm(x, a, w) is x and x.data_ptr() == ptr
    torch.testing.assert_close(x, want, rtol=1e-6, atol=1e-6)


# Compiles attn_pre's, the merge's and gated_norm's kernels for sm_90a as a launch at the Fig 6 shape specialises
# them (sizes and strides multiples of 16, but the merge's step counts NH, NK and lse's unit stride), and prints per
# kernel and variant registers, stack bytes and the SASS's global loads / stores by width.
_COMPILE_ATTN_SM90 = r"""
import re
from collections import Counter
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels import model_ops as mo
from tools.compile_report import _cuobjdump

def report(name, fn, ptrs, floats, const, warps, odd=()):
    sig = {a: "constexpr" if a in const else ptrs.get(a, "fp32" if a in floats else "i32") for a in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
             if a not in const and a not in floats and a not in odd}
    ck = triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": warps})
    usage = _cuobjdump(ck.asm["cubin"], "--dump-resource-usage")
    ops = Counter(re.findall(r"\b((?:LDG|STG)\.E[.\w]*)", _cuobjdump(ck.asm["cubin"], "-sass")))
    print(name, re.search(r"REG:(\d+)", usage).group(1), re.search(r"STACK:(\d+)", usage).group(1), dict(ops))

for dt in ("*bf16", "*fp32"):
    ptrs = dict.fromkeys(("q_ptr", "k_ptr", "v_ptr", "qo_ptr", "ko_ptr", "vo_ptr"), dt)
    ptrs.update(dict.fromkeys(("qn_ptr", "kn_ptr", "cos_ptr", "sin_ptr"), "*fp32"))
    report(f"attn_pre{dt}", mo._attn_pre_kernel, ptrs, {"eps"},
           dict(NQ=8, NKV=2, D=256, ROT=64, BT=mo.QK_TOKENS, BD=256), mo.QK_WARPS)
    for gather, cur, gate in ((False, False, True), (True, True, True), (True, True, False)):
        ptrs = dict.fromkeys(("op_ptr", "q_ptr", "kh_ptr", "vh_ptr", "kc_ptr", "vc_ptr", "gate_ptr", "out_ptr"), dt)
        ptrs.update(lse_ptr="*fp32", idx_ptr="*i32")
        report(f"merge{dt}:{int(gather)}{int(cur)}{int(gate)}", mo._merge_kernel, ptrs, {"scale"},
               dict(HKV=2, G=4, D=256, GATHER=gather, HAS_CUR=cur, HAS_GATE=gate, BG=4, BD=256, BJ=mo.MERGE_KEYS),
               mo.MERGE_WARPS, odd=("NH", "NK", "sl_g"))
    ptrs = dict.fromkeys(("o_ptr", "z_ptr", "out_ptr"), dt)
    ptrs.update(w_ptr="*fp32")
    report(f"gated_norm{dt}", mo._gated_norm_kernel, ptrs, {"eps"}, dict(V=128, BR=mo.GN_ROWS, BV=128), mo.GN_WARPS)
"""


def test_attention_and_norm_kernels_compile_for_hopper_with_128_bit_rows(sm90_compile):
    """The three kernels compile for sm_90a (what the interpreter cannot check: Triton's typing of the branches,
    its constexpr rules) without spills, and at the Fig 6 shape every store is a 128-bit row piece: attn_pre
    [8, 256] per branch (q, k, v), the merge's [4, 256] output, gated_norm's [16, 128] -- each thread's part
    16 bytes at a time; the rows they read come in 128-bit loads too (attn_pre's rotary partners, a permuted
    copy of the same rows, in 64-bit ones)."""
    import ast

    stdout = sm90_compile(["-c", _COMPILE_ATTN_SM90])
    lines = dict(line.split(" ", 1) for line in stdout.splitlines())
    assert len(lines) == 10, stdout
    threads = 32 * 4
    for name, rest in lines.items():
        regs, stack, ops = rest.split(" ", 2)
        ops = ast.literal_eval(ops)
        elem = 2 if "bf16" in name else 4
        assert 0 < int(regs) <= 128 and int(stack) == 0, name
        assert {op for op in ops if op.startswith("STG")} == {"STG.E.128"}, name
        tile = {"attn_pre": 3 * mo_tile("QK", 256), "merge": 4 * 256, "gated_norm": mo_tile("GN", 128)}
        stores = tile[name.split("*")[0]] * elem // (16 * threads)
        assert ops["STG.E.128"] == stores, name
        assert ops.get("LDG.E.128", 0) >= stores, name


def mo_tile(kind: str, width: int) -> int:
    """Elements of one attn_pre ("QK") or gated_norm ("GN") program's tile."""
    return (model_ops.QK_TOKENS if kind == "QK" else model_ops.GN_ROWS) * width


# ---- GPU: the kernels at the Fig 6 shape ----

def _fig6_attn(dt, seed=0):
    from artifact.model.config import QWEN3_5_0_8B as cfg
    R, W = 4, 256
    q, gate, k, v = _attn_inputs(R, W, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, dt, "cuda",
                                 seed)
    return cfg, R, W, q, gate, k, v


@pytest.mark.gpu
def test_gpu_attn_pre_and_merge_kernels_equal_the_blocks_at_the_fig6_shape():
    """R=4, W=256, Qwen3.5-0.8B's attention (8 q / 2 kv heads of 256, rotary 64), bf16: attn_pre and the merge
    (T = 4 steps of ancestry-mode own KV, with the gate) against the blocks eager and torch.compile'd (what they
    replace); prints each one's device time per layer. The merge kernel rounds the merged o to bf16 before the
    gate, as the eager block does, and is held to the eager block's elements; the compiled block fuses that
    rounding away (and may sum in another order), so it is held to the row's largest magnitude (it is here for
    its time, not under test)."""
    from triton.testing import do_bench
    dt, dev = torch.bfloat16, "cuda"
    cfg, R, W, q, gate, k, v = _fig6_attn(dt)
    nq, nkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    G, T = nq // nkv, 4
    gen = torch.Generator(device=dev).manual_seed(0)
    q_norm, k_norm = (0.5 * torch.randn(D, generator=gen, device=dev) for _ in range(2))
    cos, sin = (c[2] for c in rotary_cos_sin(torch.arange(1024, 1024 + T, device=dev), cfg.rotary_dim,
                                             cfg.rope_theta))
    compiled = {f.__name__: torch.compile(f, fullgraph=True, dynamic=False) for f in (blocks.attn_pre, merge_own_kv)}
    kvs = {name: KvHistory(BeamTree("ancestry", R, W, T, dev), nkv, D, dt, dev) for name in ("block", "kernel")}
    args = lambda name: (q, k, v, q_norm, k_norm, cos, sin, 1e-6, *kvs[name].slot(2))   # noqa: E731
    q_block, q_kernel = compiled["attn_pre"](*args("block")), model_ops.attn_pre(*args("kernel"))
    want = blocks.attn_pre(*args("block"))
    for got in (q_kernel, q_block):
        assert ((got.float() - want.float()).abs() <= 2 * BF16_ULP * want.float().abs().amax(-1, keepdim=True)).all()
    assert torch.equal(kvs["kernel"].slot(2)[1], v)
    for name, fn in (("compiled block", compiled["attn_pre"]), ("kernel", model_ops.attn_pre)):
        us = do_bench(lambda: fn(*args("kernel")), warmup=5, rep=50) * 1e3
        print(f"attn_pre {name}: {us:.1f} us per layer")
    tree = BeamTree("ancestry", R, W, T, dev)
    kv = KvHistory(tree, nkv, D, dt, dev)
    for t in range(T):
        tree.parents.copy_(torch.randint(0, W, (R, W), generator=gen, device=dev, dtype=torch.int32) if t else
                           torch.zeros(R, W, dtype=torch.int32, device=dev))
        tree.advance(t)
        own = kv.step(t, *(torch.randn(R, W, nkv, D, generator=gen, device=dev).to(dt) for _ in range(2)))
        o_p = torch.randn(R, nkv, W * G, D, generator=gen, device=dev).to(dt).reshape(R, nkv, W, G, D)
        qg = q_kernel.reshape(R, nkv, W, G, D).permute(0, 2, 1, 3, 4)
        lse = (3 * torch.randn(R, nkv, W * G, generator=gen, device=dev)).reshape(R, nkv, W, G).permute(0, 2, 1, 3)
        margs = (o_p.permute(0, 2, 1, 3, 4), lse, qg, *own, D ** -0.5, dt, gate)
        want = (merge_own_kv(*margs[:-2]).to(dt).float() * torch.sigmoid(gate.float())).to(dt).float()
        row = want.abs().amax(-1, keepdim=True)
        # one ulp of the merged o where its rounding before the gate flips, then the gated value's rounding: of each
        # element for the kernel (plus 2^-16 of its row's largest, for an element the weighted sum nearly cancels:
        # the kernel rescales its running sums where the block sums once), of the row's largest for the compiled block
        for name, fn, bound in (("kernel", model_ops.merge_own_kv, 3 * BF16_ULP * want.abs() + 2 ** -16 * row),
                                ("compiled block", compiled["merge_own_kv"], 3 * BF16_ULP * row)):
            got = fn(*margs).float()
            assert ((got - want).abs() <= bound).all(), (name, t)
            us = do_bench(lambda: fn(*margs), warmup=5, rep=50) * 1e3
            print(f"merge step {t} {name}: {us:.1f} us per layer")


@pytest.mark.gpu
def test_gpu_gated_norm_kernel_equals_the_block_at_the_fig6_shape():
    """R=4, W=256, Qwen3.5-0.8B's GDN output (HV = 16 heads of 128), z a view into the in_proj output, bf16: the
    kernel against the block eager and torch.compile'd; prints each one's device time per layer."""
    from triton.testing import do_bench
    from artifact.model.config import QWEN3_5_0_8B as cfg
    R, W, HV, V = 4, 256, cfg.linear_num_value_heads, cfg.linear_value_head_dim
    gen = torch.Generator(device="cuda").manual_seed(0)
    proj = torch.randn(R, W, cfg.conv_dim + cfg.value_dim + 2 * HV, generator=gen, device="cuda").bfloat16()
    z = proj[..., cfg.conv_dim: cfg.conv_dim + cfg.value_dim].unflatten(-1, (HV, V))
    o = torch.randn(R, W, HV, V, generator=gen, device="cuda").bfloat16()
    w = torch.randn(V, generator=gen, device="cuda")
    compiled = torch.compile(blocks.gated_norm, fullgraph=True, dynamic=False)
    want32 = gated_rms_norm(o.float(), z.float(), w, 1e-6, torch.float32).flatten(-2)
    for name, fn in (("compiled block", compiled), ("kernel", model_ops.gated_norm)):
        got = fn(o, z, w, 1e-6).float()
        assert ((got - want32).abs() <= BF16_ULP * want32.abs()).all(), name
        us = do_bench(lambda: fn(o, z, w, 1e-6), warmup=5, rep=50) * 1e3
        print(f"gated_norm {name}: {us:.1f} us per layer")
