"""TensorRT-LLM FullState: one fp32 recurrent state per live beam, updated in place by TRT-LLM's decode kernel.

Kernel: `tensorrt_llm._torch.modules.fla.fused_sigmoid_gating_recurrent.fused_sigmoid_gating_delta_rule_update`
(TensorRT-LLM 1.2 as installed, unmodified; its Triton kernel `fused_sigmoid_gating_delta_rule_update_kernel`;
read from current main sources, which could not be run here), called as
TRT-LLM's Qwen3-Next / Qwen3.5 GDN mixer calls it at decode: varlen, q/k/v as [1, N, H, D] with
cu_seqlens = 0..N, softplus_beta = 1, softplus_threshold = 20, scale = K^-0.5, use_qk_l2norm_in_kernel=True.
Its norm is x / (sqrt(sum x^2) + 1e-6) in current sources (eps outside the root; docs/design.md §1 puts it inside:
a relative difference below 1e-7 at |x| ~ sqrt(K)). The kernel forms its gates as g = -exp(A_log)·softplus(
a + dt_bias), beta = sigmoid(b); this path passes A_log = dt_bias = 0, a = log(expm1(-g)), b = logit(beta) in
fp32 (`_common.gates_to_logits`), which reproduces the workload's gates. With an fp32 state pool the wrapper
takes its Triton path (its FlashInfer dispatch is for bf16 state pools only).

State layout: current TRT-LLM sources keep the pool as [slots, HV, V, K] (K contiguous); sources adapted
from SGLang's first version used [slots, HV, K, V]. The stepper finds out which one the installed kernel
uses with a one-state probe at construction (untimed) and keeps its pool, and a transposed copy of s_ctx if
needed, in that layout.

Slots: the kernel reads and writes one slot per sequence (`initial_state_indices[n]`), so a child cannot read
its parent's slot without overwriting a state a sibling still needs. The path keeps two pools of R·W slots
that alternate: beam b of request r owns slot r·W + b of pool t % 2.

Beam-state maintenance paid every step: one gather of full states into the pool the kernel then updates in
place (`torch.index_select`): at t = 0 request r's s_ctx into each of its beams' slots, later each child's
parent's state from the other pool: one extra state read + write per beam per step on top of the kernel's.
Not natively supported: N·HV > 65535 on kernels that launch one program per sequence-head on grid z without
the grid-stride loop current sources have.

Index mode (`trtllm_fullstate`) is the above: two pools, the gather reads one and writes the other. Paper mode
(`trtllm_fullstate_paper`, `paper = True`) is the paper's FullState: one persistent pool of R·W slots bound to
beams. At t = 0 request r's s_ctx is copied into each of its beams' slots. At each t >= 1 the parents' states
are gathered into a preallocated transient workspace of R·W states and copied back into the beam slots (the
kernel updates the slots it is given in one state tensor), then the kernel updates every slot in place. Per step
t >= 1 that is two extra state reads + writes per beam; no host sync, no allocation. `workspace_bytes` reports
the workspace; `persistent_bytes` the pool (and the transposed s_ctx copy, if the kernel's layout needs one).

The tensorrt_llm package on PyPI is a stub that downloads from NVIDIA's own index; where it is not
installed every cell is a skip naming that.
"""
from __future__ import annotations

import functools
import inspect

import torch

from artifact.cost import FullState
from artifact.gdn import gdn_step, normed_qk, per_value_head
from artifact.limits import CUDA_GRID_YZ_MAX, grid_reason, memory_reason
from artifact.paths import Stepper, StepperPath
from baselines import _common, _load

KERNEL_MODULE = "tensorrt_llm._torch.modules.fla.fused_sigmoid_gating_recurrent"
# Not named PACK_SPEC: no TRT-LLM wheel can be downloaded, so `baselines.pack` has nothing to take it from.
LOAD_SPEC = {"wheel": "tensorrt-llm==1.2.0", "modules": [KERNEL_MODULE]}
NOT_ON_PYPI = ("TensorRT-LLM's PyPI package is a stub that downloads the real wheel from NVIDIA's own "
               "package index at install time; install TensorRT-LLM 1.2 from there or its container")


def kernel():
    """TRT-LLM's decode entry point (raises ImportError with the reason)."""
    try:
        return _load.load(LOAD_SPEC, KERNEL_MODULE).fused_sigmoid_gating_delta_rule_update
    except ImportError as e:
        raise ImportError(f"{e} ({NOT_ON_PYPI})") from e


@functools.cache
def _grid_strided(fn) -> bool:
    """Whether the wrapper caps grid z at CUDA's 65535 and grid-strides over sequence-heads (current sources)."""
    try:
        return str(CUDA_GRID_YZ_MAX) in inspect.getsource(fn)
    except (OSError, TypeError):
        return False


def _takes_output(fn) -> bool:
    """Newer wrappers write into a caller's `output`; older ones always allocate and return o."""
    try:
        return "output" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _one_step(S_vk, q, k, v, alpha: float, beta: float, geo):
    """Reference decode of one token from S [HV, V, K] (fp32): artifact.gdn.gdn_step."""
    qh, kh = normed_qk(q, k, torch.float32)
    full = lambda x: torch.full((geo.hv,), x, dtype=torch.float32, device=S_vk.device)  # noqa: E731
    return gdn_step(S_vk, full(alpha), full(beta), per_value_head(kh, geo.group), v.float(),
                    per_value_head(qh, geo.group))[1]


def probe_state_layout(fn, geometry, device) -> str:
    """'vk' or 'kv': which state layout the installed kernel reads, from one decode of one random state."""
    geo, dev = geometry, torch.device(device)
    gen = torch.Generator().manual_seed(1234)
    mem = (0.1 * torch.randn(1, geo.hv, geo.v * geo.k, generator=gen)).to(dev)
    q = torch.randn(1, 1, geo.hk, geo.k, generator=gen).to(dev, torch.bfloat16)
    k = torch.randn(1, 1, geo.hk, geo.k, generator=gen).to(dev, torch.bfloat16)
    v = torch.randn(1, 1, geo.hv, geo.v, generator=gen).to(dev, torch.bfloat16)
    zeros = torch.zeros(geo.hv, dtype=torch.float32, device=dev)
    a = torch.zeros(1, geo.hv, dtype=torch.float32, device=dev)          # g = -softplus(0) = -log 2
    b = torch.zeros(1, geo.hv, dtype=torch.float32, device=dev)          # beta = 1/2
    pool = mem.view(1, geo.hv, geo.v, geo.k).clone()
    o = fn(A_log=zeros, a=a, dt_bias=zeros, softplus_beta=1.0, softplus_threshold=20.0, q=q, k=k, v=v, b=b,
           initial_state_source=pool, initial_state_indices=torch.zeros(1, dtype=torch.int32, device=dev),
           scale=geo.k ** -0.5, use_qk_l2norm_in_kernel=True,
           cu_seqlens=torch.tensor([0, 1], dtype=torch.int32, device=dev))
    o = o.reshape(geo.hv, geo.v).float()
    views = {"vk": mem.view(geo.hv, geo.v, geo.k), "kv": mem.view(geo.hv, geo.k, geo.v).transpose(1, 2)}
    err = {name: float((o - _one_step(S, q[0, 0], k[0, 0], v[0, 0], 0.5, 0.5, geo)).abs().max())
           for name, S in views.items()}
    best = min(err, key=err.get)
    other = err["kv" if best == "vk" else "vk"]
    if not (err[best] < 1e-2 and other > 10 * err[best]):
        raise RuntimeError(f"TRT-LLM's kernel matches neither state layout [HV, V, K] nor [HV, K, V] on a probe "
                           f"decode (max errors {err})")
    return best


def trtllm_reason(geometry, shape, device) -> str | None:
    """Why TRT-LLM's kernel cannot run a cell (import failure first: it names the cause)."""
    try:
        fn = kernel()
    except ImportError as e:
        return str(e)
    dev = torch.device(device)
    if dev.type != "cuda":
        return f"TensorRT-LLM's Triton decode kernel needs a CUDA device (got {dev})"
    if not _grid_strided(fn):
        return grid_reason(shape.R * shape.W * geometry.hv,
                                   "R*W*HV sequence-heads on grid z of fused_sigmoid_gating_delta_rule_update")
    return None


class TrtllmFullStateStepper(Stepper):
    paper = False

    def __init__(self, geometry, R, W, T, device):
        super().__init__(geometry, R, W, T, device)
        self.fn = kernel()
        N, g, dev = R * W, geometry, self.device
        self.N = N
        self.layout = probe_state_layout(self.fn, g, dev)
        inner = (g.v, g.k) if self.layout == "vk" else (g.k, g.v)
        self.pools = torch.zeros(1 if self.paper else 2, N, g.hv, *inner, dtype=torch.float32, device=dev)
        self.ctx_kv = None if self.layout == "vk" else torch.empty(R, g.hv, g.k, g.v, device=dev)
        self.slots = torch.arange(N, dtype=torch.int32, device=dev)                   # in-place, per pool
        self.cu_seqlens = torch.arange(N + 1, dtype=torch.int32, device=dev)
        self.request_of_beam = torch.arange(R, device=dev).repeat_interleave(W)        # t = 0 gather source
        self.row_base = (torch.arange(R, device=dev) * W)[:, None]
        self.zeros_hv = torch.zeros(g.hv, dtype=torch.float32, device=dev)             # A_log = dt_bias = 0
        self.a = torch.empty(N, g.hv, dtype=torch.float32, device=dev)
        self.b = torch.empty(N, g.hv, dtype=torch.float32, device=dev)
        self.takes_output = _takes_output(self.fn)
        self.scale = g.k ** -0.5
        self.work = None
        if self.paper and T > 1:
            self.work = torch.empty(N, g.hv, *inner, dtype=torch.float32, device=dev)
            self.parent_rows = torch.empty(R, W, dtype=torch.int64, device=dev)

    def reset(self, s_ctx, tail=None):
        if tail is not None:
            raise ValueError("TrtllmFullStateStepper: a prompt tail is ReplaySSM-only; FullState starts from s_ctx")
        if self.ctx_kv is None:
            self.ctx = s_ctx
        else:           # the post-prefill state as this kernel's layout holds it
            self.ctx = self.ctx_kv.copy_(s_ctx.transpose(-1, -2))

    def step(self, t, q, k, v, g, beta, parents, out):
        N, geo = self.N, self.geometry
        dst = self.pools[0 if self.paper else t % 2]
        if t == 0:
            torch.index_select(self.ctx, 0, self.request_of_beam, out=dst)
        elif self.paper:    # the explicit reorder: parents' states -> workspace -> the children's slots
            torch.add(parents, self.row_base, out=self.parent_rows)
            torch.index_select(dst, 0, self.parent_rows.view(N), out=self.work)
            dst.copy_(self.work)
        else:
            torch.index_select(self.pools[(t - 1) % 2], 0, (parents.long() + self.row_base).reshape(N), out=dst)
        _common.gates_to_logits(g.reshape(N, geo.hv), beta.reshape(N, geo.hv), self.a, self.b)
        kw = dict(A_log=self.zeros_hv, a=self.a, dt_bias=self.zeros_hv, softplus_beta=1.0, softplus_threshold=20.0,
                  q=q.reshape(1, N, geo.hk, geo.k), k=k.reshape(1, N, geo.hk, geo.k),
                  v=v.reshape(1, N, geo.hv, geo.v), b=self.b, initial_state_source=dst,
                  initial_state_indices=self.slots, scale=self.scale, use_qk_l2norm_in_kernel=True,
                  cu_seqlens=self.cu_seqlens)
        if self.takes_output and out.is_contiguous():
            self.fn(**kw, output=out.view(1, N, geo.hv, geo.v))
        else:
            out.copy_(self.fn(**kw).view(out.shape))
        return out

    def persistent_bytes(self):
        extra = 0 if self.ctx_kv is None else self.ctx_kv.numel() * 4
        return self.pools.numel() * self.pools.element_size() + extra

    def written_bytes(self):
        """Index mode: gather + kernel per step. Paper mode: the t = 0 context copy, kernel per step and the
        reorder's two passes (workspace, pool) per step t >= 1. Plus the transposed s_ctx if the layout needs it."""
        one = self.geometry.state_bytes
        extra = 0 if self.ctx_kv is None else self.R * one
        if self.paper:
            return (1 + self.T + 2 * (self.T - 1)) * self.N * one + extra
        return 2 * self.T * self.N * one + extra        # gather + kernel, per step


class TrtllmFullStatePaperStepper(TrtllmFullStateStepper):
    paper = True


class TrtllmFullStatePath(StepperPath):
    name = "trtllm_fullstate"
    stepper_cls = TrtllmFullStateStepper
    paper = False
    algorithm = FullState(first_copies=1, copies=1)     # the parents' states gathered before the in-place kernel

    def supports(self, geometry, shape, device):
        n = shape.R * shape.W
        return (trtllm_reason(geometry, shape, device)
                # index mode: two pools; paper mode: one pool and a workspace of the same size
                or memory_reason((2 * n + shape.R) * geometry.state_bytes, device,
                                         "the FullState pool and its reorder workspace" if self.paper
                                         else "the two FullState pools"))


class TrtllmFullStatePaperPath(TrtllmFullStatePath):
    name = "trtllm_fullstate_paper"
    stepper_cls = TrtllmFullStatePaperStepper
    paper = True
    algorithm = FullState(first_copies=1, copies=2)     # s_ctx copied in at step 0; gather and copy back later
