"""The decode's non-recurrent per-beam state: GDN conv windows and full-attention decode KV.

Two ways to make them follow the beam tree, one per kind of path (the recurrent state is the Stepper's):
- "ancestry" (OneLA, paper §3.3): each step appends its values to a store slot [t, r, b] that never moves;
  a beam reads its history through the ancestry table h_t(b, j) -- selection moves indices, never values.
- "copy" (FullState, and vLLM's per-sequence state): each beam owns its history; every step the child gets its
  parent's history (a copy by parents), as a serving framework forks a sequence's cache.
Both give every beam exactly its ancestors' values, so the two modes decode identically.

The conv windows are read and written by the conv's own pass (`artifact.model.blocks.conv_gates`): a window
entry is a (tensor, index) pair that the conv gathers as it reads, and what a step keeps for later steps --
ancestry: the step's input (store slot t); copy: the child's whole window -- comes back from that pass as fresh
tensors. So the window upkeep of either mode is stores of the conv's kernel, not kernels of its own.
"""
from __future__ import annotations

import torch

from artifact.ancestry import advance, gather_beams

MODES = ("ancestry", "copy")


def beam_state_mode(path) -> str:
    """The mode of a path (an artifact.paths.DecodePath): ancestry where the path declares `keeps_ancestry`,
    else per-beam copies, as a serving framework keeps them."""
    return "ancestry" if path.keeps_ancestry else "copy"


def window(h) -> torch.Tensor:
    """One entry of ConvHistory.history as a tensor: gathered here if it is a (tensor, index) pair."""
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
    """The width-1 (= P) previous pre-conv inputs of every beam of one GDN layer.

    `history(t)` gives each beam's P previous inputs, oldest first, for the conv to read; the conv returns what
    `keep` stores: the inputs it carries over (`carry` of them, the newest of the window it read) plus the
    step's input x, each a fresh [R, W, C] tensor written by the conv's pass.
    - ancestry (carry 0): the kept x is store slot t. An entry of step s >= 0 is (slot s, h_t[:, :, s]); one
      before step 0 is the prompt tail's row, broadcast over the request's beams.
    - copy (carry P - 1): the kept tensors are the child's own window, [its parent's P - 1 newest inputs, x]:
      every beam's whole window is materialised every step, as a serving framework's per-sequence conv state
      is. Each entry is (window tensor, parents): the child reads its parent's row. Step 0 reads the prompt
      tail (every beam's parent is the prompt).
    The kept tensors are fresh every step, so a step never overwrites what it reads. In a captured decode they
    are the graphs' own outputs: graph t reads what graph t-1 (ancestry: graphs 0..t-1) wrote, which holds
    because the decode replays its graphs in capture order (artifact.model.graphs); a copy-mode window is
    released once the next step's window replaced it, and nothing reads it afterwards.
    """

    def __init__(self, tree: BeamTree, channels: int, width: int, dtype, device):
        self.tree, self.P = tree, width - 1
        R, W, T = tree.R, tree.W, tree.T
        self.shape, self.dtype = (R, W, channels), dtype
        self.prompt_tail = torch.zeros(R, self.P, channels, dtype=dtype, device=device)
        self.carry = 0 if tree.mode == "ancestry" else self.P - 1
        self.slots: list = [None] * max(T, 1)          # ancestry: store slot of each step
        self.window: list = [None] * self.P             # copy: every beam's current window, oldest first

    def _tail(self, j: int) -> torch.Tensor:
        return self.prompt_tail[:, j][:, None].expand(self.shape)

    def history(self, t: int) -> list:
        """Each beam's P previous inputs at step t, oldest first: tensors [R, W, C] or (tensor, index [R, W])
        pairs, read as tensor[r, index[r, b]] (`window`)."""
        P = self.P
        if self.tree.mode == "ancestry":
            return [self._tail(P + s) if s < 0 else (self.slots[s], self.tree.cols[s]) for s in range(t - P, t)]
        if t == 0:
            return [self._tail(j) for j in range(P)]
        return [(w, self.tree.parents) for w in self.window]      # fork: the child reads its parent's window

    def keep(self, t: int, kept: list) -> None:
        """Store what the conv of step t returned: `carry` window entries, then x."""
        if len(kept) != self.carry + 1:
            raise ValueError(f"ConvHistory.keep: {len(kept)} tensors, expected {self.carry + 1}")
        if self.tree.mode == "ancestry":
            self.slots[t] = kept[0]
        else:
            self.window = list(kept)


class KvHistory:
    """Decode-time keys and values of every beam of one attention layer (the prompt KV is shared, not here).

    A step's own k, v go into `slot(t)` (the decoder's q / k norm + rotary pass writes them there, no copy of
    its own); in copy mode `fork(t)` first gives each child its parent's earlier rows; `own(t)` is then each
    beam's keys / values for the merge. `step` does all three from given k, v."""

    def __init__(self, tree: BeamTree, heads: int, dim: int, dtype, device):
        self.tree = tree
        R, W, T = tree.R, tree.W, max(tree.T, 1)
        shape = (T, R, W, heads, dim) if tree.mode == "ancestry" else (R, W, T, heads, dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)

    def slot(self, t: int) -> tuple:
        """Where step t's k, v [R, W, Hkv, D] go: views into the store (ancestry: slot t; copy: column t)."""
        if self.tree.mode == "ancestry":
            return self.k[t], self.v[t]
        return self.k[:, :, t], self.v[:, :, t]

    def fork(self, t: int) -> None:
        """Copy mode, t >= 1: each beam's rows of steps < t become its parent's (a serving framework's fork);
        nothing in ancestry mode, where beams read their ancestors' slots through the ancestry table."""
        if self.tree.mode == "copy" and t > 0:
            self.k[:, :, :t] = gather_beams(self.k[:, :, :t], self.tree.parents)
            self.v[:, :, :t] = gather_beams(self.v[:, :, :t], self.tree.parents)

    def own(self, t: int) -> tuple:
        """Each beam's decode keys / values of steps 0..t [R, W, t+1, Hkv, D] once slot t holds step t's --
        in ancestry mode from t = 1 on as `own_kv` tuples (store[:t], h_t columns, slot t), gathered where the
        merge reads them."""
        if self.tree.mode == "copy":
            return self.k[:, :, : t + 1], self.v[:, :, : t + 1]
        if t == 0:
            return self.k[0][:, :, None], self.v[0][:, :, None]
        cols = self.tree.cols[:t]
        return (self.k[:t], cols, self.k[t]), (self.v[:t], cols, self.v[t])

    def step(self, t: int, k: torch.Tensor, v: torch.Tensor) -> tuple:
        """Append step t's k, v [R, W, Hkv, D]; return `own(t)`."""
        self.fork(t)
        k_slot, v_slot = self.slot(t)
        k_slot.copy_(k)
        v_slot.copy_(v)
        return self.own(t)
