"""Gated DeltaNet over a whole prompt in the chunked (matrix) form prefill uses (tests/oracles.py holds the
token-by-token form it is tested against).

It takes raw q, k [B, L, HK, K] (L2-normalised inside, q also scaled by K^-1/2, like the frameworks'
use_qk_l2norm_in_kernel=True), v [B, L, HV, V], g, beta [B, L, HV], an optional initial state [B, HV, V, K]
(our layout: o = S q), and returns o [B, L, HV, V] fp32 and the final state [B, HV, V, K] fp32.

Chunked form (the WY / UT-transform derivation of the GDN paper, as in FLA's chunk kernels): within a chunk with
cumulative log-decay c_i = sum_{j<=i} g_j, the deltas solve (I + A) delta = beta v - (beta e^c k) S0^T with
A_ij = beta_i e^(c_i - c_j) k_i.k_j (j < i); then o = (q e^c) S0^T + [q k^T e^(c_i - c_j)]_{j<=i} delta and
S_end = e^(c_last) S0 + delta^T (k e^(c_last - c)). Only the S0-dependent part is sequential across chunks.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from artifact.gdn import gdn_step, normed_qk, per_value_head


def _prep(q, k, v, g, beta, dtype):
    grp = v.shape[2] // k.shape[2]
    qh, kh = normed_qk(q, k, dtype)
    return per_value_head(qh, grp), per_value_head(kh, grp), v.to(dtype), g.to(dtype), beta.to(dtype)


def _check(q, k, v, g, beta, initial_state):
    B, L, hk, K = k.shape
    if q.shape != k.shape or v.dim() != 4 or v.shape[:2] != (B, L) or v.shape[2] % hk:
        raise ValueError(f"gdn: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit "
                         f"[B, L, HK, K] / [B, L, HV, V] with HV a multiple of HK")
    hv, V = v.shape[2], v.shape[3]
    if g.shape != (B, L, hv) or beta.shape != (B, L, hv):
        raise ValueError(f"gdn: g {tuple(g.shape)} / beta {tuple(beta.shape)} must be {(B, L, hv)}")
    if initial_state is not None and tuple(initial_state.shape) != (B, hv, V, K):
        raise ValueError(f"gdn: initial_state has shape {tuple(initial_state.shape)}, expected {(B, hv, V, K)}")


def chunk_gated_delta(q, k, v, g, beta, initial_state=None, chunk: int = 64, dtype=torch.float32):
    """Chunked GDN over the sequence (matrix form, sequential only across chunks); the recurrence's result."""
    _check(q, k, v, g, beta, initial_state)
    if chunk < 1:
        raise ValueError(f"gdn: chunk must be >= 1, got {chunk}")
    qh, kh, v, g, beta = _prep(q, k, v, g, beta, dtype)
    B, L, hv, V = v.shape
    K = kh.shape[-1]
    S = torch.zeros(B, hv, V, K, dtype=dtype, device=v.device) if initial_state is None \
        else initial_state.to(dtype).clone()
    if L == 0:
        return torch.empty(B, 0, hv, V, dtype=dtype, device=v.device), S
    pad = -L % chunk
    # [B, HV, N, C, D]; padded tokens have beta = 0 and g = 0, so they leave the state unchanged
    to_chunks = lambda x: F.pad(x.transpose(1, 2), (0, 0, 0, pad)).unflatten(2, (-1, chunk))  # noqa: E731
    qc, kc, vc = to_chunks(qh), to_chunks(kh), to_chunks(v)
    gc = F.pad(g.transpose(1, 2), (0, pad)).unflatten(2, (-1, chunk))
    bc = F.pad(beta.transpose(1, 2), (0, pad)).unflatten(2, (-1, chunk))
    c = gc.cumsum(-1)                                                    # [B, HV, N, C]
    diff = c[..., :, None] - c[..., None, :]                             # c_i - c_j
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=v.device).tril()
    decay = torch.where(lower, diff, torch.full_like(diff, float("-inf"))).exp()   # e^(c_i - c_j), j <= i
    strict = decay * (~torch.eye(chunk, dtype=torch.bool, device=v.device))
    A = bc[..., None] * (kc @ kc.transpose(-1, -2)) * strict
    M = A + torch.eye(chunk, dtype=dtype, device=v.device)
    u = torch.linalg.solve_triangular(M, bc[..., None] * vc, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(M, (bc * c.exp())[..., None] * kc, upper=False, unitriangular=True)
    attn = (qc @ kc.transpose(-1, -2)) * decay
    q_dec = qc * c.exp()[..., None]
    k_dec = kc * (c[..., -1:] - c).exp()[..., None]
    chunk_decay = c[..., -1].exp()[..., None, None]                     # [B, HV, N, 1, 1]
    o = torch.empty_like(vc)
    for n in range(qc.shape[2]):
        St = S.transpose(-1, -2)                                         # [B, HV, K, V]
        delta = u[:, :, n] - w[:, :, n] @ St
        o[:, :, n] = q_dec[:, :, n] @ St + attn[:, :, n] @ delta
        S = S * chunk_decay[:, :, n] + delta.transpose(-1, -2) @ k_dec[:, :, n]
    o = o.flatten(2, 3)[:, :, :L].transpose(1, 2)
    return o, S
