"""./run_all.sh's plans (ONELA_DRY_RUN: every stage printed with its expected duration, nothing run), the quick
path's cells (a subset of the committed ones, hashed alike), and the networked pack set-up with pip faked."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_module

import sweeps.schema  # noqa: F401 - registers the structured configs
from baselines import pack
from sweeps.spec import shard_cells, validate

REPO = Path(__file__).resolve().parent.parent
QUICK = {"quick_operator": "operator", "quick_operator_qwen": "operator", "quick_full_model": "full_model",
         "quick_traffic": "traffic", "quick_recurrent_path": "recurrent_path"}


def run_all(*args: str, **env) -> str:
    e = {**os.environ, "ONELA_VENV": "none", "ONELA_PYTHON": sys.executable, "PYTHONPATH": str(REPO), **env}
    r = subprocess.run(["./run_all.sh", *args], cwd=REPO, env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("suite", QUICK)
def test_quick_cells_are_committed_cells(suite):
    """Every cell of the quick path hashes like a committed row (a GPU's default prompt length), so
    `python -m plots.check` compares it with that row -- but the cells of a path with no committed row yet at that
    prompt length (a paper-mode FullState path, a suite run stopped before its 5K prompt), which the check reports
    as new."""
    with initialize_config_module("sweeps.conf", version_base="1.3"):
        spec = validate(compose("config", overrides=[f"suite={suite}"]))
    assert spec.suite == QUICK[suite]
    cells = shard_cells(spec, torch.device("cuda"))
    table = pd.read_csv(REPO / "results" / f"{QUICK[suite]}.csv", dtype=str)
    committed, measured = set(table["config_hash"]), set(zip(table["path"], table["prompt_len"]))
    missing = [c for c in cells if c["config_hash"] not in committed and (c["path"], str(c["prompt_len"])) in measured]
    assert cells and not missing, missing[:3]


def test_gpu_quick_plan_on_an_air_gapped_host(tmp_path):
    out = run_all("quick", ONELA_DRY_RUN="gpu", ONELA_OFFLINE="1", ONELA_BASELINE_PACK=str(tmp_path / "none"))
    lines = out.splitlines()
    pack_note = [ln for ln in lines if "no baseline pack and no package index" in ln]
    assert len(pack_note) == 1 and "python -m baselines.pack --download" in pack_note[0]
    assert "--download --wheels" not in out                       # nothing is fetched
    stages = [ln for ln in lines if "] stage " in ln]
    for suite in ("quick_recurrent_path", "quick_operator", "quick_operator_qwen", "quick_full_model"):
        assert any(f"suite={suite} results_dir=outputs/quick/" in ln for ln in lines), suite
    assert all("-- expected: " in ln for ln in stages) and len(stages) >= 5
    assert "plots.check outputs/quick/" in out


def test_gpu_plan_uses_a_present_pack(tmp_path):
    (tmp_path / "pack").mkdir()
    (tmp_path / "pack" / "MANIFEST.json").write_text("{}")
    out = run_all("quick", ONELA_DRY_RUN="gpu", ONELA_OFFLINE="1", ONELA_BASELINE_PACK=str(tmp_path / "pack"))
    assert "(present)" in out and "no baseline pack" not in out


def test_gpu_reproduce_plan_prints_recorded_suite_times(tmp_path):
    from plots.report import expected_time
    out = run_all("reproduce", ONELA_DRY_RUN="gpu", ONELA_OFFLINE="1", ONELA_BASELINE_PACK=str(tmp_path / "none"))
    assert f"operator suite, 405 shapes x every path (Fig 7) -- expected: {expected_time(REPO / 'results', 'operator')}" \
        in out
    assert "sweeps.run suite=full_model results_dir=outputs/reproduce/" in out
    # the decode breakdown (results/full_model_breakdown.csv and its figure) with the committed run's paths,
    # before the figures are drawn
    breakdown = [ln for ln in out.splitlines() if "would run:" in ln and "tools.decode_breakdown" in ln]
    assert len(breakdown) == 1 and "--out outputs/reproduce/" in breakdown[0], out
    assert breakdown[0].split("--paths")[1].split() == ["onela", "controlled_fullstate_paper", "controlled_fullstate"]
    assert out.index("tools.decode_breakdown") < out.index("plots --results outputs/reproduce/")


def test_gpu_reproduce_plan_times_transformers_generate_after_the_full_model(tmp_path):
    """Fig 6's native framework reference comes from the reproduce command: tools.hf_generate into the run folder,
    once (one process), after the full-model suite and before the figures, with its expected time -- the
    estimate until a wall record of the tool is committed, then that record's."""
    from plots.report import expected_time
    out = run_all("reproduce", ONELA_DRY_RUN="gpu", ONELA_DRY_GPUS="2", ONELA_OFFLINE="1",
                  ONELA_BASELINE_PACK=str(tmp_path / "none"))
    runs = [ln for ln in out.splitlines() if "would run:" in ln and "tools.hf_generate" in ln]
    assert len(runs) == 1 and "tools.hf_generate --out outputs/reproduce/" in runs[0] and "shard" not in runs[0]
    assert out.index("suite=full_model") < out.index("tools.hf_generate") < out.index("plots --results")
    recorded = expected_time(REPO / "results", "hf_generate")
    want = "6-8 min (estimate)" if recorded == "not measured" else recorded
    stage = next(ln for ln in out.splitlines() if "] stage " in ln and "transformers generate" in ln)
    assert stage.endswith(f"-- expected: {want}"), stage


def test_gpu_reproduce_plan_on_several_gpus_shards_every_suite(tmp_path):
    """On 3 GPUs every suite runs as 3 shards at once, one per GPU (hydra's joblib launcher), except traffic:
    ncu profiles one process per host at a time."""
    out = run_all("reproduce", ONELA_DRY_RUN="gpu", ONELA_DRY_GPUS="3", ONELA_OFFLINE="1",
                  ONELA_BASELINE_PACK=str(tmp_path / "none"))
    runs = [ln for ln in out.splitlines() if "would run:" in ln and "sweeps.run" in ln]
    assert [ln.split("suite=")[1].split()[0] for ln in runs] == \
        ["operator", "recurrent_path", "full_model", "beam_scaling", "traffic"], runs
    assert all("-m launcher=joblib_gpus shard.count=3 suite=" in ln for ln in runs[:4]), runs
    assert "shard" not in runs[4] and "suite=traffic" in runs[4], runs
    breakdown = [ln for ln in out.splitlines() if "would run:" in ln and "tools.decode_breakdown" in ln]
    assert len(breakdown) == 1 and "shard" not in breakdown[0], breakdown      # one process, a few cells


def started_processes(tmp_path, logged: str, drop: tuple[str, ...], **given) -> list[str]:
    """./run_all.sh gpu-suites with a stand-in interpreter that logs each process it is started as ("<module>
    <logged>", `logged` a shell expression over the environment the process inherits), the variables in `drop`
    removed from the caller's environment and `given` set in it."""
    log = tmp_path / "processes.log"
    log.unlink(missing_ok=True)
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = -c ]; then case \"$2\" in *device_count*) echo 1;; esac; exit 0; fi\n"
                    f"echo \"$2 {logged}\" >> {log}\n")
    fake.chmod(0o755)
    (tmp_path / "pack").mkdir(exist_ok=True)
    (tmp_path / "pack" / "MANIFEST.json").write_text("{}")
    e = {**{k: v for k, v in os.environ.items() if k not in drop}, "ONELA_VENV": "none", "ONELA_PYTHON": str(fake),
         "ONELA_BASELINE_PACK": str(tmp_path / "pack"), **given}
    r = subprocess.run(["./run_all.sh", "gpu-suites", str(tmp_path / "run")], cwd=REPO, env=e, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    started = log.read_text().splitlines()
    assert {ln.split()[0] for ln in started} >= {"sweeps.run", "tools.hf_generate", "tools.decode_breakdown"}
    return started


def test_every_process_of_a_gpu_run_keeps_triton_autotune_results_on_disk(tmp_path):
    """Every suite, tool and (through the environment they inherit) traffic child runs with
    TRITON_CACHE_AUTOTUNING=1, unless the caller set it otherwise."""
    for given, want in (({}, "1"), ({"TRITON_CACHE_AUTOTUNING": "0"}, "0")):
        started = started_processes(tmp_path, "TRITON_CACHE_AUTOTUNING=${TRITON_CACHE_AUTOTUNING:-unset}",
                                    ("TRITON_CACHE_AUTOTUNING",), **given)
        assert all(ln.endswith(f"TRITON_CACHE_AUTOTUNING={want}") for ln in started), started


def test_a_gpu_run_keeps_bytecode_where_the_host_forbids_writing_it(tmp_path):
    """A host that sets PYTHONDONTWRITEBYTECODE (the GPU host) would compile every import again in each process:
    ./run_all.sh gives every process it starts PYTHONPYCACHEPREFIX=<repo>/.cache/pycache instead; a host that
    writes bytecode, or names its own prefix, keeps its setting."""
    for given, want in (({"PYTHONDONTWRITEBYTECODE": "1"}, f"write {REPO / '.cache' / 'pycache'}"),
                        ({}, "write none"),
                        ({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/elsewhere"}, "1 /elsewhere")):
        started = started_processes(tmp_path, "${PYTHONDONTWRITEBYTECODE:-write} ${PYTHONPYCACHEPREFIX:-none}",
                                    ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"), **given)
        assert all(ln.split(" ", 1)[1] == want for ln in started), (given, started)


def test_cpu_quick_plan():
    out = run_all("quick", ONELA_DRY_RUN="1")
    assert "suite=smoke results_dir=outputs/smoke/" in out and "plots.check results" in out


# ---------------------------------------------------------------- the networked pack set-up, pip faked

def _fake_wheel(d: Path) -> Path:
    w = d / "fakefw-1.0-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("fakefw/__init__.py", "")
        z.writestr("fakefw/kern.py", "from fakefw.util import X\n")
        z.writestr("fakefw/util.py", "X = 1\n")
        z.writestr("fakefw-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fakefw\nVersion: 1.0\n")
    return w


@pytest.fixture
def fake_pip(tmp_path, monkeypatch):
    """subprocess.run as pip would answer: a dry-run report naming the wheel and its sha256, or a download."""
    src = _fake_wheel(tmp_path)
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    calls = []

    def run(cmd, *a, **k):
        calls.append(cmd)
        if "--report" in cmd:
            report = {"install": [{"metadata": {"name": "fakefw"}, "download_info": {
                "url": f"https://files.example/{src.name}", "archive_info": {"hashes": {"sha256": sha}}}}]}
            return subprocess.CompletedProcess(cmd, 0, json.dumps(report), "")
        if "download" in cmd:
            dest = Path(cmd[cmd.index("-d") + 1])
            dest.mkdir(parents=True, exist_ok=True)
            (dest / src.name).write_bytes(src.read_bytes())
            return subprocess.CompletedProcess(cmd, 0, "", "")
        raise AssertionError(f"unexpected command {cmd}")

    monkeypatch.setattr(subprocess, "run", run)
    spec = {"wheel": "fakefw==1.0", "modules": ["fakefw.kern"], "follow_lazy": [], "stub_packages": [],
            "extension_stubs": [], "placeholders": [], "deps": [], "adapters": ["fake"]}
    return {"specs": {"fakefw==1.0": spec}, "sha": sha, "file": src.name, "calls": calls}


def test_pack_download_checks_hashes_then_builds(tmp_path, fake_pip, monkeypatch):
    monkeypatch.setattr(pack, "recorded_hashes", lambda: {fake_pip["file"]: fake_pip["sha"]})
    assert pack.download_and_build(tmp_path / "whl", tmp_path / "pk", fake_pip["specs"], dry_run=True) == 0
    assert not (tmp_path / "pk").exists() and not any("download" in c for c in fake_pip["calls"])
    assert pack.download_and_build(tmp_path / "whl", tmp_path / "pk", fake_pip["specs"],
                                   python_version="3.12") == 0
    man = json.loads((tmp_path / "pk" / "MANIFEST.json").read_text())
    assert man["frameworks"][0]["wheels"][0]["sha256"] == fake_pip["sha"]
    assert man["frameworks"][0]["modules"] == ["fakefw", "fakefw.kern", "fakefw.util"]
    download = next(c for c in fake_pip["calls"] if "download" in c)
    assert download[download.index("--python-version") + 1] == "3.12" and "fakefw==1.0" in download


def test_pack_download_refuses_a_wheel_that_differs_from_the_record(tmp_path, fake_pip, monkeypatch):
    monkeypatch.setattr(pack, "recorded_hashes", lambda: {fake_pip["file"]: "0" * 64})
    assert pack.download_and_build(tmp_path / "whl", tmp_path / "pk", fake_pip["specs"]) == 1
    assert not (tmp_path / "pk").exists()


def test_recorded_hashes_come_from_the_committed_env_records():
    rec = pack.recorded_hashes()
    reqs = pack.requirements(pack.collect_specs())
    assert {"vllm==0.33.0", "sglang==0.5.23", "flashinfer-python==0.7.2.post1"} <= set(reqs)
    assert any(f.startswith("vllm-0.33.0") for f in rec) and all(len(h) == 64 for h in rec.values())


def test_xdist_workers_spread_over_the_gpus(tmp_path, monkeypatch):
    """`./run_all.sh test` on a host with several GPUs runs one pytest-xdist worker per GPU: worker gw<i> is
    pinned to GPU i mod (GPU count) before torch starts CUDA, indexing a caller's CUDA_VISIBLE_DEVICES list."""
    import conftest
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: NVIDIA H200 (UUID: GPU-{i})'\n" for i in range(4)))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    conftest._pin_xdist_worker_to_a_gpu()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw4")
    conftest._pin_xdist_worker_to_a_gpu()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    conftest._pin_xdist_worker_to_a_gpu()            # one GPU visible: kept
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    out = run_all("test", ONELA_DRY_RUN="gpu", ONELA_DRY_GPUS="4", ONELA_OFFLINE="1",
                  ONELA_BASELINE_PACK=str(tmp_path / "none"))
    assert "pytest tests -n 4" in out


def test_test_plan_runs_the_linters_before_the_tests():
    out = run_all("test", ONELA_DRY_RUN="1")
    assert "-m vulture; " in out and "lint_imports_command" in out and "-m pytest tests" in out


def _tree(tmp_path: Path) -> Path:
    """A copy of the packages, the tests and the linters' configuration, to plant code in."""
    import shutil
    root = tmp_path / "tree"
    for d in ("artifact", "kernels", "baselines", "sweeps", "plots", "tools", "tests"):
        shutil.copytree(REPO / d, root / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml", "vulture_whitelist.py"):
        shutil.copy(REPO / f, root / f)
    return root


def _lint(root: Path, *cmd: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(root), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                         if p and Path(p).resolve() != REPO]])
    return subprocess.run([sys.executable, *cmd], cwd=root, env={**os.environ, "PYTHONPATH": path},
                          capture_output=True, text=True, timeout=300)


def test_vulture_fails_on_a_dead_function_and_passes_without(tmp_path):
    pytest.importorskip("vulture")
    root = _tree(tmp_path)
    assert _lint(root, "-m", "vulture").returncode == 0
    (root / "artifact" / "planted.py").write_text("def planted_dead_function():\n    return 1\n")
    r = _lint(root, "-m", "vulture")
    assert r.returncode != 0 and "unused function 'planted_dead_function'" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("where,planted", [("plots/planted.py", "import torch\n"),
                                           ("artifact/planted.py", "def f():\n    import sweeps.run\n"),
                                           ("plots/planted.py", "import artifact.paths\n")])
def test_import_linter_fails_on_a_forbidden_import_and_passes_without(tmp_path, where, planted):
    """artifact imports none of the other packages, plots no torch: directly, inside a function, or through a
    module of the core that imports torch."""
    pytest.importorskip("importlinter")
    cmd = ("-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())")
    root = _tree(tmp_path)
    ok = _lint(root, *cmd)
    assert ok.returncode == 0 and "0 broken" in ok.stdout, ok.stdout + ok.stderr
    (root / where).write_text(planted)
    r = _lint(root, *cmd)
    assert r.returncode != 0 and "1 broken" in r.stdout, r.stdout + r.stderr
