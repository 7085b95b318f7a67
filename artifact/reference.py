"""The exact references every path is checked against (DESIGN §1-§2): plain torch, no custom kernels.

`fullstate_decode` keeps one [V, K] state per beam and copies the parent's state to each child every step.
`replay_decode` computes the same outputs by projection replay (paper §3.2) through the ancestry index,
never forming a per-beam state. Both return o as [T, R, W, HV, V].
"""
from __future__ import annotations

import contextlib

import torch

from artifact.ancestry import AncestryIndex
from artifact.gtr import GtrStore
from artifact.paths import DecodePath
from artifact.workload import Geometry, Workload, l2norm


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


def normed_qk(wl: Workload, t: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """q-hat = l2norm(q) K^-1/2 and k-hat = l2norm(k), per key head: [R, W, HK, K] in `dtype`."""
    qh = l2norm(wl.q[t].to(dtype)) * wl.geometry.k ** -0.5
    kh = l2norm(wl.k[t].to(dtype))
    return qh, kh


def _per_value_head(x: torch.Tensor, geo: Geometry) -> torch.Tensor:
    """[..., HK, K] -> [..., HV, K]: value head hv uses key head hv // (HV / HK)."""
    return x.repeat_interleave(geo.group, dim=-2)


def fullstate_decode(wl: Workload, dtype=torch.float32) -> torch.Tensor:
    """Per-beam FullState decode in `dtype` (float32 or float64); one request at a time to bound memory."""
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"fullstate_decode dtype must be float32 or float64, got {dtype}")
    geo, T, R, W = wl.geometry, wl.T, wl.R, wl.W
    o = torch.empty(T, R, W, geo.hv, geo.v, dtype=dtype, device=wl.device)
    with full_precision():
        for r in range(R):
            S = wl.s_ctx[r].to(dtype).expand(W, geo.hv, geo.v, geo.k)
            for t in range(T):
                if t > 0:
                    S = S[wl.parents[t, r].long()]          # each child gets its parent's state
                qh, kh = normed_qk(wl, t, dtype)
                qh, kh = _per_value_head(qh[r], geo), _per_value_head(kh[r], geo)   # [W, HV, K]
                alpha = torch.exp(wl.g[t, r].to(dtype))                            # [W, HV]
                beta = wl.beta[t, r].to(dtype)
                pred = alpha[..., None] * torch.einsum("whvk,whk->whv", S, kh)
                delta = beta[..., None] * (wl.v[t, r].to(dtype) - pred)            # [W, HV, V]
                S = alpha[..., None, None] * S + delta[..., None] * kh[:, :, None, :]
                o[t, r] = torch.einsum("whvk,whk->whv", S, qh)
    return o


def _gather_beams(x: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """x: [R, W, ...], slot: [R, W] -> x[r, slot[r, b], ...]."""
    idx = slot.long().reshape(*slot.shape, *([1] * (x.dim() - 2))).expand(*slot.shape, *x.shape[2:])
    return torch.gather(x, 1, idx)


def replay_decode(wl: Workload, dtype=torch.float64, store: GtrStore | None = None) -> torch.Tensor:
    """Projection replay (§3.2) over GTRs kept in `store` (default: records in `dtype`), via §3.3's ancestry."""
    geo, T, R, W = wl.geometry, wl.T, wl.R, wl.W
    store = store or GtrStore(geo, R, W, T, device=wl.device, record_dtype=dtype, alpha_dtype=dtype)
    anc = AncestryIndex(R, W, T, device=wl.device)
    s_ctx = wl.s_ctx.to(dtype)
    o = torch.empty(T, R, W, geo.hv, geo.v, dtype=dtype, device=wl.device)
    with full_precision():
        for t in range(T):
            if t > 0:
                anc.advance(wl.parents[t])
            qh_k, kh_k = normed_qk(wl, t, dtype)
            qh, kh = _per_value_head(qh_k, geo), _per_value_head(kh_k, geo)     # [R, W, HV, K]
            uq = torch.einsum("rhvk,rwhk->rwhv", s_ctx, qh)
            uk = torch.einsum("rhvk,rwhk->rwhv", s_ctx, kh)
            for j in range(t):
                slot = anc.table[:, :, j]
                a_j = _gather_beams(store.alpha[j], slot).to(dtype)[..., None]     # [R, W, HV, 1]
                d_j = _gather_beams(store.delta[j], slot).to(dtype)                # [R, W, HV, V]
                k_j = _per_value_head(_gather_beams(store.khat[j], slot).to(dtype), geo)
                uq = a_j * uq + d_j * (k_j * qh).sum(-1, keepdim=True)
                uk = a_j * uk + d_j * (k_j * kh).sum(-1, keepdim=True)
            alpha = torch.exp(wl.g[t].to(dtype))[..., None]
            delta = wl.beta[t].to(dtype)[..., None] * (wl.v[t].to(dtype) - alpha * uk)
            o[t] = alpha * uq + delta * (kh * qh).sum(-1, keepdim=True)
            store.append(t, alpha[..., 0], delta, kh_k)
    return o


class ReferenceFullStatePath(DecodePath):
    """Plain-torch per-beam FullState in fp32: the oracle, registered as a path so it runs like one."""

    name = "reference_fullstate"
    capturable = False

    def prepare(self, wl: Workload) -> None:
        self._shape = (wl.geometry, wl.R, wl.W, wl.T)

    def run(self, wl: Workload) -> torch.Tensor:
        return fullstate_decode(wl, torch.float32)

    def persistent_bytes(self) -> int:
        geo, R, W, _ = self._shape
        return R * W * geo.state_bytes

    def written_bytes(self) -> int:
        geo, R, W, T = self._shape
        return T * R * W * geo.state_bytes


class ReferenceReplayPath(DecodePath):
    """Plain-torch projection replay with fp32 records: the algorithm of OneLA without a fused kernel."""

    name = "reference_replay"
    capturable = False

    def prepare(self, wl: Workload) -> None:
        self.store = GtrStore(wl.geometry, wl.R, wl.W, wl.T, device=wl.device,
                              record_dtype=torch.float32, alpha_dtype=torch.float32)
        self._ctx_bytes = wl.s_ctx.numel() * 4 + wl.R * wl.W * wl.T * 4

    def run(self, wl: Workload) -> torch.Tensor:
        return replay_decode(wl, torch.float32, store=self.store)

    def persistent_bytes(self) -> int:
        return self.store.nbytes + self._ctx_bytes

    def written_bytes(self) -> int:
        return self.store.nbytes
