"""Benchmark command for our kernels (a benchmark, not a test): `python -m kernels.bench [--tune] [--out DIR]`.

Prints, for the Qwen3.5-0.8B geometry at W=512, R in {4, 16}, O in {3, 7}: the captured latency of the whole
T-step decode (one CUDA graph, median of replays), its roofline floor (compulsory bytes / measured copy
bandwidth vs FLOPs / measured matrix rate) and which bound that is, the max error against FP32 FullState, and
persistent / written bytes from the real tensors. `--tune` also times `tune_configs(K)`: the main kernel's
tiles and warps, the prep kernel's beam tile and K-chunked configs, per head dim (the data behind
kernels/NOTES.md). Every timed row passed the correctness gate first.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import sys
import time

import torch

from artifact.measure import DEFAULT_TOLERANCE, check_and_time, floor_ms, measure_ceilings
from artifact.reference import fullstate_decode
from artifact.results import env_record
from artifact.workload import make_workload
from kernels.fullstate import ControlledFullStatePath, ControlledFullStateStepper
from kernels.onela import OneLAPath, OneLAStepper, launch_config

MIB = 2 ** 20



class _ConfiguredOneLA(OneLAPath):
    def __init__(self, config=None):
        self.config = config

    def make_stepper(self, wl):
        return OneLAStepper(wl.geometry, wl.R, wl.W, wl.T, wl.device, self.config)

    def kernel_info(self) -> str:
        """Registers / spilled 4-byte registers (Triton's n_spills) per kernel of the last stepper's compiles,
        e.g. 'main:156r/0s'."""
        st = getattr(self, "stepper", None)
        return " ".join(f"{k}:{r}r/{sp}s" for k, (r, sp) in (st.kernel_info if st else {}).items())


class _ConfiguredFullState(ControlledFullStatePath):
    def __init__(self, block_v=None):
        self.block_v = block_v

    def make_stepper(self, wl):
        return ControlledFullStateStepper(wl.geometry, wl.R, wl.W, wl.T, wl.device, self.block_v)


def _row(name, wl, path, res, ceilings, extra=None):
    cost = path.cost(wl)
    fl, bound = floor_ms(cost["compulsory_bytes"], cost["flops"], ceilings, cost["rate"])
    return {"path": name, "R": wl.R, "W": wl.W, "O": wl.T + 1, "status": res.status, "reason": res.reason,
            "latency_ms": res.latency_ms, "p20_ms": res.p20_ms, "p80_ms": res.p80_ms, "floor_ms": fl,
            "floor_bound": bound, "latency_over_floor": res.latency_ms / fl, "max_abs_err": res.max_abs_err,
            "persistent_MiB": res.persistent_bytes / MIB, "written_MiB": res.written_bytes / MIB,
            "compulsory_MiB": cost["compulsory_bytes"] / MIB, "gflop": cost["flops"] / 1e9, **(extra or {})}


def sm_clock_mhz() -> int | None:
    """This GPU's SM clock now, by NVML (None where NVML or a GPU is missing). Rows record it before and after
    each cell, with `--idle` seconds of sleep before it: the first-cell check of kernels/NOTES.md "Next" 2."""
    try:
        import pynvml
        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - a missing library or device is "unknown", never a failed row
        return None


def tune_configs(K: int) -> list[dict]:
    """The launch configurations `--tune` times beside the default, by head dim K (kernels/NOTES.md says why).

    K <= 128: BB=32 (twice the main kernel's programs at half the accumulator registers: R=4 W=512 runs 512
    programs at 3 blocks/SM, 1.3 waves), the other beam/value tiles and warps, the prep kernel's beam tile,
    and the K-chunked projection's two best configs (measured slower at R=4, kept as a check).
    K = 256: the default is BV=64 with the K-chunked loop (BK=64, 1 stage); the candidates are one-tile
    configurations, other chunkings around it and v7's chunk load order (`qk_first` False). Both: the one-launch
    kernel (v6, `fused`) at a few tiles, the prep kernel's beam tile and alpha gather around the default, and the
    other `s_lo` choices (which projections take S_ctx's bf16 lo plane)."""
    if K <= 128:
        tiles = [(32, 128, 2), (32, 128, 4), (32, 64, 4), (64, 64, 4), (64, 128, 4), (64, 128, 8),
                 (128, 64, 4), (128, 64, 8), (128, 128, 8)]
        chunks = [(64, 128, 64, 1, 4), (64, 128, 32, 3, 4)]
        fused = [(64, 128, 4), (32, 128, 4), (64, 128, 8), (128, 128, 8)]
    else:
        tiles = [(64, 64, 4), (64, 32, 4), (64, 64, 8), (128, 64, 8)]       # one [BV, 256] tile (the old default first)
        # (64, 64, BK=64, 2 stages) was the default after this sweep's first run, 1 stage since d5ff80e
        chunks = [(64, 64, 128, 1, 4), (64, 64, 128, 2, 4), (64, 64, 64, 1, 4), (64, 64, 64, 3, 4),
                  (128, 64, 64, 2, 8), (64, 64, 64, 2, 8), (64, 32, 64, 2, 4)]
        fused = [(64, 64, 4), (32, 64, 4), (64, 64, 8), (64, 32, 4)]
    out = [{"BB": bb, "BV": bv, "num_warps": nw, "BK": K, "k_stages": 1} for bb, bv, nw in tiles]
    out += [{"fused": True, "BB": bb, "BV": bv, "num_warps": nw} for bb, bv, nw in fused]   # v6: one launch
    # the prep kernel: beam tile x the ancestral alphas as one gather (atile, stop 18) or depth by depth (chain),
    # each pair but the default (16 beams, atile since stop 20)
    default = launch_config(K, K, 512)
    out += [{"BB_PREP": bbp, "prep_alpha_tile": at} for bbp in (16, 32, 64) for at in (False, True)
            if (bbp, at) != (default["BB_PREP"], default["prep_alpha_tile"])]
    out += [{"BB": bb, "BV": bv, "num_warps": nw, "BK": bk, "k_stages": ks} for bb, bv, bk, ks, nw in chunks]
    if K > 128:     # v7's chunk load order (S split before the q, k loads; default qk_first since stop 18)
        out.append({"qk_first": False})
    # which projections take S's bf16 lo plane (stop 19): the choices other than the default
    out += [{"s_lo": lo} for lo in ("qk", "q", "none") if lo != default["s_lo"]]
    return out


def _label(cfg: dict, K: int) -> str:
    """A short name of a config's differences from the default, e.g. 'fused,128,128,w8' or 'it4,ls2'."""
    if "BB_PREP" in cfg or "prep_alpha_tile" in cfg:      # e.g. 'prep16,atile', 'prep32,chain', 'atile'
        text = f"prep{cfg['BB_PREP']}," if "BB_PREP" in cfg else ""
        text += {True: "atile", False: "chain"}.get(cfg.get("prep_alpha_tile"), "")
        rest = _label({k: v for k, v in cfg.items() if k not in ("BB_PREP", "prep_alpha_tile")}, K)
        return (text + "," + rest).strip(",")
    fused = "fused," if cfg.get("fused") else ""
    tile = [cfg.get("BB", "-"), cfg.get("BV", "-"), f"w{cfg.get('num_warps', '-')}"]
    text = fused + (",".join(map(str, tile)) if {"BB", "BV", "num_warps"} & set(cfg) else "")
    text += f",BK{cfg['BK']},s{cfg.get('k_stages', 1)}" if cfg.get("BK", K) < K else ""
    text += f",it{cfg['beam_iters']}" if "beam_iters" in cfg else ""
    text += f",ls{cfg['loop_stages']}" if cfg.get("loop_stages", 1) > 1 else ""
    text += f",upto{cfg['loop_max_step']}" if "loop_max_step" in cfg else ""
    text += f",rs{cfg['replay_stages']}" if "replay_stages" in cfg else ""
    text += f",pdl{int(cfg['pdl'])}" if "pdl" in cfg else ""
    text += "" if cfg.get("pdl_next_step", True) else ",nonext"
    text += {True: ",qkfirst", False: ",splitfirst"}.get(cfg.get("qk_first"), "")
    text += f",lo_{cfg['s_lo']}" if "s_lo" in cfg else ""
    text += {True: ",fuse0", False: ",nofuse0"}.get(cfg.get("fuse_step0"), "")
    text += f",pw{cfg['prep_warps']}" if "prep_warps" in cfg else ""
    text += "".join(f",{k}_{cfg[k]}" for k in _WS_KEYS if k in cfg)     # kernels/onela_ws.py
    # any other key by name, so that no two configs share a label (stop 27's ws_split rows read "onela[]" twice)
    text += "".join(f",{k}_{cfg[k]}" for k in sorted(set(cfg) - _LABELLED))
    return text.strip(",")


_WS_KEYS = ("ws", "ws_ring", "ws_kh_own_upto", "ws_even_upto", "ws_step_upto", "ws_regs", "ws_maxnreg")     # by name
_LABELLED = {"BB_PREP", "prep_alpha_tile", "fused", "BB", "BV", "num_warps", "BK", "k_stages", "beam_iters",
             "loop_stages", "loop_max_step", "replay_stages", "pdl", "pdl_next_step", "qk_first", "s_lo",
             "fuse_step0", "prep_warps", *_WS_KEYS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tune", action="store_true", help="also sweep launch configurations")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for bench.csv / env.json")
    ap.add_argument("--geometry", default="qwen3_5_0_8b")
    ap.add_argument("--no-fullstate", action="store_true")
    ap.add_argument("--match", default="", help="with --tune: only configs whose label contains this text")
    ap.add_argument("--config", action="append", default=[], type=json.loads,
                    help='also time this launch config (JSON, e.g. \'{"beam_iters": 4}\'); repeatable')
    ap.add_argument("--R", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--W", type=int, default=512, help="beams per request")
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds to sleep before each timed cell (does an idle GPU time slow? NOTES 'Next' 2)")
    args = ap.parse_args(argv)
    if args.idle < 0:
        ap.error(f"--idle must be >= 0 seconds, got {args.idle}")
    if not torch.cuda.is_available():
        print("kernels.bench needs a CUDA GPU (CPU timings are not performance)", file=sys.stderr)
        return 2
    ceilings = measure_ceilings()
    env = env_record({"ceilings": ceilings, "command": " ".join(sys.argv)})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_env.json"), "w") as f:
        json.dump(env, f, indent=2, default=str)
    print(f"GPU {env.get('gpu')}: copy {ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s, "
          f"tf32 {ceilings['tf32_flop_per_s'] / 1e12:.0f}, fp32 {ceilings['fp32_flop_per_s'] / 1e12:.0f}, "
          f"bf16 {ceilings['bf16_flop_per_s'] / 1e12:.0f} TFLOP/s", flush=True)

    rows = []
    for R, T in itertools.product(args.R, (6, 2)):   # T = 6 compiles every STEP once
        wl = make_workload(args.geometry, R, args.W, T, lineage="beam", seed=0, device="cuda")
        ref = fullstate_decode(wl)
        variants = [("onela", _ConfiguredOneLA())]
        if not args.no_fullstate:
            variants.append(("controlled_fullstate", _ConfiguredFullState()))
        if args.tune:
            K = wl.geometry.k
            variants += [(f"onela[{_label(cfg, K)}]", _ConfiguredOneLA(cfg)) for cfg in tune_configs(K)
                         if args.match in _label(cfg, K)]
        variants += [(f"onela[{_label(cfg, wl.geometry.k)}]", _ConfiguredOneLA(cfg)) for cfg in args.config]
        while variants:                                 # pop: a variant's stepper is freed before the next
            name, path = variants.pop(0)
            time.sleep(args.idle)
            clock_before = sm_clock_mhz()
            try:
                res = check_and_time(path, wl, ref, DEFAULT_TOLERANCE, warmup_ms=100, rep_ms=50)
                row = _row(name, wl, path, res, ceilings,
                           {"kernels": path.kernel_info()} if isinstance(path, _ConfiguredOneLA) else None)
                row.update(sm_mhz_before=clock_before, sm_mhz_after=sm_clock_mhz())
            except Exception as e:  # noqa: BLE001 - a config that fails to compile is a recorded failure
                row = {"path": name, "R": R, "W": args.W, "O": T + 1, "status": "failed",
                       "reason": f"{type(e).__name__}: {str(e)[:200]}"}
            rows.append(row)
            print(f"{name:34s} R={R:2d} O={T + 1} {row['status']:6s} "
                  f"lat={row.get('latency_ms', float('nan')):.4f}ms floor={row.get('floor_ms', float('nan')):.4f}"
                  f"({row.get('floor_bound', '')}) err={row.get('max_abs_err', float('nan')):.2e} "
                  f"persist={row.get('persistent_MiB', float('nan')):.1f}MiB "
                  f"written={row.get('written_MiB', float('nan')):.1f}MiB {row.get('kernels', '')} "
                  f"sm={row.get('sm_mhz_before')}->{row.get('sm_mhz_after')}MHz "
                  f"{row.get('reason', '')}", flush=True)
            del path
            torch.cuda.empty_cache()
        del wl, ref
        torch.cuda.empty_cache()
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("path", "R", "W", "O"), k))
    with open(os.path.join(args.out, "bench.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print("\nsummary (default configs):")
    for r in rows:
        if "[" not in r["path"]:
            print(f"  {r['path']:22s} R={r['R']:2d} O={r['O']}: {r.get('latency_ms', float('nan')):.4f} ms "
                  f"(floor {r.get('floor_ms', float('nan')):.4f} ms, {r.get('floor_bound', '')}; "
                  f"x{r.get('latency_over_floor', float('nan')):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
