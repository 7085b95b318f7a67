"""vLLM FullState: one fp32 recurrent state per live beam in vLLM's state-pool layout (paper §2.3, §4).

Kernel: `vllm.third_party.flash_linear_attention.ops.fused_recurrent.fused_recurrent_gated_delta_rule`
from the vllm==0.33.0 wheel, unmodified (called with scale = K^-0.5, use_qk_l2norm_in_kernel=True,
inplace_final_state=True, g and beta as given). Its in-kernel norm is x / sqrt(sum x^2 + 1e-6), as docs/design.md §1.
vLLM's own Qwen3.5 decode fast path (`fused_recurrent_gated_delta_rule_packed_decode`) is the same update
with the gates formed from raw a/b and a state read and written in one slot; this kernel takes the
workload's g and beta directly and lets the read and write slots differ.

Slots: vLLM's pool is fp32 [slots, HV, V, K] with slot 0 the null slot (the kernel skips index <= 0). This
path allocates 1 + R + 2·R·W slots: null, R context slots (s_ctx copied in at reset, as prefill would leave
it), and two beam pools A and B that alternate. Beam b of request r at step t reads its initial state from
`ssm_state_indices[n, 1]` and writes its final state to `ssm_state_indices[n, 0]` (the kernel's
spec-decode indexing, num_accepted_tokens = 2): at t = 0 it reads context slot r, later its parent's slot
in the pool written at t-1, and writes its own slot in the other pool.

Beam-state maintenance (index mode, `vllm_fullstate`): none beyond the index arithmetic: each child's state
reaches it through the read index, so no state is copied; every step still reads one parent state and writes
one full state per beam, which is what FullState is. Not natively supported: N·HV > 65535 sequence-heads (the
launch grid puts N·HV on grid z).

Paper mode (`vllm_fullstate_paper`, `paper = True`): the paper's FullState, one persistent pool of
1 + R + R·W slots (null, context, one slot bound to each beam). At t = 0 beam b of request r reads context
slot r and writes its own slot (as vLLM's decode after prefill). At each t >= 1 the step first reorders the
beams' states as vLLM's cache handling would when a beam forks: `torch.index_select` of the parents' slots into
a preallocated transient workspace of R·W states, rows of the same tensor after the pool (the kernel takes a
single state tensor), then the kernel reads each beam's gathered parent state from the workspace and writes
the beam's own slot (fixed indices). One extra state read + write per beam per step t >= 1; no host sync, no
allocation. `workspace_bytes` reports the workspace; `persistent_bytes` the pool only.
"""
from __future__ import annotations

import torch

from artifact.cost import FullState
from artifact.limits import grid_reason, memory_reason
from artifact.paths import Stepper, StepperPath
from baselines import _common, _load

PACK_SPEC = {
    "wheel": "vllm==0.33.0",
    "modules": [
        "vllm.third_party.flash_linear_attention.ops.fused_recurrent",
        "vllm.platforms.cuda",
        "vllm.platforms.cpu",
        "vllm.third_party.pynvml",
    ],
    "follow_lazy": ["vllm.third_party.flash_linear_attention"],
    "stub_packages": ["vllm.third_party.flash_linear_attention.ops"],
    "extension_stubs": ["vllm._C_stable_libtorch"],
    "placeholders": ["regex", "psutil", "amdsmi"],
    "deps": ["packaging==26.4"],
}
KERNEL_MODULE = "vllm.third_party.flash_linear_attention.ops.fused_recurrent"


def kernel():
    return _load.load(PACK_SPEC, KERNEL_MODULE).fused_recurrent_gated_delta_rule


def vllm_reason(geometry, shape, device) -> str | None:
    """Why vLLM's fla kernels cannot run a cell (shared with vllm_prefix_replay); import failure first."""
    why = _load.unavailable_reason(PACK_SPEC, [KERNEL_MODULE])
    if why:
        return why
    from vllm.triton_utils import HAS_TRITON
    cpu = _common.FLA_ALIAS_CPU_REASON.format(fw="vLLM")
    if not HAS_TRITON:
        cpu = ("vLLM disables Triton without an active GPU driver (vllm.triton_utils.HAS_TRITON is False), "
               "so its kernels cannot run under the CPU interpreter; this path is tested on the GPU")
    return _common.device_reason(device, "vLLM", cpu)


class VllmFullStateStepper(Stepper):
    paper = False

    def __init__(self, geometry, R, W, T, device):
        super().__init__(geometry, R, W, T, device)
        self.fn = kernel()
        N, g = R * W, geometry
        self.ctx0, self.pool0 = 1, 1 + R
        n_beam = (1 if self.paper else 2) * N
        _common.slot_pool_with_workspace(self, 1 + R + n_beam, N if self.paper and T > 1 else 0, g)
        beam = torch.arange(N, dtype=torch.int32, device=self.device)
        self.ctx_read = (self.ctx0 + torch.arange(R, dtype=torch.int32, device=self.device)
                         ).repeat_interleave(W)
        # [pool, n, (write, read)]: write slots are fixed per pool; read slots are set each step
        self.idx = torch.empty(2, N, 2, dtype=torch.int32, device=self.device)
        self.idx[0, :, 0] = self.pool0 + beam
        self.idx[1, :, 0] = self.pool0 + (0 if self.paper else N) + beam
        self.row_base = (torch.arange(R, dtype=torch.int32, device=self.device) * W)[:, None]   # [R, 1]
        if self.paper:      # fixed indices: t = 0 reads the context slot, later steps the beam's workspace row
            self.idx[0, :, 1] = self.ctx_read
            self.idx[1, :, 1] = self.ws0 + beam
            if T > 1:
                self.parent_rows = torch.empty(R, W, dtype=torch.int64, device=self.device)
                self.row_base64 = self.row_base.long() + self.pool0
        self.accepted = torch.full((N,), 2, dtype=torch.int32, device=self.device)
        self.scale = g.k ** -0.5

    def reset(self, s_ctx, tail=None):
        if tail is not None:
            raise ValueError("VllmFullStateStepper: a prompt tail is ReplaySSM-only; FullState starts from s_ctx")
        self.pool[self.ctx0:self.ctx0 + self.R].copy_(s_ctx)

    def step(self, t, q, k, v, g, beta, parents, out):
        R, W, N, geo = self.R, self.W, self.R * self.W, self.geometry
        idx = self.idx[min(t, 1) if self.paper else t % 2]
        if self.paper:
            if t > 0:
                _common.reorder_beam_slots(self, parents)
        elif t == 0:
            idx[:, 1].copy_(self.ctx_read)
        else:   # parent's slot in the pool written at step t-1
            prev_base = self.pool0 + ((t - 1) % 2) * N
            torch.add(parents.to(torch.int32) + self.row_base, prev_base, out=idx[:, 1].view(R, W))
        o, _ = self.fn(q.reshape(N, 1, geo.hk, geo.k), k.reshape(N, 1, geo.hk, geo.k),
                       v.reshape(N, 1, geo.hv, geo.v), g.reshape(N, 1, geo.hv), beta.reshape(N, 1, geo.hv),
                       scale=self.scale, initial_state=self.pool, inplace_final_state=True,
                       ssm_state_indices=idx, num_accepted_tokens=self.accepted, use_qk_l2norm_in_kernel=True)
        out.copy_(o.view(R, W, geo.hv, geo.v))
        return out

    def persistent_bytes(self):
        return self.slots.numel() * self.slots.element_size()

    def written_bytes(self):
        return _common.slot_pool_written_bytes(self)


class VllmFullStatePaperStepper(VllmFullStateStepper):
    paper = True


class VllmFullStatePath(StepperPath):
    name = "vllm_fullstate"
    stepper_cls = VllmFullStateStepper
    paper = False
    algorithm = FullState()
    pool_what = "the two-pool FullState state pool"

    def supports(self, geometry, shape, device):
        n = shape.R * shape.W
        return (vllm_reason(geometry, shape, device)
                or grid_reason(n * geometry.hv, "R*W*HV sequence-heads of fused_recurrent_gated_delta_rule")
                # index mode: two beam pools; paper mode: one pool and a workspace of the same size
                or memory_reason((1 + shape.R + 2 * n) * geometry.state_bytes, device, self.pool_what))


class VllmFullStatePaperPath(VllmFullStatePath):
    name = "vllm_fullstate_paper"
    stepper_cls = VllmFullStatePaperStepper
    paper = True
    algorithm = FullState(first_copies=0, copies=1)     # the reorder copy from step 1; step 0 reads the context slot
    pool_what = "the FullState pool and its reorder workspace"
