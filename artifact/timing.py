"""The project's timers: every GPU time in results/ comes from this module (docs/design.md §5).

- `capture_graph(fn, warmup=2, pool=None)`: warm `fn` up on a side stream (compiles, autotuning and first
  touches stay outside the graph), then capture one call of it in a CUDA graph.
- `time_replay(fn, warmup_ms, rep_ms)`: the kernel-level timer. `triton.testing.do_bench` replays `fn` (a
  graph's `replay`, or an eager call for a path that cannot be captured) with L2 flushed before each replay
  (it zeroes a 256 MB buffer); the summary is the median and the 20th / 80th percentiles of the replays. It
  guarantees at least `MIN_REPLAYS` timed replays: do_bench fits max(1, int(rep / its estimate)) replays
  into `rep_ms`, so for a slow `fn` (one call, timed first between two events, says it) the repetition time is
  raised to fit that many before do_bench runs; a call that still returns fewer is timed again.
- `time_events(run, repeats, warmup, intervals)`: the event timer of sequences of calls (the full model's T
  per-call graph replays with beam selection between them, which stays outside the timed intervals). Each
  sample is the sum of its intervals, each measured by a pair of CUDA events. The host enqueues every sample
  before it reads any event, behind a short GPU sleep, so the GPU never waits for a launch inside an interval.
  `event_intervals` returns the same samples with their intervals apart.
- `time_sequence(calls, repeats, warmup)`: each call's own time inside a sequence replayed in order (a decode's
  per-step graphs): per sample, a GPU sleep long enough for the host to enqueue the whole sample, an L2 flush
  (as do_bench's), then each call between a pair of CUDA events; one `Timing` per call.

Both return a `Timing`. Two summary conventions are kept, each where its rows were measured with it, so
recorded rows stay comparable: "torch" (the lower middle sample, as torch.median picks it, and
torch.quantile's linear interpolation; operator rows and their launch_floor_ms, tools.bench, tools.measure_launch_floor)
and "statistics" (statistics.median, the mean of the middle two, and statistics.quantiles(n=5); the full model's
rows, and do_bench's own median for the ceilings and tools.gather_bench).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

MIN_REPLAYS = 10          # timed replays every time_replay summary rests on, at least
REP_MARGIN = 1.25         # headroom over the replay-time estimate when the repetition time is raised
STATS = ("torch", "statistics")

# The `timer` column of a row timed by time_replay; `replayed` says what one replay is.
TIMER = "{replayed}+triton.do_bench(median, L2 flushed, warmup={w}ms, rep={r}ms)"
GRAPH_REPLAY = "cuda_graph_replay"
EAGER_REPLAY = "eager(not capturable)"


@dataclass(frozen=True)
class Timing:
    """A timed measurement: median and 20th / 80th percentile in ms over `replays` samples."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    replays: int
    timer: str = ""
    samples_ms: tuple[float, ...] = ()

    @classmethod
    def of(cls, samples_ms: Sequence[float], stats: str = "torch", timer: str = "") -> "Timing":
        median, p20, p80 = summarize(samples_ms, stats)
        return cls(median, p20, p80, len(samples_ms), timer, tuple(float(x) for x in samples_ms))


def summarize(samples_ms: Sequence[float], stats: str = "torch") -> tuple[float, float, float]:
    """(median, p20, p80) of the samples in one of the two conventions (`STATS`, module docstring)."""
    if not len(samples_ms):
        raise ValueError("no samples to summarize")
    if stats == "torch":
        times = torch.tensor(list(samples_ms))      # float32: the committed rows' convention
        p20, p80 = (float(x) for x in torch.quantile(times, torch.tensor([0.2, 0.8])))
        return float(times.median()), p20, p80
    if stats == "statistics":
        samples = [float(x) for x in samples_ms]
        q = statistics.quantiles(samples, n=5) if len(samples) >= 2 else [samples[0]] * 4
        return statistics.median(samples), q[0], q[3]
    raise ValueError(f"unknown summary convention {stats!r}; known: {', '.join(STATS)}")


def rep_for_min_replays(rep_ms: float, samples_ms: Sequence[float], min_replays: int = MIN_REPLAYS) -> float:
    """The repetition time (ms) for do_bench to fit at least `min_replays` replays, given the samples a call
    with `rep_ms` returned (`rep_ms` itself when they are enough).

    do_bench times n = max(1, int(rep / e)) replays, where e is its estimate of one L2 flush plus one call, so
    e > rep / (n + 1); the slowest sample bounds a call from below too. The margin covers the flush (not in
    the samples) and the noise of do_bench's estimate."""
    n = len(samples_ms)
    if n >= min_replays:
        return float(rep_ms)
    estimate = max(max(samples_ms, default=0.0), rep_ms / (n + 1))
    return max(float(rep_ms), min_replays * estimate * REP_MARGIN)


def rep_for_call(rep_ms: float, call_ms: float, min_replays: int = MIN_REPLAYS) -> float:
    """The repetition time (ms) for do_bench to fit at least `min_replays` replays of a call of `call_ms`:
    `rep_ms` where it fits them already, else min_replays x call_ms x REP_MARGIN (the margin covers the L2
    flush do_bench adds to each replay, and the noise of its own estimate)."""
    return max(float(rep_ms), min_replays * call_ms * REP_MARGIN)


def _one_call_ms(fn: Callable) -> float:
    """One call of `fn` between two CUDA events on the current stream (after the queue has drained), in ms."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def warm_up(fn: Callable, times: int = 1) -> None:
    """Call `fn` `times` times on a side stream (where capture will happen, outside the graph), then sync."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def capture_graph(fn: Callable, warmup: int = 2, pool=None) -> tuple[torch.cuda.CUDAGraph, object]:
    """(graph, fn's return value inside the capture) after `warmup` side-stream calls (0: none, e.g. when the
    caller warmed up a larger whole with `warm_up`). Graphs captured with the same `pool`
    (torch.cuda.graph_pool_handle()) share one memory pool and must be replayed in capture order."""
    if warmup:
        warm_up(fn, warmup)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = fn()
    return graph, out


def time_replay(fn: Callable, warmup_ms: float, rep_ms: float, replayed: str = GRAPH_REPLAY, stats: str = "torch",
                min_replays: int = MIN_REPLAYS) -> Timing:
    """Time replays of `fn` with triton.testing.do_bench (L2 flushed before each), at least `min_replays` of
    them. `timer` records the settings asked for (`TIMER`), the same string whatever the repetition time
    the guarantee needed; `replays` says how many were timed."""
    import triton.testing
    rep = rep_for_call(float(rep_ms), _one_call_ms(fn), min_replays)
    times = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep, return_mode="all")
    for _ in range(3):            # each retry re-estimates from its own samples; a steady fn needs one
        if len(times) >= min_replays:
            break
        rep = rep_for_min_replays(rep, times, min_replays)
        times = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep, return_mode="all")
    return Timing.of(times, stats, TIMER.format(replayed=replayed, w=warmup_ms, r=rep_ms))


def record_each(calls: Sequence[Callable], before: Callable | None = None) -> Callable:
    """A `run` for time_events: each of `calls` is one timed interval of a sample; `before` (e.g. an L2
    flush) runs untimed at the start of a timed sample. A warm-up sample makes the calls alone."""
    def run(events):
        if events is None:
            for call in calls:
                call()
            return
        if before is not None:
            before()
        for call, (start, end) in zip(calls, events):
            start.record()
            call()
            end.record()
    return run


def _get_ahead(cycles: int = 2_000_000) -> None:
    """Give the GPU work (a sleep of `cycles` SM clocks) so the host's next enqueued events do not wait on the
    host."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(cycles)


def _event_samples(run: Callable, repeats: int, warmup: int, intervals: int) -> list[list[float]]:
    """Per sample, the ms of each of its `intervals` timed intervals (time_events' protocol)."""
    for _ in range(warmup):
        run(None)
    torch.cuda.synchronize()
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(intervals)] for _ in range(repeats)]
    _get_ahead()
    for ev in events:
        run(ev)
    torch.cuda.synchronize()
    return [[s.elapsed_time(e) for s, e in ev] for ev in events]


def time_events(run: Callable, repeats: int, warmup: int = 0, intervals: int = 1, stats: str = "statistics",
                timer: str = "") -> Timing:
    """Time `repeats` samples of `run` with CUDA events.

    run(events) makes one sample and records events[i][0] / events[i][1] (CUDA events) around its i-th timed
    interval, i < `intervals`; the sample is the sum of its intervals. run(None) is a warm-up sample: the
    same work, nothing recorded. `warmup` warm-up samples run first, then the device is synchronized."""
    return Timing.of([sum(ms) for ms in _event_samples(run, repeats, warmup, intervals)], stats, timer)


def event_intervals(run: Callable, repeats: int, warmup: int = 0, intervals: int = 1) -> list[list[float]]:
    """time_events' samples with their intervals apart: per sample, the ms of each of its `intervals` timed
    intervals (for a caller whose intervals differ in kind, e.g. a generate's prefill and its decode calls)."""
    return _event_samples(run, repeats, warmup, intervals)


# Host time to enqueue one call of a sequence (a graph launch and two event records take ~10-20 us on the
# host); the GPU sleep before each sample covers this per call, twice over, so no interval waits on the host.
HOST_ENQUEUE_MS = 0.05
SLEEP_CYCLES_PER_MS = 2_000_000         # SM clocks per ms at 2 GHz (the H200's boost clock is 1.98 GHz)
SEQUENCE_TIMER = ("cuda_graph_per_step+cuda_events(each step's own interval, steps replayed in order; "
                  "L2 flushed before step 0; median of {n} decodes, warmup {w})")


def time_sequence(calls: Sequence[Callable], repeats: int, warmup: int = 2, stats: str = "torch") -> list[Timing]:
    """Each call's own GPU time inside the sequence `calls` replayed in order, one Timing per call.

    A sample replays every call once, in order: first (untimed) a GPU sleep long enough for the host to enqueue
    the whole sample, so no interval includes a wait for a launch, and an L2 flush (do_bench's buffer), so every
    sample starts cold as a do_bench replay does; then each call between its own pair of CUDA events, with no
    flush between calls (a call sees the cache the previous call left, as in one decode)."""
    import triton
    cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
    cycles = int(SLEEP_CYCLES_PER_MS * 2 * HOST_ENQUEUE_MS * (len(calls) + 1))

    def before():
        _get_ahead(cycles)
        triton.runtime.driver.active.clear_cache(cache)

    samples = _event_samples(record_each(calls, before=before), repeats, warmup, len(calls))
    timer = SEQUENCE_TIMER.format(n=repeats, w=warmup)
    return [Timing.of([s[i] for s in samples], stats, timer) for i in range(len(calls))]
