"""How fast can a deep step's replay run: beam-major gathers against record-major products in tree order?
`python -m tools.replay_bench` (a benchmark, GPU only; kernels/NOTES.md §6, "Record-major replay").

At step t every beam b needs, for its two projections (x = q and x = k),

    u_x[b] = sum over its ancestral records i of  exp(G_b - G_i) (x_b . k-hat_i) delta_i,

with G the cumulative log gate (G_i a record's, G_b the beam's at this step): the ancestral part of u = x S_b^T,
S_b never formed. Two kernels compute it for every (request, head, beam):

  beams     what the deep-step kernels do, in one kernel: per beam and depth, gather the ancestor's k-hat row,
            its two dots, its gate and its delta row, and two axpys -- t row gathers of each kind per beam,
            whichever beams share a record.
  records   the beams in tree order (`tools.gather_bench.tree_order`), so a record's descendants in a tile are
            one run of positions [start, end); a tile walks the list of its distinct records (every depth's runs)
            CH at a time: their rows gathered once, the coefficients of every (beam, record) pair as two small
            products (x @ k-hat^T), masked to the runs and decayed, and u += C @ delta on the tensor cores (C split
            into bf16 hi and lo planes, as the kernels split S). Tensor-core FLOPs spent on pairs that the mask
            zeroes, in exchange for one gather per distinct record per tile.

The record lists are built on the host here (what a per-step device kernel would write). Both kernels are checked
against an fp32 torch computation of the same sum, captured in a CUDA graph and timed by
artifact.timing.time_replay (median, L2 flushed before each replay). R = 4, W = 512, H = 16, K = V = 128, steps 30
and 63, both lineages. Writes replay_bench.json."""
import json
import os
import sys

import torch
import triton
import triton.language as tl

from artifact.ancestry import build
from artifact.workload import make_workload
from tools import no_argument_gpu_tool
from tools.gather_bench import bench, tree_order


@triton.jit
def _row(t, r, h, b, R, H, W):
    """Row of record (step t, request r, head h, beam slot b) in GtrStore's memory order ([T, R, H, W] rows)."""
    return (((t * R + r) * H + h) * W + b).to(tl.int64)


@triton.jit
def _dot(a, b, UPCAST: tl.constexpr):
    """a @ b with fp32 accumulation; UPCAST (CPU interpreter only, whose bf16 tl.dot is broken) multiplies the same
    bf16 values as exact fp32."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    return tl.dot(a, b)


@triton.jit
def _beams_depth(khat_ptr, delta_ptr, gcum_ptr, anc_ptr, j, r, h, beam, xq, xk, gb, acc_q, acc_k, offs_k, offs_v,
                 R, W, H, T_CAP, K: tl.constexpr, V: tl.constexpr):
    slot = tl.load(anc_ptr + (r * W + beam) * T_CAP + j)
    row = _row(j, r, h, slot, R, H, W)
    kh = tl.load(khat_ptr + row[:, None] * K + offs_k[None, :]).to(tl.float32)
    dec = tl.exp(gb - tl.load(gcum_ptr + row))
    d = tl.load(delta_ptr + row[:, None] * V + offs_v[None, :]).to(tl.float32)
    acc_q += (tl.sum(xq * kh, axis=1) * dec)[:, None] * d
    acc_k += (tl.sum(xk * kh, axis=1) * dec)[:, None] * d
    return acc_q, acc_k


@triton.jit
def replay_beams(khat_ptr, delta_ptr, gcum_ptr, q_ptr, k_ptr, gb_ptr, anc_ptr, uq_ptr, uk_ptr, R, W, H, T_CAP, STEP,
                 BB: tl.constexpr, K: tl.constexpr, V: tl.constexpr, STAGES: tl.constexpr):
    """Beam-major replay: program (beam tile, request x head), one depth at a time (STAGES depths in flight; 0: the
    interpreter's loop, which takes no run-time range)."""
    pid_b = tl.program_id(0)
    pid_rh = tl.program_id(1)
    r = pid_rh // H
    h = pid_rh % H
    beam = pid_b * BB + tl.arange(0, BB)
    offs_k = tl.arange(0, K)
    offs_v = tl.arange(0, V)
    row_b = ((r * W + beam) * H + h).to(tl.int64)
    xq = tl.load(q_ptr + row_b[:, None] * K + offs_k[None, :]).to(tl.float32)
    xk = tl.load(k_ptr + row_b[:, None] * K + offs_k[None, :]).to(tl.float32)
    gb = tl.load(gb_ptr + (r * H + h) * W + beam)
    acc_q = tl.zeros([BB, V], dtype=tl.float32)
    acc_k = tl.zeros([BB, V], dtype=tl.float32)
    if STAGES == 0:
        j = 0
        while j < STEP:
            acc_q, acc_k = _beams_depth(khat_ptr, delta_ptr, gcum_ptr, anc_ptr, j, r, h, beam, xq, xk, gb, acc_q,
                                        acc_k, offs_k, offs_v, R, W, H, T_CAP, K, V)
            j += 1
    else:
        for j in tl.range(0, STEP, num_stages=STAGES):
            acc_q, acc_k = _beams_depth(khat_ptr, delta_ptr, gcum_ptr, anc_ptr, j, r, h, beam, xq, xk, gb, acc_q,
                                        acc_k, offs_k, offs_v, R, W, H, T_CAP, K, V)
    tl.store(uq_ptr + row_b[:, None] * V + offs_v[None, :], acc_q)
    tl.store(uk_ptr + row_b[:, None] * V + offs_v[None, :], acc_k)


@triton.jit
def _records_chunk(khat_ptr, delta_ptr, gcum_ptr, ent_ptr, c, n, r, h, lane, xq, xk, gb, acc_q, acc_k, offs_k,
                   offs_v, R, W, H, CH: tl.constexpr, K: tl.constexpr, V: tl.constexpr, UPCAST: tl.constexpr):
    e = c + tl.arange(0, CH)
    live = e < n
    depth = tl.load(ent_ptr + e * 4, mask=live, other=0)
    slot = tl.load(ent_ptr + e * 4 + 1, mask=live, other=0)
    start = tl.load(ent_ptr + e * 4 + 2, mask=live, other=0)
    end = tl.load(ent_ptr + e * 4 + 3, mask=live, other=0)            # padding: the empty run [0, 0)
    row = _row(depth, r, h, slot, R, H, W)
    kh = tl.load(khat_ptr + row[:, None] * K + offs_k[None, :], mask=live[:, None], other=0.0)
    d = tl.load(delta_ptr + row[:, None] * V + offs_v[None, :], mask=live[:, None], other=0.0)
    gi = tl.load(gcum_ptr + row, mask=live, other=0.0)
    inside = (lane[:, None] >= start[None, :]) & (lane[:, None] < end[None, :])
    dec = tl.where(inside, tl.exp(gb[:, None] - gi[None, :]), 0.0)
    khT = tl.trans(kh)
    cq = _dot(xq, khT, UPCAST) * dec                                     # [BB, CH]
    ck = _dot(xk, khT, UPCAST) * dec
    cq_hi = cq.to(tl.bfloat16)
    ck_hi = ck.to(tl.bfloat16)
    acc_q += _dot(cq_hi, d, UPCAST) + _dot((cq - cq_hi.to(tl.float32)).to(tl.bfloat16), d, UPCAST)
    acc_k += _dot(ck_hi, d, UPCAST) + _dot((ck - ck_hi.to(tl.float32)).to(tl.bfloat16), d, UPCAST)
    return acc_q, acc_k


@triton.jit
def replay_records(khat_ptr, delta_ptr, gcum_ptr, q_ptr, k_ptr, gb_ptr, order_ptr, ent_ptr, cnt_ptr, uq_ptr, uk_ptr,
                   R, W, H, MAXE, BB: tl.constexpr, CH: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                   STAGES: tl.constexpr, UPCAST: tl.constexpr):
    """Record-major replay: program (beam tile in tree order, request x head) walks its tile's record list
    (int32 [depth, slot, start, end] entries, `record_lists`) CH entries at a time."""
    pid_b = tl.program_id(0)
    pid_rh = tl.program_id(1)
    r = pid_rh // H
    h = pid_rh % H
    lane = tl.arange(0, BB)
    beam = tl.load(order_ptr + r * W + pid_b * BB + lane)
    offs_k = tl.arange(0, K)
    offs_v = tl.arange(0, V)
    row_b = ((r * W + beam) * H + h).to(tl.int64)
    xq = tl.load(q_ptr + row_b[:, None] * K + offs_k[None, :])
    xk = tl.load(k_ptr + row_b[:, None] * K + offs_k[None, :])
    gb = tl.load(gb_ptr + (r * H + h) * W + beam)
    tile = r * (W // BB) + pid_b
    n = tl.load(cnt_ptr + tile)
    ent = ent_ptr + tile.to(tl.int64) * MAXE * 4
    acc_q = tl.zeros([BB, V], dtype=tl.float32)
    acc_k = tl.zeros([BB, V], dtype=tl.float32)
    if STAGES == 0:
        c = 0
        while c < n:
            acc_q, acc_k = _records_chunk(khat_ptr, delta_ptr, gcum_ptr, ent, c, n, r, h, lane, xq, xk, gb, acc_q,
                                          acc_k, offs_k, offs_v, R, W, H, CH, K, V, UPCAST)
            c += CH
    else:
        for c in tl.range(0, n, CH, num_stages=STAGES):
            acc_q, acc_k = _records_chunk(khat_ptr, delta_ptr, gcum_ptr, ent, c, n, r, h, lane, xq, xk, gb, acc_q,
                                          acc_k, offs_k, offs_v, R, W, H, CH, K, V, UPCAST)
    tl.store(uq_ptr + row_b[:, None] * V + offs_v[None, :], acc_q)
    tl.store(uk_ptr + row_b[:, None] * V + offs_v[None, :], acc_k)


@triton.jit
def _min(a, b):
    return tl.minimum(a, b)


@triton.jit
def _slots(anc_ptr, order_ptr, r, W, T_CAP, col, live, pos):
    """The ancestry rows [BB, TP] of the beams at tree-order positions `pos` (clamped to the request)."""
    beam = tl.load(order_ptr + r * W + tl.minimum(tl.maximum(pos, 0), W - 1))
    return tl.load(anc_ptr + (r * W + beam)[:, None] * T_CAP + col, mask=live, other=0)


@triton.jit
def record_lists_step(anc_ptr, order_ptr, ent_ptr, cnt_ptr, W, T_CAP, STEP, MAXE, BB: tl.constexpr,
                      TP: tl.constexpr):
    """`record_lists` on the device, one program per (request, beam tile): the tile's ancestry rows in tree order
    [BB, TP] beside their neighbours', the runs' first positions and ends, and each run's entry at (the runs of
    earlier depths) + (its rank among its depth's runs) -- the host's order, depth-major then by position."""
    tile = tl.program_id(0)
    r = tile // (W // BB)
    p = tl.arange(0, BB)
    d = tl.arange(0, TP)
    live = d[None, :] < STEP
    pos = (tile % (W // BB)) * BB + p
    col = d[None, :] + tl.zeros([BB, TP], dtype=tl.int32)
    cur = _slots(anc_ptr, order_ptr, r, W, T_CAP, col, live, pos)
    head = live & ((p == 0)[:, None] | (cur != _slots(anc_ptr, order_ptr, r, W, T_CAP, col, live, pos - 1)))
    nxt = (p < BB - 1)[:, None] & (_slots(anc_ptr, order_ptr, r, W, T_CAP, col, live, pos + 1) != cur)
    end = tl.associative_scan(tl.where(nxt, p[:, None] + 1, BB), 0, _min, reverse=True)
    per_depth = tl.sum(head.to(tl.int32), 0)
    first = tl.cumsum(per_depth, 0) - per_depth
    idx = first[None, :] + tl.cumsum(head.to(tl.int32), 0) - 1
    ent = ent_ptr + tile.to(tl.int64) * MAXE * 4 + idx * 4
    tl.store(ent, col, mask=head)
    tl.store(ent + 1, cur, mask=head)
    tl.store(ent + 2, p[:, None] + tl.zeros([BB, TP], dtype=tl.int32), mask=head)
    tl.store(ent + 3, end, mask=head)
    tl.store(cnt_ptr + tile, tl.sum(per_depth, 0))


def record_lists(table: torch.Tensor, order: torch.Tensor, step: int, bb: int, ch: int):
    """Each beam tile's distinct ancestral records in tree order (ancestry table [R, W, >= step] and order [R, W],
    CPU): int32 entries [R * W / bb, MAXE, 4] of (depth, slot, first position, position past the run) -- a run of
    equal slots at a depth of the tile's table -- and the entry count per tile; MAXE the largest count rounded up
    to a multiple of ch."""
    R, W = order.shape
    per = torch.gather(table[:, :, :step], 1, order.long()[:, :, None].expand(R, W, step))   # [R, W, step] by position
    tiles = per.view(R * (W // bb), bb, step)
    heads = torch.ones_like(tiles, dtype=torch.bool)
    heads[:, 1:] = tiles[:, 1:] != tiles[:, :-1]
    lists, counts = [], []
    lane = torch.arange(bb)
    for i in range(tiles.shape[0]):
        ent = []
        for j in range(step):
            starts = lane[heads[i, :, j]]
            ends = torch.cat([starts[1:], torch.tensor([bb])])
            ent.append(torch.stack([torch.full_like(starts, j), tiles[i, starts, j].long(), starts, ends], 1))
        ent = torch.cat(ent)
        lists.append(ent)
        counts.append(ent.shape[0])
    maxe = -(-max(counts) // ch) * ch
    out = torch.zeros(len(lists), maxe, 4, dtype=torch.int32)
    for i, ent in enumerate(lists):
        out[i, :ent.shape[0]] = ent.to(torch.int32)
    return out, torch.tensor(counts, dtype=torch.int32)


def make_records(parents: torch.Tensor, step: int, H: int, K: int, V: int, device, seed: int = 0):
    """Random records of steps 0..step-1 ([step, R, H, W, ...]: unit k-hat rows, delta rows ~0.1, cumulative log
    gates along each beam's chain) and step `step`'s beams (q, k [R, W, H, K] with q-hat's K^-1/2 scale folded in,
    G_b [R, H, W])."""
    _, R, W = parents.shape
    g = torch.Generator().manual_seed(seed)
    khat = torch.nn.functional.normalize(torch.randn(step, R, H, W, K, generator=g), dim=-1).to(torch.bfloat16)
    delta = (0.1 * torch.randn(step, R, H, W, V, generator=g)).to(torch.bfloat16)
    logd = -0.5 * torch.rand(step + 1, R, H, W, generator=g)            # log alpha in (-0.5, 0]
    gcum = torch.empty(step, R, H, W)
    prev = torch.zeros(R, H, W)
    for t in range(step + 1):
        par = parents[t].long()[:, None, :].expand(R, H, W)
        cur = torch.gather(prev, 2, par) + logd[t] if t else logd[0].clone()
        if t < step:
            gcum[t] = cur
        prev = cur
    gb = prev                                                            # the beam's gate at this step
    xq = (torch.nn.functional.normalize(torch.randn(R, W, H, K, generator=g), dim=-1) * K ** -0.5).to(torch.bfloat16)
    xk = torch.nn.functional.normalize(torch.randn(R, W, H, K, generator=g), dim=-1).to(torch.bfloat16)
    return [x.to(device) for x in (khat, delta, gcum, xq, xk, gb)]


def reference(khat, delta, gcum, xq, xk, gb, table, step):
    """u_q, u_k [R, W, H, V] in fp32 torch, one depth at a time."""
    _, R, H, W, K = khat.shape
    uq = torch.zeros(R, W, H, delta.shape[-1], device=khat.device)
    uk = torch.zeros_like(uq)
    for j in range(step):
        slot = table[:, :, j].long()[:, None, :].expand(R, H, W)
        kh = torch.gather(khat[j].float(), 2, slot[..., None].expand(R, H, W, K)).transpose(1, 2)
        d = torch.gather(delta[j].float(), 2, slot[..., None].expand(R, H, W, delta.shape[-1])).transpose(1, 2)
        dec = torch.exp(gb - torch.gather(gcum[j], 2, slot)).transpose(1, 2)          # [R, W, H]
        uq += ((xq.float() * kh).sum(-1) * dec)[..., None] * d
        uk += ((xk.float() * kh).sum(-1) * dec)[..., None] * d
    return uq, uk


def main(argv=None) -> int:
    """Takes no arguments (`--help` prints the docstring); anything else is bad usage (exit 2). Exit 2 without
    a CUDA GPU as well, before any work."""
    if not no_argument_gpu_tool("replay_bench", __doc__, "replay_bench.json", argv):
        return 2
    R, W, H, K, V = 4, 512, 16, 128, 128
    out = {}
    for lineage in ("beam", "model"):
        for step in (30, 63):
            parents = make_workload("qwen3_5_0_8b", R, W, step + 1, lineage=lineage, seed=0, device="cuda",
                                    prompt_len=0).parents.cpu()
            table = build(parents)[step].contiguous()
            khat, delta, gcum, xq, xk, gb = make_records(parents, step, H, K, V, "cuda")
            want_q, want_k = reference(khat, delta, gcum, xq, xk, gb, table.cuda(), step)
            scale = max(want_q.abs().max().item(), want_k.abs().max().item())
            anc = table.cuda()
            uq, uk = torch.empty_like(want_q), torch.empty_like(want_k)

            def check(key, ms, extra):
                err = max((uq - want_q).abs().max().item(), (uk - want_k).abs().max().item())
                out[key] = {"ms": ms, "max_abs_err": err, "max_abs_u": scale, **extra}
                print(f"{key:36s} {ms*1e3:7.1f} us  {ms*1e3/step:5.2f} us/depth  err {err:.1e} of |u| {scale:.2f}"
                      + "".join(f"  {k} {v:.3g}" if isinstance(v, float) else f"  {k} {v}" for k, v in extra.items()),
                      flush=True)

            for bb, warps in ((32, 4), (64, 8)):
                key = f"{lineage} step{step} beams BB{bb} w{warps}"
                kern = lambda: replay_beams[(W // bb, R * H)](  # noqa: E731
                    khat, delta, gcum, xq, xk, gb, anc, uq, uk, R, W, H, step + 1, step, BB=bb, K=K, V=V, STAGES=3,
                    num_warps=warps)
                uq.fill_(float("nan"))
                kern()
                check(key, bench(kern), {"rows_gathered": 2 * R * W * step})
            order = tree_order(table, step)
            order_d = order.cuda()
            for bb in (16, 32, 64):
                ent, cnt = record_lists(table, order, step, bb, 1)
                ent_d = torch.zeros(R * W // bb, bb * step, 4, dtype=torch.int32, device="cuda")
                cnt_d = torch.zeros(R * W // bb, dtype=torch.int32, device="cuda")
                tp = triton.next_power_of_2(step)
                kern = lambda: record_lists_step[(R * W // bb,)](  # noqa: E731
                    anc, order_d, ent_d, cnt_d, W, step + 1, step, bb * step, BB=bb, TP=tp, num_warps=4)
                try:
                    kern()
                except Exception as e:  # noqa: BLE001 - the replay timings below do not need it
                    print(f"{lineage} step{step} record_lists_step BB{bb} failed: {type(e).__name__}: {e}"[:300])
                    continue
                same = torch.equal(cnt_d.cpu(), cnt) and all(
                    torch.equal(ent_d[i, :int(cnt[i])].cpu(), ent[i, :int(cnt[i])]) for i in range(len(cnt)))
                ms = bench(kern)
                out[f"{lineage} step{step} record_lists_step BB{bb}"] = {"ms": ms, "same_lists": same}
                print(f"{lineage} step{step} record_lists_step BB{bb}  {ms*1e3:5.1f} us  "
                      f"{'the host lists' if same else 'LISTS DIFFER FROM THE HOST'}", flush=True)
            for bb, ch, warps in ((16, 32, 4), (16, 64, 4), (16, 64, 8), (32, 32, 4), (32, 64, 8), (64, 64, 8)):
                ent, cnt = record_lists(table, order, step, bb, ch)
                ent_d, cnt_d = ent.cuda(), cnt.cuda()
                key = f"{lineage} step{step} records BB{bb} CH{ch} w{warps}"
                kern = lambda: replay_records[(W // bb, R * H)](  # noqa: E731
                    khat, delta, gcum, xq, xk, gb, order_d, ent_d, cnt_d, uq, uk, R, W, H, ent.shape[1], BB=bb,
                    CH=ch, K=K, V=V, STAGES=2, UPCAST=False, num_warps=warps)
                uq.fill_(float("nan"))
                try:
                    kern()
                except Exception as e:  # noqa: BLE001 - a variant that does not compile is a result too
                    out[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
                    print(f"{key:36s} failed: {out[key]['error']}", flush=True)
                    continue
                chunks = int((-(-cnt // ch)).sum())
                flops = 6 * 2 * bb * ch * K * chunks * H          # 2 coefficient and 4 hi / lo products per chunk
                ms = bench(kern)
                check(key, ms, {"rows_gathered": 2 * int(cnt.sum()),
                                "records_per_tile": float(cnt.float().mean()), "tc_tflops": flops / ms / 1e9})
    with open(os.path.join(os.environ.get("OUT", "."), "replay_bench.json"), "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
