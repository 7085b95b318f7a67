"""The cost model: compulsory bytes and FLOPs of each decode algorithm, step by step (docs/methods.md §1, "The
cost model").

Every count a floor or a ratio rests on comes from here: a suite row's `compulsory_bytes`, `flops` and `floor_ms`
(sweeps.suites.operator), the traffic suite's FLOPs and so its arithmetic intensity (sweeps.suites.traffic_child),
beam_scaling's per-step floor, the launch floor's per-step bytes (artifact.launch_floor) and the full model's
recurrent part (artifact.model.cost). A path says which algorithm it runs through its class attribute `algorithm`
(artifact.paths.DecodePath), an instance of one of the classes below, and `DecodePath.cost(wl)` asks it; nothing
here or in the core looks a path up by name.

What `Algorithm.cost(wl)` returns: {"compulsory_bytes", "step_bytes", "flops", "step_flops", "rate"}: the totals,
the same counts step by step (every cost is a sum of per-step terms, so step t's own bytes and FLOPs are
`step_bytes[t]` and `step_flops[t]`, and the lists add up to the totals), and the ceiling key of the matrix rate
its arithmetic runs at ("fp32_flop_per_s", "tf32_flop_per_s", "bf16_flop_per_s").

Bytes belong to the algorithm, not to a kernel's tiling (docs/design.md §5): each tensor the algorithm must read
is read once per step that needs it, each it produces is written once.

FLOPs count docs/design.md §1 as the fewest operations an exact rearrangement of it needs (a floor is a lower
bound), a multiply-add counting 2 and any other arithmetic op 1. Per beam and step, with VK = V·K per value head
and the norms per key head:
- the norms: q-hat and k-hat, each a sum of squares (2K) and a scale (K): 6K;
- a state product S x: 2VK;
- one token folded into a state, decay first: alpha S (VK), delta = beta (v - (alpha S) k-hat) (2VK + 2V),
  S <- alpha S + delta k-hat^T (2VK): 5VK + 2V. With o = S q-hat (2VK) and the norms, a FullState step is
  7VK + 2V per value head + 6K per key head. (The recurrence as written, decay applied after the product,
  spends one more V: 7VK + 3V.)
- projection replay: the two S_ctx products (4VK); per replayed record j < t the two dots k-hat_j . q-hat_t and
  k-hat_j . k-hat_t (4K, once per key head: the value heads of a group share them) and the two accumulations
  u <- u + c_j delta_j (4V, the decays folded into the coefficients c_j); then the two accumulators scaled by the
  decay product (2V), delta_t (2V), o_t = u_q + delta_t (k-hat_t . q-hat_t) (2V + 2K per key head).
Scalar work per head (exp(g), the decay products, a norm's square root) is left out: it is O(1) per head and
record, under 0.2 % of any step at K = V = 128.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from artifact.ancestry import advance as advance_ancestry
from artifact.ancestry import distinct_per_depth

FP32 = "fp32_flop_per_s"
TF32 = "tf32_flop_per_s"
BF16 = "bf16_flop_per_s"
RATES = (FP32, TF32, BF16)

# The parts a step's FLOPs are counted in (`step_flop_parts`); "state_products" (S x with a [V, K] state) is what
# torch.utils.flop_counter counts for the plain-torch references, the rest is element-wise work.
FLOP_PARTS = ("state_products", "state_updates", "records", "vectors", "norms")


def token_input_bytes(geometry, elem: int = 2) -> int:
    """q, k, v of one token (input dtype, `elem` bytes) plus its fp32 g and beta, all heads."""
    g = geometry
    return elem * (2 * g.hk * g.k + g.hv * g.v) + 8 * g.hv


def gtr_bytes(geometry) -> tuple[int, int]:
    """(value-head part, key-head part) of one GTR of one beam slot, all heads (docs/design.md §1): alpha fp32 and
    delta bf16 per value head, k-hat bf16 per key head."""
    g = geometry
    return g.hv * (4 + 2 * g.v), g.hk * 2 * g.k


def _norms(geo, vectors: int) -> int:
    return geo.hk * vectors * 3 * geo.k


def fullstate_token_flops(geometry) -> dict[str, int]:
    """FLOPs of one FullState token (the update and o) of one beam, all heads, by part."""
    g = geometry
    vk = g.v * g.k
    return {"state_products": g.hv * 4 * vk, "state_updates": g.hv * 3 * vk, "records": 0,
            "vectors": g.hv * 2 * g.v, "norms": _norms(g, 2)}


def _add(a: dict[str, int], b: dict[str, int], times: int = 1) -> dict[str, int]:
    return {k: a.get(k, 0) + times * b.get(k, 0) for k in FLOP_PARTS}


def _check_rate(rate: str) -> None:
    if rate not in RATES:
        raise ValueError(f"rate={rate!r}: not a matrix-rate key; known: {', '.join(RATES)}")


def _result(step_bytes: list[int], step_flops: list[int], rate: str) -> dict:
    return {"compulsory_bytes": sum(step_bytes), "step_bytes": step_bytes, "flops": sum(step_flops),
            "step_flops": step_flops, "rate": rate}


def _no_tail(name: str, tail_len: int) -> None:
    if tail_len:
        raise ValueError(f"{name}: tail_len={tail_len!r}; a prompt tail is replayed only by TokenReplay")


class Algorithm:
    """What a path computes, for its cost. Subclasses: FullState, ProjectionReplay, RecordReplay, TokenReplay."""

    name = ""
    rate = FP32

    def step_flop_parts(self, geometry, t: int, tail_len: int = 0) -> dict[str, int]:
        """FLOPs of step t of one beam, all heads, by part (FLOP_PARTS)."""
        raise NotImplementedError

    def step_flops(self, geometry, N: int, T: int, tail_len: int = 0) -> list[int]:
        """FLOPs of each of T steps of N beams."""
        return [N * sum(self.step_flop_parts(geometry, t, tail_len).values()) for t in range(T)]

    def step_bytes(self, wl, tail_len: int = 0) -> list[int]:
        """Compulsory bytes (read + written) of each of wl.T steps."""
        raise NotImplementedError

    def cost(self, wl, tail_len: int = 0) -> dict:
        """The cost dict (module docstring) of `wl`: any object with geometry, R, W, T, q (for the input dtype) and,
        where the algorithm's bytes follow the beam tree, parents [T, R, W]."""
        _check_rate(self.rate)
        return _result(self.step_bytes(wl, tail_len), self.step_flops(wl.geometry, wl.R * wl.W, wl.T, tail_len),
                       self.rate)


@dataclass(frozen=True)
class FullState(Algorithm):
    """One [HV, V, K] state per beam, updated every step. Step 0 reads each request's s_ctx once (R states: every
    first beam's parent is the prompt) and writes N = R·W states; each later step reads N parent states and writes
    N. Per beam and step also its token's inputs, its parent index and its output o. `copies` counts the
    whole-state copies per beam and step (read + write) a framework's kernel interface forces on top (an in-place
    slot update: SGLang's, TRT-LLM's), or that the paper's explicit reorder into one persistent pool costs;
    `first_copies` is that count at step 0, where a path reading s_ctx directly copies nothing. Counting N state
    reads at step 0 would put this floor above the measured FullState times."""

    first_copies: int = 0
    copies: int = 0
    rate: str = FP32
    name = "fullstate"

    def step_flop_parts(self, geometry, t, tail_len=0):
        _no_tail(self.name, tail_len)
        return fullstate_token_flops(geometry)

    def step_bytes(self, wl, tail_len=0):
        _no_tail(self.name, tail_len)
        geo, R, N = wl.geometry, wl.R, wl.R * wl.W
        sb, elem = geo.state_bytes, wl.q.element_size()
        per_beam_io = token_input_bytes(geo, elem) + geo.hv * geo.v * elem + 4
        steps = []
        for t in range(wl.T):
            copies = self.first_copies if t == 0 else self.copies
            steps.append((R if t == 0 else N) * sb + N * sb + N * 2 * sb * copies + N * per_beam_io)
        return steps


@dataclass(frozen=True)
class ProjectionReplay(Algorithm):
    """OneLA's algorithm (paper §3.2): the shared S_ctx, the GTR store and the ancestry index, no per-beam state.
    Each step reads every beam's inputs and parent index, S_ctx once per request and every *distinct* ancestral
    record its live beams replay (a record several beams share is one read), and writes o (input dtype), the new
    GTRs and its ancestry rows (2t int32 per beam at step t)."""

    rate: str = FP32
    name = "projection_replay"

    def step_flop_parts(self, geometry, t, tail_len=0):
        _no_tail(self.name, tail_len)
        g = geometry
        return {"state_products": g.hv * 4 * g.v * g.k, "state_updates": 0,
                "records": t * (g.hv * 4 * g.v + g.hk * 4 * g.k),
                "vectors": g.hv * 6 * g.v + g.hk * 2 * g.k, "norms": _norms(g, 2)}

    def step_bytes(self, wl, tail_len=0):
        return [r + w for r, w in self.step_read_write(wl, tail_len)]

    def step_read_write(self, wl, tail_len=0) -> list[tuple[int, int]]:
        """(read, written) bytes of each step."""
        _no_tail(self.name, tail_len)
        geo, T, R, W = wl.geometry, wl.T, wl.R, wl.W
        esz = wl.q.element_size()
        rec_v, rec_k = gtr_bytes(geo)
        parents = wl.parents.cpu()
        anc = torch.zeros(R, W, T, dtype=torch.int32)      # step t's ancestry table, advanced step by step
        steps = []
        for t in range(T):
            if t:
                anc = advance_ancestry(anc, parents[t], t)
            read = R * W * (token_input_bytes(geo, esz) + 4)                    # inputs and parent index
            read += R * geo.state_bytes                                          # S_ctx
            read += int(distinct_per_depth(anc, t).sum()) * (rec_v + rec_k)     # replayed GTRs
            steps.append((read, R * W * (geo.hv * geo.v * esz + rec_v + rec_k + t * 4 * 2)))  # o, GTR, ancestry
        return steps


@dataclass(frozen=True)
class RecordReplay(Algorithm):
    """ReplaySSM over stored records (SGLang's ReplaySSM kernel): every beam keeps its own copy of its request's
    checkpoint (loaded at step 0: R states read, N written) and a ring of its ancestors' records (corrected delta,
    k-hat, g in fp32: `record_elem` bytes each). Step t reads the checkpoint and t ring records, writes one record,
    and gathers the ring along the parents (t records read + written). FLOPs: the state rebuilt from the
    checkpoint, its decay folded into one scale (VK) and t rank-1 records (2VK each), the two products S q-hat,
    S k-hat, then delta_t and o_t as projection replay ends (4V + 2K per key head)."""

    record_elem: int = 4
    rate: str = FP32
    name = "record_replay"

    def step_flop_parts(self, geometry, t, tail_len=0):
        _no_tail(self.name, tail_len)
        g = geometry
        vk = g.v * g.k
        return {"state_products": g.hv * 4 * vk, "state_updates": g.hv * (1 + 2 * t) * vk, "records": 0,
                "vectors": g.hv * 4 * g.v + g.hk * 2 * g.k, "norms": _norms(g, 2)}

    def step_bytes(self, wl, tail_len=0):
        _no_tail(self.name, tail_len)
        geo, N = wl.geometry, wl.R * wl.W
        sb, elem = geo.state_bytes, wl.q.element_size()
        record = self.record_elem * (geo.hv * geo.v + geo.hk * geo.k + geo.hv)
        tok = token_input_bytes(geo, elem)
        steps = []
        for t in range(wl.T):
            load = wl.R * sb + N * sb if t == 0 else 0          # checkpoint loaded into every beam's slot
            steps.append(load + N * (sb + t * record + record + 2 * t * record + tok + geo.hv * geo.v * elem))
        return steps


@dataclass(frozen=True)
class TokenReplay(Algorithm):
    """ReplaySSM over raw tokens (vLLM's prefix-cache replay): at step t every beam loads its request's checkpoint
    and replays `tail_len` prompt-tail tokens plus its t earlier tokens, then decodes its current one. Bytes: the
    checkpoint, the tail_len + t + 1 tokens' inputs (the t earlier ones first gathered along the ancestry: read +
    written) and o. FLOPs: each replayed token folded into the state (5VK + 2V, k-hat's norm 3K), then the current
    token as FullState."""

    rate: str = FP32
    name = "token_replay"

    def step_flop_parts(self, geometry, t, tail_len=0):
        g = geometry
        replayed = {"state_products": g.hv * 2 * g.v * g.k, "state_updates": g.hv * 3 * g.v * g.k, "records": 0,
                    "vectors": g.hv * 2 * g.v, "norms": _norms(g, 1)}
        return _add(fullstate_token_flops(g), replayed, tail_len + t)

    def step_bytes(self, wl, tail_len=0):
        geo, N = wl.geometry, wl.R * wl.W
        sb, elem = geo.state_bytes, wl.q.element_size()
        tok = token_input_bytes(geo, elem)
        return [N * (sb + (tail_len + t + 1) * tok + 2 * t * tok + geo.hv * geo.v * elem) for t in range(wl.T)]
