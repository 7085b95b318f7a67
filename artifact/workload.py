"""Geometries, shapes and seeded decode workloads (docs/design.md §3).

A `Workload` holds the identical inputs and beam lineage every path decodes, so paths differ only in how
they keep state. Inputs follow the model's distributions: q, k, v ~ N(0, 1) before the in-kernel L2 norm;
the log-decay g = -exp(A_log) * softplus(a + dt_bias) with A = exp(A_log) ~ U(0, 16) and dt_bias = 1 per
head (Qwen3.5's GatedDeltaNet initialisation) and a ~ N(0, 1) per token; beta = sigmoid(b) with b ~ N(0, 1).
At K = V = 128 after a 1024-token prefill this gives max |o| ~ 0.06, well inside the bf16 output budget (a
Mamba2-style dt initialisation gives long-memory heads and |o| up to 0.15, where bf16 output rounding alone
reaches the gate: docs/design.md §2). `s_ctx` is the fp32 state after really running the recurrence over a
random prompt with the same distributions, so error bounds are measured at a post-prefill magnitude.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from artifact.gdn import gdn_step, normed_qk, per_value_head

# The synthetic lineages, drawn from the seed at any (R, W, T): tests and suites iterate these.
LINEAGES = ("beam", "identity", "single_parent", "reversed")
# The recorded lineages, by name: the parents a real beam search chose, loaded from a data file of this package
# (`LINEAGE_DATA_DIR/<name>.npz`, provenance in `<name>.json`). A file covers its recorded (T, R) and exactly its
# recorded W, so these are accepted by name and never iterated with the synthetic ones: a cell the file does not
# cover, or a missing file, is refused with `LineageUnavailable` (a suite records it as a skip).
RECORDED_LINEAGES = {
    "model": "python -m tools.record_lineage",   # Qwen3.5-0.8B's own beam search (tools/record_lineage.py)
}
KNOWN_LINEAGES = LINEAGES + tuple(RECORDED_LINEAGES)
LINEAGE_DATA_DIR = Path(__file__).resolve().parent / "data"


class LineageUnavailable(ValueError):
    """A recorded lineage that cannot serve a workload: its data file is missing, or it does not cover the
    workload's T, R or W. The message names the file, the values and the command that records it."""


@dataclass(frozen=True)
class Geometry:
    """Recurrent-state geometry of one GDN layer: key heads, value heads, key dim, value dim."""

    hk: int
    hv: int
    k: int
    v: int

    def __post_init__(self):
        for field in ("hk", "hv", "k", "v"):
            val = getattr(self, field)
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise ValueError(f"Geometry.{field} must be a positive int, got {val!r}")
        if self.hv % self.hk:
            raise ValueError(f"Geometry: hv={self.hv} is not a multiple of hk={self.hk} (GQA needs HV = n*HK)")

    @property
    def group(self) -> int:
        """Value heads per key head (GQA): value head hv uses key head hv // group."""
        return self.hv // self.hk

    @property
    def state_bytes(self) -> int:
        """One fp32 [HV, V, K] recurrent state (one beam, all value heads)."""
        return self.hv * self.v * self.k * 4


# The nine operator-suite geometries (paper §4.1: HK 4-32, HV 4-64, K 128-256, V 128-512), by name, with the
# model each comes from. "range point" rows are not a released model: they fill the paper's stated ranges.
GEOMETRIES: dict[str, Geometry] = {
    "qwen3_5_0_8b": Geometry(16, 16, 128, 128),   # Qwen3.5-0.8B / 2B config.json (linear_* fields)
    "qwen3_5_9b": Geometry(16, 32, 128, 128),     # Qwen3.5-9B / 35B-A3B; Qwen3-Next-80B-A3B
    "qwen3_5_27b": Geometry(16, 48, 128, 128),    # Qwen3.5-27B
    "qwen3_5_397b": Geometry(16, 64, 128, 128),   # Qwen3.5-397B-A17B / 122B-A10B
    "kimi_linear": Geometry(32, 32, 128, 128),    # Kimi-Linear-48B-A3B delta-rule (KDA) state shape
    "gdn_1_3b": Geometry(6, 6, 256, 512),         # FLA GatedDeltaNet defaults (hidden 2048, head_dim 256, 6 heads, expand_v 2)
    "gdn_small": Geometry(4, 4, 128, 256),        # FLA GatedDeltaNet at hidden 512: 4 heads x 128, expand_v 2
    "range_k256_v256": Geometry(8, 8, 256, 256),  # range point: K = V = 256
    "range_hk4_hv16": Geometry(4, 16, 128, 256),  # range point: HK = 4 with 4x grouped values
}


def get_geometry(geometry: Geometry | str) -> Geometry:
    if isinstance(geometry, Geometry):
        return geometry
    if isinstance(geometry, str) and geometry in GEOMETRIES:
        return GEOMETRIES[geometry]
    raise ValueError(f"unknown geometry {geometry!r}; known: {', '.join(GEOMETRIES)}")


@dataclass(frozen=True)
class Shape:
    """One decode problem: R requests x W beams x T decode calls (O = T + 1 output tokens)."""

    R: int
    W: int
    T: int

    def __post_init__(self):
        for field in ("R", "W", "T"):
            val = getattr(self, field)
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise ValueError(f"Shape.{field} must be a positive int, got {val!r}")

    @property
    def O(self) -> int:  # noqa: E743 - the paper's name
        return self.T + 1


@dataclass
class Workload:
    """Inputs and lineage of one decode problem; fields, shapes and dtypes in docs/design.md §3."""

    geometry: Geometry
    q: torch.Tensor        # [T, R, W, HK, K]
    k: torch.Tensor        # [T, R, W, HK, K]
    v: torch.Tensor        # [T, R, W, HV, V]
    g: torch.Tensor        # [T, R, W, HV] fp32, log-decay (< 0)
    beta: torch.Tensor     # [T, R, W, HV] fp32 in (0, 1)
    parents: torch.Tensor  # [T, R, W] int32; row t: parent (beam index at step t-1); row 0 ignored
    s_ctx: torch.Tensor    # [R, HV, V, K] fp32
    lineage: str = "beam"
    seed: int = 0
    prompt_len: int = 0

    def __post_init__(self):
        validate_workload(self)

    @property
    def T(self) -> int:
        return self.q.shape[0]

    @property
    def R(self) -> int:
        return self.q.shape[1]

    @property
    def W(self) -> int:
        return self.q.shape[2]

    @property
    def shape(self) -> Shape:
        return Shape(self.R, self.W, self.T)

    @property
    def device(self) -> torch.device:
        return self.q.device

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f: getattr(self, f) for f in ("q", "k", "v", "g", "beta", "parents", "s_ctx")}

    def clone(self) -> "Workload":
        return dataclasses.replace(self, **{n: t.clone() for n, t in self.tensors().items()})

    def copy_(self, other: "Workload") -> "Workload":
        """Copy `other`'s values into this workload's tensors in place (static buffers of a captured graph)."""
        for name, t in self.tensors().items():
            src = getattr(other, name)
            if src.shape != t.shape or src.dtype != t.dtype:
                raise ValueError(f"copy_: field {name} is {tuple(src.shape)} {src.dtype}, "
                                 f"expected {tuple(t.shape)} {t.dtype}")
            t.copy_(src)
        return self


def validate_workload(wl: Workload) -> None:
    """Raise ValueError naming the first bad field; paths may rely on a validated workload."""
    geo = wl.geometry
    if not isinstance(geo, Geometry):
        raise ValueError(f"workload.geometry must be a Geometry, got {geo!r}")
    if wl.q.dim() != 5:
        raise ValueError(f"q must be [T, R, W, HK, K], got shape {tuple(wl.q.shape)}")
    T, R, W = wl.q.shape[:3]
    if T < 1:
        raise ValueError(f"T must be >= 1 decode step, got T={T}")
    expect = {
        "q": (T, R, W, geo.hk, geo.k),
        "k": (T, R, W, geo.hk, geo.k),
        "v": (T, R, W, geo.hv, geo.v),
        "g": (T, R, W, geo.hv),
        "beta": (T, R, W, geo.hv),
        "parents": (T, R, W),
        "s_ctx": (R, geo.hv, geo.v, geo.k),
    }
    for name, shape in expect.items():
        got = tuple(getattr(wl, name).shape)
        if got != shape:
            raise ValueError(f"{name} has shape {got}, expected {shape} for geometry {geo} and T,R,W={T},{R},{W}")
    if wl.k.dtype != wl.q.dtype or wl.v.dtype != wl.q.dtype:
        raise ValueError(f"q, k, v must share one dtype, got {wl.q.dtype}, {wl.k.dtype}, {wl.v.dtype}")
    for name in ("g", "beta", "s_ctx"):
        if getattr(wl, name).dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{name} must be float32 (or float64), got {getattr(wl, name).dtype}")
    if wl.parents.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"parents must be int32, got {wl.parents.dtype}")
    if T > 1:
        p = wl.parents[1:]
        lo, hi = int(p.min()), int(p.max())
        if lo < 0 or hi >= W:
            raise ValueError(f"parents out of range: values in [{lo}, {hi}], must be in [0, {W - 1}] (W={W})")
    if wl.lineage not in KNOWN_LINEAGES:
        raise ValueError(f"unknown lineage {wl.lineage!r}; known: {', '.join(KNOWN_LINEAGES)}")


def lineage_file(name: str) -> Path:
    """The data file of recorded lineage `name` (ValueError naming it where it is not a recorded lineage)."""
    if name not in RECORDED_LINEAGES:
        raise ValueError(f"{name!r} is not a recorded lineage; recorded: {', '.join(RECORDED_LINEAGES)}")
    return LINEAGE_DATA_DIR / f"{name}.npz"


def save_lineage(path: Path, parents: torch.Tensor, provenance: dict) -> None:
    """Write a recorded lineage: parents [T, R, W] (row 0 zeros: the workload's convention) as int16 in a
    compressed .npz at `path`, and `provenance` (with T, R, W added) as JSON beside it (same stem, .json)."""
    path = Path(path)
    if parents.dim() != 3:
        raise ValueError(f"parents must be [T, R, W], got shape {tuple(parents.shape)}")
    T, R, W = parents.shape
    if W > 32768:
        raise ValueError(f"W={W}: int16 parents hold W <= 32768")
    p = parents.detach().to("cpu", torch.int64)
    if T > 1 and (int(p[1:].min()) < 0 or int(p[1:].max()) >= W):
        raise ValueError(f"parents out of range: values in [{int(p[1:].min())}, {int(p[1:].max())}], W={W}")
    p[0] = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, parents=p.numpy().astype(np.int16))
    meta = {**provenance, "T": T, "R": R, "W": W}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load_lineage(path: Path) -> tuple[torch.Tensor, dict]:
    """A recorded lineage's parents int32 [T, R, W] and its provenance (the JSON beside it; {} if absent)."""
    path = Path(path)
    with np.load(path) as data:
        parents = torch.from_numpy(data["parents"].astype(np.int32))
    meta = path.with_suffix(".json")
    return parents, (json.loads(meta.read_text()) if meta.exists() else {})


def recorded_parents(name: str, T: int, R: int, W: int) -> torch.Tensor:
    """The first T steps and R requests of recorded lineage `name`, int32 [T, R, W] on the CPU; LineageUnavailable
    naming the file and the command that records it where the file is missing, and naming the values where it
    does not cover T or R, or was recorded at another W (a search of other width chooses other parents)."""
    path = lineage_file(name)
    command = RECORDED_LINEAGES[name]
    if not path.exists():
        raise LineageUnavailable(f"lineage {name!r}: its data file {path} is missing; record it on a GPU with "
                                 f"`{command}` (tools/record_lineage.py)")
    parents, _ = load_lineage(path)
    Tr, Rr, Wr = parents.shape
    if W != Wr:
        raise LineageUnavailable(f"lineage {name!r} ({path.name}) was recorded at W={Wr}: W={W} is not covered "
                                 f"(W must equal the recorded width); `{command} --W {W}` records another")
    if T > Tr or R > Rr:
        raise LineageUnavailable(f"lineage {name!r} ({path.name}) covers T <= {Tr}, R <= {Rr}: T={T}, R={R} is not "
                                 f"covered; `{command} --O {max(T, Tr) + 1} --R {max(R, Rr)}` records a larger one")
    return parents[:T, :R].contiguous()


def lineage_unavailable(name: str, T: int, R: int, W: int) -> str | None:
    """Why lineage `name` cannot serve a (T, R, W) workload, or None: a synthetic lineage always can."""
    if name not in RECORDED_LINEAGES:
        return None
    try:
        recorded_parents(name, T, R, W)
    except LineageUnavailable as e:
        return str(e)
    return None


def _gates(gen: torch.Generator, n_tokens_shape, hv: int, head_params, device) -> tuple[torch.Tensor, torch.Tensor]:
    A, dt_bias = head_params
    a = torch.randn(*n_tokens_shape, hv, generator=gen, device=device)
    b = torch.randn(*n_tokens_shape, hv, generator=gen, device=device)
    g = -A * F.softplus(a + dt_bias)
    beta = torch.sigmoid(b)
    return g.float(), beta.float()


def _head_params(gen: torch.Generator, hv: int, device):
    """Per-head A ~ U(0, 16) and dt_bias = 1: Qwen3.5's (Qwen3-Next's) GatedDeltaNet initialisation."""
    A = 16.0 * torch.rand(hv, generator=gen, device=device)
    dt_bias = torch.ones(hv, device=device)
    return A, dt_bias


def prefill_state(k_ctx, v_ctx, g_ctx, beta_ctx, dtype=torch.float32) -> torch.Tensor:
    """Run the GDN recurrence over a prompt from a zero state; inputs [L, R, H, D]; returns [R, HV, V, K].

    Plain torch, token by token: this is the ground truth the decode starts from, not a timed kernel.
    """
    L, R, hk, K = k_ctx.shape
    hv, V = v_ctx.shape[2], v_ctx.shape[3]
    S = torch.zeros(R, hv, V, K, dtype=dtype, device=k_ctx.device)
    for i in range(L):
        kh = per_value_head(normed_qk(None, k_ctx[i], dtype)[1], hv // hk)      # [R, HV, K]
        S, _ = gdn_step(S, torch.exp(g_ctx[i].to(dtype)), beta_ctx[i].to(dtype), kh, v_ctx[i].to(dtype))
    return S


def _lineage(kind: str, gen: torch.Generator, T: int, R: int, W: int, candidates: int, device) -> torch.Tensor:
    idx = torch.arange(W, device=device, dtype=torch.int64)
    parents = idx.expand(T, R, W).clone()
    if kind == "identity" or T == 1:
        return parents.to(torch.int32)
    if kind == "reversed":
        parents[1:] = (W - 1 - idx).expand(T - 1, R, W)
    elif kind == "single_parent":
        one = torch.randint(0, W, (T - 1, R, 1), generator=gen, device=device)
        parents[1:] = one.expand(T - 1, R, W)
    elif kind == "beam":
        # Real large-beam search: every beam proposes `candidates` children scored by its accumulated
        # log-prob plus a log-softmax over candidate logits; the request keeps the global top-W (sorted).
        score = torch.zeros(R, W, device=device)
        for t in range(1, T):
            logits = 2.0 * torch.randn(R, W, candidates, generator=gen, device=device)
            cand = score[:, :, None] + torch.log_softmax(logits, dim=-1)
            top, flat = cand.reshape(R, W * candidates).topk(W, dim=-1, sorted=True)
            parents[t] = flat // candidates
            score = top
    else:
        raise ValueError(f"unknown lineage {kind!r}; known: {', '.join(LINEAGES)}")
    return parents.to(torch.int32)


def value_scale(geometry: Geometry) -> float:
    """The factor on every value (prompt and decode) that keeps the outputs' magnitude within the gate's range.

    The state is linear in v, so o scales with it. With unit-variance values max |o| grows about as 1 / K
    below K = 128 (CPU fp64, 1024-token prefill: ~0.45 at K = 16, ~0.13 at K = 64, 0.05-0.09 at K = 128), past the
    1/8 above which half a bf16 ulp of the output is the whole 4.88e-4 gate (docs/design.md §2). K / 128 brings it
    back to K = 128's range; K >= 128 keeps unit values, so those workloads are unchanged.
    """
    return min(1.0, geometry.k / 128)


def default_prompt_len(device) -> int:
    """1024 prompt tokens on a GPU (a real post-prefill state), 32 on CPU where tests must stay fast."""
    return 1024 if torch.device(device).type == "cuda" else 32


# The last post-prefill state made, by (geometry, R, seed, prompt_len, device), kept on the CPU: a sweep visits a
# geometry's shapes in a row (W, T and the lineage vary inside one (geometry, R)), so a shape after the first
# copies the state in instead of running the prompt's token-by-token recurrence again. One entry, on the host,
# so that it holds no device memory a path's supports() or an out-of-memory retry would see.
_CONTEXT_CACHE: dict[tuple, torch.Tensor] = {}


def _context_state(geo: Geometry, R: int, seed: int, prompt_len: int, device: torch.device, g_ctx, heads,
                   v_scale: float) -> torch.Tensor:
    """s_ctx [R, HV, V, K] fp32 of the seeded prompt: the prefill recurrence over k/v/gates drawn from `g_ctx`
    (after `heads`), or the same tensor copied from the one-entry cache. The copy is exact (a host-device copy
    of the state this function computed on `device` for the same key), so a cached state equals a computed one
    bit for bit; every workload gets its own tensor."""
    key = (geo.hk, geo.hv, geo.k, geo.v, R, seed, prompt_len, str(device))
    if key in _CONTEXT_CACHE:
        return _CONTEXT_CACHE[key].to(device, copy=True)
    k_ctx = torch.randn(prompt_len, R, geo.hk, geo.k, generator=g_ctx, device=device)
    v_ctx = torch.randn(prompt_len, R, geo.hv, geo.v, generator=g_ctx, device=device) * v_scale
    gg_ctx, b_ctx = _gates(g_ctx, (prompt_len, R), geo.hv, heads, device)
    s_ctx = prefill_state(k_ctx, v_ctx, gg_ctx, b_ctx).float()
    del k_ctx, v_ctx
    _CONTEXT_CACHE.clear()
    _CONTEXT_CACHE[key] = s_ctx.to("cpu", copy=True)
    return s_ctx


def make_workload(geometry: Geometry | str, R: int, W: int, T: int, lineage: str = "beam", seed: int = 0,
                  device="cpu", dtype=torch.bfloat16, prompt_len: int | None = None,
                  candidates: int = 16) -> Workload:
    """Seeded workload for every path: the same (geometry, R, W, T, lineage, seed, device) gives the same tensors.

    `s_ctx` depends only on (geometry, R, seed, prompt_len, device), so cells that differ in W, T or lineage
    start from the same post-prefill state. A recorded lineage (RECORDED_LINEAGES) takes its first T steps and
    R requests from its data file (`recorded_parents`; LineageUnavailable where the file does not cover them).
    """
    geo = get_geometry(geometry)
    Shape(R, W, T)  # validates R, W, T
    if lineage not in KNOWN_LINEAGES:
        raise ValueError(f"unknown lineage {lineage!r}; known: {', '.join(KNOWN_LINEAGES)}")
    recorded = recorded_parents(lineage, T, R, W) if lineage in RECORDED_LINEAGES else None
    if dtype not in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        raise ValueError(f"unsupported input dtype {dtype}")
    if not isinstance(candidates, int) or candidates < 1:
        raise ValueError(f"candidates must be a positive int, got {candidates!r}")
    device = torch.device(device)
    prompt_len = default_prompt_len(device) if prompt_len is None else prompt_len
    if not isinstance(prompt_len, int) or prompt_len < 0:
        raise ValueError(f"prompt_len must be an int >= 0, got {prompt_len!r}")

    g_ctx = torch.Generator(device=device).manual_seed(seed)
    heads = _head_params(g_ctx, geo.hv, device)
    v_scale = value_scale(geo)          # 1.0 at K >= 128: x * 1.0 is exact, so those workloads are unchanged
    s_ctx = _context_state(geo, R, seed, prompt_len, device, g_ctx, heads, v_scale)

    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + 7919 * W + 104_729 * T + 1)
    q = torch.randn(T, R, W, geo.hk, geo.k, generator=gen, device=device).to(dtype)
    k = torch.randn(T, R, W, geo.hk, geo.k, generator=gen, device=device).to(dtype)
    v = (torch.randn(T, R, W, geo.hv, geo.v, generator=gen, device=device) * v_scale).to(dtype)
    g, beta = _gates(gen, (T, R, W), geo.hv, heads, device)
    # A recorded lineage replaces only the parents: the inputs are the ones the synthetic lineages get at the same
    # (seed, W, T), drawn before the parents, so a `beam` and a `model` workload differ in their beam tree alone.
    parents = recorded.to(device) if recorded is not None else _lineage(lineage, gen, T, R, W, candidates, device)
    return Workload(geo, q, k, v, g, beta, parents, s_ctx, lineage=lineage, seed=seed, prompt_len=prompt_len)
