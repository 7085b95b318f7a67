"""Measurement tools beside the kernels and the sweeps, each `python -m tools.<name>` (its module docstring
says what it measures); their logs are under results/experiments/kernels/.

bench                the timed kernel table of onela and controlled_fullstate on one geometry (GPU)
compile_report       a compile report of the OneLA kernels for sm_90a: registers, spills, shared memory (any host)
measure_launch_floor what one launch per step costs when it only streams the step's bytes, and the L2 flush's
                     share (GPU); artifact.launch_floor is the floor the sweeps record
gather_bench         how fast a kernel that only gathers the ancestral 256 B records runs, shallow and deep (GPU)
onela_correctness    the onela path's correctness over the operator suite's shapes, untimed (GPU)
decode_breakdown     one decode call of the Fig 6 model per component, measured vs floor (GPU; --cpu: plumbing)
hf_generate          stock transformers beam search against it with OneLA inside, at the Fig 6 cells (GPU)
step_profile         per-kernel times of every step of one OneLA decode (GPU)
record_lineage       records the `model` lineage, the parents of the Qwen3.5 model's own W = 512 beam search, into
                     artifact/data/ (GPU, about a minute; --cpu: a tiny one); --coalescence compares its sharing
"""

import argparse
import json
import sys


def launch_config_arg(text: str) -> dict:
    """The argparse type of a tool's `--config`: a OneLA launch config override, a JSON object whose keys are
    `kernels.onela.CONFIG_KEYS` (an ArgumentTypeError naming the bad keys, or the text that is not JSON)."""
    from kernels.onela.plan import config_error
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON: {e}") from e
    reason = config_error(cfg) if isinstance(cfg, dict) else "unknown launch config key(s) ['(not a JSON object)']"
    if reason:
        raise argparse.ArgumentTypeError(reason)
    return cfg


def no_argument_gpu_tool(name: str, doc: str, writes: str, argv) -> bool:
    """The command line of a tool that takes no arguments and needs a CUDA GPU: `--help` prints its docstring,
    anything else is bad usage (exit 2); without a GPU it says so and the caller returns 2 (False here)."""
    ap = argparse.ArgumentParser(prog=f"python -m tools.{name}", description=doc.splitlines()[0],
                                 epilog=f"Writes {writes} (and its env record) into $OUT, else the current folder.")
    ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print(f"tools.{name} needs a CUDA GPU (CPU timings are not performance)", file=sys.stderr)
        return False
    return True
