"""Every command line checks its arguments before it needs a GPU or touches a file, and exits 2 on bad usage
(sweeps.run, sweeps.merge, tools.compile_report and tools.bench have their own tests beside their modules' tests)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def run(tmp: Path, *argv: str) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-m", *argv], cwd=tmp, env=e, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv,said", [
    (["tools.measure_launch_floor", "--R", "0"], "unrecognized arguments: --R 0"),
    (["tools.gather_bench", "extra"], "unrecognized arguments: extra"),
    (["tools.onela_correctness", "--geometry", "bogus"], "invalid choice: 'bogus'"),
    (["tools.hf_generate", "--systems", "vllm"], "invalid choice: 'vllm'"),
    (["tools.hf_generate", "--stock-prefill-chunk", "0"], "--stock-prefill-chunk '0': give a token count"),
    (["tools.record_lineage", "--W", "0"], "--W 0: must be >= 1"),
    (["tools.record_lineage", "--cpu", "--path", "bogus"], "--path bogus: not a registered path"),
    (["tools.record_lineage", "--cpu", "--preset", "qwen9"], "--preset qwen9: unknown"),
    (["baselines.pack", "--wheels", "nowhere"], "--wheels nowhere: no such folder"),
    (["baselines.ship_parts", "split", "--part-mib", "0"], "need 0 < --part-mib <= --call-mib"),
    (["baselines.ship_parts", "receive", "--from", "nowhere"], "--from nowhere: no such folder"),
    (["plots", "--results", "nowhere"], "--results nowhere: no such folder"),
    (["artifact.results", "verify"], "no file given"),
    (["artifact.results", "check", "x.json"], "unknown command 'check'"),
])
def test_bad_usage_exits_2_naming_the_argument(tmp_path, argv, said):
    p = run(tmp_path, *argv)
    assert p.returncode == 2 and said in p.stderr, (argv, p.returncode, p.stderr[-400:])
    assert not any(tmp_path.iterdir()), "bad usage wrote something"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a CPU host gives")
@pytest.mark.parametrize("tool", ["tools.measure_launch_floor", "tools.gather_bench", "tools.onela_correctness",
                                  "tools.hf_generate", "tools.record_lineage"])
def test_gpu_tools_say_they_need_a_gpu_and_exit_2(tmp_path, tool):
    p = run(tmp_path, tool)
    assert p.returncode == 2 and "needs a CUDA GPU" in p.stderr, p.stderr[-400:]
