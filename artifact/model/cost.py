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
a model of our pipeline. The conv windows (each beam's width-1 previous q|k|v inputs) are left out as well.

`model_components` splits the model part over the components of a decode call (artifact.model.regions) --
each weight to the component that reads it, the prompt K/V and its FLOPs to attn_prompt, the decode K/V and its
FLOPs to attn_decode_kv, the logits to lm_head -- and `model_part` is their sum; `component_costs` adds the
recurrent part as gdn_recurrent, so the per-component bytes and FLOPs add up to `decode_floor`'s exactly.
"""
from __future__ import annotations

import copy
from collections import Counter
from types import SimpleNamespace

import torch

from artifact.measure import floor_ms
from artifact.model.regions import COMPONENTS

RATE_OF_DTYPE = {torch.bfloat16: "bf16_flop_per_s", torch.float16: "bf16_flop_per_s",
                 torch.float32: "tf32_flop_per_s"}


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# Which component of a decode call reads each per-layer weight (HybridModel's layer dict keys).
COMPONENT_OF_WEIGHT = {
    "ln1": "norms", "ln2": "norms", "gate_up": "mlp", "down": "mlp",
    "in_proj": "gdn_proj", "out_proj": "gdn_proj", "conv": "gdn_conv", "A_log": "gdn_conv", "dt_bias": "gdn_conv",
    "norm": "gdn_norm", "qkv_proj": "attn_proj", "o_proj": "attn_proj",
    "q_norm": "attn_qk_norm_rope", "k_norm": "attn_qk_norm_rope",
}


def model_components(model, R: int, W: int, T: int, prompt_len: int) -> dict[str, tuple[int, int]]:
    """component -> (compulsory bytes, FLOPs) of the T calls' non-recurrent work (module docstring); every
    component of artifact.model.regions but gdn_recurrent, zeros included."""
    cfg, N = model.cfg, R * W
    elem = torch.empty((), dtype=model.dtype).element_size()
    nbytes = Counter({c: 0 for c in COMPONENTS if c != "gdn_recurrent"})
    flops = Counter(nbytes)
    for layer in model.layers:
        for name, t in layer.items():
            if name not in COMPONENT_OF_WEIGHT:
                raise KeyError(f"model_components: no component for layer weight {name!r}")
            c = COMPONENT_OF_WEIGHT[name]
            nbytes[c] += T * _nbytes(t)
            flops[c] += T * 2 * N * t.numel() if t.dim() >= 2 else 0     # the conv's [C, 4] taps included
    nbytes["lm_head"] += T * (_nbytes(model.lm_head) + N * cfg.vocab_size * elem)       # weights and the logits
    flops["lm_head"] += T * 2 * N * model.lm_head.numel()
    nbytes["norms"] += T * _nbytes(model.final_norm)
    if model.embed is not model.lm_head:
        nbytes["embed"] += T * N * model.embed.shape[1] * model.embed.element_size()
    n_attn, hd = len(cfg.attn_layers), cfg.head_dim
    kv_row = 2 * cfg.num_key_value_heads * hd * elem                              # K and V of one token
    per_token = n_attn * 4 * N * cfg.num_attention_heads * hd                     # FLOPs per attended token
    for t in range(T):
        nbytes["attn_prompt"] += n_attn * R * prompt_len * kv_row                 # shared per request
        flops["attn_prompt"] += per_token * prompt_len
        nbytes["attn_decode_kv"] += n_attn * N * (t + 1) * kv_row                 # each beam's own
        flops["attn_decode_kv"] += per_token * (t + 1)
    return {c: (nbytes[c], flops[c]) for c in nbytes}


def model_part(model, R: int, W: int, T: int, prompt_len: int) -> tuple[int, int]:
    """(compulsory bytes, FLOPs) of the T calls' non-recurrent work: the sum of `model_components`."""
    parts = model_components(model, R, W, T, prompt_len).values()
    return sum(b for b, _ in parts), sum(f for _, f in parts)


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


def component_costs(model, path_obj, R: int, W: int, T: int, prompt_len: int, parents: torch.Tensor,
                    tail_len: int | None = None) -> dict[str, dict]:
    """component -> {"compulsory_bytes", "flops", "rate"} of one search's T calls: `model_components` at the
    model dtype's matrix rate plus the path's recurrent part as gdn_recurrent (absent when the path does not
    model itself). Their bytes and FLOPs sum to decode_floor's."""
    rate = RATE_OF_DTYPE.get(model.dtype, "tf32_flop_per_s")
    out = {c: {"compulsory_bytes": b, "flops": f, "rate": rate}
           for c, (b, f) in model_components(model, R, W, T, prompt_len).items()}
    rec = recurrent_part(path_obj, model, R, W, T, parents, tail_len)
    if rec is not None:
        out["gdn_recurrent"] = dict(rec)
    return out


def component_floor(cost: dict, ceilings: dict, calls: int = 1) -> tuple[float, str]:
    """(floor ms, bound) of one component's cost per call (`calls`: how many calls the cost covers): the same
    max(bytes / copy bandwidth, FLOPs / matrix rate) as decode_floor; a part with neither bytes nor FLOPs
    has floor 0 and bound ""."""
    if not cost["compulsory_bytes"] and not cost["flops"]:
        return 0.0, ""
    return floor_ms(cost["compulsory_bytes"] / calls, {cost["rate"]: cost["flops"] / calls}, ceilings)
