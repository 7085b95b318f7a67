"""The project's timers (artifact/timing.py): summary conventions, the at-least-10-replays guarantee, the
timer string rows record, that no other module times or captures on its own, and (GPU) a small graph timed."""
from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest
import torch

from artifact import timing
from artifact.timing import (GRAPH_REPLAY, MIN_REPLAYS, TIMER, Timing, record_each, rep_for_call, rep_for_min_replays,
                             summarize, time_replay)

REPO = Path(__file__).resolve().parents[1]


def test_torch_summary_is_the_lower_middle_sample_and_linear_quantiles():
    samples = [4.0, 1.0, 3.0, 2.0, 10.0, 6.0]                    # even count: torch.median takes the lower middle
    median, p20, p80 = summarize(samples, "torch")
    t = torch.tensor(samples)
    assert median == 3.0 == float(t.median())
    assert (p20, p80) == pytest.approx([float(x) for x in torch.quantile(t, torch.tensor([0.2, 0.8]))])
    assert p20 == pytest.approx(2.0) and p80 == pytest.approx(6.0)      # linear: positions 1.0 and 4.0 of 0..5


def test_statistics_summary_is_the_mean_of_the_middle_two_and_exclusive_quintiles():
    samples = [4.0, 1.0, 3.0, 2.0, 10.0, 6.0]
    median, p20, p80 = summarize(samples, "statistics")
    q = statistics.quantiles(samples, n=5)
    assert median == 3.5 and (p20, p80) == (q[0], q[3])
    assert summarize([2.5], "statistics") == (2.5, 2.5, 2.5)          # one sample: all three are it
    assert summarize([2.5], "torch") == (2.5, 2.5, 2.5)
    with pytest.raises(ValueError, match="convention"):
        summarize(samples, "mean")
    with pytest.raises(ValueError, match="no samples"):
        summarize([], "torch")


def test_timing_records_its_samples_replays_and_timer():
    t = Timing.of([1.0, 2.0, 3.0], "statistics", "some timer")
    assert (t.median_ms, t.replays, t.timer, t.samples_ms) == (2.0, 3, "some timer", (1.0, 2.0, 3.0))


def test_timer_string_is_the_recorded_rows_format():
    """Rows in results/ carry these exact strings; the replay guarantee does not change them."""
    assert TIMER.format(replayed=GRAPH_REPLAY, w=25, r=100) == \
        "cuda_graph_replay+triton.do_bench(median, L2 flushed, warmup=25ms, rep=100ms)"
    assert TIMER.format(replayed=timing.EAGER_REPLAY, w=10, r=50) == \
        "eager(not capturable)+triton.do_bench(median, L2 flushed, warmup=10ms, rep=50ms)"


def _do_bench_replays(rep: float, estimate: float) -> int:
    """How many replays triton.testing.do_bench times: max(1, int(rep / its estimate))."""
    return max(1, int(rep / estimate))


@pytest.mark.parametrize("call_ms", [0.05, 3.0, 9.9, 12.0, 50.0, 400.0])
@pytest.mark.parametrize("noise", [0.9, 1.0, 1.1])
def test_the_raised_rep_fits_at_least_ten_replays(call_ms, noise):
    """A fn of `call_ms` (plus an L2 flush of ~0.08 ms in do_bench's estimate, which varies by +-10 %): after
    the first call, one raised rep fits MIN_REPLAYS; a fast fn keeps its rep."""
    rep, flush = 50.0, 0.08
    n = _do_bench_replays(rep, call_ms + flush)
    samples = [call_ms] * n
    new = rep_for_min_replays(rep, samples)
    if n >= MIN_REPLAYS:
        assert new == rep
    else:
        assert new > rep and _do_bench_replays(new, (call_ms + flush) * noise) >= MIN_REPLAYS


def test_time_replay_raises_the_rep_of_a_slow_call_before_timing_it(monkeypatch):
    """A call that one event pair times at 30 ms gets a repetition time for ten replays in do_bench's first
    run; a fast call keeps the rep asked for; where that one call understated the replays' time, a second
    do_bench run with a longer rep still brings ten."""
    import triton.testing
    calls, one_call = [], [30.0]

    def fake_do_bench(fn, warmup, rep, return_mode):
        calls.append(rep)
        assert return_mode == "all"
        return [30.0] * _do_bench_replays(rep, 30.1)

    monkeypatch.setattr(timing, "_one_call_ms", lambda fn: one_call[0])
    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    t = time_replay(lambda: None, warmup_ms=10, rep_ms=50)
    assert t.replays >= MIN_REPLAYS and calls == [rep_for_call(50, 30.0)] and calls[0] > 10 * 30.1
    assert t.timer == "cuda_graph_replay+triton.do_bench(median, L2 flushed, warmup=10ms, rep=50ms)"
    calls.clear()
    one_call[0] = 20.0                                     # the one call ran faster than the replays do
    t = time_replay(lambda: None, warmup_ms=10, rep_ms=50)
    assert t.replays >= MIN_REPLAYS and len(calls) == 2 and calls[1] > calls[0]
    calls.clear()
    one_call[0] = 0.2
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, warmup, rep, return_mode: calls.append(rep) or
                        [0.1, 0.3, 0.2] * 100)
    t = time_replay(lambda: None, 25, 100)
    assert calls == [100.0] and t.replays == 300 and t.median_ms == pytest.approx(0.2)   # fast: one call


@pytest.mark.parametrize("call_ms", [0.05, 3.0, 9.9, 12.0, 50.0, 400.0])
@pytest.mark.parametrize("noise", [0.9, 1.0, 1.1])
def test_a_rep_raised_from_one_call_fits_ten_replays(call_ms, noise):
    """rep_for_call: a call of `call_ms` (do_bench's estimate adds an L2 flush of ~0.08 ms and varies by
    +-10 %) gets a rep that fits MIN_REPLAYS; a fast call keeps the rep asked for."""
    rep, flush = 50.0, 0.08
    new = rep_for_call(rep, call_ms)
    if _do_bench_replays(rep, call_ms + flush) >= MIN_REPLAYS:
        assert new == rep
    else:
        assert new > rep and _do_bench_replays(new, (call_ms + flush) * noise) >= MIN_REPLAYS


class _Event:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def record(self):
        self.log.append(self.name)


def test_record_each_brackets_each_call_and_flushes_only_timed_samples():
    log = []
    run = record_each([lambda: log.append("a"), lambda: log.append("b")], before=lambda: log.append("flush"))
    run(None)                                                          # a warm-up sample: the calls alone
    assert log == ["a", "b"]
    log.clear()
    run([(_Event(log, "s0"), _Event(log, "e0")), (_Event(log, "s1"), _Event(log, "e1"))])
    assert log == ["flush", "s0", "a", "e0", "s1", "b", "e1"]


def test_only_the_timing_module_captures_graphs_and_times():
    """One timer: outside artifact/timing.py (and the tests), no module creates a CUDA graph or a timing event,
    or calls triton.testing.do_bench."""
    pattern = re.compile(r"do_bench|CUDAGraph\(\)|enable_timing")
    offenders = []
    for top in ("artifact", "kernels", "baselines", "sweeps", "plots", "tools"):
        for f in sorted((REPO / top).rglob("*.py")):
            if f == REPO / "artifact" / "timing.py":
                continue
            for i, line in enumerate(f.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{f.relative_to(REPO)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.gpu
def test_gpu_small_graph_timed_by_both_timers():
    """A small graph: the replay timer gives >= 10 replays and its row string; the event timer sums a
    sample's intervals; a slow fn (5 ms, rep 10 ms) still gets 10 replays."""
    from artifact.timing import capture_graph, time_events
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    graph, out = capture_graph(lambda: torch.mul(x, 2.0, out=y), warmup=2)
    y.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert out is y and torch.equal(y, x * 2)
    t = time_replay(graph.replay, warmup_ms=5, rep_ms=20)
    assert t.replays >= MIN_REPLAYS and 0 < t.p20_ms <= t.median_ms <= t.p80_ms < 5
    assert t.timer == "cuda_graph_replay+triton.do_bench(median, L2 flushed, warmup=5ms, rep=20ms)"
    one = time_events(record_each([graph.replay]), repeats=20, warmup=2)
    two = time_events(record_each([graph.replay, graph.replay]), repeats=20, warmup=2, intervals=2)
    assert one.replays == two.replays == 20 and 0 < one.median_ms < two.median_ms
    slow = time_replay(lambda: torch.cuda._sleep(10_000_000), warmup_ms=1, rep_ms=10, replayed="eager")  # ~5 ms
    assert slow.replays >= MIN_REPLAYS and slow.median_ms > 1, slow
