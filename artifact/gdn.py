"""The Gated DeltaNet step in plain torch (docs/design.md §1): the one definition that the FullState references
(artifact.reference), the workload's prefill (artifact.workload.prefill_state), the model's token-by-token GDN
(artifact.model.gdn_chunk) and the baselines' layout probe build on.

    q-hat = l2norm(q) K^-1/2,  k-hat = l2norm(k)                   (normed_qk, per key head)
    S <- alpha S;  delta = beta (v - S k-hat);  S <- S + delta k-hat^T;  o = S q-hat      (gdn_step)

The state is decayed first, then read: the order the frameworks' recurrent kernels use. Value head h reads key
head h // (HV / HK) (per_value_head).
"""
from __future__ import annotations

import torch


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum x^2 + eps), the frameworks' use_qk_l2norm_in_kernel convention (docs/design.md §1)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def normed_qk(q: torch.Tensor | None, k: torch.Tensor, dtype) -> tuple[torch.Tensor | None, torch.Tensor]:
    """q-hat = l2norm(q) K^-1/2 and k-hat = l2norm(k) in `dtype`, per key head [..., HK, K] (q may be None)."""
    kh = l2norm(k.to(dtype))
    return (None if q is None else l2norm(q.to(dtype)) * k.shape[-1] ** -0.5), kh


def per_value_head(x: torch.Tensor, group: int) -> torch.Tensor:
    """[..., HK, K] -> [..., HV, K] with HV = group * HK: value head h uses key head h // group."""
    return x.repeat_interleave(group, dim=-2)


def gdn_step(S: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, kh: torch.Tensor, v: torch.Tensor,
             qh: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One GDN step of states S [..., V, K] in S's dtype: alpha = exp(g), beta [...], normed k-hat / q-hat
    [..., K] per value head, v [..., V]. Returns the new states and o = S_new q-hat [..., V] (None without q)."""
    S = alpha[..., None, None] * S
    delta = beta[..., None] * (v - torch.einsum("...vk,...k->...v", S, kh))
    S = S + delta[..., None] * kh[..., None, :]
    return S, (None if qh is None else torch.einsum("...vk,...k->...v", S, qh))
