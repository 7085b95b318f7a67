"""CUDA-graph capture and GPU timing of a BeamDecoder (paper §4.2's decode-forward GPU time).

- `capture(decoder)`: one eager warm-up decode (Triton compiles, cuBLAS picks kernels) on a side stream, then
  one graph per decode call t (static shapes; call 0 includes the steppers' reset), all in one memory pool and
  replayed in capture order.
- `time_decode`: decode-forward time = sum over the T calls of each call's graph replay, measured by CUDA
  events around the replay; beam selection runs between calls, outside the events. Median / p20 / p80 over
  repeated whole decodes. The host enqueues every repeat before reading any event, so the GPU never waits
  for a launch inside a timed interval.
- `time_steppers`: the recurrent-state share -- the same T steps of only the GDN steppers (18 layers), replayed
  from the inputs the checked decode left in `gdn_io`, captured and timed the same way.
"""
from __future__ import annotations

import statistics

import torch


def _side_stream_warmup(fn) -> None:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def capture(decoder) -> list:
    """Capture decoder.forward(t) for t = 0..T-1 into decoder.graphs (needs a loaded prompt)."""
    if decoder.model.device.type != "cuda":
        raise RuntimeError("CUDA graphs need a CUDA device")
    _side_stream_warmup(decoder.run)
    pool = torch.cuda.graph_pool_handle()
    graphs = []
    for t in range(decoder.T):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            decoder.forward(t)
        graphs.append(g)
    decoder.graphs = graphs
    return graphs


def _get_ahead() -> None:
    """Give the GPU a little work so the host's first enqueued event does not wait on the host."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(2_000_000)


def _summary(sums: list[float]) -> dict:
    q = statistics.quantiles(sums, n=5) if len(sums) >= 2 else [sums[0]] * 4
    return {"median_ms": statistics.median(sums), "p20_ms": q[0], "p80_ms": q[3], "samples_ms": sums}


def time_decode(decoder, repeats: int = 10, warmup: int = 2) -> dict:
    """Decode-forward GPU time of whole beam searches on the captured graphs, or eager calls if never captured."""
    graphs = decoder.graphs is not None
    for _ in range(warmup):
        decoder.run(use_graphs=graphs)
    torch.cuda.synchronize()
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(decoder.T)] for _ in range(repeats)]
    _get_ahead()
    for ev in events:
        decoder.run(use_graphs=graphs, events=ev)
    torch.cuda.synchronize()
    return _summary([sum(s.elapsed_time(e) for s, e in ev) for ev in events])


def capture_steppers(decoder, parents: torch.Tensor) -> tuple[list, torch.Tensor]:
    """Graphs of only the GDN steppers' T steps (reset at t = 0), fed from decoder.gdn_io and `parents` [T, R, W]."""
    static_parents = parents.to(device=decoder.model.device, dtype=torch.int32).contiguous()

    def steps(t):
        for i, (st, io) in enumerate(zip(decoder.steppers, decoder.gdn_io)):
            if t == 0:
                if decoder.uses_tail:
                    st.reset(decoder.prompt["s_boundary"][i], tail=decoder.prompt["tail"][i])
                else:
                    st.reset(decoder.prompt["s_ctx"][i])
            q, k, v = decoder.split_qkv(io["mixed"][t])
            st.step(t, q, k, v, io["g"][t], io["beta"][t], static_parents[t], io["out"][t])

    _side_stream_warmup(lambda: [steps(t) for t in range(decoder.T)])
    pool = torch.cuda.graph_pool_handle()
    graphs = []
    for t in range(decoder.T):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            steps(t)
        graphs.append(g)
    return graphs, static_parents     # the caller keeps the static input alive while it replays


def time_steppers(decoder, parents: torch.Tensor, repeats: int = 10, warmup: int = 2) -> dict:
    """GPU time of the recurrent-state work alone over the T calls (all GDN layers), same timer as time_decode."""
    graphs, _static_parents = capture_steppers(decoder, parents)
    for _ in range(warmup):
        for g in graphs:
            g.replay()
    torch.cuda.synchronize()
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in graphs] for _ in range(repeats)]
    _get_ahead()
    for ev in events:
        for g, (s, e) in zip(graphs, ev):
            s.record()
            g.replay()
            e.record()
    torch.cuda.synchronize()
    return _summary([sum(s.elapsed_time(e) for s, e in ev) for ev in events])
