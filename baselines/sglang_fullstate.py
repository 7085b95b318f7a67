"""SGLang FullState: one fp32 recurrent state per live beam, updated in place by SGLang's decode kernel.

Kernel: `sglang.kernels.ops.attention.fla.fused_recurrent.fused_recurrent_gated_delta_rule_packed_decode`
from the sglang==0.5.23 wheel, unmodified: SGLang's GDN decode fast path (`TritonGDNKernel.packed_decode`),
called as SGLang calls it (scale = K^-0.5, use_qk_l2norm_in_kernel=True; its norm is
x / sqrt(sum x^2 + 1e-6), as docs/design.md §1). It reads packed [q | k | v] rows and forms the gates itself,
g = -exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b); with A_log = dt_bias = 0 this path passes
a = log(expm1(-g)), b = logit(beta) (`_common.gates_to_logits`), which reproduces the workload's gates.

Slots: SGLang's pool layout fp32 [slots, HV, V, K] (indices < 0 are skipped; none are used here). The
kernel reads and writes the state of one slot (`ssm_state_indices[n]`), so a child cannot read its parent's
slot without overwriting a state another child still needs: the path keeps two pools of R·W slots that
alternate. Beam b of request r at step t owns slot r·W + b of pool t % 2.

Beam-state maintenance, paid every step: one gather of full states into the pool the kernel then updates in
place (`torch.index_select`): at t = 0 request r's s_ctx into each of its beams' slots, later each child's
parent's state from the other pool. That is one extra state read + write per beam per step on top of the
kernel's own. Per step the adapter also packs [q | k | v] into one row per beam and converts the gates
(inputs only, ~1% of the state bytes). Not natively supported: R·W·HV > 65535 (grid axis y = B·HV).

Index mode (`sglang_fullstate`) is the above: two pools, the gather reads one and writes the other. Paper mode
(`sglang_fullstate_paper`, `paper = True`) is the paper's FullState: one persistent pool of R·W slots bound to
beams. At t = 0 request r's s_ctx is copied into each of its beams' slots (`torch.index_select`, as SGLang forks
a request's state slot into its beams'). At each t >= 1 the parents' states are gathered into a preallocated
transient workspace of R·W states and copied back into the beam slots (the kernel updates only the slots it is
given, in one state tensor), then the kernel updates every slot in place. Per step t >= 1 that is two extra
state reads + writes per beam; no host sync, no allocation. `workspace_bytes` reports the workspace;
`persistent_bytes` the pool only.
"""
from __future__ import annotations

import torch

from artifact.cost import FullState
from artifact.limits import grid_reason, memory_reason
from artifact.paths import Stepper, StepperPath
from baselines import _common, _load

PACK_SPEC = {
    "wheel": "sglang==0.5.23",
    "modules": [
        "sglang.kernels.ops.attention.fla.fused_recurrent",
        # imported by name inside functions that run at import time (sglang.srt.runtime_context)
        "sglang.srt.arg_groups.arg_utils",
        "sglang.srt.arg_groups.fields",
        "sglang.srt.arg_groups.fields.parallel",
    ],
    "follow_lazy": ["sglang.kernels.ops.attention.fla", "sglang.kernels.ops.attention.linear"],
    # registries and re-exports: sglang/__init__ imports the serving front end, the kernels/ops/attention
    # __init__ files register KernelSpec metadata
    "stub_packages": ["sglang", "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.attention"],
    "extension_stubs": [],
    # imported at module level by sglang.srt.utils.common and its imports, never by the kernels
    "placeholders": ["zmq", "torchcodec", "transformers", "pydantic_core", "pydantic", "orjson", "psutil",
                     "pybase64", "requests", "PIL", "starlette"],
    # msgspec: sglang's platform classes subclass msgspec.Struct at import time (binary: match the host)
    "deps": ["packaging==26.4", "msgspec==0.23.0"],
}
KERNEL_MODULE = "sglang.kernels.ops.attention.fla.fused_recurrent"


def kernel():
    return _load.load(PACK_SPEC, KERNEL_MODULE).fused_recurrent_gated_delta_rule_packed_decode


def sglang_reason(device, spec: dict = PACK_SPEC, module: str = KERNEL_MODULE, cpu_ok: bool = False) -> str | None:
    """Why SGLang's kernel in `module` cannot run here (import failure first: it says what is missing)."""
    return _load.unavailable_reason(spec, [module]) or _common.device_reason(
        device, "SGLang", None if cpu_ok else _common.FLA_ALIAS_CPU_REASON.format(fw="SGLang"))


class SglangFullStateStepper(Stepper):
    paper = False

    def __init__(self, geometry, R, W, T, device):
        super().__init__(geometry, R, W, T, device)
        self.fn = kernel()
        N, g, dev = R * W, geometry, self.device
        self.N = N
        self.pools = torch.zeros((1 if self.paper else 2) * N, g.hv, g.v, g.k, dtype=torch.float32, device=dev)
        beam = torch.arange(N, dtype=torch.int32, device=dev)
        self.slots = torch.stack([beam, beam if self.paper else N + beam])        # [2, N] in-place slots
        self.work = None
        if self.paper and T > 1:
            self.work = torch.empty(N, g.hv, g.v, g.k, dtype=torch.float32, device=dev)
            self.parent_rows = torch.empty(R, W, dtype=torch.int64, device=dev)
        self.request_of_beam = torch.arange(R, device=dev).repeat_interleave(W)   # t = 0 gather source
        self.row_base = (torch.arange(R, device=dev) * W)[:, None]
        self.zeros_hv = torch.zeros(g.hv, dtype=torch.float32, device=dev)        # A_log = dt_bias = 0
        self.a = torch.empty(N, g.hv, dtype=torch.float32, device=dev)
        self.b = torch.empty(N, g.hv, dtype=torch.float32, device=dev)
        self.mixed = None
        self.scale = g.k ** -0.5

    def reset(self, s_ctx, tail=None):
        if tail is not None:
            raise ValueError("SglangFullStateStepper: a prompt tail is ReplaySSM-only; FullState starts from s_ctx")
        self.s_ctx = s_ctx

    def step(self, t, q, k, v, g, beta, parents, out):
        N, geo = self.N, self.geometry
        dst = self.pools[(t % 2) * N:(t % 2 + 1) * N] if not self.paper else self.pools
        if t == 0:
            torch.index_select(self.s_ctx, 0, self.request_of_beam, out=dst)
        elif self.paper:    # the explicit reorder: parents' states -> workspace -> the children's slots
            torch.add(parents, self.row_base, out=self.parent_rows)
            torch.index_select(self.pools, 0, self.parent_rows.view(N), out=self.work)
            self.pools.copy_(self.work)
        else:
            src = self.pools[((t - 1) % 2) * N:((t - 1) % 2 + 1) * N]
            torch.index_select(src, 0, (parents.long() + self.row_base).reshape(N), out=dst)
        if self.mixed is None or self.mixed.dtype != q.dtype:
            self.mixed = torch.empty(N, 2 * geo.hk * geo.k + geo.hv * geo.v, dtype=q.dtype, device=self.device)
        torch.cat([q.reshape(N, -1), k.reshape(N, -1), v.reshape(N, -1)], dim=1, out=self.mixed)
        _common.gates_to_logits(g.reshape(N, geo.hv), beta.reshape(N, geo.hv), self.a, self.b)
        o = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
        self.fn(mixed_qkv=self.mixed, a=self.a, b=self.b, A_log=self.zeros_hv, dt_bias=self.zeros_hv,
                scale=self.scale, initial_state=self.pools, out=o.view(N, 1, geo.hv, geo.v),
                ssm_state_indices=self.slots[t % 2], use_qk_l2norm_in_kernel=True)
        if o is not out:
            out.copy_(o)
        return out

    def persistent_bytes(self):
        return self.pools.numel() * self.pools.element_size()

    def written_bytes(self):
        """Index mode: gather + kernel per step. Paper mode: the t = 0 context copy, kernel per step and the
        reorder's two passes (workspace, pool) per step t >= 1."""
        one = self.N * self.geometry.state_bytes
        if self.paper:
            return one + self.T * one + 2 * (self.T - 1) * one
        return 2 * self.T * one


class SglangFullStatePaperStepper(SglangFullStateStepper):
    paper = True


class SglangFullStatePath(StepperPath):
    name = "sglang_fullstate"
    stepper_cls = SglangFullStateStepper
    paper = False
    algorithm = FullState(first_copies=1, copies=1)     # the parents' states gathered before the in-place kernel

    def supports(self, geometry, shape, device):
        n = shape.R * shape.W
        return (sglang_reason(device)
                or grid_reason(n * geometry.hv, "R*W*HV (grid y of the packed decode kernel)")
                # index mode: two pools; paper mode: one pool and a workspace of the same size
                or memory_reason(2 * n * geometry.state_bytes, device,
                                         "the FullState pool and its reorder workspace" if self.paper
                                         else "the two FullState pools"))


class SglangFullStatePaperPath(SglangFullStatePath):
    name = "sglang_fullstate_paper"
    stepper_cls = SglangFullStatePaperStepper
    paper = True
    algorithm = FullState(first_copies=1, copies=2)     # s_ctx copied in at step 0; gather and copy back later
