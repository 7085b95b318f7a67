"""The hybrid GDN / gated-attention model geometry (Qwen3.5 text model), as a config the rest of the package reads.

Field names are the Hugging Face `Qwen3_5TextConfig` keys (transformers `models/qwen3_5/configuration_qwen3_5.py`),
so a checkpoint's `config.json` (its `text_config`) maps onto this dataclass one to one.
`QWEN3_5_0_8B` is Qwen3.5-0.8B's text geometry (paper §4.1: 24 layers, 18 GDN + 6 full attention); `TINY` is a
scaled-down copy of the same pattern for CPU tests.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from artifact.workload import Geometry

LAYER_TYPES = ("linear_attention", "full_attention")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layer_types: tuple[str, ...]
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02

    def __post_init__(self):
        object.__setattr__(self, "layer_types", tuple(self.layer_types))
        for f in ("vocab_size", "hidden_size", "intermediate_size", "linear_num_key_heads",
                  "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                  "linear_conv_kernel_dim", "num_attention_heads", "num_key_value_heads", "head_dim"):
            val = getattr(self, f)
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise ValueError(f"ModelConfig.{f} must be a positive int, got {val!r}")
        if not self.layer_types:
            raise ValueError("ModelConfig.layer_types is empty")
        bad = [t for t in self.layer_types if t not in LAYER_TYPES]
        if bad:
            raise ValueError(f"ModelConfig.layer_types: unknown layer type {bad[0]!r}; known: {LAYER_TYPES}")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(f"ModelConfig: linear_num_value_heads={self.linear_num_value_heads} is not a multiple "
                             f"of linear_num_key_heads={self.linear_num_key_heads}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"ModelConfig: num_attention_heads={self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads={self.num_key_value_heads}")
        if not 0 < self.partial_rotary_factor <= 1 or self.rotary_dim % 2:
            raise ValueError(f"ModelConfig.partial_rotary_factor={self.partial_rotary_factor!r} must give an even "
                             f"rotary dim in (0, head_dim={self.head_dim}]")
        if self.linear_conv_kernel_dim < 2:
            raise ValueError(f"ModelConfig.linear_conv_kernel_dim must be >= 2, got {self.linear_conv_kernel_dim}")

    @property
    def num_hidden_layers(self) -> int:
        return len(self.layer_types)

    @property
    def gdn_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "linear_attention"]

    @property
    def attn_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "full_attention"]

    @property
    def geometry(self) -> Geometry:
        """The recurrent-state geometry one GDN layer hands to a path's Stepper."""
        return Geometry(self.linear_num_key_heads, self.linear_num_value_heads, self.linear_key_head_dim,
                        self.linear_value_head_dim)

    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv: q, k and v of a GDN layer (in that order, as in_proj_qkv emits them)."""
        return 2 * self.key_dim + self.value_dim

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    def to_hf_text_config(self) -> dict:
        d = dataclasses.asdict(self)
        d["layer_types"] = list(self.layer_types)
        d.update(num_hidden_layers=self.num_hidden_layers, hidden_act="silu", attention_bias=False,
                 attn_output_gate=True, model_type="qwen3_5_text", mamba_ssm_dtype="float32",
                 rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta,
                                  "partial_rotary_factor": self.partial_rotary_factor})
        return d

    @classmethod
    def from_hf(cls, config: dict) -> "ModelConfig":
        """From a Hugging Face config.json dict (Qwen3_5ForConditionalGeneration's `text_config`, or a text-only
        config); unknown keys are ignored, a missing required key is a ValueError naming it."""
        text = dict(config.get("text_config") or config)
        rope = text.get("rope_parameters") or {}
        for key in ("rope_theta", "partial_rotary_factor"):
            if key not in text and key in rope:
                text[key] = rope[key]
        if "layer_types" not in text and "num_hidden_layers" in text:
            every = text.get("full_attention_interval", 4)
            text["layer_types"] = ["linear_attention" if (i + 1) % every else "full_attention"
                                   for i in range(text["num_hidden_layers"])]
        if "tie_word_embeddings" not in text and "tie_word_embeddings" in config:
            text["tie_word_embeddings"] = config["tie_word_embeddings"]
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        missing = sorted(required - set(text))
        if missing:
            raise ValueError(f"config.json lacks required text-config key(s) {missing}")
        cfg = cls(**{k: v for k, v in text.items() if k in names})
        if len(cfg.layer_types) != text.get("num_hidden_layers", len(cfg.layer_types)):
            raise ValueError(f"config.json: num_hidden_layers={text['num_hidden_layers']} but "
                             f"{len(cfg.layer_types)} layer_types")
        return cfg


def hybrid_pattern(n_layers: int, every: int) -> tuple[str, ...]:
    """Qwen3.5's layout: every `every`-th layer is full attention, the others GDN."""
    return tuple("linear_attention" if (i + 1) % every else "full_attention" for i in range(n_layers))


# Qwen3.5-0.8B text model: 24 layers = 6 x [3 GDN + 1 gated full attention], hidden 1024, GDN 16/16 heads of
# 128 with a width-4 causal conv, attention 8 q / 2 kv heads of 256 with output gate and partial rotary 0.25,
# SwiGLU 3584, RMSNorm eps 1e-6, tied embeddings, vocabulary 248320, rope theta 1e7 (Qwen3.5 family).
QWEN3_5_0_8B = ModelConfig(
    vocab_size=248320, hidden_size=1024, intermediate_size=3584, layer_types=hybrid_pattern(24, 4),
    linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, num_attention_heads=8, num_key_value_heads=2, head_dim=256,
    partial_rotary_factor=0.25, rope_theta=10_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)

# The same pattern scaled down for CPU tests: GQA in both mixers (HV = 2 HK, 4 q / 2 kv heads), K = V = 16 so
# the Triton steppers also run under the interpreter, rotary on 4 of 16 dims.
TINY = ModelConfig(
    vocab_size=97, hidden_size=32, intermediate_size=64, layer_types=hybrid_pattern(4, 2),
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_conv_kernel_dim=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    partial_rotary_factor=0.25, rope_theta=10_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)

# Model presets by the geometry name a full-model cell carries.
MODELS: dict[str, ModelConfig] = {"qwen3_5_0_8b": QWEN3_5_0_8B, "tiny": TINY}


def get_model_config(name: str | ModelConfig) -> ModelConfig:
    if isinstance(name, ModelConfig):
        return name
    if name in MODELS:
        return MODELS[name]
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
