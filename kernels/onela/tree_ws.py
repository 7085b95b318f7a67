"""The record-major route's step kernel, warp-specialised (Gluon, Hopper): `onela_tree_step_kernel`'s work with its
loads taken off the math's path.

The Triton step kernel (`kernels/onela/tree.py`) runs a tile's chain in one warpgroup -- order -> q / k rows ->
S projection -> entries -> k-hat / delta rows -> products -> stores -- and waits on each link. Here each program
(ITERS tiles of one request and value head, sharing the S tile) runs two consumer / producer pairs; pair p takes
the program's tiles p, p + 2, ...:
- the producer (`_producer`, one warp) walks its tiles ahead of the consumer: a tile's order row and list length
  (loaded a tile ahead, its list entries a chunk ahead, so no copy waits on a load of its own), then by
  cp.async its q and k rows (the [2 BB, K] operand: q of the BB beams, then k), v rows, gates G_b and beta into the
  pair's tile buffers, then its record list CH entries at a time -- each chunk's k-hat and delta rows, gates G_i
  and runs [start, end) into a ring of NR entries;
- the consumer (`_consumer`, one warpgroup) takes the S projection (wgmma against the S tile, loaded once by TMA),
  each chunk's two products -- C = x @ k-hat^T on the tensor cores, zeroed outside each record's run and decayed
  by exp(G_b - G_i) in registers, then u += C @ delta with C as its bf16 hi and lo planes in registers (A operand)
  -- into two accumulators of V / 2 columns (so the epilogue's q / k exchange buffer is half a tile and the ring
  takes three entries), and the epilogue: the norms, delta_t = beta (v - u_k), o_t = u_q + delta_t (k-hat . q-hat),
  stored with k-hat_t where the tile's key head is first.
The two pairs keep two tiles' chains in flight on an SM, with the loads of both ahead of them. The rows of the
[2 BB, *] products are q's BB beams then k's, so one wgmma (M = 64) forms both projections and both coefficient
blocks. Same math, gate and records as the Triton step kernel; applies where the warp-specialised one-launch kernel
does (Hopper, bf16 rows, `kernels.onela.ws`) at K = V = 128. Why: kernels/NOTES.md, "The step kernel
warp-specialised".
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, mbarrier, tma, warpgroup_mma, \
    warpgroup_mma_wait

from kernels.onela.records import record_row
from kernels.onela.ws import _desc, _gdc_launch_dependents, _gdc_wait

TREE_WS_BEAMS = 32      # tree-order positions a tile: q and k rows of 32 beams fill one wgmma M = 64
TREE_WS_DIMS = (128, 128)   # the (K, V) it takes: one [64, 128] operand per projection
_CH = 32                # records a chunk
_NR = 3                 # ring entries per pair: the program's shared memory is 217 KB at NR = 3
_MAXNREG = 168          # 168 x 12 warps (10 rounded up to warpgroups) fills one SM's register file
_CONSUMER_REGS = gl.constexpr(_MAXNREG)
_PRODUCER_REGS = gl.constexpr(96)


@gluon.jit
def _producer(p: gl.constexpr, bufs, bars, beams, gtr, tree, dims, sq, sv, step, s_desc, K: gl.constexpr,
              V: gl.constexpr, G: gl.constexpr, BB: gl.constexpr, CH: gl.constexpr, NR: gl.constexpr,
              ITERS: gl.constexpr):
    """Pair p's loads, in the order its consumer takes them: per tile the [2 BB, K] q / k operand, v, G_b and beta
    (one buffer, released by the consumer after its last product), then each chunk of the tile's list into the
    ring. Producer 0 also loads the program's S tile (TMA), before the wait on the lists kernel."""
    q_ptr, k_ptr, v_ptr, beta_ptr = beams
    khat_ptr, delta_ptr, gcum_ptr = gtr
    order_ptr, ent_ptr, cnt_ptr = tree
    s_smem, xs, vs, tgb, tbeta, tbeam, rkh, rd, rgi, rst, ren, u_smem = bufs
    s_ready, x_ready, x_empty, r_ready, r_empty = bars
    R, W, HV, HK, MAXE = dims
    sq_r, sq_w, sq_h = sq
    sv_r, sv_w, sv_h = sv
    rows_l: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [1, 1], [1, 0])     # [rows, 128] bf16: 16 B a copy
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    pid_b = gl.program_id(0)
    pid_rh = gl.program_id(1)
    r = pid_rh // HV
    hv = pid_rh % HV
    hk = hv // G
    if p == 0:
        mbarrier.expect(s_ready, s_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(s_desc, [pid_rh * V, 0], s_ready, s_smem)
    _gdc_wait()             # the lists kernel's order, entries and gates are written
    cols = gl.arange(0, 128, layout=gl.SliceLayout(0, rows_l))
    cols_h = gl.arange(0, V // 2, layout=gl.SliceLayout(0, rows_l))
    x_rows = gl.arange(0, 2 * BB, layout=gl.SliceLayout(1, rows_l))
    pos2 = x_rows % BB
    is_k = x_rows >= BB
    b_rows = gl.arange(0, BB, layout=gl.SliceLayout(1, rows_l))
    c_rows = gl.arange(0, CH, layout=gl.SliceLayout(1, rows_l))
    bv = gl.arange(0, BB, layout=vec_l)
    x2v = gl.arange(0, 2 * BB, layout=vec_l) % BB
    cv = gl.arange(0, CH, layout=vec_l)
    cnt = pid_b * 0
    j = pid_b * 0
    # each tile's order row and list length are loaded a tile ahead, each chunk's entries a chunk ahead, so the
    # copies of a chunk wait on no load of their own
    nxt = _tile_loads(order_ptr, cnt_ptr, r, W, pid_b * ITERS + p, BB, b_rows, bv, pos2, x2v)
    for i in range(p, ITERS, 2):
        tile = pid_b * ITERS + i
        base = r * W + tile * BB
        rt = r * (W // BB) + tile
        beam2, beam, beam_v, beam2_v, n = nxt
        nxt = _tile_loads(order_ptr, cnt_ptr, r, W, pid_b * ITERS + gl.minimum(i + 2, ITERS - 1), BB, b_rows, bv,
                          pos2, x2v)
        ent = ent_ptr + rt.to(gl.int64) * MAXE * 4
        fields = _entry_loads(ent, 0, n, c_rows, cv)
        qk_off = (r * sq_r + beam2 * sq_w + hk * sq_h).to(gl.int64)[:, None] + cols[None, :]
        mbarrier.wait(x_empty.index(p), (j & 1) ^ 1)
        async_copy.async_copy_global_to_shared(xs.index(p), gl.where(is_k[:, None], k_ptr + qk_off, q_ptr + qk_off))
        v_rows = v_ptr + (r * sv_r + beam * sv_w + hv * sv_h).to(gl.int64)[:, None] + cols_h[None, :]
        async_copy.async_copy_global_to_shared(vs.index(2 * p), v_rows)
        async_copy.async_copy_global_to_shared(vs.index(2 * p + 1), v_rows + V // 2)
        async_copy.async_copy_global_to_shared(tgb.index(p), gcum_ptr + record_row(step, r, hv, beam2_v, R, HV, W))
        async_copy.async_copy_global_to_shared(tbeta.index(p), beta_ptr + (r * W + beam_v) * HV + hv)
        async_copy.async_copy_global_to_shared(tbeam.index(p), order_ptr + base + bv)
        async_copy.mbarrier_arrive(x_ready.index(p), increment_count=False)
        for c in range(0, n, CH):
            e = p * NR + cnt % NR
            depth, slot, depth_v, slot_v = fields
            fields = _entry_loads(ent, c + CH, n, c_rows, cv)
            live_v = c + cv < n
            krow = record_row(depth, r, hk, slot, R, HK, W).to(gl.int64)
            vrow = record_row(depth, r, hv, slot, R, HV, W).to(gl.int64)
            mbarrier.wait(r_empty.index(e), ((cnt // NR) & 1) ^ 1)
            async_copy.async_copy_global_to_shared(rkh.index(e), khat_ptr + krow[:, None] * K + cols[None, :])
            async_copy.async_copy_global_to_shared(rd.index(e), delta_ptr + vrow[:, None] * V + cols[None, :])
            async_copy.async_copy_global_to_shared(rgi.index(e), gcum_ptr + record_row(depth_v, r, hv, slot_v, R,
                                                                                        HV, W))
            async_copy.async_copy_global_to_shared(rst.index(e), ent + (c + cv) * 4 + 2, mask=live_v)
            async_copy.async_copy_global_to_shared(ren.index(e), ent + (c + cv) * 4 + 3, mask=live_v)
            async_copy.mbarrier_arrive(r_ready.index(e), increment_count=False)
            cnt += 1
        j += 1


@gluon.jit
def _tile_loads(order_ptr, cnt_ptr, r, W, tile, BB: gl.constexpr, b_rows, bv, pos2, x2v):
    """Tile `tile`'s beams in tree order -- as the q / k operand's rows (pos2), as v's rows (b_rows) and as vectors
    (bv, x2v) -- and its list length."""
    base = r * W + tile * BB
    return (gl.load(order_ptr + base + pos2), gl.load(order_ptr + base + b_rows), gl.load(order_ptr + base + bv),
            gl.load(order_ptr + base + x2v), gl.load(cnt_ptr + r * (W // BB) + tile))


@gluon.jit
def _entry_loads(ent, c, n, c_rows, cv):
    """The depth and slot of list entries [c, c + CH) (zeros past n), as the copies' rows and as vectors."""
    live = c + c_rows < n
    live_v = c + cv < n
    return (gl.load(ent + (c + c_rows) * 4, mask=live, other=0), gl.load(ent + (c + c_rows) * 4 + 1, mask=live,
                                                                          other=0),
            gl.load(ent + (c + cv) * 4, mask=live_v, other=0), gl.load(ent + (c + cv) * 4 + 1, mask=live_v, other=0))


@gluon.jit
def _consumer(p: gl.constexpr, bufs, bars, gtr, tree, out_ptr, dims, step, K: gl.constexpr, V: gl.constexpr,
              G: gl.constexpr, BB: gl.constexpr, CH: gl.constexpr, NR: gl.constexpr, ITERS: gl.constexpr):
    """Pair p's math (one warpgroup): per tile the S projection, the chunks' products and the epilogue."""
    khat_ptr, delta_ptr, gcum_ptr = gtr
    order_ptr, ent_ptr, cnt_ptr = tree
    s_smem, xs, vs, tgb, tbeta, tbeam, rkh, rd, rgi, rst, ren, u_smem = bufs
    s_ready, x_ready, x_empty, r_ready, r_empty = bars
    R, W, HV, HK, MAXE = dims
    H: gl.constexpr = V // 2         # value columns of each of the two accumulators
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, H, 16])
    mmc: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, CH, 16])
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    ep: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])        # [BB, 128] rows: 16 B a thread
    row_e: gl.constexpr = gl.SliceLayout(1, ep)
    row_c: gl.constexpr = gl.SliceLayout(1, mmc)
    col_c: gl.constexpr = gl.SliceLayout(0, mmc)
    pid_b = gl.program_id(0)
    pid_rh = gl.program_id(1)
    r = pid_rh // HV
    hv = pid_rh % HV
    hk = hv // G
    cols = gl.arange(0, 128, layout=gl.SliceLayout(0, ep))
    cols_h = gl.arange(0, H, layout=gl.SliceLayout(0, ep))
    pos = gl.arange(0, 2 * BB, layout=row_c) % BB       # row -> the tile position whose q / k it holds
    cv = gl.arange(0, CH, layout=col_c)
    _gdc_wait()
    mbarrier.wait(s_ready, 0)
    s_0 = s_smem.slice(0, H).permute((1, 0))           # [K, H]: value columns [0, H)
    s_1 = s_smem.slice(H, H).permute((1, 0))           # ... [H, V)
    cnt = pid_b * 0
    j = pid_b * 0
    n_next = gl.load(cnt_ptr + r * (W // BB) + pid_b * ITERS + p)
    for i in range(p, ITERS, 2):
        tile = pid_b * ITERS + i
        n = n_next
        n_next = gl.load(cnt_ptr + r * (W // BB) + pid_b * ITERS + gl.minimum(i + 2, ITERS - 1))
        mbarrier.wait(x_ready.index(p), j & 1)
        x = xs.index(p)
        acc0 = warpgroup_mma(x, s_0, gl.zeros([2 * BB, H], gl.float32, mma), use_acc=False, is_async=True)
        acc1 = warpgroup_mma(x, s_1, gl.zeros([2 * BB, H], gl.float32, mma), use_acc=False, is_async=True)
        qf = x.slice(0, BB).load(ep).to(gl.float32)
        kf = x.slice(BB, BB).load(ep).to(gl.float32)
        inv_q = gl.rsqrt(gl.sum(qf * qf, axis=1) + 1e-6) * (K ** -0.5)
        inv_k = gl.rsqrt(gl.sum(kf * kf, axis=1) + 1e-6)
        kq_t = gl.sum(qf * kf, axis=1) * inv_q * inv_k
        beam = tbeam.index(p).load(row_e)
        if hv % G == 0:                                 # the step's record: k-hat_t, once per key head
            gl.store(khat_ptr + record_row(step, r, hk, beam, R, HK, W).to(gl.int64)[:, None] * K + cols[None, :],
                     (kf * inv_k[:, None]).to(khat_ptr.dtype.element_ty))
        gb_c = tgb.index(p).load(row_c)
        gb_a = tgb.index(p).load(gl.SliceLayout(1, mma))
        acc0, acc1 = warpgroup_mma_wait(0, deps=[acc0, acc1])
        acc0 = acc0 * gl.exp(gb_a)[:, None]
        acc1 = acc1 * gl.exp(gb_a)[:, None]
        for c in range(0, n, CH):
            e = p * NR + cnt % NR
            mbarrier.wait(r_ready.index(e), (cnt // NR) & 1)
            cf = warpgroup_mma(x, rkh.index(e).permute((1, 0)), gl.zeros([2 * BB, CH], gl.float32, mmc),
                               use_acc=False)
            gi = rgi.index(e).load(col_c)
            start = rst.index(e).load(col_c)
            end = ren.index(e).load(col_c)
            inside = (pos[:, None] >= start[None, :]) & (pos[:, None] < end[None, :]) & (c + cv < n)[None, :]
            cf = gl.where(inside, cf * gl.exp(gb_c[:, None] - gi[None, :]), 0.0)
            hi = cf.to(gl.bfloat16)
            lo = (cf - hi.to(gl.float32)).to(gl.bfloat16)
            a_hi = gl.convert_layout(hi, dot_a)
            a_lo = gl.convert_layout(lo, dot_a)
            d_0 = rd.index(e).slice(0, H, dim=1)
            d_1 = rd.index(e).slice(H, H, dim=1)
            acc0 = warpgroup_mma(a_hi, d_0, acc0, is_async=True)
            acc0 = warpgroup_mma(a_lo, d_0, acc0, is_async=True)
            acc1 = warpgroup_mma(a_hi, d_1, acc1, is_async=True)
            acc1 = warpgroup_mma(a_lo, d_1, acc1, is_async=True)
            acc0, acc1 = warpgroup_mma_wait(0, deps=[acc0, acc1])
            gl.thread_barrier()
            mbarrier.arrive(r_empty.index(e), count=1)
            cnt += 1
        v0 = vs.index(2 * p).load(ep).to(gl.float32)
        v1 = vs.index(2 * p + 1).load(ep).to(gl.float32)
        beta = tbeta.index(p).load(row_e)
        gl.thread_barrier()
        mbarrier.arrive(x_empty.index(p), count=1)      # the tile's buffers are read: the producer may refill
        o_rows = out_ptr + ((r * W + beam) * HV + hv).to(gl.int64)[:, None] * V + cols_h[None, :]
        d_rows = delta_ptr + record_row(step, r, hv, beam, R, HV, W).to(gl.int64)[:, None] * V + cols_h[None, :]
        _epilogue_half(u_smem.index(p), acc0, v0, beta, inv_q, inv_k, kq_t, o_rows, d_rows, BB, ep)
        _epilogue_half(u_smem.index(p), acc1, v1, beta, inv_q, inv_k, kq_t, o_rows + H, d_rows + H, BB, ep)
        j += 1


@gluon.jit
def _epilogue_half(u, acc, v, beta, inv_q, inv_k, kq_t, o_rows, d_rows, BB: gl.constexpr, ep: gl.constexpr):
    """delta_t and o_t of H value columns: the accumulator's q rows and k rows exchanged through `u`."""
    u.store(acc)
    gl.thread_barrier()
    u_q = u.slice(0, BB).load(ep) * inv_q[:, None]
    u_k = u.slice(BB, BB).load(ep) * inv_k[:, None]
    gl.thread_barrier()
    delta = beta[:, None] * (v - u_k)
    o = u_q + delta * kq_t[:, None]
    gl.store(o_rows, o.to(o_rows.dtype.element_ty))
    gl.store(d_rows, delta.to(d_rows.dtype.element_ty))


@gluon.jit(do_not_specialize=["step"])
def onela_tree_ws_kernel(s_desc, beams, gtr, tree, out_ptr, dims, sq, sv, step, K: gl.constexpr, V: gl.constexpr,
                         G: gl.constexpr, BB: gl.constexpr, CH: gl.constexpr, NR: gl.constexpr,
                         ITERS: gl.constexpr):
    """Step `step` on the record-major route for ITERS tiles of BB tree-order positions of one (request, value
    head), after `onela_tree_lists_kernel` (launched with the same BB): grid (W / BB / ITERS, R HV). beams = (q, k,
    v, beta), gtr = the GtrStore's (k-hat, delta) and gcum, tree = (order, entries, counts), dims = (R, W, HV, HK,
    MAXE), sq / sv = q and k's / v's (request, beam, head) strides; s_desc: S_ctx's bf16 rounding, [V, K] boxes.
    The next launch may start while this one runs (programmatic dependent launch)."""
    _gdc_launch_dependents()
    x_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([2 * BB, K], gl.bfloat16)
    row_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CH, 128], gl.bfloat16)
    v_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BB, V // 2], gl.bfloat16)
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    u_l: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    s_smem = gl.allocate_shared_memory(gl.bfloat16, [V, K], s_desc.layout)
    xs = gl.allocate_shared_memory(gl.bfloat16, [2, 2 * BB, K], x_l)
    vs = gl.allocate_shared_memory(gl.bfloat16, [4, BB, V // 2], v_l)
    tgb = gl.allocate_shared_memory(gl.float32, [2, 2 * BB], flat)
    tbeta = gl.allocate_shared_memory(gl.float32, [2, BB], flat)
    tbeam = gl.allocate_shared_memory(gl.int32, [2, BB], flat)
    rkh = gl.allocate_shared_memory(gl.bfloat16, [2 * NR, CH, K], row_l)
    rd = gl.allocate_shared_memory(gl.bfloat16, [2 * NR, CH, V], row_l)
    rgi = gl.allocate_shared_memory(gl.float32, [2 * NR, CH], flat)
    rst = gl.allocate_shared_memory(gl.int32, [2 * NR, CH], flat)
    ren = gl.allocate_shared_memory(gl.int32, [2 * NR, CH], flat)
    u_smem = gl.allocate_shared_memory(gl.float32, [2, 2 * BB, V // 2], u_l)
    s_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    x_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    x_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    r_ready = gl.allocate_shared_memory(gl.int64, [2 * NR, 1], mbarrier.MBarrierLayout())
    r_empty = gl.allocate_shared_memory(gl.int64, [2 * NR, 1], mbarrier.MBarrierLayout())
    mbarrier.init(s_ready, count=1)
    for i in gl.static_range(2):
        mbarrier.init(x_ready.index(i), count=32)       # a noinc arrive from each producer thread
        mbarrier.init(x_empty.index(i), count=1)
    for i in gl.static_range(2 * NR):
        mbarrier.init(r_ready.index(i), count=32)
        mbarrier.init(r_empty.index(i), count=1)
    bufs = (s_smem, xs, vs, tgb, tbeta, tbeam, rkh, rd, rgi, rst, ren, u_smem)
    bars = (s_ready, x_ready, x_empty, r_ready, r_empty)
    gl.warp_specialize([
        (_consumer, (0, bufs, bars, gtr, tree, out_ptr, dims, step, K, V, G, BB, CH, NR, ITERS)),
        (_consumer, (1, bufs, bars, gtr, tree, out_ptr, dims, step, K, V, G, BB, CH, NR, ITERS)),
        (_producer, (0, bufs, bars, beams, gtr, tree, dims, sq, sv, step, s_desc, K, V, G, BB, CH, NR, ITERS)),
        (_producer, (1, bufs, bars, beams, gtr, tree, dims, sq, sv, step, s_desc, K, V, G, BB, CH, NR, ITERS)),
    ], [4, 1, 1], [_CONSUMER_REGS, _PRODUCER_REGS, _PRODUCER_REGS])


def tree_ws_supports(geo, W: int) -> bool:
    """Whether the warp-specialised step kernel takes the route's steps of this shape (given the ws kernel's own
    shape and input checks): K = V = 128 and W a multiple of its tile."""
    return (geo.k, geo.v) == TREE_WS_DIMS and W % TREE_WS_BEAMS == 0


def tree_ws_launch_params(geo, R: int, W: int, iters: int) -> tuple[tuple, dict, dict]:
    """(grid, constexpr arguments, launch options) at `iters` tiles a program, a power of two dividing a request's
    tiles (`kernels.onela.plan` picks it for about one program per SM: one fits an SM's shared memory)."""
    grid = (W // TREE_WS_BEAMS // iters, R * geo.hv)
    const = dict(K=geo.k, V=geo.v, G=geo.group, BB=TREE_WS_BEAMS, CH=_CH, NR=_NR, ITERS=iters)
    return grid, const, {"num_warps": 4, "maxnreg": _MAXNREG}


def launch_tree_ws(st, tree_state, t: int, launch, ins: tuple, out, maxe: int):
    """Step t's warp-specialised step kernel for OneLAStepper `st` (after the lists kernel at BB = TREE_WS_BEAMS,
    whose tiles hold at most `maxe` list entries each). ins = (q, k, v, g, beta, parents)."""
    q, k, v, g, beta, parents = ins
    geo, R, W = st.geometry, st.R, st.W
    grid, const, opts = launch
    s_desc = _desc(st.s_bf16.view(R * geo.hv * geo.v, geo.k), [geo.v, geo.k])
    return onela_tree_ws_kernel[grid](
        s_desc, (q, k, v, beta), (st.store.khat, st.store.delta, tree_state.gcum),
        (tree_state.order, tree_state.ent, tree_state.cnt), out,
        (R, W, geo.hv, geo.hk, maxe), (q.stride(0), q.stride(1), q.stride(2)),
        (v.stride(0), v.stride(1), v.stride(2)), t, **const, **opts)
