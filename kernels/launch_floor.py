"""What one launch per step costs when each launch only streams its step's bytes: `python -m kernels.launch_floor`
(a benchmark, GPU only; results/kernels/launch_floor_*.log).

The memory floor of `kernels.bench` moves a decode's compulsory bytes as one stream at copy bandwidth. A decode
step is one launch, and a launch does not stream from its first nanosecond to its last: the work ramps up after the
launch and drains before the next. This times, per issue-3 cell (Qwen3.5-0.8B, W=512, the bench's workload), in
CUDA graphs replayed as `kernels.bench` times them (triton do_bench, L2 flushed, median):
- `steps`: T torch copies, copy t moving step t's compulsory bytes (`onela_step_bytes`: half read, half written);
- `one`: one copy of all T steps' bytes;
- `empty`: T launches of a one-element kernel (what the launches alone cost).
`steps` is what a kernel that streams at copy speed, one launch per step, would take; `steps - one` is what the
launch boundaries cost such a kernel."""
import json
import os

import torch
import triton.testing

from artifact.measure import measure_ceilings
from artifact.results import env_record
from artifact.workload import make_workload
from kernels.onela import onela_step_bytes


def _graph_ms(fn) -> float:
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return float(triton.testing.do_bench(g.replay, warmup=25, rep=100, return_mode="median"))


def main():
    if not torch.cuda.is_available():
        raise SystemExit("kernels.launch_floor needs a CUDA GPU (CPU timings are not performance)")
    ceilings = measure_ceilings()
    out = {"env": env_record({"ceilings": ceilings, "command": "python -m kernels.launch_floor"}), "rows": []}
    bw = ceilings["copy_bytes_per_s"]
    for R, O in ((4, 3), (4, 7), (16, 3), (16, 7)):
        wl = make_workload("qwen3_5_0_8b", R, 512, O - 1, lineage="beam", seed=0, device="cpu")
        steps = [(r + w) // 8 for r, w in onela_step_bytes(wl)]     # int32 elements each way
        pairs = [(torch.empty(n, dtype=torch.int32, device="cuda"), torch.empty(n, dtype=torch.int32, device="cuda"))
                 for n in steps]
        src, dst = (torch.empty(sum(steps), dtype=torch.int32, device="cuda") for _ in range(2))
        tiny = torch.zeros(1, device="cuda")
        ms_steps = _graph_ms(lambda: [d.copy_(s) for s, d in pairs])
        ms_one = _graph_ms(lambda: dst.copy_(src))
        ms_empty = _graph_ms(lambda: [tiny.add_(1) for _ in steps])
        nbytes = sum(8 * n for n in steps)
        row = {"R": R, "O": O, "launches": len(steps), "compulsory_MB": nbytes / 1e6, "floor_ms": nbytes / bw * 1e3,
               "steps_ms": ms_steps, "one_ms": ms_one, "empty_ms": ms_empty}
        out["rows"].append(row)
        print(f"R={R:2d} O={O} {len(steps)} launches, {nbytes / 1e6:7.1f} MB: floor {row['floor_ms']:.4f} ms, "
              f"T copies {ms_steps:.4f}, one copy {ms_one:.4f}, T empty launches {ms_empty:.4f}", flush=True)
        del pairs, src, dst
    with open(os.path.join(os.environ.get("OUT", "."), "launch_floor.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
