"""The env record of a run, results/env/<run_id>.json (docs/design.md §5, "Provenance"): the GPU, driver, clocks,
library versions and the code behind a results file. Apart from artifact.results because it asks torch about the
machine, and the results store is read by the reporting stage, which imports no torch.
`python -m artifact.results verify ENV.json` checks a record's source digest against its commit.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

from artifact.results import git_commit, source_digest


def _version(mod: str) -> str:
    try:
        from importlib.metadata import version
        return version(mod)
    except Exception:  # noqa: BLE001 - any failure means "not installed"
        return "not installed"


def env_record(extra: dict | None = None) -> dict:
    """GPU, driver, clocks, library versions and commit: what a reader needs to trust a results file."""
    import torch
    rec = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "python": platform.python_version(),
        "torch": torch.__version__, "triton": _version("triton"), "cuda": torch.version.cuda,
        "git_commit": git_commit(),
        "source_sha256": source_digest(),
        "packages": {p: _version(p) for p in ("vllm", "sglang", "flashinfer-python", "tensorrt_llm", "fla-core",
                                              "einops", "transformers", "hydra-core", "numpy", "pandas")},
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        rec.update(gpu=p.name, gpu_count=torch.cuda.device_count(), sm_count=p.multi_processor_count,
                   gpu_memory_bytes=p.total_memory)
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
                                "clocks.max.mem,power.limit", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
            rec["nvidia_smi"] = q[0] if q else "no output"
        except (OSError, subprocess.SubprocessError) as e:
            rec["nvidia_smi"] = f"unavailable: {e}"
    else:
        rec["gpu"] = "none (CPU; Triton interpreter)"
    rec.update(extra or {})
    return rec


def write_env(path: str | os.PathLike, extra: dict | None = None) -> dict:
    rec = env_record(extra)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(rec, indent=2, default=str) + "\n")
    return rec
