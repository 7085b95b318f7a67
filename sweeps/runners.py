"""The dispatch table from a suite's `suite.runner` to its cell runner (one mechanism for every suite).
The runners live in sweeps/suites/, one module per runner.

A runner is `run_cells(cfg, cells, ctx) -> Iterator[dict]` (contract: sweeps.context). Runners are imported
only when a suite uses them, so a missing module fails that suite alone, with the import error.
"""
from __future__ import annotations

from typing import Callable

from artifact.registry import load_object

RUNNERS: dict[str, str] = {
    "operator": "sweeps.suites.operator:run_cells",        # operator, recurrent_path, smoke
    "full_model": "sweeps.suites.full_model:run_cells",    # full_model (Fig 6)
    "traffic": "sweeps.suites.traffic:run_cells",          # traffic (Fig 8c): DRAM counters
    "beam_scaling": "sweeps.suites.beam_scaling:run_cells",  # beam_scaling (beyond the paper): depth and width
}

# A runner's own knobs: the config section of that name is typed by this dataclass (sweeps.schema).
RUNNER_SETTINGS: dict[str, str] = {
    "full_model": "sweeps.suites.full_model:FullModelSettings",
    "traffic": "sweeps.suites.traffic:TrafficOptions",
    "beam_scaling": "sweeps.suites.beam_scaling:BeamScalingSettings",
}

# A runner whose suite has cells beyond its R x W x T grid: (spec, device) -> more shapes, each a list of cells
# made by sweeps.spec.make_cell, enumerated after the grid's (e.g. one width cell per path at that path's limit).
RUNNER_SHAPES: dict[str, str] = {
    "beam_scaling": "sweeps.suites.beam_scaling:extra_shapes",
}


class RunnerUnavailable(RuntimeError):
    """The runner's module or function cannot be loaded."""


def load_runner(name: str) -> Callable:
    if name not in RUNNERS:
        raise ValueError(f"unknown runner {name!r}; known: {', '.join(RUNNERS)}")
    try:
        return load_object(RUNNERS[name])
    except (ImportError, AttributeError) as e:
        raise RunnerUnavailable(f"runner {name!r} ({RUNNERS[name]}) cannot be loaded: "
                                f"{type(e).__name__}: {e}") from e
