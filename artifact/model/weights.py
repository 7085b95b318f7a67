"""Model weights: seeded random initialisation and Hugging Face-layout checkpoints (config.json + safetensors).

Names are the Hugging Face Qwen3.5 parameter names without their model prefix (`layers.3.linear_attn.A_log`,
`embed_tokens.weight`, ...). A checkpoint folder may hold them under `model.language_model.` (Qwen3.5's
released `Qwen3_5ForConditionalGeneration` layout, which `save_hf_checkpoint` writes) or `model.` (a text-only
`*ForCausalLM`); vision tower and MTP weights are ignored. Random weights follow the transformers
initialisation (linear and embedding N(0, initializer_range), dt_bias 1, A = U(0.01, 16)), with two choices
of ours: the causal conv gets PyTorch's Conv1d default U(+-1/sqrt(width)), and every RMSNorm weight gets
N(0, initializer_range) noise on top of its neutral value so a norm that ignored its weight would be caught.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from artifact.model.config import ModelConfig
from artifact.model.safetensors_io import load_file, save_file

PREFIXES = ("model.language_model.", "model.")
IGNORED = ("model.visual.", "visual.", "mtp.", "model.mtp.")


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter the model needs, by name, with its Hugging Face shape."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (cfg.vocab_size, H), "norm.weight": (H,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, H)
    for i, kind in enumerate(cfg.layer_types):
        p = f"layers.{i}."
        shapes.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                       p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                       p + "mlp.down_proj.weight": (H, I)})
        if kind == "linear_attention":
            hv, dv = cfg.linear_num_value_heads, cfg.linear_value_head_dim
            a = p + "linear_attn."
            shapes.update({a + "in_proj_qkv.weight": (cfg.conv_dim, H), a + "in_proj_z.weight": (cfg.value_dim, H),
                           a + "in_proj_b.weight": (hv, H), a + "in_proj_a.weight": (hv, H),
                           a + "conv1d.weight": (cfg.conv_dim, 1, cfg.linear_conv_kernel_dim),
                           a + "A_log": (hv,), a + "dt_bias": (hv,), a + "norm.weight": (dv,),
                           a + "out_proj.weight": (H, cfg.value_dim)})
        else:
            nq, nkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
            a = p + "self_attn."
            shapes.update({a + "q_proj.weight": (2 * nq * d, H), a + "k_proj.weight": (nkv * d, H),
                           a + "v_proj.weight": (nkv * d, H), a + "o_proj.weight": (H, nq * d),
                           a + "q_norm.weight": (d,), a + "k_norm.weight": (d,)})
    return shapes


def random_weights(cfg: ModelConfig, seed: int = 0, device="cpu", dtype=torch.float32) -> dict[str, torch.Tensor]:
    """Seeded random weights (same seed and device -> same weights), generated on `device`, stored in `dtype`."""
    gen = torch.Generator(device=device).manual_seed(seed)
    std = cfg.initializer_range
    out = {}
    for name, shape in weight_shapes(cfg).items():
        if name.endswith("A_log"):
            w = torch.log(0.01 + (16 - 0.01) * torch.rand(shape, generator=gen, device=device))
        elif name.endswith("dt_bias"):
            w = torch.ones(shape, device=device)
        elif name.endswith("conv1d.weight"):
            bound = 1 / math.sqrt(shape[-1])
            w = (2 * torch.rand(shape, generator=gen, device=device) - 1) * bound
        elif name.endswith("linear_attn.norm.weight"):       # gated RMSNorm: plain weight, neutral value 1
            w = 1 + std * torch.randn(shape, generator=gen, device=device)
        elif "norm" in name:                                  # zero-centred RMSNorm: x * (1 + w), neutral 0
            w = std * torch.randn(shape, generator=gen, device=device)
        else:
            w = std * torch.randn(shape, generator=gen, device=device)
        out[name] = w.to(dtype)
    return out


def check_weights(cfg: ModelConfig, weights: dict[str, torch.Tensor]) -> None:
    """ValueError naming the first missing or mis-shaped tensor."""
    for name, shape in weight_shapes(cfg).items():
        if name not in weights:
            raise ValueError(f"weights lack tensor {name!r}")
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"weight {name!r} has shape {tuple(weights[name].shape)}, expected {shape}")


def save_hf_checkpoint(folder, cfg: ModelConfig, weights: dict[str, torch.Tensor], shards: int = 1) -> Path:
    """Write config.json + safetensors in Qwen3.5's released layout (`model.language_model.` prefix)."""
    check_weights(cfg, weights)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
              "tie_word_embeddings": cfg.tie_word_embeddings, "text_config": cfg.to_hf_text_config()}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    named = {("lm_head.weight" if n == "lm_head.weight" else PREFIXES[0] + n): t for n, t in weights.items()}
    if shards <= 1:
        save_file(named, folder / "model.safetensors", metadata={"format": "pt"})
        return folder
    names = list(named)
    index = {}
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: named[n] for n in part}, folder / fname, metadata={"format": "pt"})
        index.update({n: fname for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}, indent=2) + "\n")
    return folder


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    if (folder / "model.safetensors").exists():
        return load_file(folder / "model.safetensors")
    if (folder / "model.safetensors.index.json").exists():
        files = sorted(set(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values()))
        out = {}
        for f in files:
            out.update(load_file(folder / f))
        return out
    if (folder / "pytorch_model.bin").exists():
        return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise ValueError(f"checkpoint folder {folder} has no model.safetensors, model.safetensors.index.json "
                     f"or pytorch_model.bin")


def load_hf_checkpoint(folder) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """(config, weights) from a local Hugging Face-layout folder; tensors keep their stored dtype, on CPU."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise ValueError(f"checkpoint folder {folder} has no config.json")
    cfg = ModelConfig.from_hf(json.loads((folder / "config.json").read_text()))
    weights = {}
    for name, t in _read_tensors(folder).items():
        if name.startswith(IGNORED):
            continue
        short = next((name[len(p):] for p in PREFIXES if name.startswith(p)), name)
        weights[short] = t
    if cfg.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    check_weights(cfg, weights)
    return cfg, weights
