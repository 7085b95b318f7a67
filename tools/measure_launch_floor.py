"""What one launch per step costs when each launch only streams its step's bytes, and what the timer's L2 flush
adds: `python -m tools.measure_launch_floor` (a benchmark, GPU only; results/kernels/launch_floor_*.log).

The floor of `tools.bench` (artifact.measure.floor_ms, each row's `floor_ms` here) moves a decode's compulsory bytes
as one stream at copy bandwidth. A decode step is one launch, and a launch does not stream from its first
nanosecond to its last: the work ramps up after the launch and drains before the next. And the kernel-level
timer (artifact.timing.time_replay, docs/design.md §5) flushes L2 by zeroing a 256 MB buffer before each replay,
which leaves L2 full of dirty lines that the timed replay then writes back. Per cell of the bench's workload (Qwen3.5-0.8B, W=512; R 4 / 16, O 3 / 7), each CUDA graph
below is timed twice (artifact.timing.time_events), as the replay timer does (`flush`: zero 256 MB, then the
timed replay) and with the flush's dirty lines written back before the timer starts (`clean`: zero 256 MB, read
another 256 MB, then the timed replay); median of 100 replays:
- `stream`: T launches of the streaming copy kernel, launch t moving step t's compulsory bytes (the onela path's
  cost model, artifact.cost.ProjectionReplay: half read, half written), the graph of artifact.launch_floor;
  `stream1`: one launch moving all T steps' bytes;
- `torch`: the same T copies by `Tensor.copy_`;
- `empty`: T launches of a one-element kernel (what the launches alone cost);
- `onela`: the path's default kernels on the bench's workload (gated against FP32 FullState first).
`stream` is what a kernel that streams its bytes at copy speed, one launch per step, would take. Each row also
has `launch_floor_ms`: the same stream timed as the suites time it for their launch_floor_ms column
(artifact.launch_floor.launch_floor_ms: the replay timer at the sweeps' default settings, sweeps.schema.TimerConf)."""
import json
import os
import sys

import torch

from artifact.launch_floor import ELEMENT_BYTES, StreamGraph, launch_floor_ms, plan_stream
from artifact.measure import DEFAULT_TOLERANCE, floor_ms, max_abs_err, measure_ceilings, scramble_
from artifact.reference import fullstate_decode
from artifact.env_record import env_record
from artifact.timing import capture_graph, record_each, time_events
from artifact.workload import make_workload
from kernels.onela import OneLAPath
from sweeps.schema import TimerConf
from tools import no_argument_gpu_tool

_FLUSH = 256 * 10 ** 6 // 4


def _graph(fn):
    return capture_graph(fn, warmup=1)[0]


def _median_ms(replay, clean: bool, bufs, n: int = 100) -> float:
    """Median ms of `replay` after each flush (the replay timer's zero of 256 MB; `clean`: then a read of 256 MB)."""
    flush, other = bufs

    def before():
        flush.zero_()
        if clean:
            other.sum()
    return time_events(record_each([replay], before), repeats=n, warmup=10, stats="torch").median_ms


def main(argv=None) -> int:
    """Takes no arguments (`--help` prints the docstring); anything else is bad usage (exit 2). Exit 2 without
    a CUDA GPU as well, before any work."""
    if not no_argument_gpu_tool("measure_launch_floor", __doc__, "launch_floor.json", argv):
        return 2
    ceilings = measure_ceilings()
    out = {"env": env_record({"ceilings": ceilings, "command": "python -m tools.measure_launch_floor"}), "rows": []}
    bufs = tuple(torch.ones(_FLUSH, dtype=torch.int32, device="cuda") for _ in range(2))
    for R, O in ((4, 3), (4, 7), (16, 3), (16, 7)):
        wl = make_workload("qwen3_5_0_8b", R, 512, O - 1, lineage="beam", seed=0, device="cuda")
        path = OneLAPath()
        cost = path.cost(wl)
        steps = cost["step_bytes"]                                   # per-step compulsory bytes, read + written
        stream, stream1 = StreamGraph(plan_stream(steps)), StreamGraph(plan_stream([sum(steps)]))
        tiny = torch.zeros(1, device="cuda")
        static = scramble_(wl.clone())
        path.prepare(static)
        g_onela, o = capture_graph(lambda: path.run(static), warmup=2)
        static.copy_(wl)
        g_onela.replay()
        err = max_abs_err(o, fullstate_decode(wl))
        graphs = {"stream": stream.graph, "stream1": stream1.graph,
                  "torch": _graph(lambda: [d.copy_(s) for s, d in stream.copies]),
                  "empty": _graph(lambda: [tiny.add_(1) for _ in steps])}
        if err <= DEFAULT_TOLERANCE:
            graphs["onela"] = g_onela
        nbytes = 2 * ELEMENT_BYTES * sum(stream.plan.elements)      # what the launches move, read + written
        row = {"R": R, "O": O, "launches": len(steps), "compulsory_MB": nbytes / 1e6,
               "floor_ms": floor_ms(cost["compulsory_bytes"], cost["flops"], ceilings, cost["rate"])[0],
               "onela_max_abs_err": err,
               "launch_floor_ms": launch_floor_ms(steps, TimerConf.warmup_ms, TimerConf.rep_ms)}
        for name, g in graphs.items():
            for clean in (False, True):
                row[f"{name}_{'clean' if clean else 'flush'}_ms"] = _median_ms(g.replay, clean, bufs)
        out["rows"].append(row)
        print(f"R={R:2d} O={O} {len(steps)} launches, {nbytes / 1e6:7.1f} MB, floor {row['floor_ms']:.4f} ms, onela "
              f"err {err:.2e}, launch_floor_ms {row['launch_floor_ms']:.4f}; ms flush / clean: " + ", ".join(
                  f"{n} {row[f'{n}_flush_ms']:.4f} / {row[f'{n}_clean_ms']:.4f}" for n in graphs), flush=True)
        del stream, stream1, graphs, g_onela, path, static
    for name, obj in (("launch_floor.json", out), ("launch_floor_env.json", out["env"])):
        with open(os.path.join(os.environ.get("OUT", "."), name), "w") as f:
            json.dump(obj, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
