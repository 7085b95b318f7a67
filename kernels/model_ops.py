"""Kernels of ours that stand in for blocks of the full model's decode pipeline (artifact.model.blocks) on a CUDA
device, for every path alike. They are registered by name in `artifact.registry.DECODE_KERNELS`, where
`artifact.model.blocks.DecodeOps` finds them, so the framework-neutral core never imports this package. Each
takes the arguments of the block it replaces and returns the same outputs, computed in the same fp32 order.

- `conv_gates`: one GDN layer's depthwise causal conv + SiLU over q|k|v, the conv windows' upkeep and the gates
  [beta, g], in one Triton launch (the block: `artifact.model.blocks.conv_gates`).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from artifact.limits import CUDA_GRID_YZ_MAX

# Tile of a conv program: BLOCK_N tokens x BLOCK_C channels. A window row is 2 C bytes of contiguous channels, so
# a tile's loads are 1 KB row pieces (bf16), and one channel column of the grid covers the Qwen3.5 conv_dim 6,144
# in 12 programs. The grid's y axis holds the N / BLOCK_N token tiles (CUDA_GRID_YZ_MAX of them at most).
BLOCK_N = 8
BLOCK_C = 256
NUM_WARPS = 4
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SOFTPLUS_THRESHOLD = tl.constexpr(20.0)    # F.softplus's default: above it softplus(v) = v
INT32_MAX = 2 ** 31 - 1        # the kernel's offsets are int32: every tensor it indexes holds fewer elements


@triton.jit
def _conv_gates_kernel(
    x_ptr, sx_r, sx_w,
    win, win_sr, win_sw, idx, idx_sr, idx_sw,
    w_ptr, sw_c, sw_j,
    out_ptr, kept,
    ba_ptr, sba_r, sba_w, alog_ptr, dtb_ptr, gates_ptr,
    N, W, C, HV,
    GATHER: tl.constexpr, CARRY: tl.constexpr,
    BN: tl.constexpr, BC: tl.constexpr, BH: tl.constexpr,
):
    """Programs (channel tile, token tile); the last channel column computes the gates.

    Token n = r W + b. Window entry j (oldest first, P = len(win) of them) of token n is row
    win[j][r, idx[j][r, b]] if GATHER[j] else win[j][r, b], addressed through its strides (a prompt-tail entry
    has row stride 0). kept holds CARRY + 1 [N, C] outputs: the newest CARRY window entries as read, then x.
    out, kept [N, C] and gates [2, N, HV] (beta, g) are contiguous.
    """
    P: tl.constexpr = len(win)
    pid_c = tl.program_id(0)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    mask_n = n < N
    r = n // W
    b = n % W
    if pid_c * BC < C:
        c = pid_c * BC + tl.arange(0, BC)
        mask_c = c < C
        mask = mask_n[:, None] & mask_c[None, :]
        dst = (n * C)[:, None] + c[None, :]
        xv = tl.load(x_ptr + (r * sx_r + b * sx_w)[:, None] + c[None, :], mask=mask)
        # the block's fp32 order: x w[:, -1] first, then each window entry oldest first
        acc = xv.to(tl.float32) * tl.load(w_ptr + c * sw_c + P * sw_j, mask=mask_c)[None, :]
        for j in tl.static_range(P):
            if GATHER[j]:
                row = tl.load(idx[j] + r * idx_sr[j] + b * idx_sw[j], mask=mask_n, other=0)
            else:
                row = b
            h = tl.load(win[j] + (r * win_sr[j] + row * win_sw[j])[:, None] + c[None, :], mask=mask)
            acc = acc + h.to(tl.float32) * tl.load(w_ptr + c * sw_c + j * sw_j, mask=mask_c)[None, :]
            if j >= P - CARRY:
                tl.store(kept[j - P + CARRY] + dst, h, mask=mask)
        y = acc / (1.0 + tl.exp(-acc))                                          # SiLU
        tl.store(out_ptr + dst, y.to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(kept[CARRY] + dst, xv, mask=mask)
    else:
        hh = tl.arange(0, BH)
        mask_h = hh < HV
        m2 = mask_n[:, None] & mask_h[None, :]
        src = ba_ptr + (r * sba_r + b * sba_w)[:, None] + hh[None, :]            # ba = [b | a]
        bv = tl.load(src, mask=m2, other=0.0).to(tl.float32)
        v = tl.load(src + HV, mask=m2, other=0.0).to(tl.float32) + \
            tl.load(dtb_ptr + hh, mask=mask_h, other=0.0).to(tl.float32)[None, :]
        # softplus = log1p(exp(v)) below the threshold, v above it; log1p(e) as log(u) e / (u - 1), u = 1 + e
        # (exact to an ulp; e where u rounds to 1)
        e = tl.exp(v)
        u = 1.0 + e
        log1p = tl.where(u == 1.0, e, tl.log(u) * (e / (u - 1.0)))
        softplus = tl.where(v > SOFTPLUS_THRESHOLD, v, log1p)
        neg_a = -tl.exp(tl.load(alog_ptr + hh, mask=mask_h, other=0.0).to(tl.float32))
        g = neg_a[None, :] * softplus
        beta = 1.0 / (1.0 + tl.exp(-bv))
        dst_h = (n * HV)[:, None] + hh[None, :]
        tl.store(gates_ptr + dst_h, beta, mask=m2)
        tl.store(gates_ptr + N * HV + dst_h, g, mask=m2)


def _check_rows(name: str, t: torch.Tensor, R: int, C: int, dtype, device) -> None:
    """A [R, rows, C] tensor of `dtype` on `device` with contiguous channels."""
    if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[0] != R or t.shape[2] != C:
        raise ValueError(f"conv_gates: {name} must be a [R={R}, rows, C={C}] tensor, got "
                         f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if t.dtype != dtype or t.device != device:
        raise ValueError(f"conv_gates: {name} is {t.dtype} on {t.device}, x is {dtype} on {device}")
    if t.stride(2) != 1:
        raise ValueError(f"conv_gates: {name} has channel stride {t.stride(2)}; the kernel reads contiguous channels")


def _extent(t: torch.Tensor) -> int:
    """Elements from t's storage start to past its last element (what int32 offsets into it must reach)."""
    return t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1


def conv_gates(x, hist: list, carry: int, conv_w, ba, A_log, dt_bias):
    """`artifact.model.blocks.conv_gates` in one launch: (silu(causal conv) [R, W, C] in x's dtype, gates
    [2, R, W, HV] fp32 = [beta, g], kept: carry + 1 [R, W, C] tensors), all fresh and contiguous.

    x [R, W, C] (any row strides, contiguous channels: the in_proj output's q|k|v columns); hist: the
    P = width - 1 window entries of ConvHistory.history, oldest first, each a [R, W, C] tensor (a prompt-tail
    entry is expanded over the beams) or a (tensor [R, rows, C], index [R, W]) pair read as tensor[r, index[r, b]];
    conv_w [C, width]; ba [R, W, 2 HV] = [b | a]; A_log, dt_bias [HV]. kept is the newest `carry` window entries
    as read, then x.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"conv_gates: x must be a [R, W, C] tensor, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    R, W, C = x.shape
    if x.dtype not in DTYPES:
        raise ValueError(f"conv_gates: x is {x.dtype}; the kernel takes {', '.join(map(str, DTYPES))}")
    _check_rows("x", x, R, C, x.dtype, x.device)
    if (not isinstance(conv_w, torch.Tensor) or conv_w.dim() != 2 or conv_w.shape[0] != C or conv_w.shape[1] < 2
            or conv_w.dtype != torch.float32 or conv_w.device != x.device):
        got = f"{conv_w.dtype} {tuple(conv_w.shape)} on {conv_w.device}" if isinstance(conv_w, torch.Tensor) \
            else type(conv_w).__name__
        raise ValueError(f"conv_gates: conv_w must be fp32 [C={C}, width >= 2] on {x.device}, got {got}")
    P = conv_w.shape[1] - 1
    if len(hist) != P:
        raise ValueError(f"conv_gates: {len(hist)} window entries for conv taps of width {P + 1} (expected {P})")
    if not isinstance(carry, int) or isinstance(carry, bool) or not 0 <= carry <= P:
        raise ValueError(f"conv_gates: carry must be an int in [0, {P}], got {carry!r}")
    wins, idxs, gather = [], [], []
    for j, h in enumerate(hist):
        t, i = h if isinstance(h, tuple) else (h, None)
        _check_rows(f"window entry {j}", t, R, C, x.dtype, x.device)
        if i is None and t.shape[1] != W:
            raise ValueError(f"conv_gates: window entry {j} has {t.shape[1]} beams without an index, x has W={W}")
        if i is not None and (not isinstance(i, torch.Tensor) or tuple(i.shape) != (R, W)
                              or i.dtype not in (torch.int32, torch.int64) or i.device != x.device):
            raise ValueError(f"conv_gates: window entry {j}'s index must be an int32 / int64 [R={R}, W={W}] tensor "
                             f"on {x.device}, got {tuple(i.shape) if isinstance(i, torch.Tensor) else i!r}")
        wins.append(t)
        idxs.append(t if i is None else i)          # an entry without an index never reads it (GATHER false)
        gather.append(i is not None)
    HV = A_log.numel()
    if tuple(ba.shape) != (R, W, 2 * HV) or ba.stride(2) != 1 or ba.device != x.device:
        raise ValueError(f"conv_gates: ba must be [R={R}, W={W}, 2 HV={2 * HV}] with contiguous heads on {x.device}, "
                         f"got {tuple(ba.shape)} strides {ba.stride()} on {ba.device}")
    for name, v in (("A_log", A_log), ("dt_bias", dt_bias)):
        if tuple(v.shape) != (HV,) or not v.is_contiguous() or v.device != x.device:
            raise ValueError(f"conv_gates: {name} must be a contiguous [HV={HV}] tensor on {x.device}, got "
                             f"{tuple(v.shape)} on {v.device}")
    N = R * W
    if max(_extent(t) for t in (x, ba, *wins, *idxs)) > INT32_MAX or N * C > INT32_MAX:
        raise ValueError(f"conv_gates: R={R} x W={W} x C={C} (or an input's row strides) exceeds the kernel's int32 "
                         f"offsets ({INT32_MAX} elements)")
    token_tiles = triton.cdiv(N, BLOCK_N)
    if token_tiles > CUDA_GRID_YZ_MAX:
        raise ValueError(f"conv_gates: R={R} x W={W} = {N} tokens need {token_tiles} token tiles of {BLOCK_N}, more "
                         f"than the launch grid's y axis takes ({CUDA_GRID_YZ_MAX})")
    out = torch.empty(R, W, C, dtype=x.dtype, device=x.device)
    kept = [torch.empty(R, W, C, dtype=x.dtype, device=x.device) for _ in range(carry + 1)]
    gates = torch.empty(2, R, W, HV, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(C, BLOCK_C) + 1, token_tiles)
    _conv_gates_kernel[grid](
        x, x.stride(0), x.stride(1),
        tuple(wins), tuple(t.stride(0) for t in wins), tuple(t.stride(1) for t in wins),
        tuple(idxs), tuple(i.stride(0) for i in idxs), tuple(i.stride(1) for i in idxs),
        conv_w, conv_w.stride(0), conv_w.stride(1),
        out, tuple(kept),
        ba, ba.stride(0), ba.stride(1), A_log, dt_bias, gates,
        N, W, C, HV,
        GATHER=tuple(gather), CARRY=carry, BN=BLOCK_N, BC=BLOCK_C, BH=triton.next_power_of_2(HV),
        num_warps=NUM_WARPS,
    )
    return out, gates, kept
