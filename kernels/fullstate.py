"""Our controlled FullState decode kernel (the paper's Controlled FullState) and its path.

Conventional per-beam execution in the same pipeline as `onela`: every live beam owns one fp32 [HV, V, K]
state. Each step one program per (beam, value head, BV-row tile) reads its parent's state tile, applies the GDN
update and writes the child's state -- reading slot parent(b) of the previous pool and writing slot b of the
other (ping-pong), so the parent-to-child copy costs no separate pass; at t = 0 every beam of request r reads
S_ctx[r] directly. This is the fastest fair FullState we know how to write: one state read and one state write
per beam and step, nothing else.

Two maintenance modes, one kernel:
- index mode (`controlled_fullstate`): the ping-pong above; two pools of R*W states (one if T = 1), no copy.
- paper mode (`controlled_fullstate_paper`, `paper = True`): the paper's FullState, one persistent pool of R*W
  states bound to beams. At t = 0 the kernel reads S_ctx[r] and writes every beam slot of request r. At each
  t >= 1 the parents' states are first gathered into a preallocated transient workspace of R*W states
  (`torch.index_select(pool, 0, parent_rows, out=work)`: one state read + write per beam, part of the timed
  step), then the kernel reads beam slot b of the workspace (identity parent) and writes beam slot b of the
  pool. Reading the workspace instead of copying it back first saves a second pass; the pool is still the only
  state that persists between steps. The gather reads the parent rows from a preallocated index buffer
  (no host sync, no allocation: CUDA-graph capturable). `persistent_bytes` counts the pool only;
  `workspace_bytes` reports the workspace (R*W states for T > 1, none for T = 1).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from artifact.cost import FullState
from artifact.limits import CUDA_GRID_YZ_MAX, memory_reason
from artifact.paths import Stepper, StepperPath
from kernels.checks import check_reset, check_step, kernel_supports

POOL_SHARE = 0.8        # of the free GPU memory, what the state pools may take (supports())


def _grid_supports(R: int, W: int) -> str | None:
    """Why the step kernel's grid (value tiles, R x W beams, value heads) cannot take R x W beams on a GPU (None: it
    can)."""
    if R * W > CUDA_GRID_YZ_MAX:
        return (f"controlled_fullstate: R={R} x W={W} = {R * W} beams unsupported: the kernel's grid takes them "
                f"on CUDA's y axis, at most {CUDA_GRID_YZ_MAX}")
    return None


@triton.jit
def _fullstate_step_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, src_ptr, par_ptr, dst_ptr, out_ptr,
    W, HV,
    sq_r, sq_w, sq_h, sv_r, sv_w, sv_h,
    K: tl.constexpr, KP: tl.constexpr, V: tl.constexpr, G: tl.constexpr, FIRST: tl.constexpr, BV: tl.constexpr,
):
    """K is any multiple of 16; the key axis is a tile of KP (the power of two >= K) columns, zero past K."""
    pid_v = tl.program_id(0)
    rw = tl.program_id(1)            # flat (request, beam)
    hv = tl.program_id(2)
    r = rw // W
    b = rw % W
    hk = hv // G
    offs_v = pid_v * BV + tl.arange(0, BV)
    offs_k = tl.arange(0, KP)
    if KP == K:
        q = tl.load(q_ptr + r * sq_r + b * sq_w + hk * sq_h + offs_k).to(tl.float32)
        k = tl.load(k_ptr + r * sq_r + b * sq_w + hk * sq_h + offs_k).to(tl.float32)
    else:
        q = tl.load(q_ptr + r * sq_r + b * sq_w + hk * sq_h + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + r * sq_r + b * sq_w + hk * sq_h + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)
    q = q * (tl.rsqrt(tl.sum(q * q) + 1e-6) * (K ** -0.5))
    k = k * tl.rsqrt(tl.sum(k * k) + 1e-6)

    if FIRST:
        src_row = r * HV + hv                                    # S_ctx[r, hv]
    else:
        src_row = (r * W + tl.load(par_ptr + rw)) * HV + hv      # the parent's state
    tile = offs_v[:, None] * K + offs_k[None, :]
    if KP == K:
        S = tl.load(src_ptr + src_row.to(tl.int64) * (V * K) + tile)  # [BV, K] fp32
    else:                                                               # [BV, KP] fp32, zero past K
        S = tl.load(src_ptr + src_row.to(tl.int64) * (V * K) + tile, mask=(offs_k < K)[None, :], other=0.0)

    alpha = tl.exp(tl.load(g_ptr + rw * HV + hv))
    beta = tl.load(beta_ptr + rw * HV + hv)
    v = tl.load(v_ptr + r * sv_r + b * sv_w + hv * sv_h + offs_v).to(tl.float32)
    S = S * alpha
    delta = beta * (v - tl.sum(S * k[None, :], axis=1))
    S = S + delta[:, None] * k[None, :]
    o = tl.sum(S * q[None, :], axis=1)
    if KP == K:
        tl.store(dst_ptr + (rw * HV + hv).to(tl.int64) * (V * K) + tile, S)
    else:
        tl.store(dst_ptr + (rw * HV + hv).to(tl.int64) * (V * K) + tile, S, mask=(offs_k < K)[None, :])
    tl.store(out_ptr + (rw * HV + hv).to(tl.int64) * V + offs_v, o.to(out_ptr.dtype.element_ty))


def fullstate_block_v(K: int, V: int) -> int:
    """BV rows per program (32 at K <= 128, 16 above: the H200 tuning sweep in kernels/NOTES.md), or the largest
    power of two dividing V below that."""
    bv = 32 if K <= 128 else 16
    while V % bv:
        bv //= 2
    return bv


class ControlledFullStateStepper(Stepper):
    """Index mode: two fp32 pools of R*W per-beam states; step t reads pool (t-1)%2 at parent slots, writes
    pool t%2. Paper mode (`paper = True`): one pool; step t >= 1 gathers the parents' states into a transient
    workspace, then the kernel reads the workspace at the beam's own slot and writes the pool."""

    paper = False

    def __init__(self, geometry, R, W, T, device, block_v: int | None = None):
        super().__init__(geometry, R, W, T, device)
        reason = kernel_supports("controlled_fullstate", geometry, self.device) or \
            (_grid_supports(R, W) if self.device.type == "cuda" else None)
        if reason:
            raise ValueError(reason)
        shape = (R * W, geometry.hv, geometry.v, geometry.k)
        n_pools = 1 if (self.paper or T == 1) else 2
        self.pools = [torch.empty(shape, dtype=torch.float32, device=device) for _ in range(n_pools)]
        self.block_v = block_v or fullstate_block_v(geometry.k, geometry.v)
        self.work = None
        if self.paper and T > 1:
            self.work = torch.empty(shape, dtype=torch.float32, device=device)
            dev = self.device
            self.row_base = (torch.arange(R, dtype=torch.int64, device=dev) * W)[:, None]      # [R, 1]
            self.parent_rows = torch.empty(R, W, dtype=torch.int64, device=dev)
            self.own_slot = torch.arange(W, dtype=torch.int32, device=dev).repeat(R)          # identity parent

    def reset(self, s_ctx, tail=None):
        self.s_ctx = check_reset(self, s_ctx, tail)

    def step(self, t, q, k, v, g, beta, parents, out):
        geo, R, W = self.geometry, self.R, self.W
        check_step(self, t, q, k, v, g, beta, parents, out)
        if self.paper:
            dst = self.pools[0]
            if t == 0:
                src = self.s_ctx
            else:   # the explicit reorder: parents' states into the workspace; the kernel reads each beam's own
                #       workspace slot and writes its pool slot
                torch.add(parents, self.row_base, out=self.parent_rows)
                torch.index_select(dst, 0, self.parent_rows.view(-1), out=self.work)
                src, parents = self.work, self.own_slot
        else:
            src = self.s_ctx if t == 0 else self.pools[(t - 1) % len(self.pools)]
            dst = self.pools[t % len(self.pools)]
        grid = (geo.v // self.block_v, R * W, geo.hv)
        _fullstate_step_kernel[grid](
            q, k, v, g, beta, src, parents, dst, out, W, geo.hv,
            q.stride(0), q.stride(1), q.stride(2), v.stride(0), v.stride(1), v.stride(2),
            K=geo.k, KP=triton.next_power_of_2(geo.k), V=geo.v, G=geo.group, FIRST=(t == 0), BV=self.block_v,
            num_warps=4,
        )
        return out

    def persistent_bytes(self):
        return sum(p.numel() * 4 for p in self.pools)

    def written_bytes(self):
        """Kernel writes (R*W states per step) plus, in paper mode, the gather's R*W per step t >= 1."""
        gathers = self.T - 1 if self.paper else 0
        return (self.T + gathers) * self.R * self.W * self.geometry.state_bytes


class ControlledFullStatePaperStepper(ControlledFullStateStepper):
    paper = True


class ControlledFullStatePath(StepperPath):
    name = "controlled_fullstate"
    stepper_cls = ControlledFullStateStepper
    algorithm = FullState()

    def supports(self, geometry, shape, device):
        reason = kernel_supports("controlled_fullstate", geometry, device)
        if reason:
            return reason
        dev = torch.device(device)
        if dev.type == "cuda":
            if reason := _grid_supports(shape.R, shape.W):
                return reason
            # index mode: two pools; paper mode: one pool and a workspace of the same size. The pools stay under
            # POOL_SHARE of the free memory, leaving the rest to the harness's workload, reference and output.
            need = (2 if shape.T > 1 else 1) * shape.R * shape.W * geometry.state_bytes
            return memory_reason(need, dev, f"{self.name}: the state pools", share=POOL_SHARE)
        return None


class ControlledFullStatePaperPath(ControlledFullStatePath):
    name = "controlled_fullstate_paper"
    stepper_cls = ControlledFullStatePaperStepper
    algorithm = FullState(first_copies=0, copies=1)       # the reorder: s_ctx read directly at step 0
