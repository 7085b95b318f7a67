"""The decode's non-recurrent per-beam state: GDN conv windows and full-attention decode KV.

Two ways to make them follow the beam tree, one per kind of path (the recurrent state is the Stepper's):
- "ancestry" (OneLA, paper §3.3): each step appends its values to a store slot [t, r, b] that never moves;
  a beam reads its history through the ancestry table h_t(b, j) -- selection moves indices, never values.
- "copy" (FullState, and vLLM's per-sequence state): each beam owns its history; every step gathers the parent's
  history into the child (a copy by parents), as a serving framework forks a sequence's cache.
Both give every beam exactly its ancestors' values, so the two modes decode identically.
"""
from __future__ import annotations

import torch

from artifact.ancestry import advance

MODES = ("ancestry", "copy")


def gather_beams(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [R, W, ...], idx [R, W] -> x[r, idx[r, b], ...] (a new tensor)."""
    index = idx.long().reshape(*idx.shape, *([1] * (x.dim() - 2))).expand(*idx.shape, *x.shape[2:])
    return torch.gather(x, 1, index)


def window(h) -> torch.Tensor:
    """One entry of ConvHistory.history as a tensor: gathered here if it is a (store slice, index) pair."""
    return gather_beams(*h) if isinstance(h, tuple) else h


def own_kv(h) -> torch.Tensor:
    """KvHistory.step's keys or values as a tensor [R, W, n, Hkv, D]: an ancestry-mode
    (store[:t], cols[:t], current) tuple is gathered and joined here, where the (compiled) attention merge
    reads it, so that the gather is an indexed load inside the merge instead of kernels of its own."""
    if not isinstance(h, tuple):
        return h
    store, cols, cur = h                                   # [t, R, W, Hkv, D], [t, R, W], [R, W, Hkv, D]
    t, R = cols.shape[0], cols.shape[1]
    steps = torch.arange(t, device=cols.device)[:, None, None]
    reqs = torch.arange(R, device=cols.device)[None, :, None]
    return torch.cat([store[steps, reqs, cols].permute(1, 2, 0, 3, 4), cur[:, :, None]], dim=2)


class BeamTree:
    """The decode's own beam bookkeeping: this step's parents and, in ancestry mode, the [R, W, T] table h_t
    and its step-major copy `cols` [T, R, W] (one small copy per step): a column cols[s] has the same shape
    and strides for every T, so the compiled conv and merge that take columns compile once per history
    structure, not once per T as well."""

    def __init__(self, mode: str, R: int, W: int, T: int, device):
        if mode not in MODES:
            raise ValueError(f"unknown beam-state mode {mode!r}; known: {MODES}")
        self.mode, self.R, self.W, self.T = mode, R, W, T
        self.parents = torch.zeros(R, W, dtype=torch.int32, device=device)
        self.table = self.cols = None
        if mode == "ancestry":
            self.table = torch.zeros(R, W, max(T, 1), dtype=torch.int32, device=device)
            self.cols = torch.zeros(max(T, 1), R, W, dtype=torch.int32, device=device)

    def advance(self, t: int) -> None:
        """Step t >= 1 (ancestry mode): h_t from h_{t-1} and this step's parents (indices only)."""
        if self.mode == "ancestry" and t >= 1:
            self.table.copy_(advance(self.table, self.parents, t))
            self.cols.copy_(self.table.permute(2, 0, 1))


class ConvHistory:
    """The width-1 previous pre-conv inputs of every beam of one GDN layer."""

    def __init__(self, tree: BeamTree, channels: int, width: int, dtype, device):
        self.tree, self.P = tree, width - 1
        R, W, T = tree.R, tree.W, tree.T
        self.prompt_tail = torch.zeros(R, self.P, channels, dtype=dtype, device=device)
        if tree.mode == "ancestry":
            self.store = torch.empty(max(T, 1), R, W, channels, dtype=dtype, device=device)
        else:
            self.buf = torch.empty(R, W, self.P, channels, dtype=dtype, device=device)

    def history(self, t: int, x: torch.Tensor) -> list:
        """Record x [R, W, C] as step t's pre-conv input; return each beam's P previous inputs, oldest first.

        ancestry: reads through h_t (the prompt's tail for steps before 0) and appends x to store[t]. An
        ancestral input comes back as a (store[s], h_t[:, :, s]) pair (the column taken from `cols`), not
        gathered: the conv gathers it as it reads (`window`), so under torch.compile the gather is an indexed
        load inside the conv's kernel instead of a copy kernel of its own (three per layer and step).
        copy: the child takes its parent's window (a gather-copy), then the window shifts in x.
        """
        P = self.P
        if self.tree.mode == "ancestry":
            hist = [self.prompt_tail[:, P + s][:, None].expand_as(x) if s < 0
                    else (self.store[s], self.tree.cols[s]) for s in range(t - P, t)]
            self.store[t] = x
            return hist
        if t == 0:
            src = self.prompt_tail[:, None].expand(-1, self.tree.W, -1, -1)
        else:
            src = gather_beams(self.buf, self.tree.parents)                 # fork: child gets the parent's window
        self.buf[:, :, : P - 1] = src[:, :, 1:]
        self.buf[:, :, P - 1] = x
        return list(src.unbind(2))

    def nbytes(self) -> int:
        t = self.store if self.tree.mode == "ancestry" else self.buf
        return t.numel() * t.element_size()


class KvHistory:
    """Decode-time keys and values of every beam of one attention layer (the prompt KV is shared, not here)."""

    def __init__(self, tree: BeamTree, heads: int, dim: int, dtype, device):
        self.tree = tree
        R, W, T = tree.R, tree.W, max(tree.T, 1)
        shape = (T, R, W, heads, dim) if tree.mode == "ancestry" else (R, W, T, heads, dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)

    def step(self, t: int, k: torch.Tensor, v: torch.Tensor) -> tuple:
        """Append step t's k, v [R, W, Hkv, D]; return each beam's decode keys/values [R, W, t+1, Hkv, D] --
        in ancestry mode as `own_kv` tuples (gathered where the merge reads them)."""
        if self.tree.mode == "ancestry":
            self.k[t] = k
            self.v[t] = v
            if t == 0:
                return k[:, :, None], v[:, :, None]
            cols = self.tree.cols[:t]
            return (self.k[:t], cols, k), (self.v[:t], cols, v)
        if t > 0:                                                           # fork: copy the parent's history
            self.k[:, :, :t] = gather_beams(self.k[:, :, :t], self.tree.parents)
            self.v[:, :, :t] = gather_beams(self.v[:, :, :t], self.tree.parents)
        self.k[:, :, t] = k
        self.v[:, :, t] = v
        return self.k[:, :, : t + 1], self.v[:, :, : t + 1]

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()
