"""The decode forward's non-recurrent work as six pure functions, so that one switch can fuse them.

Between GEMMs a decode layer is a chain of small element-wise ops (norms, conv taps, gates, rotary, SwiGLU);
run eagerly each is a kernel and a round trip through HBM. Serving frameworks fuse them (vLLM compiles the
model with torch.compile and replays CUDA graphs); `DecodeOps(compile=True)` does the same with
torch.compile (Inductor, default mode, static shapes) -- the compiled kernels are then captured in the
decode's CUDA graphs like any others. Identical for every path, so it moves no comparison; it keeps the fixed
part of the model from being slower than a real serving stack's.
"""
from __future__ import annotations

import torch

from artifact.model.attention import merge_own_kv
from artifact.model.beam_state import window
from artifact.model.layers import apply_rotary, causal_conv_step, gated_rms_norm, gdn_gates, rms_norm, swiglu


def norm_proj(x, ln, w, eps: float):
    """rmsnorm(x) @ w^T: a layer's input norm and its fused input projection."""
    return rms_norm(x, ln, eps) @ w.t()


def conv_gates(x, hist: list, conv_w, a, b, A_log, dt_bias):
    """GDN: (silu(causal conv) of q|k|v, log-decay g, beta), each a fresh tensor. `hist` is ConvHistory.history's
    list: ancestral inputs are gathered here, inside the (compiled) conv.

    Fresh outputs, not writes into the decoder's per-step buffers: Inductor's autotune benchmarks a kernel that
    mutates an argument with a clone of that argument inside the timed call, and the clone's cost hides the
    difference between launch configs, so the pick becomes arbitrary per process (the step-0 conv's configs differ
    several-fold; results/experiments/full_model/inductor_conv/autotune_log/). Nothing is mutated here, so
    nothing is cloned."""
    mixed = causal_conv_step(hist, x, conv_w, read=window)
    g, beta = gdn_gates(a, b, A_log, dt_bias)
    return mixed, g, beta


def gdn_post(o, z, norm_w, x, out_w, ln2, gate_up, down, eps: float):
    """GDN output: gated norm, out_proj, residual; then the MLP block with its residual."""
    x = x + gated_rms_norm(o, z, norm_w, eps, x.dtype).flatten(-2) @ out_w.t()
    return x + swiglu(rms_norm(x, ln2, eps), gate_up, down)


def attn_pre(q, k, q_norm, k_norm, cos, sin, eps: float):
    """Attention: zero-centred q/k norms per head, then partial rotary."""
    return (apply_rotary(rms_norm(q, q_norm, eps), cos, sin), apply_rotary(rms_norm(k, k_norm, eps), cos, sin))


def attn_post(o, gate, x, o_w, ln2, gate_up, down, eps: float):
    """Attention output: sigmoid output gate, o_proj, residual; then the MLP block with its residual."""
    x = x + (o.flatten(-2) * torch.sigmoid(gate)) @ o_w.t()
    return x + swiglu(rms_norm(x, ln2, eps), gate_up, down)


FUNCTIONS = {f.__name__: f for f in (norm_proj, conv_gates, gdn_post, attn_pre, attn_post, merge_own_kv)}


class DecodeOps:
    """The six functions (merge_own_kv: the attention's own-KV part, artifact.model.attention), eager or
    torch.compile'd (fullgraph, static shapes)."""

    def __init__(self, compile: bool = False):
        self.compiled = bool(compile)
        if compile:
            # conv_gates sees up to P+1 history structures per shape (expanded prompt-tail views vs ancestral
            # (store, index) pairs); never let a recompile limit silently send a call back to eager.
            for key in ("cache_size_limit", "recompile_limit"):
                if hasattr(torch._dynamo.config, key):
                    setattr(torch._dynamo.config, key, max(64, getattr(torch._dynamo.config, key)))
        # No device-side bound check on gathered indices: the ancestry columns and parents are built in range
        # (artifact.model.beam_state; CPU-tested), and Inductor's per-element `tl.device_assert` in the conv with
        # the ancestral gather inside costs more than the gather itself
        # (results/experiments/full_model/assert_ab/).
        # Applied to every path; only OneLA's ops gather.
        opts = {"assert_indirect_indexing": False}
        for name, fn in FUNCTIONS.items():
            setattr(self, name, torch.compile(fn, fullgraph=True, dynamic=False, options=opts) if compile else fn)

    @property
    def label(self) -> str:
        return "torch.compile(inductor)" if self.compiled else "eager"
