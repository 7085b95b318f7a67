"""Our kernels in the decode pipeline (kernels/model_ops.py, registered in artifact.registry.DECODE_KERNELS) against
the torch blocks they replace on a GPU (artifact.model.blocks).

`conv_gates`: the conv + SiLU, the conv windows' upkeep and the gates of a GDN layer in one Triton launch. CPU
tests run it under the Triton interpreter against the block, in both beam-state modes, over more steps than the
window (step 0 reads the prompt tail only), with odd sizes (a partial channel tile, a partial token tile, a head
count that is not a power of two), x and [b | a] read as the in_proj output's strided columns, each chain of
steps fed by its own kept tensors. fp32 agrees to a few ulp (SiLU's and softplus' exp / log implementations); a
bf16 output is the same fp32 value rounded, so it differs by at most one bf16 ulp, and only where the fp32
values straddle a rounding boundary. The kept tensors are copies: bit for bit.
"""
import pytest
import torch

from artifact.model.beam_state import BeamTree, ConvHistory, window
from artifact.model.blocks import DecodeOps, conv_gates, decode_kernel
from artifact.model.decode import BeamDecoder
from artifact.model.layers import causal_conv_step
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
    as the kernel casts, equal but where the two fp32 values straddle a rounding boundary (then one ulp)."""
    if x.dtype == torch.float32:
        torch.testing.assert_close(got, block, rtol=1e-6, atol=1e-6, msg=what)
        return
    ref = causal_conv_step([window(h).float() for h in hist], x.float(), w)          # the block's fp32 value
    assert torch.equal(block, ref.to(x.dtype)), what
    want = _bf16(ref, interpreted=x.device.type == "cpu").float()
    g = got.float()
    assert ((g - want).abs() <= BF16_ULP * want.abs()).all(), what
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
    assert set(DECODE_KERNELS) == {"conv_gates"}
    ops = DecodeOps(kernels=True)
    assert ops.conv_gates is model_ops.conv_gates is decode_kernel("conv_gates")
    assert ops.label == "eager + ours(conv_gates)" and ops.gdn_post is DecodeOps().gdn_post
    with pytest.raises(ValueError, match="no kernel is registered for the block 'gdn_post'"):
        decode_kernel("gdn_post")
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


def test_conv_gates_kernel_compiles_for_hopper_with_128_bit_rows():
    """The kernel compiles for sm_90a (what the interpreter cannot check: Triton's typing of both branches, its
    constexpr rules), without spills, and at the Fig 6 shape moves each thread's part of a row in 128-bit loads
    and stores: per tensor of the tile (x, P window rows; out, kept) BLOCK_N BLOCK_C / (32 NUM_WARPS) elements,
    16 bytes each."""
    import ast
    import os
    import subprocess
    import sys

    from tools.compile_report import _nvidia_tool
    for tool in ("ptxas", "cuobjdump"):
        if not os.access(_nvidia_tool(tool), os.X_OK):
            pytest.skip(f"Triton's {tool} not found at {_nvidia_tool(tool)} (a wheel without its NVIDIA binaries)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", _COMPILE_SM90], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert len(lines) == 6, res.stdout
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
    block, eager and torch.compile'd (what it replaces); prints each step's device time of both."""
    from triton.testing import do_bench
    from artifact.model.config import QWEN3_5_0_8B as cfg
    R, W, T, C, HV, width = 4, 256, 4, cfg.conv_dim, cfg.linear_num_value_heads, cfg.linear_conv_kernel_dim
    dev, dt = "cuda", torch.bfloat16
    assert BeamDecoder(HybridModel.random(TINY, seed=0, device=dev), "reference_fullstate", 1, 2, 1,
                       1).ops.kernels == ("conv_gates",)
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
        assert (m1.float() - m0.float()).abs().le(BF16_ULP * m0.float().abs()).all(), f"{mode} step {t}"
        torch.testing.assert_close(g1, g0, rtol=1e-5, atol=1e-5)
        assert len(k1) == len(k0) and all(torch.equal(a, b) for a, b in zip(k1, k0))
