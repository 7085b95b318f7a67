"""Append-only store of GDN Transition Records (paper §3.2).

A GTR r_t = (alpha_t, delta_t, k-hat_t) is what one decode step adds to one beam's state: S_t = alpha_t S_{t-1}
+ delta_t k-hat_t^T. Step t writes slot [t, r, b] once; nothing ever moves it afterwards.

k-hat is stored once per key head ([.., HK, K]) rather than per value head: under GQA the HV/HK value heads
of a group share it. For HK = HV (Qwen3.5-0.8B) this is byte-identical to the paper's 4 + 2V + 2K per
value head; for grouped geometries it is smaller (docs/design.md §1).
"""
from __future__ import annotations

import torch

from artifact.workload import Geometry


class GtrStore:
    def __init__(self, geometry: Geometry, R: int, W: int, T: int, device="cpu",
                 record_dtype=torch.bfloat16, alpha_dtype=torch.float32):
        g = geometry
        # In memory [T, R, H, W(, D)]: one head's records of one step are contiguous, so a beam tile's gathered
        # ancestral rows lie close together (docs/design.md §1; kernels/NOTES.md §5, "GTR layout"). The
        # attributes are [T, R, W, H(, D)] views of them, the order every reader indexes by; a record's row in
        # memory is ((t * R + r) * H + h) * W + b (the kernels' `_rec`).
        self.alpha = torch.empty(T, R, g.hv, W, dtype=alpha_dtype, device=device).transpose(2, 3)
        self.delta = torch.empty(T, R, g.hv, W, g.v, dtype=record_dtype, device=device).transpose(2, 3)
        self.khat = torch.empty(T, R, g.hk, W, g.k, dtype=record_dtype, device=device).transpose(2, 3)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.alpha, self.delta, self.khat

    @property
    def nbytes(self) -> int:
        """Capacity of the whole store (all T steps)."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def step_bytes(self) -> int:
        """Bytes one decode step appends."""
        return self.nbytes // self.alpha.shape[0]

    def append(self, t: int, alpha: torch.Tensor, delta: torch.Tensor, khat: torch.Tensor) -> None:
        self.alpha[t] = alpha
        self.delta[t] = delta
        self.khat[t] = khat
