"""Beam ancestry index (paper §3.3): which physical GTR slot each live beam replays at each depth.

h_t(b, j) = h_{t-1}(pi_t(b), j) for j < t-1, and h_t(b, t-1) = pi_t(b). Selection (prune, reorder, fan-out)
gathers these int32 indices; the GTR records themselves are append-only and never move.
"""
from __future__ import annotations

import torch


def gather_beams(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [R, W, ...], idx [R, W] -> x[r, idx[r, b], ...] (a new tensor): each beam takes the row its index names."""
    index = idx.long().reshape(*idx.shape, *([1] * (x.dim() - 2))).expand(*idx.shape, *x.shape[2:])
    return torch.gather(x, 1, index)


def advance(table: torch.Tensor, parents_t: torch.Tensor, t: int) -> torch.Tensor:
    """Ancestry table of step t from that of step t-1: a gather of indices, never of records.

    table: int32 [R, W, T] (columns >= t-1 unused); parents_t: [R, W] parent beam of each beam at step t.
    """
    if table.dim() != 3:
        raise ValueError(f"ancestry table must be [R, W, T], got shape {tuple(table.shape)}")
    R, W, T = table.shape
    if tuple(parents_t.shape) != (R, W):
        raise ValueError(f"parents_t has shape {tuple(parents_t.shape)}, expected {(R, W)}")
    if not 1 <= t < T + 1:
        raise ValueError(f"step t={t} out of range 1..{T}")
    idx = parents_t.long()
    new = torch.gather(table, 1, idx[..., None].expand(R, W, T)).contiguous()
    new[:, :, t - 1] = parents_t.to(table.dtype)
    return new


def build(parents: torch.Tensor) -> torch.Tensor:
    """Ancestry tables of every step: int32 [T, R, W, T]; entry [t, r, b, j] (j < t) is h_t(b, j)."""
    T, R, W = parents.shape
    out = torch.zeros(T, R, W, T, dtype=torch.int32, device=parents.device)
    table = out[0]
    for t in range(1, T):
        table = advance(table, parents[t], t)
        out[t] = table
    return out


class AncestryIndex:
    """The live [R, W, T] int32 ancestry table, advanced once per decode step."""

    def __init__(self, R: int, W: int, T: int, device="cpu"):
        self.table = torch.zeros(R, W, T, dtype=torch.int32, device=device)
        self.step = 0

    def advance(self, parents_t: torch.Tensor) -> torch.Tensor:
        self.step += 1
        self.table = advance(self.table, parents_t, self.step)
        return self.table

    @property
    def nbytes(self) -> int:
        return self.table.numel() * self.table.element_size()


def distinct_per_depth(table: torch.Tensor, depth: int) -> torch.Tensor:
    """Distinct records each request's live beams replay at every depth j < `depth`: int64 [R, depth], entry
    [r, j] = the number of distinct values of table[r, :, j] (an ancestry table [R, W, >= depth]). A record
    several beams share counts once: this is what a step reads of the GTR store (artifact.cost)."""
    if table.dim() != 3 or not 0 <= depth <= table.shape[2]:
        raise ValueError(f"distinct_per_depth: table {tuple(table.shape)} must be [R, W, T] with depth={depth} <= T")
    cols = table[:, :, :depth].sort(dim=1).values
    return 1 + (cols[:, 1:] != cols[:, :-1]).sum(dim=1, dtype=torch.int64)


def distinct_ancestors(parents: torch.Tensor, step: int | None = None) -> torch.Tensor:
    """How fast a lineage's beams coalesce: for the W live beams of step `step` (default T - 1, the last) of
    parents [T, R, W] (row 0 ignored), the number of distinct ancestors at each depth j < step, int64 [R, step].
    W at every depth means no two beams share an ancestor; 1 means they all descend from one beam there."""
    T = parents.shape[0]
    step = T - 1 if step is None else step
    if parents.dim() != 3 or not 0 <= step < T:
        raise ValueError(f"distinct_ancestors: parents {tuple(parents.shape)} must be [T, R, W], step={step} in [0, {T})")
    R, W = parents.shape[1:]
    table = torch.zeros(R, W, max(T, 1), dtype=torch.int32, device=parents.device)
    for t in range(1, step + 1):
        table = advance(table, parents[t], t)
    return distinct_per_depth(table, step)
