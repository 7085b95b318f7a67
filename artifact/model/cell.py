"""One Fig 6 cell: the model and the prompts it decodes, and one gated beam search of a path on them -- the
measurement the `full_model` suite records (sweeps.suites.full_model) and the decode breakdown
(tools.decode_breakdown) takes apart.

- `FullModelInputs`: the model (a preset with seeded random weights, or a local Hugging Face checkpoint) and the
  prefills of seeded prompts, built on first use and kept while the cells that follow share them.
- `gated_decode`: build the path's BeamDecoder; where it runs on CUDA graphs, capture its T per-call graphs while
  a decoy prompt (other seeded tokens, the same shapes) is loaded; then load the real prompt, poison every
  stepper output and the hidden states, replay one whole beam search and compare every GDN layer's outputs with
  FP32 FullState (artifact.model.stepper_gate). Capturing on the decoy is the full model's form of the operator gate's
  rule (artifact.measure: capture on scrambled inputs, copy the real ones in): a graph that holds a value of the
  prompt it was captured on, instead of reading the decoder's buffers, replays the decoy's state and fails the
  gate; captured on the real prompt, it would pass.
- `GatedDecode.time`: the decode-forward time of a passing decode (artifact.model.graphs.time_decode); a failing
  one is never timed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from artifact.measure import free_device_memory
from artifact.model.beam import BeamResult
from artifact.model.stepper_gate import poison, stepper_max_abs_err
from artifact.model.decode import BeamDecoder
from artifact.model.graphs import capture, time_decode
from artifact.model.network import HybridModel, get_dtype
from artifact.model.prefill import PromptState, prefill, random_prompts
from artifact.paths import get_path
from artifact.timing import Timing

# vLLM 0.33 "align" prefix caching keeps a GDN checkpoint every mamba_block_size tokens. For Qwen3.5-0.8B on
# an H200 (SM90) it is the attention block size that makes one attention page (block x 2 x 2 kv heads x 256 x
# 2 B) cover one GDN page (conv 6144 x 3 bf16 + state 16 x 128 x 128 fp32, mamba_ssm_dtype float32 =
# 1,085,440 B), rounded to the FlashInfer GDN prefill checkpoint alignment 64: 64 * ceil(1085440 / (64 *
# 2048)) = 576 (vllm/platforms/interface.py _align_hybrid_block_size, v1/attention/backends/gdn_attn.py).
VLLM_ALIGN_BLOCK_QWEN3_5_0_8B = 576
# The decoy prompt's seed offset: its tokens are not the real prompt's of the same seed.
DECOY_SEED_OFFSET = 1_000_003


class FullModelInputs:
    """The model and the prefilled prompts of the cells of one run, built on first use. One model is kept at a
    time (a new one frees the last), and the prompts of one (R, prompt_len, seed) -- the real and the decoy --
    so cells that share them should arrive together."""

    def __init__(self, device, checkpoint: str | None = None, dtype: str = "bfloat16",
                 replay_block: int = VLLM_ALIGN_BLOCK_QWEN3_5_0_8B):
        if not isinstance(replay_block, int) or isinstance(replay_block, bool) or replay_block < 1:
            raise ValueError(f"replay_block must be a positive int, got {replay_block!r}")
        self.device, self.checkpoint, self.dtype = torch.device(device), checkpoint, get_dtype(dtype)
        self.replay_block = replay_block
        self._model: tuple | None = None            # (key, HybridModel)
        self._prompts: dict = {}

    def model(self, preset: str, seed: int) -> HybridModel:
        """The checkpoint's model if one is set, else `preset` with weights seeded by `seed`."""
        key = (self.checkpoint, preset, seed)
        if self._model is None or self._model[0] != key:
            self._model = None
            self._prompts.clear()
            free_device_memory(self.device)
            m = HybridModel.from_hf(self.checkpoint, self.dtype, self.device) if self.checkpoint else \
                HybridModel.random(preset, seed=seed, dtype=self.dtype, device=self.device)
            self._model = (key, m)
        return self._model[1]

    def prompt(self, model: HybridModel, R: int, prompt_len: int, seed: int, decoy: bool = False) -> PromptState:
        """The prefill of R seeded random prompts of prompt_len tokens (the decoy's tokens from another seed)."""
        key = (id(model), R, prompt_len, seed, decoy)
        if key not in self._prompts:
            for old in [k for k in self._prompts if k[:4] != key[:4]]:
                del self._prompts[old]
            toks = random_prompts(R, prompt_len, model.cfg.vocab_size, seed + (DECOY_SEED_OFFSET if decoy else 0),
                                  self.device)
            self._prompts[key] = prefill(model, toks, replay_block=self.replay_block)
        return self._prompts[key]


@dataclass
class GatedDecode:
    """A path's beam search replayed on the real prompt and checked against FP32 FullState."""

    decoder: BeamDecoder
    result: BeamResult
    graphs: bool                  # replayed from CUDA graphs (else eager)
    max_abs_err: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_abs_err <= self.tolerance          # NaN and inf fail

    @property
    def reason(self) -> str:
        """Why the gate failed ("" when it passed)."""
        return "" if self.passed else (f"max_abs_err {self.max_abs_err:.3e} > tolerance {self.tolerance:.3e} "
                                       "(GDN outputs vs FP32 FullState)")

    def time(self, repeats: int, warmup: int) -> Timing:
        """Decode-forward GPU time of whole searches, as Fig 6 times it (artifact.model.graphs.time_decode)."""
        if not self.passed:
            raise RuntimeError(f"a decode that failed its gate is not timed: {self.reason}")
        return time_decode(self.decoder, repeats, warmup)


def uses_graphs(model: HybridModel, path: str) -> bool:
    """Whether a cell's decode runs on CUDA graphs: on a CUDA device, for a path that can be captured."""
    return model.device.type == "cuda" and get_path(path).capturable


def gated_decode(inputs: FullModelInputs, model: HybridModel, path: str, R: int, W: int, T: int, prompt_len: int,
                 seed: int, tolerance: float, *, attention: str = "auto", compile: bool = False) -> GatedDecode:
    """Build, capture (on the decoy prompt), poison, replay on the real prompt, and gate one cell's decode."""
    if not (isinstance(tolerance, (int, float)) and tolerance > 0 and math.isfinite(tolerance)):
        raise ValueError(f"tolerance must be a positive finite number, got {tolerance!r}")
    dec = BeamDecoder(model, path, R, W, T, prompt_len, attention=attention, compile=compile)
    graphs = uses_graphs(model, path)
    if graphs:
        dec.load_prompt(inputs.prompt(model, R, prompt_len, seed, decoy=True))
        capture(dec)
    dec.load_prompt(inputs.prompt(model, R, prompt_len, seed))
    poison(dec)
    result = dec.run(use_graphs=graphs)
    return GatedDecode(dec, result, graphs, stepper_max_abs_err(dec, result), float(tolerance))
