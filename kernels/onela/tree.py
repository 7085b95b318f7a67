"""OneLA's deep steps in tree order: the replay as small products over each beam tile's distinct records.

From step `plan.RECORDS_FROM_STEP` on (where `plan.tree_route_supports` takes the shape), a step's ancestral replay
u_x[b] = sum_i exp(G_b - G_i) (x-hat_b . k-hat_i) delta_i (x = q, k; G the cumulative log gate of a record or of
the beam at this step, kept per record in the stepper's `gcum`) runs record-major instead of one gather per
(beam, depth):

- `onela_tree_lists_kernel`, one program per (request, tile of BB positions): the request's beams in tree order --
  sorted by their ancestral chains, so the beams that share a record at some depth are adjacent at every depth --
  as one sort per step of (the parent's position in the previous step's order, beam); at the route's first step
  a radix sort of the whole ancestry rows, several depths a pass. It writes its tile's part of the order and of
  each beam's position, and the tile's record list: every depth's runs of equal slots as (depth, slot, first
  position, position past the run), depth-major. Beside them, for the tile's beams in slot order, the step's
  per-beam records: the ancestry row, alpha_t and the cumulative gate of every value head (at the first step
  also every ancestor's gate). It reads this step's ancestry as the parents' rows of the previous table, so no
  program waits for another's writes.
- `onela_tree_step_kernel`, one program per (tiles, request x value head): the S_ctx projections of the tile's
  beams, then its list CH records at a time -- their k-hat and delta rows gathered once per tile, the
  coefficients of every (beam, record) pair as one small product (x @ k-hat^T on the tile's q and k rows),
  zeroed outside each record's run and decayed, and u += C @ delta on the tensor cores (C as bf16 hi + lo
  planes, kept in registers as that product's A operand) -- then delta_t and o_t as the main kernel forms them.
  Its programs of a key head's first value head also store the beams' k-hat_t (the q, k rows and norms are
  loaded there anyway). A step on the route is these two launches; on Hopper at K = V = 128 with bf16 rows the
  step kernel is `kernels/onela/tree_ws.py`'s warp-specialised one instead, after the lists at 32-position tiles.
The products spend tensor-core FLOPs on pairs the mask zeroes; what they buy is one gather per distinct record
per tile. Why: kernels/NOTES.md, "Record-major replay".
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import cuda as tl_cuda

from kernels.onela.records import record_row
from kernels.onela.plan import _TREE_BEAMS
from kernels.onela.triton_kernels import _mm, _norms, _qk_load
from kernels.onela.tree_ws import launch_tree_ws


@triton.jit
def _min(a, b):
    return tl.minimum(a, b)


@triton.jit
def _chain_of(anc_prev_ptr, r, W, T_CAP, par, cols, step, live):
    """Step `step`'s ancestry entries h_t(b, j) (j = `cols`) of the beams whose parents are `par` (request r), read
    from the previous step's table: the parent's row, and the parent itself at j = step - 1 (what the next table's
    row holds, read without waiting for it). par and cols broadcast against each other; `live` masks the loads."""
    prev = tl.load(anc_prev_ptr + (r * W + par) * T_CAP + cols, mask=live & (cols < step - 1), other=0)
    return tl.where(cols == step - 1, par, prev)


@triton.jit
def _chain(anc_prev_ptr, par_ptr, r, W, T_CAP, beam, cols, step, live):
    """`_chain_of` for beams `beam`: their parents loaded first."""
    par = tl.load(par_ptr + r * W + beam, mask=live, other=0)
    return _chain_of(anc_prev_ptr, r, W, T_CAP, par, cols, step, live)


@triton.jit
def _slots(anc_prev_ptr, par_ptr, order_ptr, r, W, T_CAP, step, cols, live, pos):
    """Ancestry rows [BB, TC] (columns `cols`) of the beams at tree-order positions `pos` of request r (clamped to
    the request: a neighbour outside the tile is masked by the caller)."""
    beam = tl.load(order_ptr + tl.minimum(tl.maximum(pos, 0), W - 1))
    return _chain(anc_prev_ptr, par_ptr, r, W, T_CAP, beam[:, None], cols[None, :], step, live)


@triton.jit
def _first_gates(par_ptr, anc_prev_ptr, g_ptr, alpha_ptr, gcum_ptr, r, nb, hv, R, W, HV, T_CAP, step,
                 TF: tl.constexpr):
    """The route's first step, value head hv, beams `nb` of request r: the ancestral records' gates are not there
    yet, so each beam sums its chain's log alphas (TF depths a chunk) and writes every ancestor's G (beams that
    share a record write the same value), then its own G_b = G(parent) + g_t."""
    par = tl.load(par_ptr + r * W + nb)
    g = tl.load(g_ptr + (r * W + nb) * HV + hv)
    gsum = g * 0.0
    d0 = 0
    while d0 < step:             # a while loop: the interpreter takes no range over a run-time bound
        cols = d0 + tl.arange(0, TF)
        live = (cols < step)[None, :] & (nb < W)[:, None]
        rows = record_row(cols[None, :], r, hv, _chain_of(anc_prev_ptr, r, W, T_CAP, par[:, None], cols[None, :],
                                                           step, live), R, HV, W)
        cum = tl.cumsum(tl.log(tl.load(alpha_ptr + rows, mask=live, other=1.0)), axis=1) + gsum[:, None]
        tl.store(gcum_ptr + rows, cum, mask=live)
        gsum = tl.sum(tl.where(cols[None, :] == tl.minimum(step, d0 + TF) - 1, cum, 0.0), axis=1)
        d0 += TF
    tl.store(gcum_ptr + record_row(step, r, hv, nb, R, HV, W), gsum + g)


@triton.jit(do_not_specialize=["step"])
def onela_tree_lists_kernel(par_ptr, anc, rank_prev_ptr, rank_ptr, order_ptr, scratch_ptr, ent_ptr, cnt_ptr, gates,
                            R, W, HV, T_CAP, step, MAXE, WP: tl.constexpr, BB: tl.constexpr, TC: tl.constexpr,
                            TF: tl.constexpr, HVP: tl.constexpr, FIRST: tl.constexpr, LB: tl.constexpr,
                            NC: tl.constexpr, PDL: tl.constexpr):
    """Step `step`'s tree order, record lists and per-beam records (module docstring); programs (tile, 0). anc =
    (the previous step's ancestry table, this step's), both [R, W, T_CAP]: this step's rows are read as the
    parents' previous rows, so no program waits for another's writes; rank_prev: each beam's position in the
    previous step's order (not read when FIRST); writes rank and order [R, W] for this tile's positions, the
    tile's entries (int32 [MAXE, 4] at ent_ptr + tile * MAXE * 4) and its count, and for the tile's beams in slot
    order the per-beam records: the next ancestry table's rows, alpha_t = exp(g_t) and the cumulative log gate
    G_b = G(parent) + g_t of every value head -- whose loads go out before the sort and stores after it. FIRST
    (the route's first step): a radix sort instead of the one sort by the previous order, and the gates come from
    programs (tile, 1 + hv), one per value head (`_first_gates`). gates = (g [R, W, HV], the store's alpha,
    gcum). scratch: int32 [tiles, WP], this program's copy of the order. W a multiple of BB; WP the power of two
    >= W (LB = log2 WP bits a slot); TC depths per chunk of the loops (TF at the first step's gates); HVP the power
    of two >= HV; NC ancestry columns per sort at the first step (NC LB + LB < 63: int64 keys). PDL: this step's
    inputs (g, parents) are read before the wait on the previous launch, everything else after it."""
    anc_prev_ptr, anc_next_ptr = anc
    g_ptr, alpha_ptr, gcum_ptr = gates
    if PDL:
        tl_cuda.gdc_launch_dependents()     # the step kernel may load its S tile meanwhile
    tile = tl.program_id(0)
    role = tl.program_id(1)
    r = tile // (W // BB)
    lane = tl.arange(0, BB)
    nb = (tile % (W // BB)) * BB + lane           # the tile's beams (slot order) and positions (tree order)
    if role > 0:
        if PDL:
            tl_cuda.gdc_wait()
        _first_gates(par_ptr, anc_prev_ptr, g_ptr, alpha_ptr, gcum_ptr, r, nb, role - 1, R, W, HV, T_CAP, step, TF)
    else:
        _order_and_lists(par_ptr, anc_prev_ptr, anc_next_ptr, rank_prev_ptr, rank_ptr, order_ptr, scratch_ptr,
                         ent_ptr, cnt_ptr, g_ptr, alpha_ptr, gcum_ptr, tile, r, lane, nb, R, W, HV, T_CAP, step,
                         MAXE, WP, BB, TC, HVP, FIRST, LB, NC, PDL)


@triton.jit
def _order_and_lists(par_ptr, anc_prev_ptr, anc_next_ptr, rank_prev_ptr, rank_ptr, order_ptr, scratch_ptr, ent_ptr,
                     cnt_ptr, g_ptr, alpha_ptr, gcum_ptr, tile, r, lane, nb, R, W, HV, T_CAP, step, MAXE,
                     WP: tl.constexpr, BB: tl.constexpr, TC: tl.constexpr, HVP: tl.constexpr, FIRST: tl.constexpr,
                     LB: tl.constexpr, NC: tl.constexpr, PDL: tl.constexpr):
    """`onela_tree_lists_kernel`'s programs (tile, 0)."""
    p = tl.arange(0, WP)
    in_w = p < W
    hvs = tl.arange(0, HVP)
    gmask = (hvs < HV)[None, :] & (nb < W)[:, None]
    g = tl.load(g_ptr + (r * W + nb)[:, None] * HV + hvs[None, :], mask=gmask, other=0.0)
    par = tl.load(par_ptr + r * W + nb)
    par_w = tl.load(par_ptr + r * W + p, mask=in_w, other=0)
    if PDL:
        tl_cuda.gdc_wait()       # the previous launch (and, through its own wait, every earlier one) is done
    cols = tl.arange(0, TC)
    live = (cols < step)[None, :] & (nb < W)[:, None]
    slot = _chain_of(anc_prev_ptr, r, W, T_CAP, par[:, None], cols[None, :], step, live)
    if not FIRST:
        gprev = tl.load(gcum_ptr + record_row(step - 1, r, hvs[None, :], par[:, None], R, HV, W), mask=gmask,
                        other=0.0)
    scr = scratch_ptr + tile.to(tl.int64) * WP
    if FIRST:   # a least-significant-first radix sort of the ancestry rows: NC columns of LB bits a pass
        order = p
        hi = step
        while hi > 0:
            lo = tl.maximum(hi - NC, 0)
            key = tl.zeros([WP], dtype=tl.int64)
            for c in tl.static_range(NC):
                col = _chain(anc_prev_ptr, par_ptr, r, W, T_CAP, order, lo + c, step, in_w & (lo + c < hi))
                key = (key << LB) | col.to(tl.int64)
            # each key keeps the position it sorts from, so equal columns keep the last pass's order
            srt = tl.sort(tl.where(in_w, (key << LB) | p.to(tl.int64), (1 << 62) | p.to(tl.int64)))
            tl.store(scr + p, order)
            tl.debug_barrier()
            order = tl.load(scr + (srt & (WP - 1)).to(tl.int32))
            tl.debug_barrier()
            hi = lo
    else:
        rank = tl.load(rank_prev_ptr + r * W + par_w, mask=in_w, other=0)
        order = tl.sort(tl.where(in_w, rank * WP + p, W * WP + p)) % WP
    tl.store(scr + p, order)
    # the per-beam records: the first chunk from the loads above, then any further chunks
    tl.store(anc_next_ptr + (r * W + nb)[:, None] * T_CAP + cols[None, :], slot, mask=live)
    tl.store(alpha_ptr + record_row(step, r, hvs[None, :], nb[:, None], R, HV, W), tl.exp(g), mask=gmask)
    if not FIRST:
        tl.store(gcum_ptr + record_row(step, r, hvs[None, :], nb[:, None], R, HV, W), gprev + g, mask=gmask)
    d0 = TC
    while d0 < step:             # a while loop: the interpreter takes no range over a run-time bound
        cols_d = d0 + tl.arange(0, TC)
        live_d = (cols_d < step)[None, :] & (nb < W)[:, None]
        slot_d = _chain_of(anc_prev_ptr, r, W, T_CAP, par[:, None], cols_d[None, :], step, live_d)
        tl.store(anc_next_ptr + (r * W + nb)[:, None] * T_CAP + cols_d[None, :], slot_d, mask=live_d)
        d0 += TC
    tl.debug_barrier()
    pos = nb
    beam = tl.load(scr + pos)
    tl.store(order_ptr + r * W + pos, beam)
    tl.store(rank_ptr + r * W + beam, pos)
    ent = ent_ptr + tile.to(tl.int64) * MAXE * 4
    n = 0
    d0 = 0
    while d0 < step:
        cl = d0 + tl.arange(0, TC)
        lv = (cl < step)[None, :] & (lane < BB)[:, None]
        cur = _slots(anc_prev_ptr, par_ptr, scr, r, W, T_CAP, step, cl, lv, pos)
        head = lv & ((lane == 0)[:, None] | (cur != _slots(anc_prev_ptr, par_ptr, scr, r, W, T_CAP, step, cl,
                                                             lv, pos - 1)))
        nxt = (lane < BB - 1)[:, None] & (_slots(anc_prev_ptr, par_ptr, scr, r, W, T_CAP, step, cl, lv,
                                                 pos + 1) != cur)
        end = tl.associative_scan(tl.where(nxt, lane[:, None] + 1, BB), 0, _min, reverse=True)
        per_depth = tl.sum(head.to(tl.int32), 0)
        idx = n + (tl.cumsum(per_depth, 0) - per_depth)[None, :] + tl.cumsum(head.to(tl.int32), 0) - 1
        e = ent + idx * 4
        tl.store(e, cl[None, :] + tl.zeros([BB, TC], dtype=tl.int32), mask=head)
        tl.store(e + 1, cur, mask=head)
        tl.store(e + 2, lane[:, None] + tl.zeros([BB, TC], dtype=tl.int32), mask=head)
        tl.store(e + 3, end, mask=head)
        n += tl.sum(per_depth, 0)
        d0 += TC
    tl.store(cnt_ptr + tile, n)


@triton.jit
def _records_chunk(khat_ptr, delta_ptr, gcum_ptr, ent, c, n, r, hk, hv, lane8, x4, gb8, lo4, acc, dims,
                   BB: tl.constexpr, CH: tl.constexpr, K: tl.constexpr, V: tl.constexpr, QK_BF16: tl.constexpr,
                   UPCAST: tl.constexpr):
    """Entries [c, c + CH) of the tile's list: acc += A @ delta over the tile's four row blocks (module docstring),
    A = the hi or lo bf16 plane (lo4) of C[b, i] = exp(G_b - G_i) (x_b . k-hat_i) where beam position b lies in
    record i's run, else 0, for x = the block's raw q or k rows (the caller applies the norms). x4 = (bf16 rows,
    their fp32 residual rows, unused with QK_BF16)."""
    xb, xr = x4
    R, W, HV, HK = dims
    e = c + tl.arange(0, CH)
    live = e < n
    fields = tl.load(ent + e[:, None] * 4 + tl.arange(0, 4)[None, :], mask=live[:, None], other=0)
    depth_start, slot_end = tl.split(tl.reshape(fields, (CH, 2, 2)))
    depth, start = tl.split(depth_start)
    slot, end = tl.split(slot_end)                               # padding: the empty run [0, 0)
    krow = record_row(depth, r, hk, slot, R, HK, W).to(tl.int64)
    vrow = record_row(depth, r, hv, slot, R, HV, W).to(tl.int64)
    kh = tl.load(khat_ptr + krow[:, None] * K + tl.arange(0, K)[None, :], mask=live[:, None], other=0.0)
    d = tl.load(delta_ptr + vrow[:, None] * V + tl.arange(0, V)[None, :], mask=live[:, None], other=0.0)
    gi = tl.load(gcum_ptr + vrow, mask=live, other=0.0)
    inside = (lane8[:, :, None] >= start[None, None, :]) & (lane8[:, :, None] < end[None, None, :])
    dec = tl.where(inside, tl.exp(gb8[:, :, None] - gi[None, None, :]), 0.0)
    dec = tl.reshape(tl.broadcast_to(tl.expand_dims(dec, 1), (4, 2, BB // 2, CH)), (4 * BB, CH))
    kh_t = tl.trans(kh)
    cf = _mm(xb, kh_t, UPCAST)                                          # [4 BB, CH]
    if not QK_BF16:
        cf += _mm(xr, kh_t, UPCAST)
    cf = cf * dec
    hi = cf.to(tl.bfloat16)
    a = tl.where(lo4[:, None], (cf - hi.to(tl.float32)).to(tl.bfloat16), hi)
    return acc + _mm(a, d, UPCAST)


@triton.jit(do_not_specialize=["step"])
def onela_tree_step_kernel(beams, s_ptr, gtr, tree, out_ptr, R, W, HV, HK, MAXE, sq, sv, step,
                           K: tl.constexpr, V: tl.constexpr, G: tl.constexpr, BB: tl.constexpr, CH: tl.constexpr,
                           ITERS: tl.constexpr, STAGES: tl.constexpr, QK_BF16: tl.constexpr, UPCAST: tl.constexpr,
                           PDL: tl.constexpr):
    """Step `step` on the record-major route for ITERS tiles of BB tree-order positions of one (request, value
    head), after `onela_tree_lists_kernel`: the S_ctx[r, hv] tile rounded to bf16 once (as the main kernel's
    projections take it at K <= 128), then per tile the beams' q, k rows (bf16; fp32 with QK_BF16 off, split into
    bf16 and a residual) and norms, u_x = exp(G_b) x S^T + the replay over the tile's list (CH records at a
    time, STAGES chunks in flight; 0: the interpreter's loop) scaled by x's norm, and as the main kernel
    delta_t = beta (v - u_k) and o_t = u_q + delta_t (k-hat . q-hat): o_t stored, delta_t appended.
    The products run on 4 BB rows, four blocks of the tile's beams -- q for C's hi plane, q for its lo plane, k
    hi, k lo -- so that one product forms both coefficient blocks and the next takes them as its A operand where
    the first left them (on Hopper, wgmma with A in registers: one warp a block) and reads each delta row once;
    the blocks are summed in pairs once per tile. The S projection fills the hi blocks' accumulator rows.
    beams = (q, k, v, beta), gtr = the GtrStore's (k-hat, delta) and gcum, tree = (order, entries, counts);
    sq / sv = q and k's / v's (request, beam, head) strides. PDL: the S tile is loaded before the wait on the
    previous launch (the lists), everything else after it."""
    if PDL:
        tl_cuda.gdc_launch_dependents()     # the next step's lists may load its parents and gates meanwhile
    q_ptr, k_ptr, v_ptr, beta_ptr = beams
    khat_ptr, delta_ptr, gcum_ptr = gtr
    order_ptr, ent_ptr, cnt_ptr = tree
    pid_b = tl.program_id(0)
    pid_rh = tl.program_id(1)
    r = pid_rh // HV
    hv = pid_rh % HV
    hk = hv // G
    offs_k = tl.arange(0, K)
    offs_v = tl.arange(0, V)
    s_row = (r * HV + hv).to(tl.int64) * (V * K) + offs_v * K
    s_t = tl.trans(tl.load(s_ptr + s_row[:, None] + offs_k[None, :]).to(tl.bfloat16))           # [K, V]
    if PDL:
        tl_cuda.gdc_wait()       # the previous launch (and, through its own wait, every earlier one) is done
    lane = tl.arange(0, BB)
    rows = tl.arange(0, 4 * BB)                 # [x, half of the tile, hi / lo, 8 beams]: see the docstring
    lane4 = (rows // BB) % 2 * (BB // 2) + rows % (BB // 2)
    is_q4 = rows < 2 * BB
    lo4 = (rows // (BB // 2)) % 2 == 1
    lane8 = tl.max(tl.reshape(lane4, (4, 2, BB // 2)), axis=1)
    sq_r, sq_w, sq_h = sq
    sv_r, sv_w, sv_h = sv
    dims = (R, W, HV, HK)
    # each tile's order and list length are loaded a tile ahead, so a tile's q / k rows wait on no earlier load
    tile = pid_b * ITERS
    beam_next = tl.load(order_ptr + r * W + tile * BB + lane)
    beam4_next = tl.load(order_ptr + r * W + tile * BB + lane4)
    n_next = tl.load(cnt_ptr + r * (W // BB) + tile)
    for it in tl.range(0, ITERS, num_stages=1):
        tile = pid_b * ITERS + it
        beam = beam_next
        beam4 = beam4_next
        n = n_next
        nt = pid_b * ITERS + tl.minimum(it + 1, ITERS - 1)
        beam_next = tl.load(order_ptr + r * W + nt * BB + lane)
        beam4_next = tl.load(order_ptr + r * W + nt * BB + lane4)
        n_next = tl.load(cnt_ptr + r * (W // BB) + nt)
        qk_row = (r * sq_r + beam * sq_w + hk * sq_h).to(tl.int64)
        x = _qk_load(q_ptr, k_ptr, qk_row, offs_k, lane < BB)
        inv_q, inv_k, kq_t = _norms(x[0].to(tl.float32), x[1].to(tl.float32), K)
        if hv % G == 0:                            # the step's record: k-hat_t, once per key head
            tl.store(khat_ptr + record_row(step, r, hk, beam, R, HK, W).to(tl.int64)[:, None] * K + offs_k[None, :],
                     (x[1].to(tl.float32) * inv_k[:, None]).to(khat_ptr.dtype.element_ty))
        off4 = (r * sq_r + beam4 * sq_w + hk * sq_h).to(tl.int64)[:, None] + offs_k[None, :]
        x4 = tl.load(tl.where(is_q4[:, None], q_ptr + off4, k_ptr + off4))
        if QK_BF16:
            xb = x4
            xr = x4                                # unused
        else:
            xf = x4.to(tl.float32)
            xb = xf.to(tl.bfloat16)
            xr = (xf - xb.to(tl.float32)).to(tl.bfloat16)
        gb4 = tl.load(gcum_ptr + record_row(step, r, hv, beam4, R, HV, W))
        gb8 = tl.max(tl.reshape(gb4, (4, 2, BB // 2)), axis=1)         # [x and half, 8 beams]: hi = lo row
        gb_off = (r * W + beam) * HV + hv
        beta = tl.load(beta_ptr + gb_off)          # the epilogue's loads issue with q, k, before the replay
        v = tl.load(v_ptr + r * sv_r + beam[:, None] * sv_w + hv * sv_h + offs_v[None, :])
        acc = _mm(xb, s_t, UPCAST)                 # S rounded to bf16, as the main kernel
        if not QK_BF16:
            acc += _mm(xr, s_t, UPCAST)
        acc = acc * tl.where(lo4, 0.0, tl.exp(gb4))[:, None]
        rt = r * (W // BB) + tile
        ent = ent_ptr + rt.to(tl.int64) * MAXE * 4
        if STAGES == 0:
            c = 0
            while c < n:
                acc = _records_chunk(khat_ptr, delta_ptr, gcum_ptr, ent, c, n, r, hk, hv, lane8, (xb, xr), gb8,
                                     lo4, acc, dims, BB, CH, K, V, QK_BF16, UPCAST)
                c += CH
        else:
            for c in tl.range(0, n, CH, num_stages=STAGES):
                acc = _records_chunk(khat_ptr, delta_ptr, gcum_ptr, ent, c, n, r, hk, hv, lane8, (xb, xr), gb8,
                                     lo4, acc, dims, BB, CH, K, V, QK_BF16, UPCAST)
        u = tl.sum(tl.reshape(acc, (4, 2, BB // 2, V)), axis=1)         # hi + lo: [x and half, 8 beams, V]
        u_q, u_k = tl.split(tl.permute(tl.reshape(u, (2, BB, V)), (1, 2, 0)))
        u_q = u_q * inv_q[:, None]
        u_k = u_k * inv_k[:, None]
        delta = beta[:, None] * (v.to(tl.float32) - u_k)
        o = u_q + delta * kq_t[:, None]
        tl.store(out_ptr + gb_off.to(tl.int64)[:, None] * V + offs_v[None, :], o.to(out_ptr.dtype.element_ty))
        tl.store(delta_ptr + record_row(step, r, hv, beam, R, HV, W).to(tl.int64)[:, None] * V + offs_v[None, :],
                 delta.to(delta_ptr.dtype.element_ty))


class TreeState:
    """What the record-major route keeps beside the GtrStore: each record's cumulative log gate gcum
    [T, R, HV, W] (recurrent state, written once per record), each beam's position in its step's tree order
    (two ping-pong [R, W] tables: step t reads (t - 1) % 2), and per-step scratch -- the order, the tiles' record
    lists (at most one entry per (position, depth): [tiles, _TREE_BEAMS T, 4]) and the order copies of the
    first step's sorts."""

    def __init__(self, geo, R: int, W: int, T: int, device):
        tiles = R * W // _TREE_BEAMS
        i32 = dict(dtype=torch.int32, device=device)
        self.gcum = torch.zeros(T, R, geo.hv, W, dtype=torch.float32, device=device)
        self.rank = torch.zeros(2, R, W, **i32)
        self.order = torch.zeros(R, W, **i32)
        self.scratch = torch.zeros(tiles, triton.next_power_of_2(W), **i32)
        self.ent = torch.zeros(tiles, _TREE_BEAMS * T, 4, **i32)
        self.cnt = torch.zeros(tiles, **i32)

    def persistent_bytes(self) -> int:
        """The gates and the two order tables (the rest is rewritten every step)."""
        return (self.gcum.numel() + self.rank.numel()) * 4

    def launch(self, st, t: int, launches: dict, ins: tuple, out):
        """Step t's launches for OneLAStepper `st`: "tree_lists", then "tree_step" or "tree_ws" (on tiles of the
        lists' BB). ins = (q, k, v, g, beta, parents)."""
        q, k, v, g, beta, parents = ins
        geo, R, W = st.geometry, st.R, st.W
        grid, const, opts = launches["tree_lists"]
        maxe = const["BB"] * st.T       # a tile's list entries at most; `ent` holds R W T of them at any BB
        st._note_kernel("tree_lists", onela_tree_lists_kernel[grid](
            parents, (st.anc[(t - 1) % 2], st.anc[t % 2]), self.rank[(t - 1) % 2], self.rank[t % 2], self.order,
            self.scratch, self.ent, self.cnt, (g, st.store.alpha, self.gcum), R, W, geo.hv, st.T, t,
            maxe, **const, **opts))
        if "tree_ws" in launches:
            st._note_kernel("tree_ws", launch_tree_ws(st, self, t, launches["tree_ws"], ins, out, maxe))
            return
        grid, const, opts = launches["tree_step"]
        st._note_kernel("tree_step", onela_tree_step_kernel[grid](
            (q, k, v, beta), st.s_ctx, (st.store.khat, st.store.delta, self.gcum), (self.order, self.ent, self.cnt),
            out, R, W, geo.hv, geo.hk, maxe, (q.stride(0), q.stride(1), q.stride(2)),
            (v.stride(0), v.stride(1), v.stride(2)), t, **const, **opts))
