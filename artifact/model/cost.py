"""Roofline floor of one beam search's decode-forward: the full_model suite's floor_ms (docs/design.md §5).

The same lower bound as the operator suites' floors: compulsory bytes over the measured copy
bandwidth against FLOPs over the measured matrix rate of the precision used, whichever is longer. Over the T
decode calls of one search:

- model part: every weight read once per call (the tied LM head reads the whole embedding matrix; an untied
  input embedding only its N looked-up rows), the logits written once, each full-attention layer's prompt K/V
  read once per request and each beam's decode K/V once; the activations (`activation_bytes`); FLOPs 2 N per
  weight element of every matrix (the depthwise conv's [C, 4] included: 2 N C 4 is its FLOP count) plus
  attention's 4 N Hq d (prompt + decoded tokens) per layer, at the model dtype's matrix rate;
- recurrent part: the path's own `cost()` (the same function the operator suites use) on this search's
  lineage, once per GDN layer, at that path's rate. It counts the stepper's inputs (q, k, v, g, beta) and
  output o, so the activations leave those reads and that write to it.

Activations: each component of a call (artifact.model.regions) reads its input activations from HBM once and
writes its output activations once, in the model dtype (g, beta and the attention's log-sum-exp in fp32) --
the traffic of a forward that runs each GEMM as its own kernel and each element-wise stretch between two GEMMs
as one pass, which is how the pipeline is cut (artifact.model.blocks); a residual add is counted with the GEMM
that accumulates into the residual stream (out_proj, o_proj, down: each reads it as its C operand and writes
it), so every norm reads the residual stream alone. The output gate is counted with the own-KV merge that
applies it, the step's K/V with the q / k norm + rotary pass that stores them. The conv windows and the decode
KV are counted the way the path's beam-state mode keeps them (artifact.model.beam_state): each beam reads its
P-entry window once per call (an entry still on the prompt reads the request's row once), and the conv writes
the step's input once (ancestry) or each child's whole window (copy); each attention layer writes the step's
K/V once, and in copy mode every call t >= 1 also forks each beam's t earlier K/V rows (read and written once,
kv_state).

`model_components` splits the model part over the components of a decode call -- each weight to the component
that reads it, the prompt K/V and its FLOPs to attn_prompt, the decode K/V and its FLOPs to attn_decode_kv, the
logits to lm_head, each activation to the component that reads or writes it -- and `model_part` is their sum;
`component_costs` adds the recurrent part as gdn_recurrent, so the per-component bytes and FLOPs add up to
`decode_floor`'s exactly.
"""
from __future__ import annotations

import copy
from collections import Counter
from types import SimpleNamespace

import torch

from artifact.measure import floor_ms
from artifact.model.beam_state import MODES, beam_state_mode
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


def activation_bytes(cfg, R: int, W: int, T: int, elem: int, mode: str) -> Counter:
    """component -> activation bytes read and written over the T calls (module docstring), for the model
    dtype's element size `elem` and beam-state mode `mode`."""
    if mode not in MODES:
        raise ValueError(f"unknown beam-state mode {mode!r}; known: {MODES}")
    N, H, I = R * W, cfg.hidden_size, cfg.intermediate_size
    C, Vd, HV, P = cfg.conv_dim, cfg.value_dim, cfg.linear_num_value_heads, cfg.linear_conv_kernel_dim - 1
    nq, nkv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    n_layers, n_gdn, n_attn = len(cfg.layer_types), len(cfg.gdn_layers), len(cfg.attn_layers)
    out = Counter()
    for t in range(T):
        out["embed"] += N * H                                               # the embedded tokens
        # input and post-mixer norms of every layer and the final norm: the residual stream in, normed out
        out["norms"] += (2 * n_layers + 1) * 2 * N * H
        # gate_up ([gate | up] out and into silu * up), silu * up (out and into down), down's residual stream
        # (read and written)
        out["mlp"] += n_layers * (N * H + 2 * N * 2 * I + 2 * N * I + 2 * N * H)
        out["lm_head"] += N * H                                             # the normed hidden
        # GDN: in_proj (xn -> qkv | z | b | a), out_proj (gated norm's output, residual stream -> residual stream)
        out["gdn_proj"] += n_gdn * (N * H + N * (C + Vd + 2 * HV) + N * Vd + 2 * N * H)
        # conv: x and [b | a] in, q|k|v out; the window's P entries in; the kept entries out (beam_state)
        rows = [R if (mode == "ancestry" and s < 0) or (mode == "copy" and t == 0) else N
                for s in range(t - P, t)]
        kept = 1 if mode == "ancestry" else P
        out["gdn_conv"] += n_gdn * (N * C + N * 2 * HV + N * C + sum(rows) * C + kept * N * C)
        out["gdn_norm"] += n_gdn * 3 * N * Vd                               # o, z in; normed out
        # attention: qkv_proj (xn -> q | gate | k | v), o_proj (gated o, residual stream -> residual stream)
        out["attn_proj"] += n_attn * (N * H + N * (2 * nq + 2 * nkv) + N * nq + 2 * N * H)
        out["attn_qk_norm_rope"] += n_attn * 2 * N * (nq + 2 * nkv)         # q, k, v in; q, and k, v stored
        fork = 2 * N * t * 2 * nkv if mode == "copy" else 0                 # each beam's t earlier K/V rows
        out["kv_state"] += n_attn * fork
        out["attn_prompt"] += n_attn * 2 * N * nq                           # q in, o_p out
        out["attn_decode_kv"] += n_attn * 4 * N * nq                        # o_p, q, gate in; gated o out
    out = Counter({c: b * elem for c, b in out.items()})
    for t in range(T):                                                      # fp32 activations
        out["gdn_conv"] += n_gdn * N * 2 * HV * 4                           # g, beta
        out["attn_prompt"] += n_attn * N * cfg.num_attention_heads * 4      # its log-sum-exp out ...
        out["attn_decode_kv"] += n_attn * N * cfg.num_attention_heads * 4   # ... and into the merge
    return out


def model_components(model, R: int, W: int, T: int, prompt_len: int, mode: str = "ancestry"
                     ) -> dict[str, tuple[int, int]]:
    """component -> (compulsory bytes, FLOPs) of the T calls' non-recurrent work (module docstring) for
    beam-state mode `mode`; every component of artifact.model.regions but gdn_recurrent, zeros included."""
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
    nbytes.update(activation_bytes(cfg, R, W, T, elem, mode))
    return {c: (nbytes[c], flops[c]) for c in nbytes}


def model_part(model, R: int, W: int, T: int, prompt_len: int, mode: str = "ancestry") -> tuple[int, int]:
    """(compulsory bytes, FLOPs) of the T calls' non-recurrent work: the sum of `model_components`."""
    parts = model_components(model, R, W, T, prompt_len, mode).values()
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
    """{"compulsory_bytes", "flops", and with ceilings "floor_ms", "floor_bound"} of one search's T calls, the
    model part in the path's beam-state mode. The compute time sums the two parts at their own rates
    (artifact.measure.floor_ms)."""
    m_bytes, m_flops = model_part(model, R, W, T, prompt_len, beam_state_mode(path_obj))
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
           for c, (b, f) in model_components(model, R, W, T, prompt_len, beam_state_mode(path_obj)).items()}
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
