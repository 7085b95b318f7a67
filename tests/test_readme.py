"""README.md cannot drift: every command it shows exists and parses, its claims table is what `python -m plots`
writes from the committed results, and it stays a short guide (no commit hashes, no session diary)."""
from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
TEXT = README.read_text()


def code_commands() -> list[str]:
    """Every command line of README's shell code blocks (```bash or bare ```; ```text blocks are figures)."""
    out, lang = [], None
    for line in TEXT.splitlines():
        if line.startswith("```"):
            lang = None if lang is not None else (line[3:].strip() or "bash")
            continue
        if lang == "bash":
            cmd = line.split(" #", 1)[0].strip()
            if cmd and not cmd.startswith("#"):
                out.append(cmd)
    return out


COMMANDS = code_commands()


def test_readme_is_a_short_guide():
    assert len(TEXT.splitlines()) <= 280
    hashes = re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", TEXT)
    assert not hashes, f"commit-hash-like tokens in README.md: {hashes}"
    assert not re.search(r"\bstop \d+", TEXT, re.I), "README.md reads as a diary ('stop NN')"
    assert len(COMMANDS) >= 10


def test_claims_table_is_generated_from_the_committed_results():
    from plots import report
    from plots.data import load_results
    head, rest = TEXT.split(report.CLAIMS_BEGIN, 1)
    block = rest.split(report.CLAIMS_END, 1)[0]
    assert block.strip() == report.claims_block(load_results(REPO / "results")).strip(), \
        "README's claims table differs from the committed results: run `python -m plots`"


class _Parsed(Exception):
    """Raised by the patched ArgumentParser.parse_args once the command's arguments have parsed."""


def _parses_with_argparse(target: str, args: list[str], monkeypatch, script: bool = False) -> None:
    """Run `python -m target args` (or `python target args`) only up to its argument parsing: argparse's own
    errors (exit 2) fail the test, and nothing after the parse runs."""
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, a=None, namespace=None):
        real(self, a, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", [target, *args])
    with pytest.raises(_Parsed), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # runpy: the module was imported by an earlier test
        if script:
            runpy.run_path(str(REPO / target), run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)


def _sweeps_run(args: list[str]) -> None:
    """Compose and validate a `python -m sweeps.run` command line (multirun sweeps: their first value)."""
    from hydra import compose, initialize_config_module
    import sweeps.schema  # noqa: F401
    from sweeps.spec import validate
    overrides = []
    for a in args:
        if a in ("-m", "--multirun") or a.startswith("--cfg") or a == "job":
            continue
        key, _, val = a.partition("=")
        if "," in val and not val.startswith("["):
            val = val.split(",")[0]
        overrides.append(f"{key}={val}")
    with initialize_config_module("sweeps.conf", version_base="1.3"):
        validate(compose("config", overrides=overrides))


def _run_all(sub: list[str]) -> None:
    env = {**os.environ, "ONELA_DRY_RUN": "1", "ONELA_VENV": "none", "ONELA_PYTHON": sys.executable,
           "ONELA_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    r = subprocess.run(["./run_all.sh", *sub], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "usage:" not in r.stderr


def inline_commands() -> list[str]:
    """Commands README names in running text (`python -m ...`, `./run_all.sh ...` in backticks)."""
    found = re.findall(r"`((?:python3? -m |\./run_all\.sh)[^`]*)`", TEXT)
    return sorted(set(found) - set(COMMANDS))


INLINE = inline_commands()


def check_command(cmd: str, monkeypatch) -> None:
    """Fails (AssertionError, SystemExit, a Hydra or config error) unless `cmd` exists and its arguments parse.
    A command with a placeholder (`<run_id>`) is checked for existence only."""
    argv = shlex.split(cmd)
    while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):         # leading VAR=value assignments
        argv = argv[1:]
    # a placeholder (`<run_id>`, `[RUN_DIR]`) or an entry point named without arguments in running text
    placeholder = "<" in cmd or "[" in cmd.replace("=[", "") or (cmd in INLINE and len(argv) == 3)
    if argv[0] == "./run_all.sh":
        _run_all(argv[1:2] if placeholder else argv[1:])
    elif argv[0] in ("python", "python3") and argv[1] == "-m":
        mod, args = argv[2], argv[3:]
        spec = importlib.util.find_spec(mod)
        assert spec is not None, f"no module {mod}"
        if placeholder:
            return
        if mod == "sweeps.run":
            _sweeps_run(args)
        elif mod == "sweeps.merge":
            from sweeps.merge import parse_args
            parse_args(args)
        elif mod == "pytest":
            assert set(args) <= {"-m", "gpu", "-q"}
        else:
            origin = Path(spec.origin)
            source = (origin.parent / "__main__.py" if origin.name == "__init__.py" else origin).read_text()
            assert "argparse" in source, f"README shows `python -m {mod}`, which takes no checkable arguments"
            _parses_with_argparse(mod, args, monkeypatch)
    elif argv[0] in ("python", "python3") and argv[1].endswith(".py"):
        assert (REPO / argv[1]).is_file(), f"no script {argv[1]}"
        _parses_with_argparse(argv[1], argv[2:], monkeypatch, script=True)
    else:
        raise AssertionError(f"README shows a command this test does not know how to check: {cmd}")


@pytest.mark.parametrize("cmd", COMMANDS + INLINE)
def test_every_readme_command_exists_and_parses(cmd, monkeypatch):
    check_command(cmd, monkeypatch)


@pytest.mark.parametrize("cmd", [
    "python -m sweeps.run suite=operator shape.RR=[4]",                   # a misspelt key
    "python -m sweeps.run suite=operatr",                                 # no such suite
    "python -m sweeps.run suite=operator geometry=qwen9",                 # no such geometry
    "python -m plots.check --no-such-flag",
    "python -m baselines.pack --download --python 3.12",
    "python -m sweeps.merge suite=operator keep_paths=onela",
    "python -m no_such.module",
    "./run_all.sh no-such-command",
])
def test_the_check_catches_a_drifted_command(cmd, monkeypatch):
    with pytest.raises((Exception, SystemExit)):     # AssertionError, argparse exit 2, ValueError, Hydra errors
        check_command(cmd, monkeypatch)


def test_readme_names_every_run_all_subcommand_it_lists():
    listed = re.search(r"Sub-commands: (.*)", TEXT).group(1)
    names = re.findall(r"`([a-z-]+)(?: \[RUN_DIR\])?`", listed)
    cases = re.findall(r"^  ([a-z|-]+)\)", (REPO / "run_all.sh").read_text(), re.M)
    known = {n for c in cases for n in c.split("|")}
    assert names and set(names) <= known, (names, known)


def test_a_readme_sweep_runs_through_the_real_entry_point():
    """One command through Hydra's command line itself: it composes and prints the config (`--cfg job`)."""
    cmd = next(c for c in COMMANDS if c.startswith("python -m sweeps.run") and "--cfg job" in c)
    r = subprocess.run([sys.executable, *shlex.split(cmd)[1:]], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert "name: operator" in r.stdout and "results_dir: outputs/mine" in r.stdout


def test_readme_links_exist():
    for path in re.findall(r"`((?:docs|results|kernels|sweeps|plots|baselines|tools|artifact)/[\w./-]+)`", TEXT):
        if "<" in path:
            continue
        assert (REPO / path).exists(), f"README names {path}, which does not exist"


def _expand(tok: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", tok)
    if not m:
        return [tok]
    return [x for alt in m.group(1).split(",") for x in _expand(tok[:m.start()] + alt + tok[m.end():])]


KERNEL_EXPERIMENTS = ("triton", "ws_kernel", "floors", "correctness", "timing")


@pytest.mark.parametrize("doc", ["README.md", "docs/design.md", "docs/methods.md", "kernels/NOTES.md",
                                 "results/README.md"])
def test_documents_cite_result_files_that_exist(doc):
    """Every `results/...` path a document names exists (a line that says the file is in git history excepted);
    kernels/NOTES.md names files under results/experiments/kernels/ as `<folder>/<file>`; results/README.md's
    first column names its files and folders."""
    missing = []
    for line in (REPO / doc).read_text().splitlines():
        if "git history" in line:
            continue
        toks = re.findall(r"results/[A-Za-z0-9_./{},*<>-]*", line)
        if doc == "kernels/NOTES.md":
            pat = r"(?<![A-Za-z0-9_./*-])((?:%s)/[A-Za-z0-9_./{},*-]+)" % "|".join(KERNEL_EXPERIMENTS)
            toks += ["results/experiments/kernels/" + t for t in re.findall(pat, line)]
        if doc == "results/README.md" and line.startswith("| `"):
            toks.append("results/" + line.split("`")[1])
        for tok in toks:
            if "<" in tok:
                continue
            for path in _expand(tok.rstrip(".,:;)")):
                if not (glob.glob(str(REPO / path)) or glob.glob(str(REPO / path) + "*")):
                    missing.append(path)
    assert not missing, f"{doc} cites result files that do not exist: {sorted(set(missing))}"
