"""The launch-aware floor of a timed cell, `launch_floor_ms` (docs/methods.md §1, "Floors").

`floor_ms` moves a decode's compulsory bytes as one stream at copy bandwidth. A decode of T steps is at least T
launches, and a launch does not stream from its first nanosecond to its last (the work ramps up after the launch
and drains before the next), so at microsecond scale `floor_ms` is out of reach. `launch_floor_ms` is what T
launches of a streaming copy kernel take, launch t moving step t's compulsory bytes (half read, half written),
captured in one CUDA graph and timed by the cell's own timer (artifact.timing.time_replay, with the cell's warm-up
and repetition settings: the same replays, the same L2 flush before each), so latency / launch_floor_ms compares
like with like. It is a floor of a one-launch-per-step kernel that does nothing but stream its bytes at copy speed.

The per-step bytes are the `step_bytes` of the path's cost model (artifact.cost, which gives every algorithm's
bytes step by step). A launch copies int32 elements (`plan_stream`): ceil(bytes / 8)
each way, in slices laid one after another in one source and one destination buffer, so no launch reads what
an earlier launch of the same replay left in L2. Past RING_BYTES per buffer the slices wrap to the start: a slice
wraps only when it does not fit in what is left of the ring, so the launches since the start of the ring have
streamed more than RING_BYTES minus its size; where that is less than L2 holds, the slice is within an L2's
size of RING_BYTES itself, and what it can find in L2 is a few per cent of its bytes at most.

One measurement per distinct (per-step bytes, timer settings, device) in a process (`launch_floor_ms`'s cache):
the FullState paths of one shape share a cost model, and a suite does not time the same stream twice. The copy
kernel and its graph are also what `tools.measure_launch_floor` times (its `stream` and `stream1` rows).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import triton
import triton.language as tl

from artifact.timing import GRAPH_REPLAY, capture_graph, time_replay

STREAM_BLOCK = 4096          # int32 elements per program of the copy kernel
ELEMENT_BYTES = 4            # the copy moves int32 elements: 4 bytes read and 4 written each
ALIGN_ELEMENTS = 64          # slices start on 256-byte boundaries, so every launch compiles to the same vector loads
RING_BYTES = 1 << 30         # per buffer: slices are disjoint up to here, then wrap to the start


@triton.jit
def _stream_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def stream_copy(src: torch.Tensor, dst: torch.Tensor) -> None:
    """One launch of the streaming copy kernel: dst[:] = src[:] (contiguous int32 tensors of one length)."""
    n = src.numel()
    _stream_kernel[(triton.cdiv(n, STREAM_BLOCK),)](src, dst, n, BLOCK=STREAM_BLOCK, num_warps=4)


def cache_key(steps: Sequence[int], warmup_ms: float, rep_ms: float, device) -> tuple:
    """What identifies one launch-floor measurement: the per-step bytes in order (the same total split otherwise
    is another stream), the timer's settings and the device."""
    return tuple(int(b) for b in steps), float(warmup_ms), float(rep_ms), str(torch.device(device))


@dataclass(frozen=True)
class StreamPlan:
    """Where each launch copies: launch t moves elements[t] int32 elements from src[offsets[t]:] to the same
    range of dst; both buffers hold `capacity` elements."""

    elements: tuple[int, ...]
    offsets: tuple[int, ...]
    capacity: int


def plan_stream(steps: Sequence[int], ring_bytes: int = RING_BYTES) -> StreamPlan:
    """The launches of a stream moving `steps` bytes (half read, half written, at least one element each):
    slices in order, each on an ALIGN_ELEMENTS boundary, wrapping to the start when the next slice would pass
    the ring (ring_bytes per buffer, or the largest slice where that is larger)."""
    if not steps:
        raise ValueError("plan_stream: no steps")
    elements = [max(1, -(-int(b) // (2 * ELEMENT_BYTES))) for b in steps]
    sizes = [-(-n // ALIGN_ELEMENTS) * ALIGN_ELEMENTS for n in elements]
    capacity = max(max(sizes), min(sum(sizes), ring_bytes // ELEMENT_BYTES))
    offsets, at = [], 0
    for size in sizes:
        if at + size > capacity:
            at = 0
        offsets.append(at)
        at += size
    return StreamPlan(tuple(elements), tuple(offsets), capacity)


class StreamGraph:
    """A plan's launches captured in one CUDA graph, with the buffers it reads and writes (held while it lives).
    `copies` are the (src, dst) slices of each launch, for a caller that moves them another way."""

    def __init__(self, plan: StreamPlan, device="cuda"):
        self.plan = plan
        self.src = torch.ones(plan.capacity, dtype=torch.int32, device=device)
        self.dst = torch.empty_like(self.src)
        self.copies = [(self.src[o:o + n], self.dst[o:o + n]) for o, n in zip(plan.offsets, plan.elements)]
        self.graph, _ = capture_graph(self._launch_all, warmup=1)

    def _launch_all(self) -> None:
        for src, dst in self.copies:
            stream_copy(src, dst)

    def replay(self) -> None:
        self.graph.replay()


_MEASURED: dict[tuple, float] = {}


def launch_floor_ms(steps: Sequence[int], warmup_ms: float, rep_ms: float, device="cuda") -> float:
    """Median ms of the stream of `steps` (per-step compulsory bytes) as one graph, timed like a cell
    (time_replay with these settings); NaN on a CPU (nothing is timed there). Measured once per cache_key in a
    process."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return math.nan
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    key = cache_key(steps, warmup_ms, rep_ms, dev)
    if key not in _MEASURED:
        _MEASURED[key] = _time_stream(steps, warmup_ms, rep_ms, dev)
    return _MEASURED[key]


def _time_stream(steps: Sequence[int], warmup_ms: float, rep_ms: float, dev: torch.device) -> float:
    """One measurement: build the stream's graph on `dev`, time its replays, free its buffers and graph."""
    with torch.cuda.device(dev):
        stream = StreamGraph(plan_stream(steps), dev)
        try:
            return time_replay(stream.replay, warmup_ms, rep_ms, replayed=GRAPH_REPLAY).median_ms
        finally:
            del stream
