"""OneLA's decode step in Triton: a key-axis prep kernel and the shared-context main kernel (paper §3.4).

These run wherever the warp-specialised kernel (`kernels/onela/ws.py`) does not: K other than 128 or 256, V other
than 128, 256 or 512, W not a multiple of 64, steps past 31, inputs that are not bf16 rows, GPUs other than Hopper,
and the CPU interpreter. The prep kernel also runs before the warp-specialised one at steps past 7, and past step 1
where a key head has more than two value heads (`kernels/onela/plan.py`).

- `onela_prep_kernel`, once per (request, key head, beam tile): everything on the key axis and every per-beam
  scalar -- L2 norms (with the K^-1/2 scale), k-hat_t and alpha_t = exp(g) of the new GTR, beam b's ancestry row
  (read at row parent(b) of the previous table, written to the other of two ping-pong tables: a gather of
  indices, never of records), the dots k-hat_j . q-hat and k-hat_j . k-hat of every ancestral record, and the
  suffix products of the ancestral alphas, as a small coefficient table. Every depth is one column of [BB, TP]
  tiles (TP the power of two >= the step), unrolled, once per value head of the group -- so its code, and its
  compile time, grow with step x group.
- `onela_prep_pipe_kernel`: the same outputs for steps from 8 on and for those that outgrow the one-tile
  kernel's unrolling (step x group, `kernels.onela.plan.prep_is_deep`): the step a run-time argument (one compile
  serves every deep step), the depths one at a time in a software-pipelined run-time loop, each depth's slot,
  k-hat row and alphas gathered a few depths ahead of their use into shared memory, as the main kernel's replay
  gathers its delta rows -- several depths' gathers in flight per program at one depth's registers.
- `onela_main_kernel`, one program per (BV tile of V, BEAM_ITERS beam tiles, request x value head): loads the
  S_ctx[r, hv][BV, K] tile once and uses it for every beam tile it runs -- u_q = q S^T and u_k = k S^T on the
  tensor cores, bf16 q, k against S split into bf16 planes -- then replays the ancestral GTRs in closed form,
  u = P u0 + sum_j c_j delta_j (each delta_j gathered through the ancestry row independently of the others),
  forms delta_t and o_t, and appends delta_t. Its replay is a run-time loop over the depths, one depth's gathered
  rows live at a time (`_REPLAY_STAGES` in flight), at every step.
Only the new GTR (alpha fp32, delta bf16, k-hat bf16) is written; no per-beam [V, K] state ever is. With
programmatic dependent launch (PDL, Hopper) each launch reads only its step's inputs before
`griddepcontrol.wait` and everything earlier launches wrote after it, so its S tile load and first projections
overlap the previous launch's tail. Where the S tile spans K and a key head has at most two value heads, step 0
(nothing to replay) is one launch: the main kernel does the prep kernel's step-0 work (KEY_AXIS).
Why each choice: kernels/NOTES.md ("Triton kernels").
"""
from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import cuda as tl_cuda

from kernels.onela.records import record_row

# Depths of the replay loop in flight: one depth's gathered rows live at a time, the next prefetched. Bounds the
# registers, so the beam loop runs at every step without spilling.
_REPLAY_STAGES = tl.constexpr(3)


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
def _row_mask(mask_b, offs_k, K: tl.constexpr, KP: tl.constexpr):
    """[BB, KP] mask of live beams' key columns: K may be any multiple of 16, the tile KP the power of two above."""
    if KP == K:
        mask = mask_b[:, None]
    else:
        mask = mask_b[:, None] & (offs_k < K)[None, :]
    return mask


@triton.jit
def _store_khat(khat_ptr, row, kf, inv_k, mask_b, K: tl.constexpr, KP: tl.constexpr):
    """The key part of records at rows `row` [BB]: k-hat = k * inv_k (fp32 k rows [BB, KP], columns past K zero)."""
    offs_k = tl.arange(0, KP)
    tl.store(khat_ptr + row.to(tl.int64)[:, None] * K + offs_k[None, :],
             (kf * inv_k[:, None]).to(khat_ptr.dtype.element_ty), mask=_row_mask(mask_b, offs_k, K, KP))


@triton.jit
def _key_rows(q_ptr, k_ptr, qk_row, mask_b, K: tl.constexpr, KP: tl.constexpr):
    """This step's q, k rows [BB, KP] (fp32, zero past K) at rows `qk_row`, with `_norms`' (inv_q, inv_k,
    k-hat . q-hat): the reads the prep kernel issues before the PDL wait."""
    offs_k = tl.arange(0, KP)
    qk_off = qk_row[:, None] + offs_k[None, :]
    kmask = _row_mask(mask_b, offs_k, K, KP)
    qf = tl.load(q_ptr + qk_off, mask=kmask, other=0.0).to(tl.float32)
    kf = tl.load(k_ptr + qk_off, mask=kmask, other=0.0).to(tl.float32)
    inv_q, inv_k, kq_t = _norms(qf, kf, K)
    return qf, kf, inv_q, inv_k, kq_t


@triton.jit
def _key_axis(q_ptr, k_ptr, par_ptr, anc_prev_ptr, khat_ptr, qk_row, r, hk, dims, offs_b, mask_b,
              K: tl.constexpr, KP: tl.constexpr, STEP: tl.constexpr, TP: tl.constexpr, BB: tl.constexpr,
              PDL: tl.constexpr):
    """The key-axis work of step STEP for BB beams of key head hk: L2 norms, k-hat_t stored, beam b's ancestry
    row h_t(b, j) = h_{t-1}(parent(b), j) for j < t-1 and h_t(b, t-1) = parent(b), and k-hat_j . q-hat /
    k-hat_j . k-hat of every ancestral record, as [BB, TP] columns. Returns (inv_q, inv_k, kq_t, slots, kqs,
    kks). Before the PDL wait it reads only this step's inputs (q, k); every store and every read of the store
    or the ancestry comes after it. Key rows are [BB, KP] tiles, zero past K."""
    R, W, HK, T_CAP = dims
    offs_k = tl.arange(0, KP)
    offs_t = tl.arange(0, TP)
    kmask = _row_mask(mask_b, offs_k, K, KP)
    qf, kf, inv_q, inv_k, kq_t = _key_rows(q_ptr, k_ptr, qk_row, mask_b, K, KP)
    if PDL:
        tl_cuda.gdc_wait()       # the previous launch (and, through its own wait, every earlier one) is done
    _store_khat(khat_ptr, record_row(STEP, r, hk, offs_b, R, HK, W), kf, inv_k, mask_b, K, KP)
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
            k_j = tl.load(khat_ptr + record_row(j, r, hk, slot, R, HK, W).to(tl.int64)[:, None] * K
                          + offs_k[None, :], mask=kmask, other=0.0).to(tl.float32)
            kqs = tl.where(offs_t[None, :] == j, (tl.sum(k_j * qf, axis=1) * inv_q)[:, None], kqs)
            kks = tl.where(offs_t[None, :] == j, (tl.sum(k_j * kf, axis=1) * inv_k)[:, None], kks)
    return inv_q, inv_k, kq_t, slots, kqs, kks


@triton.jit
def _prep_program(W, HK, sq, BB: tl.constexpr):
    """A prep program's (request, key head, beam tile): r, hk, beam offsets and mask, the beams' rows r * W + b,
    and their q / k row offsets (sq: the (request, beam, head) strides)."""
    pid_b = tl.program_id(0)
    pid_rh = tl.program_id(1)
    r = pid_rh // HK
    hk = pid_rh % HK
    offs_b = pid_b * BB + tl.arange(0, BB)
    sq_r, sq_w, sq_h = sq
    return r, hk, offs_b, offs_b < W, r * W + offs_b, r * sq_r + offs_b * sq_w + hk * sq_h


@triton.jit
def onela_prep_kernel(
    q_ptr, k_ptr, g_ptr, par_ptr, anc_prev_ptr, anc_next_ptr, alpha_ptr, khat_ptr, coef_ptr,
    R, W, HV, HK, T_CAP, sq,
    K: tl.constexpr, KP: tl.constexpr, G: tl.constexpr, STEP: tl.constexpr, TP: tl.constexpr, BB: tl.constexpr,
    PDL: tl.constexpr,
):
    """Everything of step STEP that lives on the key axis or is a per-beam scalar, once per key head.

    Writes beam b's ancestry row, k-hat_t (the new GTR's key), alpha_t, and for each value head of the group
    the coefficients of the closed-form replay (module docstring), so the main kernel needs no K-axis work
    beyond its two projections and no dependent loads. Every depth's ancestral alpha is gathered as one
    [BB, TP] tile before the suffix products, so the product chain holds no memory round trip; the depths and
    the group's value heads are unrolled, so deep steps and wide groups go to `onela_prep_pipe_kernel`. sq: q and
    k's (request, beam, head) strides. K is any multiple of 16, KP the power of two >= K (the key tiles'
    width)."""
    if PDL:
        tl_cuda.gdc_launch_dependents()     # the main kernel may start its S load and projections meanwhile
    r, hk, offs_b, mask_b, rw, qk_row = _prep_program(W, HK, sq, BB)
    offs_t = tl.arange(0, TP)
    inv_q, inv_k, kq_t, slots, kqs, kks = _key_axis(
        q_ptr, k_ptr, par_ptr, anc_prev_ptr, khat_ptr, qk_row, r, hk, (R, W, HK, T_CAP), offs_b, mask_b,
        K, KP, STEP, TP, BB, PDL)
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
        tl.store(alpha_ptr + record_row(STEP, r, hv, offs_b, R, HV, W), alpha, mask=mask_b)
        base = coef_ptr + (r * HV + hv) * W + offs_b
        c = alpha                                          # alpha_t * prod_{i > j} alpha_i, built from j = t-1 down
        depth = offs_t[None, :]
        alphas = tl.load(alpha_ptr + record_row(depth, r, hv, slots, R, HV, W),
                         mask=mask_b[:, None] & (depth < STEP), other=1.0)
        for jj in tl.static_range(STEP):
            j = STEP - 1 - jj
            kq = tl.sum(tl.where(offs_t[None, :] == j, kqs, 0.0), axis=1)
            kk = tl.sum(tl.where(offs_t[None, :] == j, kks, 0.0), axis=1)
            tl.store(base + (3 + 2 * j) * plane, c * kq, mask=mask_b)
            tl.store(base + (4 + 2 * j) * plane, c * kk, mask=mask_b)
            c = c * tl.sum(tl.where(offs_t[None, :] == j, alphas, 0.0), axis=1)
        tl.store(base, c * inv_q, mask=mask_b)
        tl.store(base + plane, c * inv_k, mask=mask_b)
        tl.store(base + 2 * plane, kq_t, mask=mask_b)


@triton.jit
def _prep_step_head(ptrs, R, W, HV, HK, sq, step, K: tl.constexpr, KP: tl.constexpr, G: tl.constexpr,
                    GP: tl.constexpr, BB: tl.constexpr, PDL: tl.constexpr):
    """`onela_prep_pipe_kernel`'s start: the program's beams, their q / k rows and norms, g and parents
    loaded before the wait on the previous launch, then step `step`'s k-hat row and alpha_t stored. ptrs: (q, k,
    g, parents, alpha, khat). Returns (r, hk, offs_b, mask_b, rw, par, hvs, gmask, (qf, kf, inv_q, inv_k), kq_t,
    alpha_t as [BB, GP]: the group's value heads as columns)."""
    q_ptr, k_ptr, g_ptr, par_ptr, alpha_ptr, khat_ptr = ptrs
    if PDL:
        tl_cuda.gdc_launch_dependents()     # the main kernel may start its S load and projections meanwhile
    r, hk, offs_b, mask_b, rw, qk_row = _prep_program(W, HK, sq, BB)
    offs_g = tl.arange(0, GP)
    qf, kf, inv_q, inv_k, kq_t = _key_rows(q_ptr, k_ptr, qk_row, mask_b, K, KP)
    hvs = hk * G + offs_g                           # the group's value heads, as columns
    gmask = mask_b[:, None] & (offs_g < G)[None, :]
    g = tl.load(g_ptr + rw[:, None] * HV + hvs[None, :], mask=gmask, other=0.0)
    par = tl.load(par_ptr + rw, mask=mask_b, other=0)
    if PDL:
        tl_cuda.gdc_wait()       # the previous launch (and, through its own wait, every earlier one) is done
    _store_khat(khat_ptr, record_row(step, r, hk, offs_b, R, HK, W), kf, inv_k, mask_b, K, KP)
    cs = tl.exp(g)
    tl.store(alpha_ptr + record_row(step, r, hvs[None, :], offs_b[:, None], R, HV, W), cs, mask=gmask)
    return r, hk, offs_b, mask_b, rw, par, hvs, gmask, (qf, kf, inv_q, inv_k), kq_t, cs


@triton.jit
def _prep_depth(cs, j, step, par, anc_row, ptrs, keys, r, hk, hvs, rw, offs_b, mask_b, gmask, dims, plane,
                K: tl.constexpr, KP: tl.constexpr):
    """Depth j of `onela_prep_pipe_kernel`: beam b's slot h_t(b, j) (its parent at j = step - 1, else the
    parent's row of the previous table), written to b's new row by key head 0's programs; the record's k-hat row
    [BB, KP] and the group's alphas [BB, GP], gathered through it; coefficient rows 3 + 2j and 4 + 2j of each
    value head of the group, c_j (k-hat_j . q-hat) and c_j (k-hat_j . k-hat) with c_j = cs [BB, GP] (alpha_t
    prod_{j < i < t} alpha_i); returns c_{j-1} = c_j alpha_j. ptrs = the (previous, next) ancestry tables, the
    records' alpha and k-hat and the coefficient table; keys = the beams' q, k rows (fp32 [BB, KP]) and norms;
    dims = (R, W, HV, HK, T_CAP)."""
    anc_prev_ptr, anc_next_ptr, alpha_ptr, khat_ptr, coef_ptr = ptrs
    qf, kf, inv_q, inv_k = keys
    R, W, HV, HK, T_CAP = dims
    slot = tl.load(anc_prev_ptr + anc_row + j, mask=mask_b & (j < step - 1), other=0)
    slot = tl.where(j == step - 1, par, slot)
    offs_k = tl.arange(0, KP)
    k_j = tl.load(khat_ptr + record_row(j, r, hk, slot, R, HK, W).to(tl.int64)[:, None] * K + offs_k[None, :],
                  mask=_row_mask(mask_b, offs_k, K, KP), other=0.0).to(tl.float32)
    a_j = tl.load(alpha_ptr + record_row(j, r, hvs[None, :], slot[:, None], R, HV, W), mask=gmask, other=1.0)
    if hk == 0:
        tl.store(anc_next_ptr + rw * T_CAP + j, slot, mask=mask_b)
    kq = tl.sum(k_j * qf, axis=1) * inv_q
    kk = tl.sum(k_j * kf, axis=1) * inv_k
    base = coef_ptr + (r * HV + hvs[None, :]) * W + offs_b[:, None] + (3 + 2 * j) * plane
    tl.store(base, cs * kq[:, None], mask=gmask)
    tl.store(base + plane, cs * kk[:, None], mask=gmask)
    return cs * a_j


@triton.jit(do_not_specialize=["step"])
def onela_prep_pipe_kernel(
    q_ptr, k_ptr, g_ptr, par_ptr, anc_prev_ptr, anc_next_ptr, alpha_ptr, khat_ptr, coef_ptr,
    R, W, HV, HK, T_CAP, sq, step,
    K: tl.constexpr, KP: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, BB: tl.constexpr, STAGES: tl.constexpr,
    PDL: tl.constexpr,
):
    """`onela_prep_kernel`'s outputs for step `step` -- beam b's ancestry row, k-hat_t, alpha_t and the group's
    coefficient table -- as a software-pipelined loop over the depths, from step - 1 down. The step is a run-time
    value (`do_not_specialize`), so one compile serves every deep step. The pipeliner issues each depth's slot,
    k-hat row and alphas (`_prep_depth`) STAGES - 1 iterations ahead of their use, into shared memory, so a
    program keeps several depths' gathers in flight at one depth's registers. The alpha product chain multiplies
    in the one-tile kernel's order (alpha_t first, then the depths from the deepest down) and the dots reduce rows
    laid out as that kernel's, so the coefficients are the same products. The group's value heads are the columns
    of [BB, GP] tiles, GP the power of two >= G. STAGES 0: a plain loop (the interpreter takes no range over a
    run-time bound). Its pointers and sizes are `onela_prep_kernel`'s, then the step; one program per (request,
    key head, tile of BB beams)."""
    r, hk, offs_b, mask_b, rw, par, hvs, gmask, keys, kq_t, cs = _prep_step_head(
        (q_ptr, k_ptr, g_ptr, par_ptr, alpha_ptr, khat_ptr), R, W, HV, HK, sq, step, K, KP, G, GP, BB, PDL)
    _, _, inv_q, inv_k = keys                       # cs: alpha_t, then alpha_t prod_{i > j} alpha_i down the depths
    plane = R * HV * W
    anc_row = (r * W + par) * T_CAP
    ptrs = (anc_prev_ptr, anc_next_ptr, alpha_ptr, khat_ptr, coef_ptr)
    dims = (R, W, HV, HK, T_CAP)
    if STAGES == 0:
        j = step - 1
        while j >= 0:
            cs = _prep_depth(cs, j, step, par, anc_row, ptrs, keys, r, hk, hvs, rw, offs_b, mask_b, gmask, dims,
                             plane, K, KP)
            j -= 1
    else:
        for i in tl.range(0, step, num_stages=STAGES):
            cs = _prep_depth(cs, step - 1 - i, step, par, anc_row, ptrs, keys, r, hk, hvs, rw, offs_b, mask_b,
                             gmask, dims, plane, K, KP)
    base = coef_ptr + (r * HV + hvs[None, :]) * W + offs_b[:, None]      # rows 0, 1, 2 of the group's heads
    tl.store(base, cs * inv_q[:, None], mask=gmask)
    tl.store(base + plane, cs * inv_k[:, None], mask=gmask)
    tl.store(base + 2 * plane, tl.broadcast_to(kq_t[:, None], [BB, GP]), mask=gmask)


@triton.jit
def _s_split(s_ptr, s_row, offs_k, S_LO: tl.constexpr):
    """S[rows, offs_k] (fp32) as bf16 planes, transposed for the dots: hi (S rounded to bf16) and, where S_LO,
    lo = S - hi, so that q S_hi + q S_lo is fp32-accurate at the bf16 rate (bf16 q, k are exact in bf16; tf32
    would round S to 11 bits). S_LO == 0: the lo plane is not formed (hi returned twice)."""
    s_tile = tl.load(s_ptr + s_row[:, None] + offs_k[None, :])                  # [BV, BK] fp32
    s_hi = s_tile.to(tl.bfloat16)
    if S_LO == 0:
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
    """u_q = q S^T and u_k = k S^T (raw q, k) against a split S tile: [BB, BV] each. With S_LO, u_q also takes
    S's lo plane; u_k never does. Inputs other than bf16 are split too (bf16 part + residual; the residual
    against S's hi plane only)."""
    if QK_BF16:
        qb = q_in
        kb = k_in
    else:
        qf = q_in.to(tl.float32)
        kf = k_in.to(tl.float32)
        qb = qf.to(tl.bfloat16)
        kb = kf.to(tl.bfloat16)
    u_q = _mm(qb, s_hi_t, UPCAST)          # u_q's products, then u_k's: this order compiles to the fewest
    if S_LO:                                 # registers (interleaving them spills at K = 128)
        u_q += _mm(qb, s_lo_t, UPCAST)
    if not QK_BF16:
        u_q += _mm((qf - qb.to(tl.float32)).to(tl.bfloat16), s_hi_t, UPCAST)
    u_k = _mm(kb, s_hi_t, UPCAST)
    if not QK_BF16:
        u_k += _mm((kf - kb.to(tl.float32)).to(tl.bfloat16), s_hi_t, UPCAST)
    return u_q, u_k


@triton.jit
def _projections(q_ptr, k_ptr, s_ptr, qk_row, s_row, mask_b, s_hi_t, s_lo_t, K: tl.constexpr, BB: tl.constexpr,
                 BV: tl.constexpr, BK: tl.constexpr, QK_BF16: tl.constexpr, UPCAST: tl.constexpr,
                 S_LO: tl.constexpr):
    """u_q, u_k [BB, BV] over all of K: against the program's split S tile (BK == K, split once by the caller
    and reused for every beam tile it runs), or K in chunks of BK, each chunk of S loaded and split here (fewer
    live registers). A chunk's q, k loads issue before its S load and split, so all of them are in flight
    before the first convert."""
    if BK == K:
        q_in, k_in = _qk_load(q_ptr, k_ptr, qk_row, tl.arange(0, K), mask_b)
        u_q, u_k = _qk_dots(q_in, k_in, s_hi_t, s_lo_t, QK_BF16, UPCAST, S_LO)
    else:
        u_q = tl.zeros([BB, BV], dtype=tl.float32)
        u_k = tl.zeros([BB, BV], dtype=tl.float32)
        for kc in tl.range(0, K, BK, num_stages=1):
            offs_k = kc + tl.arange(0, BK)
            q_in, k_in = _qk_load(q_ptr, k_ptr, qk_row, offs_k, mask_b)
            c_hi_t, c_lo_t = _s_split(s_ptr, s_row, offs_k, S_LO)
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
                sv, V: tl.constexpr, STEP: tl.constexpr):
    """delta_t = beta (v - u_k) and o_t = u_q + delta_t (k-hat . q-hat) from the replayed projections; stores
    o_t and appends delta_t as the new GTR's value part (written once)."""
    sv_r, sv_w, sv_h = sv
    gb_off = (r * W + offs_b) * HV + hv
    beta = tl.load(beta_ptr + gb_off, mask=mask_b, other=0.0)
    v = tl.load(v_ptr + r * sv_r + offs_b[:, None] * sv_w + hv * sv_h + offs_v[None, :],
                mask=mask_b[:, None], other=0.0).to(tl.float32)
    delta = beta[:, None] * (v - u_k)
    o = u_q + delta * kq_t[:, None]
    row_v = gb_off.to(tl.int64)[:, None] * V + offs_v[None, :]
    tl.store(out_ptr + row_v, o.to(out_ptr.dtype.element_ty), mask=mask_b[:, None])
    tl.store(delta_ptr + record_row(STEP, r, hv, offs_b, R, HV, W).to(tl.int64)[:, None] * V + offs_v[None, :],
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
    d_j = tl.load(delta_ptr + record_row(j, r, hv, slot, R, HV, W).to(tl.int64)[:, None] * V + offs_v[None, :],
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
        tl.store(alpha_ptr + record_row(0, r, hv, offs_b, R, HV, W), alpha, mask=mask_b)
        if hv % G == 0:
            _store_khat(khat_ptr, record_row(0, r, hk, offs_b, R, HK, W), kf, inv_k, mask_b, K, K)


@triton.jit
def onela_main_kernel(
    inputs, s_ptr, anc_ptr, coef_ptr, records, out_ptr,
    R, W, HV, HK, T_CAP, sq, sv,
    K: tl.constexpr, V: tl.constexpr, G: tl.constexpr, STEP: tl.constexpr,
    BB: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, BEAM_ITERS: tl.constexpr, QK_BF16: tl.constexpr,
    UPCAST: tl.constexpr, PDL: tl.constexpr, S_LO: tl.constexpr, KEY_AXIS: tl.constexpr,
):
    """The shared-context part: one S_ctx[BV, K] tile, loaded and split once, used for the BEAM_ITERS beam
    tiles of BB beams this program runs -- both projections on the tensor cores, the replay as a weighted sum
    of gathered delta rows (independent loads), delta_t and o_t. inputs = (q, k, v, g, beta) pointers,
    records = the GtrStore's (alpha, k-hat, delta) pointers, sq / sv = q and k's / v's (request, beam, head)
    strides.

    PDL 2 waits for the previous launch after the S tile's load and split (every beam tile's loop body is then
    the same), PDL 1 after the first beam tile's projections (they overlap too); either way the next launch may
    start early, its reads of its own step's inputs overlapping this kernel's tail.

    KEY_AXIS (step 0 only, one S tile over all of K): the program also does the prep kernel's step-0 work for its
    beams -- q, k norms and k-hat . q-hat from the q, k tile it loads for the projections, alpha = exp(g), and
    the k-hat_0 and alpha_0 records -- so step 0 is one launch and q, k are read once."""
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr = inputs
    alpha_ptr, khat_ptr, delta_ptr = records
    sq_r, sq_w, sq_h = sq
    if PDL:
        tl_cuda.gdc_launch_dependents()     # the next step's prep may start its q, k loads meanwhile
    pid_b = tl.program_id(1)
    r, hv, hk, offs_v, s_row, s_hi_t, s_lo_t = _head_tile(s_ptr, HV, G, K, V, BV, BK, S_LO)
    if PDL == 2:
        tl_cuda.gdc_wait()          # only the S tile's load and split overlap the prep kernel
    plane = R * HV * W
    for it in tl.range(0, BEAM_ITERS, num_stages=1):
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
                                    QK_BF16, UPCAST, S_LO)
            if PDL == 1:
                tl_cuda.gdc_wait()      # prep of this step is done (a no-op after the first beam tile)
            u_q = u_q * tl.load(cbase, mask=mask_b, other=0.0)[:, None]
            u_k = u_k * tl.load(cbase + plane, mask=mask_b, other=0.0)[:, None]
            kq_t = tl.load(cbase + 2 * plane, mask=mask_b, other=0.0)
        for j in tl.range(0, STEP, num_stages=_REPLAY_STAGES):
            u_q, u_k = _replay_depth(u_q, u_k, j, anc_ptr, delta_ptr, cbase, rw, r, hv, R, W, HV, T_CAP,
                                     plane, offs_v, mask_b, V)

        _write_step(u_q, u_k, kq_t, v_ptr, beta_ptr, out_ptr, delta_ptr, r, hv, R, W, HV, offs_b, mask_b,
                    offs_v, sv, V, STEP)
