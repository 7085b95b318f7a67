"""Which kernels one OneLA decode step launches, with which tiles: one place for the stepper and `tools.compile_report`.

`launch_config` holds only adopted choices, each a function of the inputs (head sizes, beam width, grid size,
GPU); `step_launches` turns it into step t's launches. Why each choice: kernels/NOTES.md ("Triton kernels",
"Warp-specialised kernel").
"""
from __future__ import annotations

import os

import triton

from artifact.limits import CUDA_GRID_YZ_MAX
from kernels.onela.tree_ws import TREE_WS_BEAMS, tree_ws_launch_params, tree_ws_supports
from kernels.onela.ws import WS_HEAD_DIMS, WS_VALUE_DIMS, ws_fuses_step, ws_launch_params, ws_runs_step

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Tuning constants of the Triton kernels (kernels/NOTES.md, "Triton kernels"):
_WARPS = 4               # main kernel
_PREP_BEAMS = 16         # prep kernel's beam tile: wider tiles spill its [BB, K] k-hat rows at K = 256
_PREP_WARPS = 4
_MAX_BEAM_ITERS = 8      # beam tiles one main-kernel program runs, at most

# The one-tile prep kernel unrolls step x group depth columns (`onela_prep_kernel`) and holds every depth in one
# [BB, TP] tile: its code and compile time grow with step x group, its registers with TP (sm_90a compiles of one
# step at K = 128: 1.4 s at step 8; 4.6 s and no spill at step 16 (TP 16); 7.7 s and a 104-byte spill at step 20
# (TP 32); 18.5 s at step 31; 8.6 s at step 8 of an 8-head group). Past step _PREP_UNROLL_STEPS or past
# _PREP_UNROLL_MAX columns it is never launched (`prep_is_deep`): the pipelined kernel takes those steps, one
# compile for every deep step.
_PREP_UNROLL_STEPS = 16
_PREP_UNROLL_MAX = 20
# The pipelined prep kernel (`onela_prep_pipe_kernel`): beam tiles of _PIPE_BEAMS at K <= 128 and _PIPE_BEAMS x 128 / KP
# above (its q, k rows take registers in proportion to K), the depths a software-pipelined loop of _PIPE_STAGES
# stages (each depth's gathers in flight while earlier depths are consumed; its k-hat rows wait in shared memory,
# not in registers), at most _PIPE_MAXNREG registers: 4 programs of 4 warps per SM. sm_90a spills 16 bytes outside
# the loop (64 bytes, 6 local loads per depth, at G = 2). It takes every step from _PIPE_FROM_STEP on (past the
# warp-specialised one-launch kernel's deepest step) and the steps `prep_is_deep` keeps from the one-tile kernel;
# shallower steps keep the one-tile kernel.
_PIPE_BEAMS = 32
_PIPE_WARPS = 4
_PIPE_STAGES = 5
_PIPE_MAXNREG = 128
_PIPE_FROM_STEP = 8
# The record-major route (`kernels/onela/tree.py`) takes every step from RECORDS_FROM_STEP on where
# `tree_route_supports` says yes: two launches, the tree order with the record lists and the per-beam records,
# then the step kernel (_TREE_BEAMS positions a tile, up to _TREE_MAX_ITERS tiles a program sharing its S tile,
# _TREE_CH records a chunk, _TREE_STAGES chunks in flight). _TREE_DEPTHS: depths per chunk of the lists kernel's
# loops.
RECORDS_FROM_STEP = 7
_TREE_BEAMS = 16
_TREE_CH = 32
_TREE_WARPS = 4
_TREE_WS_LIST_WARPS = 8   # the lists kernel at tree_ws's 32-position tiles (no spill at the first step, 64 regs)
_TREE_STAGES = 3
_TREE_DEPTHS = 32
_TREE_MAX_ITERS = 8
_TREE_MAX_W = 4096
# The depth of a decode is limited only by int32 offsets: the kernels index the coefficient table, (3 + 2T) R HV W
# fp32 entries, in int32, and its entries outnumber the record rows (T R HV W) and ancestry entries (R W T).
_INT32_MAX = 2**31 - 1


# The main kernel's grid is (value tiles, beam tiles, request x value head), the prep kernels' (beam tiles of 8-32,
# request x key head), both within CUDA_GRID_YZ_MAX on y and z; the ws kernel's is one axis of at most the SMs.
def shape_supports(T: int, R: int = 1, W: int = 1, HV: int = 1, on_gpu: bool = True) -> str | None:
    """Why the kernels cannot run a T-step decode of R requests, W beams, HV value heads (None: they can): T < 1,
    a coefficient table past int32 offsets, or, on a GPU, a launch grid past CUDA's y / z extent (R x HV request
    heads, or more beam tiles of 64 than that). The kernels' registers and shared memory do not grow with T."""
    if T < 1:
        return f"onela: T={T} decode steps unsupported (at least 1)"
    if (3 + 2 * T) * R * HV * W > _INT32_MAX:
        return (f"onela: T={T} decode steps unsupported at R={R}, W={W}, HV={HV}: the coefficient table's "
                f"(3 + 2T) * R * HV * W = {(3 + 2 * T) * R * HV * W} entries exceed int32 offsets ({_INT32_MAX})")
    if on_gpu and R * HV > CUDA_GRID_YZ_MAX:
        return (f"onela: R={R} x HV={HV} = {R * HV} request heads unsupported: the main kernel's grid takes them "
                f"on CUDA's z axis, at most {CUDA_GRID_YZ_MAX} (split the batch)")
    if on_gpu and triton.cdiv(W, 64) > CUDA_GRID_YZ_MAX:
        return (f"onela: W={W} beams unsupported: {triton.cdiv(W, 64)} beam tiles of 64 on the main kernel's grid "
                f"y axis, at most {CUDA_GRID_YZ_MAX} (W <= {64 * CUDA_GRID_YZ_MAX})")
    return None


# The keys a caller may set (tests, tools): the tiles of the same kernels on small shapes, programmatic
# dependent launch off, or the Triton kernels where the warp-specialised one would run.
CONFIG_KEYS = ("BB", "BV", "BK", "beam_iters", "pdl", "ws", "tree")


def config_error(config: dict) -> str | None:
    """Why `config` is no launch config override (None: it is one): the keys outside CONFIG_KEYS, named."""
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        return f"unknown launch config key(s) {unknown}; known: {', '.join(CONFIG_KEYS)}"
    return None


def launch_config(K: int, V: int, W: int, R: int = 1, HV: int = 1, n_sm: int = 132, G: int = 1,
                  pdl_ok: bool = True) -> dict:
    """Tiles and kernel choices of a decode shape.

    BB (beams per tile) 64, or W rounded up to a power of two >= 16 when W < 64. BV (value columns per
    program) 128 at K <= 128, 64 at K > 128 (or the largest power of two dividing V below that). The projection
    is one [BV, K] S tile where K is a power of two <= 128, else K-chunks of BK = 64 (one [BV, 256] S tile would
    not fit the registers; a K that is no power of two, in chunks of the largest power of two dividing it). beam_iters: with one S tile per program (BK == K), each program runs the
    most beam tiles (up to 8, never more than W / BB) that still leave about two programs per SM, reusing its
    split S tile. pdl (programmatic dependent launch, Hopper only: `pdl_ok`): 2 waits for the previous launch
    after the S tile's load and split when a program runs several beam tiles, 1 after the first tile's
    projections otherwise; 0 launches plainly. s_lo: the u_q projection also takes S's bf16 lo plane at K > 128
    ("q"); at K <= 128 both projections take S rounded to bf16 ("none"); both stay within the error bound
    (docs/design.md §2). fuse_step0: step 0 is one main-kernel launch where the S tile spans K and a key head
    has at most two value heads. ws: the warp-specialised kernel where K is one of its WS_HEAD_DIMS (128, 256) and
    V one of its WS_VALUE_DIMS (128, 256, 512) (it also needs Hopper, W a multiple of 64 and bf16 row inputs:
    checked per decode and per step). tree: the record-major route from step RECORDS_FROM_STEP on
    (`tree_route_supports`)."""
    bb = 64 if W >= 64 else max(16, triton.next_power_of_2(W))
    bv = _largest_pow2_dividing(V, 128 if K <= 128 else 64)
    bk = K if K <= 128 and K == triton.next_power_of_2(K) else _largest_pow2_dividing(K, 64)
    tiles = R * HV * triton.cdiv(W, bb) * (V // bv)
    iters = _tiles_per_program(tiles, min(_MAX_BEAM_ITERS, triton.cdiv(W, bb)) if bk == K else 1, n_sm)
    return {"BB": bb, "BV": bv, "BK": bk, "beam_iters": iters, "pdl": (2 if iters > 1 else 1) if pdl_ok else 0,
            "s_lo": "none" if K <= 128 else "q", "fuse_step0": bk == K and G <= 2,
            "ws": K in WS_HEAD_DIMS and V in WS_VALUE_DIMS,
            "tree": tree_route_supports(K, V, W)}


def _largest_pow2_dividing(n: int, cap: int) -> int:
    """The largest power of two <= cap that divides n (n a multiple of 16: at least 16)."""
    p = cap
    while n % p:
        p //= 2
    return p


def step_launches(cfg: dict, geo, R: int, W: int, t: int, qk_bf16: bool = True, interpret: bool = _INTERPRET,
                  ws_ok: bool = False, n_sm: int = 132) -> dict:
    """Kernel name -> (grid, constexpr arguments, launch options) of step t under launch config `cfg`: "prep" and
    "main" (the Triton kernels; step 0 "main" alone under fuse_step0), or where `ws_ok` (the warp-specialised
    kernel takes this shape and these inputs) "ws" -- alone when it does the whole step, after "prep" otherwise;
    from RECORDS_FROM_STEP on where cfg["tree"], "tree_lists" and "tree_step" (`kernels/onela/tree.py`), or
    "tree_ws" in its place where `ws_ok` and `tree_ws_supports` (`kernels/onela/tree_ws.py`).
    Steps `ws_runs_step` leaves out (past step 31; at K = 128 past step 5 after the prep kernel) run the Triton
    kernels. The prep launch is "prep" (the one-tile kernel), or "prep_pipe" (the pipelined kernel, the step a
    run-time argument) from step _PIPE_FROM_STEP on and where `prep_is_deep`."""
    pdl = 0 if interpret else int(cfg["pdl"])     # the interpreter runs no inline PTX (griddepcontrol)
    gluon_ok = ws_ok and cfg["ws"] and not interpret      # the warp-specialised kernels; the interpreter runs no Gluon
    if cfg["tree"] and t >= RECORDS_FROM_STEP:
        return _tree_launches(geo, R, W, t, qk_bf16, pdl, interpret, n_sm, gluon_ok and tree_ws_supports(geo, W))
    if gluon_ok and ws_runs_step(geo, t):
        fuse = ws_fuses_step(geo, t)
        grid, const, opts = ws_launch_params(geo, R, W, t, fuse, n_sm)
        ws = {"ws": (grid, const, {**opts, "launch_pdl": bool(pdl)})}
        return ws if fuse else {**_prep_launch(geo, R, W, t, pdl, interpret), **ws}
    iters = cfg["beam_iters"]
    key_axis = bool(cfg["fuse_step0"]) and t == 0 and cfg["BK"] == geo.k     # step 0 in one launch
    main = ((geo.v // cfg["BV"], triton.cdiv(W, cfg["BB"] * iters), R * geo.hv),
            dict(K=geo.k, V=geo.v, G=geo.group, STEP=t, BB=cfg["BB"], BV=cfg["BV"], BK=cfg["BK"], BEAM_ITERS=iters,
                 QK_BF16=qk_bf16, UPCAST=interpret, PDL=pdl, S_LO=int(cfg["s_lo"] == "q"), KEY_AXIS=key_axis),
            {"num_warps": _WARPS, "num_stages": 1, "launch_pdl": bool(pdl)})
    return {"main": main} if key_axis else {**_prep_launch(geo, R, W, t, pdl, interpret), "main": main}


def tree_route_supports(K: int, V: int, W: int) -> bool:
    """Whether the record-major route takes a decode's steps from RECORDS_FROM_STEP on: K and V powers of two up
    to 128 (one [_TREE_BEAMS, V] accumulator per projection, the S tile over all of K), W a multiple of its tile
    and at most _TREE_MAX_W (one program sorts a request's W beams; compiled for sm_90a to 4,096, where the
    first step's lists kernel spills 16 bytes at 16-position tiles and none at the warp-specialised step kernel's
    32 on 8 warps); other shapes keep the depth loop at every step."""
    pow2 = lambda x: x & (x - 1) == 0       # noqa: E731
    return K <= 128 and V <= 128 and pow2(K) and pow2(V) and W % _TREE_BEAMS == 0 and W <= _TREE_MAX_W


def _tree_launches(geo, R: int, W: int, t: int, qk_bf16: bool, pdl: int, interpret: bool, n_sm: int,
                   ws: bool) -> dict:
    """Step t's record-major launches: "tree_lists", then "tree_ws" where `ws` (the warp-specialised step kernel,
    `kernels/onela/tree_ws.py`, on tiles of TREE_WS_BEAMS positions) else "tree_step" (the Triton step kernel,
    each tile loop as long as about two programs per SM remain, as the main kernel's beam_iters), all with
    programmatic dependent launch where `pdl`."""
    first = t == RECORDS_FROM_STEP
    bb = TREE_WS_BEAMS if ws else _TREE_BEAMS
    wp = triton.next_power_of_2(W)
    lb = max(1, wp.bit_length() - 1)
    tf = min(_TREE_DEPTHS, triton.next_power_of_2(t)) if first else 1
    lists = ((R * W // bb, 1 + geo.hv if first else 1),      # first: a program per value head's gates
             dict(WP=wp, BB=bb, TC=_TREE_DEPTHS, TF=tf,
                  HVP=triton.next_power_of_2(geo.hv), FIRST=first, LB=lb, NC=(62 - lb) // lb, PDL=int(bool(pdl))),
             {"num_warps": _TREE_WS_LIST_WARPS if ws else _TREE_WARPS, "launch_pdl": bool(pdl)})
    tiles = W // bb
    most = min(_TREE_MAX_ITERS, tiles & -tiles)       # a power of two that divides a request's tiles
    if ws:      # one program an SM: its shared memory
        grid, const, opts = tree_ws_launch_params(geo, R, W, _tiles_per_program(R * geo.hv * tiles, most, n_sm, 1))
        return {"tree_lists": lists, "tree_ws": (grid, const, {**opts, "launch_pdl": bool(pdl)})}
    iters = _tiles_per_program(R * geo.hv * tiles, most, n_sm)
    step = ((tiles // iters, R * geo.hv),
            dict(K=geo.k, V=geo.v, G=geo.group, BB=_TREE_BEAMS, CH=_TREE_CH, ITERS=iters,
                 STAGES=0 if interpret else _TREE_STAGES, QK_BF16=qk_bf16, UPCAST=interpret, PDL=int(bool(pdl))),
            {"num_warps": _TREE_WARPS, "launch_pdl": bool(pdl)})
    return {"tree_lists": lists, "tree_step": step}


def _pipe_beams(kp: int) -> int:
    """The beam tile of the deep-step prep kernels (pipelined and record-major): _PIPE_BEAMS at K <= 128, fewer
    above (their q, k rows take registers in proportion to K)."""
    return _PIPE_BEAMS * 128 // max(kp, 128)


def _tiles_per_program(tiles: int, most: int, n_sm: int, per_sm: int = 2) -> int:
    """Beam tiles one program runs, sharing its S tile: the largest power of two up to `most` that still leaves
    about `per_sm` programs per SM of the `tiles` in the grid."""
    iters = 1
    while iters < most and tiles / (2 * iters) >= 0.9 * per_sm * n_sm:
        iters *= 2
    return iters


def prep_is_deep(t: int, G: int) -> bool:
    """Whether step t at a group of G value heads outgrows the one-tile prep kernel's unrolling (see
    _PREP_UNROLL_STEPS): the pipelined kernel runs such a step whatever _PIPE_FROM_STEP is."""
    return t > _PREP_UNROLL_STEPS or t * G > _PREP_UNROLL_MAX


def _prep_launch(geo, R: int, W: int, t: int, pdl: int, interpret: bool) -> dict:
    """{"prep": ...} (every depth one column of a [BB, TP] tile, TP the power of two >= t) or {"prep_pipe": ...}
    (the depths a pipelined loop; the step is passed at launch; the interpreter runs the plain loop)."""
    kp = triton.next_power_of_2(geo.k)
    const = dict(K=geo.k, KP=kp, G=geo.group, BB=_PREP_BEAMS, PDL=pdl)
    opts = {"num_warps": _PREP_WARPS, "launch_pdl": bool(pdl)}
    if t >= _PIPE_FROM_STEP or prep_is_deep(t, geo.group):
        bb = _pipe_beams(kp)
        pipe = {**const, "BB": bb, "GP": triton.next_power_of_2(geo.group),
                "STAGES": 0 if interpret else _PIPE_STAGES}
        return {"prep_pipe": ((triton.cdiv(W, bb), R * geo.hk), pipe,
                              {**opts, "num_warps": _PIPE_WARPS, "maxnreg": _PIPE_MAXNREG})}
    grid = (triton.cdiv(W, _PREP_BEAMS), R * geo.hk)
    return {"prep": (grid, {**const, "STEP": t, "TP": max(2, triton.next_power_of_2(t))}, opts)}
