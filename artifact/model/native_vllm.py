"""vLLM's own end-to-end beam search (`LLM.beam_search`, vllm/entrypoints/generate/beam_search/offline.py) as a
fourth reference for Fig 6 -- possible only where a full vLLM install runs beside the GPU's torch.

vLLM 0.33.0 pins torch==2.14.0 (its wheel's METADATA); the H200 host has torch 2.11, so the install cannot
run there. `native_beam_search_unavailable()` says why, for a recorded skip. Running LLM.beam_search itself
is not implemented here: there is no host on which it could be exercised.
"""
from __future__ import annotations

import importlib.util

import torch

VLLM_VERSION = "0.33.0"
VLLM_TORCH_PIN = "2.14.0"


def native_beam_search_unavailable() -> str:
    """The reason vLLM's native LLM.beam_search cannot be run on this host (always a reason; see module doc)."""
    have = torch.__version__.split("+")[0]
    if importlib.util.find_spec("vllm") is None:
        return (f"vLLM {VLLM_VERSION} is not installed: it pins torch=={VLLM_TORCH_PIN}, this host has torch "
                f"{have}; the adapters load only its kernels (baselines/)")
    try:
        from importlib.metadata import requires, version
        pins = [r for r in (requires("vllm") or []) if r.replace(" ", "").startswith("torch==")]
        pin = pins[0].split("==")[1].split(";")[0].strip() if pins else None
        installed = version("vllm")
    except Exception as e:  # noqa: BLE001 - a broken install is a reason too
        return f"vLLM metadata unreadable: {type(e).__name__}: {e}"
    if pin and pin != have:
        return f"vLLM {installed} pins torch=={pin}, this host has torch {have}"
    return (f"vLLM {installed} with torch {have} is present, but this artifact does not implement the native "
            f"LLM.beam_search run (no host to exercise it on)")
