"""fla FullState: one fp32 recurrent state per live beam, updated by flash-linear-attention's recurrent kernel.

Kernel: `fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule` from fla-core==0.6.0 (a dependency of this
project, imported as installed), unmodified: the fused recurrent GDN kernel that vLLM's, SGLang's and TensorRT-LLM's
decode kernels descend from, and the kernel transformers' Gated DeltaNet layers call when fla is installed. Called
with the workload's log-space g and post-sigmoid beta (use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False),
scale = K^-0.5, use_qk_l2norm_in_kernel=True (its norm is x / sqrt(sum x^2 + 1e-6), as docs/design.md §1),
state_v_first=True (fla's [N, HV, V, K] state layout, the suite's; the default [K, V] layout would need a
transpose of every state), initial_state = N = R·W states and output_final_state=True. One token per sequence:
q, k [N, 1, HK, K], v [N, 1, HV, V] (fla's GVA: value head hv reads key head hv // (HV / HK), the suite's GQA).

What the kernel takes: no state index and no in-place update. It reads `initial_state[n]` for sequence n and
writes every sequence's final state into a tensor it allocates itself (`final_state`, [N, HV, V, K] fp32). So a
child reaches its parent's state only through a gather before the kernel, in both modes, as in transformers'
`generate(num_beams=W)` with fla, whose cache reorder is `recurrent_states.index_select(0, beam_idx)` and whose
layer keeps the kernel's `final_state` as the new cache state.

Beams onto state rows: sequence n = r·W + b is beam b of request r. Per step t the adapter gathers into a
preallocated buffer of N states (`torch.index_select`, no allocation): at t = 0 request r's s_ctx into each of its
beams' rows (the kernel needs one initial state per sequence), at t >= 1 each beam's parent's state from the
kernel's output of step t - 1. The kernel then reads that buffer and writes all N updated states into its own
output, which the stepper keeps for the next step's gather; it drops its reference to the previous output before
the kernel runs, so the caching allocator can hand that memory to the new output (inside a CUDA graph capture too:
the graph's pool reuses a block freed earlier in the same capture, on the same stream). One gather, one extra
state read + write per beam, every step including t = 0.

Index mode (`fla_fullstate`): the gather buffer and the kernel's output are the two pools that alternate, the
gather reading one and writing the other, as SGLang's and TRT-LLM's index modes gather from one pool into the
other (docs/methods.md §4); capacity 2·R·W states, reported as allocated. Paper mode (`fla_fullstate_paper`,
`paper = True`): the paper's FullState as transformers + fla runs it: one persistent pool of R·W states bound to
beams (the kernel's output, row n = beam n), and at every step an explicit reorder into a transient workspace of
R·W states (the gather buffer), which no later step reads; `persistent_bytes` is the pool, `workspace_bytes` the
workspace. The kernel's interface leaves nothing to choose between the modes, so they run the same passes and
differ only in how the gather buffer is counted.

Supported: every suite geometry (HV a multiple of HK, any K and V: the kernel holds a next_pow2(K) x BV state tile
per program, BV = min(8, next_pow2(V))); the launch grid is 1-D, ceil(V/BV)·N·HV programs (limit 2^31 - 1). Not
supported: a cell whose gather buffer and two kernel outputs (the eager warm-up's, still cached by the allocator,
and the captured graph's) exceed the free GPU memory; a CPU under Triton 3.6's interpreter with numpy >= 2.4
(`interpreter_reason`).
"""
from __future__ import annotations

import importlib
import os

import torch

from artifact.cost import FullState
from artifact.limits import memory_reason
from artifact.paths import Stepper, StepperPath
from baselines import _common

REQUIREMENT = "fla-core==0.6.0"
KERNEL_MODULE = "fla.ops.gated_delta_rule"
KERNEL_FN = "fused_recurrent_gated_delta_rule"
GRID_MAX = 2 ** 31 - 1           # CUDA's limit on gridDim.x, the axis fla puts all its programs on
BV_MAX = 8                       # fla's value tile: min(8, next_pow2(V)) rows of V per program


def kernel():
    """fla's fused recurrent GDN function (raises ImportError naming what is missing)."""
    try:
        mod = importlib.import_module(KERNEL_MODULE)
    except ImportError as e:
        raise ImportError(f"{KERNEL_MODULE} cannot be imported ({type(e).__name__}: {e}); this path needs "
                          f"{REQUIREMENT} and einops (pip install '{REQUIREMENT}' einops)") from e
    return getattr(mod, KERNEL_FN)


def interpreter_reason() -> str | None:
    """Why fla's kernel cannot run under Triton's CPU interpreter here, or None if it can.

    fla's kernel loops `for _ in tl.range(0, T)` over its runtime sequence length; Triton 3.6's interpreter holds
    a scalar argument as a one-element numpy array and turns it into a Python int with int(array), which numpy
    2.4 refuses for an array of one dimension ("only 0-dimensional arrays can be converted to Python scalars").
    Where numpy still converts it, the kernel runs and matches FP32 FullState (tests/test_baselines_fla.py runs
    it with that one conversion supplied)."""
    import numpy as np
    try:
        int(np.ones(1, dtype=np.int64))
    except TypeError as e:
        return (f"fla's fused_recurrent kernel cannot run under Triton's CPU interpreter with numpy "
                f"{np.__version__}: the interpreter converts the kernel's runtime loop bound T "
                f"(`tl.range(0, T)`) with int() of a one-element array, which this numpy refuses ({e}); "
                f"this path is tested on the GPU")
    return None


def fla_reason(device) -> str | None:
    """Why fla's kernel cannot run on `device` (import failure first: it names the missing package)."""
    try:
        kernel()
    except ImportError as e:
        return str(e)
    dev = torch.device(device)
    if dev.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        return interpreter_reason()
    return _common.device_reason(dev, "fla")


class FlaFullStateStepper(Stepper):
    paper = False

    def __init__(self, geometry, R, W, T, device):
        super().__init__(geometry, R, W, T, device)
        self.fn = kernel()
        N, g, dev = R * W, geometry, self.device
        self.N = N
        # the kernel's initial_state: each beam's parent state, gathered every step (the paper mode's workspace)
        self.work = torch.empty(N, g.hv, g.v, g.k, dtype=torch.float32, device=dev)
        self.state = None                # the kernel's output of the last step: beam n's state in row n
        self.request_of_beam = torch.arange(R, device=dev).repeat_interleave(W)      # t = 0 gather source rows
        self.row_base = (torch.arange(R, device=dev) * W)[:, None]                    # [R, 1]
        self.parent_rows = torch.empty(R, W, dtype=torch.int64, device=dev)
        self.scale = g.k ** -0.5

    def reset(self, s_ctx, tail=None):
        if tail is not None:
            raise ValueError("FlaFullStateStepper: a prompt tail is ReplaySSM-only; FullState starts from s_ctx")
        self.s_ctx = s_ctx
        self.state = None                # the previous decode's states are never read again

    def step(self, t, q, k, v, g, beta, parents, out):
        N, geo = self.N, self.geometry
        if t == 0:
            torch.index_select(self.s_ctx, 0, self.request_of_beam, out=self.work)
        else:
            torch.add(parents, self.row_base, out=self.parent_rows)
            torch.index_select(self.state, 0, self.parent_rows.view(N), out=self.work)
        self.state = None                # the gathered parents are in work; the kernel's new output may reuse this
        o, self.state = self.fn(q.reshape(N, 1, geo.hk, geo.k), k.reshape(N, 1, geo.hk, geo.k),
                                v.reshape(N, 1, geo.hv, geo.v), g=g.reshape(N, 1, geo.hv),
                                beta=beta.reshape(N, 1, geo.hv), scale=self.scale, initial_state=self.work,
                                output_final_state=True, use_qk_l2norm_in_kernel=True, state_v_first=True)
        out.copy_(o.view(self.R, self.W, geo.hv, geo.v))
        return out

    def _states_bytes(self) -> int:
        """N fp32 states: the gather buffer, and the kernel's output, which has its shape."""
        return self.work.numel() * self.work.element_size()

    def persistent_bytes(self):
        return (1 if self.paper else 2) * self._states_bytes()

    def workspace_bytes(self):
        return self._states_bytes() if self.paper else 0

    def written_bytes(self):
        """The gather's N states and the kernel's N states, every step (t = 0's gather too)."""
        return 2 * self.T * self._states_bytes()


class FlaFullStatePaperStepper(FlaFullStateStepper):
    paper = True


class FlaFullStatePath(StepperPath):
    name = "fla_fullstate"
    stepper_cls = FlaFullStateStepper
    paper = False
    algorithm = FullState(first_copies=1, copies=1)     # every step gathers the parents' states (s_ctx at step 0)

    def supports(self, geometry, shape, device):
        n = shape.R * shape.W
        bv = min(BV_MAX, 1 << (geometry.v - 1).bit_length())
        programs = -(-geometry.v // bv) * n * geometry.hv
        if programs > GRID_MAX:
            return (f"not natively supported: fla's fused_recurrent grid ceil(V/{bv})*R*W*HV = {programs} > "
                    f"{GRID_MAX}, the CUDA launch-grid limit of axis x")
        return (fla_reason(device)
                # the gather buffer, the kernel's output, and a second output while the eager warm-up's is cached
                or memory_reason(3 * n * geometry.state_bytes, device,
                                 "the FullState gather buffer and fla's two output states"))


class FlaFullStatePaperPath(FlaFullStatePath):
    name = "fla_fullstate_paper"
    stepper_cls = FlaFullStatePaperStepper
    paper = True
