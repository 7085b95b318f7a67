"""The exact references every path is checked against (docs/design.md §1-§2): plain torch, no custom kernels.

`fullstate_decode` keeps one [V, K] state per beam and copies the parent's state to each child every step; its
update is the one GDN step (artifact.gdn.gdn_step). `TorchReplayStepper` computes the same outputs by projection
replay (paper §3.2) through the ancestry index, never forming a per-beam state (the `reference_replay` path).
Outputs are o [T, R, W, HV, V].
"""
from __future__ import annotations

import contextlib

import torch

from artifact.ancestry import AncestryIndex, gather_beams
from artifact.ancestry import build as build_ancestry
from artifact.cost import FullState, ProjectionReplay
from artifact.gdn import gdn_step, normed_qk, per_value_head
from artifact.gtr import GtrStore
from artifact.paths import Stepper, StepperPath
from artifact.workload import Geometry, Workload


@contextlib.contextmanager
def full_precision():
    """fp32 matmuls stay fp32 on CUDA (no TF32) while the reference runs."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def fullstate_update(S, q, k, v, g, beta, geo: Geometry, dt):
    """One GDN step (artifact.gdn.gdn_step) of per-beam states S [R, W, HV, V, K] in `dt` from raw inputs:
    the new states and o [R, W, HV, V]. The one update of both FullState references (per step, and along
    ancestry chains)."""
    qh, kh = normed_qk(q, k, dt)
    qh, kh = per_value_head(qh, geo.group), per_value_head(kh, geo.group)     # [R, W, HV, K]
    return gdn_step(S, torch.exp(g.to(dt)), beta.to(dt), kh, v.to(dt), qh)


class TorchFullStateStepper(Stepper):
    """Per-beam FullState in plain torch: one [HV, V, K] state per beam, the parent's state copied to each
    child every step (a gather into a new pool)."""

    def __init__(self, geometry, R, W, T, device, dtype=torch.float32):
        super().__init__(geometry, R, W, T, device)
        self.dtype = dtype

    def out_dtypes(self, q):
        """The inputs' dtype, float32, or this stepper's compute dtype (float64 for the fp64 reference)."""
        return (q.dtype, torch.float32, self.dtype)

    def reset(self, s_ctx, tail=None):
        if tail is not None:
            raise ValueError("TorchFullStateStepper: a prompt tail is ReplaySSM-only")
        self.s_ctx = s_ctx

    def step(self, t, q, k, v, g, beta, parents, out):
        geo, dt = self.geometry, self.dtype
        if t == 0:
            S = self.s_ctx.to(dt)[:, None].expand(self.R, self.W, geo.hv, geo.v, geo.k)
        else:
            S = gather_beams(self.S, parents)                     # each child gets its parent's state
        self.S, o = fullstate_update(S, q, k, v, g, beta, geo, dt)
        out.copy_(o)
        return out

    def persistent_bytes(self):
        return self.R * self.W * self.geometry.hv * self.geometry.v * self.geometry.k * _nbytes(self.dtype)

    def written_bytes(self):
        return self.T * self.persistent_bytes()


class TorchReplayStepper(Stepper):
    """Projection replay (§3.2) in plain torch over an append-only GtrStore, through §3.3's ancestry."""

    def __init__(self, geometry, R, W, T, device, dtype=torch.float32, store: GtrStore | None = None):
        super().__init__(geometry, R, W, T, device)
        self.dtype = dtype
        self.store = store or GtrStore(geometry, R, W, T, device=device, record_dtype=dtype, alpha_dtype=dtype)
        self.anc = AncestryIndex(R, W, T, device=device)

    def out_dtypes(self, q):
        """The inputs' dtype, float32, or this stepper's compute dtype (float64 for the fp64 reference)."""
        return (q.dtype, torch.float32, self.dtype)

    def reset(self, s_ctx, tail=None):
        if tail is not None:
            raise ValueError("TorchReplayStepper: a prompt tail is ReplaySSM-only")
        self.s_ctx = s_ctx
        self.anc = AncestryIndex(self.R, self.W, self.T, device=self.device)

    def step(self, t, q, k, v, g, beta, parents, out):
        geo, dt, store = self.geometry, self.dtype, self.store
        if t > 0:
            self.anc.advance(parents)
        qh_k, kh_k = normed_qk(q, k, dt)
        qh, kh = per_value_head(qh_k, geo.group), per_value_head(kh_k, geo.group)     # [R, W, HV, K]
        s_ctx = self.s_ctx.to(dt)
        uq = torch.einsum("rhvk,rwhk->rwhv", s_ctx, qh)
        uk = torch.einsum("rhvk,rwhk->rwhv", s_ctx, kh)
        for j in range(t):
            slot = self.anc.table[:, :, j]
            a_j = gather_beams(store.alpha[j], slot).to(dt)[..., None]          # [R, W, HV, 1]
            d_j = gather_beams(store.delta[j], slot).to(dt)                     # [R, W, HV, V]
            k_j = per_value_head(gather_beams(store.khat[j], slot).to(dt), geo.group)
            uq = a_j * uq + d_j * (k_j * qh).sum(-1, keepdim=True)
            uk = a_j * uk + d_j * (k_j * kh).sum(-1, keepdim=True)
        alpha = torch.exp(g.to(dt))[..., None]
        delta = beta.to(dt)[..., None] * (v.to(dt) - alpha * uk)
        out.copy_(alpha * uq + delta * (kh * qh).sum(-1, keepdim=True))
        store.append(t, alpha[..., 0], delta, kh_k)
        return out

    def persistent_bytes(self):
        return self.store.nbytes + self.s_ctx_bytes() + self.anc.nbytes

    def s_ctx_bytes(self):
        g = self.geometry
        return self.R * g.hv * g.v * g.k * 4

    def written_bytes(self):
        return self.store.nbytes


def _nbytes(dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def _decode(stepper: Stepper, wl: Workload, dtype, r: slice = slice(None)) -> torch.Tensor:
    geo = wl.geometry
    o = torch.empty(wl.T, stepper.R, wl.W, geo.hv, geo.v, dtype=dtype, device=wl.device)
    stepper.reset(wl.s_ctx[r])
    with full_precision():
        for t in range(wl.T):
            stepper.step(t, wl.q[t, r], wl.k[t, r], wl.v[t, r], wl.g[t, r], wl.beta[t, r], wl.parents[t, r], o[t])
    return o


def fullstate_decode(wl: Workload, dtype=torch.float32, beams: int | None = None) -> torch.Tensor:
    """Per-beam FullState decode in `dtype` (float32 or float64); one request at a time to bound memory.
    `beams`: hold at most this many beam states at once, for widths whose W states of one request do not fit
    (`fullstate_chains`); None holds one request's W states."""
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"fullstate_decode dtype must be float32 or float64, got {dtype}")
    if beams is not None and beams < wl.W:
        return fullstate_chains(wl, beams, dtype)
    outs = [_decode(TorchFullStateStepper(wl.geometry, 1, wl.W, wl.T, wl.device, dtype), wl, dtype,
                    slice(r, r + 1)) for r in range(wl.R)]
    return torch.cat(outs, dim=1)


def fullstate_chains(wl: Workload, beams: int, dtype=torch.float32) -> torch.Tensor:
    """fullstate_decode's outputs with at most `beams` beam states in memory: the output of beam b at step t is
    the last of t + 1 FullState updates along b's ancestral chain from s_ctx (its ancestor at depth j < t is the
    beam h_t(b, j) of step j, artifact.ancestry), computed for blocks of `beams` beams at a time. The same
    update as the per-step reference (fullstate_update), T(T + 1) / 2 state updates per beam instead of T."""
    if beams < 1:
        raise ValueError(f"fullstate_chains: beams must be >= 1, got {beams}")
    geo, T, R, W = wl.geometry, wl.T, wl.R, wl.W
    anc = build_ancestry(wl.parents)                                   # [T, R, W, T]
    o = torch.empty(T, R, W, geo.hv, geo.v, dtype=dtype, device=wl.device)
    with full_precision():
        for r in range(R):
            s_ctx = wl.s_ctx[r].to(dtype)
            for t in range(T):
                for b0 in range(0, W, beams):
                    block = torch.arange(b0, min(W, b0 + beams), device=wl.device)
                    S = s_ctx[None, None].expand(1, len(block), geo.hv, geo.v, geo.k)
                    for j in range(t + 1):
                        rows = anc[t, r, block, j].long() if j < t else block
                        S, out = fullstate_update(S, wl.q[j, r, rows][None], wl.k[j, r, rows][None],
                                                  wl.v[j, r, rows][None], wl.g[j, r, rows][None],
                                                  wl.beta[j, r, rows][None], geo, dtype)
                    o[t, r, b0:b0 + len(block)] = out[0]
    return o




class ReferenceFullStatePath(StepperPath):
    """Plain-torch per-beam FullState in fp32: the oracle, registered as a path so it runs like one."""

    name = "reference_fullstate"
    algorithm = FullState()
    capturable = False
    stepper_cls = TorchFullStateStepper
    out_dtype = torch.float32


class ReferenceReplayPath(StepperPath):
    """Plain-torch projection replay with fp32 records: OneLA's algorithm without a fused kernel."""

    name = "reference_replay"
    algorithm = ProjectionReplay()
    capturable = False
    keeps_ancestry = True
    stepper_cls = TorchReplayStepper
    out_dtype = torch.float32
