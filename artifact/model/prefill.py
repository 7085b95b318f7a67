"""Prompt prefill (not timed): run the model over R prompts and keep what the beam decode starts from.

Per GDN layer: S_ctx (the fp32 post-prompt state, chunked GDN), the width-1 last pre-conv inputs (conv
state), and for ReplaySSM the state at the last completed prompt block plus the tail inputs after it (vLLM's
"align" prefix caching keeps Mamba/GDN checkpoints only at block boundaries, paper §2.3). Per attention layer:
the prompt's keys (q/k-normed, rotated) and values, shared by every beam of a request. And the logits of the
last prompt position, from which the first W tokens are chosen.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from artifact.model.gdn_chunk import chunk_gated_delta
from artifact.model.layers import (apply_rotary, causal_conv_prefill, gated_rms_norm, gdn_gates, rms_norm,
                                   rotary_cos_sin, swiglu)
from artifact.model.network import HybridModel


@dataclass
class PromptState:
    """Everything the decode reads from the prompt; lists are indexed by GDN / attention layer order."""

    prompt_len: int
    s_ctx: list[torch.Tensor] = field(default_factory=list)        # [R, HV, V, K] fp32
    conv_tail: list[torch.Tensor] = field(default_factory=list)    # [R, width-1, conv_dim], oldest first
    k_prompt: list[torch.Tensor] = field(default_factory=list)     # [R, Hkv, L, D]
    v_prompt: list[torch.Tensor] = field(default_factory=list)     # [R, Hkv, L, D]
    logits_last: torch.Tensor | None = None                        # [R, vocab] fp32
    replay_block: int | None = None
    s_boundary: list[torch.Tensor] = field(default_factory=list)   # [R, HV, V, K] fp32 at the last block boundary
    tail: list[dict] = field(default_factory=list)                 # q, k, v, g, beta [L_tail, R, H(, D)]

    @property
    def boundary(self) -> int | None:
        """Tokens covered by the ReplaySSM checkpoint: the last multiple of replay_block <= prompt_len."""
        return None if self.replay_block is None else (self.prompt_len // self.replay_block) * self.replay_block


def random_prompts(R: int, L: int, vocab: int, seed: int, device="cpu") -> torch.Tensor:
    """Seeded prompt token ids [R, L] (int64)."""
    gen = torch.Generator(device=device).manual_seed(seed * 7_919 + 17)
    return torch.randint(0, vocab, (R, L), generator=gen, device=device)


def _gdn_prefill(model: HybridModel, layer, h, ps: PromptState, chunk: int):
    cfg = model.cfg
    R, L, _ = h.shape
    qkv, z, ba = model.split_gdn_proj(h @ layer["in_proj"].t())
    width = cfg.linear_conv_kernel_dim
    tail = qkv[:, -(width - 1):]
    if L < width - 1:
        tail = F.pad(tail, (0, 0, width - 1 - L, 0))
    ps.conv_tail.append(tail.contiguous())
    mixed = causal_conv_prefill(qkv, layer["conv"])
    q, k, v = torch.split(mixed, [cfg.key_dim, cfg.key_dim, cfg.value_dim], dim=-1)
    q = q.unflatten(-1, (cfg.linear_num_key_heads, cfg.linear_key_head_dim))
    k = k.unflatten(-1, (cfg.linear_num_key_heads, cfg.linear_key_head_dim))
    v = v.unflatten(-1, (cfg.linear_num_value_heads, cfg.linear_value_head_dim))
    beta, g = gdn_gates(ba, layer["A_log"], layer["dt_bias"])
    B0 = ps.boundary
    if B0 is None:
        o, S = chunk_gated_delta(q, k, v, g, beta, chunk=chunk)
    else:
        o1, Sb = chunk_gated_delta(q[:, :B0], k[:, :B0], v[:, :B0], g[:, :B0], beta[:, :B0], chunk=chunk)
        o2, S = chunk_gated_delta(q[:, B0:], k[:, B0:], v[:, B0:], g[:, B0:], beta[:, B0:], initial_state=Sb,
                                  chunk=chunk)
        o = torch.cat([o1, o2], dim=1)
        ps.s_boundary.append(Sb.contiguous())
        ps.tail.append({n: x[:, B0:].transpose(0, 1).contiguous()
                        for n, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta))})
    ps.s_ctx.append(S.float().contiguous())
    z = z.unflatten(-1, (cfg.linear_num_value_heads, cfg.linear_value_head_dim))
    o = gated_rms_norm(o, z, layer["norm"], cfg.rms_norm_eps, model.dtype).flatten(-2)
    return o @ layer["out_proj"].t()


def _attn_prefill(model: HybridModel, layer, h, ps: PromptState, cos, sin):
    cfg = model.cfg
    q, gate, k, v = model.split_attn_proj(h @ layer["qkv_proj"].t())
    q = apply_rotary(rms_norm(q, layer["q_norm"], cfg.rms_norm_eps), cos[:, None], sin[:, None])
    k = apply_rotary(rms_norm(k, layer["k_norm"], cfg.rms_norm_eps), cos[:, None], sin[:, None])
    q, k, v = (x.transpose(1, 2).contiguous() for x in (q, k, v))            # [R, heads, L, D]
    ps.k_prompt.append(k)
    ps.v_prompt.append(v)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=cfg.head_dim ** -0.5, enable_gqa=True)
    o = (o.transpose(1, 2) * torch.sigmoid(gate)).flatten(-2)
    return o @ layer["o_proj"].t()


def _forward(model: HybridModel, tokens: torch.Tensor, ps: PromptState, chunk: int) -> torch.Tensor:
    """All layers over tokens [R, L], filling ps; returns the final-normed hidden states [R, L, H]."""
    cfg = model.cfg
    cos, sin = rotary_cos_sin(torch.arange(tokens.shape[1], device=model.device), cfg.rotary_dim, cfg.rope_theta)
    x = F.embedding(tokens.to(model.device), model.embed)
    for layer, kind in zip(model.layers, cfg.layer_types):
        h = rms_norm(x, layer["ln1"], cfg.rms_norm_eps)
        x = x + (_gdn_prefill(model, layer, h, ps, chunk) if kind == "linear_attention"
                 else _attn_prefill(model, layer, h, ps, cos, sin))
        x = x + swiglu(rms_norm(x, layer["ln2"], cfg.rms_norm_eps), layer["gate_up"], layer["down"])
    return rms_norm(x, model.final_norm, cfg.rms_norm_eps)


@torch.no_grad()
def prefill(model: HybridModel, tokens: torch.Tensor, replay_block: int | None = None, chunk: int = 64
            ) -> PromptState:
    """Run the model over prompts tokens [R, L]; return the PromptState of every layer."""
    if tokens.dim() != 2 or tokens.shape[1] < 1:
        raise ValueError(f"prompt tokens must be [R, L] with L >= 1, got shape {tuple(tokens.shape)}")
    if replay_block is not None and (not isinstance(replay_block, int) or replay_block < 1):
        raise ValueError(f"replay_block must be a positive int or None, got {replay_block!r}")
    ps = PromptState(prompt_len=tokens.shape[1], replay_block=replay_block)
    hidden = _forward(model, tokens, ps, chunk)
    ps.logits_last = model.logits(hidden[:, -1]).float()
    return ps
