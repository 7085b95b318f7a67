"""The dispatch table from a suite's `suite.runner` to its cell runner (one mechanism for every suite).
The runners live in sweeps/suites/, one module per runner.

A runner is `run_cells(cfg, cells, ctx) -> Iterator[dict]` (contract: sweeps.context). Runners are imported
only when a suite uses them, so a missing module fails that suite alone, with the import error.
"""
from __future__ import annotations

import importlib
from typing import Callable

RUNNERS: dict[str, str] = {
    "operator": "sweeps.suites.operator:run_cells",        # operator, recurrent_path, smoke
    "full_model": "sweeps.suites.full_model:run_cells",    # full_model (Fig 6)
    "traffic": "sweeps.suites.traffic:run_cells",          # traffic (Fig 8c): DRAM counters
}

# A runner's own knobs: the config section of that name is typed by this dataclass (sweeps.schema).
RUNNER_SETTINGS: dict[str, str] = {
    "full_model": "sweeps.suites.full_model:FullModelSettings",
    "traffic": "sweeps.suites.traffic:TrafficOptions",
}


class RunnerUnavailable(RuntimeError):
    """The runner's module or function cannot be loaded."""


def load_runner(name: str) -> Callable:
    if name not in RUNNERS:
        raise ValueError(f"unknown runner {name!r}; known: {', '.join(RUNNERS)}")
    module, func = RUNNERS[name].split(":")
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as e:
        raise RunnerUnavailable(f"runner {name!r} ({RUNNERS[name]}) cannot be loaded: "
                                f"{type(e).__name__}: {e}") from e
