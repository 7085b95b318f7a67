"""The OneLA stepper (one GDN layer's decode state and its per-step launches) and the `onela` path.

State: the shared post-prefill S_ctx, the append-only `GtrStore` and an [R, W, T] ancestry index in two
ping-pong tables (step t reads table (t - 1) % 2 and writes table t % 2), plus a per-step coefficient
workspace the prep kernel writes and the main kernels read. Per step: the warp-specialised kernel where it
applies, else the Triton prep and main kernels (`kernels.onela.plan`). What grows with the depth -- the store, the
ancestry tables, the coefficient table -- is allocated for the decode's T steps; the kernels' registers and shared
memory do not grow with it.
"""
from __future__ import annotations

import torch

from artifact.cost import BF16, ProjectionReplay
from artifact.gtr import GtrStore
from artifact.paths import Stepper, StepperPath
from kernels.checks import check_reset, check_step, kernel_supports
from kernels.onela.plan import RECORDS_FROM_STEP, config_error, launch_config, shape_supports, step_launches
from kernels.onela.tree import TreeState
from kernels.onela.triton_kernels import onela_main_kernel, onela_prep_kernel, onela_prep_pipe_kernel
from kernels.onela.ws import launch_ws, ws_layout_supports, ws_shape_supports


class OneLAStepper(Stepper):
    """Shared S_ctx + append-only GtrStore + [R, W, T] ancestry (two ping-pong tables); per step the
    warp-specialised kernel where it applies, else two Triton launches (key-axis prep, then the shared-context
    main kernel), and a small per-step coefficient workspace. `config` overrides keys of `launch_config`
    (`kernels.onela.plan.CONFIG_KEYS`: tiles, pdl, ws) -- for tests and tools; the default is the adopted
    plan."""

    def __init__(self, geometry, R, W, T, device, config: dict | None = None, check_parents: bool = True):
        super().__init__(geometry, R, W, T, device)
        self.check_parents = check_parents
        reason = kernel_supports("onela", geometry, self.device) or \
            shape_supports(T, R, W, geometry.hv, self.device.type == "cuda")
        if reason:
            raise ValueError(reason)
        reason = config_error(config or {})
        if reason:
            raise ValueError(f"onela: {reason}")
        self.store = GtrStore(geometry, R, W, T, device=device)
        self.anc = torch.zeros(2, R, W, T, dtype=torch.int32, device=device)
        on_gpu = self.device.type == "cuda"
        props = torch.cuda.get_device_properties(self.device) if on_gpu else None
        self.n_sm = props.multi_processor_count if on_gpu else 132
        pdl_ok = props is None or props.major >= 9          # griddepcontrol needs sm_90
        default = launch_config(geometry.k, geometry.v, W, R, geometry.hv, self.n_sm, geometry.group, pdl_ok)
        self.config = {**default, **(config or {})}                                   # tiles, fixed per decode
        bv, bk = self.config["BV"], self.config["BK"]
        if geometry.v % bv or geometry.k % bk:
            raise ValueError(f"onela: tiles BV={bv}, BK={bk} must divide V={geometry.v}, K={geometry.k}")
        self.coef = torch.zeros(3 + 2 * T, R, geometry.hv, W, dtype=torch.float32, device=device)
        self.tree = None
        if self.config["tree"] and T > RECORDS_FROM_STEP:
            self.tree = TreeState(geometry, R, W, T, device)
        # the shape and device part of whether the ws kernel runs, fixed per decode; each step checks its inputs
        self.ws_shape_ok = bool(self.config["ws"]) and ws_shape_supports(geometry, W, self.device) is None
        self.s_bf16 = None              # S_ctx's bf16 rounding, made at reset where the ws kernel runs
        self.kernel_info: dict = {}     # kernel name -> (registers, spilled 4-byte registers) of its last compile

    def _note_kernel(self, name, kern):
        if getattr(kern, "n_regs", None) is not None:      # None under the interpreter
            self.kernel_info[name] = (kern.n_regs, kern.n_spills)

    def reset(self, s_ctx, tail=None):
        self.s_ctx = check_reset(self, s_ctx, tail)
        if self.ws_shape_ok:    # the warp-specialised kernel loads S's bf16 rounding by TMA
            # written into the same buffer at every later reset: a captured step keeps reading it
            if self.s_bf16 is None:
                self.s_bf16 = self.s_ctx.to(torch.bfloat16)
            else:
                self.s_bf16.copy_(self.s_ctx)

    def step(self, t, q, k, v, g, beta, parents, out):
        geo, R, W = self.geometry, self.R, self.W
        check_step(self, t, q, k, v, g, beta, parents, out, self.check_parents)
        anc_prev, anc_cur = self.anc[(t - 1) % 2], self.anc[t % 2]
        ws_ok = self.ws_shape_ok and ws_layout_supports(W, q, k, v, out) is None   # else the Triton kernels
        launches = step_launches(self.config, geo, R, W, t, q.dtype == torch.bfloat16, ws_ok=ws_ok, n_sm=self.n_sm)
        store = self.store
        prep_args = (q, k, g, parents, anc_prev, anc_cur, store.alpha, store.khat, self.coef,
                     R, W, geo.hv, geo.hk, self.T, (q.stride(0), q.stride(1), q.stride(2)))
        if "prep" in launches:      # not at step 0 in one launch
            grid, const, opts = launches["prep"]
            self._note_kernel("prep", onela_prep_kernel[grid](*prep_args, **const, **opts))
        elif "prep_pipe" in launches:
            grid, const, opts = launches["prep_pipe"]
            self._note_kernel("prep_pipe", onela_prep_pipe_kernel[grid](*prep_args, t, **const, **opts))
        if "tree_lists" in launches:
            self.tree.launch(self, t, launches, (q, k, v, g, beta, parents), out)
            return out
        if "ws" in launches:
            kern = launch_ws(self, q, k, v, g, beta, parents, anc_prev, anc_cur, out, *launches["ws"])
            self._note_kernel("ws_step" if launches["ws"][1]["FUSE"] else "ws_main", kern)
            return out
        grid, const, opts = launches["main"]
        kern = onela_main_kernel[grid](
            (q, k, v, g, beta), self.s_ctx, anc_cur, self.coef, (store.alpha, store.khat, store.delta), out,
            R, W, geo.hv, geo.hk, self.T, (q.stride(0), q.stride(1), q.stride(2)),
            (v.stride(0), v.stride(1), v.stride(2)), **const, **opts)
        self._note_kernel("main", kern)
        return out

    def persistent_bytes(self):
        """S_ctx (with the ws kernel also its bf16 rounding, which that kernel reads) + GTR store + ancestry. The
        coefficient workspace (3 + 2T fp32 per beam and value head, 1.9 MiB at R=4 W=512 O=7) is rewritten every
        step, scratch rather than recurrent state, and not counted."""
        geo = self.geometry
        s_copy = self.s_bf16.numel() * 2 if self.s_bf16 is not None else 0
        tree = self.tree.persistent_bytes() if self.tree is not None else 0
        return self.R * geo.hv * geo.v * geo.k * 4 + s_copy + self.store.nbytes + self.anc.numel() * 4 + tree

    def written_bytes(self):
        """Recurrent-state bytes stored: every GTR once (the int32 ancestry rows, 0.12 MiB at R=4 W=512 O=7,
        are index metadata and counted in persistent_bytes, not here -- as the paper counts state writes), and on the
        record-major route each record's cumulative gate (4 bytes per record and value head)."""
        return self.store.nbytes + (self.tree.gcum.numel() * 4 if self.tree is not None else 0)


class OneLAPath(StepperPath):
    """The fused shared-context OneLA kernels over all T steps (one or two launches per step, graph-capturable)."""

    name = "onela"
    stepper_cls = OneLAStepper
    algorithm = ProjectionReplay(rate=BF16)     # the S_ctx projections run as bf16 MMAs
    keeps_ancestry = True

    def supports(self, geometry, shape, device):
        return kernel_supports("onela", geometry, device) or \
            shape_supports(shape.T, shape.R, shape.W, geometry.hv, torch.device(device).type == "cuda")
