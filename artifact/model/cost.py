"""Roofline floor of one beam search's decode-forward: the full_model suite's floor_ms (docs/design.md §5).

The same lower bound as the operator suites' floors: compulsory bytes over the measured copy
bandwidth against FLOPs over the measured matrix rate of the precision used, whichever is longer. Over the T
decode calls of one search:

- model part, the same for every path: every weight read once per call (the tied LM head reads the whole
  embedding matrix; an untied input embedding only its N looked-up rows), the logits written once, each full-
  attention layer's prompt K/V read once per request and each beam's decode K/V once; FLOPs 2 N per weight
  element of every matrix (the depthwise conv's [C, 4] included: 2 N C 4 is its FLOP count) plus attention's
  4 N Hq d (prompt + decoded tokens) per layer, at the model dtype's matrix rate;
- recurrent part: the path's own `cost()` (the same function the operator suites use) on this search's
  lineage, once per GDN layer, at that path's rate.

Activations between kernels are left out (an ideal fused forward keeps them on chip), so this is a bound, not
a model of our pipeline.
"""
from __future__ import annotations

import copy
from collections import Counter
from types import SimpleNamespace

import torch

from artifact.measure import floor_ms

RATE_OF_DTYPE = {torch.bfloat16: "bf16_flop_per_s", torch.float16: "bf16_flop_per_s",
                 torch.float32: "tf32_flop_per_s"}


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def model_part(model, R: int, W: int, T: int, prompt_len: int) -> tuple[int, int]:
    """(compulsory bytes, FLOPs) of the T calls' non-recurrent work."""
    cfg, N = model.cfg, R * W
    elem = torch.empty((), dtype=model.dtype).element_size()
    mats = [t for layer in model.layers for t in layer.values() if t.dim() >= 2] + [model.lm_head]
    vecs = [t for layer in model.layers for t in layer.values() if t.dim() < 2] + [model.final_norm]
    per_call_bytes = sum(map(_nbytes, mats)) + sum(map(_nbytes, vecs))
    if model.embed is not model.lm_head:
        per_call_bytes += N * model.embed.shape[1] * model.embed.element_size()
    per_call_bytes += N * cfg.vocab_size * elem                                   # the logits
    per_call_flops = 2 * N * sum(t.numel() for t in mats)
    n_attn, hd = len(cfg.attn_layers), cfg.head_dim
    kv_row = 2 * cfg.num_key_value_heads * hd * elem                              # K and V of one token
    nbytes = flops = 0
    for t in range(T):
        seen = prompt_len + t + 1                                                 # tokens each query attends
        nbytes += per_call_bytes + n_attn * (R * prompt_len * kv_row + N * (t + 1) * kv_row)
        flops += per_call_flops + n_attn * 4 * N * cfg.num_attention_heads * hd * seen
    return nbytes, flops


def recurrent_part(path_obj, model, R: int, W: int, T: int, parents: torch.Tensor,
                   tail_len: int | None = None) -> dict | None:
    """The path's cost() over all GDN layers, or None if the path does not model itself."""
    geo = model.cfg.geometry
    wl = SimpleNamespace(geometry=geo, R=R, W=W, T=T, parents=parents[:T].cpu(),
                         q=torch.empty(0, dtype=model.dtype))
    if tail_len is not None and hasattr(path_obj, "replay_tail_len"):
        path_obj = copy.copy(path_obj)              # the registry's object keeps the operator suites' 0
        path_obj.replay_tail_len = tail_len
    cost = path_obj.cost(wl)
    if cost is None:
        return None
    n = len(model.cfg.gdn_layers)
    return {"compulsory_bytes": n * cost["compulsory_bytes"], "flops": n * cost["flops"], "rate": cost["rate"]}


def decode_floor(model, path_obj, R: int, W: int, T: int, prompt_len: int, parents: torch.Tensor,
                 ceilings: dict | None, tail_len: int | None = None) -> dict:
    """{"compulsory_bytes", "flops", and with ceilings "floor_ms", "floor_bound"} of one search's T calls.
    The compute time sums the two parts at their own rates (artifact.measure.floor_ms)."""
    m_bytes, m_flops = model_part(model, R, W, T, prompt_len)
    rec = recurrent_part(path_obj, model, R, W, T, parents, tail_len)
    if rec is None:
        return {}
    out = {"compulsory_bytes": m_bytes + rec["compulsory_bytes"], "flops": m_flops + rec["flops"]}
    if ceilings:
        by_rate = Counter({RATE_OF_DTYPE.get(model.dtype, "tf32_flop_per_s"): m_flops})
        by_rate[rec["rate"]] += rec["flops"]
        out["floor_ms"], out["floor_bound"] = floor_ms(out["compulsory_bytes"], dict(by_rate), ceilings)
    return out
