"""Oracles only the tests use, built on the artifact's own pieces: the token-by-token GDN over a prompt (the
definition, docs/design.md §1; chunk_gated_delta's oracle), a whole sequence's logits without a cache (the
decode's oracle), each final beam's tokens traced back through its parents, and projection replay over a
workload in plain torch (the records OneLA's kernel must write); and the tiny Qwen3.5 model the comparisons with
transformers use."""
from __future__ import annotations

import contextlib

import torch

from artifact.gdn import gdn_step
from artifact.gtr import GtrStore
from artifact.model.beam import BeamResult
from artifact.model.config import ModelConfig, hybrid_pattern
from artifact.model.gdn_chunk import _check, _prep
from artifact.model.network import HybridModel
from artifact.model.prefill import PromptState, _forward
from artifact.reference import TorchReplayStepper, _decode
from artifact.workload import Workload


# One period of the real layer pattern (3 GDN + 1 gated attention); GQA in both mixers (HV = 2 HK with two key
# heads, 4 q / 2 kv heads); K = V = 16 so the Triton steppers run under the interpreter (which costs about a
# second per GDN layer and decode call of a beam test, so the model stays at one period); partial rotary on 4 of
# 16 dims; rope theta as Qwen3.5's.
HF_TINY = ModelConfig(
    vocab_size=97, hidden_size=64, intermediate_size=128, layer_types=hybrid_pattern(4, 4),
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_conv_kernel_dim=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    partial_rotary_factor=0.25, rope_theta=10_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)

def recurrent_gated_delta(q, k, v, g, beta, initial_state=None, dtype=torch.float32):
    """Token-by-token GDN over [B, L] sequences (artifact.gdn.gdn_step, the definition; chunk_gated_delta's
    arguments and results)."""
    _check(q, k, v, g, beta, initial_state)
    qh, kh, v, g, beta = _prep(q, k, v, g, beta, dtype)
    B, L, hv, V = v.shape
    S = torch.zeros(B, hv, V, kh.shape[-1], dtype=dtype, device=v.device) if initial_state is None \
        else initial_state.to(dtype).clone()
    o = torch.empty(B, L, hv, V, dtype=dtype, device=v.device)
    for i in range(L):
        S, o[:, i] = gdn_step(S, torch.exp(g[:, i]), beta[:, i], kh[:, i], v[:, i], qh[:, i])
    return o, S


@torch.no_grad()
def sequence_logits(model: HybridModel, tokens: torch.Tensor) -> torch.Tensor:
    """Logits [R, L, vocab] (fp32) at every position of whole sequences [R, L], with no cache."""
    return model.logits(_forward(model, tokens, PromptState(prompt_len=tokens.shape[1]), 64)).float()


def sequences(result: BeamResult) -> torch.Tensor:
    """Each final beam's O tokens [R, W, O], traced back through the parents."""
    O, R, W = result.tokens.shape
    seq = torch.empty(R, W, O, dtype=result.tokens.dtype, device=result.tokens.device)
    idx = torch.arange(W, device=result.tokens.device).expand(R, W)
    for t in range(O - 1, -1, -1):
        seq[:, :, t] = torch.gather(result.tokens[t], 1, idx)
        idx = torch.gather(result.parents[t].long(), 1, idx)
    return seq


def replay_decode(wl: Workload, dtype=torch.float64, store: GtrStore | None = None) -> torch.Tensor:
    """Projection replay (paper §3.2) over GTRs kept in `store` (default: records in `dtype`) through the
    ancestry index: o [T, R, W, HV, V] in `dtype`."""
    return _decode(TorchReplayStepper(wl.geometry, wl.R, wl.W, wl.T, wl.device, dtype, store), wl, dtype)


@contextlib.contextmanager
def transformers_gdn_in_torch():
    """transformers' Qwen3.5 with its own plain-torch GDN functions instead of fla's kernels, which it takes
    wherever fla is installed. fla's chunk kernels multiply in TF32 / bf16 even on fp32 inputs, so an fp32
    reference built on them is ~1e-2 off the exact one; the torch functions are exact fp32. Applies to models
    built inside the block."""
    try:
        import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5
    except ImportError:
        yield
        return
    swapped = {}
    for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"):
        fn = getattr(qwen3_5, name, None)
        if fn is not None and getattr(fn, "__wrapped__", None) is not None:
            swapped[name] = fn
            setattr(qwen3_5, name, fn.__wrapped__)
    try:
        yield
    finally:
        for name, fn in swapped.items():
            setattr(qwen3_5, name, fn)
