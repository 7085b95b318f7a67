"""Structured config schemas of every sweep, registered with Hydra's ConfigStore (Hydra 1.3).

The yaml files under sweeps/conf merge onto `SweepConfig`, so a misspelt key (`shape.RR=[4]`) or a value of
the wrong type (`shape.R=[a]`) fails at composition, naming the key; values are range-checked by
`sweeps.spec.validate` before any cell runs. Two groups are generated here from the code's own registries,
so they can never drift from them:
    geometry/<name>  one option per artifact.workload.GEOMETRIES entry, plus `all` (the nine)
    path/<name>      one option per artifact.registry.PATHS entry, plus `all` and `systems` (all but reference_*)
An option's node is {name: ...}, so selecting several (`path=[onela,vllm_fullstate]`) merges into one dict
whose keys are the selection. Suites pick their default selection with `override /geometry: ...`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from artifact.measure import DEFAULT_TOLERANCE
from artifact.registry import PATHS, load_object
from artifact.workload import GEOMETRIES
from sweeps.runners import RUNNER_SETTINGS


@dataclass
class GeometryConf:
    """Recurrent-state geometry (artifact.workload.Geometry): key heads, value heads, key dim, value dim."""

    hk: int = MISSING
    hv: int = MISSING
    k: int = MISSING
    v: int = MISSING


@dataclass
class PathConf:
    """A registered path; `target` is its artifact.registry.PATHS entry (checked against the registry)."""

    target: str = MISSING


@dataclass
class SuiteConf:
    """What a suite is: its name (results/<name>.csv, the `suite` column), which cell runner measures it
    (sweeps.runners.RUNNERS), and the join key its config hashes use (default: its name). Suites measuring
    the same cells with different instruments share a join key so their rows join on config_hash."""

    name: str = MISSING
    runner: str = MISSING
    join_key: Optional[str] = None
    description: str = ""


@dataclass
class ShapeConf:
    """The shape grid: every combination of R x W x T x prompt_len (None = the device default,
    artifact.workload.default_prompt_len: 1024 on a GPU, 32 on a CPU)."""

    R: List[int] = MISSING
    W: List[int] = MISSING
    T: List[int] = MISSING
    prompt_len: List[Optional[int]] = field(default_factory=lambda: [None])


@dataclass
class TimerConf:
    """artifact.measure.check_and_time's settings (written into every row's `timer` column)."""

    warmup_ms: int = 25
    rep_ms: int = 100


@dataclass
class HardwareConf:
    """Where cells run. device: auto (cuda if available, else cpu) | cuda | cpu. gpu: the CUDA device index
    (None = the current device; launchers set one per job). expect_gpu: a substring the GPU's name must
    contain (e.g. "H200"), so results are never silently taken on another part. measure_ceilings: measure
    copy bandwidth and matrix rates once per run (GPU only) for the floor_ms column; the floors are on with it,
    launch_floor_ms too (artifact.launch_floor)."""

    name: str = "auto"
    device: str = "auto"
    gpu: Optional[int] = None
    expect_gpu: Optional[str] = None
    measure_ceilings: bool = True


@dataclass
class ShardConf:
    """This job runs shapes i with i % count == index (whole shapes, so a workload is built once)."""

    index: int = 0
    count: int = 1


@dataclass
class SweepConfig:
    suite: SuiteConf = MISSING
    shape: ShapeConf = MISSING
    geometry: Dict[str, GeometryConf] = MISSING
    path: Dict[str, PathConf] = MISSING
    hardware: HardwareConf = field(default_factory=HardwareConf)
    shard: ShardConf = field(default_factory=ShardConf)
    timer: TimerConf = field(default_factory=TimerConf)
    lineage: str = "beam"
    seed: int = 0
    tolerance: float = DEFAULT_TOLERANCE
    # Where rows go; None = results/ on a GPU, outputs/cpu_results/ on a CPU (CPU rows are correctness checks,
    # never results: they must not sit in, or block the resume of, the committed results/).
    results_dir: Optional[str] = None
    # Re-run cells already recorded with these statuses (their old rows are removed first): [failed], ...
    redo: List[str] = field(default_factory=list)
    # Stop starting cells after this many minutes (exit 75, re-run to continue); None = no limit.
    budget_min: Optional[float] = None
    progress: bool = True
    # Runner-specific knobs (e.g. full_model.repeats=5, traffic.ladder=[ncu-kernel]), typed by the runner's
    # own settings dataclass (sweeps.runners.RUNNER_SETTINGS), so typos fail at composition here too.
    full_model: Any = field(default_factory=lambda: runner_settings("full_model"))
    traffic: Any = field(default_factory=lambda: runner_settings("traffic"))
    beam_scaling: Any = field(default_factory=lambda: runner_settings("beam_scaling"))


def runner_settings(runner: str):
    """The runner's settings dataclass as a typed config node; {} if its module cannot be imported (that
    suite then fails, naming the import error, when the sweep loads its runner)."""
    try:
        return OmegaConf.structured(load_object(RUNNER_SETTINGS[runner]))
    except Exception:  # noqa: BLE001 - reported later by load_runner, for that suite only
        return {}


def register() -> ConfigStore:
    """Register the schema and the generated geometry/path options (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="sweep_schema", node=SweepConfig)
    named = {n: GeometryConf(g.hk, g.hv, g.k, g.v) for n, g in GEOMETRIES.items()}
    for name, geo in named.items():
        cs.store(group="geometry", name=name, node={name: geo})
    cs.store(group="geometry", name="all", node=named)
    paths = {n: PathConf(target=t) for n, t in PATHS.items()}
    for name, p in paths.items():
        cs.store(group="path", name=name, node={name: p})
    cs.store(group="path", name="all", node=paths)
    cs.store(group="path", name="systems", node={n: p for n, p in paths.items() if not n.startswith("reference_")})
    return cs


register()
