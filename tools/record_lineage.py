"""Record the `model` lineage: the parents the project's own Qwen3.5 model chooses in a real beam search,
saved as data the workload loads (artifact.workload.RECORDED_LINEAGES).

    python -m tools.record_lineage            # GPU: R=4 W=512 O=128 (T=127 decode calls), Qwen3.5-0.8B, ~1 minute
    python -m tools.record_lineage --cpu      # any host: the TINY preset, R=2 W=8 O=6, into outputs/ (plumbing)
    python -m tools.record_lineage --coalescence [FILE]   # distinct ancestors per depth: FILE vs the `beam` lineage

The model and prompts are the Fig 6 cells' (artifact.model.cell.FullModelInputs): `--preset` with weights seeded by
`--seed`, R seeded random prompts of `--prompt-len` tokens, prefilled. `BeamDecoder` then runs the search of
O = T + 1 tokens -- W beams per request, global top-W over W x vocab accumulated log-probs after every decode call
(artifact.model.beam) -- with the GDN recurrence on `--path`. The default, `reference_fullstate`, is the FP32
per-beam FullState oracle: exact (no bf16 records, no kernel approximation moves a logit and so a near-tie), runs
on any device, and holds R x W x 18 layers x 1 MiB of state (36 GiB at R=4 W=512) whatever the depth, where the
FP32 projection replay (`reference_replay`) would keep fp32 records growing to ~77 GB at T = 127.

BeamResult.parents[t] (t >= 1) indexes the beams of decode call t - 1 from those of call t: the parents decode call
t reads, the workload's parents row t; row 0 is zeros (every first beam's parent is the prompt), as the workload's
ignored row 0. The first T rows are saved: a [T, R, W] int16 compressed .npz (`--output`, default the package's
artifact/data/model.npz) with its provenance beside it (.json: preset, seed, prompt_len, path, dtype, R, W, T, O, git
commit, torch version, device, the time it took, distinct ancestors per depth at the last step).
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

from artifact.ancestry import distinct_ancestors
from artifact.workload import lineage_file, load_lineage, make_workload, save_lineage

NAME = "model"
CPU_DEFAULTS = {"preset": "tiny", "R": 2, "W": 8, "O": 6, "prompt_len": 16}
GPU_DEFAULTS = {"preset": "qwen3_5_0_8b", "R": 4, "W": 512, "O": 128, "prompt_len": 1024}
CPU_OUTPUT = Path("outputs/record_lineage/model_cpu.npz")


def search(preset: str, R: int, W: int, O: int, prompt_len: int, seed: int, path: str, device,
           dtype: str = "bfloat16"):
    """One beam search of O tokens of the seeded model (in `dtype`, the Fig 6 cells' bf16 by default) on seeded
    prompts: (its BeamDecoder, its BeamResult)."""
    from artifact.model.cell import FullModelInputs
    from artifact.model.decode import BeamDecoder
    from artifact.paths import get_path
    from artifact.workload import Shape
    for name, val in (("R", R), ("W", W), ("prompt_len", prompt_len)):
        if not isinstance(val, int) or val < 1:
            raise ValueError(f"{name}={val!r}: must be a positive int")
    if not isinstance(O, int) or O < 2:
        raise ValueError(f"O={O!r}: must be an int >= 2 (T = O - 1 >= 1 decode calls)")
    T = O - 1
    inputs = FullModelInputs(device, dtype=dtype)
    model = inputs.model(preset, seed)
    reason = get_path(path).supports(model.cfg.geometry, Shape(R, W, T), torch.device(device))
    if reason:
        raise ValueError(f"path={path!r} cannot run R={R} W={W} T={T} here: {reason}")
    dec = BeamDecoder(model, path, R, W, T, prompt_len)
    dec.load_prompt(inputs.prompt(model, R, prompt_len, seed))
    return dec, dec.run()


def record(preset: str, R: int, W: int, O: int, prompt_len: int, seed: int, path: str, device,
           dtype: str = "bfloat16") -> torch.Tensor:
    """The parents [T, R, W] (T = O - 1; row 0 zeros) of that search: the parents decode call t read, t < T."""
    dec, result = search(preset, R, W, O, prompt_len, seed, path, device, dtype)
    return result.parents[:dec.T].to("cpu", torch.int32)


def coalescence_lines(parents: torch.Tensor, seed: int = 0) -> list[str]:
    """A table of distinct ancestors per depth (mean over requests) at the last step: `parents` against the
    synthetic `beam` lineage of the same (R, W, T, seed)."""
    T, R, W = parents.shape
    # the depth cells' own workload (qwen3_5_0_8b): its parents are drawn after its inputs, so the inputs are drawn
    # too (a few GB at W=512 T=127: on the GPU where there is one); prompt_len 0 skips the prefill (another generator)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    synth = make_workload("qwen3_5_0_8b", R, W, T, lineage="beam", seed=seed, prompt_len=0, device=device).parents
    rec, syn = distinct_ancestors(parents).double().mean(0), distinct_ancestors(synth.cpu()).double().mean(0)
    out = [f"distinct ancestors of the W={W} beams of step {T - 1}, per depth j (mean over R={R} requests)",
           "| depth j | recorded | beam (synthetic) |", "|---|---|---|"]
    for j in range(T - 1):
        if j < 8 or j % 8 == 0 or j == T - 2:
            out.append(f"| {j} | {rec[j]:.1f} | {syn[j]:.1f} |")
    out.append(f"| sum over depths (records read at step {T - 1}, per request) | {rec.sum():.0f} | {syn.sum():.0f} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.record_lineage", description=__doc__.splitlines()[0])
    ap.add_argument("--R", type=int, help=f"requests (default {GPU_DEFAULTS['R']}; --cpu {CPU_DEFAULTS['R']})")
    ap.add_argument("--W", type=int, help=f"beams per request (default {GPU_DEFAULTS['W']})")
    ap.add_argument("--O", type=int, help=f"output tokens, T = O - 1 decode calls (default {GPU_DEFAULTS['O']})")
    ap.add_argument("--prompt-len", type=int, help=f"prompt tokens (default {GPU_DEFAULTS['prompt_len']})")
    ap.add_argument("--preset", help=f"model preset (default {GPU_DEFAULTS['preset']}; --cpu {CPU_DEFAULTS['preset']})")
    ap.add_argument("--seed", type=int, default=0, help="weights and prompts seed (default 0)")
    ap.add_argument("--path", default="reference_fullstate", help="the GDN path of the search (default "
                    "reference_fullstate: exact FP32)")
    ap.add_argument("--output", type=Path, help=f"the .npz to write (default {lineage_file(NAME)}; --cpu "
                    f"{CPU_OUTPUT})")
    ap.add_argument("--dtype", default="bfloat16", help="the model's weights and activations (default bfloat16, "
                    "as the Fig 6 cells)")
    ap.add_argument("--cpu", action="store_true", help="a tiny run on the CPU (TINY preset, small R, W, O)")
    ap.add_argument("--coalescence", nargs="?", const=lineage_file(NAME), type=Path, metavar="FILE",
                    help="print distinct ancestors per depth of FILE (default the package's) vs the beam lineage")
    a = ap.parse_args(argv)
    if a.coalescence is not None:
        if not a.coalescence.exists():
            print(f"{a.coalescence} is missing: record it with `python -m tools.record_lineage`", file=sys.stderr)
            return 2
        parents, meta = load_lineage(a.coalescence)
        print("\n".join(coalescence_lines(parents, int(meta.get("seed", 0)))))
        return 0
    d = CPU_DEFAULTS if a.cpu else GPU_DEFAULTS
    pick = lambda given, key: d[key] if given is None else given       # noqa: E731
    R, W, O, prompt_len = pick(a.R, "R"), pick(a.W, "W"), pick(a.O, "O"), pick(a.prompt_len, "prompt_len")
    preset = pick(a.preset, "preset")
    for flag, val, low in (("--R", R, 1), ("--W", W, 1), ("--O", O, 2), ("--prompt-len", prompt_len, 1)):
        if val < low:
            ap.error(f"{flag} {val}: must be >= {low}")
    if W > 32768:
        ap.error(f"--W {W}: the file keeps int16 parents, W <= 32768")
    from artifact.model.config import MODELS
    from artifact.registry import PATHS
    if preset not in MODELS:
        ap.error(f"--preset {preset}: unknown; known: {', '.join(MODELS)}")
    if a.path not in PATHS:
        ap.error(f"--path {a.path}: not a registered path; registered: {', '.join(PATHS)}")
    if not a.cpu and not torch.cuda.is_available():
        print("tools.record_lineage needs a CUDA GPU for the default search; --cpu runs a tiny one here",
              file=sys.stderr)
        return 2
    output = a.output or (CPU_OUTPUT if a.cpu else lineage_file(NAME))
    device = "cpu" if a.cpu else "cuda"
    t0 = time.monotonic()
    parents = record(preset, R, W, O, prompt_len, a.seed, a.path, device, a.dtype)
    seconds = time.monotonic() - t0
    from artifact.results import git_commit
    per_depth = distinct_ancestors(parents).double().mean(0)
    meta = {"lineage": NAME, "preset": preset, "seed": a.seed, "prompt_len": prompt_len, "path": a.path, "O": O,
            "dtype": a.dtype,
            "git_commit": git_commit(), "torch": torch.__version__, "python": platform.python_version(),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "seconds": round(seconds, 1),
            "command": "python -m tools.record_lineage " + " ".join(sys.argv[1:] if argv is None else argv),
            "distinct_ancestors_last_step": [round(float(x), 2) for x in per_depth],
            "convention": "parents[t, r, b]: beam b's parent among decode call t-1's beams; row 0 zeros"}
    save_lineage(output, parents, meta)
    print(f"recorded {tuple(parents.shape)} (T, R, W) parents in {seconds:.1f} s -> {output} "
          f"(+ {output.with_suffix('.json').name})")
    print("\n".join(coalescence_lines(parents, a.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
