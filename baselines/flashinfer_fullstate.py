"""FlashInfer FullState: one fp32 recurrent state per live beam, in FlashInfer's V-major state pool.

Kernel: `flashinfer.gdn_decode.gated_delta_rule_decode_pretranspose` from flashinfer-python==0.7.2.post1,
unmodified, `backend="flashinfer"` (its CuTe-DSL fp32-state T=1 kernel, `gdn_kernels/gdn_decode_pretranspose.py`;
`"auto"` picks the same kernel on SM90, where the Blackwell-only Cake route does not apply). Called with
scale = K^-0.5, use_qk_l2norm=True (in-kernel norm x * rsqrt(sum x^2 + 1e-6), as docs/design.md §1), a state pool
`initial_state` fp32 [slots, HV, V, K] and separate read / write slot indices (`initial_state_indices`,
`output_state_indices`). The kernel forms its gates as g = -exp(A_log)·softplus(a + dt_bias), beta =
sigmoid(b); this path passes A_log = dt_bias = 0, a = log(expm1(-g)), b = logit(beta) in fp32 (the kernel
reads a and b in their own dtype), which reproduces the workload's gates to fp32 rounding.

Slots: R context slots (s_ctx copied in at reset, as prefill leaves it) and two beam pools of R·W slots that
alternate. Beam b of request r at step t writes slot `R + (t % 2)·R·W + r·W + b` and reads, at t = 0, context
slot r, later its parent's slot in the pool written at t - 1. The kernel takes the parent's state through
the read index and writes the child's through the write index, so no state is ever copied.

Beam-state maintenance paid per step: one index add (parents + row offsets) and the gate conversion; the
kernel itself reads one parent state and writes one full state per beam, which is what FullState is.
Not natively supported (reported by supports()): K != 128 or V != 128 -- the fp32 kernel loads one 128-wide
K tile (TILE_K = 128, 4 values per lane of one warp) and writes back only the first 128 output rows
(NUM_THREADS = 128), while the API asserts only K >= 128, V >= 128, V % 8 == 0; and GPUs below SM90.

Index mode (`flashinfer_fullstate`) is the above. Paper mode (`flashinfer_fullstate_paper`, `paper = True`) is the
paper's FullState: one persistent pool of R + R·W slots (contexts, one slot bound to each beam). At t = 0 beam b
of request r reads context slot r and writes its own slot. At each t >= 1 the step first reorders the beams'
states: `torch.index_select` of the parents' slots into a preallocated transient workspace of R·W states, rows
of the same tensor after the pool (the kernel takes one state tensor), then the kernel reads each beam's
gathered parent state from the workspace and writes the beam's own slot. One extra state read + write per beam
per step t >= 1; no host sync, no allocation. `workspace_bytes` reports the workspace;
`persistent_bytes` the pool only.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from artifact.cost import FullState
from artifact.limits import memory_reason
from artifact.paths import Stepper, StepperPath
from baselines import _common, _load

PACK_SPEC = {
    "wheel": "flashinfer-python==0.7.2.post1",
    # fi_trace: imported inside api_logging's @flashinfer_api decorator, i.e. at import time
    "modules": ["flashinfer.gdn_decode", "flashinfer.gdn_kernels.gdn_decode_pretranspose", "flashinfer.fi_trace"],
    # flashinfer/__init__ imports every op family (attention, MoE, comm, ...) and their JIT/cubin loaders
    "stub_packages": ["flashinfer"],
}
# Compiled wheels the CuTe-DSL kernel needs that the GPU image lacks; too large for the pack, they travel
# split by `python -m baselines.ship_parts` and are pip-installed into a --target folder on the GPU host.
SHIP_WHEELS = [
    "nvidia-cutlass-dsl==4.7.1",
    "nvidia-cutlass-dsl-libs-base==4.7.1",
    "nvidia-cutlass-dsl-libs-core==4.7.1",
    "nvidia-cutlass-dsl-libs-cu13==4.7.1",
    "apache-tvm-ffi==0.1.15.post2",
]
KERNEL_MODULE = "flashinfer.gdn_decode"
KERNEL_IMPL = "flashinfer.gdn_kernels.gdn_decode_pretranspose"
SUPPORTED_KV = 128


def _cutlass_dsl_on_path() -> None:
    """Do what nvidia_cutlass_dsl_packages.pth does in a site-packages folder: put the DSL's package root
    on sys.path (a `pip install --target` folder on PYTHONPATH does not run .pth files)."""
    spec = importlib.util.find_spec("nvidia_cutlass_dsl")
    if spec is None or not spec.submodule_search_locations:
        return
    for loc in spec.submodule_search_locations:
        root = str(Path(loc) / "dsl_packages")
        if Path(root).is_dir() and root not in sys.path:
            sys.path.insert(0, root)


def kernel():
    """The framework's decode entry point (raises ImportError with the reason)."""
    _cutlass_dsl_on_path()
    try:
        mod = _load.load(PACK_SPEC, KERNEL_MODULE)
        if not getattr(mod, "_PRETRANSPOSE_AVAILABLE", False):
            # gdn_decode swallows the kernel module's import error; import it directly to surface the cause
            _load.load(PACK_SPEC, KERNEL_IMPL)
            raise ImportError(f"{PACK_SPEC['wheel']}: {KERNEL_MODULE} loaded but reports its pretranspose "
                              f"kernel unavailable")
    except ImportError as e:
        raise ImportError(f"{e} (the kernel also needs {', '.join(SHIP_WHEELS)}: see baselines/ship_parts.py)") \
            from e
    return mod.gated_delta_rule_decode_pretranspose


def flashinfer_reason(geometry, device) -> str | None:
    """Why FlashInfer's fp32 pretranspose kernel cannot run a cell (import failure first: it names the cause)."""
    try:
        kernel()
    except ImportError as e:
        return str(e)
    dev = torch.device(device)
    if dev.type != "cuda":
        return f"FlashInfer's CuTe-DSL GDN decode kernel needs a CUDA GPU of SM90 or newer (got device {dev})"
    major, minor = torch.cuda.get_device_capability(dev)
    if major < 9:
        return f"FlashInfer's CuTe-DSL GDN decode kernel needs SM90 or newer (this GPU is SM{major}{minor})"
    if geometry.k != SUPPORTED_KV or geometry.v != SUPPORTED_KV:
        return (f"not natively supported: gated_delta_rule_decode_pretranspose's fp32-state kernel handles "
                f"K = V = 128 only (one 128-wide K tile per state row, 128 output rows written back); "
                f"got K={geometry.k}, V={geometry.v}")
    return None


class FlashInferFullStateStepper(Stepper):
    paper = False

    def __init__(self, geometry, R, W, T, device):
        super().__init__(geometry, R, W, T, device)
        self.fn = kernel()
        N, g, dev = R * W, geometry, self.device
        self.pool0 = R                           # slots [0, R): contexts; then pools A, B (paper mode: one pool)
        n_beam = (1 if self.paper else 2) * N
        _common.slot_pool_with_workspace(self, R + n_beam, N if self.paper and T > 1 else 0, g)
        beam = torch.arange(N, dtype=torch.int32, device=dev)
        # one allocation per index vector: the kernel assumes 16-byte aligned index tensors
        self.write_idx = [self.pool0 + beam, self.pool0 + (0 if self.paper else N) + beam]
        self.read_idx = [torch.empty(N, dtype=torch.int32, device=dev) for _ in range(2)]
        self.ctx_read = torch.arange(R, dtype=torch.int32, device=dev).repeat_interleave(W)
        self.row_base = (torch.arange(R, dtype=torch.int32, device=dev) * W)[:, None]      # [R, 1]
        if self.paper:          # fixed read indices: the context slot at t = 0, the beam's workspace row later
            self.read_idx[0].copy_(self.ctx_read)
            self.read_idx[1].copy_(self.ws0 + beam)
            if T > 1:
                self.parent_rows = torch.empty(R, W, dtype=torch.int64, device=dev)
                self.row_base64 = self.row_base.long() + self.pool0
        self.a = torch.empty(N, 1, g.hv, dtype=torch.float32, device=dev)
        self.b = torch.empty(N, 1, g.hv, dtype=torch.float32, device=dev)
        self.A_log = torch.zeros(g.hv, dtype=torch.float32, device=dev)
        self.dt_bias = torch.zeros(g.hv, dtype=torch.float32, device=dev)
        self.scale = g.k ** -0.5

    def reset(self, s_ctx, tail=None):
        if tail is not None:
            raise ValueError("FlashInferFullStateStepper: a prompt tail is ReplaySSM-only; FullState starts "
                             "from s_ctx")
        self.pool[:self.R].copy_(s_ctx)

    def step(self, t, q, k, v, g, beta, parents, out):
        R, W, N, geo = self.R, self.W, self.R * self.W, self.geometry
        slot = min(t, 1) if self.paper else t % 2
        read, write = self.read_idx[slot], self.write_idx[slot]
        if self.paper:
            if t > 0:
                _common.reorder_beam_slots(self, parents)
        elif t == 0:
            read.copy_(self.ctx_read)
        else:   # the parent's slot in the pool written at step t - 1
            torch.add(parents + self.row_base, self.pool0 + ((t - 1) % 2) * N, out=read.view(R, W))
        _common.gates_to_logits(g.reshape(N, 1, geo.hv), beta.reshape(N, 1, geo.hv), self.a, self.b)
        self.fn(q.reshape(N, 1, geo.hk, geo.k), k.reshape(N, 1, geo.hk, geo.k), v.reshape(N, 1, geo.hv, geo.v),
                None, self.A_log, self.a, self.dt_bias, self.b, scale=self.scale,
                output=out.view(N, 1, geo.hv, geo.v), use_qk_l2norm=True, initial_state=self.pool,
                initial_state_indices=read, output_state_indices=write, backend="flashinfer")
        return out

    def persistent_bytes(self):
        return self.slots.numel() * self.slots.element_size()

    def written_bytes(self):
        return _common.slot_pool_written_bytes(self)


class FlashInferFullStatePaperStepper(FlashInferFullStateStepper):
    paper = True


class FlashInferFullStatePath(StepperPath):
    name = "flashinfer_fullstate"
    stepper_cls = FlashInferFullStateStepper
    paper = False
    algorithm = FullState()

    def supports(self, geometry, shape, device):
        n = shape.R * shape.W
        return (flashinfer_reason(geometry, device)
                # index mode: two beam pools; paper mode: one pool and a workspace of the same size
                or memory_reason((shape.R + 2 * n) * geometry.state_bytes, device,
                                         "the FullState pool and its reorder workspace" if self.paper
                                         else "the two-pool FullState state pool"))


class FlashInferFullStatePaperPath(FlashInferFullStatePath):
    name = "flashinfer_fullstate_paper"
    stepper_cls = FlashInferFullStatePaperStepper
    paper = True
    algorithm = FullState(first_copies=0, copies=1)     # the reorder copy from step 1; step 0 reads the context slot
