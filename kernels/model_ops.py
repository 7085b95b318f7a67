"""Kernels of ours that stand in for blocks of the full model's decode pipeline (artifact.model.blocks) on a CUDA
device, for every path alike. They are registered by name in `artifact.registry.DECODE_KERNELS`, where
`artifact.model.blocks.DecodeOps` finds them, so the framework-neutral core never imports this package. Each
takes the arguments of the block it replaces and returns the same outputs, computed in the same fp32 order.

- `conv_gates`: one GDN layer's depthwise causal conv + SiLU over q|k|v, the conv windows' upkeep and the gates
  [beta, g], in one Triton launch (the block: `artifact.model.blocks.conv_gates`).
- `attn_pre`: an attention layer's q / k zero-centred norms and partial rotary, q written prompt-major, k and v
  stored into the step's decode-KV slot, in one launch (`artifact.model.blocks.attn_pre`).
- `merge_own_kv`: each beam's own decode KV folded into the prompt part through the log-sum-exp, then the
  output gate, written in o_proj's input layout, in one launch (`artifact.model.attention.merge_own_kv`).
- `gated_norm`: a GDN layer's gated output norm, z read through its in_proj stride, in one launch
  (`artifact.model.blocks.gated_norm`).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import cuda as tl_cuda

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
def _pdl_start(PDL: tl.constexpr):
    """A kernel's first act under programmatic dependent launch: wait for the launch before it (complete, its
    writes visible: every load comes after this). No early trigger: the launch after these kernels may read its
    inputs -- their outputs -- before its own wait (OneLA's step does, `kernels.onela.OneLA`), so it starts as
    each program exits."""
    if PDL:
        tl_cuda.gdc_wait()


def _pdl(device) -> bool:
    """Launch with programmatic dependent launch: on a Hopper (or newer) GPU (under the interpreter the tensors
    are on the CPU). Inside the decode's CUDA graphs the graph edge into the kernel becomes programmatic, which
    hides the launch gap before it; the kernel still reads nothing before the previous launch completes."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


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
    PDL: tl.constexpr,
):
    """Programs (channel tile, token tile); the last channel column computes the gates.

    Token n = r W + b. Window entry j (oldest first, P = len(win) of them) of token n is row
    win[j][r, idx[j][r, b]] if GATHER[j] else win[j][r, b], addressed through its strides (a prompt-tail entry
    has row stride 0). kept holds CARRY + 1 [N, C] outputs: the newest CARRY window entries as read, then x.
    out, kept [N, C] and gates [2, N, HV] (beta, g) are contiguous.
    """
    _pdl_start(PDL)
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
    pdl = _pdl(x.device)
    _conv_gates_kernel[grid](
        x, x.stride(0), x.stride(1),
        tuple(wins), tuple(t.stride(0) for t in wins), tuple(t.stride(1) for t in wins),
        tuple(idxs), tuple(i.stride(0) for i in idxs), tuple(i.stride(1) for i in idxs),
        conv_w, conv_w.stride(0), conv_w.stride(1),
        out, tuple(kept),
        ba, ba.stride(0), ba.stride(1), A_log, dt_bias, gates,
        N, W, C, HV,
        GATHER=tuple(gather), CARRY=carry, BN=BLOCK_N, BC=BLOCK_C, BH=triton.next_power_of_2(HV),
        PDL=pdl, num_warps=NUM_WARPS, launch_pdl=pdl,
    )
    return out, gates, kept


def _check_tensor(fn: str, name: str, t, shape: tuple, dtype, device, last_stride: bool = True) -> None:
    """t is a tensor of `shape` (None: any size there), `dtype` (a tuple: one of them) on `device`, with a
    contiguous last dim when `last_stride`."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{fn}: {name} must be a tensor, got {type(t).__name__}")
    if t.dim() != len(shape) or any(s is not None and s != n for s, n in zip(shape, t.shape)):
        want = ", ".join("?" if s is None else str(s) for s in shape)
        raise ValueError(f"{fn}: {name} must be [{want}], got {tuple(t.shape)}")
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    if t.dtype not in dtypes or t.device != torch.device(device):
        raise ValueError(f"{fn}: {name} is {t.dtype} on {t.device}, expected "
                         f"{' / '.join(map(str, dtypes))} on {device}")
    if last_stride and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{fn}: {name} has last-dim stride {t.stride(-1)}; the kernel reads contiguous rows")


def _check_int32(fn: str, tensors, what: str) -> None:
    if max(_extent(t) for t in tensors) > INT32_MAX:
        raise ValueError(f"{fn}: {what} exceeds the kernel's int32 offsets ({INT32_MAX} elements)")


# ---- attention: q / k norm + partial rotary, q prompt-major, k and v into the decode KV ----

# Tile of an attn_pre program: QK_TOKENS tokens x one head's D dims (D = 256: 8 rows of 512 bytes in bf16). The grid
# is (N / QK_TOKENS token tiles, nq + 2 nkv heads): y holds the heads.
QK_TOKENS = 8
QK_WARPS = 4


@triton.jit
def _norm_rope_rows(src, w_ptr, dst, cos_ptr, sin_ptr, eps, d, m2, mask_d,
                    D: tl.constexpr, ROT: tl.constexpr):
    """One tile of q or k head rows (row starts src, dst: [BT] pointers): zero-centred norm, rounded to dst's
    dtype, then partial rotary, stored at dst."""
    HALF: tl.constexpr = ROT // 2
    out_ty = dst.dtype.element_ty
    p = tl.where(d < HALF, d + HALF, tl.where(d < ROT, d - HALF, d))              # rotate_half's partner
    x = tl.load(src[:, None] + d[None, :], mask=m2, other=0.0).to(tl.float32)
    xp = tl.load(src[:, None] + p[None, :], mask=m2, other=0.0).to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=1) / D + eps)
    y = (x * rstd[:, None] * (1.0 + tl.load(w_ptr + d, mask=mask_d, other=0.0))[None, :]).to(out_ty)
    yp = (xp * rstd[:, None] * (1.0 + tl.load(w_ptr + p, mask=mask_d, other=0.0))[None, :]).to(out_ty)
    c = tl.load(cos_ptr + d, mask=d < ROT, other=1.0)
    s = tl.load(sin_ptr + d, mask=d < ROT, other=0.0)
    s = tl.where(d < HALF, -s, s)
    out = y.to(tl.float32) * c[None, :] + yp.to(tl.float32) * s[None, :]
    tl.store(dst[:, None] + d[None, :], out.to(out_ty), mask=m2)


@triton.jit
def _attn_pre_kernel(
    q_ptr, sq_r, sq_w, sq_h, k_ptr, sk_r, sk_w, sk_h, v_ptr, sv_r, sv_w, sv_h,
    qn_ptr, kn_ptr, cos_ptr, sin_ptr,
    qo_ptr, ko_ptr, sko_r, sko_w, sko_h, vo_ptr, svo_r, svo_w, svo_h,
    N, W, eps,
    NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr, ROT: tl.constexpr,
    BT: tl.constexpr, BD: tl.constexpr,
    PDL: tl.constexpr,
):
    """Programs (token tile, head h): h < NQ is a query head, NQ <= h < NQ + NKV a key head, the rest value heads.

    Token n = r W + b. A q / k head row is zero-centred-normed (x rsqrt(mean x^2 + eps) (1 + w), rounded to the
    model dtype as `rms_norm` returns it) and rotated (`apply_rotary`: y_i c_i + y_p(i) s_i, p(i) = i +- ROT / 2
    below ROT, s_i = -sin_i below ROT / 2; a dim >= ROT passes as y_i 1 + y_i 0). The partner's normed value
    y_p(i) comes from its own load of row element p(i) (the same row, from L1), normed with its own weight.
    q goes to qo [R, NKV, W, G, D] (contiguous, prompt-major), k and v to their decode-KV slots (strides). Each
    branch stores through its own pointers (one pointer per branch keeps the stores' 16-byte alignment known to
    the compiler: 128-bit stores).
    """
    _pdl_start(PDL)
    h = tl.program_id(1)
    n = tl.program_id(0) * BT + tl.arange(0, BT)
    mask_n = n < N
    r = n // W
    b = n % W
    d = tl.arange(0, BD)
    mask_d = d < D
    m2 = mask_n[:, None] & mask_d[None, :]
    G: tl.constexpr = NQ // NKV
    if h < NQ:
        _norm_rope_rows(q_ptr + r * sq_r + b * sq_w + h * sq_h, qn_ptr,
                        qo_ptr + ((r * NKV + h // G) * W + b) * (G * D) + (h % G) * D,
                        cos_ptr, sin_ptr, eps, d, m2, mask_d, D, ROT)
    elif h < NQ + NKV:
        hk = h - NQ
        _norm_rope_rows(k_ptr + r * sk_r + b * sk_w + hk * sk_h, kn_ptr, ko_ptr + r * sko_r + b * sko_w + hk * sko_h,
                        cos_ptr, sin_ptr, eps, d, m2, mask_d, D, ROT)
    else:
        hv = h - NQ - NKV
        src = v_ptr + r * sv_r + b * sv_w + hv * sv_h
        dst = vo_ptr + r * svo_r + b * svo_w + hv * svo_h
        tl.store(dst[:, None] + d[None, :], tl.load(src[:, None] + d[None, :], mask=m2), mask=m2)


def attn_pre(q, k, v, q_norm, k_norm, cos, sin, eps: float, k_out, v_out):
    """`artifact.model.blocks.attn_pre` in one launch: q [R, W, nq, D], k, v [R, W, nkv, D] (views into the qkv
    projection: any strides, contiguous rows) -> q normed and rotated, prompt-major [R, nkv, W G, D] (fresh,
    contiguous); k normed and rotated and v written into k_out, v_out [R, W, nkv, D] (the decode-KV slot,
    KvHistory.slot; contiguous rows). q_norm, k_norm [D] and cos, sin [rot] fp32."""
    fn = "attn_pre"
    _check_tensor(fn, "q", q, (None, None, None, None), DTYPES, q.device if isinstance(q, torch.Tensor) else "cpu")
    R, W, nq, D = q.shape
    dt, dev = q.dtype, q.device
    _check_tensor(fn, "k", k, (R, W, None, D), dt, dev)
    nkv = k.shape[2]
    if nq % nkv:
        raise ValueError(f"{fn}: {nq} query heads are not a multiple of {nkv} key heads")
    for name, t in (("v", v), ("k_out", k_out), ("v_out", v_out)):
        _check_tensor(fn, name, t, (R, W, nkv, D), dt, dev)
    for name, t in (("q_norm", q_norm), ("k_norm", k_norm)):
        _check_tensor(fn, name, t, (D,), torch.float32, dev)
    _check_tensor(fn, "cos", cos, (None,), torch.float32, dev)
    rot = cos.shape[0]
    _check_tensor(fn, "sin", sin, (rot,), torch.float32, dev)
    if rot % 2 or not 0 < rot <= D:
        raise ValueError(f"{fn}: rotary dim {rot} must be even and in (0, D={D}]")
    N = R * W
    _check_int32(fn, (q, k, v, k_out, v_out), f"R={R} x W={W} x heads x D={D} (or a row stride)")
    out = torch.empty(R, nkv, W * (nq // nkv), D, dtype=dt, device=dev)
    grid = (triton.cdiv(N, QK_TOKENS), nq + 2 * nkv)
    pdl = _pdl(dev)
    if grid[1] > CUDA_GRID_YZ_MAX:
        raise ValueError(f"{fn}: {nq} + 2 x {nkv} heads exceed the launch grid's y axis ({CUDA_GRID_YZ_MAX})")
    _attn_pre_kernel[grid](
        q, *q.stride()[:3], k, *k.stride()[:3], v, *v.stride()[:3],
        q_norm, k_norm, cos, sin,
        out, k_out, *k_out.stride()[:3], v_out, *v_out.stride()[:3],
        N, W, float(eps),
        NQ=nq, NKV=nkv, D=D, ROT=rot, BT=QK_TOKENS, BD=triton.next_power_of_2(D),
        PDL=pdl, num_warps=QK_WARPS, launch_pdl=pdl,
    )
    return out


# ---- attention: the own-KV merge and the output gate ----

# A merge program holds one (token, KV head): its G query heads x D as a [G, D] tile, and reads the token's own keys
# and values up to MERGE_KEYS at a time ([G, MERGE_KEYS, D] products; a launch takes the power of two >= its key
# count, at most MERGE_KEYS). At the Fig 6 shape (G = 4, D = 256, 4 warps) chunks of 4 compile to 72-96 registers
# and chunks of 8 to 128 (four programs an SM instead of five); the decode's calls have at most 7 own keys.
MERGE_KEYS = 4
MERGE_WARPS = 4


@triton.jit
def _own_offsets(idx_ptr, s_idx, s_hist, jj, r, b, h, NH, GATHER: tl.constexpr):
    """Offsets of history rows jj of token (r, b), KV head h: the row of key j is idx[j, r, b] (GATHER: the
    ancestry's slot at depth j) or b (the beam's own rows)."""
    if GATHER:
        row = tl.load(idx_ptr + jj * s_idx[0] + r * s_idx[1] + b * s_idx[2], mask=jj < NH, other=0)
    else:
        row = b + 0 * jj
    return jj * s_hist[0] + r * s_hist[1] + row * s_hist[2] + h * s_hist[3]


@triton.jit
def _own_rows(h_ptr, c_ptr, off_h, off_c, jj, NH, d, mask_d, HAS_CUR: tl.constexpr):
    """Rows jj of a token's own keys or values as fp32 [BJ, BD]: row j < NH at h_ptr + off_h[j], row NH (the
    current step's, when HAS_CUR) at c_ptr + off_c; the others 0."""
    rows = tl.load(h_ptr + off_h[:, None] + d[None, :], mask=(jj < NH)[:, None] & mask_d[None, :],
                   other=0.0).to(tl.float32)
    if HAS_CUR:
        rows += tl.load(c_ptr + off_c + (0 * jj)[:, None] + d[None, :],
                        mask=(jj == NH)[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
    return rows


@triton.jit
def _merge_kernel(
    op_ptr, so_r, so_w, so_h, so_g,
    lse_ptr, sl_r, sl_w, sl_h, sl_g,
    q_ptr, sq_r, sq_w, sq_h, sq_g,
    kh_ptr, vh_ptr, sh_j, sh_r, sh_w, sh_h,
    idx_ptr, si_j, si_r, si_w,
    kc_ptr, vc_ptr, sc_r, sc_w, sc_h,
    gate_ptr, sg_r, sg_w, sg_h,
    out_ptr,
    NH, NK, W, scale,
    HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr,
    GATHER: tl.constexpr, HAS_CUR: tl.constexpr, HAS_GATE: tl.constexpr,
    BG: tl.constexpr, BD: tl.constexpr, BJ: tl.constexpr,
    PDL: tl.constexpr,
):
    """Programs (token n = r W + b, KV head h). Own key j < NH is row j of the history (h_ptr + j sh_j + r sh_r +
    row sh_w + h sh_h, row = idx[j, r, b] when GATHER, else b); key NH is the current step's (c_ptr, when HAS_CUR).
    NK = NH + HAS_CUR keys in all. merge_own_kv's fp32 algebra: s = (q k) scale, m = max(lse_p, max_j s_j),
    w_p = e^(lse_p - m), w_j = e^(s_j - m), o = (w_p o_p + sum_j w_j v_j) / (w_p + sum_j w_j) -- one pass over
    the keys in chunks of BJ, each key and value row loaded once: a chunk raises the running maximum and rescales
    the sums so far by e^(m_old - m_new) (at NK <= BJ one chunk, whose sums start at zero: exactly the algebra
    above). With HAS_GATE, o is rounded to the output dtype and multiplied by sigmoid(gate) in fp32.
    out [R, W, HKV G, D] contiguous.
    """
    _pdl_start(PDL)
    n = tl.program_id(0)
    h = tl.program_id(1)
    r = n // W
    b = n % W
    g = tl.arange(0, BG)
    d = tl.arange(0, BD)
    mask_g = g < G
    mask_d = d < D
    m2 = mask_g[:, None] & mask_d[None, :]
    q = tl.load(q_ptr + r * sq_r + b * sq_w + h * sq_h + g[:, None] * sq_g + d[None, :], mask=m2,
                other=0.0).to(tl.float32)
    lse = tl.load(lse_ptr + r * sl_r + b * sl_w + h * sl_h + g * sl_g, mask=mask_g, other=0.0).to(tl.float32)
    off_c = r * sc_r + b * sc_w + h * sc_h
    # o_p and the gate load before the key loop, so their latency overlaps the keys'
    o_p = tl.load(op_ptr + r * so_r + b * so_w + h * so_h + g[:, None] * so_g + d[None, :], mask=m2,
                  other=0.0).to(tl.float32)
    if HAS_GATE:
        gt = tl.load(gate_ptr + r * sg_r + b * sg_w + (h * G + g)[:, None] * sg_h + d[None, :], mask=m2,
                     other=0.0).to(tl.float32)
    m = lse
    den = tl.zeros([BG], dtype=tl.float32)
    acc = tl.zeros([BG, BD], dtype=tl.float32)
    c = 0
    while c < NK:                # while: the interpreter cannot range over a run-time scalar
        jj = c + tl.arange(0, BJ)
        off_h = _own_offsets(idx_ptr, (si_j, si_r, si_w), (sh_j, sh_r, sh_w, sh_h), jj, r, b, h, NH, GATHER)
        kt = _own_rows(kh_ptr, kc_ptr, off_h, off_c, jj, NH, d, mask_d, HAS_CUR)
        vt = _own_rows(vh_ptr, vc_ptr, off_h, off_c, jj, NH, d, mask_d, HAS_CUR)
        s = tl.sum(q[:, None, :] * kt[None, :, :], axis=2) * scale                        # [BG, BJ]
        m_new = tl.maximum(m, tl.max(tl.where((jj < NK)[None, :], s, float("-inf")), axis=1))
        w = tl.where((jj < NK)[None, :], tl.exp(s - m_new[:, None]), 0.0)
        rescale = tl.exp(m - m_new)
        den = den * rescale + tl.sum(w, axis=1)
        acc = acc * rescale[:, None] + tl.sum(w[:, :, None] * vt[None, :, :], axis=1)
        m = m_new
        c += BJ
    w_p = tl.exp(lse - m)
    out = (w_p[:, None] * o_p + acc) / (w_p + den)[:, None]
    out_ty = out_ptr.dtype.element_ty
    if HAS_GATE:
        out = out.to(out_ty).to(tl.float32) * (1.0 / (1.0 + tl.exp(-gt)))
    tl.store(out_ptr + ((n * HKV + h) * G + g)[:, None] * D + d[None, :], out.to(out_ty), mask=m2)


def _own_parts(fn: str, name: str, own, R: int, W: int, hkv: int, D: int, dtype, device):
    """(history [., R or ., ., Hkv, D] as (tensor, strides j, r, w, h), index or None, current or None, NH) of a
    KvHistory.own / step output: a tensor [R, W, n, Hkv, D], or an ancestry tuple (store [t, R, W, Hkv, D],
    columns [t, R, W], current [R, W, Hkv, D])."""
    if isinstance(own, tuple):
        if len(own) != 3:
            raise ValueError(f"{fn}: {name} must be a tensor or a (store, columns, current) tuple, got "
                             f"{len(own)} items")
        store, cols, cur = own
        _check_tensor(fn, f"{name}'s store", store, (None, R, None, hkv, D), dtype, device)
        t = store.shape[0]
        _check_tensor(fn, f"{name}'s columns", cols, (t, R, W), (torch.int32, torch.int64), device, False)
        _check_tensor(fn, f"{name}'s current row", cur, (R, W, hkv, D), dtype, device)
        s = store.stride()
        return store, (s[0], s[1], s[2], s[3]), cols, cur, t
    _check_tensor(fn, name, own, (R, W, None, hkv, D), dtype, device)
    s = own.stride()
    return own, (s[2], s[0], s[1], s[3]), None, None, own.shape[2]


def merge_own_kv(o_p, lse_p, qg, k_own, v_own, scale: float, out_dtype=None, gate=None):
    """`artifact.model.attention.merge_own_kv` in one launch: o_p, qg [R, W, Hkv, G, D] and lse_p [R, W, Hkv, G]
    (any strides, contiguous rows), each beam's own keys / values as KvHistory gives them (k_own and v_own laid
    out alike), gate [R, W, Hkv G, D] or None -> [R, W, Hkv G, D] in `out_dtype` (None: fp32), fresh and
    contiguous (o_proj's input layout)."""
    fn = "merge_own_kv"
    dev = qg.device if isinstance(qg, torch.Tensor) else "cpu"
    _check_tensor(fn, "qg", qg, (None,) * 5, DTYPES, dev)
    R, W, hkv, G, D = qg.shape
    _check_tensor(fn, "o_p", o_p, (R, W, hkv, G, D), DTYPES, dev)
    _check_tensor(fn, "lse_p", lse_p, (R, W, hkv, G), torch.float32, dev, False)
    kh, ks, kidx, kcur, NH = _own_parts(fn, "k_own", k_own, R, W, hkv, D, qg.dtype, dev)
    vh, vs, vidx, vcur, vnh = _own_parts(fn, "v_own", v_own, R, W, hkv, D, qg.dtype, dev)
    same_cols = kidx is None or (kidx.data_ptr(), kidx.stride()) == (vidx.data_ptr(), vidx.stride())
    if (ks, vnh, vidx is None, vcur is None) != (vs, NH, kidx is None, kcur is None) or not same_cols or \
            (kcur is not None and kcur.stride() != vcur.stride()):
        raise ValueError(f"{fn}: k_own and v_own must be laid out alike (the same strides, the same columns "
                         f"tensor, the same step count)")
    if gate is not None:
        _check_tensor(fn, "gate", gate, (R, W, hkv * G, D), DTYPES, dev)
    out_dtype = torch.float32 if out_dtype is None else out_dtype
    if out_dtype not in DTYPES:
        raise ValueError(f"{fn}: out_dtype {out_dtype} is not one of {', '.join(map(str, DTYPES))}")
    has_cur = kcur is not None
    idx = kidx if kidx is not None else kh                 # read only when GATHER
    cur_k, cur_v = (kcur, vcur) if has_cur else (kh, vh)   # read only when HAS_CUR
    _check_int32(fn, [t for t in (o_p, lse_p, qg, kh, vh, idx, cur_k, cur_v, gate) if t is not None],
                 f"R={R} x W={W} x Hkv={hkv} x G={G} x D={D} (or a stride)")
    out = torch.empty(R, W, hkv * G, D, dtype=out_dtype, device=dev)
    if R * W == 0:
        return out
    if hkv > CUDA_GRID_YZ_MAX:
        raise ValueError(f"{fn}: {hkv} KV heads exceed the launch grid's y axis ({CUDA_GRID_YZ_MAX})")
    gt = gate if gate is not None else out
    pdl = _pdl(dev)
    _merge_kernel[(R * W, hkv)](
        o_p, *(o_p.stride(i) for i in range(4)),
        lse_p, *(lse_p.stride(i) for i in range(4)),
        qg, *(qg.stride(i) for i in range(4)),
        kh, vh, *ks,
        idx, *((idx.stride(0), idx.stride(1), idx.stride(2)) if kidx is not None else (0, 0, 0)),
        cur_k, cur_v, *((kcur.stride(0), kcur.stride(1), kcur.stride(2)) if has_cur else (0, 0, 0)),
        gt, *((gate.stride(0), gate.stride(1), gate.stride(2)) if gate is not None else (0, 0, 0)),
        out,
        NH, NH + int(has_cur), W, float(scale),
        HKV=hkv, G=G, D=D, GATHER=kidx is not None, HAS_CUR=has_cur, HAS_GATE=gate is not None,
        BG=triton.next_power_of_2(G), BD=triton.next_power_of_2(D),
        BJ=min(MERGE_KEYS, max(1, triton.next_power_of_2(NH + int(has_cur)))),
        PDL=pdl, num_warps=MERGE_WARPS, launch_pdl=pdl,
    )
    return out


# ---- GDN: the gated output norm ----

# Tile of a gated_norm program: GN_ROWS (token, value head) rows x V (V = 128: 16 rows of 256 bytes in bf16).
GN_ROWS = 16
GN_WARPS = 4


@triton.jit
def _gated_norm_kernel(
    o_ptr, so_r, so_w, so_h, z_ptr, sz_r, sz_w, sz_h, w_ptr, out_ptr,
    ROWS, W, HV, eps,
    V: tl.constexpr, BR: tl.constexpr, BV: tl.constexpr,
    PDL: tl.constexpr,
):
    """Programs over rows (token n = r W + b, value head hh), row = n HV + hh: out[row] =
    (o rsqrt(mean o^2 + eps) w) (z / (1 + e^-z)) in fp32 (`gated_rms_norm`'s order), in out's dtype; o and z are
    read through their strides (z: the in_proj output's columns), out [ROWS, V] contiguous."""
    _pdl_start(PDL)
    row = tl.program_id(0) * BR + tl.arange(0, BR)
    mask_r = row < ROWS
    n = row // HV
    hh = row % HV
    r = n // W
    b = n % W
    v = tl.arange(0, BV)
    mask_v = v < V
    m2 = mask_r[:, None] & mask_v[None, :]
    of = tl.load(o_ptr + (r * so_r + b * so_w + hh * so_h)[:, None] + v[None, :], mask=m2, other=0.0).to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(of * of, axis=1) / V + eps)
    y = of * rstd[:, None] * tl.load(w_ptr + v, mask=mask_v, other=0.0)[None, :]
    zf = tl.load(z_ptr + (r * sz_r + b * sz_w + hh * sz_h)[:, None] + v[None, :], mask=m2, other=0.0).to(tl.float32)
    out = y * (zf / (1.0 + tl.exp(-zf)))
    tl.store(out_ptr + row[:, None] * V + v[None, :], out.to(out_ptr.dtype.element_ty), mask=m2)


def gated_norm(o, z, norm_w, eps: float):
    """`artifact.model.blocks.gated_norm` in one launch: o, z [R, W, HV, V] (any strides, contiguous rows; z is a
    view into the in_proj output), norm_w [V] fp32 -> [R, W, HV V] in o's dtype, fresh and contiguous (out_proj's
    input)."""
    fn = "gated_norm"
    dev = o.device if isinstance(o, torch.Tensor) else "cpu"
    _check_tensor(fn, "o", o, (None,) * 4, DTYPES, dev)
    R, W, HV, V = o.shape
    _check_tensor(fn, "z", z, (R, W, HV, V), DTYPES, dev)
    _check_tensor(fn, "norm_w", norm_w, (V,), torch.float32, dev)
    _check_int32(fn, (o, z), f"R={R} x W={W} x HV={HV} x V={V} (or a row stride)")
    out = torch.empty(R, W, HV * V, dtype=o.dtype, device=dev)
    rows = R * W * HV
    if rows:
        pdl = _pdl(dev)
        _gated_norm_kernel[(triton.cdiv(rows, GN_ROWS),)](
            o, *o.stride()[:3], z, *z.stride()[:3], norm_w, out, rows, W, HV, float(eps),
            V=V, BR=GN_ROWS, BV=triton.next_power_of_2(V), PDL=pdl, num_warps=GN_WARPS, launch_pdl=pdl,
        )
    return out
