"""sweeps/: every suite config composes and validates, typos fail naming the key, the smoke suite runs end to end
on CPU through the real entry point, a killed sweep resumes without losing or duplicating rows, failures are
recorded and make the exit status non-zero, and joblib shards merge into the same cells as one run."""
from __future__ import annotations

import csv
from collections import Counter
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import sweeps.schema  # noqa: F401 - registers the structured configs
from artifact.paths import PATHS, DecodePath
from artifact.workload import GEOMETRIES
import sweeps.run as sweep_run
from artifact.reference import fullstate_decode
from sweeps import runners
from sweeps.run import EXIT_FAILED, EXIT_INCOMPLETE, EXIT_OK, KILL_AFTER_ENV, run_sweep
from sweeps.spec import ConfigError, shape_cells, shard_cells, validate
from sweeps.suites import operator as operator_runner
from artifact import measure
from artifact.results import COLUMNS, ResultsFileError, fold_rerun, merge_shards, read_rows, write_rows

REPO = Path(__file__).resolve().parents[1]
SUITES = ("operator", "recurrent_path", "traffic", "full_model", "smoke", "beam_scaling")
CPU = torch.device("cpu")
REFS = "path=[reference_fullstate,reference_replay]"


def cfg_of(*overrides: str, hydra_cfg: bool = False):
    with initialize_config_module("sweeps.conf", version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra_cfg)


def cli(tmp: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m sweeps.run ...` in `tmp` (results/, outputs/ land there), as a user runs it."""
    e = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "sweeps.run", *args, "progress=false"], cwd=tmp, env=e,
                          capture_output=True, text=True, timeout=240)


# ---------------------------------------------------------------- configs

@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_composes_and_validates(suite):
    spec = validate(cfg_of(f"suite={suite}"))
    assert spec.suite == suite and spec.lineage == "beam" and spec.shard_count == 1
    cells = shard_cells(spec, CPU)
    assert len({c["config_hash"] for c in cells}) == len(cells)
    assert all(set(c) <= set(COLUMNS) for c in cells)


def test_operator_suite_is_405_shapes_over_every_system():
    """Every system path; the two references gate every cell but are not timed 405 times (they are the
    slowest cells and no figure plots them; recurrent_path times them)."""
    spec = validate(cfg_of("suite=operator"))
    shapes = shape_cells(spec, CPU)
    assert len(shapes) == 3 * 3 * 5 * 9 == 405
    assert list(spec.geometries) == list(GEOMETRIES)
    assert spec.paths == [p for p in PATHS if not p.startswith("reference_")]
    assert {(c["R"], c["W"], c["T"]) for s in shapes for c in s} == \
        {(r, w, t) for r in (4, 8, 16) for w in (128, 256, 512) for t in range(2, 7)}


def test_paper_suites_cells():
    fm = validate(cfg_of("suite=full_model"))
    assert fm.paths == ["onela", "controlled_fullstate_paper", "controlled_fullstate", "vllm_fullstate_paper",
                        "vllm_fullstate", "vllm_prefix_replay"]
    assert (fm.R, fm.W, fm.T, fm.prompt_len) == ([4], [256], [2, 3, 4, 5, 6], [1024, 5120])
    rp = validate(cfg_of("suite=recurrent_path"))
    assert (list(rp.geometries), rp.R, rp.W, rp.T, rp.paths) == (["qwen3_5_0_8b"], [4], [512], [2, 6], list(PATHS))


def test_traffic_rows_join_recurrent_path_rows_by_hash():
    gpu = torch.device("cuda")   # only names the default prompt length; nothing is allocated
    traffic = shard_cells(validate(cfg_of("suite=traffic")), gpu)
    recurrent = shard_cells(validate(cfg_of("suite=recurrent_path")), gpu)
    assert [c["config_hash"] for c in traffic] == [c["config_hash"] for c in recurrent]
    assert {c["suite"] for c in traffic} == {"traffic"}
    operator = {c["config_hash"] for c in shard_cells(validate(cfg_of("suite=operator")), gpu)}
    assert not operator & {c["config_hash"] for c in recurrent}   # another suite: its own hashes


def test_single_run_by_override():
    spec = validate(cfg_of("suite=operator", "geometry=qwen3_5_0_8b", "shape.R=[4]", "shape.W=[512]",
                           "shape.T=[2,6]", "path=[onela,vllm_fullstate]"))
    cells = shard_cells(spec, CPU)
    assert [(c["geometry"], c["R"], c["W"], c["T"], c["path"]) for c in cells] == [
        ("qwen3_5_0_8b", 4, 512, 2, "onela"), ("qwen3_5_0_8b", 4, 512, 2, "vllm_fullstate"),
        ("qwen3_5_0_8b", 4, 512, 6, "onela"), ("qwen3_5_0_8b", 4, 512, 6, "vllm_fullstate")]
    assert cells[0]["HV"] == 16 and cells[0]["O"] == 3


@pytest.mark.parametrize("override,named", [
    ("shape.RR=[4]", "shape.RR"), ("geometry=qwen35", "geometry/qwen35"), ("path=[onela,onla]", "path/onla"),
    ("shape.R=[four]", "shape.R"), ("suite=opertor", "opertor"), ("hardware=tpu", "hardware/tpu"),
    ("timer.rep=5", "timer.rep"), ("full_model.repeatz=5", "full_model.repeatz"),
    ("traffic.ladder=5", "traffic.ladder"),
])
def test_composition_typos_fail_naming_the_key(override, named):
    with pytest.raises(Exception) as e:
        cfg_of("suite=operator", override) if not override.startswith("suite=") else cfg_of(override)
    assert named in str(e.value)


@pytest.mark.parametrize("override,named", [
    ("shape.R=[4,0]", "shape.R"), ("shape.T=[2,2]", "shape.T"), ("lineage=bogus", "lineage"),
    ("shard.index=2", "shard.index"), ("redo=[ok]", "redo"), ("timer.rep_ms=0", "timer.rep_ms"),
    ("hardware.device=tpu", "hardware.device"), ("tolerance=0", "tolerance"), ("budget_min=-1", "budget_min"),
    ("geometry.kimi_linear.hv=48", "geometry.kimi_linear"), ("geometry.qwen3_5_0_8b.hv=32", "geometry.qwen3_5_0_8b"),
])
def test_bad_values_fail_before_any_cell_naming_the_key(override, named):
    with pytest.raises(ConfigError, match=f"config key {named}"):
        validate(cfg_of("suite=operator", override))


def test_runner_settings_are_typed_config_sections():
    cfg = cfg_of("suite=full_model", "full_model.repeats=5", "traffic.timeout_s=60")
    assert cfg.full_model.repeats == 5 and cfg.traffic.timeout_s == 60


def test_launcher_configs_compose():
    jl = cfg_of("suite=operator", "launcher=joblib_gpus", "shard.count=4", hydra_cfg=True)
    assert jl.hydra.launcher._target_.endswith("JoblibLauncher")
    assert jl.hydra.launcher.n_jobs == 4 and jl.hydra.sweeper.params["shard.index"] == "range(0,4)"
    assert jl.hardware.gpu == jl.shard.index          # job i -> GPU i
    sl = cfg_of("suite=operator", "launcher=slurm", hydra_cfg=True)
    assert sl.hydra.launcher._target_.endswith("SlurmLauncher")
    assert sl.hydra.launcher.gpus_per_node == 1 and sl.hydra.launcher.array_parallelism == 8
    assert sl.hydra.sweeper.params["shard.index"] == "range(0,8)" and sl.hardware.gpu is None
    for c in (jl, sl):
        assert c.hydra.callbacks.merge_shards._target_ == "sweeps.merge.MergeShardsCallback"


@pytest.mark.parametrize("hidden,launcher,missing", [
    (("hydra_plugins.hydra_submitit_launcher", "submitit"), ("launcher=slurm",),
     "(Hydra has no launcher 'submitit_slurm')"),                           # no plugin: the config does not compose
    (("submitit",), ("launcher=slurm_local", "shard.count=2"), "(no module 'submitit')"),    # no executor: at launch
    (("hydra_plugins.hydra_joblib_launcher", "joblib"), ("launcher=joblib_gpus",), "(Hydra has no launcher 'joblib')"),
])
def test_a_launcher_whose_package_is_missing_is_named_with_how_to_install_it(tmp_path, hidden, launcher, missing):
    """A multirun through a launcher whose package is not installed (the plugin, or the executor it imports at
    launch) exits 2 with one line naming the package and the install command, before any job runs."""
    hide = f"import sys; sys.modules.update(dict.fromkeys({hidden!r})); from sweeps.run import cli; cli()"
    e = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    p = subprocess.run([sys.executable, "-c", hide, "-m", "suite=smoke", REFS, *launcher, "hardware=cpu",
                        "results_dir=r", "progress=false"], cwd=tmp_path, env=e, capture_output=True, text=True,
                       timeout=120)
    package = hidden[-1] if "no module" in missing else hidden[0].split(".")[1].replace("_", "-")
    assert p.returncode == 2, p.stdout + p.stderr
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("[sweeps] launcher=")]
    assert len(said) == 1 and f": the package {package} is not installed {missing}; " in said[0], p.stderr
    assert "pip install -e '.[launchers]' (or pip install " in said[0], said
    assert "Traceback" not in p.stderr and not (tmp_path / "r").exists(), p.stderr


def test_shards_partition_whole_shapes():
    base = cfg_of("suite=operator")
    every = [c["config_hash"] for c in shard_cells(validate(base), CPU)]
    parts = []
    for i in range(3):
        parts += shard_cells(validate(cfg_of("suite=operator", "shard.count=3", f"shard.index={i}")), CPU)
    assert sorted(c["config_hash"] for c in parts) == sorted(every)
    per_shard_shapes = [{(c["geometry"], c["R"], c["W"], c["T"]) for c in shard_cells(
        validate(cfg_of("suite=operator", "shard.count=3", f"shard.index={i}")), CPU)} for i in range(3)]
    assert sum(len(s) for s in per_shard_shapes) == 405 and not per_shard_shapes[0] & per_shard_shapes[1]


# ---------------------------------------------------------------- end to end (real entry point, CPU)

def test_smoke_suite_end_to_end_and_rerun_skips(tmp_path, capsys):
    """./run_all.sh smoke's command: every path recorded; skipped paths say why; a re-run runs nothing."""
    p = cli(tmp_path, "suite=smoke")
    res = tmp_path / "outputs" / "smoke_results"        # smoke's default results_dir: out of results/
    out = res / "smoke.csv"
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    rows = read_rows(out)
    spec = validate(cfg_of("suite=smoke"))
    assert sorted(r["config_hash"] for r in rows) == sorted(c["config_hash"] for c in shard_cells(spec, CPU))
    assert {r["path"] for r in rows} == set(PATHS)
    for r in rows:
        assert r["status"] in ("ok", "skipped"), r
        assert r["status"] == "ok" or r["reason"], r
        if r["status"] == "ok":
            assert float(r["max_abs_err"]) <= float(r["tolerance"]) and int(r["persistent_bytes"]) > 0
    assert all(r["status"] == "ok" for r in rows if r["path"].startswith("reference_"))
    run_ids = {r["run_id"] for r in rows}
    assert len(run_ids) == 1
    run_id = run_ids.pop()
    wall = json.loads((res / "env" / f"{run_id}.wall.json").read_text())   # where the run's time went
    assert wall["cells"] == len(rows) and wall["wall_s"] > 0
    assert {p: w["cells"] for p, w in wall["by_path"].items()} == dict(Counter(r["path"] for r in rows))
    from sweeps.suites.operator import BUILD, RELEASE    # per-shape work is booked apart from any path
    assert set(wall["shared"]) == {BUILD, RELEASE} and min(wall["shared"].values()) >= 0   # 0.1 s resolution
    assert sum(w["wall_s"] for w in wall["by_path"].values()) + sum(wall["shared"].values()) \
        <= wall["wall_s"] + 0.05 * (len(wall["by_path"]) + len(wall["shared"]) + 1)   # each is rounded to 0.1 s
    phases = wall["phases"]                                 # ... and in which phase
    assert set(phases) == set(wall["by_path"]) | set(wall["shared"])
    assert set(phases[BUILD]) == {"setup", "reference"}
    for path in {r["path"] for r in rows if r["status"] == "ok"}:
        assert {"gate", "record"} <= set(phases[path]) <= {"setup", "capture", "gate", "record", "other"}, path
    for path in {r["path"] for r in rows if r["status"] == "skipped"}:       # supports() and the row alone
        assert set(phases[path]) <= {"setup", "record", "other"}, path
    env = json.loads((res / "env" / f"{run_id}.json").read_text())
    assert env["suite"] == "smoke" and env["git_commit"] and "torch" in env and env["config"]["suite"]["name"] == "smoke"
    assert "triton_cache_autotuning" in env
    assert "ok " in p.stdout and "failed 0" in p.stdout
    assert not (tmp_path / "results").exists() and (tmp_path / "outputs" / "smoke").is_dir()   # Hydra's own dir

    before = out.read_bytes()         # the same command again (in process: one interpreter start less)
    assert run_sweep(cfg_of("suite=smoke", f"results_dir={res}", "progress=false")) == EXIT_OK
    assert "0 to run" in capsys.readouterr().out
    assert out.read_bytes() == before


def test_killed_sweep_resumes_without_loss_or_duplicates(tmp_path):
    args = ("suite=smoke", REFS, "results_dir=results")
    killed = cli(tmp_path, *args, env={KILL_AFTER_ENV: "3"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    out = tmp_path / "results" / "smoke.csv"
    first = read_rows(out)
    assert len(first) == 3
    with open(out, "a") as f:       # a kill mid-write leaves a torn last line
        f.write("smoke,reference_replay,smoke_gqa,2,5,3,4,2,4,16,32,32,be")
    assert run_sweep(cfg_of(*args[:-1], f"results_dir={tmp_path / 'results'}", "progress=false")) == EXIT_OK
    rows = read_rows(out)
    expected = [c["config_hash"] for c in shard_cells(validate(cfg_of(*args)), CPU)]
    assert sorted(r["config_hash"] for r in rows) == sorted(expected)      # none lost, none twice
    assert rows[:3] == first                                               # finished rows untouched
    with open(out, newline="") as f:
        assert sum(1 for _ in csv.reader(f)) == 1 + len(expected)         # no torn fragment left
    kept = (tmp_path / "results" / "smoke.csv.refused").read_text()         # the fragment is kept aside
    assert kept.startswith("# line 5: torn last line (no line end)\n") and kept.endswith(",32,be\n")


def test_joblib_shards_merge_into_the_same_cells_as_one_run(tmp_path):
    one, sharded = tmp_path / "one", tmp_path / "sharded"
    one.mkdir(), sharded.mkdir()
    p = cli(sharded, "-m", "suite=smoke", "launcher=joblib_gpus", "shard.count=2", "hardware=cpu",
            "path=[reference_replay]", "results_dir=results")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(f.name for f in (sharded / "results").glob("smoke.shard*")) == \
        ["smoke.shard0-of-2.csv", "smoke.shard1-of-2.csv"]
    envs = [json.loads(f.read_text()) for f in (sharded / "results" / "env").glob("*.json")
            if "." not in f.stem]                                     # not the .wall.json side files
    assert sorted(e["assigned_gpu"] for e in envs) == [0, 1]   # each job its own (here fake) device id
    assert p.stdout.count(" s wall") == 2 and "row(s) merged" in p.stdout   # each shard run's wall time
    cfg = cfg_of("suite=smoke", "path=[reference_replay]", f"results_dir={one / 'results'}", "progress=false")
    assert run_sweep(cfg) == EXIT_OK
    key = lambda rows: sorted((r["config_hash"], r["status"], r["path"], r["T"]) for r in rows)  # noqa: E731
    assert key(read_rows(sharded / "results" / "smoke.csv")) == key(read_rows(one / "results" / "smoke.csv"))


def test_slurm_config_runs_through_submitits_local_executor(tmp_path):
    """launcher=slurm is launcher=slurm_local plus the SLURM executor and its own keys; slurm_local runs the
    same multirun through submitit's local executor on this host: two shards of the smoke suite (OneLA and the
    FP32 reference under the interpreter, a framework kernel's named skip), each a submitit job, merged when
    both end into rows identical, but for run_id, to one process's run of the same cells."""
    slurm = cfg_of("suite=smoke", "launcher=slurm", hydra_cfg=True)
    local = cfg_of("suite=smoke", "launcher=slurm_local", hydra_cfg=True)
    sl, lo = (OmegaConf.to_container(c.hydra.launcher) for c in (slurm, local))
    assert sl.pop("_target_").endswith("SlurmLauncher") and lo.pop("_target_").endswith("LocalLauncher")
    assert {k: v for k, v in sl.items() if k in lo} == lo and sl["array_parallelism"] == "${shard.count}"
    for key in ("sweeper", "callbacks"):
        assert OmegaConf.to_container(slurm.hydra[key]) == OmegaConf.to_container(local.hydra[key])
    strip = lambda c: {k: v for k, v in OmegaConf.to_container(c).items() if k != "hydra"}   # noqa: E731
    assert strip(slurm) == strip(local)

    paths = "path=[onela,reference_fullstate,vllm_fullstate]"
    sharded, one = tmp_path / "sharded", tmp_path / "one"
    sharded.mkdir(), one.mkdir()
    p = cli(sharded, "-m", "suite=smoke", "launcher=slurm_local", "shard.count=2", "hardware=cpu", paths,
            "results_dir=results")
    assert p.returncode == 0, p.stdout + p.stderr
    res = sharded / "results"
    assert sorted(f.name for f in res.glob("smoke.shard*")) == ["smoke.shard0-of-2.csv", "smoke.shard1-of-2.csv"]
    assert "row(s) merged" in p.stdout and p.stdout.count(" s wall") == 2
    logs = list(sharded.glob("multirun/smoke/*/.submitit/*/*_log.out"))
    assert len(logs) == 2, logs                                     # each shard ran as a submitit job
    envs = [json.loads(f.read_text()) for f in (res / "env").glob("*.json") if "." not in f.stem]
    assert sorted(e["shard"]["index"] for e in envs) == [0, 1] and {e["shard"]["count"] for e in envs} == {2}
    cfg = cfg_of("suite=smoke", paths, f"results_dir={one / 'results'}", "progress=false")
    assert run_sweep(cfg) == EXIT_OK
    rows = lambda d: sorted(({k: v for k, v in r.items() if k != "run_id"} for r in read_rows(d / "smoke.csv")),
                            key=lambda r: r["config_hash"])                               # noqa: E731
    merged, single = rows(res), rows(one / "results")
    assert merged == single and len(merged) == 3 * 2 and {r["status"] for r in merged} == {"ok", "skipped"}


def test_a_jobs_gpu_is_pinned_through_cuda_visible_devices(monkeypatch):
    """Job i sees only GPU i (of the launcher's own CUDA_VISIBLE_DEVICES list when one is set)."""
    from sweeps.run import ConfigError, pin_visible_gpu
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ONELA_PINNED_GPU", raising=False)     # so monkeypatch restores both afterwards
    pin_visible_gpu(1)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1" and os.environ["ONELA_PINNED_GPU"] == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    pin_visible_gpu(1)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    with pytest.raises(ConfigError, match=r"hardware.gpu=1.*CUDA_VISIBLE_DEVICES='4'"):
        pin_visible_gpu(1)


class _Hw:
    def __init__(self, gpu, device="auto"):
        self.gpu, self.device, self.expect_gpu = gpu, device, "H200"


def _fake_cuda(monkeypatch, count: int, seen: list):
    for var in ("CUDA_VISIBLE_DEVICES", "ONELA_PINNED_GPU", "ONELA_GPU_PINNING"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: seen.append(os.environ.get("CUDA_VISIBLE_DEVICES"))
                        or True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA H200")


def test_the_pin_comes_before_cuda_is_first_asked_for_devices(monkeypatch):
    """is_available() starts the CUDA driver, which ignores a later CUDA_VISIBLE_DEVICES: a pin made after it
    would leave every joblib shard on GPU 0, two processes on one GPU."""
    seen: list = []
    _fake_cuda(monkeypatch, count=1, seen=seen)
    assert sweep_run.resolve_device(_Hw(gpu=1)) == torch.device("cuda", 0)
    assert seen and seen[0] == "1"                                   # already pinned when CUDA was asked
    assert os.environ["ONELA_GPU_PINNING"] == "CUDA_VISIBLE_DEVICES"


def test_a_pin_that_cannot_take_selects_the_gpu_by_index(monkeypatch):
    seen: list = []
    _fake_cuda(monkeypatch, count=2, seen=seen)                      # CUDA had started: both GPUs visible
    assert sweep_run.resolve_device(_Hw(gpu=1)) == torch.device("cuda", 1)
    assert os.environ["ONELA_GPU_PINNING"].startswith("torch.cuda.set_device")
    assert "CUDA_VISIBLE_DEVICES" not in os.environ                  # children see what this process sees


# ---------------------------------------------------------------- failures, budget, redo (in process)

class _Path(DecodePath):
    """A fake path: `mode` picks how it misbehaves ("oom_once": until the runner has freed memory)."""

    capturable = False
    freed = False

    def __init__(self, mode):
        self.mode = mode

    def supports(self, geometry, shape, device):
        return "fake: unsupported here" if self.mode == "unsupported" else None

    def prepare(self, wl):
        self.ref = fullstate_decode(wl)

    def run(self, wl):
        if self.mode == "raise":
            raise RuntimeError("kernel exploded")
        if self.mode == "oom" or (self.mode == "oom_once" and not _Path.freed):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80 GiB")
        return self.ref + {"wrong": 1.0, "own_gate": 7e-4}.get(self.mode, 0.0)

    def persistent_bytes(self):
        return 1

    def written_bytes(self):
        return 1


@pytest.fixture
def fake_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    modes = {"reference_fullstate": "ok", "reference_replay": "raise", "onela": "wrong", "controlled_fullstate": "oom"}
    monkeypatch.setattr(operator_runner, "get_path", lambda name: _Path(modes.get(name, "unsupported")))


def _cfg(tmp_path, *extra):
    return cfg_of("suite=smoke", "geometry=smoke_mha", "shape.T=[2]", f"results_dir={tmp_path / 'r'}",
                  "progress=false", *extra)


def test_failed_unsupported_and_oom_cells_are_recorded_and_exit_nonzero(tmp_path, fake_paths, capsys):
    cfg = _cfg(tmp_path, "path=[reference_replay,onela,controlled_fullstate,reference_fullstate,vllm_fullstate]")
    assert run_sweep(cfg) == EXIT_FAILED
    rows = {r["path"]: r for r in read_rows(tmp_path / "r" / "smoke.csv")}
    assert rows["reference_replay"]["status"] == "failed" and "kernel exploded" in rows["reference_replay"]["reason"]
    assert rows["onela"]["status"] == "failed" and "> tolerance" in rows["onela"]["reason"]
    assert rows["onela"]["latency_ms"] in ("", "nan")          # a red gate is never timed
    assert rows["controlled_fullstate"]["status"] == "skipped"
    assert rows["controlled_fullstate"]["reason"].startswith("out of memory")
    assert rows["reference_fullstate"]["status"] == "ok"       # the sweep went on past the failures
    assert rows["vllm_fullstate"]["status"] == "skipped" and rows["vllm_fullstate"]["reason"] == "fake: unsupported here"
    out = capsys.readouterr().out
    assert "ok 1, skipped 2 (1 out of memory), failed 2" in out and "FAILED  reference_replay" in out
    assert run_sweep(cfg) == EXIT_FAILED          # recorded failures still fail a re-run that runs nothing


def test_an_out_of_memory_cell_is_retried_once_after_freeing_memory(tmp_path, monkeypatch):
    """No gc pass between a shape's paths; a path that runs out of memory gets one after, and one retry."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    calls = []
    monkeypatch.setattr(operator_runner, "get_path", lambda name: _Path("oom_once"))
    monkeypatch.setattr(_Path, "freed", False)

    def free(device):
        calls.append(device)
        _Path.freed = True
    monkeypatch.setattr(operator_runner, "free_device_memory", free)
    monkeypatch.setattr(measure, "free_device_memory", free)
    assert run_sweep(_cfg(tmp_path, "path=[onela]")) == EXIT_OK
    (row,) = read_rows(tmp_path / "r" / "smoke.csv")
    assert row["status"] == "ok" and len(calls) == 1     # the retry's: the shape ends holding nothing


def test_memory_is_released_after_a_shape_only_where_tensors_still_hold_it(tmp_path, monkeypatch):
    """supports()' memory checks count the allocator's cached blocks as free (artifact.limits.device_free_bytes),
    so a release (gc + empty cache) changes what they see only where tensors still hold memory after a shape (a
    reference cycle): the shape that leaves some held is released, the one that leaves none is not."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    held, released = {"bytes": 0}, []

    class Leaky(_Path):
        def run(self, wl):
            if wl.W == 3:
                held["bytes"] += 1 << 20          # kept alive past the shape, as a reference cycle keeps it
            return super().run(wl)

    def free(device):
        released.append(device)
        held["bytes"] = 0                         # the gc pass frees it
    monkeypatch.setattr(operator_runner, "get_path", lambda name: Leaky("ok"))
    monkeypatch.setattr(measure, "allocated_bytes", lambda device: held["bytes"])
    monkeypatch.setattr(operator_runner, "allocated_bytes", lambda device: held["bytes"])
    monkeypatch.setattr(measure, "free_device_memory", free)
    monkeypatch.setattr(operator_runner, "free_device_memory", free)
    assert run_sweep(_cfg(tmp_path, "path=[onela,reference_fullstate]", "shape.W=[3,5]")) == EXIT_OK
    rows = read_rows(tmp_path / "r" / "smoke.csv")
    assert {r["W"] for r in rows} == {"3", "5"} and all(r["status"] == "ok" for r in rows)
    assert len(released) == 1 and held["bytes"] == 0       # after the W=3 shape only


def test_a_large_leftover_cache_alone_is_returned_without_a_gc_pass(monkeypatch):
    """Nothing held after the work: no gc pass; the allocator's unused cache is returned to the driver only where it
    exceeds CACHE_RELEASE_SHARE of the device (a graph capture cannot reclaim cached blocks while it captures)."""
    assert measure.cached_share("cpu") == 0.0 and measure.allocated_bytes("cpu") == 0     # off CUDA: nothing to do
    done = []
    monkeypatch.setattr(measure, "allocated_bytes", lambda device: 100)
    monkeypatch.setattr(measure, "free_device_memory", lambda device: done.append("gc + empty_cache"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: done.append("empty_cache"))
    for share, want in ((measure.CACHE_RELEASE_SHARE / 2, ""), (2 * measure.CACHE_RELEASE_SHARE, "cache returned")):
        monkeypatch.setattr(measure, "cached_share", lambda device, s=share: s)
        assert measure.release_where_needed("cuda", allocated_before=100) == want
    assert done == ["empty_cache"]
    assert measure.release_where_needed("cuda", allocated_before=99) == "collected"     # and held: a collection
    assert done == ["empty_cache", "gc + empty_cache"]


def test_the_wall_record_splits_each_owner_into_phases(tmp_path, monkeypatch, capsys):
    """RunContext.phase books a runner's work by phase: to the next row's path, or under a shared label kept out
    of every path; a path's untimed rest is its `other`, so an owner's phases add up to its wall time. A phase
    name outside PHASES, or a phase inside another, is refused."""
    import time as _time
    from artifact.results import PHASES, format_phase_table, phase_table

    def runner(cfg, cells, ctx):
        for cell in cells:
            ctx.started(cell)
            with ctx.phase("setup", shared="(build)"):
                _time.sleep(0.05)
            with ctx.phase("gate"):
                _time.sleep(0.1)
            _time.sleep(0.03)                      # the path's untimed rest
            yield {**cell, "status": "ok", "max_abs_err": 0.0}
        with ctx.phase("release", shared="(release)"):
            _time.sleep(0.02)                      # after the last row
    monkeypatch.setattr(sweep_run, "load_runner", lambda name: runner)
    assert run_sweep(_cfg(tmp_path, REFS)) == EXIT_OK
    (wall_file,) = (tmp_path / "r" / "env").glob("*.wall.json")
    wall = json.loads(wall_file.read_text())
    assert wall["suite"] == "smoke"
    n = {p: w["cells"] for p, w in wall["by_path"].items()}
    assert set(n) == {"reference_fullstate", "reference_replay"}
    assert set(wall["phases"]) == set(wall["by_path"]) | set(wall["shared"]) == set(n) | {"(build)", "(release)"}
    for owner, parts in wall["phases"].items():
        assert set(parts) <= set(PHASES)
        total = wall["by_path"][owner]["wall_s"] if owner in n else wall["shared"][owner]
        assert abs(sum(parts.values()) - total) <= 0.051, (owner, parts, total)
    for p, cells in n.items():
        parts = wall["phases"][p]
        assert parts["gate"] >= 0.1 * cells and parts["other"] >= 0.03 * cells and "setup" not in parts
        assert parts["record"] > 0                                  # the row's own write
    assert set(wall["phases"]["(build)"]) == {"setup"} and wall["phases"]["(build)"]["setup"] >= 0.05 * sum(n.values())
    assert set(wall["phases"]["(release)"]) == {"release"}          # booked though no row came after it
    head, _, first = format_phase_table(phase_table([wall])).splitlines()[:3]
    assert head.split(" | ")[4:] == ["setup", "gate", "release", "record", "other", "unbooked |"]
    assert first.startswith("| smoke | reference_")

    from sweeps.context import RunContext
    ctx = RunContext(device=CPU, ceilings=None, tolerance=1e-3, warmup_ms=1, rep_ms=1, time_it=False, run_id="r",
                     git_commit="c", results_dir=tmp_path)
    with pytest.raises(ValueError, match="phase 'warmup': not one of setup, reference"):
        with ctx.phase("warmup"):
            pass
    with pytest.raises(RuntimeError, match="phase 'gate' opened inside phase 'capture'"):
        with ctx.phase("capture"):
            with ctx.phase("gate"):
                pass
    # on a GPU a phase ends with a synchronisation for its accounting alone: an error it reports is left to the
    # work's next CUDA call (a raise there would come between a row's write and its booking)
    gpu = RunContext(device=torch.device("cuda", 0), ceilings=None, tolerance=1e-3, warmup_ms=1, rep_ms=1,
                     time_it=True, run_id="r", git_commit="c", results_dir=tmp_path)

    def sync(device=None):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    monkeypatch.setattr(torch.cuda, "synchronize", sync)
    with gpu.phase("record"):
        pass
    assert gpu.take_charges()[1].keys() == {("", "record")}


def test_each_paths_supports_check_is_booked_to_its_own_setup(tmp_path, monkeypatch):
    """The operator runner asks every path of a shape supports() (a framework's import, a memory query) before it
    runs any, so the row after a supported path's check is another path's: each check is booked to its own
    path's setup and wall time, not to the path whose row comes first."""
    import time as _time
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    slow = {"reference_replay": 0.5}

    class Checked(_Path):
        def __init__(self, name):
            super().__init__("ok")
            self.checked = name

        def supports(self, geometry, shape, device):
            _time.sleep(slow.get(self.checked, 0.0))
            return None
    monkeypatch.setattr(operator_runner, "get_path", Checked)
    assert run_sweep(_cfg(tmp_path, "path=[reference_fullstate,reference_replay]")) == EXIT_OK
    (wall_file,) = (tmp_path / "r" / "env").glob("*.wall.json")
    wall = json.loads(wall_file.read_text())
    first, checked = wall["phases"]["reference_fullstate"], wall["phases"]["reference_replay"]
    assert checked["setup"] >= 0.5 and first.get("setup", 0.0) < 0.25, wall["phases"]
    assert wall["by_path"]["reference_replay"]["wall_s"] >= 0.5 > wall["by_path"]["reference_fullstate"]["wall_s"]
    for owner, parts in wall["phases"].items():           # each owner's phases still add up to its wall time
        total = wall["by_path"][owner]["wall_s"] if owner in wall["by_path"] else wall["shared"][owner]
        assert abs(sum(parts.values()) - total) <= 0.051, (owner, parts, total)

    from sweeps.context import RunContext
    ctx = RunContext(device=CPU, ceilings=None, tolerance=1e-3, warmup_ms=1, rep_ms=1, time_it=False, run_id="r",
                     git_commit="c", results_dir=tmp_path)
    with pytest.raises(ValueError, match=r"booked to path 'onela' and shared label '\(build\)' at once"):
        with ctx.phase("setup", shared="(build)", path="onela"):
            pass


def test_phases_report_prints_one_table_from_wall_records(tmp_path, capsys):
    """`python -m artifact.results phases` over a run folder: per stage, owner and phase, summed over the
    records; a record from before phases existed shows its owners' time as `unsplit`."""
    from artifact.results import main as results_main
    env = tmp_path / "run" / "env"
    env.mkdir(parents=True)
    new = {"run_id": "operator-20260101T000000Z-aaaaaa", "suite": "operator", "wall_s": 10.0, "cells": 3,
           "by_path": {"onela": {"wall_s": 6.0, "cells": 3}}, "shared": {"(workload + FP32 reference)": 3.0},
           "phases": {"onela": {"capture": 4.0, "timing": 1.5, "other": 0.5},
                      "(workload + FP32 reference)": {"setup": 1.0, "reference": 2.0}}}
    old = {"run_id": "operator-20250101T000000Z-bbbbbb", "wall_s": 5.0, "cells": 2,
           "by_path": {"onela": {"wall_s": 4.0, "cells": 2}}, "shared": {}}
    (env / f"{new['run_id']}.wall.json").write_text(json.dumps(new))
    (env / f"{old['run_id']}.wall.json").write_text(json.dumps(old))
    (env / f"{new['run_id']}.json").write_text("{}")           # an env record is not a wall record
    assert results_main(["phases", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("| stage | path or shared work | cells | wall s | setup | reference | capture | timing | "
                        "other | unsplit | unbooked |")
    assert lines[2] == "| operator | onela | 5 | 10.0 |  |  | 4.0 | 1.5 | 0.5 | 4.0 |  |"
    assert lines[3] == "| operator | (workload + FP32 reference) |  | 3.0 | 1.0 | 2.0 |  |  |  |  |  |"
    assert lines[4] == "| operator | (all: 2 record(s)) | 5 | 15.0 |  |  |  |  |  |  | 2.0 |"
    (tmp_path / "empty").mkdir()
    for arg, said in (("empty", "no wall records (*.wall.json) in it or in its env/"),
                      ("missing", "no such file or folder")):
        assert results_main(["phases", str(tmp_path / arg)]) == 1
        assert f"{tmp_path / arg}: {said}" in capsys.readouterr().err


def test_no_path_object_outlives_its_cell(tmp_path, monkeypatch):
    """A path's state (its pools, a graph's private pool) is freed when its cell ends, not when its shape does:
    paths of a shape kept alive to the shape's end hold every path's pools at once, so big shapes run out of
    memory and the next shape's supports() sees the GPU nearly full. With gc off, every path object made so
    far must be gone by reference counting when each row arrives."""
    import gc
    import weakref
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    made = []

    def tracked(name):
        p = _Path("ok")
        made.append(weakref.ref(p))
        return p
    monkeypatch.setattr(operator_runner, "get_path", tracked)
    monkeypatch.setattr(operator_runner, "free_device_memory", lambda device: None)  # no gc rescue
    alive_at_rows = []
    real_append = sweep_run.append_row

    def append_row(path, row):
        alive_at_rows.append(sum(r() is not None for r in made))
        real_append(path, row)
    monkeypatch.setattr(sweep_run, "append_row", append_row)
    gc.disable()
    try:
        assert run_sweep(_cfg(tmp_path, "path=[reference_fullstate,onela,controlled_fullstate]",
                              "shape.W=[3]")) == EXIT_OK
    finally:
        gc.enable()
    assert alive_at_rows and set(alive_at_rows) == {0}, alive_at_rows     # paths alive as each row lands
    assert len(made) == 2 * len(alive_at_rows)          # one object for supports(), one for the cell's run


def test_a_paths_own_gate_applies_without_changing_the_cell(tmp_path, monkeypatch):
    """A path with a documented looser gate (vllm_prefix_replay) passes at an error between the run's tolerance and
    its own; the row's tolerance is the gate applied and its reason names the run's, so a re-run at the same
    tolerance finds the cell recorded (the sweep checks every other defining field of every row)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")

    def path_of(name):
        p = _Path("own_gate")
        p.name = name
        if name == "vllm_prefix_replay":
            p.gate_tolerance = 1e-3
        return p
    monkeypatch.setattr(operator_runner, "get_path", path_of)
    assert run_sweep(_cfg(tmp_path, "path=[vllm_prefix_replay,onela]", "tolerance=4.88e-4")) == EXIT_FAILED
    rows = {r["path"]: r for r in read_rows(tmp_path / "r" / "smoke.csv")}
    assert rows["vllm_prefix_replay"]["status"] == "ok", rows["vllm_prefix_replay"]["reason"]
    assert float(rows["vllm_prefix_replay"]["tolerance"]) == 1e-3
    assert float(rows["onela"]["tolerance"]) == 4.88e-4
    assert "documented tolerance 1.00e-03, not the run's 4.88e-04" in rows["vllm_prefix_replay"]["reason"]
    assert rows["onela"]["status"] == "failed"                  # no gate of its own: held to the run's
    from sweeps.run import _other_tolerance
    recorded = list(rows.values())
    assert _other_tolerance(recorded, {r["config_hash"] for r in recorded}, 4.88e-4) == []
    assert len(_other_tolerance(recorded, {r["config_hash"] for r in recorded}, 1e-3)) == 2


def test_cpu_rows_stay_out_of_results_by_default(tmp_path, fake_paths, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = cfg_of("suite=recurrent_path", "path=[vllm_fullstate]", "progress=false")
    assert run_sweep(cfg) == EXIT_OK
    assert (tmp_path / "outputs" / "cpu_results" / "recurrent_path.csv").exists()
    assert not (tmp_path / "results").exists()


def test_shape_with_only_unsupported_paths_builds_nothing(tmp_path, fake_paths, monkeypatch):
    def no_build(*a, **k):
        raise AssertionError("workload built for a shape no path can run")
    monkeypatch.setattr(operator_runner, "make_workload", no_build)
    assert run_sweep(_cfg(tmp_path, "path=[vllm_fullstate,sglang_fullstate]")) == EXIT_OK
    assert {r["status"] for r in read_rows(tmp_path / "r" / "smoke.csv")} == {"skipped"}


def test_redo_failed_replaces_the_row(tmp_path, fake_paths, monkeypatch):
    cfg = _cfg(tmp_path, "path=[reference_replay,reference_fullstate]")
    assert run_sweep(cfg) == EXIT_FAILED
    monkeypatch.setattr(operator_runner, "get_path", lambda name: _Path("ok"))   # "the bug is fixed"
    assert run_sweep(cfg) == EXIT_FAILED                                         # plain re-run: still failed
    assert run_sweep(_cfg(tmp_path, "path=[reference_replay,reference_fullstate]", "redo=[failed]")) == EXIT_OK
    rows = read_rows(tmp_path / "r" / "smoke.csv")
    assert sorted((r["path"], r["status"]) for r in rows) == [("reference_fullstate", "ok"), ("reference_replay", "ok")]


def test_runner_crash_records_the_current_cell(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")

    def crashing(cfg, cells, ctx):
        ctx.started(cells[0])
        yield {**cells[0], "status": "ok", "max_abs_err": 0.0}
        ctx.started(cells[1])
        raise RuntimeError("runner bug")
    monkeypatch.setattr(sweep_run, "load_runner", lambda name: crashing)
    assert run_sweep(_cfg(tmp_path, REFS)) == EXIT_FAILED
    rows = read_rows(tmp_path / "r" / "smoke.csv")
    assert [r["status"] for r in rows] == ["ok", "failed"] and "runner crashed: RuntimeError: runner bug" in rows[1]["reason"]


def test_missing_runner_module_fails_the_suite_with_its_name(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(runners.RUNNERS, "full_model", "artifact.no_such_module:run_cells")
    assert run_sweep(cfg_of("suite=full_model", f"results_dir={tmp_path}", "progress=false")) == EXIT_FAILED
    assert "artifact.no_such_module" in capsys.readouterr().err
    assert not (tmp_path / "full_model.csv").exists()


def test_a_results_dir_that_is_a_file_is_a_config_error_naming_it(tmp_path):
    """results_dir naming a file (or a path under one) exits 2 with one line naming the key, no traceback."""
    (tmp_path / "taken").write_text("a file\n")
    for given, said in (("taken", "names a file"), ("taken/sub", "which is a file")):
        p = cli(tmp_path, "suite=smoke", REFS, f"results_dir={given}")
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"config key results_dir={given!r}" in p.stderr and said in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and "FileExistsError" not in p.stderr, p.stderr
    assert (tmp_path / "taken").read_text() == "a file\n"


def test_a_hydra_output_folder_that_is_a_file_is_a_config_error_naming_it(tmp_path):
    """hydra.run.dir (a run) or hydra.sweep.dir (a multirun) naming a file, or a path under one, exits 2 with one
    line naming the key, before Hydra's own mkdir would end in a FileExistsError / NotADirectoryError traceback."""
    (tmp_path / "taken").write_text("a file\n")
    for mode, key, given, said in (((), "hydra.run.dir", "taken", "names a file"),
                                   (("-m",), "hydra.sweep.dir", "taken/sub", "lies under 'taken', which is a file")):
        p = cli(tmp_path, *mode, "suite=smoke", REFS, "results_dir=r", f"{key}={given}")
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"[sweeps] bad config: config key {key}={given!r}: {said}" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and "Error" not in p.stderr, p.stderr
    assert (tmp_path / "taken").read_text() == "a file\n" and not (tmp_path / "r").exists()


def test_budget_stops_early_and_a_rerun_finishes(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert run_sweep(_cfg(tmp_path, REFS, "budget_min=1e-9")) == EXIT_INCOMPLETE
    assert len(read_rows(tmp_path / "r" / "smoke.csv")) == 1
    assert run_sweep(_cfg(tmp_path, REFS)) == EXIT_OK
    assert len(read_rows(tmp_path / "r" / "smoke.csv")) == 2


# ---------------------------------------------------------------- merge

def _hash(label: str) -> str:
    """A config_hash (16 hex digits) standing for cell `label`."""
    import hashlib
    return hashlib.sha256(label.encode()).hexdigest()[:16]


def _row(h, latency="1.0", run_id="smoke-a"):
    """A valid smoke-suite row for cell `h` (artifact.results.row_problems)."""
    return {c: "" for c in COLUMNS} | {
        "suite": "smoke", "path": "onela", "geometry": "smoke_gqa", "R": "2", "W": "5", "T": "2", "O": "3",
        "HK": "2", "HV": "4", "K": "16", "V": "32", "prompt_len": "32", "lineage": "beam", "seed": "0",
        "status": "ok", "max_abs_err": "0.001", "tolerance": "0.01", "config_hash": _hash(h),
        "latency_ms": latency, "run_id": run_id}


def test_merge_dedups_identical_rows_and_refuses_conflicts(tmp_path):
    write_rows(tmp_path / "smoke.shard0-of-2.csv", [_row("h1"), _row("h2")])
    write_rows(tmp_path / "smoke.shard1-of-2.csv", [_row("h3"), _row("h2", run_id="smoke-b")])   # same values
    path, added = merge_shards(tmp_path, "smoke")
    assert added == 3 and [r["config_hash"] for r in read_rows(path)] == [_hash(h) for h in ("h1", "h2", "h3")]
    assert merge_shards(tmp_path, "smoke")[1] == 0                                      # idempotent
    write_rows(tmp_path / "smoke.shard1-of-2.csv", [_row("h2", latency="9.9")])
    with pytest.raises(ResultsFileError, match=f"config_hash {_hash('h2')}.*latency_ms"):
        merge_shards(tmp_path, "smoke")


def test_a_file_with_another_schema_is_refused(tmp_path, capsys):
    old = tmp_path / "r" / "smoke.csv"
    old.parent.mkdir()
    old.write_text("suite,path,latency\nsmoke,onela,1.0\n")
    assert run_sweep(_cfg(tmp_path, REFS)) == EXIT_FAILED
    assert "columns differ" in capsys.readouterr().err
    assert old.read_text() == "suite,path,latency\nsmoke,onela,1.0\n"


def test_fold_rerun_replaces_cells_keeps_named_paths_and_copies_env(tmp_path):
    res, rerun = tmp_path / "results", tmp_path / "rerun"
    for d in (res / "env", rerun / "env"):
        d.mkdir(parents=True)
    kept = "flashinfer_fullstate"
    keep = _row("h3", run_id="smoke-a") | {"path": kept}
    write_rows(res / "smoke.csv", [_row("h1", run_id="smoke-a"), _row("h2", run_id="smoke-old"), keep,
                                   _row("h5", run_id="smoke-old")])
    (res / "env" / "smoke-old.json").write_text("{}")
    (res / "env" / "smoke-old.traffic.json").write_text("{}")   # a side file (the traffic suite's calibrations)
    (res / "env" / "smoke-a.traffic.json").write_text("{}")     # ... of a run that keeps rows: not orphaned
    (rerun / "env" / "smoke-b.json").write_text("{}")
    (rerun / "env" / "smoke-b.wall.json").write_text("{}")
    (rerun / "env" / "smoke-b.traffic.json").write_text("{}")
    write_rows(rerun / "smoke.csv", [_row("h1", latency="5.0", run_id="smoke-a"),     # a copied table's old row
                                     _row("h2", latency="2.0", run_id="smoke-b"), _row("h4", run_id="smoke-b"),
                                     _row("h3", latency="7.0", run_id="smoke-b") | {"path": kept},
                                     _row("h5", run_id="smoke-b")])
    H = {h: _hash(h) for h in ("h1", "h2", "h3", "h4", "h5", "h9")}
    (res / "smoke_side.csv").write_text(f"config_hash,x\n{H['h1']},old\n{H['h2']},old\n{H['h3']},old\n"
                                        f"{H['h5']},old\n")
    (rerun / "smoke_side.csv").write_text(f"config_hash,x\n{H['h2']},new\n{H['h3']},new\n{H['h4']},new\n"
                                          f"{H['h9']},stray\n")
    e = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "sweeps.merge", "suite=smoke", f"results_dir={res}",
                        f"from={rerun}", f"keep_paths={kept}"], env=e, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    # folded cells' side rows follow (h5's re-run has none: its old side row goes); kept / stray ones do not
    with open(res / "smoke_side.csv", newline="") as f:
        assert [(r["config_hash"], r["x"]) for r in csv.DictReader(f)] == \
            [(H["h1"], "old"), (H["h2"], "new"), (H["h3"], "old"), (H["h4"], "new")]
    assert f"2 row(s) replaced, 1 added, 1 of ['{kept}'] left" in p.stdout
    assert "no row left: ['smoke-old.json', 'smoke-old.traffic.json']" in p.stdout
    rows = {r["config_hash"]: r for r in read_rows(res / "smoke.csv")}
    assert [rows[H[h]]["latency_ms"] for h in ("h1", "h2", "h3", "h4", "h5")] == ["1.0", "2.0", "1.0", "1.0", "1.0"]
    assert sorted(f.name for f in (res / "env").iterdir()) == [
        "smoke-a.traffic.json", "smoke-b.json", "smoke-b.traffic.json", "smoke-b.wall.json", "smoke-old.json",
        "smoke-old.traffic.json"]
    assert fold_rerun(res, "smoke", rerun, (kept,))["replaced"] == 0                    # idempotent
    (rerun / "env" / "smoke-b.json").unlink()
    write_rows(res / "smoke.csv", [_row("h1", run_id="smoke-a")])
    with pytest.raises(ResultsFileError, match=r"lacks the env record of run\(s\) \['smoke-b'\]"):
        fold_rerun(res, "smoke", rerun)


def test_fold_rerun_starts_a_missing_table_and_leaves_tables_of_their_own(tmp_path):
    """A suite's first rows start its table (with their env records and side rows); a <suite>_*.csv without a
    config_hash column (full_model_breakdown.csv beside full_model.csv) is another table, left untouched."""
    res, rerun = tmp_path / "results", tmp_path / "rerun"
    for d in (res, rerun / "env"):
        d.mkdir(parents=True)
    (rerun / "env" / "smoke-b.json").write_text("{}")
    write_rows(rerun / "smoke.csv", [_row("h1", run_id="smoke-b")])
    (rerun / "smoke_side.csv").write_text(f"config_hash,x\n{_hash('h1')},new\n")
    (rerun / "smoke_other.csv").write_text("run_id,component\nsmoke-b,mlp\n")
    assert fold_rerun(res, "smoke", rerun)["added"] == 1
    assert [r["config_hash"] for r in read_rows(res / "smoke.csv")] == [_hash("h1")]
    assert (res / "smoke_side.csv").read_text().splitlines() == ["config_hash,x", f"{_hash('h1')},new"]
    assert (res / "env" / "smoke-b.json").exists() and not (res / "smoke_other.csv").exists()


def test_merge_cli_names_bad_arguments_and_exits_2(tmp_path):
    """Every argument is checked against the registries before any file is touched (exit 2): a misspelt
    keep_paths entry would otherwise keep nothing and let the re-run's skip rows replace measured rows."""
    e = {**os.environ, "PYTHONPATH": str(REPO)}
    (tmp_path / "results").mkdir()
    (tmp_path / "re").mkdir()
    for argv, message in ((["suite=smoke", "resultsdir=x"], "resultsdir=x"),
                          (["suite=smoke", "keep_paths=onela"], "keep_paths=... applies only with from="),
                          (["suite=smok"], "suite='smok': not a suite"),
                          (["suite=smoke", "results_dir=nowhere"], "results_dir='nowhere': no such folder"),
                          (["suite=smoke", "from=nowhere"], "from='nowhere': no such folder"),
                          (["suite=smoke", "from=results"], "is results_dir itself"),
                          (["suite=smoke", "from=re", "keep_paths=flashinfer_fullstat"],
                           "keep_paths: ['flashinfer_fullstat'] not registered")):
        p = subprocess.run([sys.executable, "-m", "sweeps.merge", *argv], env=e, cwd=tmp_path,
                           capture_output=True, text=True)
        assert p.returncode == 2 and message in p.stderr, (argv, p.stderr)


# ---------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_gpu_recurrent_path_cells_are_timed_with_floors(tmp_path):
    cfg = cfg_of("suite=recurrent_path", "shape.T=[2]", "path=[reference_replay,onela,controlled_fullstate]",
                 "timer.warmup_ms=5", "timer.rep_ms=20", f"results_dir={tmp_path}", "progress=false")
    assert run_sweep(cfg) == EXIT_OK
    rows = {r["path"]: r for r in read_rows(tmp_path / "recurrent_path.csv")}
    for name in ("onela", "controlled_fullstate"):
        assert rows[name]["status"] == "ok" and float(rows[name]["latency_ms"]) > 0, rows[name]
        assert float(rows[name]["p20_ms"]) <= float(rows[name]["latency_ms"]) <= float(rows[name]["p80_ms"])
        if rows[name]["compulsory_bytes"]:
            assert float(rows[name]["floor_ms"]) > 0 and rows[name]["floor_bound"]
    (env_file,) = [f for f in (tmp_path / "env").glob("*.json") if "." not in f.stem]   # not .wall.json
    env = json.loads(env_file.read_text())
    assert env["ceilings"]["copy_bytes_per_s"] > 1e11 and env["gpu"] == torch.cuda.get_device_name()
    assert OmegaConf.create(env["config"]).suite.name == "recurrent_path"


def test_committed_side_rows_belong_to_their_cells_runs():
    """Every row of a committed side table (beam_scaling_steps.csv, beam_scaling_width.csv)
    has its cell's row in the suite's table, from the same run: a side row left behind by a superseded run fails."""
    from artifact.results import read_side_table, side_tables
    results = REPO / "results"
    checked = 0
    for suite in ("beam_scaling", "full_model", "operator", "recurrent_path", "traffic"):
        if not (results / f"{suite}.csv").exists():
            continue
        with open(results / f"{suite}.csv", newline="") as f:
            run_of = {r["config_hash"]: r["run_id"] for r in csv.DictReader(f)}
        for side in side_tables(results, suite):
            for line, r in enumerate(read_side_table(side).rows, start=2):
                assert run_of.get(r["config_hash"]) == r["run_id"], \
                    f"{side.name}:{line}: run {r['run_id']}, its cell's row: {run_of.get(r['config_hash'])}"
                checked += 1
    assert checked >= 100


def test_the_sweep_configs_import_no_triton():
    """`sweeps.run` sets TRITON_INTERPRET on a CPU host only after composing its configs, and Triton fixes compile
    or interpret when a kernel is defined: importing the configs (and with them every runner) must not import
    triton, or every Triton path of a hand-run CPU sweep fails."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = "import sys, sweeps.schema, sweeps.run; sys.exit('triton' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr or "importing the sweep's configs imported triton"
