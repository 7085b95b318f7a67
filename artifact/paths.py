"""The path interface and the one registry of paths (DESIGN §3).

A path is one way of running all T decode steps of a workload, OneLA and every baseline alike:
    supports(geometry, shape, device) -> None | reason      (a reason makes the cell a recorded skip)
    prepare(wl)                                             allocate persistent state; never timed
    run(wl) -> o [T, R, W, HV, V]                           all T steps incl. beam-state maintenance; timed
    persistent_bytes(), written_bytes()                     from the tensors the path really keeps / stores
`run` must read every input from `wl`'s tensors on each call (the timer captures it in a CUDA graph once
and replays it after copying fresh inputs into those tensors), and must not synchronise with the host.
"""
from __future__ import annotations

import abc
import importlib

import torch

# name -> "module:Class". The only place a path is registered; modules are imported on first use, so a
# path whose framework is missing still lists, and reports the reason through supports().
PATHS: dict[str, str] = {
    "reference_fullstate": "artifact.reference:ReferenceFullStatePath",
    "reference_replay": "artifact.reference:ReferenceReplayPath",
    "onela": "kernels.onela:OneLAPath",
    "controlled_fullstate": "kernels.fullstate:ControlledFullStatePath",
    "vllm_fullstate": "baselines.vllm_fullstate:VllmFullStatePath",
    "vllm_replayssm": "baselines.vllm_replayssm:VllmReplaySSMPath",
    "sglang_fullstate": "baselines.sglang_fullstate:SglangFullStatePath",
    "sglang_replayssm": "baselines.sglang_replayssm:SglangReplaySSMPath",
    "flashinfer_fullstate": "baselines.flashinfer_fullstate:FlashInferFullStatePath",
    "trtllm_fullstate": "baselines.trtllm_fullstate:TrtllmFullStatePath",
}


class DecodePath(abc.ABC):
    name: str = ""
    capturable: bool = True   # whether run() can be captured in a CUDA graph

    def supports(self, geometry, shape, device) -> str | None:
        """None if this path can run the cell, else the reason it cannot (recorded as a skip)."""
        return None

    @abc.abstractmethod
    def prepare(self, wl) -> None: ...

    @abc.abstractmethod
    def run(self, wl) -> torch.Tensor: ...

    @abc.abstractmethod
    def persistent_bytes(self) -> int: ...

    @abc.abstractmethod
    def written_bytes(self) -> int: ...


class UnavailablePath(DecodePath):
    """Stands in for a path whose module cannot be imported; every cell is a skip with the import error."""

    capturable = False

    def __init__(self, name: str, reason: str):
        self.name, self.reason = name, reason

    def supports(self, geometry, shape, device) -> str | None:
        return self.reason

    def prepare(self, wl) -> None:
        raise RuntimeError(self.reason)

    def run(self, wl) -> torch.Tensor:
        raise RuntimeError(self.reason)

    def persistent_bytes(self) -> int:
        return 0

    def written_bytes(self) -> int:
        return 0


def list_paths() -> list[str]:
    return list(PATHS)


def get_path(name: str) -> DecodePath:
    """A fresh instance of the named path (an UnavailablePath if its module will not import)."""
    if name not in PATHS:
        raise ValueError(f"unknown path {name!r}; registered: {', '.join(PATHS)}")
    module, cls = PATHS[name].split(":")
    try:
        return getattr(importlib.import_module(module), cls)()
    except (ImportError, AttributeError) as e:
        return UnavailablePath(name, f"{name}: cannot load {PATHS[name]}: {type(e).__name__}: {e}")
