"""From a composed config to the list of cells a run must measure (validated before any cell runs).

Cells are enumerated shape-major (geometry, R, W, T, prompt_len; paths innermost) so a runner can build each
workload and its FP32 reference once and reuse them for every path of that shape; a runner listed in
sweeps.runners.RUNNER_SHAPES adds its own shapes after the grid's. Shards split whole shapes: shard i of n takes
the shapes whose index in that order is i mod n.
"""
from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from artifact.paths import PATHS
from artifact.registry import load_object
from artifact.results import COLUMNS, config_hash
from artifact.workload import GEOMETRIES, KNOWN_LINEAGES, Geometry, default_prompt_len

REDO_STATUSES = ("failed", "skipped")
DEVICES = ("auto", "cuda", "cpu")


class ConfigError(ValueError):
    """A config value that composes but cannot be run; the message names the key and the value."""


def _bad(key: str, value, why: str) -> ConfigError:
    return ConfigError(f"config key {key}={value!r}: {why}")


@dataclass(frozen=True)
class SweepSpec:
    """The validated, resolved content of one run's config."""

    suite: str
    runner: str
    join_key: str
    geometries: dict[str, Geometry]
    paths: list[str]
    R: list[int]
    W: list[int]
    T: list[int]
    prompt_len: list[int | None]
    lineage: str
    seed: int
    tolerance: float
    shard_index: int
    shard_count: int
    settings: dict = field(default_factory=dict)    # the runner's own config section (RUNNER_SETTINGS), plain

    @property
    def sharded(self) -> bool:
        return self.shard_count > 1

    def csv_path(self, results_dir: Path) -> Path:
        """results/<suite>.csv, or results/<suite>.shard<i>-of-<n>.csv for one shard of n."""
        if self.sharded:
            return results_dir / f"{self.suite}.shard{self.shard_index}-of-{self.shard_count}.csv"
        return results_dir / f"{self.suite}.csv"


def results_dir_of(cfg: DictConfig, device_type: str | None = None) -> Path:
    """cfg.results_dir, or by default results/ on a GPU and outputs/cpu_results/ on a CPU (absolute)."""
    from hydra.utils import to_absolute_path
    if cfg.results_dir:
        return Path(to_absolute_path(cfg.results_dir))
    if device_type is None:
        want = cfg.hardware.device
        device_type = "cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu"
    return Path(to_absolute_path("results" if device_type == "cuda" else "outputs/cpu_results"))


def check_folder(key: str, path: Path, given) -> None:
    """A folder a run writes into (results_dir: `<path>/<suite>.csv` and `<path>/env/`; Hydra's hydra.run.dir or
    hydra.sweep.dir), config key `key` given as `given`: `path` and each of its existing parents must be a folder
    (or not exist yet, then it is made). ConfigError naming the key otherwise."""
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            what = "names a file" if p == path else f"lies under {str(p)!r}, which is a file"
            raise _bad(key, given, f"{what}, not a folder; give a folder (it is made if missing)")


def _int_list(cfg_list, key: str, minimum: int, allow_none: bool = False) -> list:
    vals = list(cfg_list)
    if not vals:
        raise _bad(key, vals, "must list at least one value")
    for v in vals:
        if v is None and allow_none:
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise _bad(key, vals, f"every entry must be an int >= {minimum}, got {v!r}")
    if len(set(vals)) != len(vals):
        raise _bad(key, vals, "has duplicate entries")
    return vals


def _schema_of(name: str, hint):
    """The dataclass a config node of field `name` (type `hint`) must follow; None where its keys are free."""
    if dataclasses.is_dataclass(hint):
        return hint
    if hint is typing.Any:                       # a runner's settings section (sweeps.runners.RUNNER_SETTINGS)
        from sweeps.runners import RUNNER_SETTINGS
        if name in RUNNER_SETTINGS:
            try:
                return load_object(RUNNER_SETTINGS[name])
            except Exception:  # noqa: BLE001 - that suite then fails when its runner loads, naming the error
                return None
    return None


def unknown_keys(node, schema, prefix: str = "") -> list[tuple[str, list[str]]]:
    """Keys of `node` that its schema dataclass does not declare, as (dotted name, the keys its schema does
    declare there), recursively; the values of a
    Dict[str, <dataclass>] field follow that dataclass). Hydra's `+key=value` adds a key even to a structured
    config, so composition alone does not refuse a misspelt one."""
    hints = typing.get_type_hints(schema)
    out = []
    for key in node:
        name = f"{prefix}{key}"
        if key not in hints:
            out.append((name, list(hints)))
            continue
        hint, value = hints[key], node[key]
        if not isinstance(value, DictConfig):
            continue
        if typing.get_origin(hint) in (dict, typing.Dict):
            sub = typing.get_args(hint)[1]
            if dataclasses.is_dataclass(sub):
                for k in value:
                    if isinstance(value[k], DictConfig):
                        out += unknown_keys(value[k], sub, f"{name}.{k}.")
            continue
        sub = _schema_of(key, hint)
        if sub is not None:
            out += unknown_keys(value, sub, f"{name}.")
    return out


def validate(cfg: DictConfig) -> SweepSpec:
    """Check every value a run depends on; raise ConfigError naming the first bad key."""
    from sweeps.schema import SweepConfig
    extra = unknown_keys(cfg, SweepConfig)
    if extra:
        key, known = extra[0]
        parent = key.rsplit(".", 1)[0] if "." in key else "the config"
        raise ConfigError(f"config key {key}: no schema knows this key (a '+' override adds a key unchecked; "
                          f"misspelt?); the keys of {parent}: {', '.join(known)}")
    suite = cfg.suite.name
    if not isinstance(suite, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", suite):
        raise _bad("suite.name", suite, "must be a lower-case identifier (it names results/<suite>.csv)")
    from sweeps.runners import RUNNERS
    if cfg.suite.runner not in RUNNERS:
        raise _bad("suite.runner", cfg.suite.runner, f"unknown runner; known: {', '.join(RUNNERS)}")
    join_key = cfg.suite.join_key or suite

    if not cfg.geometry:
        raise _bad("geometry", dict(cfg.geometry), "select at least one geometry")
    geometries = {}
    for name, g in cfg.geometry.items():
        try:
            geo = Geometry(g.hk, g.hv, g.k, g.v)
        except ValueError as e:
            raise _bad(f"geometry.{name}", dict(g), str(e)) from None
        if name in GEOMETRIES and GEOMETRIES[name] != geo:
            raise _bad(f"geometry.{name}", dict(g), f"differs from the named geometry {GEOMETRIES[name]}")
        geometries[name] = geo

    if not cfg.path:
        raise _bad("path", dict(cfg.path), "select at least one path")
    for name, p in cfg.path.items():
        if name not in PATHS:
            raise _bad("path", name, f"not a registered path; registered: {', '.join(PATHS)}")
        if p.target != PATHS[name]:
            raise _bad(f"path.{name}.target", p.target, f"the registry says {PATHS[name]!r}")

    if cfg.lineage not in KNOWN_LINEAGES:
        raise _bad("lineage", cfg.lineage, f"unknown lineage; known: {', '.join(KNOWN_LINEAGES)}")
    if cfg.seed < 0:
        raise _bad("seed", cfg.seed, "must be >= 0")
    if not (math.isfinite(cfg.tolerance) and cfg.tolerance > 0):
        raise _bad("tolerance", cfg.tolerance, "must be a finite number > 0 (the correctness gate cannot be "
                   "switched off)")
    traffic = cfg.get("traffic")
    if isinstance(traffic, DictConfig) and traffic.get("check") is False:
        raise _bad("traffic.check", False, "the correctness gate cannot be switched off (an unchecked cell "
                   "would be recorded ok without a max_abs_err)")
    for key in ("warmup_ms", "rep_ms"):
        if cfg.timer[key] < 1:
            raise _bad(f"timer.{key}", cfg.timer[key], "must be >= 1")
    if cfg.hardware.device not in DEVICES:
        raise _bad("hardware.device", cfg.hardware.device, f"must be one of {DEVICES}")
    if cfg.hardware.gpu is not None and cfg.hardware.gpu < 0:
        raise _bad("hardware.gpu", cfg.hardware.gpu, "must be >= 0 or null")
    if cfg.shard.count < 1:
        raise _bad("shard.count", cfg.shard.count, "must be >= 1")
    if not 0 <= cfg.shard.index < cfg.shard.count:
        raise _bad("shard.index", cfg.shard.index, f"must be in [0, shard.count={cfg.shard.count})")
    for s in cfg.redo:
        if s not in REDO_STATUSES:
            raise _bad("redo", list(cfg.redo), f"entries must be in {REDO_STATUSES}, got {s!r}")
    if cfg.budget_min is not None and not cfg.budget_min > 0:
        raise _bad("budget_min", cfg.budget_min, "must be > 0 minutes or null")

    return SweepSpec(
        suite=suite, runner=cfg.suite.runner, join_key=join_key, geometries=geometries, paths=list(cfg.path),
        R=_int_list(cfg.shape.R, "shape.R", 1), W=_int_list(cfg.shape.W, "shape.W", 1),
        T=_int_list(cfg.shape.T, "shape.T", 1),
        prompt_len=_int_list(cfg.shape.prompt_len, "shape.prompt_len", 0, allow_none=True),
        lineage=cfg.lineage, seed=cfg.seed, tolerance=float(cfg.tolerance),
        shard_index=cfg.shard.index, shard_count=cfg.shard.count, settings=_runner_settings(cfg))


def _runner_settings(cfg: DictConfig) -> dict:
    """The suite's runner's own section (sweeps.runners.RUNNER_SETTINGS) as plain values, checked by its settings
    class's `check_values()` where it has one ({} for a runner without settings)."""
    from sweeps.runners import RUNNER_SETTINGS
    runner = cfg.suite.runner
    section = cfg.get(runner) if runner in RUNNER_SETTINGS else None
    if not isinstance(section, DictConfig):
        return {}
    values = OmegaConf.to_container(section, resolve=True)
    try:
        settings = load_object(RUNNER_SETTINGS[runner])(**values)
    except (ImportError, AttributeError, TypeError):
        return values                            # the suite fails when its runner loads, naming the error
    check = getattr(settings, "check_values", None)
    if callable(check):
        try:
            check()
        except ValueError as e:
            raise ConfigError(f"config key {runner}.{e}") from None
    return values


def make_cell(spec: SweepSpec, path: str, geo_name: str, geo: Geometry, R: int, W: int, T: int,
              prompt_len: int, lineage: str | None = None) -> dict:
    """One cell: its defining fields and its config_hash (hashed with the suite's join key); `lineage` (default
    the run's) lets a runner add cells of another lineage (beam_scaling's depth_lineages)."""
    cell = dict(suite=spec.suite, path=path, geometry=geo_name, R=R, W=W, T=T, O=T + 1, HK=geo.hk, HV=geo.hv,
                K=geo.k, V=geo.v, prompt_len=prompt_len, lineage=lineage or spec.lineage, seed=spec.seed,
                tolerance=spec.tolerance)
    cell["config_hash"] = config_hash({**cell, "join_key": spec.join_key})
    return cell


def shape_cells(spec: SweepSpec, device: torch.device) -> list[list[dict]]:
    """All shapes of the suite (all shards), each as its list of cells (one per path), in sweep order.

    A cell holds only its defining fields plus its config_hash; prompt_len None is resolved to the
    device default so the hash names the real prompt length. A runner's own shapes (RUNNER_SHAPES) follow the
    grid's, less any cell the grid already holds (one row per cell).
    """
    shapes = []
    for geo_name, geo in spec.geometries.items():
        for R in spec.R:
            for W in spec.W:
                for T in spec.T:
                    for pl in spec.prompt_len:
                        prompt_len = default_prompt_len(device) if pl is None else pl
                        shapes.append([make_cell(spec, path, geo_name, geo, R, W, T, prompt_len)
                                       for path in spec.paths])
    from sweeps.runners import RUNNER_SHAPES
    if spec.runner in RUNNER_SHAPES:
        seen = {c["config_hash"] for cells in shapes for c in cells}
        for cells in load_object(RUNNER_SHAPES[spec.runner])(spec, device):
            cells = [c for c in cells if c["config_hash"] not in seen]
            seen.update(c["config_hash"] for c in cells)
            if cells:
                shapes.append(cells)
    return shapes


def shard_cells(spec: SweepSpec, device: torch.device) -> list[dict]:
    """This shard's cells, flattened in sweep order."""
    shapes = shape_cells(spec, device)
    mine = shapes[spec.shard_index::spec.shard_count]
    cells = [c for cells in mine for c in cells]
    assert all(set(c) <= set(COLUMNS) for c in cells)
    return cells
