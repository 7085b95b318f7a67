"""SGLang ReplaySSM: SGLang's buffered "output-only" GDN decode, one request slot per beam (paper §2.3).

Kernel: `sglang.kernels.ops.attention.linear.fused_recurrent_linear_replayssm.fused_recurrent_gdn_replayssm_decode`
from the sglang==0.5.23 wheel, unmodified, called as SGLang's Triton GDN backend calls it with
`--enable-linear-replayssm` (`TritonGDNKernel.packed_decode`: scale = K^-0.5, use_qk_l2norm_in_kernel=True, its
norm x / sqrt(sum x^2 + 1e-6), as docs/design.md §1; packed [q | k | v] rows; gates formed in the kernel from raw a, b,
so this path passes A_log = dt_bias = 0, a = log(expm1(-g)), b = logit(beta): `_common.gates_to_logits`).
Every step the kernel reads the slot's checkpoint S0 [HV, V, K] and the slot's ring of the last records
(d [HV, L, V], k [H, L, K], g [HV, L]; positions < write_pos are valid), rebuilds the state in K-tiles,
emits o_t, and appends the current record (d_t, k̂_t, g_t) at write_pos; on a flush step
(write_pos = L - 1) it instead writes the updated state back into the checkpoint. Rings as SGLang's memory
pool allocates them for decode: fp32 (the SSM dtype), L = 16 (`--linear-replayssm-cache-len` default).

Slots: beam b of request r is request slot n = r·W + b: its own copy of request r's checkpoint (copied in at
`reset`: every beam, an independent request, loads the cached checkpoint) and its own ring. At step t the
kernel runs with write_pos = t for every slot, so a beam replays the t records of its ancestors' tokens and
appends its own.

Beam-state maintenance, paid every step t >= 1: SGLang forks a request by copying its slot; here each child's
ring positions 0..t-1 are gathered from its parent's slot into the other of two ring pools (ping-pong, the
kernel writes position t in place). The checkpoints need no gather: no slot flushes before step L - 1, and a
decode longer than L steps is refused (`supports`), so every slot's checkpoint is its request's. Per step the
adapter also packs [q | k | v] into one row per beam and converts the gates (inputs only).

Prompt tail: not supported. The kernel's ring holds records it produced itself (corrected deltas d, not the
prompt's token inputs), and SGLang folds a prompt fully into the checkpoint at prefill, so it has no way to
replay a prompt tail; `reset(..., tail=...)` with a non-empty tail raises and the full-model suite does not run
this path. Not natively supported: R·W > 65535 (grid axis y = B), K not a power of two >= 32 (the kernel
needs one K block split into tiles of >= 16 for tl.dot).
"""
from __future__ import annotations

import torch

from artifact.cost import RecordReplay
from artifact.limits import grid_reason, memory_reason
from artifact.paths import Stepper, StepperPath
from baselines import _common, _load
from baselines.sglang_fullstate import sglang_reason

PACK_SPEC = {
    "wheel": "sglang==0.5.23",
    "modules": [
        "sglang.kernels.ops.attention.linear.fused_recurrent_linear_replayssm",
        # imported by name inside functions that run at import time (sglang.srt.runtime_context)
        "sglang.srt.arg_groups.arg_utils",
        "sglang.srt.arg_groups.fields",
        "sglang.srt.arg_groups.fields.parallel",
    ],
    "follow_lazy": ["sglang.kernels.ops.attention.fla", "sglang.kernels.ops.attention.linear"],
    "stub_packages": ["sglang", "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.attention"],
    "extension_stubs": [],
    "placeholders": ["zmq", "torchcodec", "transformers", "pydantic_core", "pydantic", "orjson", "psutil",
                     "pybase64", "requests", "PIL", "starlette"],
    "deps": ["packaging==26.4", "msgspec==0.23.0"],
}
KERNEL_MODULE = "sglang.kernels.ops.attention.linear.fused_recurrent_linear_replayssm"
CACHE_LEN = 16          # sglang's --linear-replayssm-cache-len default (ring length L)


def kernel():
    return _load.load(PACK_SPEC, KERNEL_MODULE).fused_recurrent_gdn_replayssm_decode


def tail_reason(tail) -> str | None:
    if tail is not None and int(tail["k"].shape[0]) > 0:
        return ("sglang_replayssm cannot replay a prompt tail: SGLang's ReplaySSM ring holds the decode records its "
                "kernel produced, and SGLang folds the whole prompt into the checkpoint at prefill")
    return None


class SglangReplaySSMStepper(Stepper):
    replay_tail_len = 0

    def __init__(self, geometry, R, W, T, device, cache_len: int = CACHE_LEN):
        super().__init__(geometry, R, W, T, device)
        if T > cache_len:
            raise ValueError(f"sglang_replayssm: T={T} decode steps exceed the ring length L={cache_len} "
                             f"(a flush would make checkpoints beam-specific; not modelled)")
        self.fn = kernel()
        N, g, dev = R * W, geometry, self.device
        self.N, self.L = N, cache_len
        self.ckpt = torch.zeros(N, g.hv, g.v, g.k, dtype=torch.float32, device=dev)     # one slot per beam
        # two ring pools (ping-pong): d [N, HV, L, V], k [N, H, L, K], g [N, HV, L], all fp32
        self.d = torch.zeros(2, N, g.hv, cache_len, g.v, dtype=torch.float32, device=dev)
        self.k = torch.zeros(2, N, g.hk, cache_len, g.k, dtype=torch.float32, device=dev)
        self.g = torch.zeros(2, N, g.hv, cache_len, dtype=torch.float32, device=dev)
        self.slots = torch.arange(N, dtype=torch.int32, device=dev)
        self.write_pos = torch.zeros(N, dtype=torch.int32, device=dev)
        self.request_of_beam = torch.arange(R, device=dev).repeat_interleave(W)
        self.row_base = (torch.arange(R, device=dev) * W)[:, None]
        self.zeros_hv = torch.zeros(g.hv, dtype=torch.float32, device=dev)            # A_log = dt_bias = 0
        self.a = torch.empty(N, g.hv, dtype=torch.float32, device=dev)
        self.b = torch.empty(N, g.hv, dtype=torch.float32, device=dev)
        self.mixed = None
        self.scale = g.k ** -0.5

    def reset(self, s_ctx, tail=None):
        why = tail_reason(tail)
        if why:
            raise ValueError(why)
        # every beam's request slot loads its request's checkpoint
        torch.index_select(s_ctx, 0, self.request_of_beam, out=self.ckpt)

    def step(self, t, q, k, v, g, beta, parents, out):
        N, geo = self.N, self.geometry
        cur = t % 2
        if t > 0:      # fork: each child's ring (positions < t) is its parent's
            prev = (t - 1) % 2
            parent = (parents.long() + self.row_base).reshape(N)
            self.d[cur][:, :, :t] = self.d[prev][:, :, :t].index_select(0, parent)
            self.k[cur][:, :, :t] = self.k[prev][:, :, :t].index_select(0, parent)
            self.g[cur][:, :, :t] = self.g[prev][:, :, :t].index_select(0, parent)
        self.write_pos.fill_(t)
        if self.mixed is None or self.mixed.dtype != q.dtype:
            self.mixed = torch.empty(N, 2 * geo.hk * geo.k + geo.hv * geo.v, dtype=q.dtype, device=self.device)
        torch.cat([q.reshape(N, -1), k.reshape(N, -1), v.reshape(N, -1)], dim=1, out=self.mixed)
        _common.gates_to_logits(g.reshape(N, geo.hv), beta.reshape(N, geo.hv), self.a, self.b)
        o = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
        self.fn(mixed_qkv=self.mixed, a=self.a, b=self.b, A_log=self.zeros_hv, dt_bias=self.zeros_hv,
                scale=self.scale, initial_state=self.ckpt, d_cache=self.d[cur], k_cache=self.k[cur],
                g_cache=self.g[cur], out=o.view(N, 1, geo.hv, geo.v), ssm_state_indices=self.slots,
                write_pos=self.write_pos, use_qk_l2norm_in_kernel=True)
        if o is not out:
            out.copy_(o)
        return out

    def persistent_bytes(self):
        return sum(x.numel() * x.element_size() for x in (self.ckpt, self.d, self.k, self.g))

    def written_bytes(self):
        """Checkpoint copies at reset, the kernel's appended records, and the ring gathers of steps >= 1."""
        geo, N, T = self.geometry, self.N, self.T
        record = 4 * (geo.hv * geo.v + geo.hk * geo.k + geo.hv)          # one fp32 (d, k, g) ring entry
        gathered = sum(range(T)) * record                                # positions < t at step t
        flush = geo.state_bytes if T == self.L else 0          # step L-1 flushes the checkpoint
        return N * (geo.state_bytes + T * record + gathered + flush)


class SglangReplaySSMPath(StepperPath):
    name = "sglang_replayssm"
    stepper_cls = SglangReplaySSMStepper
    algorithm = RecordReplay(record_elem=4)      # its rings hold fp32 records
    replay_tail_len = 0

    def supports(self, geometry, shape, device):
        why = sglang_reason(device, PACK_SPEC, KERNEL_MODULE, cpu_ok=True)
        if why:
            return why
        k = geometry.k
        if k & (k - 1) or k < 32:
            return f"not natively supported: K={k} (the kernel needs K a power of two >= 32: one K block, tiles >= 16)"
        if shape.T > CACHE_LEN:
            return f"T={shape.T} > ring length L={CACHE_LEN}: a mid-decode flush would need checkpoint gathers"
        n = shape.R * shape.W
        g = geometry
        per_slot = g.state_bytes + 2 * 4 * CACHE_LEN * (g.hv * g.v + g.hk * g.k + g.hv)
        return (grid_reason(n, "R*W (grid y of the ReplaySSM decode kernel)")
                or memory_reason(n * per_slot, device, "one checkpoint slot and two rings per beam"))
