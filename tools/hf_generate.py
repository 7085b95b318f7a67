"""Stock transformers beam search against the same search with OneLA inside it, at the Fig 6 cells:
`python -m tools.hf_generate [--out DIR]` (a GPU measurement).

Model: Qwen3.5-0.8B's text geometry (artifact.model.config.QWEN3_5_0_8B) with the seeded random weights of the
full-model suite (artifact.model.weights.random_weights, seed 0), written as a transformers checkpoint
(save_hf_checkpoint) and loaded by `transformers.Qwen3_5ForCausalLM` in bf16 on the GPU; prompts are the suite's
seeded prompts (artifact.model.prefill.random_prompts). Cells: R = 4, W = 256, prompt 1K and 5K, O = 3..7 new
tokens (T = O - 1 decode calls), deterministic beam search (do_sample=False, no EOS, length_penalty 0, all W
beams returned). Systems:
- `hf_generate`: stock `model.generate(num_beams=W)` (transformers' own cache, fla's kernels where installed).
  Its prefill runs R x W copies of the prompts, which at W = 256 needs about 99 GiB at 1K tokens; it runs at the
  prompts `--stock-prompts` names (default 1024), and a cell it cannot fit is recorded as skipped with the error.
  On a GPU without that room (an 80 GB H100) generate prefills in chunks of 256 tokens (its own option
  prefill_chunk_size; `--stock-prefill-chunk` sets the size, or none): the decode calls and the beams are the
  same, the prefill's time is the chunked one, and the rows' timer says so.
- `hf_generate_onela`: the same generate through `kernels.onela.transformers.onela_generate`.

Per cell and system: `--warmup` untimed searches (compiles, autotunes; by default 1 for stock and 2 for OneLA, whose
first runs eagerly and whose second captures the decode calls' CUDA graphs, which the later searches replay), then
`--repeats` timed ones (without generate's per-step scores, as a user runs it), then one untimed search with them
for the checks below. In each timed search a forward pre-hook and a forward hook on the model record CUDA events
around every model call generate makes (the first is the prefill, the others the decode calls;
artifact.timing.event_intervals; medians and percentiles as the full model's rows take them,
artifact.timing.summarize "statistics"), so
- decode-forward time per call: GPU time between the events around one decode call (Python overhead inside the
  call included, selection between calls not); the row's latency_ms is the search's T calls summed, as Fig 6's;
- prefill time: the same around the prefill call, the host synchronised before and after it;
- generate wall time: host clock around the whole `generate` (the device synchronised at both ends), and the wall
  time per decode call: (wall - the prefill's wall) / T, Python overhead and beam selection included;
- peak GPU memory over the search and over the prefill (torch.cuda.max_memory_allocated), and the memory still
  allocated when the cell starts (what earlier cells left: nothing but the model, since every cell's outputs
  are dropped and the allocator's cache emptied before the next);
- device time per decode call: one more search (untimed) under torch.profiler, each decode call in a
  `decode/call` range; the union of the device intervals of the kernels each call launched, and their count
  (artifact.model.breakdown.device_us_per_call). Set beside the events' span, it tells a call the host holds
  up (span well above the device time) from one the GPU does.
Where both systems ran a cell: whether their W beams per request are the same sequences in the same order, their
largest score difference, and for how many of the O selections they kept the same candidates -- replayed from
generate's per-step log-probs (`selections`); at the first that differs, stock's score gap between the two
candidates kept differently beside the largest candidate-score difference between the searches (a gap below that
difference is a near-tie: OneLA's bf16 records move logits by about 1e-3 relative, and at W = 256 over a 248K
vocabulary candidates can lie closer than that). max_abs_err of every row: the largest difference between a
returned beam's score and its score recomputed by the stock model's uncached forward over prompt + beam (the 4
best beams of each request), against a tolerance of 2 T x 2e-2 x the largest |logit| (bf16 logits are good to
about 1e-2 of the largest through 24 layers; a log-softmax difference is at most twice a logit's; T calls).

Writes DIR/hf_generate.csv (the results schema, artifact.results: suite hf_generate, one row per system and
cell; a run into a folder that already holds a cell's row skips that cell, as a resumed sweep does -- OneLA's
comparison with stock is then made only where both ran in this run), DIR/hf_generate_times.csv (per row,
joined on config_hash and run_id: prefill, per-call, wall and memory numbers, beam agreement),
DIR/env/<run_id>.json (the env record, transformers' and fla's versions included) and DIR/env/<run_id>.wall.json
(the run's wall time, by system, as a sweep writes it: the expected time that ./run_all.sh and README's claims
table give for this tool come from it).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

SUITE = "hf_generate"
STOCK, ONELA = "hf_generate", "hf_generate_onela"
TIMES = "hf_generate_times.csv"
TIME_COLUMNS = ["config_hash", "run_id", "path", "prompt_len", "O", "T", "transformers", "allocated_gib_at_start",
                "prefill_ms", "prefill_peak_gib", "decode_call_ms", "decode_call_p20_ms", "decode_call_p80_ms",
                "decode_call_device_ms", "decode_call_device_ops", "generate_wall_ms", "decode_call_wall_ms",
                "peak_gib", "searches", "beams_identical_to_stock", "max_score_diff_to_stock",
                "same_selections_as_stock", "divergence_gap", "divergence_score_diff", "max_logit"]
# Stock's one-call prefill of R x W = 1,024 prompts of 1K tokens peaks at ~99 GiB (H200); below this much GPU
# memory `--stock-prefill-chunk auto` has generate prefill in chunks (~51 GiB at 256 tokens, on an H100).
ONE_CALL_PREFILL_GIB = 120
AUTO_PREFILL_CHUNK = 256
LOGIT_REL_TOL = 2e-2      # bf16 logits against the uncached forward, relative to the largest |logit| (docstring)
RECHECK_BEAMS = 4


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tools.hf_generate", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="outputs/hf_generate", help="results directory (default: outputs/hf_generate)")
    ap.add_argument("--prompts", nargs="+", type=int, default=[1024, 5120])
    ap.add_argument("--O", nargs="+", type=int, default=[3, 4, 5, 6, 7], help="new tokens per beam (T = O - 1)")
    ap.add_argument("--R", type=int, default=4)
    ap.add_argument("--W", type=int, default=256)
    ap.add_argument("--systems", nargs="+", choices=(STOCK, ONELA), default=[STOCK, ONELA])
    ap.add_argument("--stock-prompts", nargs="*", type=int, default=[1024],
                    help="prompt lengths at which stock generate runs (its prefill copies each prompt W times)")
    ap.add_argument("--stock-prefill-chunk", default="auto", metavar="TOKENS|none|auto",
                    help="stock generate prefills in chunks of TOKENS (its generation option prefill_chunk_size); "
                         "none: in one call, as users run it; auto (default): in one call on a GPU of at least "
                         f"{ONE_CALL_PREFILL_GIB} GiB, else in chunks of {AUTO_PREFILL_CHUNK} tokens")
    ap.add_argument("--seed", type=int, default=0, help="weights and prompts, as the full-model suite seeds them")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed searches per cell (default: 2 for OneLA, whose second captures the decode calls' "
                         "graphs; 1 for stock, whose first compiles and autotunes)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="qwen3_5_0_8b", help="model preset (artifact.model.config.MODELS)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--cpu", action="store_true",
                    help="run the plumbing on a CPU (tiny model, fp32, Triton interpreter): no performance numbers")
    args = ap.parse_args(argv)
    chunk = args.stock_prefill_chunk
    if chunk not in ("auto", "none") and not (chunk.isdigit() and int(chunk) >= 1):
        ap.error(f"--stock-prefill-chunk {chunk!r}: give a token count >= 1, none or auto")
    if args.cpu:
        for name, value in CPU_DEFAULTS.items():
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)
    return args


# --cpu: the tiny preset at a tiny cell, once, in fp32 (what a CPU test can afford); flags given explicitly win.
CPU_DEFAULTS = dict(model="tiny", dtype="float32", prompts=[40], O=[3], R=2, W=4, stock_prompts=[40], warmup=0,
                    repeats=1, out="outputs/hf_generate_cpu")


def stock_prefill_chunk(arg: str, gpu_bytes: int | None) -> int | None:
    """`--stock-prefill-chunk` as tokens per prefill call, None for one call; `gpu_bytes`: the GPU's memory (None:
    no GPU, one call)."""
    if arg == "none" or (arg == "auto" and (gpu_bytes is None or gpu_bytes >= ONE_CALL_PREFILL_GIB * 2 ** 30)):
        return None
    if arg == "auto":
        return AUTO_PREFILL_CHUNK
    return int(arg)


def warmup_for(system: str, args: argparse.Namespace) -> int:
    """Untimed searches before a cell's timed ones: `--warmup` where given, else what the system needs to be warm
    (OneLA: the first search runs eagerly and compiles, the second captures the CUDA graphs the timed ones replay;
    stock: one, which compiles and autotunes fla's kernels)."""
    if args.warmup is not None:
        return args.warmup
    return 2 if system == ONELA else 1


class _HostEvent:
    """A CUDA event's record / elapsed_time on the host clock (the --cpu plumbing run)."""

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, other) -> float:
        return 1e3 * (other.t - self.t)


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _max_memory() -> int:
    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0


def prefill_calls(prompt_len: int, chunk: int | None) -> int:
    """The model calls of generate's prefill: one, or one per chunk of `chunk` prompt tokens."""
    return 1 if chunk is None else -(-prompt_len // chunk)


class CallHooks:
    """Records `events[i]` (a start / end pair) around the i-th model call of a search through nn.Module hooks,
    so they wrap whatever forward generate reaches (the stock one, or onela_generate's); the first `prefill`
    calls are the prefill (one, or one per chunk), synchronised before the first and after the last for its wall
    time and peak memory. `events` None (a warm-up search) records nothing. `ranges`: each decode call also
    opens a profiler range (artifact.model.regions' CALL)."""

    def __init__(self, model, events, ranges: bool = False, prefill: int = 1):
        self.events, self.calls, self.prefill_wall, self.prefill_peak = events, 0, None, None
        self.prefill = prefill
        from artifact.model.regions import CALL, PREFIX
        self.range_name = PREFIX + CALL if ranges else None
        self.open = None
        self.handles = [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post)]

    def _pre(self, module, args):
        if self.calls == 0:
            _sync()
            self._t0 = time.perf_counter()
        if self.events is not None:
            if self.calls >= len(self.events):
                raise RuntimeError(f"generate made more than the {len(self.events)} model calls expected")
            self.events[self.calls][0].record()
        if self.range_name and self.calls >= self.prefill:          # a decode call: its profiler range
            self.open = torch.profiler.record_function(self.range_name)
            self.open.__enter__()
        self.calls += 1

    def _post(self, module, args, out):
        if self.open is not None:
            self.open.__exit__(None, None, None)
            self.open = None
        if self.events is not None:
            self.events[self.calls - 1][1].record()
        if self.calls == self.prefill:
            _sync()
            self.prefill_wall = time.perf_counter() - self._t0
            self.prefill_peak = _max_memory()

    def close(self):
        for h in self.handles:
            h.remove()


def build_model(args, folder, device):
    import transformers

    from artifact.model.config import get_model_config
    from artifact.model.weights import random_weights, save_hf_checkpoint
    cfg = get_model_config(args.model)
    dtype = getattr(torch, args.dtype)
    w = {n: t.to(dtype) for n, t in random_weights(cfg, seed=args.seed, device=device).items()}
    save_hf_checkpoint(folder, cfg, w)
    del w
    model = transformers.Qwen3_5ForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    return cfg, model


def selections(out, R, W):
    """Replay a beam search's selections from generate's per-step log-probs (`output_scores`; no EOS, so the
    running beams are the top W candidates in order, as generate keeps them). Returns per step (candidate scores
    [R, W * vocab], kept candidate indices [R, W] best first, the gap between the W-th and the (W+1)-th)."""
    running = torch.full((R, W), -1e9, dtype=torch.float32, device=out.sequences.device)
    running[:, 0] = 0.0
    steps = []
    for logp in out.scores:
        cand = (running[:, :, None] + logp.float().view(R, W, -1)).view(R, -1)
        top, idx = cand.topk(W + 1, dim=-1)
        steps.append((cand, idx[:, :W], top[:, W - 1] - top[:, W]))
        running = top[:, :W]
    return steps


def first_divergence(out, ref, R, W):
    """Where the two searches first keep different candidates, and whether that is a near-tie. Up to that step
    both searches scored the same beams, so their candidate scores align. Returns None (same selections at every
    step) or (step, request, stock's score gap between the two candidates that swapped, the largest candidate
    score difference between the searches at that step)."""
    for t, ((c_out, k_out, _), (c_ref, k_ref, _)) in enumerate(zip(selections(out, R, W), selections(ref, R, W))):
        for r in range(R):
            diff = (k_out[r] != k_ref[r]).nonzero()
            if len(diff):
                j = int(diff[0])
                gap = float((c_ref[r, k_ref[r, j]] - c_ref[r, k_out[r, j]]).abs())
                return t, r, gap, float((c_out[r] - c_ref[r]).abs().max())
    return None


def search(system, model, ids, W, O, scores=False, prefill_chunk=None):
    """One beam search; returns generate's output (sequences [R W, L + O]; with `scores`, also sequences_scores
    [R W] and the per-step log-probs, which cost a copy of [R W, vocab] per step: the timed searches go without).
    `prefill_chunk`: stock's prefill in chunks of that many tokens (generate's prefill_chunk_size)."""
    from kernels.onela.transformers import onela_generate
    kw = dict(num_beams=W, max_new_tokens=O, num_return_sequences=W, early_stopping=False, length_penalty=0.0,
              eos_token_id=None, pad_token_id=0, output_scores=scores, return_dict_in_generate=True)
    with torch.no_grad():
        if system == ONELA:
            return onela_generate(model, ids, **kw)
        if prefill_chunk is not None:
            kw["prefill_chunk_size"] = prefill_chunk
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, **kw)


@torch.no_grad()
def recheck_scores(model, ids, out, W, O) -> tuple[float, float]:
    """(largest |returned score - uncached recomputation| over each request's best RECHECK_BEAMS beams, the
    largest |logit| met)."""
    R, L = ids.shape
    err, scale = 0.0, 0.0
    for r in range(R):
        rows = out.sequences[r * W: r * W + RECHECK_BEAMS]
        logits = model(input_ids=rows, logits_to_keep=O + 1).logits[:, :O].float()   # positions L-1 .. L+O-2
        logp = torch.log_softmax(logits, -1).gather(-1, rows[:, L:, None])[..., 0].sum(-1)
        err = max(err, float((logp - out.sequences_scores[r * W: r * W + RECHECK_BEAMS].float()).abs().max()))
        scale = max(scale, float(logits.abs().max()))
    return err, scale


def run_cell(system, model, ids, W, O, warmup, repeats, prefill_chunk=None):
    """`warmup` untimed searches, `repeats` timed ones (artifact.timing.event_intervals: per search, the prefill's
    calls, then each decode call), one under the profiler (device time per decode call), then one with the
    scores (untimed) for the checks. Returns (that search's output, per search: interval ms, (wall s, prefill
    wall s), prefill peak and peak memory bytes; per decode call of the profiled search: (device us, ops))."""
    m = dict(intervals=[], walls=[], prefill_peak=[], peaks=[], device=[])
    P = prefill_calls(ids.shape[1], prefill_chunk)

    def run(events):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        hooks = CallHooks(model, events, prefill=P)
        try:
            _sync()
            t0 = time.perf_counter()
            search(system, model, ids, W, O, prefill_chunk=prefill_chunk)
            _sync()
            wall = time.perf_counter() - t0
        finally:
            hooks.close()
        if hooks.calls != P + O - 1:
            raise RuntimeError(f"{system}: generate made {hooks.calls} model calls, expected {P + O - 1} ({P} "
                               f"prefill + {O - 1})")
        if events is not None:
            m["walls"].append((wall, hooks.prefill_wall))
            m["prefill_peak"].append(hooks.prefill_peak)
            m["peaks"].append(_max_memory())

    if torch.cuda.is_available():
        from artifact.timing import event_intervals
        m["intervals"] = event_intervals(run, repeats, warmup, P + O - 1)
    else:                                             # --cpu: the same protocol on the host clock
        for _ in range(warmup):
            run(None)
        for _ in range(repeats):
            ev = [(_HostEvent(), _HostEvent()) for _ in range(P + O - 1)]
            run(ev)
            m["intervals"].append([s.elapsed_time(e) for s, e in ev])
    m["device"] = profiled_calls(system, model, ids, W, O, prefill_chunk)
    m["intervals"] = [[sum(s[:P])] + s[P:] for s in m["intervals"]]        # the prefill's calls as one interval
    return search(system, model, ids, W, O, scores=True, prefill_chunk=prefill_chunk), m


def profiled_calls(system, model, ids, W, O, prefill_chunk=None) -> list[tuple[float, int]]:
    """One search under torch.profiler: per decode call, the device time of what it launched and the op count
    (on a CPU, the top-level host ops stand in: artifact.model.breakdown)."""
    from artifact.model.breakdown import device_us_per_call, trace_of
    hooks = CallHooks(model, None, ranges=True, prefill=prefill_calls(ids.shape[1], prefill_chunk))
    try:
        trace = trace_of(lambda: search(system, model, ids, W, O, prefill_chunk=prefill_chunk),
                         torch.cuda.is_available())
    finally:
        hooks.close()
    calls = device_us_per_call(trace)
    if len(calls) != O - 1:
        raise RuntimeError(f"{system}: the profiled search shows {len(calls)} decode calls, expected {O - 1}")
    return calls


def on_host(out):
    """What the beam comparison reads of generate's output (sequences, sequences_scores, the per-step
    log-probs: about O GiB at W = 256), copied to host memory so the next system's cell runs without it."""
    from types import SimpleNamespace
    return SimpleNamespace(sequences=out.sequences.cpu(), sequences_scores=out.sequences_scores.cpu(),
                           scores=tuple(s.cpu() for s in out.scores))


def release(model) -> None:
    """Drop what a finished cell left (its outputs, an exception's frames, the OneLA cache and graphs kept on
    the model) and hand the allocator's cache back, so the next cell starts from the model alone."""
    import gc

    from kernels.onela.transformers import release as release_onela
    release_onela(model)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")          # before anything imports triton
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print("tools.hf_generate needs a CUDA GPU (CPU timings are not performance; --cpu runs the plumbing)",
              file=sys.stderr)
        return 2
    from artifact.model.prefill import random_prompts
    from artifact.env_record import write_env
    from artifact.results import append_csv, append_row, config_hash, git_commit, new_run_id, read_table
    from artifact.timing import summarize
    from kernels.onela.transformers import check_transformers, transformers_version
    check_transformers()
    t_begin = time.monotonic()
    wall_by_path: dict[str, list] = {}
    failed = 0
    out_dir = Path(args.out)
    run_id = new_run_id("hf_generate")
    commit = git_commit()
    with tempfile.TemporaryDirectory() as folder:
        cfg, model = build_model(args, folder, device)
    geo = cfg.geometry
    stock_chunk = stock_prefill_chunk(args.stock_prefill_chunk, torch.cuda.get_device_properties(0).total_memory
                                      if device == "cuda" else None)
    write_env(out_dir / "env" / f"{run_id}.json", {
        "suite": SUITE, "argv": sys.argv, "args": vars(args), "stock_prefill_chunk_tokens": stock_chunk,
        "model": args.model, "dtype": args.dtype,
        "transformers": transformers_version(), "packages_hf": {
            p: _version(p) for p in ("transformers", "flash-linear-attention", "fla-core", "causal-conv1d")}})
    recorded = {r["config_hash"] for r in read_table(out_dir / f"{SUITE}.csv").whole()}
    for L in args.prompts:
        ids = random_prompts(args.R, L, cfg.vocab_size, args.seed, device=device)
        for O in args.O:
            T = O - 1
            results = {}
            for system in [s for s in (STOCK, ONELA) if s in args.systems]:     # stock first: OneLA's row compares
                chunk, warm = (stock_chunk if system == STOCK else None), warmup_for(system, args)
                cell = dict(suite=SUITE, path=system, geometry=args.model, R=args.R, W=args.W, T=T, HK=geo.hk,
                            HV=geo.hv, K=geo.k, V=geo.v, prompt_len=L, lineage="beam", seed=args.seed)
                h = config_hash(cell)
                if h in recorded:                        # resumed: a cell one row per table already holds
                    print(f"{system:18s} L={L} O={O}: recorded earlier in {out_dir / (SUITE + '.csv')}", flush=True)
                    continue
                graphs = system == ONELA and warm >= 2
                row = dict(cell, O=O, config_hash=h, run_id=run_id, git_commit=commit,
                           timer=("host clock, CPU plumbing run (not performance)" if args.cpu else
                                  f"CUDA events around each model call; {warm} warm-up + {args.repeats} searches, "
                                  + ("decode calls replayed as CUDA graphs" if graphs else "eager"))
                           + ("" if chunk is None else f"; prefill in chunks of {chunk} tokens (generate's "
                                                       "prefill_chunk_size)"),
                           tolerance=LOGIT_REL_TOL)
                times = dict(config_hash=row["config_hash"], run_id=run_id, path=system, prompt_len=L, O=O, T=T,
                             transformers=transformers_version())
                t_cell = time.monotonic()
                release(model)
                times["allocated_gib_at_start"] = (torch.cuda.memory_allocated() / 2 ** 30
                                                   if torch.cuda.is_available() else 0.0)
                if system == STOCK and L not in args.stock_prompts:
                    row.update(status="skipped", reason=f"stock generate not run at prompt {L} (--stock-prompts "
                                                        f"{args.stock_prompts}): its prefill copies each prompt "
                                                        f"W={args.W} times")
                else:
                    try:
                        out, m = run_cell(system, model, ids, args.W, O, warm, args.repeats, prefill_chunk=chunk)
                    except torch.cuda.OutOfMemoryError as e:
                        row.update(status="skipped", reason=f"out of GPU memory: {str(e).splitlines()[0][:160]}")
                    except Exception as e:  # noqa: BLE001 - a failing cell is recorded and the run goes on
                        row.update(status="failed", reason=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
                        print(f"{system} L={L} O={O} failed:", file=sys.stderr)
                        import traceback
                        traceback.print_exc()
                    else:
                        err, scale = recheck_scores(model, ids, out, args.W, O)
                        results[system] = on_host(out)     # compared on the host: no GPU memory held across
                        tol = 2 * T * LOGIT_REL_TOL * scale
                        flat = [c for s in m["intervals"] for c in s[1:]]
                        sums = [sum(s[1:]) for s in m["intervals"]]
                        dec_wall = [(w - p) / T for w, p in m["walls"]]
                        med, p20, p80 = summarize(sums, "statistics")
                        row.update(status="ok" if err <= tol else "failed", max_abs_err=err, tolerance=tol,
                                   latency_ms=med, p20_ms=p20, p80_ms=p80,
                                   reason="max_abs_err: returned beam score against the uncached forward's" +
                                          ("" if err <= tol else f"; above the tolerance {tol:.3g}"))
                        call_med, call_p20, call_p80 = summarize(flat, "statistics")
                        times.update(prefill_ms=summarize([s[0] for s in m["intervals"]], "statistics")[0],
                                     prefill_peak_gib=max(m["prefill_peak"]) / 2 ** 30,
                                     decode_call_ms=call_med, decode_call_p20_ms=call_p20, decode_call_p80_ms=call_p80,
                                     decode_call_device_ms=1e-3 * summarize([d for d, _ in m["device"]],
                                                                            "statistics")[0],
                                     decode_call_device_ops=sum(n for _, n in m["device"]) / len(m["device"]),
                                     generate_wall_ms=1e3 * summarize([w for w, _ in m["walls"]], "statistics")[0],
                                     decode_call_wall_ms=1e3 * summarize(dec_wall, "statistics")[0],
                                     peak_gib=max(m["peaks"]) / 2 ** 30, searches=len(sums), max_logit=scale)
                append_row(out_dir / f"{SUITE}.csv", row)
                w = wall_by_path.setdefault(system, [0.0, 0])
                w[0], w[1] = w[0] + time.monotonic() - t_cell, w[1] + 1
                if system == ONELA and STOCK in results and ONELA in results:
                    a, b = results[STOCK], results[ONELA]
                    div = first_divergence(b, a, args.R, args.W)
                    times.update(beams_identical_to_stock=bool(torch.equal(a.sequences, b.sequences)),
                                 max_score_diff_to_stock=float((a.sequences_scores - b.sequences_scores).abs().max()),
                                 same_selections_as_stock=O if div is None else div[0],
                                 divergence_gap=None if div is None else div[2],
                                 divergence_score_diff=None if div is None else div[3])
                    del a, b
                append_csv(out_dir / TIMES, TIME_COLUMNS, [{c: _fmt(times.get(c)) for c in TIME_COLUMNS}])
                out = m = None                             # this cell's outputs go before the next cell starts
                print(f"{system:18s} L={L} O={O}: {row['status']}"
                      + (f" decode {times['decode_call_ms']:.2f} ms/call (events), {times['decode_call_wall_ms']:.1f} "
                         f"ms/call (wall), prefill {times['prefill_ms']:.0f} ms, peak {times['peak_gib']:.1f} GiB"
                         if "decode_call_ms" in times else f" ({row['reason']})"), flush=True)
                failed += row["status"] == "failed"
            results.clear()
    write_wall(out_dir, run_id, time.monotonic() - t_begin, wall_by_path)
    return 1 if failed else 0


def write_wall(out_dir: Path, run_id: str, total_s: float, by_path: dict) -> Path:
    """DIR/env/<run_id>.wall.json in the sweeps' form (artifact.results.read_wall reads it): the run's wall time
    from the model's build to its last row, the rows written, and per system its cells' time and count."""
    rec = {"run_id": run_id, "wall_s": round(total_s, 1), "cells": sum(n for _, n in by_path.values()),
           "by_path": {p: {"wall_s": round(s, 1), "cells": n} for p, (s, n) in by_path.items()}, "shared": {}}
    path = out_dir / "env" / f"{run_id}.wall.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1) + "\n")
    return path


def _fmt(x) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.6g}"
    return str(x)


def _version(pkg: str) -> str:
    try:
        from importlib.metadata import version
        return version(pkg)
    except Exception:  # noqa: BLE001 - any failure means "not installed"
        return "not installed"


if __name__ == "__main__":
    sys.exit(main())
