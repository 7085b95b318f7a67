"""How fast can 256 B GTR rows be gathered at the beam workload's ancestry pattern? `python -m tools.gather_bench`
(a benchmark, GPU only; results/experiments/kernels/floors/gather_bw_*.log).

The floor of OneLA's cost model (artifact.cost.ProjectionReplay) moves each distinct ancestral record at copy
bandwidth; this measures what a kernel that does nothing but the gathers reaches.

Store of 256 B bf16 rows (k-hat / delta records, K = 128). A Triton kernel sums, per (beam, head),
its 5 ancestral rows of step 5 (depth j gathered at slot anc[5, r, b, j]) and writes the sum: 5 gathered rows read,
one written, per (beam, head). Patterns: the real ancestry (lineage 'beam'), the identity (every slot = b: the same
bytes, streamed) and the grid ordered heads-fastest; the store as [T, R, W, H, 128] (`store_rwh`) or
[T, R, H, W, 128] (`store_rhw`: GtrStore's memory order, a head's rows of one step contiguous, so a beam tile's
rows are near one another). Reference: a torch copy of the same bytes. Each kernel is captured in a CUDA graph and
timed by artifact.timing.time_replay (median, L2 flushed before each replay).

Deep steps (`gather_runs`, kernels/NOTES.md §6): the same sum over every depth of a deep step (30 and 63; R = 4,
W = 512, both lineages), a beam tile of BB beams per program, visiting the beams in one of two orders and loading
rows in one of two ways:
  score order   beam tiles as the kernels take them today (positions 0..W-1);
  tree order    the beams sorted by their ancestral chains (`tree_order`), so the beams that share a record at a
                depth sit next to one another in a tile at every depth;
  plain         every beam gathers its own row (what the kernels do);
  runs          only the first beam of each run of equal records loads the row (the others' loads are masked
                off) and the tile's rows are then selected from it through shared memory (`tl.gather` on int32
                words of two bf16: a bf16 gather compiles to one 2-byte shared load per element);
  runs_l1       the first beam of each run loads the row, and every beam loads its row once those have arrived
                (the second load's address depends on the first's data), so the repeats come from L1; its loop
                is not software-pipelined (the pipeliner's cp.async copies bypass L1);
  lanes         the plain gather in Gluon with a warp's load across 16 beams, a 32-byte sector of each: neighbours
                with the same record ask for the same sector and the coalescer merges them (`gather_lanes`).
It prints the time per depth and the rows each variant loads against the rows gathered, so the selection's cost
in shared memory shows beside the bytes it saves; and the device-side tree order's cost, one launch a step
(`tree_order_step`, checked against the host's sort of the ancestry rows). Writes gather_bw.json (both parts)."""
import json
import os
import sys

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from artifact.ancestry import build, distinct_per_depth
from artifact.timing import capture_graph, time_replay
from artifact.workload import make_workload
from tools import no_argument_gpu_tool


@triton.jit
def _row_rhw(t, r, h, b, R, H, W):
    """Row of record (step t, request r, head h, beam slot b) in GtrStore's memory order ([T, R, H, W] rows)."""
    return ((t * R + r) * H + h) * W + b


@triton.jit
def gather_sum(store_ptr, anc_ptr, out_ptr, R, W, H, T_CAP, STEP: tl.constexpr, BB: tl.constexpr, K: tl.constexpr,
               HEADS_FAST: tl.constexpr, HW: tl.constexpr):
    pid_rh = tl.program_id(0 if HEADS_FAST else 1)
    pid_b = tl.program_id(1 if HEADS_FAST else 0)
    r = pid_rh // H
    h = pid_rh % H
    offs_b = pid_b * BB + tl.arange(0, BB)
    offs_k = tl.arange(0, K)
    acc = tl.zeros([BB, K], dtype=tl.float32)
    for j in tl.static_range(STEP):
        slot = tl.load(anc_ptr + (r * W + offs_b) * T_CAP + j)
        if HW:
            row = _row_rhw(j, r, h, slot, R, H, W)
        else:
            row = ((j * R + r) * W + slot) * H + h
        acc += tl.load(store_ptr + row.to(tl.int64)[:, None] * K + offs_k[None, :]).to(tl.float32)
    tl.store(out_ptr + ((r * W + offs_b) * H + h).to(tl.int64)[:, None] * K + offs_k[None, :], acc.to(tl.bfloat16))


@triton.jit
def _max(a, b):
    return tl.maximum(a, b)


@triton.jit
def _depth_rows(store_ptr, anc_ptr, j, r, h, beam, lane, offs_w, R, W, H, T_CAP, BB: tl.constexpr, KW: tl.constexpr,
                RUNS: tl.constexpr):
    """The tile's rows of depth j as int32 words [BB, KW] (two bf16 each): each beam's own gather, or (RUNS) one
    load per run of equal slots, the run's other beams selecting it through shared memory (a word at a time)."""
    slot = tl.load(anc_ptr + (r * W + beam) * T_CAP + j)
    ptrs = store_ptr + _row_rhw(j, r, h, slot, R, H, W).to(tl.int64)[:, None] * KW + offs_w[None, :]
    if RUNS:
        first = (lane == 0) | (slot != tl.gather(slot, tl.maximum(lane - 1, 0), 0))    # a run's first beam
    if RUNS == 1:
        head = tl.associative_scan(tl.where(first, lane, 0), 0, _max)
        words = tl.load(ptrs, mask=first[:, None], other=0)
        words = tl.gather(words, tl.broadcast_to(head[:, None], (BB, KW)), 0)
    elif RUNS == 2:
        heads = tl.load(ptrs, mask=first[:, None], other=0)
        # The other beams load after the heads' rows have arrived, so theirs come from L1: the slot they use
        # depends on the heads' data (a select between two loads of the same slot, always equal).
        again = tl.load(anc_ptr + (r * W + beam) * T_CAP + j, volatile=True)     # not merged with the first
        slot = tl.where(tl.max(heads, axis=1) == 0x7FFF7FFF, again, slot)
        ptrs = store_ptr + _row_rhw(j, r, h, slot, R, H, W).to(tl.int64)[:, None] * KW + offs_w[None, :]
        words = tl.load(ptrs)
    else:
        words = tl.load(ptrs)
    return words


@triton.jit
def gather_runs(store_ptr, anc_ptr, order_ptr, out_ptr, R, W, H, T_CAP, STEP, BB: tl.constexpr, KW: tl.constexpr,
                RUNS: tl.constexpr, STAGES: tl.constexpr):
    """Per (beam, head): the sum of its STEP ancestral rows, the program's BB beams taken at positions
    [pid * BB, pid * BB + BB) of `order` (a permutation of each request's beams). RUNS: a row is loaded only by
    the first beam of a run of equal slots in the tile (adjacent in `order`) and selected for the rest (1: through
    shared memory, 2: by a second load, after the first, that L1 serves). Rows
    move as int32 words of two bf16 (the store and out viewed so), summed as even and odd fp32 halves."""
    pid_b = tl.program_id(0)
    pid_rh = tl.program_id(1)
    r = pid_rh // H
    h = pid_rh % H
    lane = tl.arange(0, BB)
    beam = tl.load(order_ptr + r * W + pid_b * BB + lane)
    offs_w = tl.arange(0, KW)
    even = tl.zeros([BB, KW], dtype=tl.float32)
    odd = tl.zeros([BB, KW], dtype=tl.float32)
    if STAGES == 0:         # the interpreter takes no range over a run-time bound
        j = 0
        while j < STEP:
            w = _depth_rows(store_ptr, anc_ptr, j, r, h, beam, lane, offs_w, R, W, H, T_CAP, BB, KW, RUNS)
            even += (w << 16).to(tl.float32, bitcast=True)
            odd += (w & -65536).to(tl.float32, bitcast=True)
            j += 1
    else:
        for j in tl.range(0, STEP, num_stages=STAGES):
            w = _depth_rows(store_ptr, anc_ptr, j, r, h, beam, lane, offs_w, R, W, H, T_CAP, BB, KW, RUNS)
            even += (w << 16).to(tl.float32, bitcast=True)
            odd += (w & -65536).to(tl.float32, bitcast=True)
    lo = even.to(tl.bfloat16).to(tl.uint16, bitcast=True).to(tl.uint32)
    hi = odd.to(tl.bfloat16).to(tl.uint16, bitcast=True).to(tl.uint32)
    tl.store(out_ptr + ((r * W + beam) * H + h).to(tl.int64)[:, None] * KW + offs_w[None, :],
             ((hi << 16) | lo).to(tl.int32, bitcast=True))


@gluon.jit
def _lanes_rows(store_ptr, anc_ptr, j, r, h, beam, offs_w, R, W, H, T_CAP, KW: gl.constexpr):
    slot = gl.load(anc_ptr + (r * W + beam) * T_CAP + j)
    row = (((j * R + r) * H + h) * W + slot).to(gl.int64)
    return gl.load(store_ptr + row[:, None] * KW + offs_w[None, :])


@gluon.jit
def gather_lanes(store_ptr, anc_ptr, order_ptr, out_ptr, R, W, H, T_CAP, STEP, BB: gl.constexpr,
                 KW: gl.constexpr, NW: gl.constexpr):
    """`gather_runs`' plain mode in Gluon with the tile's layout chosen: a warp's load covers 16 beams x one
    32-byte sector of each (two lanes of 16 bytes per beam), so beams that share a record and sit next to one
    another (tree order) ask for the same sector, which the coalescer merges into one request -- the dedup with
    no extra instruction. (Triton's own coalescing puts the lanes along a row whatever the pointer order.) Two
    depths in flight by hand (Gluon does not pipeline the loop). NW warps: BB = 16 NW."""
    lay: gl.constexpr = gl.BlockedLayout([1, 4], [16, 2], [NW, 1], [1, 0])
    pid_b = gl.program_id(0)
    pid_rh = gl.program_id(1)
    r = pid_rh // H
    h = pid_rh % H
    beam = gl.load(order_ptr + r * W + pid_b * BB + gl.arange(0, BB, layout=gl.SliceLayout(1, lay)))
    offs_w = gl.arange(0, KW, layout=gl.SliceLayout(0, lay))
    even = gl.zeros([BB, KW], gl.float32, lay)
    odd = gl.zeros([BB, KW], gl.float32, lay)
    w = _lanes_rows(store_ptr, anc_ptr, 0, r, h, beam, offs_w, R, W, H, T_CAP, KW)
    for j in range(1, STEP):
        nxt = _lanes_rows(store_ptr, anc_ptr, j, r, h, beam, offs_w, R, W, H, T_CAP, KW)
        even += (w << 16).to(gl.float32, bitcast=True)
        odd += (w & -65536).to(gl.float32, bitcast=True)
        w = nxt
    even += (w << 16).to(gl.float32, bitcast=True)
    odd += (w & -65536).to(gl.float32, bitcast=True)
    lo = even.to(gl.bfloat16).to(gl.uint16, bitcast=True).to(gl.uint32)
    hi = odd.to(gl.bfloat16).to(gl.uint16, bitcast=True).to(gl.uint32)
    gl.store(out_ptr + ((r * W + beam) * H + h).to(gl.int64)[:, None] * KW + offs_w[None, :],
             ((hi << 16) | lo).to(gl.int32, bitcast=True))


@triton.jit
def tree_order_step(par_ptr, rank_prev_ptr, order_ptr, rank_ptr, W: tl.constexpr):
    """One decode step's tree order on the device, one program per request: step t's beams sorted by (their
    parent's position in step t - 1's order, beam), which is their ancestral chains' order when step t - 1's
    order is (the identity's at step 0). Writes the order (position -> beam) and each beam's position."""
    r = tl.program_id(0)
    b = tl.arange(0, W)
    par = tl.load(par_ptr + r * W + b)
    key = tl.load(rank_prev_ptr + r * W + par) * W + b          # < W * W: int32 up to W = 46,340
    beam = tl.sort(key) % W
    tl.store(order_ptr + r * W + b, beam)
    tl.store(rank_ptr + r * W + beam, b)


def tree_order(table: torch.Tensor, step: int) -> torch.Tensor:
    """Each request's beams sorted by their ancestral chains at `step` (ancestry table [R, W, >= step], CPU):
    int32 [R, W]. Beams with the same ancestor at depth j share every slot of depths <= j, so they are adjacent
    at every depth."""
    import numpy as np
    rows = [np.lexsort(table[r, :, :step].numpy().T[::-1]) for r in range(table.shape[0])]
    return torch.from_numpy(np.stack(rows).astype(np.int32))


def device_tree_order(parents: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """`tree_order_step` run for steps 1..step from step 0's identity order (parents int32 [T > step, R, W], CPU):
    step `step`'s order and ranks on the GPU, and the median ms of that step's one launch."""
    R, W = parents.shape[1:]
    par = parents.cuda()
    rank = torch.arange(W, dtype=torch.int32, device="cuda").expand(R, W).contiguous()
    order, nxt = torch.empty_like(rank), torch.empty_like(rank)
    for t in range(1, step):
        tree_order_step[(R,)](par[t], rank, order, nxt, W=W)
        rank, nxt = nxt, rank
    launch = lambda: tree_order_step[(R,)](par[step], rank, order, nxt, W=W)  # noqa: E731 - reads rank only
    launch()
    return order, nxt, bench(launch)


def rows_loaded(table: torch.Tensor, order: torch.Tensor, step: int, bb: int, runs: int) -> int:
    """Rows `gather_runs` asks L2 for: one per (beam, depth), or with `runs` (1 or 2) one per run of equal slots in
    a tile."""
    R, W = order.shape
    if not runs:
        return R * W * step
    a = torch.gather(table[:, :, :step], 1, order.long()[:, :, None].expand(R, W, step)).view(R, W // bb, bb, step)
    return int(R * (W // bb) * step + (a[:, :, 1:] != a[:, :, :-1]).sum())


def deep(out: dict) -> None:
    """The deep-step part (see the module docstring)."""
    R, W, H, K = 4, 512, 16, 128
    for lineage in ("beam", "model"):
        for step in (30, 63):
            # the parents the suites' workloads carry (drawn on the GPU, as beam_scaling draws them)
            parents = make_workload("qwen3_5_0_8b", R, W, step + 1, lineage=lineage, seed=0, device="cuda",
                                    prompt_len=0).parents.cpu()
            table = build(parents)[step]
            orders = {"score": torch.arange(W, dtype=torch.int32).expand(R, W).contiguous(),
                      "tree": tree_order(table, step)}
            anc = table.contiguous().cuda()
            dev_order, _, ms_sort = device_tree_order(parents, step)
            same = torch.equal(dev_order.cpu(), orders["tree"])
            out[f"{lineage} step{step} tree_order_step"] = {"ms": ms_sort, "same_order": same}
            print(f"{lineage} step{step} tree_order_step (one launch, R = {R} programs)  {ms_sort*1e3:5.1f} us  "
                  f"{'the host order' if same else 'ORDER DIFFERS FROM THE HOST'}", flush=True)
            store = torch.randn(step, R, H, W, K, device="cuda").to(torch.bfloat16)
            o = torch.empty(R, W, H, K, device="cuda", dtype=torch.bfloat16)
            distinct = int(distinct_per_depth(table, step).sum())
            ref = None
            for oname, order in orders.items():
                order_d = order.cuda()
                args = (store.view(torch.int32), anc, order_d, o.view(torch.int32), R, W, H, step + 1, step)
                for mode in ("plain", "runs", "runs_l1", "lanes"):
                    runs = {"runs": 1, "runs_l1": 2}.get(mode, 0)
                    for bb, warps in ((64, 4), (128, 8)):
                        if mode == "lanes":
                            kern = lambda: gather_lanes[(W // bb, R * H)](  # noqa: E731
                                *args, BB=bb, KW=K // 2, NW=warps, num_warps=warps)
                        else:
                            kern = lambda: gather_runs[(W // bb, R * H)](  # noqa: E731
                                *args, BB=bb, KW=K // 2, RUNS=runs, STAGES=1 if runs == 2 else 3, num_warps=warps)
                        key = f"{lineage} step{step} {oname} {mode} BB{bb}"
                        try:
                            kern()
                        except Exception as e:  # noqa: BLE001 - a variant that does not compile is a result too
                            out[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
                            print(f"{key:34s} failed: {out[key]['error']}", flush=True)
                            continue
                        if ref is None:
                            ref = o.clone()
                        ok = torch.equal(o, ref)
                        ms = bench(kern)
                        loaded = rows_loaded(table, order, step, bb, runs)      # lanes: what it asks for
                        out[key] = {"ms": ms, "rows_loaded": loaded, "rows_gathered": R * W * step,
                                    "distinct_per_request": distinct, "same_sums": ok}
                        print(f"{key:34s} {ms*1e3:7.1f} us  {ms*1e3/step:5.2f} us/depth  rows loaded "
                              f"{R*W*step/loaded:5.2f}x fewer than gathered (per request {R*W*step/distinct:5.2f}x)  "
                              f"{H*loaded*K*2/ms/1e9:5.2f} TB/s of loaded rows{'' if ok else '  SUMS DIFFER'}",
                              flush=True)


def bench(fn) -> float:
    """Median ms of `fn` captured in a CUDA graph (L2 flushed before each replay)."""
    graph, _ = capture_graph(fn, warmup=1)
    return time_replay(graph.replay, warmup_ms=20, rep_ms=100, stats="statistics").median_ms


def main(argv=None) -> int:
    """Takes no arguments (`--help` prints the docstring); anything else is bad usage (exit 2). Exit 2 without
    a CUDA GPU as well, before any work."""
    if not no_argument_gpu_tool("gather_bench", __doc__, "gather_bw.json", argv):
        return 2
    W, T, H, K, STEP = 512, 6, 16, 128, 5
    out = {}
    for R in (4, 16):
        wl = make_workload("qwen3_5_0_8b", R, W, T, lineage="beam", seed=0, device="cpu", prompt_len=0)
        anc = build(wl.parents)[STEP].contiguous().cuda()          # [R, W, T]
        ident = torch.arange(W, dtype=torch.int32).view(1, W, 1).expand(R, W, T).contiguous().cuda()
        store = torch.randn(T, R, W, H, K, device="cuda").to(torch.bfloat16)
        o = torch.empty(R, W, H, K, device="cuda", dtype=torch.bfloat16)
        distinct = sum(anc[r, :, j].unique().numel() for r in range(R) for j in range(STEP))
        raw = STEP * R * W * H * K * 2 + R * W * H * K * 2          # rows read (with repeats) + rows written
        for BB in (16, 32, 64):
            for name, a in (("ancestry", anc), ("identity", ident)):
                n_distinct = distinct if name == "ancestry" else STEP * R * W
                comp = n_distinct * H * K * 2 + R * W * H * K * 2     # each distinct row once + rows written
                for hf, hw in ((False, False), (True, False), (False, True), (True, True)):
                    grid = (R * H, W // BB) if hf else (W // BB, R * H)
                    ms = bench(lambda: gather_sum[grid](store, a, o, R, W, H, T, STEP=STEP, BB=BB, K=K,
                                                        HEADS_FAST=hf, HW=hw, num_warps=4))
                    key = (f"R{R} BB{BB} {name} {'heads_fast' if hf else 'beams_fast'} "
                           f"{'store_rhw' if hw else 'store_rwh'}")
                    out[key] = ms
                    print(f"{key:40s} {ms*1e3:7.1f} us  raw {raw/ms/1e9:6.2f} TB/s  "
                          f"distinct-rows {comp/ms/1e9:6.2f} TB/s", flush=True)
        src = torch.empty(raw // 2, dtype=torch.bfloat16, device="cuda")
        dst = torch.empty_like(src)
        ms = bench(lambda: dst.copy_(src))
        print(f"R{R} torch copy of the raw bytes: {ms*1e3:.1f} us ({2*raw/ms/1e9:.2f} TB/s r+w); "
              f"distinct rows {distinct} of {STEP*R*W}", flush=True)
    deep(out)
    with open(os.path.join(os.environ.get("OUT", "."), "gather_bw.json"), "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
