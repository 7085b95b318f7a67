"""Correctness of the `onela` path's default over the operator suite's shapes, no timing:
`python -m tools.onela_correctness [--geometry G ...]`.

The GPU check of a kernel change before its timed sweep: for each geometry (default: those the warp-specialised
kernel takes, `ws_shape_supports`) x R {4, 8, 16} x W {128, 256, 512} x T {2..6} -- the suite's shapes -- it runs
the sweep's gate (`artifact.measure.check_and_time`: graph-captured decode, poisoned output, max |o - o_ref|
against FP32 FullState <= 4.88e-4) and prints one line per shape with the kernels that ran and the worst error
so far. T = 6 first: it compiles every step. A failed shape is printed, not raised.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time

import torch

from artifact.measure import DEFAULT_TOLERANCE, check_and_time
from artifact.paths import get_path
from artifact.reference import fullstate_decode
from artifact.workload import GEOMETRIES, make_workload
from kernels.onela import ws_shape_supports

WS_GEOMETRIES = [name for name, geo in GEOMETRIES.items() if ws_shape_supports(geo, 128) is None]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--geometry", nargs="+", default=WS_GEOMETRIES, choices=sorted(GEOMETRIES), metavar="G",
                    help=f"geometries of artifact.workload.GEOMETRIES (default: {' '.join(WS_GEOMETRIES)})")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("tools.onela_correctness needs a CUDA GPU", file=sys.stderr)
        return 2
    worst, n, failed, t0 = 0.0, 0, 0, time.time()
    for T, R, W, geo in itertools.product([6, 2, 3, 4, 5], [4, 8, 16], [128, 256, 512], args.geometry):
        wl = make_workload(geo, R, W, T, lineage="beam", seed=0, device="cuda")
        ref = fullstate_decode(wl)
        path = get_path("onela")
        res = check_and_time(path, wl, ref, DEFAULT_TOLERANCE, time_it=False)
        n += 1
        failed += res.status != "ok"
        worst = max(worst, res.max_abs_err)
        print(f"{geo} R={R} W={W} T={T} {res.status} err={res.max_abs_err:.3e} "
              f"kernels={','.join(sorted(path.stepper.kernel_info))} "
              f"[{n} shapes, worst {worst:.3e}, {time.time() - t0:.0f}s]{' ' + res.reason if res.reason else ''}",
              flush=True)
        del wl, ref, path
        torch.cuda.empty_cache()
    print(f"{n} shapes, {failed} failed, worst {worst:.3e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
