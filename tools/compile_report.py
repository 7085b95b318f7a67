"""Compile OneLA's kernels for Hopper on any host, GPU or not: `python -m tools.compile_report [options]`.

Prints, per decode step and kernel, what Triton's compile for sm_90a allocates -- registers per thread, spilled
bytes, shared memory (read from its cubin with the cuobjdump Triton ships) -- and with `--order` each
kernel's instruction classes in issue order (global loads, fp32 -> bf16 converts, tensor-core MMAs, stores,
barriers), run-length encoded, and its cp.async waits (how many copy groups each leaves in flight). Those decide
a kernel's occupancy and whether its loads overlap; checking them costs no device time. The launch parameters
come from `kernels.onela.step_launches`, the same function the stepper launches with, and pointer / stride
arguments are marked 16-divisible as Triton's launcher specialises them for real tensors (without that, loads
compile unvectorised and the counts are meaningless). Where the warp-specialised Gluon kernels run (`ws`, and the
record-major route's `tree_ws`) they are compiled with the parameters of that plan (registers: the launch's
maxnreg; the partitions' split is set inside it). This is a compile report, not a timing.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from artifact.workload import GEOMETRIES, get_geometry
from kernels.onela import CONFIG_KEYS, KERNELS, launch_config, step_launches, ws_shape_supports
from kernels.onela.ws import BB_TILE, KC_TILE, VC_TILE
from tools import launch_config_arg

# Types of the runtime (non-constexpr) arguments, by name; a tuple argument's elements in order. "i32": an int,
# marked 16-divisible unless named in _NOT_DIV16 (T_CAP, and the pipelined prep kernel's step, which its launcher
# never specialises; strides and sizes are multiples of 16 in the shapes compiled here, as the launcher would
# specialise them).
_BF16, _F32, _I32 = "*bf16", "*fp32", "*i32"
_ARGS = {
    "q_ptr": _BF16, "k_ptr": _BF16, "g_ptr": _F32, "par_ptr": _I32, "anc_prev_ptr": _I32, "anc_next_ptr": _I32,
    "alpha_ptr": _F32, "khat_ptr": _BF16, "coef_ptr": _F32, "s_ptr": _F32, "anc_ptr": _I32, "out_ptr": _BF16,
    "inputs": (_BF16, _BF16, _BF16, _F32, _F32), "records": (_F32, _BF16, _BF16),
    "ptrs": (_I32, _I32, _I32, _F32, _F32, _BF16, _F32, _F32, _BF16, _BF16),
    "sq": ("i32",) * 3, "sv": ("i32",) * 3, "dims": ("i32",) * 5,
    "gcum_ptr": _F32, "rank_prev_ptr": _I32, "rank_ptr": _I32,
    "order_ptr": _I32, "scratch_ptr": _I32, "ent_ptr": _I32, "cnt_ptr": _I32,
    "tree": (_I32, _I32, _I32), "beams": (_BF16, _BF16, _BF16, _F32), "gtr": (_BF16, _BF16, _F32),
    "anc": (_I32, _I32), "gates": (_F32, _F32, _F32),
}
_NOT_DIV16 = {("T_CAP",), ("step",), ("dims", 3)}


def _tensordesc(block) -> str:
    """The signature type of a bf16 TMA descriptor argument with this block (as the launcher mangles it)."""
    import torch
    from triton.experimental.gluon import language as gl
    from triton.runtime.jit import mangle_type
    return mangle_type(TensorDescriptor(torch.zeros(block, dtype=torch.bfloat16), list(block), [block[1], 1],
                                        list(block), gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)))


_ORDER = re.compile(r"\b(LDGSTS|LDG|STG|HGMMA|F2FP|F2F|BAR\.SYNC|LDS|STS|UTMALDG|UTMASTG)\b")
_WAIT = re.compile(r"\bDEPBAR\.LE SB0, (0x[0-9a-f]+)")


def _nvidia_tool(name: str) -> str:
    """A binary Triton ships for its NVIDIA backend (ptxas, cuobjdump)."""
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def _cuobjdump(cubin: bytes, *flags: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([_nvidia_tool("cuobjdump"), *flags, f.name], capture_output=True, text=True,
                              check=True).stdout


def compile_kernel(name: str, const: dict, opts: dict) -> dict:
    """Compile one kernel for sm_90a as Triton does for a launch: {'registers', 'spill_bytes', 'shared_bytes',
    'cubin'}. Registers and the stack frame (spills: the kernels make no calls) are read from Triton's own
    cubin, so they are the launched kernel's."""
    fn = KERNELS[name]
    sig, attrs = {}, {}
    for i, arg in enumerate(fn.arg_names):
        if arg in const:
            sig[arg] = "constexpr"
        elif arg.endswith("_desc"):     # the ws kernel's TMA descriptors: S boxes [128, 128], the rest [64, 128]
            sig[arg] = _tensordesc([VC_TILE, KC_TILE] if arg == "s_desc" else [BB_TILE, KC_TILE if arg in (
                "q_desc", "k_desc", "khat_desc") else VC_TILE])
        elif isinstance(_ARGS.get(arg, "i32"), tuple):
            sig[arg] = _ARGS[arg]
            for j in range(len(_ARGS[arg])):
                if (arg, j) not in _NOT_DIV16:
                    attrs[(i, j)] = [["tt.divisibility", 16]]
        else:
            sig[arg] = _ARGS.get(arg, "i32")
            if (arg,) not in _NOT_DIV16:
                attrs[(i,)] = [["tt.divisibility", 16]]
    options = {k: v for k, v in opts.items() if k in ("num_warps", "num_stages", "maxnreg")}
    source = GluonASTSource if getattr(fn, "is_gluon", lambda: False)() else ASTSource
    ck = triton.compile(source(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32), options=options)
    cubin = ck.asm["cubin"]
    usage = _cuobjdump(cubin, "--dump-resource-usage")
    return {"registers": int(re.search(r"REG:(\d+)", usage).group(1)),
            "spill_bytes": int(re.search(r"STACK:(\d+)", usage).group(1)),
            "shared_bytes": ck.metadata.shared, "cubin": cubin}


def async_waits(sass: str) -> list[int]:
    """The cp.async waits in a kernel's SASS (`DEPBAR.LE SB0, n`), in code order: each lets n copy groups stay in
    flight, so a wait of 0 inside a loop makes every iteration wait for all the loads it and earlier ones issued."""
    return [int(n, 16) for n in _WAIT.findall(sass)]


def issue_order(sass: str) -> str:
    """A kernel's instruction classes in issue order, from its SASS, run-length encoded ('LDG x8 | F2F x24 | ...')."""
    runs: list[list] = []
    for m in _ORDER.finditer(sass):
        op = m.group(1)
        if runs and runs[-1][0] == op:
            runs[-1][1] += 1
        else:
            runs.append([op, 1])
    return " | ".join(f"{op} x{n}" for op, n in runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--geometry", default="qwen3_5_0_8b", choices=sorted(GEOMETRIES))
    ap.add_argument("--R", type=int, default=4)
    ap.add_argument("--W", type=int, default=512)
    ap.add_argument("--O", type=int, default=7, help="output tokens: steps 0..O-2 are compiled")
    ap.add_argument("--config", type=launch_config_arg, default={},
                    help=f"launch config overrides (JSON; keys {', '.join(CONFIG_KEYS)})")
    ap.add_argument("--steps", type=int, nargs="*", help="only these steps (default: all)")
    ap.add_argument("--order", action="store_true", help="also print each kernel's instruction order")
    args = ap.parse_args(argv)
    for name, value, low in (("--R", args.R, 1), ("--W", args.W, 1), ("--O", args.O, 2)):
        if value < low:
            ap.error(f"{name} must be >= {low}, got {value}")
    steps = args.steps if args.steps is not None else list(range(args.O - 1))
    bad = [t for t in steps if not 0 <= t <= args.O - 2]
    if bad:
        ap.error(f"--steps {bad} out of range 0..{args.O - 2} (--O {args.O})")
    if os.environ.get("TRITON_INTERPRET") == "1":   # the interpreter replaced the @triton.jit kernels: recompile
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}     # in a process without it
        cmd = [sys.executable, "-m", "tools.compile_report", *(sys.argv[1:] if argv is None else argv)]
        return subprocess.run(cmd, env=env).returncode
    geo = get_geometry(args.geometry)
    cfg = {**launch_config(geo.k, geo.v, args.W, args.R, geo.hv, G=geo.group), **args.config}
    print(f"{args.geometry} R={args.R} W={args.W} O={args.O} sm_90a; config overrides {args.config or 'none'}")
    ws_ok = ws_shape_supports(geo, args.W) is None      # the shape's part; inputs are taken as contiguous
    for t in steps:
        for name, (grid, const, opts) in step_launches(cfg, geo, args.R, args.W, t, interpret=False,
                                                       ws_ok=ws_ok).items():
            rep = compile_kernel(name, const, opts)
            print(f"step {t} {name:5s} grid {grid}: {rep['registers']} registers, {rep['spill_bytes']} bytes "
                  f"spilled, {rep['shared_bytes']} bytes shared", flush=True)
            if args.order:
                sass = _cuobjdump(rep["cubin"], "-sass")
                print("  " + issue_order(sass), flush=True)
                waits = async_waits(sass)
                if waits:
                    print(f"  cp.async waits (groups left in flight): {', '.join(map(str, waits))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
