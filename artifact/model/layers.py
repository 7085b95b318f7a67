"""Functional building blocks of the Qwen3.5 hybrid model, shared by prefill and decode.

Each follows the reference modelling code (transformers `models/qwen3_5/modeling_qwen3_5.py`, vLLM
`model_executor/models/qwen3_5.py`):
- RMSNorm is zero-centred (`Qwen3_5RMSNorm`, vLLM's GemmaRMSNorm): x * rsqrt(mean x^2 + eps) * (1 + w), in fp32.
- The GDN output norm is gated (`Qwen3_5RMSNormGated`): rmsnorm(o) * w * silu(z) per value head, in fp32.
- Attention (`Qwen3_5Attention`): q_proj emits per head [query | gate] (2 * head_dim); q_norm / k_norm are
  zero-centred RMSNorms over head_dim before rotary; output = attn * sigmoid(gate) then o_proj.
- Rotary is partial and non-interleaved: the first rotary_dim = head_dim * 0.25 dims rotate with
  rotate_half over [cos | cos]; the rest pass through. Qwen3.5's interleaved M-RoPE reduces to this 1-D
  rope for text (all three position sections are equal).
- GDN gates: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b), both fp32; the causal conv is
  depthwise over q|k|v channels with silu.
Decode runs these under torch.compile (artifact.model.blocks); each is written as element-wise expressions and
reductions that Inductor fuses, with no concatenation to materialise.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Zero-centred RMSNorm over the last dim, computed in fp32, returned in x's dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())
    return y.to(x.dtype)


def gated_rms_norm(o: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, dtype) -> torch.Tensor:
    """GDN output norm: rmsnorm(o) * weight * silu(z) over the last (value) dim, fp32 inside."""
    of = o.float()
    y = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return (y * F.silu(z.float())).to(dtype)


def swiglu_hidden(x: torch.Tensor, w_gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate(x)) * up(x), the input of the down projection, with gate and up fused into one [2I, H] weight."""
    gate, up = (x @ w_gate_up.t()).chunk(2, dim=-1)
    return F.silu(gate) * up


def swiglu(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """down(silu(gate(x)) * up(x))."""
    return swiglu_hidden(x, w_gate_up) @ w_down.t()


def output_gate(o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """The attention output gate of the decode, o * sigmoid(gate) in fp32, returned in o's dtype (o is the
    attention output already rounded to the model dtype, as transformers' SDPA returns it)."""
    return (o.float() * torch.sigmoid(gate.float())).to(o.dtype)


def rotary_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [P, rotary_dim] (fp32) for integer positions [P]: frequencies repeated as [f | f]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=positions.device)
                                / rotary_dim))
    freqs = positions.double()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().float(), emb.sin().float()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first rot = cos.shape[-1] dims of x (rotate_half layout); cos/sin broadcast against x[..., :rot].

    One element-wise expression over the whole head, x_i c_i + x_p(i) s_i in fp32, so that a compiled caller
    fuses it with the norm before it (no concatenation to materialise): for i < rot/2 the partner p(i) is
    i + rot/2 and s_i = -sin_i, for rot/2 <= i < rot it is i - rot/2 and s_i = sin_i -- rotate_half's
    [-x2, x1] * sin term, the sign moved onto sin, which is exact -- and a dim i >= rot passes through as
    x_i * 1 + x_i * 0 = x_i (exact, then cast back to x's dtype).
    """
    rot, D = cos.shape[-1], x.shape[-1]
    half = rot // 2
    i = torch.arange(D, device=x.device)
    partner = torch.where(i < half, i + half, torch.where(i < rot, i - half, i))
    cos_f = F.pad(cos, (0, D - rot), value=1.0)
    sin_f = F.pad(sin, (0, D - rot), value=0.0) * torch.where(i < half, -1.0, 1.0)
    xf = x.float()
    return (xf * cos_f + xf[..., partner] * sin_f).to(x.dtype)


def gdn_gates(ba: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor) -> torch.Tensor:
    """The gates of each (token, value head) from ba [..., 2 HV] = [b | a], adjacent in the fused GDN projection
    (HybridModel.split_gdn_proj): [2, ..., HV] fp32, contiguous, holding [beta, g] -- beta = sigmoid(b), the
    write strength, and g = -exp(A_log) * softplus(a + dt_bias), the log-decay; `beta, g = gates` gives both,
    each contiguous.

    One element-wise pass over ba writes both (under torch.compile a single kernel). The pair is one tensor, not
    two views of one, because a compiled function keeps the strides of the tensors it returns but not of views
    it returns into a buffer of its own (whose layout Inductor chooses).
    """
    hv = A_log.numel()
    x = ba.float().unflatten(-1, (2, hv))                                           # [..., 2, HV]: b, a
    is_a = (torch.arange(2, device=ba.device) == 1)[:, None]
    gates = torch.where(is_a, -torch.exp(A_log.float()) * F.softplus(x + dt_bias.float()), torch.sigmoid(x))
    return gates.movedim(-2, 0).contiguous()


def causal_conv_step(history: list, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One decode position of the depthwise causal conv: silu(sum_j w[:, j] * window[j]) in fp32.

    history: the width-1 previous inputs, oldest first, each like x [..., C]; weight [C, width] fp32. Returns
    x's dtype.
    """
    acc = x.float() * weight[:, -1]
    for j, h in enumerate(history):
        acc = acc + h.float() * weight[:, j]
    return F.silu(acc).to(x.dtype)


def causal_conv_prefill(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Depthwise causal conv + silu over a sequence: x [B, L, C] -> [B, L, C] (fp32 inside), zero history."""
    C, width = weight.shape
    y = F.conv1d(x.float().transpose(1, 2), weight[:, None, :], padding=width - 1, groups=C)[..., : x.shape[1]]
    return F.silu(y).transpose(1, 2).to(x.dtype)
