"""The model's weights on the device, arranged for batched inference (fused projections), plus embed / LM head.

`HybridModel` owns no state of a decode: prefill (`artifact.model.prefill`) and the beam decoder
(`artifact.model.decode`) read its per-layer weight dicts. Projections that read the same input are fused
into one GEMM, as serving frameworks do (vLLM's in_proj_qkvz / in_proj_ba, qkv_proj, gate_up_proj):
GDN [qkv | z | b | a], attention [q+gate | k | v], MLP [gate | up]. Matrices live in the model dtype; norm
weights, A_log, dt_bias and the conv taps in fp32.
"""
from __future__ import annotations

import torch

from artifact.model.config import ModelConfig, get_model_config
from artifact.model.weights import check_weights, load_hf_checkpoint, random_weights

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def get_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"unsupported model dtype {dtype!r}; known: {', '.join(DTYPES)}")


class HybridModel:
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], dtype=torch.bfloat16, device="cpu"):
        check_weights(cfg, weights)
        self.cfg, self.dtype, self.device = cfg, get_dtype(dtype), torch.device(device)
        mat = lambda n: weights[n].to(self.device, self.dtype).contiguous()   # noqa: E731
        vec = lambda n: weights[n].to(self.device, torch.float32).contiguous()  # noqa: E731
        self.embed = mat("embed_tokens.weight")
        self.lm_head = self.embed if cfg.tie_word_embeddings else mat("lm_head.weight")
        self.final_norm = vec("norm.weight")
        self.layers: list[dict[str, torch.Tensor]] = []
        for i, kind in enumerate(cfg.layer_types):
            p = f"layers.{i}."
            layer = {"ln1": vec(p + "input_layernorm.weight"), "ln2": vec(p + "post_attention_layernorm.weight"),
                     "gate_up": torch.cat([mat(p + "mlp.gate_proj.weight"), mat(p + "mlp.up_proj.weight")]),
                     "down": mat(p + "mlp.down_proj.weight")}
            if kind == "linear_attention":
                a = p + "linear_attn."
                layer.update(
                    in_proj=torch.cat([mat(a + "in_proj_qkv.weight"), mat(a + "in_proj_z.weight"),
                                       mat(a + "in_proj_b.weight"), mat(a + "in_proj_a.weight")]),
                    conv=vec(a + "conv1d.weight")[:, 0, :].contiguous(), A_log=vec(a + "A_log"),
                    dt_bias=vec(a + "dt_bias"), norm=vec(a + "norm.weight"), out_proj=mat(a + "out_proj.weight"))
            else:
                a = p + "self_attn."
                layer.update(
                    qkv_proj=torch.cat([mat(a + "q_proj.weight"), mat(a + "k_proj.weight"),
                                        mat(a + "v_proj.weight")]),
                    o_proj=mat(a + "o_proj.weight"), q_norm=vec(a + "q_norm.weight"), k_norm=vec(a + "k_norm.weight"))
            self.layers.append(layer)

    @classmethod
    def random(cls, cfg: ModelConfig | str, seed: int = 0, dtype=torch.bfloat16, device="cpu") -> "HybridModel":
        cfg = get_model_config(cfg)
        return cls(cfg, random_weights(cfg, seed, device=device), dtype, device)

    @classmethod
    def from_hf(cls, folder, dtype=torch.bfloat16, device="cpu") -> "HybridModel":
        cfg, weights = load_hf_checkpoint(folder)
        return cls(cfg, weights, dtype, device)

    def split_gdn_proj(self, y: torch.Tensor):
        """[..., conv_dim + value_dim + 2 HV] -> (qkv, z, ba) views; ba = [b | a] (the gates read both, in one
        pass: artifact.model.layers.gdn_gates)."""
        c = self.cfg
        return torch.split(y, [c.conv_dim, c.value_dim, 2 * c.linear_num_value_heads], dim=-1)

    def split_attn_proj(self, y: torch.Tensor):
        """[..., 2 nq d + 2 nkv d] -> (query [.., nq, d], gate [.., nq, d], key [.., nkv, d], value [.., nkv, d]),
        all views (the output gate multiplies the attention output per head: no copy to flatten it)."""
        c = self.cfg
        nq, nkv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        qg, k, v = torch.split(y, [2 * nq * d, nkv * d, nkv * d], dim=-1)
        qg = qg.unflatten(-1, (nq, 2 * d))
        return qg[..., :d], qg[..., d:], k.unflatten(-1, (nkv, d)), v.unflatten(-1, (nkv, d))

    def logits(self, hidden: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """hidden [..., H] (already final-normed) -> logits [..., vocab] in the model dtype."""
        flat = hidden.reshape(-1, hidden.shape[-1])
        if out is None:
            return (flat @ self.lm_head.t()).reshape(*hidden.shape[:-1], -1)
        torch.mm(flat, self.lm_head.t(), out=out.view(flat.shape[0], -1))
        return out
