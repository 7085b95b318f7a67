"""OneLA's fused shared-context decode kernel (paper §3.4) and the `onela` path.

Two launches per decode step (kernels/NOTES.md, v4; one at step 0 by default, below):
- `_onela_prep_kernel`, once per (request, key head, beam tile): everything on the key axis and every per-beam
  scalar -- L2 norms (with the K^-1/2 scale), k-hat_t and alpha_t = exp(g) of the new GTR, beam b's ancestry
  row (read at row parent(b) of the previous table, written to the other of two ping-pong tables: a gather
  of indices, never of records), the dot products k-hat_j . q-hat and k-hat_j . k-hat of every ancestral
  record, and the suffix products of the ancestral alphas, as a small coefficient table.
- `_onela_main_kernel`, one program per (BV tile of V, beam_iters beam tiles, request x value head): loads the
  S_ctx[r, hv][BV, K] tile once and uses it for every beam of its tiles (v7) -- u_q = q S^T and u_k = k S^T are
  [BB, K] x [K, BV] tensor-core products of bf16 q, k against S in bf16 (config s_lo: S may also be split into
  bf16 hi + lo for either product, fp32-level accuracy at twice the MMAs; the defaults use the lo plane for u_q
  at K > 128 and for neither at K <= 128, measured within the error bound; kernels/NOTES.md says why not tf32)
  -- then replays the ancestral GTRs in closed form,
  u = P u0 + sum_j c_j delta_j, each delta_j gathered through the ancestry row independently of the others,
  forms delta_t and o_t, and appends delta_t.
Only the new GTR (alpha fp32, delta bf16, k-hat bf16) is written; no per-beam [V, K] state ever is.
v8: the replay is a pipelined loop over depths, and both kernels use programmatic dependent launch (Hopper):
each reads only its step's inputs before `griddepcontrol.wait` and everything earlier launches wrote after it,
so a launch's S tile load and split (or first projections) overlap the previous launch's tail.
Stop 21 (config fuse_step0, K <= 128 with at most 2 value heads per key head): step 0 has nothing to replay, so
the main kernel does the prep kernel's step-0 work from the q, k tile it loads anyway, and step 0 is one launch.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra import cuda as tl_cuda

from artifact.ancestry import build as build_ancestry
from artifact.gtr import GtrStore
from artifact.paths import Stepper, StepperPath
from kernels.onela_ws import (VC_TILE, _rec, launch_ws, ws_launch_params, ws_layout_supports, ws_mode,
                              ws_shape_supports)


@triton.jit
def _mm(a, b, UPCAST: tl.constexpr):
    """a @ b with fp32 accumulation; UPCAST (CPU interpreter only, whose bf16 tl.dot is broken in Triton 3.6)
    multiplies the same bf16 values as exact fp32 -- identical math."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    return tl.dot(a, b)


@triton.jit
def _norms(qf, kf, K: tl.constexpr):
    """(inv_q, inv_k, k-hat . q-hat) of fp32 q, k rows [BB, K]: q-hat = q * inv_q (with the K^-1/2 scale),
    k-hat = k * inv_k, eps as fla's l2norm. One definition for the prep kernel and the one-launch step 0."""
    inv_q = tl.rsqrt(tl.sum(qf * qf, axis=1) + 1e-6) * (K ** -0.5)
    inv_k = tl.rsqrt(tl.sum(kf * kf, axis=1) + 1e-6)
    return inv_q, inv_k, tl.sum(qf * kf, axis=1) * inv_q * inv_k


@triton.jit
def _store_khat(khat_ptr, row, kf, inv_k, mask, K: tl.constexpr):
    """The key part of records at rows `row` [BB]: k-hat = k * inv_k (fp32 k rows [BB, K])."""
    tl.store(khat_ptr + row.to(tl.int64)[:, None] * K + tl.arange(0, K)[None, :],
             (kf * inv_k[:, None]).to(khat_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _key_axis(q_ptr, k_ptr, par_ptr, anc_prev_ptr, khat_ptr, qk_row, r, hk, R, W, HK, T_CAP, offs_b, mask_b,
              khat_mask, K: tl.constexpr, STEP: tl.constexpr, TP: tl.constexpr, BB: tl.constexpr,
              PDL: tl.constexpr):
    """The key-axis work of step STEP for BB beams of key head hk: L2 norms (with the K^-1/2 scale), k-hat_t
    stored where `khat_mask`, beam b's ancestry row h_t(b, j) = h_{t-1}(parent(b), j) for j < t-1 and
    h_t(b, t-1) = parent(b), and k-hat_j . q-hat / k-hat_j . k-hat of every ancestral record, as [BB, TP]
    columns. Returns (inv_q, inv_k, kq_t, slots, kqs, kks). Before the PDL wait it reads only this step's
    inputs (q, k); every store and every read of the store or the ancestry comes after it."""
    offs_k = tl.arange(0, K)
    offs_t = tl.arange(0, TP)
    qk_off = qk_row[:, None] + offs_k[None, :]
    qf = tl.load(q_ptr + qk_off, mask=mask_b[:, None], other=0.0).to(tl.float32)
    kf = tl.load(k_ptr + qk_off, mask=mask_b[:, None], other=0.0).to(tl.float32)
    inv_q, inv_k, kq_t = _norms(qf, kf, K)
    if PDL:
        tl_cuda.gdc_wait()       # the previous launch (and, through its own wait, every earlier one) is done
    _store_khat(khat_ptr, _rec(STEP, r, hk, offs_b, R, HK, W), kf, inv_k, khat_mask, K)
    slots = tl.zeros([BB, TP], dtype=tl.int32)
    kqs = tl.zeros([BB, TP], dtype=tl.float32)
    kks = tl.zeros([BB, TP], dtype=tl.float32)
    if STEP > 0:
        par = tl.load(par_ptr + r * W + offs_b, mask=mask_b, other=0)
        for j in tl.static_range(STEP):
            if j == STEP - 1:
                slot = par
            else:
                slot = tl.load(anc_prev_ptr + (r * W + par) * T_CAP + j, mask=mask_b, other=0)
            slots = tl.where(offs_t[None, :] == j, slot[:, None], slots)
            k_j = tl.load(khat_ptr + _rec(j, r, hk, slot, R, HK, W).to(tl.int64)[:, None] * K + offs_k[None, :],
                          mask=mask_b[:, None], other=0.0).to(tl.float32)
            kqs = tl.where(offs_t[None, :] == j, (tl.sum(k_j * qf, axis=1) * inv_q)[:, None], kqs)
            kks = tl.where(offs_t[None, :] == j, (tl.sum(k_j * kf, axis=1) * inv_k)[:, None], kks)
    return inv_q, inv_k, kq_t, slots, kqs, kks


@triton.jit
def _onela_prep_kernel(
    q_ptr, k_ptr, g_ptr, par_ptr, anc_prev_ptr, anc_next_ptr, alpha_ptr, khat_ptr, coef_ptr,
    R, W, HV, HK, T_CAP,
    sq_r, sq_w, sq_h,
    K: tl.constexpr, G: tl.constexpr, STEP: tl.constexpr, TP: tl.constexpr, BB: tl.constexpr,
    PDL: tl.constexpr, ALPHA_TILE: tl.constexpr,
):
    """Everything of step STEP that lives on the key axis or is a per-beam scalar, once per key head.

    Writes beam b's ancestry row, k-hat_t (the new GTR's key), alpha_t, and for each value head of the group
    the coefficients of the closed-form replay (module docstring), so the main kernel needs no K-axis work
    beyond its two projections and no dependent loads. ALPHA_TILE (config prep_alpha_tile) gathers every depth's
    alpha as one [BB, TP] tile before the suffix products; otherwise each depth's alpha gather sits behind the
    previous depth's product and stores (a chain of STEP dependent memory round trips: kernels/NOTES.md, stop
    17). The products are formed in the same order either way."""
    if PDL:
        tl_cuda.gdc_launch_dependents()     # the main kernel may start its S load and projections meanwhile
    pid_b = tl.program_id(0)
    pid_rh = tl.program_id(1)
    r = pid_rh // HK
    hk = pid_rh % HK
    offs_b = pid_b * BB + tl.arange(0, BB)
    mask_b = offs_b < W
    offs_t = tl.arange(0, TP)
    rw = r * W + offs_b

    qk_row = r * sq_r + offs_b * sq_w + hk * sq_h
    inv_q, inv_k, kq_t, slots, kqs, kks = _key_axis(
        q_ptr, k_ptr, par_ptr, anc_prev_ptr, khat_ptr, qk_row, r, hk, R, W, HK, T_CAP, offs_b, mask_b,
        mask_b[:, None], K, STEP, TP, BB, PDL)
    if STEP > 0:
        if hk == 0:
            tl.store(anc_next_ptr + rw[:, None] * T_CAP + offs_t[None, :], slots,
                     mask=mask_b[:, None] & (offs_t[None, :] < STEP))

    # per value head: u_t = alpha_t * (P u0 + sum_j c_j (k_j . x) delta_j), c_j = prod_{i>j} alpha_i, P = c_{-1}.
    # Coefficient table coef[col, r, hv, b]: 0 = alpha_t P inv_q, 1 = alpha_t P inv_k, 2 = k-hat . q-hat,
    # 3 + 2j = alpha_t c_j (k_j . q-hat), 4 + 2j = alpha_t c_j (k_j . k-hat).
    plane = R * HV * W
    for i in tl.static_range(G):
        hv = hk * G + i
        gb_off = rw * HV + hv
        alpha = tl.exp(tl.load(g_ptr + gb_off, mask=mask_b, other=0.0))
        tl.store(alpha_ptr + _rec(STEP, r, hv, offs_b, R, HV, W), alpha, mask=mask_b)
        base = coef_ptr + (r * HV + hv) * W + offs_b
        c = alpha                                          # alpha_t * prod_{i > j} alpha_i, built from j = t-1 down
        if ALPHA_TILE:   # every depth's alpha in one gather, issued before the chain below (no load in the chain)
            depth = offs_t[None, :]
            alphas = tl.load(alpha_ptr + _rec(depth, r, hv, slots, R, HV, W),
                             mask=mask_b[:, None] & (depth < STEP), other=1.0)
        for jj in tl.static_range(STEP):
            j = STEP - 1 - jj
            kq = tl.sum(tl.where(offs_t[None, :] == j, kqs, 0.0), axis=1)
            kk = tl.sum(tl.where(offs_t[None, :] == j, kks, 0.0), axis=1)
            tl.store(base + (3 + 2 * j) * plane, c * kq, mask=mask_b)
            tl.store(base + (4 + 2 * j) * plane, c * kk, mask=mask_b)
            if ALPHA_TILE:
                c = c * tl.sum(tl.where(offs_t[None, :] == j, alphas, 0.0), axis=1)
            else:
                slot = tl.sum(tl.where(offs_t[None, :] == j, slots, 0), axis=1)
                c = c * tl.load(alpha_ptr + _rec(j, r, hv, slot, R, HV, W), mask=mask_b, other=1.0)
        tl.store(base, c * inv_q, mask=mask_b)
        tl.store(base + plane, c * inv_k, mask=mask_b)
        tl.store(base + 2 * plane, kq_t, mask=mask_b)


@triton.jit
def _s_split(s_ptr, s_row, offs_k, S_LO: tl.constexpr):
    """S[rows, offs_k] (fp32) split into bf16 hi + lo (16 significant bits), transposed for the dots. bf16 q, k
    are exact in bf16, so two bf16 products give S q to about fp32 accuracy at the bf16 rate (tf32 would round S
    to 11 bits: kernels/NOTES.md). S_LO == 0: no product takes the lo plane, so it is not formed (hi returned
    twice)."""
    s_tile = tl.load(s_ptr + s_row[:, None] + offs_k[None, :])                  # [BV, BK] fp32
    s_hi = s_tile.to(tl.bfloat16)
    if S_LO == 0:   # no projection uses the lo plane (config s_lo "none")
        return tl.trans(s_hi), tl.trans(s_hi)
    s_lo = (s_tile - s_hi.to(tl.float32)).to(tl.bfloat16)
    return tl.trans(s_hi), tl.trans(s_lo)


@triton.jit
def _qk_load(q_ptr, k_ptr, qk_row, offs_k, mask_b):
    """Raw q, k [BB, len(offs_k)] of the beam tile."""
    q_in = tl.load(q_ptr + qk_row[:, None] + offs_k[None, :], mask=mask_b[:, None], other=0.0)
    k_in = tl.load(k_ptr + qk_row[:, None] + offs_k[None, :], mask=mask_b[:, None], other=0.0)
    return q_in, k_in


@triton.jit
def _qk_dots(q_in, k_in, s_hi_t, s_lo_t, QK_BF16: tl.constexpr, UPCAST: tl.constexpr, S_LO: tl.constexpr):
    """u_q = q S^T and u_k = k S^T (raw q, k) against a split S tile: [BB, BV] each. S_LO says which products
    also take S's lo plane: 2 both, 1 u_q only, 0 neither. Inputs other than bf16 are split too (bf16 part +
    residual; the residual against S's hi plane only)."""
    if QK_BF16:
        qb = q_in
        kb = k_in
    else:
        qf = q_in.to(tl.float32)
        kf = k_in.to(tl.float32)
        qb = qf.to(tl.bfloat16)
        kb = kf.to(tl.bfloat16)
    u_q = _mm(qb, s_hi_t, UPCAST)          # u_q's products, then u_k's: this order compiles to the fewest
    if S_LO >= 1:                            # registers (u_k's interleaved spilled 120-192 bytes at K = 128)
        u_q += _mm(qb, s_lo_t, UPCAST)
    if not QK_BF16:
        u_q += _mm((qf - qb.to(tl.float32)).to(tl.bfloat16), s_hi_t, UPCAST)
    u_k = _mm(kb, s_hi_t, UPCAST)
    if S_LO == 2:
        u_k += _mm(kb, s_lo_t, UPCAST)
    if not QK_BF16:
        u_k += _mm((kf - kb.to(tl.float32)).to(tl.bfloat16), s_hi_t, UPCAST)
    return u_q, u_k


@triton.jit
def _projections(q_ptr, k_ptr, s_ptr, qk_row, s_row, mask_b, s_hi_t, s_lo_t, K: tl.constexpr, BB: tl.constexpr,
                 BV: tl.constexpr, BK: tl.constexpr, K_STAGES: tl.constexpr, QK_FIRST: tl.constexpr,
                 QK_BF16: tl.constexpr, UPCAST: tl.constexpr, S_LO: tl.constexpr):
    """u_q, u_k [BB, BV] over all of K: against the program's split S tile (BK == K, split once by the caller
    and reused for every beam tile it runs), or K in chunks of BK, each chunk of S loaded and split here (fewer
    live registers, and Triton can pipeline the chunks' loads over K_STAGES). QK_FIRST issues a chunk's q, k
    loads before its S load and split, as d5ff80e did; v7 had moved them after, which made K = 256 17-20 %
    slower (kernels/NOTES.md, stop 18)."""
    if BK == K:
        q_in, k_in = _qk_load(q_ptr, k_ptr, qk_row, tl.arange(0, K), mask_b)
        u_q, u_k = _qk_dots(q_in, k_in, s_hi_t, s_lo_t, QK_BF16, UPCAST, S_LO)
    else:
        u_q = tl.zeros([BB, BV], dtype=tl.float32)
        u_k = tl.zeros([BB, BV], dtype=tl.float32)
        for kc in tl.range(0, K, BK, num_stages=K_STAGES):
            offs_k = kc + tl.arange(0, BK)
            if QK_FIRST:
                q_in, k_in = _qk_load(q_ptr, k_ptr, qk_row, offs_k, mask_b)
                c_hi_t, c_lo_t = _s_split(s_ptr, s_row, offs_k, S_LO)
            else:
                c_hi_t, c_lo_t = _s_split(s_ptr, s_row, offs_k, S_LO)
                q_in, k_in = _qk_load(q_ptr, k_ptr, qk_row, offs_k, mask_b)
            d_q, d_k = _qk_dots(q_in, k_in, c_hi_t, c_lo_t, QK_BF16, UPCAST, S_LO)
            u_q += d_q
            u_k += d_k
    return u_q, u_k


@triton.jit
def _s_tile(s_ptr, s_row, K: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, S_LO: tl.constexpr):
    """The program's split S tile when the projection is one tile (BK == K); dummies for the K-chunked one."""
    if BK == K:
        s_hi_t, s_lo_t = _s_split(s_ptr, s_row, tl.arange(0, K), S_LO)
    else:
        s_hi_t = tl.zeros([16, 16], dtype=tl.bfloat16)
        s_lo_t = s_hi_t
    return s_hi_t, s_lo_t


@triton.jit
def _write_step(u_q, u_k, kq_t, v_ptr, beta_ptr, out_ptr, delta_ptr, r, hv, R, W, HV, offs_b, mask_b, offs_v,
                sv_r, sv_w, sv_h, V: tl.constexpr, STEP: tl.constexpr):
    """delta_t = beta (v - u_k) and o_t = u_q + delta_t (k-hat . q-hat) from the replayed projections; stores
    o_t and appends delta_t as the new GTR's value part (written once)."""
    gb_off = (r * W + offs_b) * HV + hv
    beta = tl.load(beta_ptr + gb_off, mask=mask_b, other=0.0)
    v = tl.load(v_ptr + r * sv_r + offs_b[:, None] * sv_w + hv * sv_h + offs_v[None, :],
                mask=mask_b[:, None], other=0.0).to(tl.float32)
    delta = beta[:, None] * (v - u_k)
    o = u_q + delta * kq_t[:, None]
    row_v = gb_off.to(tl.int64)[:, None] * V + offs_v[None, :]
    tl.store(out_ptr + row_v, o.to(out_ptr.dtype.element_ty), mask=mask_b[:, None])
    tl.store(delta_ptr + _rec(STEP, r, hv, offs_b, R, HV, W).to(tl.int64)[:, None] * V + offs_v[None, :],
             delta.to(delta_ptr.dtype.element_ty), mask=mask_b[:, None])


@triton.jit
def _head_tile(s_ptr, HV, G: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr,
               S_LO: tl.constexpr):
    """This program's (request, value head, key head), its V columns and its split S_ctx[r, hv] tile -- what it
    keeps for every beam tile it runs."""
    pid_v = tl.program_id(0)          # fastest: the V tiles of one beam tile run together and share q, k in L2
    pid_rh = tl.program_id(2)
    r = pid_rh // HV
    hv = pid_rh % HV
    offs_v = pid_v * BV + tl.arange(0, BV)
    s_row = (r * HV + hv).to(tl.int64) * (V * K) + offs_v * K
    s_hi_t, s_lo_t = _s_tile(s_ptr, s_row, K, BV, BK, S_LO)
    return r, hv, hv // G, offs_v, s_row, s_hi_t, s_lo_t


@triton.jit
def _replay_depth(u_q, u_k, j, anc_ptr, delta_ptr, cbase, rw, r, hv, R, W, HV, T_CAP, plane, offs_v, mask_b,
                  V: tl.constexpr):
    """Add depth j's ancestral record: u += c_j (k_j . x) delta_j, delta_j gathered through the ancestry row."""
    slot = tl.load(anc_ptr + rw * T_CAP + j, mask=mask_b, other=0)
    d_j = tl.load(delta_ptr + _rec(j, r, hv, slot, R, HV, W).to(tl.int64)[:, None] * V + offs_v[None, :],
                  mask=mask_b[:, None], other=0.0).to(tl.float32)
    u_q += tl.load(cbase + (3 + 2 * j) * plane, mask=mask_b, other=0.0)[:, None] * d_j
    u_k += tl.load(cbase + (4 + 2 * j) * plane, mask=mask_b, other=0.0)[:, None] * d_j
    return u_q, u_k


@triton.jit
def _step0_records(alpha_ptr, khat_ptr, alpha, kf, inv_k, r, offs_b, hv, hk, R, W, HV, HK, mask_b, G: tl.constexpr,
                   K: tl.constexpr):
    """Step 0's records of the beam tile: alpha_0 of value head hv and, from the group's first value head, k-hat_0
    of key head hk; written by the first V tile's program only."""
    if tl.program_id(0) == 0:
        tl.store(alpha_ptr + _rec(0, r, hv, offs_b, R, HV, W), alpha, mask=mask_b)
        if hv % G == 0:
            _store_khat(khat_ptr, _rec(0, r, hk, offs_b, R, HK, W), kf, inv_k, mask_b[:, None], K)


@triton.jit
def _onela_main_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, anc_ptr, coef_ptr, alpha_ptr, khat_ptr, delta_ptr, out_ptr,
    R, W, HV, HK, T_CAP,
    sq_r, sq_w, sq_h, sv_r, sv_w, sv_h,
    K: tl.constexpr, V: tl.constexpr, G: tl.constexpr, STEP: tl.constexpr,
    BB: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, K_STAGES: tl.constexpr, QK_FIRST: tl.constexpr,
    BEAM_ITERS: tl.constexpr, LOOP_STAGES: tl.constexpr, REPLAY_STAGES: tl.constexpr, QK_BF16: tl.constexpr,
    UPCAST: tl.constexpr, PDL: tl.constexpr, PDL_NEXT: tl.constexpr, S_LO: tl.constexpr, KEY_AXIS: tl.constexpr,
):
    """The shared-context part: one S_ctx[BV, K] tile, loaded and split once, used for the BEAM_ITERS beam
    tiles of BB beams this program runs -- both projections on the tensor cores, the replay as a weighted sum
    of gathered delta rows (independent loads), delta_t and o_t. With PDL (v8) the S tile and the first beam
    tile's projections -- reads of this step's inputs only -- overlap the prep kernel; the wait comes before
    the first read of what prep writes. PDL_NEXT lets the next launch (the next step's prep) start early too:
    its q, k loads then overlap this kernel's tail, which needs the next step's inputs ready -- true in the
    operator benchmark, not in a model decode, where the layers between steps produce them.

    KEY_AXIS (step 0 only, one S tile over all of K; config fuse_step0): the program also does the prep kernel's
    step-0 work for its beams -- q, k norms and k-hat . q-hat from the q, k tile it loads for the projections,
    alpha = exp(g), and the k-hat_0 and alpha_0 records -- so step 0 is one launch and q, k are read once."""
    if PDL and PDL_NEXT:
        tl_cuda.gdc_launch_dependents()     # the next step's prep may start its q, k loads meanwhile
    pid_b = tl.program_id(1)
    r, hv, hk, offs_v, s_row, s_hi_t, s_lo_t = _head_tile(s_ptr, HV, G, K, V, BV, BK, S_LO)
    if PDL == 2:
        tl_cuda.gdc_wait()          # only the S tile's load and split overlap the prep kernel
    plane = R * HV * W
    for it in tl.range(0, BEAM_ITERS, num_stages=LOOP_STAGES):
        offs_b = (pid_b * BEAM_ITERS + it) * BB + tl.arange(0, BB)
        mask_b = offs_b < W
        rw = r * W + offs_b
        qk_row = r * sq_r + offs_b * sq_w + hk * sq_h
        cbase = coef_ptr + (r * HV + hv) * W + offs_b
        if KEY_AXIS:                # step 0's prep work, from the tile this program loads anyway (see above)
            q_in, k_in = _qk_load(q_ptr, k_ptr, qk_row, tl.arange(0, K), mask_b)
            qf = q_in.to(tl.float32)
            kf = k_in.to(tl.float32)
            inv_q, inv_k, kq_t = _norms(qf, kf, K)
            alpha = tl.exp(tl.load(g_ptr + rw * HV + hv, mask=mask_b, other=0.0))
            if PDL != 1:            # already past the wait: the records go out before the dots (fewer live registers)
                _step0_records(alpha_ptr, khat_ptr, alpha, kf, inv_k, r, offs_b, hv, hk, R, W, HV, HK, mask_b, G, K)
            u_q, u_k = _qk_dots(q_in, k_in, s_hi_t, s_lo_t, QK_BF16, UPCAST, S_LO)
            if PDL == 1:
                tl_cuda.gdc_wait()  # every store comes after the previous launch is done
                _step0_records(alpha_ptr, khat_ptr, alpha, kf, inv_k, r, offs_b, hv, hk, R, W, HV, HK, mask_b, G, K)
            u_q = u_q * (alpha * inv_q)[:, None]
            u_k = u_k * (alpha * inv_k)[:, None]
        else:
            u_q, u_k = _projections(q_ptr, k_ptr, s_ptr, qk_row, s_row, mask_b, s_hi_t, s_lo_t, K, BB, BV, BK,
                                    K_STAGES, QK_FIRST, QK_BF16, UPCAST, S_LO)
            if PDL == 1:
                tl_cuda.gdc_wait()      # prep of this step is done (a no-op after the first beam tile)
            u_q = u_q * tl.load(cbase, mask=mask_b, other=0.0)[:, None]
            u_k = u_k * tl.load(cbase + plane, mask=mask_b, other=0.0)[:, None]
            kq_t = tl.load(cbase + 2 * plane, mask=mask_b, other=0.0)
        if REPLAY_STAGES == 0:      # unrolled: every depth's gather can be issued at once (registers permitting)
            for j in tl.static_range(STEP):
                u_q, u_k = _replay_depth(u_q, u_k, j, anc_ptr, delta_ptr, cbase, rw, r, hv, R, W, HV, T_CAP,
                                         plane, offs_v, mask_b, V)
        else:                       # a loop: one depth's rows live at a time, the next prefetched (REPLAY_STAGES)
            for j in tl.range(0, STEP, num_stages=REPLAY_STAGES):
                u_q, u_k = _replay_depth(u_q, u_k, j, anc_ptr, delta_ptr, cbase, rw, r, hv, R, W, HV, T_CAP,
                                         plane, offs_v, mask_b, V)

        _write_step(u_q, u_k, kq_t, v_ptr, beta_ptr, out_ptr, delta_ptr, r, hv, R, W, HV, offs_b, mask_b,
                    offs_v, sv_r, sv_w, sv_h, V, STEP)


@triton.jit
def _onela_fused_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, par_ptr, anc_prev_ptr, anc_next_ptr, alpha_ptr, khat_ptr,
    delta_ptr, out_ptr,
    R, W, HV, T_CAP,
    sq_r, sq_w, sq_h, sv_r, sv_w, sv_h,
    K: tl.constexpr, V: tl.constexpr, G: tl.constexpr, STEP: tl.constexpr, TP: tl.constexpr,
    BB: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, K_STAGES: tl.constexpr, QK_FIRST: tl.constexpr,
    BEAM_ITERS: tl.constexpr, LOOP_STAGES: tl.constexpr, QK_BF16: tl.constexpr, UPCAST: tl.constexpr,
    S_LO: tl.constexpr,
):
    """v6: the prep and main kernels in one launch (kernels/NOTES.md). Each program does its own key-axis work
    (`_key_axis`, then the suffix products) before the projections, so no coefficient table goes through
    memory and q, k are read once per step; a key head's work is repeated for each of its G value heads and
    each V tile (L2 hits). The first V tile of each (value head, beam tile) writes alpha_t, the first value
    head of a key head k-hat_t, value head 0 the ancestry row."""
    pid_b = tl.program_id(1)
    r, hv, hk, offs_v, s_row, s_hi_t, s_lo_t = _head_tile(s_ptr, HV, G, K, V, BV, BK, S_LO)
    offs_t = tl.arange(0, TP)
    first_v = tl.program_id(0) == 0
    for it in tl.range(0, BEAM_ITERS, num_stages=LOOP_STAGES):
        offs_b = (pid_b * BEAM_ITERS + it) * BB + tl.arange(0, BB)
        mask_b = offs_b < W
        rw = r * W + offs_b
        qk_row = r * sq_r + offs_b * sq_w + hk * sq_h
        inv_q, inv_k, kq_t, slots, kqs, kks = _key_axis(
            q_ptr, k_ptr, par_ptr, anc_prev_ptr, khat_ptr, qk_row, r, hk, R, W, HV // G, T_CAP, offs_b, mask_b,
            mask_b[:, None] & first_v & (hv % G == 0), K, STEP, TP, BB, False)
        alpha = tl.exp(tl.load(g_ptr + rw * HV + hv, mask=mask_b, other=0.0))
        tl.store(alpha_ptr + _rec(STEP, r, hv, offs_b, R, HV, W), alpha, mask=mask_b & first_v)
        if STEP > 0:
            tl.store(anc_next_ptr + rw[:, None] * T_CAP + offs_t[None, :], slots,
                     mask=mask_b[:, None] & (offs_t[None, :] < STEP) & first_v & (hv == 0))
        # suffix products: c_j = alpha_t * prod_{i > j} alpha_i (column j of cs), and P = alpha_t * prod_j alpha_j
        cs = tl.zeros([BB, TP], dtype=tl.float32)
        c = alpha
        for jj in tl.static_range(STEP):
            j = STEP - 1 - jj
            col = offs_t[None, :] == j
            cs = tl.where(col, c[:, None], cs)
            slot = tl.sum(tl.where(col, slots, 0), axis=1)
            c = c * tl.load(alpha_ptr + _rec(j, r, hv, slot, R, HV, W), mask=mask_b, other=1.0)

        u_q, u_k = _projections(q_ptr, k_ptr, s_ptr, qk_row, s_row, mask_b, s_hi_t, s_lo_t, K, BB, BV, BK,
                                K_STAGES, QK_FIRST, QK_BF16, UPCAST, S_LO)
        u_q = u_q * (c * inv_q)[:, None]
        u_k = u_k * (c * inv_k)[:, None]
        cq = cs * kqs
        ck = cs * kks
        for j in tl.static_range(STEP):
            col = offs_t[None, :] == j
            slot = tl.sum(tl.where(col, slots, 0), axis=1)
            d_j = tl.load(delta_ptr + _rec(j, r, hv, slot, R, HV, W).to(tl.int64)[:, None] * V + offs_v[None, :],
                          mask=mask_b[:, None], other=0.0).to(tl.float32)
            u_q += tl.sum(tl.where(col, cq, 0.0), axis=1)[:, None] * d_j
            u_k += tl.sum(tl.where(col, ck, 0.0), axis=1)[:, None] * d_j

        _write_step(u_q, u_k, kq_t, v_ptr, beta_ptr, out_ptr, delta_ptr, r, hv, R, W, HV, offs_b, mask_b,
                    offs_v, sv_r, sv_w, sv_h, V, STEP)


_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _pow2(x: int) -> bool:
    return x >= 16 and (x & (x - 1)) == 0


def launch_config(K: int, V: int, W: int, R: int = 1, HV: int = 1, n_sm: int = 132, G: int = 1) -> dict:
    """Tile sizes and warps of both kernels, from the H200 tuning sweeps of kernels/NOTES.md. K <= 128: BB=64,
    BV=128, 4 warps (fastest at all four R x O cells of K = V = 128). K = 256: BV=64 and the projection in
    K-chunks of 64, 1 stage (2 stages were 1.6-1.8x faster than one [BV, 256] tile at R=4 on both K = 256
    geometries, 1 stage another 8-10 %; why is not profiled yet: kernels/NOTES.md).

    beam_iters (K <= 128 only, where the S tile is split once per program): each main-kernel program runs that
    many beam tiles, the most (up to 8) that still leaves ~2 programs per SM -- one wave at the 2 blocks per SM
    its registers allow (v7). replay_stages = 3: the replay as a pipelined loop over depths, which bounds its
    registers, so the beam loop no longer spills past step 2 and runs at every step (loop_max_step None; an
    int limits it to steps <= that). pdl (v8): programmatic dependent launch -- each launch starts while the
    previous one finishes and waits (griddepcontrol.wait) only before its first read of what that one wrote:
    2 when a program runs several beam tiles (the wait after the S tile's load and split, so every tile's loop
    body is the same), 1 when it runs one (the wait after that tile's projections, which then overlap too; at
    K = 256 there is no S tile to overlap). Measured in kernels/NOTES.md (v8). qk_first (K-chunked): each
    chunk issues its q, k loads before its S load and split -- 17-20 % faster at K = 256 than the other order
    (stop 18). The prep kernel: 16-beam tiles with the ancestral alphas in one gather (prep_alpha_tile; at 32
    beams its [BB, K] k-hat rows spill past step 3 at K = 256): 3-5 % off O=7 at K = 256 (stop 18).
    s_lo (stop 19): which projections also take S's bf16 lo plane. K > 128: u_q only ("q"; u_k against S rounded to
    bf16): 5-8 % faster on both K = 256 geometries with the same max error. K <= 128: neither ("none"), with the
    prep kernel above: 3-13 % faster on five K = 128 geometries, max error unchanged on 67 of 76 worst-error
    shapes and 0.93-1.08x on the rest (adopted at stop 20; kernels/NOTES.md). fuse_step0 (stop 21, where the S tile
    spans K and a key head has at most G = 2 value heads): step 0 is one launch, the main kernel doing the prep
    kernel's step-0 work -- 1.2-6.0 % faster at the four Qwen3.5-0.8B cells in one run; with G = 4 (qwen3_5_397b,
    range_hk4_hv16) the operator rows ran up to 7 % slower than two launches', so G > 2 keeps them
    (kernels/NOTES.md).
    ws (stop 23 at K = V = 128; since stop 30 K = 128 with V a multiple of 128, each value head as chunks of 128
    columns; kernels/onela_ws.py): the warp-specialised Gluon kernel on Hopper wherever it applies (W a multiple of
    64, bf16 [R, W, H, D] rows; elsewhere the Triton kernels above run) -- "all", one launch per step, at G <= 2:
    0.72-0.82x the Triton kernels' time at the four Qwen3.5-0.8B cells in one run (stop 25, bench_ba9ec0e.log; its
    producer issues the next tile's dependent key loads early and the first parents before the grid-dependency
    wait, its consumer sums the key axis within warps and loops over the depths at run time), 0.79-0.93x at
    gdn_small (V = 256) R=4 / R=16 W=512 (stop 30); "main" (after the Triton prep kernel) at G > 2, where the
    one-launch kernel would gather each key head's k-hat rows G times: 0.88-0.96x at qwen3_5_397b R=4 and R=16
    O=7, 1.016x at R=16 O=3, 0.86-0.95x at range_hk4_hv16 (V = 256; stop 30) (kernels/NOTES.md). Its ring of
    gathered rows takes ws_ring entries (None: 5, what shared memory allows; 4 timed -0.7 to +2.4 %, 3 0-3 %
    slower), the producer warpgroup ws_regs registers (88: no spills at step 5), the launch ws_maxnreg (168 x 12
    warps fills the register file of one SM). ws_kh_own_upto (stop 28, adopted as 1 at stop 29): at steps <= it
    the one-launch kernel stores k-hat_t through a shared-memory buffer of its own, the ring one entry shorter
    (None: 4), so a tile waits for the TMA store engine once instead of twice; -1: never. 1 was -0.5 / -1.0 / -0.1
    / -0.3 % at R=4 O=7 / R=4 O=3 / R=16 O=7 / R=16 O=3 in one run, 5 +1.0 / -1.2 / +0.9 / -0.2 % (the shorter
    ring costs the deep steps; kernels/NOTES.md, stop 29). ws_even_upto (stop 29): at steps <= it the grid is
    the most programs <= one per SM that split the beam tiles evenly into head-aligned ranges (R=4 W=512: 128
    programs x 4 tiles instead of 132 x 3-4); -1: never. At every step it was -1.3 / +0.6 / -3.3 / -1.9 % at R=4 O=3
    / R=4 O=7 / R=16 O=3 / R=16 O=7 in one run, but +1.6 % at qwen3_5_397b R=4 O=3 ("main"); not adopted yet
    (kernels/NOTES.md, stop 29 and "Next" 1). ws_step_upto (stop 30, default 1): where ws is "main" (G > 2), steps
    <= it run the one-launch kernel instead, which pays while the replay is shallow: against -1 (never), same run,
    R=4 O=7 / R=4 O=3 / R=16 O=7 / R=16 O=3, qwen3_5_397b -2.4 / -10.0 / -1.3 / -5.7 %, qwen3_5_27b -1.4 / -7.6 /
    -1.8 / -7.4 %, range_hk4_hv16 +0.4 / -1.9 / -0.8 / -3.4 % (0, step 0 alone, less: kernels/NOTES.md)."""
    bb = 64 if W >= 64 else max(16, triton.next_power_of_2(W))
    bv = min(V, 128 if K <= 128 else 64)
    bk = K if K <= 128 else 64
    tiles = R * HV * triton.cdiv(W, bb) * (V // bv)
    iters = 1
    # a program's tiles are beam tiles of one (request, value head): never more than W / BB of them (more would
    # be idle, masked iterations -- 397b R=16 W=128 ran 8 for its 2 tiles at 23e1ed5, 1.6-1.9x slower)
    while bk == K and iters < min(8, triton.cdiv(W, bb)) and tiles / (2 * iters) >= 0.9 * 2 * n_sm:
        iters *= 2
    return {"BB": bb, "BV": bv, "BK": bk, "k_stages": 1, "num_warps": 4, "num_stages": 1,
            "beam_iters": iters, "loop_stages": 1, "loop_max_step": None, "replay_stages": 3,
            "BB_PREP": 16, "prep_warps": 4, "fused": False, "pdl": 2 if iters > 1 else 1,
            "pdl_next_step": True, "qk_first": bk < K, "prep_alpha_tile": True, "s_lo": "none" if K <= 128 else "q",
            "fuse_step0": bk == K and G <= 2,
            "ws": ("all" if G <= 2 else "main") if K == 128 and V % VC_TILE == 0 else "off",
            "ws_ring": None, "ws_kh_own_upto": 1, "ws_even_upto": -1, "ws_step_upto": 1, "ws_regs": 88,
            "ws_maxnreg": 168}


_S_LO = {"qk": 2, "q": 1, "none": 0}     # config s_lo -> S_LO: the projections that take S's bf16 lo plane
# config ws: the warp-specialised Gluon kernel (kernels/onela_ws.py) where it applies -- "main" after the prep
# kernel, "step" the whole step in one launch, both where step 0 is not already one Triton launch (fuse_step0);
# "all" one launch of it at every step, step 0 included -- or "off"
_WS = ("off", "main", "step", "all")


def step_launches(cfg: dict, geo, R: int, W: int, t: int, qk_bf16: bool = True,
                  interpret: bool = _INTERPRET, ws_ok: bool = False, n_sm: int = 132) -> dict:
    """Kernel name -> (grid, constexpr arguments, launch options) of step t under launch config `cfg`: prep and
    main, or fused (v6); where `ws_ok` (the warp-specialised kernel takes this shape and these inputs) and config
    ws applies, its launch "ws" replaces the main kernel's -- and the prep kernel's in one-launch mode (FUSE).
    One place for what `OneLAStepper.step` launches and what `kernels.inspect` compiles."""
    tp = max(2, triton.next_power_of_2(t))
    upto = cfg["loop_max_step"]
    iters = cfg["beam_iters"] if upto is None or t <= upto else 1
    n_btiles = triton.cdiv(W, cfg["BB"] * iters)
    main_grid = (geo.v // cfg["BV"], n_btiles, R * geo.hv)
    shared = dict(K=geo.k, V=geo.v, G=geo.group, STEP=t, BB=cfg["BB"], BV=cfg["BV"], BK=cfg["BK"],
                  K_STAGES=cfg["k_stages"], QK_FIRST=bool(cfg["qk_first"]), BEAM_ITERS=iters,
                  LOOP_STAGES=cfg["loop_stages"] if iters > 1 else 1, QK_BF16=qk_bf16, UPCAST=interpret,
                  S_LO=_S_LO[cfg["s_lo"]])
    opts = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    if cfg["fused"]:
        return {"fused": (main_grid, {**shared, "TP": tp}, opts)}
    pdl = 0 if interpret else int(cfg["pdl"])     # the interpreter runs no inline PTX (griddepcontrol)
    prep = ((triton.cdiv(W, cfg["BB_PREP"]), R * geo.hk),
            dict(K=geo.k, G=geo.group, STEP=t, TP=tp, BB=cfg["BB_PREP"], PDL=pdl,
                 ALPHA_TILE=bool(cfg["prep_alpha_tile"])),
            {"num_warps": cfg["prep_warps"], "launch_pdl": bool(pdl)})
    key_axis = bool(cfg["fuse_step0"]) and t == 0 and cfg["BK"] == geo.k     # step 0 in one launch
    main = (main_grid, {**shared, "REPLAY_STAGES": cfg["replay_stages"], "PDL": pdl,
                        "PDL_NEXT": bool(cfg["pdl_next_step"]), "KEY_AXIS": key_axis},
            {**opts, "launch_pdl": bool(pdl)})
    launches = {"main": main} if key_axis else {"prep": prep, "main": main}
    ws = ws_mode(cfg, t, "prep" in launches) if ws_ok and not interpret else None   # the interpreter runs no Gluon
    if ws is not None:
        del launches["main"]
        if ws == "step":
            launches.pop("prep", None)
        grid, params = ws_launch_params(cfg, geo, R, W, t, ws, n_sm)
        launches["ws"] = (grid, params, {k: params.pop(k) for k in ("num_warps", "maxnreg")} |
                          {"launch_pdl": bool(pdl)})
    return launches


class OneLAStepper(Stepper):
    """Shared S_ctx + append-only GtrStore + [R, W, T] ancestry (two ping-pong tables); per step the
    warp-specialised kernel where it applies (one launch, or after the prep kernel: config ws), else two Triton
    launches (key-axis prep, then the shared-context main kernel), and a small per-step coefficient workspace."""

    def __init__(self, geometry, R, W, T, device, config: dict | None = None):
        super().__init__(geometry, R, W, T, device)
        reason = onela_supports(geometry, self.device)
        if reason:
            raise ValueError(reason)
        self.store = GtrStore(geometry, R, W, T, device=device)
        self.anc = torch.zeros(2, R, W, T, dtype=torch.int32, device=device)
        n_sm = torch.cuda.get_device_properties(self.device).multi_processor_count \
            if self.device.type == "cuda" else 132
        default = launch_config(geometry.k, geometry.v, W, R, geometry.hv, n_sm, geometry.group)
        self.config = {**default, **(config or {})}                                   # tiles, fixed per decode
        unknown = sorted(set(self.config) - set(default))
        if unknown:
            raise ValueError(f"onela: unknown launch config key(s) {unknown}")
        if self.config["s_lo"] not in _S_LO:
            raise ValueError(f"onela: s_lo={self.config['s_lo']!r} unknown; one of {sorted(_S_LO)}")
        bv, bk = self.config["BV"], self.config["BK"]
        if geometry.v % bv or geometry.k % bk:
            raise ValueError(f"onela: tiles BV={bv}, BK={bk} must divide V={geometry.v}, K={geometry.k}")
        self.coef = None if self.config["fused"] else \
            torch.zeros(3 + 2 * T, R, geometry.hv, W, dtype=torch.float32, device=device)
        if self.config["ws"] not in _WS:
            raise ValueError(f"onela: ws={self.config['ws']!r} unknown; one of {sorted(_WS)}")
        if "ws" not in (config or {}) and (self.config["s_lo"] != "none" or self.config["fused"]):
            self.config["ws"] = "off"       # a config asking for another projection or v6 asks for the Triton kernels
        if self.config["ws"] != "off" and (self.config["s_lo"] != "none" or self.config["fused"]):
            raise ValueError("onela: ws (the warp-specialised main kernel) projects against S in bf16 with the "
                             f"two-launch kernels: needs s_lo 'none' and fused False, got {self.config['s_lo']!r}, "
                             f"{self.config['fused']}")
        self.n_sm = n_sm
        # the shape and device part of whether the ws kernel runs, fixed per decode; each step checks its inputs
        self.ws_shape_ok = self.config["ws"] != "off" and ws_shape_supports(geometry, W, self.device) is None
        self.s_bf16 = None              # S_ctx's bf16 rounding, made at reset where the ws kernel runs
        self.kernel_info: dict = {}     # kernel name -> (registers, spilled 4-byte registers) of its last compile

    def _note_kernel(self, name, kern):
        if getattr(kern, "n_regs", None) is not None:      # None under the interpreter
            self.kernel_info[name] = (kern.n_regs, kern.n_spills)

    def reset(self, s_ctx, tail=None):
        self.s_ctx = check_reset(self, s_ctx, tail)
        # the warp-specialised kernel loads S's bf16 rounding by TMA (kernels/onela_ws.py): made where it can run
        if self.ws_shape_ok:
            self.s_bf16 = self.s_ctx.to(torch.bfloat16)

    def step(self, t, q, k, v, g, beta, parents, out):
        geo, R, W = self.geometry, self.R, self.W
        check_step(self, t, q, k, v, g, beta, parents, out)
        anc_prev, anc_cur = self.anc[(t - 1) % 2], self.anc[t % 2]
        ws_ok = self.ws_shape_ok and ws_layout_supports(W, q, k, v, out) is None   # else the Triton kernels
        launches = step_launches(self.config, geo, R, W, t, q.dtype == torch.bfloat16, ws_ok=ws_ok, n_sm=self.n_sm)
        if "fused" in launches:
            grid, const, opts = launches["fused"]
            kern = _onela_fused_kernel[grid](
                q, k, v, g, beta, self.s_ctx, parents, anc_prev, anc_cur, self.store.alpha, self.store.khat,
                self.store.delta, out, R, W, geo.hv, self.T,
                q.stride(0), q.stride(1), q.stride(2), v.stride(0), v.stride(1), v.stride(2), **const, **opts)
            self._note_kernel("fused", kern)
            return out
        if "prep" in launches:      # not at step 0 under fuse_step0 (the main kernel does its work) or in one launch
            grid, const, opts = launches["prep"]
            kern = _onela_prep_kernel[grid](
                q, k, g, parents, anc_prev, anc_cur, self.store.alpha, self.store.khat, self.coef,
                R, W, geo.hv, geo.hk, self.T, q.stride(0), q.stride(1), q.stride(2), **const, **opts)
            self._note_kernel("prep", kern)
        if "ws" in launches:        # the warp-specialised kernel (kernels/onela_ws.py)
            kern = launch_ws(self, q, k, v, g, beta, parents, anc_prev, anc_cur, out, *launches["ws"])
            self._note_kernel(f"ws_{self.config['ws']}", kern)
            return out
        grid, const, opts = launches["main"]
        kern = _onela_main_kernel[grid](
            q, k, v, g, beta, self.s_ctx, anc_cur, self.coef, self.store.alpha, self.store.khat, self.store.delta,
            out, R, W, geo.hv, geo.hk, self.T,
            q.stride(0), q.stride(1), q.stride(2), v.stride(0), v.stride(1), v.stride(2), **const, **opts)
        self._note_kernel("main", kern)
        return out

    def persistent_bytes(self):
        """S_ctx (with ws also its bf16 rounding, which that kernel reads) + GTR store + ancestry. The coefficient
        workspace (3 + 2T fp32 per beam and value head, 1.9 MiB at R=4 W=512 O=7) is rewritten every step, scratch
        rather than recurrent state, and not counted."""
        geo = self.geometry
        s_copy = self.s_bf16.numel() * 2 if self.s_bf16 is not None else 0      # ws: S in bf16 too
        return self.R * geo.hv * geo.v * geo.k * 4 + s_copy + self.store.nbytes + self.anc.numel() * 4

    def written_bytes(self):
        """Recurrent-state bytes stored: every GTR once (the int32 ancestry rows, 0.12 MiB at R=4 W=512 O=7,
        are index metadata and counted in persistent_bytes, not here -- as the paper counts state writes)."""
        return self.store.nbytes


def check_reset(st: Stepper, s_ctx, tail):
    """Our kernels start from the full post-prefill state: contiguous fp32 [R, HV, V, K], no prompt tail."""
    geo = st.geometry
    if tail is not None:
        raise ValueError("our kernels start from the full post-prefill state; a prompt tail is ReplaySSM-only")
    if tuple(s_ctx.shape) != (st.R, geo.hv, geo.v, geo.k) or s_ctx.dtype != torch.float32 \
            or not s_ctx.is_contiguous():
        raise ValueError(f"s_ctx must be contiguous fp32 {(st.R, geo.hv, geo.v, geo.k)}, got {s_ctx.dtype} "
                         f"{tuple(s_ctx.shape)}")
    return s_ctx


def check_step(st: Stepper, t, q, k, v, g, beta, parents, out):
    """Reject bad input before launch (a kernel would read out of bounds instead of failing)."""
    geo, R, W = st.geometry, st.R, st.W
    if not 0 <= t < st.T:
        raise ValueError(f"step t={t} out of range 0..{st.T - 1}")
    want = {"q": (q, (R, W, geo.hk, geo.k)), "k": (k, (R, W, geo.hk, geo.k)), "v": (v, (R, W, geo.hv, geo.v)),
            "g": (g, (R, W, geo.hv)), "beta": (beta, (R, W, geo.hv)), "parents": (parents, (R, W)),
            "out": (out, (R, W, geo.hv, geo.v))}
    for name, (x, shape) in want.items():
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {shape}")
    if q.dtype != k.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.stride() != k.stride() or q.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("q and k must share strides with a contiguous last dim; v's last dim contiguous")
    for name, x in (("g", g), ("beta", beta)):
        if x.dtype != torch.float32 or not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous float32, got {x.dtype}")
    if parents.dtype != torch.int32 or not parents.is_contiguous():
        raise ValueError(f"parents must be contiguous int32, got {parents.dtype}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    if not (q.device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        lo, hi = int(parents.min()), int(parents.max())   # a host sync: checked eagerly, not inside a graph
        if lo < 0 or hi >= W:
            raise ValueError(f"parents out of range: values in [{lo}, {hi}], must be in [0, {W - 1}]")


def onela_supports(geometry, device) -> str | None:
    dev = torch.device(device)
    if dev.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return f"onela: Triton kernel needs a CUDA device or TRITON_INTERPRET=1 (device {dev})"
    if not (_pow2(geometry.k) and geometry.k <= 256):
        return f"onela: K={geometry.k} unsupported (power of two in 16..256)"
    if not (_pow2(geometry.v) and geometry.v <= 512):
        return f"onela: V={geometry.v} unsupported (power of two in 16..512)"
    return None


class OneLAPath(StepperPath):
    """The fused shared-context OneLA kernels over all T steps (one or two launches per step, graph-capturable)."""

    name = "onela"
    stepper_cls = OneLAStepper

    def supports(self, geometry, shape, device):
        return onela_supports(geometry, device)

    def cost(self, wl) -> dict:
        return onela_cost(wl)


def onela_step_bytes(wl) -> list[tuple[int, int]]:
    """Compulsory (read, written) bytes of each step of the fused replay algorithm (`onela_cost`'s terms)."""
    geo, T, R, W = wl.geometry, wl.T, wl.R, wl.W
    esz = wl.q.element_size()
    rec_v = geo.hv * (4 + 2 * geo.v)          # alpha + delta of one (beam slot) record, all value heads
    rec_k = geo.hk * 2 * geo.k                # k-hat of one record, all key heads
    anc = build_ancestry(wl.parents.cpu())    # [T, R, W, T]
    steps = []
    for t in range(T):
        read = R * W * (2 * geo.hk * geo.k * esz + geo.hv * geo.v * esz + geo.hv * 8 + 4)     # inputs
        read += R * geo.hv * geo.v * geo.k * 4                                                # S_ctx
        for j in range(t):
            distinct = sum(anc[t, r, :, j].unique().numel() for r in range(R))
            read += distinct * (rec_v + rec_k)                                                # replayed GTRs
        steps.append((read, R * W * (geo.hv * geo.v * esz + rec_v + rec_k + t * 4 * 2)))     # o, new GTR, ancestry
    return steps


def onela_cost(wl) -> dict:
    """Compulsory bytes and FLOPs of the fused replay algorithm (not of this kernel's actual reads).

    Bytes (`onela_step_bytes`): each step reads q, k, v, g, beta, parents, S_ctx once and every *distinct*
    ancestral record its live beams replay, and writes o (input dtype), the new GTRs and its ancestry rows. FLOPs:
    the two S_ctx projections (2 x 2VK per beam and value head), per replayed record two K-dots and two V-axpys,
    and the final delta / o (about 6V).
    """
    geo, T, R, W = wl.geometry, wl.T, wl.R, wl.W
    per_beam_head = lambda t: 4 * geo.v * geo.k + t * (4 * geo.k + 4 * geo.v) + 6 * geo.v + 2 * geo.k  # noqa: E731
    return {"compulsory_bytes": sum(r + w for r, w in onela_step_bytes(wl)),
            "flops": sum(R * W * geo.hv * per_beam_head(t) for t in range(T)), "rate": "bf16_flop_per_s"}
