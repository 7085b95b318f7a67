"""The decode forward's non-recurrent work as seven pure functions between its GEMMs, so that one switch can
fuse them, plus the residual GEMM.

Between GEMMs a decode layer is a chain of small element-wise ops (norms, conv taps, gates, rotary, SwiGLU);
run eagerly each is a kernel and a round trip through HBM. Serving frameworks fuse them (vLLM compiles the
model with torch.compile and replays CUDA graphs); `DecodeOps(compile=True)` does the same with
torch.compile (Inductor, default mode, static shapes) -- the compiled kernels are then captured in the
decode's CUDA graphs like any others. Identical for every path, so it moves no comparison; it keeps the fixed
part of the model from being slower than a real serving stack's.

The functions are cut so that each element-wise stretch between two GEMMs is one pass. The residual adds ride
the GEMMs that produce the added values (`residual_gemm`: out_proj, o_proj and the MLP's down projection
accumulate into the residual stream, cuBLAS's beta = 1), so every norm reads the residual stream alone; the
conv's pass also writes the conv windows' upkeep (artifact.model.beam_state), the gates are one pass over
[b | a], the q / k norm and rotary pass writes q in the layout the prompt attention reads and stores the step's
k, v in the decode KV, and the own-KV merge applies the output gate before it writes o_proj's input.

Where a kernel of ours is registered for a block (artifact.registry.DECODE_KERNELS: `kernels.model_ops`' conv +
gates, q / k norm + rotary + KV store, own-KV merge + output gate and gated norm, one Triton launch each), the
decoder runs it in the block's place on a CUDA device, for every path alike; the block here stays the CPU
implementation and the kernel's oracle in the tests.
"""
from __future__ import annotations

import torch

from artifact.model.attention import merge_own_kv
from artifact.model.beam_state import window
from artifact.model.layers import apply_rotary, causal_conv_step, gated_rms_norm, gdn_gates, rms_norm, swiglu_hidden
from artifact.registry import DECODE_KERNELS, load_object


def norm_proj(x, ln, w, eps: float):
    """A layer's input norm and fused input projection: rmsnorm(x) @ w^T."""
    return rms_norm(x, ln, eps) @ w.t()


def residual_gemm(x, a, w):
    """x += a @ w^T in place, x [..., H] the (contiguous) residual stream, a [...] holding x's rows of F values
    each (a view when contiguous: the merge's [R, W, nq, D] is o_proj's [N, nq D]), w [H, F]: one GEMM that
    reads x as its C operand (beta = 1), rounding x + a w^T once to x's dtype. Never compiled: `addmm_` into its
    own C runs as the GEMM alone, where an out-of-place addmm (what Inductor emits for it) first copies x into
    the output (torch's addmm_out_cuda_impl), and a separate add reads and writes x again."""
    x.view(-1, x.shape[-1]).addmm_(a.reshape(-1, w.shape[-1]), w.t())
    return x


def conv_gates(x, hist: list, carry: int, conv_w, ba, A_log, dt_bias):
    """GDN: (silu(causal conv) of q|k|v, gates [beta, g] (layers.gdn_gates), kept), fresh tensors. `hist` is
    ConvHistory.history's list, its (tensor, index) entries gathered here as the conv reads them; `kept` is what
    ConvHistory.keep stores -- the window's newest `carry` entries as read, then x -- written by the conv's own
    pass (one kernel under torch.compile: every output has the conv's [R, W, C] shape and reads what it reads).

    Fresh outputs, not writes into the decoder's per-step buffers: Inductor's autotune benchmarks a kernel that
    mutates an argument with a clone of that argument inside the timed call, and the clone's cost hides the
    difference between launch configs, so the pick becomes arbitrary per process (the step-0 conv's configs differ
    several-fold; results/experiments/full_model/inductor_conv/autotune_log/). Nothing is mutated here, so
    nothing is cloned."""
    win = [window(h) for h in hist]
    mixed = causal_conv_step(win, x, conv_w)
    kept = [w.contiguous() for w in win[len(win) - carry:]] + [x.clone(memory_format=torch.contiguous_format)]
    return mixed, gdn_gates(ba, A_log, dt_bias), kept


def gated_norm(o, z, norm_w, eps: float):
    """GDN output norm (layers.gated_rms_norm) of the stepper output o [R, W, HV, V] with z [R, W, HV, V] (a
    strided view into the in_proj output), as out_proj's input [R, W, HV V] in o's dtype."""
    return gated_rms_norm(o, z, norm_w, eps, o.dtype).flatten(-2)


def attn_pre(q, k, v, q_norm, k_norm, cos, sin, eps: float, k_out, v_out):
    """Attention: zero-centred q/k norms per head, then partial rotary. q [R, W, nq, D] comes back prompt-major,
    [R, Hkv, W G, D] contiguous -- each KV head's W x G queries as one block, the layout the prompt part reads
    (attention.shared_prefix_attention takes its [R, W, Hkv, G, D] view, no copy); k (normed and rotated) and
    v [R, W, Hkv, D] are written into k_out, v_out, the step's slot of the decode KV (KvHistory.slot), which is
    this pass's only output in place."""
    R, W, nq, D = q.shape
    hkv = k.shape[-2]
    q = apply_rotary(rms_norm(q, q_norm, eps), cos, sin).unflatten(2, (hkv, nq // hkv))
    k_out.copy_(apply_rotary(rms_norm(k, k_norm, eps), cos, sin))
    v_out.copy_(v)
    return q.permute(0, 2, 1, 3, 4).reshape(R, hkv, W * (nq // hkv), D)


def mlp_in(x, ln2, gate_up, eps: float):
    """The MLP block up to its down projection: silu(gate) * up of rmsnorm(x) (layers.swiglu_hidden); the down
    projection is a residual_gemm."""
    return swiglu_hidden(rms_norm(x, ln2, eps), gate_up)


def final_norm(x, w, eps: float):
    """The final norm of the residual stream."""
    return rms_norm(x, w, eps)


FUNCTIONS = {f.__name__: f for f in (norm_proj, conv_gates, gated_norm, attn_pre, merge_own_kv, mlp_in,
                                     final_norm)}


def decode_kernel(name: str):
    """Our kernel registered for the block `name` (artifact.registry.DECODE_KERNELS), imported on first use."""
    if name not in DECODE_KERNELS:
        raise ValueError(f"no kernel is registered for the block {name!r}; registered: {', '.join(DECODE_KERNELS)}")
    return load_object(DECODE_KERNELS[name])


class DecodeOps:
    """The seven functions (merge_own_kv: the attention's own-KV part and output gate, artifact.model.attention),
    eager or torch.compile'd (fullgraph, static shapes); residual_gemm is always eager. With `kernels`, each block
    registered in artifact.registry.DECODE_KERNELS runs as our kernel instead (same arguments and outputs;
    BeamDecoder asks for them on a CUDA device, for every path alike), whether or not the rest is compiled."""

    def __init__(self, compile: bool = False, kernels: bool = False):
        self.compiled = bool(compile)
        self.kernels = tuple(DECODE_KERNELS) if kernels else ()
        if compile:
            # conv_gates sees up to P+1 history structures per shape (expanded prompt-tail views vs (tensor,
            # index) pairs); never let a recompile limit silently send a call back to eager.
            for key in ("cache_size_limit", "recompile_limit"):
                if hasattr(torch._dynamo.config, key):
                    setattr(torch._dynamo.config, key, max(64, getattr(torch._dynamo.config, key)))
        # No device-side bound check on gathered indices: the ancestry columns, the parents and the rotary's
        # partner dims are built in range (artifact.model.beam_state, layers.apply_rotary; CPU-tested), and
        # Inductor's per-element `tl.device_assert` in the conv with the ancestral gather inside costs more than
        # the gather itself (results/experiments/full_model/assert_ab/). Applied to every path: both beam-state
        # modes' convs gather (ancestral slots / parents' windows).
        opts = {"assert_indirect_indexing": False}
        for name, fn in FUNCTIONS.items():
            if name in self.kernels:
                setattr(self, name, decode_kernel(name))
            else:
                setattr(self, name, torch.compile(fn, fullgraph=True, dynamic=False, options=opts) if compile else fn)

    @property
    def label(self) -> str:
        base = "torch.compile(inductor)" if self.compiled else "eager"
        return base + "".join(f" + ours({name})" for name in self.kernels)
