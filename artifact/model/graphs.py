"""CUDA-graph capture and GPU timing of a BeamDecoder (paper §4.2's decode-forward GPU time), through the
project's timers (artifact.timing).

- `capture(decoder)`: one eager warm-up decode (Triton compiles, cuBLAS picks kernels) on a side stream, then
  one graph per decode call t (static shapes; call 0 includes the steppers' reset), all in one memory pool and
  replayed in capture order.
- `time_decode`: decode-forward time = sum over the T calls of each call's graph replay, measured by CUDA
  events around the replay; beam selection runs between calls, outside the events. Median / p20 / p80 over
  repeated whole decodes (artifact.timing.time_events).
- `time_steppers`: the recurrent-state share -- the same T steps of only the GDN steppers (every GDN layer),
  replayed from the inputs the checked decode left in `gdn_io`, captured and timed the same way.
"""
from __future__ import annotations

import torch

from artifact.timing import Timing, capture_graph, record_each, time_events, warm_up


def capture(decoder) -> list:
    """Capture decoder.forward(t) for t = 0..T-1 into decoder.graphs (needs a loaded prompt)."""
    if decoder.model.device.type != "cuda":
        raise RuntimeError("CUDA graphs need a CUDA device")
    warm_up(decoder.run)
    pool = torch.cuda.graph_pool_handle()
    graphs = [capture_graph(lambda t=t: decoder.forward(t), warmup=0, pool=pool)[0] for t in range(decoder.T)]
    decoder.graphs = graphs
    return graphs


def time_decode(decoder, repeats: int = 10, warmup: int = 2) -> Timing:
    """Decode-forward GPU time of whole beam searches on the captured graphs, or eager calls if never captured."""
    graphs = decoder.graphs is not None
    return time_events(lambda ev: decoder.run(use_graphs=graphs, events=ev), repeats, warmup,
                       intervals=decoder.T)


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

    warm_up(lambda: [steps(t) for t in range(decoder.T)])
    pool = torch.cuda.graph_pool_handle()
    graphs = [capture_graph(lambda t=t: steps(t), warmup=0, pool=pool)[0] for t in range(decoder.T)]
    return graphs, static_parents     # the caller keeps the static input alive while it replays


def time_steppers(decoder, parents: torch.Tensor, repeats: int = 10, warmup: int = 2) -> Timing:
    """GPU time of the recurrent-state work alone over the T calls (all GDN layers), same timer as time_decode."""
    graphs, _static_parents = capture_steppers(decoder, parents)
    return time_events(record_each([g.replay for g in graphs]), repeats, warmup, intervals=len(graphs))
