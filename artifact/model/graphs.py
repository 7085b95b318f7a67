"""CUDA-graph capture and GPU timing of a BeamDecoder (paper §4.2's decode-forward GPU time), through the
project's timers (artifact.timing).

- `capture(decoder)`: one eager warm-up decode (Triton compiles, cuBLAS picks kernels) on a side stream, then
  one graph per decode call t (static shapes; call 0 includes the steppers' reset), all in one memory pool and
  replayed in capture order.
- `time_decode`: decode-forward time = sum over the T calls of each call's graph replay, measured by CUDA
  events around the replay; beam selection runs between calls, outside the events. Median / p20 / p80 over
  repeated whole decodes (artifact.timing.time_events).
"""
from __future__ import annotations

import torch

from artifact.timing import Timing, capture_graph, time_events, warm_up


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
