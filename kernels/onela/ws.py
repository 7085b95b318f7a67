"""OneLA's decode step, warp-specialised (Gluon, Hopper): the `onela` path's kernel where it applies.

The Triton main kernel (`kernels/onela/triton_kernels.py`) runs, per warp, the chain load q, k -> MMA -> gather the
ancestral delta rows -> epilogue -> store, and is latency-bound (few active warps per scheduler, most stalls on
global-load scoreboards). Here each persistent program (one per SM) splits the work by role:
- a producer warpgroup (`_producer`) issues every load: the S_ctx tile (bf16, TMA, once per (request, value
  head)), each beam tile's q and k (TMA, two stages), then the ancestral rows gathered through the ancestry row
  and finally the tile's v (cp.async, into a ring of NR [BB, 128] bf16 entries, NR sized by the shared memory the
  other buffers leave: `_ws_ring_entries`);
- the default partition (`_consumer`, two warpgroups, each owning half of the V columns) consumes them: both
  projections on the tensor cores (wgmma against the S tile in shared memory), the closed-form replay from the
  ring, delta_t and o_t, stored by TMA from shared memory.
They meet at mbarriers (ready / empty per stage), so the producer runs up to NR + 2 loads ahead of the math.
Two forms (FUSE): after the Triton prep kernel, reading its coefficient table, or the whole step in one launch:
the producer then also builds the ancestry row, gathers the ancestral alphas and forms their products
(`_key_scalars`; each of the next tile's dependent loads one gather phase early, the first tiles' parents before
the grid-dependency wait), and puts each depth's k-hat rows in the ring ahead of the delta rows, from which the
consumer forms the norms and k-hat . q-hat, k-hat . k-hat itself (whole rows per warp) and writes the k-hat_t
record; its depth loops run at run time. Same math and record layout as the Triton kernels
(`kernels/onela/records.py`).

The kernel's arguments travel as tuples, as in Triton's warp-specialisation tutorial: `descs` (TMA descriptors
q, k, S, out, delta rows, k-hat rows; bundled inside the kernel), `ptrs` (ancestry tables, parents, record stores,
gates, coefficient table, beta, v), `dims` (R, W, HV, T_CAP, NT), `sv` (v's strides); inside the kernel `bufs`
(shared memory) and `bars` (mbarriers). Each partition unpacks what it uses.

The key axis runs in blocks of 128 columns (KC_TILE): at K = 256 a tile's q and k are two [BB, 128] TMA boxes
each, its S tile two [128, 128] boxes, each projection two wgmma into one accumulator, and an ancestral k-hat row
two ring entries; the norms and dots sum over both blocks, which the consumer reads back from shared memory a
block at a time (q and k held as fp32 through the dots would take 128 registers per thread), and the k-hat_t
record is stored through the o_t / delta_t staging buffers, one block each. Shared memory sets the rest: one q, k
stage instead of two (the same four [BB, 128] entries) and a [128, 256] S tile leave a ring of 3 entries in the
one-launch form and 4 after the prep kernel (4-5 and 5 at K = 128). Where K = 256 compiles otherwise than
K = 128, it keeps both partitions free of spills: the two wgmma of a projection in a run-time loop (unrolled,
ptxas spills 48-240 bytes of the producer's registers at steps 2-7), the replay after the prep kernel in a
run-time loop that loads each depth's coefficients a depth ahead, and the producer at 112 registers per thread
(88 at K = 128).

Applies on Hopper where K is 128 or 256 (WS_HEAD_DIMS), V is 128, 256 or 512 (WS_VALUE_DIMS) and W a multiple of
the 64-beam tile (`ws_shape_supports`; no partial tiles: the TMA boxes are 2-D over [R * W, H * D] views), at steps
up to WS_DEEPEST_STEP (31): the producer holds a beam tile's ancestry rows as [64, TP] register tiles and unrolls
its gathers over the depths, so deeper steps run the Triton prep + main kernels, which loop over the depth
(`ws_runs_step`; at K = 128 also every step past 5 that follows the prep kernel). A
value head of V > 128 runs as V / 128 chunks of 128 value columns, each with its own tiles as if it were a value
head: its own S rows, v, delta and o columns; the key axis (q, k, the ancestral k-hat rows and their dots) is the
same for every chunk and formed again by each, and chunk 0 alone writes the alpha_t / k-hat_t records and the
ancestry rows. q, k, v must be bf16 [R, W, H, D] rows, dense within a row and evenly spaced (also views into the
model's conv output), out contiguous (`ws_layout_supports`). S_ctx is read as its bf16 rounding from a copy made
at reset (the stepper keeps the fp32 state for the Triton fallback) -- the projection the K = 128 Triton kernels
use; at K = 256 they also take S's bf16 lo plane for u_q, which is faster there, not more accurate
(kernels/NOTES.md, "Projection precision"). The interpreter does not run Gluon: its correctness tests are GPU
tests; CI compiles it for sm_90a through `tools.compile_report`. Why each choice: kernels/NOTES.md ("Warp-specialised
kernel").
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (async_copy, fence_async_shared, mbarrier, tma,
                                                               warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels.onela.records import record_row

BB_TILE = 64     # beams per tile (one wgmma M)
VC_TILE = 128    # value columns per tile: a value head of V > 128 runs as V / VC_TILE chunks
KC_TILE = 128    # key columns per block: K = 256 is two blocks (two TMA boxes, two wgmma per projection)
WS_HEAD_DIMS = (128, 256)               # the key sizes K the kernel takes
WS_VALUE_DIMS = (128, 256, 512)         # the value sizes V: 1, 2 or 4 chunks of VC_TILE
_BB = gl.constexpr(BB_TILE)
_KC = gl.constexpr(KC_TILE)
_PWARPS = gl.constexpr(4)               # producer warps (one warpgroup)
_PRODUCER_REGS = gl.constexpr(88)       # the producer's registers per thread: no spills at the deepest compiled step
_PRODUCER_REGS_K256 = gl.constexpr(112)  # ... at K = 256 (88 and 104 spill at steps 6-7; the consumer keeps 192)


@gluon.jit
def _gdc_wait():
    """griddepcontrol.wait: the previous launch is complete and its writes visible."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _gdc_launch_dependents():
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def _tiles(NT, W, BB: gl.constexpr):
    """This program's contiguous range of beam tiles (`_coords` numbers them)."""
    pid = gl.program_id(0)
    n_prog = gl.num_programs(0)
    return pid * NT // n_prog, (pid + 1) * NT // n_prog, W // BB


@gluon.jit
def _coords(tile, NBT, HV, NVC: gl.constexpr):
    """Tile `tile`'s (value chunk, (request, value head), request, value head, chunk): tiles run over
    ((r * HV + hv) * NVC + c) * W / BB + beam tile, chunk c holding value columns [c * 128, (c + 1) * 128) of the
    value head (NVC = V / 128; at V = 128 one chunk, and the divisions fold away)."""
    vh = tile // NBT
    head = vh // NVC
    return vh, head, head // HV, head % HV, vh % NVC


@gluon.jit
def _issue_s_qk(tile, prev_vh, s_cnt, qk_cnt, NBT, W, HV, descs, bufs, bars, G: gl.constexpr, K: gl.constexpr,
                VC: gl.constexpr, NVC: gl.constexpr, BB: gl.constexpr):
    """TMA loads of tile `tile`: its S tile ([VC, K] rows of its value chunk, one [VC, 128] box per key block) when
    the (request, value head, chunk) changes, and its q, k rows (one [BB, 128] box per key block each, into q, k
    stage qk_cnt % NQK)."""
    q_desc, k_desc, s_desc = descs[0], descs[1], descs[2]
    s_smem, q_smem, k_smem = bufs[0], bufs[1], bufs[2]
    s_ready, s_empty, qk_ready, qk_empty = bars[0], bars[1], bars[2], bars[3]
    KC: gl.constexpr = _KC
    KB: gl.constexpr = K // KC      # key blocks
    NQK: gl.constexpr = 2 // KB     # q, k stages (the shared memory of two [BB, 128] blocks each)
    vh, head, r, hv, ch = _coords(tile, NBT, HV, NVC)
    hk = hv // G
    b0 = (tile % NBT) * BB
    if vh != prev_vh:
        mbarrier.wait(s_empty, (s_cnt & 1) ^ 1)
        mbarrier.expect(s_ready, KB * s_desc.block_type.nbytes)
        for h in gl.static_range(KB):
            tma.async_copy_global_to_shared(s_desc, [vh * VC, h * KC], s_ready, s_smem.index(h))
        s_cnt += 1
    st = qk_cnt % NQK
    mbarrier.wait(qk_empty.index(st), ((qk_cnt // NQK) & 1) ^ 1)
    mbarrier.expect(qk_ready.index(st), 2 * KB * q_desc.block_type.nbytes)
    for h in gl.static_range(KB):
        tma.async_copy_global_to_shared(q_desc, [r * W + b0, hk * K + h * KC], qk_ready.index(st),
                                        q_smem.index(st * KB + h))
        tma.async_copy_global_to_shared(k_desc, [r * W + b0, hk * K + h * KC], qk_ready.index(st),
                                        k_smem.index(st * KB + h))
    return vh, s_cnt, qk_cnt + 1


@gluon.jit
def _load_slots(anc_ptr, tile, tile1, NBT, W, HV, T_CAP, STEP: gl.constexpr, TP: gl.constexpr, BB: gl.constexpr,
                NVC: gl.constexpr, sl: gl.constexpr):
    """The ancestry rows [BB, TP] of tile `tile` from this step's table (the prep kernel's; zeros past this
    program's last tile)."""
    r = _coords(tile, NBT, HV, NVC)[2]
    rows = r * W + (tile % NBT) * BB + gl.arange(0, BB, layout=gl.SliceLayout(1, sl))
    tcol = gl.arange(0, TP, layout=gl.SliceLayout(0, sl))
    return gl.load(anc_ptr + rows[:, None] * T_CAP + tcol[None, :], mask=(tcol[None, :] < STEP) & (tile < tile1),
                   other=0)


@gluon.jit
def _par_rows(par_ptr, tile, tile1, NBT, W, HV, BB: gl.constexpr, NVC: gl.constexpr, layout: gl.constexpr):
    """The parents of tile `tile`'s beams (zeros past this program's last tile), rows as in `layout`."""
    r = _coords(tile, NBT, HV, NVC)[2]
    rows = r * W + (tile % NBT) * BB + gl.arange(0, BB, layout=gl.SliceLayout(1, layout))
    return gl.load(par_ptr + rows, mask=tile < tile1, other=0)


@gluon.jit
def _anc_rows(anc_ptr, anc_next_ptr, par, tile, tile1, NBT, W, HV, T_CAP, STEP: gl.constexpr, NC: gl.constexpr,
              BB: gl.constexpr, NVC: gl.constexpr, sl: gl.constexpr):
    """Tile `tile`'s ancestry rows [BB, NC] from its parents `par` and the previous step's table, as the prep
    kernel builds them (h_t(b, j) = h_{t-1}(parent(b), j) for j < t - 1, h_t(b, t - 1) = parent(b)); value head
    0's chunk 0 writes them to the next table."""
    vh, head, r, hv, ch = _coords(tile, NBT, HV, NVC)
    rows = r * W + (tile % NBT) * BB + gl.arange(0, BB, layout=gl.SliceLayout(1, sl))
    tcol = gl.arange(0, NC, layout=gl.SliceLayout(0, sl))
    live = tile < tile1
    anc = gl.load(anc_ptr + (r * W + par)[:, None] * T_CAP + tcol[None, :], mask=(tcol[None, :] < STEP - 1) & live,
                  other=0)
    slots = gl.where(tcol[None, :] == STEP - 1, par[:, None], anc)
    gl.store(anc_next_ptr + rows[:, None] * T_CAP + tcol[None, :], slots,
             mask=(tcol[None, :] < STEP) & live & (vh % (HV * NVC) == 0))
    return slots


@gluon.jit
def _key_loads(tile, tile1, slots, alpha_ptr, g_ptr, R, W, HV, NBT, STEP: gl.constexpr, TPC: gl.constexpr,
               BB: gl.constexpr, NVC: gl.constexpr, pl: gl.constexpr):
    """The ancestral alphas [BB, TPC] of tile `tile` (ancestry rows `slots`, layout `pl`) and its gates: the loads
    `_key_scalars` needs, issued a tile ahead (zeros past this program's last tile)."""
    vh, head, r, hv, ch = _coords(tile, NBT, HV, NVC)
    offs_b = (tile % NBT) * BB + gl.arange(0, BB, layout=gl.SliceLayout(1, pl))
    tcol = gl.arange(0, TPC, layout=gl.SliceLayout(0, pl))
    live = tile < tile1
    alphas = gl.load(alpha_ptr + record_row(tcol[None, :], r, hv, slots, R, HV, W),
                     mask=(tcol[None, :] < STEP) & live, other=1.0)
    gv = gl.load(g_ptr + (r * W + offs_b) * HV + hv, mask=live, other=0.0)
    return alphas, gv


@gluon.jit
def _key_scalars(tile, alphas, gv, alpha_ptr, aux, aux_ready, aux_empty, a_cnt, R, W, HV, NBT, STEP: gl.constexpr,
                 TPC: gl.constexpr, BB: gl.constexpr, NVC: gl.constexpr, pl: gl.constexpr):
    """FUSE: tile `tile`'s per-beam scalars as the prep kernel forms them, from its ancestral alphas and gates
    (`_key_loads`, a tile earlier) -- alpha_t = exp(g) (its record written) and the replay's alpha products
    c_j = alpha_t prod_{i > j} alpha_i (row j < STEP of the aux tile) and P = c_{-1} (row STEP) -- into the aux
    stage the consumer reads (chunk 0 writes the record)."""
    vh, head, r, hv, ch = _coords(tile, NBT, HV, NVC)
    offs_b = (tile % NBT) * BB + gl.arange(0, BB, layout=gl.SliceLayout(1, pl))
    tcol = gl.arange(0, TPC, layout=gl.SliceLayout(0, pl))
    alpha_t = gl.exp(gv)
    if NVC == 1:
        gl.store(alpha_ptr + record_row(STEP, r, hv, offs_b, R, HV, W), alpha_t)
    else:
        gl.store(alpha_ptr + record_row(STEP, r, hv, offs_b, R, HV, W), alpha_t, mask=offs_b < W * (ch == 0))
    c = alpha_t
    coef = gl.zeros([BB, TPC], gl.float32, pl)
    for jj in gl.static_range(STEP):
        j = STEP - 1 - jj
        coef = gl.where(tcol[None, :] == j, c[:, None], coef)
        c = c * gl.sum(gl.where(tcol[None, :] == j, alphas, 0.0), axis=1)
    coef = gl.where(tcol[None, :] == STEP, c[:, None], coef)
    st = a_cnt % 2
    mbarrier.wait(aux_empty.index(st), ((a_cnt // 2) & 1) ^ 1)
    for j in gl.static_range(STEP + 1):      # row j of stage st: c_j, row STEP: P
        aux.index(st * 3 * TPC + j).store(gl.sum(gl.where(tcol[None, :] == j, coef, 0.0), axis=1))
    gl.thread_barrier()
    mbarrier.arrive(aux_ready.index(st), count=1)
    return a_cnt + 1


@gluon.jit
def _ring_put(ptrs, ring, ring_ready, ring_empty, cnt, NR: gl.constexpr):
    """cp.async one [BB, 128] tile into the next ring entry; its ready barrier fires when every producer thread's
    copies have landed (noinc arrive: the barrier counts the producer's threads)."""
    e = cnt % NR
    mbarrier.wait(ring_empty.index(e), ((cnt // NR) & 1) ^ 1)
    async_copy.async_copy_global_to_shared(ring.index(e), ptrs)
    async_copy.mbarrier_arrive(ring_ready.index(e), increment_count=False)
    return cnt + 1


@gluon.jit
def _producer(descs, bufs, bars, ptrs, dims, sv, G: gl.constexpr, STEP: gl.constexpr, K: gl.constexpr,
              V: gl.constexpr, NVC: gl.constexpr, BB: gl.constexpr, NR: gl.constexpr, TP: gl.constexpr,
              TPC: gl.constexpr, PWARPS: gl.constexpr, FUSE: gl.constexpr):
    """Every load of the program, in the order the consumer uses them: a tile's ring entries, then the next
    tile's q, k (and S) -- after this tile's gathers and v, which also lets a next tile of a new head load its S
    (waiting for this tile's projections) without a second issue point. With FUSE also the key-axis work of the
    prep kernel (the ancestry rows, `_key_scalars`) and the ancestral k-hat rows, every depth's ahead of the
    tile's delta rows in the ring (the consumer forms all dots before its projections). The dependent loads of
    the next tile -- its parents, then its ancestry rows, then its ancestral alphas -- go out after one of this
    tile's gather phases each, so none of them holds up this tile's gathers or its alpha products."""
    ring, aux = bufs[3], bufs[4]
    ring_ready, ring_empty, aux_ready, aux_empty = bars[4], bars[5], bars[6], bars[7]
    anc_ptr, par_ptr, anc_next_ptr, alpha_ptr, g_ptr, khat_ptr = ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5]
    delta_ptr, v_ptr = ptrs[8], ptrs[9]
    R, W, HV, T_CAP, NT = dims
    sv_r, sv_w, sv_h = sv
    gat: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [PWARPS, 1], [1, 0])
    sl: gl.constexpr = gl.BlockedLayout([1, 1], [2, 16], [PWARPS, 1], [1, 0])   # rows as in `gat`
    pl: gl.constexpr = gl.BlockedLayout([1, TPC], [32, 1], [PWARPS, 1], [1, 0])   # a beam's row in one thread
    row_l: gl.constexpr = gl.SliceLayout(1, gat)
    VC: gl.constexpr = V // NVC       # a tile's value columns (128)
    KC: gl.constexpr = _KC            # key columns of a ring entry (128 = VC)
    cols = gl.arange(0, VC, layout=gl.SliceLayout(0, gat))
    tcol = gl.arange(0, TP, layout=gl.SliceLayout(0, sl))
    tile0, tile1, NBT = _tiles(NT, W, BB)
    zero = tile0 * 0                # int32 counters (a literal 0 would be a constexpr)
    prev_vh, s_cnt, qk_cnt = _issue_s_qk(tile0, zero - 1, zero, zero, NBT, W, HV, descs, bufs, bars, G, K, VC, NVC,
                                         BB)
    if FUSE:        # the parents are this step's input, as q and k are: read before the wait
        par0 = _par_rows(par_ptr, tile0, tile1, NBT, W, HV, BB, NVC, sl)
        par_n = _par_rows(par_ptr, tile0 + 1, tile1, NBT, W, HV, BB, NVC, pl)     # one beam per thread
    _gdc_wait()     # the prep kernel's ancestry rows and every earlier step's records are written
    if FUSE:        # TP == TPC here (ws_launch_params)
        slots = _anc_rows(anc_ptr, anc_next_ptr, par0, tile0, tile1, NBT, W, HV, T_CAP, STEP, TP, BB, NVC, sl)
        alphas, gv = _key_loads(tile0, tile1, gl.convert_layout(slots, pl), alpha_ptr, g_ptr, R, W, HV, NBT, STEP,
                                TPC, BB, NVC, pl)
    else:
        slots = _load_slots(anc_ptr, tile0, tile1, NBT, W, HV, T_CAP, STEP, TP, BB, NVC, sl)
    a_cnt = zero
    cnt = 0
    for tile in range(tile0, tile1):
        if not FUSE:
            slots_next = _load_slots(anc_ptr, tile + 1, tile1, NBT, W, HV, T_CAP, STEP, TP, BB, NVC, sl)
        vh, head, r, hv, ch = _coords(tile, NBT, HV, NVC)
        ccols = cols + ch * VC      # this chunk's value columns
        offs_b = (tile % NBT) * BB + gl.arange(0, BB, layout=row_l)
        if FUSE:                    # the ancestral k-hat rows first: the consumer forms every coefficient first
            for j in gl.static_range(STEP):
                slot = gl.convert_layout(gl.sum(gl.where(tcol[None, :] == j, slots, 0), axis=1), row_l)
                krow = record_row(j, r, hv // G, slot, R, HV // G, W)
                kptrs = khat_ptr + (krow.to(gl.int64) * K)[:, None] + cols[None, :]
                for h in gl.static_range(K // KC):      # a ring entry per 128-column key block
                    cnt = _ring_put(kptrs + h * KC, ring, ring_ready, ring_empty, cnt, NR)
            # the next tile's ancestry rows (its parents landed during the gathers), then this tile's products
            par_sl = gl.convert_layout(par_n, gl.SliceLayout(1, sl))
            slots_next = _anc_rows(anc_ptr, anc_next_ptr, par_sl, tile + 1, tile1, NBT, W, HV, T_CAP, STEP, TP, BB,
                                   NVC, sl)
            a_cnt = _key_scalars(tile, alphas, gv, alpha_ptr, aux, aux_ready, aux_empty, a_cnt, R, W, HV, NBT, STEP,
                                 TPC, BB, NVC, pl)
        for j in gl.static_range(STEP):
            slot = gl.convert_layout(gl.sum(gl.where(tcol[None, :] == j, slots, 0), axis=1), row_l)
            dptrs = delta_ptr + (record_row(j, r, hv, slot, R, HV, W).to(gl.int64) * V)[:, None] + ccols[None, :]
            cnt = _ring_put(dptrs, ring, ring_ready, ring_empty, cnt, NR)
        if FUSE:                    # the next tile's alphas and gates (its ancestry rows landed meanwhile)
            alphas, gv = _key_loads(tile + 1, tile1, gl.convert_layout(slots_next, pl), alpha_ptr, g_ptr, R, W, HV,
                                    NBT, STEP, TPC, BB, NVC, pl)
        vptrs = v_ptr + (r * sv_r + offs_b * sv_w + hv * sv_h).to(gl.int64)[:, None] + ccols[None, :]
        cnt = _ring_put(vptrs, ring, ring_ready, ring_empty, cnt, NR)
        if FUSE:
            par_n = _par_rows(par_ptr, tile + 2, tile1, NBT, W, HV, BB, NVC, pl)
        if tile + 1 < tile1:        # the next tile's q, k, once this tile's ring entries are out
            prev_vh, s_cnt, qk_cnt = _issue_s_qk(tile + 1, prev_vh, s_cnt, qk_cnt, NBT, W, HV, descs, bufs, bars,
                                                 G, K, VC, NVC, BB)
        slots = slots_next


@gluon.jit
def _ring_take(ring, ring_ready, ring_empty, cnt, mma: gl.constexpr, NR: gl.constexpr):
    """The next ring entry as fp32 in the accumulator layout; the entry is released once every consumer warp
    has read it."""
    e = cnt % NR
    mbarrier.wait(ring_ready.index(e), (cnt // NR) & 1)
    x = ring.index(e).load(mma).to(gl.float32)
    gl.thread_barrier()
    mbarrier.arrive(ring_empty.index(e), count=1)
    return x, cnt + 1


@gluon.jit
def _key_block(smem, e, kl: gl.constexpr):
    """Entry e of a q / k stage buffer (a [BB, 128] key block) as fp32 in layout `kl`."""
    return smem.index(e).load(kl).to(gl.float32)


@gluon.jit
def _consumer(descs, bufs, bars, ptrs, dims, G: gl.constexpr, STEP: gl.constexpr, K: gl.constexpr,
              V: gl.constexpr, NVC: gl.constexpr, BB: gl.constexpr, NR: gl.constexpr, TPC: gl.constexpr,
              FUSE: gl.constexpr, KH_OWN: gl.constexpr):
    """Projections, replay, delta_t and o_t of every tile of the program (the default partition: two
    warpgroups, each owning half of the tile's value columns). The replay's coefficients come from the prep kernel's
    table, or with FUSE from this tile's q, k rows (norms, k-hat_j . q-hat and k-hat_j . k-hat against the
    ancestral k-hat rows from the ring) and the producer's alpha products; FUSE also stores the k-hat_t record."""
    out_desc, dst_desc, khat_desc = descs[3], descs[4], descs[5]
    s_smem, q_smem, k_smem, ring, aux, keys, o_smem, d_smem, kh_smem = bufs
    s_ready, s_empty, qk_ready, qk_empty, ring_ready, ring_empty, aux_ready, aux_empty = bars
    coef_ptr, beta_ptr = ptrs[6], ptrs[7]
    R, W, HV, T_CAP, NT = dims
    VC: gl.constexpr = V // NVC
    KC: gl.constexpr = _KC
    KB: gl.constexpr = K // KC      # key blocks (1 or 2)
    NQK: gl.constexpr = 2 // KB     # q, k stages
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, VC // 2, 16])
    row_l: gl.constexpr = gl.SliceLayout(1, mma)
    # FUSE's key-axis norms and dots with whole rows in each warp: sums by shuffles, no cross-warp exchange
    # through shared memory (in `mma` each row is split over both warpgroups)
    kl: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
    tile0, tile1, NBT = _tiles(NT, W, BB)
    plane = R * HV * W
    cnt = 0
    s_cnt = 0
    prev_vh = -1
    _gdc_wait()     # the prep kernel's coefficients (or the previous step's records) are written
    for i in range(tile1 - tile0):
        tile = tile0 + i
        vh, head, r, hv, ch = _coords(tile, NBT, HV, NVC)
        kh_tile = (hv % G == 0) & (ch == 0)    # FUSE: this tile writes key head hv / G's k-hat_t record
        b0 = (tile % NBT) * BB
        offs_b = b0 + gl.arange(0, BB, layout=row_l)
        cbase = coef_ptr + head * W + offs_b
        beta = gl.load(beta_ptr + (r * W + offs_b) * HV + hv)
        if not FUSE:
            c_q = gl.load(cbase)
            c_k = gl.load(cbase + plane)
            kq_t = gl.load(cbase + 2 * plane)
        if vh != prev_vh:
            mbarrier.wait(s_ready, s_cnt & 1)
            s_cnt += 1
        prev_vh = vh
        st = i % 2                  # the aux stage
        qs = i % NQK                # the q, k stage: its key blocks are q_smem / k_smem entries qs KB + h
        mbarrier.wait(qk_ready.index(qs), (i // NQK) & 1)
        if FUSE:                    # the key axis first, so its registers are free before the accumulators live
            if K == KC:             # q, k rows held in registers through the dots
                qf = q_smem.index(qs).load(kl).to(gl.float32)
                kf = k_smem.index(qs).load(kl).to(gl.float32)
                inv_q = gl.rsqrt(gl.sum(qf * qf, axis=1) + 1e-6) * (K ** -0.5)
                inv_k = gl.rsqrt(gl.sum(kf * kf, axis=1) + 1e-6)
                kq_t = gl.sum(qf * kf, axis=1) * inv_q * inv_k
            else:                   # K = 256: each sum over both key blocks, a block at a time from shared memory
                sq = gl.zeros([BB], gl.float32, gl.SliceLayout(1, kl))
                sk = sq
                sqk = sq
                for h in gl.static_range(KB):
                    qf = _key_block(q_smem, qs * KB + h, kl)
                    kf = _key_block(k_smem, qs * KB + h, kl)
                    sq += gl.sum(qf * qf, axis=1)
                    sk += gl.sum(kf * kf, axis=1)
                    sqk += gl.sum(qf * kf, axis=1)
                inv_q = gl.rsqrt(sq + 1e-6) * (K ** -0.5)
                inv_k = gl.rsqrt(sk + 1e-6)
                kq_t = sqk * inv_q * inv_k
            if kh_tile:             # the k-hat_t record of key head hv / G, once per key head
                if KH_OWN:          # its own buffer: the last k-hat store has read it (o, delta may be in flight)
                    tma.store_wait(2)
                else:               # shared with delta_t (and o_t): every earlier store has read it
                    tma.store_wait(0)
                gl.thread_barrier()
                if K == KC:
                    kh_smem.store((kf * inv_k[:, None]).to(kh_smem.dtype))
                else:               # K = 256: key block 0 through d_smem, block 1 through o_smem
                    d_smem.store((_key_block(k_smem, qs * KB, kl) * inv_k[:, None]).to(d_smem.dtype))
                    o_smem.store((_key_block(k_smem, qs * KB + 1, kl) * inv_k[:, None]).to(o_smem.dtype))
                fence_async_shared()
                gl.thread_barrier()
                khrow = record_row(STEP, r, hv // G, b0, R, HV // G, W)
                if K == KC:
                    tma.async_copy_shared_to_global(khat_desc, [khrow, 0], kh_smem)
                else:
                    tma.async_copy_shared_to_global(khat_desc, [khrow, 0], d_smem)
                    tma.async_copy_shared_to_global(khat_desc, [khrow, KC], o_smem)
            for j in range(STEP):   # aux rows TPC + j <- k_j . q-hat, 2 TPC + j <- k_j . k-hat (runtime loop)
                if K == KC:
                    kh_j, cnt = _ring_take(ring, ring_ready, ring_empty, cnt, kl, NR)
                    aux.index(st * 3 * TPC + TPC + j).store(gl.sum(kh_j * qf, axis=1) * inv_q)
                    aux.index(st * 3 * TPC + 2 * TPC + j).store(gl.sum(kh_j * kf, axis=1) * inv_k)
                else:               # K = 256: k_j is KB ring entries, one per key block
                    dq = gl.zeros([BB], gl.float32, gl.SliceLayout(1, kl))
                    dk = dq
                    for h in gl.static_range(KB):
                        kh_j, cnt = _ring_take(ring, ring_ready, ring_empty, cnt, kl, NR)
                        dq += gl.sum(kh_j * _key_block(q_smem, qs * KB + h, kl), axis=1)
                        dk += gl.sum(kh_j * _key_block(k_smem, qs * KB + h, kl), axis=1)
                    aux.index(st * 3 * TPC + TPC + j).store(dq * inv_q)
                    aux.index(st * 3 * TPC + 2 * TPC + j).store(dk * inv_k)
            keys.index(0).store(inv_q)      # the three key scalars to the accumulator layout
            keys.index(1).store(inv_k)
            keys.index(2).store(kq_t)
            gl.thread_barrier()
            inv_q = keys.index(0).load(row_l)
            inv_k = keys.index(1).load(row_l)
            kq_t = keys.index(2).load(row_l)
        zero = gl.zeros([BB, VC], gl.float32, mma)
        if K == KC:
            s_t = s_smem.index(0).permute((1, 0))
            u_q = warpgroup_mma(q_smem.index(qs), s_t, zero, use_acc=False, is_async=True)
            u_k = warpgroup_mma(k_smem.index(qs), s_t, zero, use_acc=False, is_async=True)
        else:
            u_q = zero
            u_k = zero
            for h in range(KB):
                s_t = s_smem.index(h).permute((1, 0))
                u_q = warpgroup_mma(q_smem.index(qs * KB + h), s_t, u_q, is_async=True)
                u_k = warpgroup_mma(k_smem.index(qs * KB + h), s_t, u_k, is_async=True)
                u_q, u_k = warpgroup_mma_wait(0, deps=[u_q, u_k])
        if K == KC:
            u_q, u_k = warpgroup_mma_wait(0, deps=[u_q, u_k])
        gl.thread_barrier()
        mbarrier.arrive(qk_empty.index(qs), count=1)
        last_of_head = (tile + 1 == tile1) | ((tile + 1) // NBT != vh)
        mbarrier.arrive(s_empty, count=1, pred=last_of_head)
        if FUSE:                    # the producer's alpha products of this tile (rows j < STEP: c_j, STEP: P)
            mbarrier.wait(aux_ready.index(st), (i // 2) & 1)
            p_all = aux.index(st * 3 * TPC + STEP).load(row_l)
            c_q = p_all * inv_q
            c_k = p_all * inv_k
        u_q = u_q * c_q[:, None]
        u_k = u_k * c_k[:, None]
        if FUSE:        # runtime loops: a smaller kernel than unrolled ones, faster at deep steps
            for j in range(STEP):
                c_j = aux.index(st * 3 * TPC + j).load(row_l)
                cq = c_j * aux.index(st * 3 * TPC + TPC + j).load(row_l)
                ck = c_j * aux.index(st * 3 * TPC + 2 * TPC + j).load(row_l)
                d_j, cnt = _ring_take(ring, ring_ready, ring_empty, cnt, mma, NR)
                u_q += cq[:, None] * d_j
                u_k += ck[:, None] * d_j
        elif K == KC:
            for j in gl.static_range(STEP):     # after the prep kernel at K = 128 (steps 2-5): unrolled
                cq = gl.load(cbase + (3 + 2 * j) * plane)
                ck = gl.load(cbase + (4 + 2 * j) * plane)
                d_j, cnt = _ring_take(ring, ring_ready, ring_empty, cnt, mma, NR)
                u_q += cq[:, None] * d_j
                u_k += ck[:, None] * d_j
        else:           # K = 256 after the prep kernel: a runtime loop, each depth's coefficients a depth ahead
            cq = gl.load(cbase + 3 * plane)     # (the table has 3 + 2 T_CAP rows: the last lookahead is in it)
            ck = gl.load(cbase + 4 * plane)
            for j in range(STEP):
                cq_n = gl.load(cbase + (5 + 2 * j) * plane)
                ck_n = gl.load(cbase + (6 + 2 * j) * plane)
                d_j, cnt = _ring_take(ring, ring_ready, ring_empty, cnt, mma, NR)
                u_q += cq[:, None] * d_j
                u_k += ck[:, None] * d_j
                cq = cq_n
                ck = ck_n
        if FUSE:
            gl.thread_barrier()
            mbarrier.arrive(aux_empty.index(st), count=1)
        v, cnt = _ring_take(ring, ring_ready, ring_empty, cnt, mma, NR)
        delta = beta[:, None] * (v - u_k)
        o = u_q + delta * kq_t[:, None]
        if KH_OWN:                  # the previous tile's o / delta stores have read o_smem / d_smem; this
            if kh_tile:             # tile's k-hat_t store (the newest) may still be reading kh_smem
                tma.store_wait(1)
            else:
                tma.store_wait(0)
        else:
            tma.store_wait(0)       # the previous tile's stores have read o_smem / d_smem (and kh_smem)
        gl.thread_barrier()
        o_smem.store(o.to(o_smem.dtype))
        d_smem.store(delta.to(d_smem.dtype))
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(out_desc, [r * W + b0, hv * V + ch * VC], o_smem)
        # head = r HV + hv, so row (STEP, 0, head, b0) is row (STEP, r, hv, b0)
        tma.async_copy_shared_to_global(dst_desc, [record_row(STEP, 0, head, b0, R, HV, W), ch * VC], d_smem)
    tma.store_wait(0)


@gluon.jit
def onela_ws_kernel(q_desc, k_desc, s_desc, out_desc, dst_desc, khat_desc, ptrs, dims, sv,
                    K: gl.constexpr, V: gl.constexpr, G: gl.constexpr, STEP: gl.constexpr, NR: gl.constexpr,
                    TP: gl.constexpr, TPC: gl.constexpr, FUSE: gl.constexpr, KH_OWN: gl.constexpr,
                    NVC: gl.constexpr):
    """Step STEP of the decode after the prep kernel -- with FUSE the whole step, the prep kernel's work included;
    a persistent program per SM over a contiguous range of beam tiles. The ancestry table ptrs[0] is this step's,
    or with FUSE the previous step's (this step's is written to ptrs[2]). Argument tuples: module docstring (the
    TMA descriptors come one by one: Triton's launcher builds them only from top-level arguments). The next
    launch may start its S, q, k loads while this one runs (programmatic dependent launch)."""
    _gdc_launch_dependents()
    descs = (q_desc, k_desc, s_desc, out_desc, dst_desc, khat_desc)
    PWARPS: gl.constexpr = _PWARPS
    BB: gl.constexpr = _BB
    VC: gl.constexpr = V // NVC     # a tile's value columns: V in NVC chunks of 128, each a "value head" of its own
    KC: gl.constexpr = _KC          # key columns per block: K in K / 128 blocks
    PREGS: gl.constexpr = _PRODUCER_REGS if K == KC else _PRODUCER_REGS_K256
    s_smem = gl.allocate_shared_memory(gl.bfloat16, [K // KC, VC, KC], s_desc.layout)
    # q, k: two [BB, 128] entries each -- two stages of one key block at K = 128, one stage of two at K = 256
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BB, KC], q_desc.layout)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BB, KC], q_desc.layout)
    ring = gl.allocate_shared_memory(gl.bfloat16, [NR, BB, VC], dst_desc.layout)
    aux = gl.allocate_shared_memory(gl.float32, [6 * TPC, BB], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    keys = gl.allocate_shared_memory(gl.float32, [3, BB], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    o_smem = gl.allocate_shared_memory(out_desc.dtype, [BB, VC], out_desc.layout)
    d_smem = gl.allocate_shared_memory(gl.bfloat16, [BB, VC], dst_desc.layout)
    if KH_OWN:      # FUSE's k-hat_t record through a buffer of its own: one wait for the TMA store engine per tile
        kh_smem = gl.allocate_shared_memory(gl.bfloat16, [BB, K], dst_desc.layout)
    else:           # ... or through d_smem: each tile's k-hat_t store is waited for before its delta_t is written
        kh_smem = d_smem    # there (the epilogue's store_wait), so the two never overlap
    s_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    s_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    qk_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    qk_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    aux_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    aux_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ring_ready = gl.allocate_shared_memory(gl.int64, [NR, 1], mbarrier.MBarrierLayout())
    ring_empty = gl.allocate_shared_memory(gl.int64, [NR, 1], mbarrier.MBarrierLayout())
    mbarrier.init(s_ready, count=1)
    mbarrier.init(s_empty, count=1)
    for i in gl.static_range(2):
        mbarrier.init(qk_ready.index(i), count=1)
        mbarrier.init(qk_empty.index(i), count=1)
        mbarrier.init(aux_ready.index(i), count=1)
        mbarrier.init(aux_empty.index(i), count=1)
    for i in gl.static_range(NR):
        mbarrier.init(ring_ready.index(i), count=PWARPS * 32)
        mbarrier.init(ring_empty.index(i), count=1)
    bufs = (s_smem, q_smem, k_smem, ring, aux, keys, o_smem, d_smem, kh_smem)
    bars = (s_ready, s_empty, qk_ready, qk_empty, ring_ready, ring_empty, aux_ready, aux_empty)
    gl.warp_specialize([
        (_consumer, (descs, bufs, bars, ptrs, dims, G, STEP, K, V, NVC, BB, NR, TPC, FUSE, KH_OWN)),
        (_producer, (descs, bufs, bars, ptrs, dims, sv, G, STEP, K, V, NVC, BB, NR, TP, TPC, PWARPS, FUSE)),
    ], [PWARPS], [PREGS])


def ws_shape_supports(geo, W: int, device=None) -> str | None:
    """Why the warp-specialised kernel cannot run any step of this decode shape on `device` (None: it can, given
    inputs `ws_layout_supports` accepts; device None: the shape alone, as `tools.compile_report` compiles for sm_90a)."""
    device = None if device is None else torch.device(device)
    if device is not None and (device.type != "cuda" or torch.cuda.get_device_capability(device)[0] != 9):
        return f"ws: needs a Hopper GPU (wgmma, TMA), not {device}"
    if geo.k not in WS_HEAD_DIMS or geo.v not in WS_VALUE_DIMS:
        return (f"ws: K={geo.k}, V={geo.v} (needs K in {', '.join(map(str, WS_HEAD_DIMS))} and V in "
                f"{', '.join(map(str, WS_VALUE_DIMS))})")
    if W % BB_TILE:
        return f"ws: W={W} not a multiple of {BB_TILE}"
    return None


def ws_layout_supports(W: int, q, k, v, out) -> str | None:
    """Why these step inputs cannot go to the warp-specialised kernel (None: they can). q, k and v are read as 2-D
    [R * W, H * D] TMA / cp.async rows: each row's [H, D] block dense, the rows evenly spaced (a multiple of 16
    bytes, 16-byte aligned) -- also when they are views into a wider tensor, as the model's split of its conv
    output is; out is stored by TMA as contiguous rows; all bf16."""
    R = q.shape[0]
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
        if x.dtype != torch.bfloat16:
            return f"ws: {name} dtype {x.dtype} (needs bfloat16)"
        rows = x.stride(1) if name != "out" else x.shape[2] * x.shape[3]
        if x.stride(-1) != 1 or x.stride(-2) != x.shape[-1] or x.stride(1) != rows \
                or (R > 1 and x.stride(0) != W * x.stride(1)) or (x.stride(1) * x.element_size()) % 16 \
                or x.data_ptr() % 16:
            what = "contiguous [R, W, H, D]" if name == "out" else "16-byte aligned [R, W, H, D] rows with dense [H, D]"
            return f"ws: {name} is not laid out as {what} (strides {tuple(x.stride())})"
    return None


def _desc(x2d: torch.Tensor, block):
    layout = gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)
    return TensorDescriptor(x2d, list(x2d.shape), list(x2d.stride()), list(block), layout)


# Tuning constants of the adopted kernel (kernels/NOTES.md, "Warp-specialised kernel"):
ONE_LAUNCH_MAX_STEP = 1  # K = 128, a key axis formed more than twice (`ws_fuses_step`): the one-launch steps
# The one-launch kernel keeps every depth's replay coefficients in shared memory ([6 TPC, 64] fp32, TPC = the next
# power of two above the step): from step 8 (TPC 16) they take 24 KB, which the ring pays for (at K = 128 its
# 5 entries would need 242,620 bytes, over sm_90's 232,448 per block), so deeper steps run the prep kernel + this
# one, whose shared memory does not grow with the depth.
ONE_LAUNCH_DEEPEST_STEP = 7
# The deepest step this kernel runs (either form): its producer holds the ancestry rows of a beam tile and the next
# as [64, TP] tiles and unrolls its gathers over the depths, so registers grow with the step; deeper steps run the
# Triton prep + main kernels (`kernels.onela.plan.step_launches`), whose registers do not.
WS_DEEPEST_STEP = 31
# After the prep kernel at K = 128 the consumer's replay is unrolled over the depths and spills from step 6 on (86-96
# of its 168 registers at steps 8-9), where the Triton main kernel, whose replay is a run-time loop, is faster; at
# K = 256 the consumer's replay is a run-time loop and this kernel stays the faster one (kernels/NOTES.md, "Deep
# steps: which kernel after the prep kernel").
WS_MAIN_DEEPEST_STEP_K128 = 5
_OWN_KHAT_MAX_STEP = 1   # one-launch steps <= this store k-hat_t through a buffer of their own (ring one shorter;
                         # K = 128 only: at K = 256 the 32 KB record goes through the o_t / delta_t staging buffers)
_MAXNREG = 168           # 168 x 12 warps fills one SM's register file
_SMEM_PER_BLOCK = 232448  # sm_90's dynamic shared memory per block
_RING_MAX = 5            # ring entries at most: at K = 128 a deeper ring is no faster
_SMEM_SLACK = 1024       # the barriers and the compiler's scratch beside the buffers the kernel allocates


def ws_fuses_step(geo, t: int) -> bool:
    """Whether step t runs as one launch of the warp-specialised kernel (else after the Triton prep kernel). The
    one-launch kernel forms a key head's key axis (its ancestral k-hat rows and their dots) once per value head and
    value chunk: where that is at most twice, at every step up to ONE_LAUNCH_DEEPEST_STEP; where it is more (a key
    head of more than two value heads, or of one value head in four chunks at V = 512), only while the replay is
    shallow -- up to ONE_LAUNCH_MAX_STEP at K = 128, at step 0 alone at K = 256, where each k-hat row is twice the
    bytes (gdn_1_3b, R=4 W=512: steps 1-6 after the prep kernel 35.7-69.2 us against 40.7-90.9 in one launch)."""
    if geo.group * (geo.v // VC_TILE) > 2:
        return t <= (ONE_LAUNCH_MAX_STEP if geo.k == KC_TILE else 0)
    return t <= ONE_LAUNCH_DEEPEST_STEP


def ws_runs_step(geo, t: int) -> bool:
    """Whether this kernel runs step t of a shape it supports (in either form), else the Triton main kernel after
    the prep kernel: never past WS_DEEPEST_STEP, and after the prep kernel at K = 128 not past
    WS_MAIN_DEEPEST_STEP_K128."""
    if t > WS_DEEPEST_STEP:
        return False
    return ws_fuses_step(geo, t) or geo.k > KC_TILE or t <= WS_MAIN_DEEPEST_STEP_K128


def _ws_tiles(geo, R: int, W: int) -> int:
    """Beam tiles of one step: (request, value head, value chunk, 64 beams)."""
    return R * geo.hv * (geo.v // VC_TILE) * (W // BB_TILE)


def _ws_ring_entries(K: int, fuse: bool, tpc: int, kh_own: bool) -> int:
    """The ring depth NR: the [64, 128] bf16 entries that fit in the shared memory the other buffers leave (at
    most _RING_MAX) -- the S tile, q and k (four entries' worth at either K), the o_t and delta_t staging, with
    KH_OWN the k-hat_t buffer, and in the one-launch form the aux stages, the key scalars and the producer's
    [64, TPC] layout conversion."""
    entry = BB_TILE * VC_TILE * 2
    fixed = VC_TILE * K * 2 + 6 * entry + (BB_TILE * K * 2 if kh_own else 0)
    if fuse:
        fixed += (6 * tpc + 3) * BB_TILE * 4 + BB_TILE * tpc * 4
    return min(_RING_MAX, (_SMEM_PER_BLOCK - _SMEM_SLACK - fixed) // entry)


def ws_launch_params(geo, R: int, W: int, t: int, fuse: bool, n_sm: int) -> tuple[tuple, dict, dict]:
    """(grid, constexpr arguments, launch options) of step t's warp-specialised kernel: one place for
    `launch_ws` and `tools.compile_report`. One program per SM (at most one per tile)."""
    pow2 = lambda x: 1 << (x - 1).bit_length()      # noqa: E731
    tpc = max(2, pow2(t + 1))
    kh_own = fuse and t <= _OWN_KHAT_MAX_STEP and geo.k == KC_TILE
    nr = _ws_ring_entries(geo.k, fuse, tpc, kh_own)
    assert nr >= 2, (geo, t, fuse, nr)      # at K = 256 the consumer takes a k-hat row as two entries
    const = dict(K=geo.k, V=geo.v, G=geo.group, STEP=t, NR=nr, KH_OWN=kh_own,
                 TP=tpc if fuse else max(2, pow2(max(t, 1))), TPC=tpc, FUSE=fuse, NVC=geo.v // VC_TILE)
    grid = (min(_ws_tiles(geo, R, W), n_sm),)
    return grid, const, {"num_warps": 8, "maxnreg": _MAXNREG}


def launch_ws(st, q, k, v, g, beta, parents, anc_prev, anc_cur, out, grid, const: dict, opts: dict):
    """Launch the warp-specialised kernel of `step_launches`' plan ("ws": grid, constexprs, options) for
    OneLAStepper `st`: with const FUSE the whole step, else the main kernel after the prep kernel."""
    geo, R, W = st.geometry, st.R, st.W
    rows = R * W
    # key-axis boxes are one 128-column key block (K = 256: two boxes per tile)
    q_desc = _desc(q.as_strided((rows, geo.hk * geo.k), (q.stride(1), 1)), [BB_TILE, KC_TILE])
    k_desc = _desc(k.as_strided((rows, geo.hk * geo.k), (k.stride(1), 1)), [BB_TILE, KC_TILE])
    s_desc = _desc(st.s_bf16.view(R * geo.hv * geo.v, geo.k), [VC_TILE, KC_TILE])
    out_desc = _desc(out.view(rows, geo.hv * geo.v), [BB_TILE, VC_TILE])
    # the records as rows in memory order ([T, R, H, W] rows, GtrStore): a tile's delta_t is one 16 KB box, its
    # k-hat_t one per key block
    dst_desc = _desc(st.store.delta.transpose(2, 3).view(-1, geo.v), [BB_TILE, VC_TILE])
    khat_desc = _desc(st.store.khat.transpose(2, 3).view(-1, geo.k), [BB_TILE, KC_TILE])
    ptrs = (anc_prev if const["FUSE"] else anc_cur, parents, anc_cur, st.store.alpha, g, st.store.khat, st.coef,
            beta, st.store.delta, v)
    dims = (R, W, geo.hv, st.T, _ws_tiles(geo, R, W))
    return onela_ws_kernel[grid](q_desc, k_desc, s_desc, out_desc, dst_desc, khat_desc, ptrs, dims,
                                 (v.stride(0), v.stride(1), v.stride(2)), **const, **opts)
