"""Max |o - o_FP32 FullState| of OneLA launch configs on operator-suite shapes, no timing:
`python -m kernels.error_probe GEOMETRY[,GEOMETRY...]` (GPU). Checks a precision key (s_lo) on the suite's
worst-error shapes -- R=16 and R=8 at W=512, R=16 at W=256, T=2..6, the suite's workloads -- before a full
operator re-run (results/kernels/err_check_slo_*.log), through the suite's own gate (`check_and_time`: the
captured graph replayed into a NaN-poisoned output)."""
from __future__ import annotations

import sys

import torch

from artifact.measure import DEFAULT_TOLERANCE, check_and_time
from artifact.reference import fullstate_decode
from artifact.workload import make_workload
from kernels.bench import _ConfiguredOneLA

CONFIGS = {"lo_qk": {"s_lo": "qk"}, "lo_q": {"s_lo": "q"}, "lo_none": {"s_lo": "none"}}   # not tied to the default
SHAPES = [(R, W, T) for R, W in ((16, 512), (8, 512), (16, 256)) for T in range(2, 7)]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("kernels.error_probe runs the kernels on a CUDA GPU", file=sys.stderr)
        return 2
    for geo in argv[0].split(","):
        for R, W, T in SHAPES:
            wl = make_workload(geo, R, W, T, lineage="beam", seed=0, device="cuda")
            ref = fullstate_decode(wl)
            errs = {name: check_and_time(_ConfiguredOneLA(cfg), wl, ref, DEFAULT_TOLERANCE,
                                         time_it=False).max_abs_err for name, cfg in CONFIGS.items()}
            print(geo, R, W, T, f"max|o|={ref.abs().max().item():.3f}",
                  " ".join(f"{k}={v:.3e}" for k, v in errs.items()), flush=True)
            del wl, ref
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
