"""How fast can 256 B GTR rows be gathered at the beam workload's ancestry pattern? `python -m tools.gather_bench`
(a benchmark, GPU only; results/kernels/gather_bw_*.log).

The floor of OneLA's cost model (artifact.cost.ProjectionReplay) moves each distinct ancestral record at copy
bandwidth; this measures what a kernel that does nothing but the gathers reaches.

Store of 256 B bf16 rows (k-hat / delta records, K = 128). A Triton kernel sums, per (beam, head),
its 5 ancestral rows of step 5 (depth j gathered at slot anc[5, r, b, j]) and writes the sum: 5 gathered rows read,
one written, per (beam, head). Patterns: the real ancestry (lineage 'beam'), the identity (every slot = b: the same
bytes, streamed) and the grid ordered heads-fastest; the store as [T, R, W, H, 128] (`store_rwh`) or
[T, R, H, W, 128] (`store_rhw`: GtrStore's memory order, a head's rows of one step contiguous, so a beam tile's
rows are near one another). Reference: a torch copy of the same bytes. Each kernel is captured in a CUDA graph and
timed by artifact.timing.time_replay (median, L2 flushed before each replay)."""
import json
import os
import sys

import torch
import triton
import triton.language as tl

from artifact.ancestry import build
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
    with open(os.path.join(os.environ.get("OUT", "."), "gather_bw.json"), "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
