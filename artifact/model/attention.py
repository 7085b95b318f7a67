"""Decode attention of a full-attention layer: each beam attends to its request's prompt KV (stored once, shared
by all W beams) plus its own decode-time KV; the two parts are merged exactly through their log-sum-exp.

The prompt part batches every beam and query head of a request against the one prompt KV: for KV head h the
queries of all W beams x (nq / nkv) grouped heads form one [W * G, D] block, so no beam ever copies the prompt
KV. Its kernel, by name:
- "cudnn": torch's cuDNN attention op (`aten._scaled_dot_product_cudnn_attention` with compute_log_sumexp; cuDNN's
  sm90 fused kernel, D = 256 included);
- "flash": torch's FlashAttention op (`aten._scaled_dot_product_flash_attention`, which also returns the LSE);
- "efficient": torch's memory-efficient attention op (`aten._scaled_dot_product_efficient_attention`);
- "math": fp32 scores and softmax in plain torch (the CPU path and the oracle of the others).
`select_prompt_attention` picks the first that runs and agrees with "math" on a probe input, and says which.
Every impl returns the LSE in natural log, [R, Hkv, M] fp32: the probe checks it against math's.
"""
from __future__ import annotations

import torch

from artifact.model.beam_state import own_kv
from artifact.model.layers import output_gate
from artifact.model.regions import region

IMPLS = ("cudnn", "flash", "efficient", "math")


def _math(q, k, v, scale):
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    lse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.softmax(s, dim=-1), v.float()), lse


def _cudnn(q, k, v, scale):
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, False, False, scale=scale)
    return out[0], out[1].reshape(q.shape[:-1])           # the LSE comes as [R, Hkv, M, 1]


def _flash(q, k, v, scale):
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)
    return out[0], out[1]


def _efficient(q, k, v, scale):
    out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, False, scale=scale)
    return out[0], out[1][..., : q.shape[-2]]


_KERNELS = {"cudnn": _cudnn, "flash": _flash, "efficient": _efficient, "math": _math}


def prompt_attention(impl: str, q, k, v, scale: float):
    """q [R, Hkv, M, D], k/v [R, Hkv, L, D] -> (o [R, Hkv, M, D], lse [R, Hkv, M] fp32), no mask."""
    if impl not in _KERNELS:
        raise ValueError(f"unknown prompt-attention impl {impl!r}; known: {IMPLS}")
    return _KERNELS[impl](q, k, v, scale)


def select_prompt_attention(device, dtype, head_dim: int, preferred: str = "auto") -> str:
    """The kernel decode will use: `preferred`, or on "auto" the first of IMPLS that runs here and matches math."""
    device = torch.device(device)
    if preferred != "auto":
        if preferred not in IMPLS:
            raise ValueError(f"unknown prompt-attention impl {preferred!r}; known: auto, {', '.join(IMPLS)}")
        return preferred
    if device.type != "cuda" or dtype not in (torch.float16, torch.bfloat16):
        return "math"
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, head_dim, generator=gen, device=device).to(dtype) for n in (40, 300, 300))
    ref_o, ref_lse = _math(q, k, v, head_dim ** -0.5)
    for impl in IMPLS[:-1]:
        try:
            o, lse = prompt_attention(impl, q, k, v, head_dim ** -0.5)
        except (RuntimeError, TypeError, NotImplementedError):
            continue
        if o.shape == ref_o.shape and (o.float() - ref_o).abs().max() < 2e-2 \
                and (lse.float() - ref_lse).abs().max() < 1e-3:
            return impl
    return "math"


def merge_own_kv(o_p, lse_p, qg, k_own, v_own, scale: float, out_dtype=None, gate=None):
    """Fold each beam's own decode KV into the prompt part: exact softmax over both via log-sum-exp; then, with
    `gate`, the output gate (layers.output_gate).

    o_p [R, W, Hkv, G, D] (prompt part, normalised), lse_p [R, W, Hkv, G], qg [R, W, Hkv, G, D],
    k_own / v_own [R, W, n, Hkv, D] (or KvHistory's ancestry tuples), gate [R, W, Hkv * G, D] or None. Returns
    [R, W, Hkv * G, D], fp32 or `out_dtype` (o_proj's input once its last two dims are flattened). With a gate,
    the merged output is rounded to `out_dtype` first (the attention output transformers gates), then gated in
    fp32. The products are broadcast multiply-and-sum, not einsum: n <= T keys per beam make
    einsum a batch of tiny fp32 GEMMs (two cuBLAS launches per call, each far from any GEMM's efficient size);
    as a reduction, torch.compile fuses the whole merge -- layout changes and the final cast included -- into a
    few kernels. On a GPU the decoder runs `kernels.model_ops.merge_own_kv` in its place (one launch).
    """
    k_own, v_own = own_kv(k_own), own_kv(v_own)     # ancestry-mode tuples are gathered here (beam_state)
    qf, kf, vf = qg.float(), k_own.float().transpose(2, 3), v_own.float().transpose(2, 3)  # k, v [R, W, Hkv, n, D]
    s = (qf[..., :, None, :] * kf[..., None, :, :]).sum(-1) * scale                      # [R, W, Hkv, G, n]
    lse_p = lse_p.float()
    m = torch.maximum(lse_p, s.amax(-1))
    w_p = torch.exp(lse_p - m)
    w_s = torch.exp(s - m[..., None])
    num = w_p[..., None] * o_p.float() + (w_s[..., None] * vf[..., None, :, :]).sum(-2)  # [R, W, Hkv, G, D]
    out = (num / (w_p + w_s.sum(-1))[..., None]).flatten(2, 3)
    out = out if out_dtype is None else out.to(out_dtype)
    return out if gate is None else output_gate(out, gate)


def shared_prefix_attention(impl: str, q, k_prompt, v_prompt, k_own, v_own, scale: float,
                            merge=merge_own_kv, gate=None) -> torch.Tensor:
    """Softmax attention of each beam over [prompt KV of its request ; its own decode KV].

    q [R, W, nq, D], or grouped by KV head [R, W, Hkv, G, D] of any strides -- laid out [R, Hkv, W, G, D] (as
    blocks.attn_pre writes it), the prompt part reads it without a copy; k_prompt/v_prompt [R, Hkv, L, D];
    k_own/v_own [R, W, n, Hkv, D]; gate [R, W, nq, D] or None (merge_own_kv). Returns [R, W, nq, D].
    `merge` is merge_own_kv or a compiled copy of it, or our kernel in its place.
    """
    qg = q if q.dim() == 5 else q.unflatten(2, (k_prompt.shape[1], -1))
    R, W, hkv, G, D = qg.shape
    with region("attn_prompt"):
        qp = qg.permute(0, 2, 1, 3, 4).reshape(R, hkv, W * G, D)          # a view when laid out [R, Hkv, W, G, D]
        o_p, lse_p = prompt_attention(impl, qp, k_prompt, v_prompt, scale)
    o_p = o_p.reshape(R, hkv, W, G, D).permute(0, 2, 1, 3, 4)            # [R, W, Hkv, G, D], a view
    lse_p = lse_p.reshape(R, hkv, W, G).permute(0, 2, 1, 3)               # [R, W, Hkv, G], a view
    with region("attn_decode_kv"):
        return merge(o_p, lse_p, qg, k_own, v_own, scale, q.dtype, gate)  # casts inside (fused when compiled)
