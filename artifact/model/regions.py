"""Named profiler ranges around the parts of one decode call, and the model component each part belongs to.

`region(name)` opens the torch.profiler range "decode/<name>" while a profiler session records, and nothing
otherwise: an unprofiled decode pays no range overhead, and a CUDA-graph replay carries no ranges anyway (the
breakdown labels a replay's kernels through the eager call's, `artifact.model.breakdown`). `BeamDecoder`
opens `CALL` around each decode call (forward or graph replay) and one range per part inside it.

`REGIONS` maps each range to its component. Most ranges hold one component. A range around a block with GEMMs
(blocks.py; compiled, its element-wise work is fused between them) holds several, so it maps to its phases in
launch order: the work
before the first GEMM, the first GEMM (with any split-K reduction or workspace memset next to it), the work
between the first and second GEMM, and so on -- 2 g + 1 phases for g GEMMs (a phase may be empty: the MLP ends
with its down GEMM, which adds into the residual stream itself). The GEMM boundaries are data dependencies of
the block (norm -> projection; norm -> gate_up -> SwiGLU -> down), so any scheduler keeps them in this order.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

PREFIX = "decode/"
CALL = "call"

# Components of one decode call, in the order figures and tables list them.
COMPONENTS = (
    "lm_head",            # logits GEMM over the tied embedding, logits written
    "mlp",                # SwiGLU of every layer: gate_up GEMM, silu * up, down GEMM adding into the residual stream
    "gdn_proj",           # GDN in_proj (q|k|v|z|b|a) and out_proj GEMMs (out_proj adds into the residual stream)
    "attn_proj",          # attention qkv_proj and o_proj GEMMs (o_proj adds into the residual stream)
    "gdn_recurrent",      # the path's Stepper: recurrent state read / update / output (reset at call 0)
    "gdn_conv",           # depthwise causal conv over the window (+ silu), the windows' upkeep it writes, gates
    "gdn_norm",           # gated RMSNorm of the GDN output
    "attn_qk_norm_rope",  # q / k RMSNorms and partial rotary; the step's k, v stored in the decode KV
    "attn_prompt",        # attention of every beam over its request's shared prompt KV
    "attn_decode_kv",     # attention over each beam's own decode KV, the exact log-sum-exp merge, the output gate
    "norms",              # input / post-mixer RMSNorms of the residual stream, final norm
    "kv_state",           # the decode KV following the beam tree (copy mode's per-beam fork copies)
    "ancestry",           # the beam tree's ancestry table (ancestry paths)
    "embed",              # token embedding lookup
)

REGIONS: dict[str, str | tuple[str, ...]] = {
    "embed": "embed",
    "ancestry": "ancestry",
    "gdn_norm_proj": ("norms", "gdn_proj", "gdn_proj"),
    "gdn_conv": "gdn_conv",
    "gdn_recurrent": "gdn_recurrent",
    "gdn_norm": "gdn_norm",
    "gdn_out_proj": "gdn_proj",
    "attn_norm_proj": ("norms", "attn_proj", "attn_proj"),
    "kv_state": "kv_state",
    "attn_qk_norm_rope": "attn_qk_norm_rope",
    "attn_prompt": "attn_prompt",
    "attn_decode_kv": "attn_decode_kv",
    "attn_o_proj": "attn_proj",
    "mlp": ("norms", "mlp", "mlp", "mlp", "mlp"),
    "final_norm": "norms",
    "lm_head": "lm_head",
}


# whether a torch.profiler session records now (the C++ flag; the Python one where a build lacks it)
_recording = getattr(torch.autograd, "_profiler_enabled", None) or \
    (lambda: getattr(torch.autograd.profiler, "_is_profiler_enabled", True))


def region(name: str):
    """The profiler range PREFIX + name while torch.profiler records; a no-op context otherwise."""
    if name != CALL and name not in REGIONS:
        raise ValueError(f"unknown decode region {name!r}; known: {CALL}, {', '.join(REGIONS)}")
    return torch.profiler.record_function(PREFIX + name) if _recording() else nullcontext()
