"""Where one decode call's GPU time goes: every kernel of a beam search attributed to a model component
(artifact.model.regions), summed per component and call, to set beside each component's floor
(artifact.model.cost.component_costs).

Method (an attribution instrument, not a timer: the call's total comes from artifact.timing through
artifact.model.graphs.time_decode):
1. `trace_of` runs one whole beam search under torch.profiler (CPU activity, plus CUDA activity on a GPU:
   CUPTI records every kernel, memcpy and memset with its device start and duration) and returns its Chrome
   trace.
2. Eager search: each device op carries the correlation id of the runtime / driver call that launched it. The
   launch lies inside one `decode/call` range (its call index, in order) and inside the innermost
   `decode/<region>` range open on that host thread (its region). A region of one component gives it; a
   compiled block's region is split into its phases by GEMM (regions.py). A device op launched inside a call
   but in no region is "unattributed".
3. Graph-replayed search (the way Fig 6 runs): a replay's kernels all correlate to one cudaGraphLaunch, so they
   carry the call but no region. The replay runs the kernels the capture recorded from the same forward(t), so
   per call the replay's kernel-name sequence is aligned with the eager call's (difflib, longest matching
   blocks, no junk heuristic) and a matched kernel takes its eager twin's component. Eager-only work (the
   steppers' host-side parents range check, which a capture skips) is left unmatched on the eager side; a
   replay kernel without a twin is "unattributed".
4. Per component: summed device durations per call (the mean over the T calls). "idle" is the part of a call's
   span (first kernel start to last kernel end) with no device op running: launch gaps inside a graph, or the
   host's launch time in an eager call. A kernel counts from its start or the end of the ops before it,
   whichever is later (`own_us`): under programmatic dependent launch a kernel starts while the one before it
   runs and waits, and that overlap is the earlier kernel's time. So the components plus idle are the span.
The graph-replayed durations are the breakdown ("graph" method); where no graphs run (a CPU run, or a path
that cannot be captured) the eager durations are ("eager" method). On a CPU there are no device ops: each
top-level CPU op (an aten op not nested in another) that is not a pure view stands in for one, with its CPU
time -- for exercising the attribution, not for performance.
"""
from __future__ import annotations

import bisect
import difflib
import json
import os
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from artifact.model.regions import CALL, PREFIX, REGIONS

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
# GEMM kernels: cuBLAS / cuBLASLt (nvjet, sm90_xmma, cutlass, gemv, split-K reduction), Inductor's mm
# templates; on a CPU run the aten matrix ops.
GEMM = re.compile(r"gemm|gemv|nvjet|cutlass|xmma|splitk|cublas|triton_tem_|^aten::(mm|addmm_?|bmm|matmul|linear)$",
                  re.IGNORECASE)
# A GEMM kernel that finishes the one before it (cuBLAS's split-K reduction) rather than starting a GEMM of its own
GEMM_TAIL = re.compile(r"splitk|reduce", re.IGNORECASE)
UNATTRIBUTED = "unattributed"
IDLE = "idle"
# aten ops that only make views (no kernel on a GPU): left out of a CPU run's stand-in ops
VIEW_OPS = frozenset(f"aten::{n}" for n in (
    "view", "reshape", "permute", "unflatten", "flatten", "split", "split_with_sizes", "chunk", "select", "slice",
    "expand", "expand_as", "t", "transpose", "unbind", "as_strided", "narrow", "alias", "detach", "unsqueeze",
    "squeeze", "_unsafe_view", "unsafe_split", "view_as"))


@dataclass(frozen=True)
class DeviceOp:
    name: str
    start: float          # us, device timeline (the trace's clock)
    dur: float            # us
    launch: float         # us, when the host launched it (same clock); a CPU op's own start
    thread: tuple         # (pid, tid) of the launching host thread
    memset: bool = False


@dataclass(frozen=True)
class Range:
    name: str             # the region (PREFIX stripped)
    start: float
    end: float
    thread: tuple


@dataclass
class Labelled:
    """The device ops of each decode call, in device order, with each op's region and component."""

    ops: list[list[DeviceOp]]
    regions: list[list[str]]
    components: list[list[str]]
    notes: list[str] = field(default_factory=list)
    twins: list[list[int | None]] | None = None      # a replay's ops: the index of each one's eager twin


def trace_of(fn, cuda: bool) -> dict:
    """Run fn() once under torch.profiler and return its Chrome trace as a dict."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)


def _thread(e) -> tuple:
    return (str(e.get("pid")), str(e.get("tid")))


def parse_trace(trace: dict) -> tuple[list[DeviceOp], list[Range], bool]:
    """(device ops sorted by start, decode ranges, whether the ops are real device ops). A device op's launch
    time is its runtime / driver call's start (same correlation id), or, where the trace lacks that call, the
    start of the host op it names as its external id (which was open at the launch); with neither it is NaN
    (the op then lies in no call)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    ranges = [Range(e["name"][len(PREFIX):], float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), _thread(e))
              for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(PREFIX)]
    launches, host_ops = {}, {}
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") in LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = (float(e["ts"]), _thread(e))
        elif e.get("cat") in ("cpu_op", "user_annotation") and args.get("External id") not in (None, 0):
            host_ops.setdefault(args["External id"], (float(e["ts"]), _thread(e)))
    ops = []
    for e in events:
        if e.get("cat") not in DEVICE_CATS:
            continue
        args = e.get("args") or {}
        # the launching runtime / driver call; else the host op that was open at the launch (its external id)
        launch, thread = launches.get(args.get("correlation"),
                                      host_ops.get(args.get("External id"), (float("nan"), ("", ""))))
        ops.append(DeviceOp(e["name"], float(e["ts"]), float(e.get("dur", 0)), launch, thread,
                            e.get("cat") == "gpu_memset"))
    if ops:
        return sorted(ops, key=lambda o: o.start), ranges, True
    # a CPU run: the top-level aten ops (not nested in another cpu_op of the same thread) stand in
    cpu = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (float(e["ts"]), -float(e["dur"])))
    open_until: dict[tuple, float] = {}
    for e in cpu:
        th, ts, dur = _thread(e), float(e["ts"]), float(e.get("dur", 0))
        if ts < open_until.get(th, float("-inf")):
            continue                                      # nested in a top-level op
        open_until[th] = ts + dur
        if e["name"] not in VIEW_OPS:
            ops.append(DeviceOp(e["name"], ts, dur, ts, th))
    return ops, ranges, False


class _Index:
    """The decode ranges of one host thread: which call and which innermost region holds a host timestamp."""

    def __init__(self, ranges: list[Range]):
        self.calls = sorted((r for r in ranges if r.name == CALL), key=lambda r: r.start)
        self.parts = sorted((r for r in ranges if r.name != CALL), key=lambda r: r.start)
        self.call_starts = [r.start for r in self.calls]
        self.part_starts = [r.start for r in self.parts]

    def call(self, ts: float) -> int | None:
        i = bisect.bisect_right(self.call_starts, ts) - 1
        return i if i >= 0 and ts < self.calls[i].end else None

    def region(self, ts: float, since: float) -> Range | None:
        """The innermost region containing ts among those opened at or after `since` (the call's start)."""
        i = bisect.bisect_right(self.part_starts, ts) - 1
        while i >= 0 and self.parts[i].start >= since:
            if ts < self.parts[i].end:
                return self.parts[i]
            i -= 1
        return None


def _call_order(ranges: list[Range]) -> dict:
    """(thread, call start) -> call index over all threads, in time order."""
    calls = sorted((r for r in ranges if r.name == CALL), key=lambda r: r.start)
    return {(r.thread, r.start): i for i, r in enumerate(calls)}


def _by_call(ops, ranges, with_regions: bool):
    """[call] -> list of (op, region Range or None), in device order; ops outside every call are dropped."""
    index = {th: _Index([r for r in ranges if r.thread == th]) for th in {r.thread for r in ranges}}
    # a launch recorded under another thread key than the ranges: the decode's thread (the one with the calls)
    main = max(index.values(), key=lambda ix: len(ix.calls), default=None)
    order = _call_order(ranges)
    calls: list[list] = [[] for _ in order]
    for op in ops:
        ix = index.get(op.thread, main)
        if ix is None or op.launch != op.launch:
            continue
        c = ix.call(op.launch)
        if c is None:
            continue
        call = ix.calls[c]
        reg = ix.region(op.launch, call.start) if with_regions else None
        calls[order[(call.thread, call.start)]].append((op, reg))
    return calls


def split_phases(names: list[str], memsets: list[bool], phases: tuple[str, ...]) -> list[str] | None:
    """Components of a compiled block's ops (in launch order) by GEMM phase, or None when the ops do not hold
    the (len(phases) - 1) / 2 GEMMs the block has. A memset right before a GEMM is the GEMM's workspace, a
    split-K reduction after it part of it; a GEMM kernel right after another one starts the next GEMM (the phase
    between them empty: our gate_up GEMM with the SwiGLU in its epilogue, then the down GEMM)."""
    gemm = [bool(GEMM.search(n)) for n in names]
    for i in range(len(names) - 2, -1, -1):
        if memsets[i] and gemm[i + 1]:
            gemm[i] = True
    out, phase = [], 0
    for i, g in enumerate(gemm):
        if g and phase % 2 == 0:                      # a GEMM run starts
            phase += 1
        elif g and i and gemm[i - 1] and not memsets[i - 1] and not GEMM_TAIL.search(names[i]):
            phase += 2                                # the next GEMM (or its workspace memset) right after one
        elif not g and phase % 2 == 1:                # a GEMM run ends
            phase += 1
        if phase >= len(phases):
            return None
        out.append(phases[phase])
    runs = (phase + 1) // 2
    return out if runs == (len(phases) - 1) // 2 else None


def label_eager(ops: list[DeviceOp], ranges: list[Range]) -> Labelled:
    """Each op of each call with its region and component (module docstring, step 2)."""
    calls = _by_call(ops, ranges, with_regions=True)
    out = Labelled([], [], [])
    for items in calls:
        regions = [r.name if r is not None else "" for _, r in items]
        comps = [REGIONS[r.name] if r is not None and isinstance(REGIONS.get(r.name), str) else UNATTRIBUTED
                 for _, r in items]
        groups: dict = defaultdict(list)                # one compiled block's call -> its ops
        for j, (_, r) in enumerate(items):
            if r is not None and isinstance(REGIONS.get(r.name), tuple):
                groups[(r.start, r.name)].append(j)
        for (_, name), idx in groups.items():
            got = split_phases([items[j][0].name for j in idx], [items[j][0].memset for j in idx], REGIONS[name])
            if got is None:
                out.notes.append(f"{name}: the ops do not show the block's {(len(REGIONS[name]) - 1) // 2} "
                                 f"GEMM(s); counted whole as 'unsplit:{name}'")
                got = [f"unsplit:{name}"] * len(idx)
            for j, c in zip(idx, got):
                comps[j] = c
        out.ops.append([op for op, _ in items])
        out.regions.append(regions)
        out.components.append(comps)
    return out


def label_replay(graph_ops: list[DeviceOp], ranges: list[Range], eager: Labelled) -> Labelled:
    """The graph replay's ops per call, labelled through their eager twins (module docstring, step 3)."""
    calls = _by_call(graph_ops, ranges, with_regions=False)
    if len(calls) != len(eager.ops):
        raise ValueError(f"graph-replayed search has {len(calls)} calls, the eager one {len(eager.ops)}")
    out = Labelled([], [], [], twins=[])
    for c, items in enumerate(calls):
        ops = [op for op, _ in items]
        a = [o.name for o in eager.ops[c]]
        b = [o.name for o in ops]
        comps, regions, twins = [UNATTRIBUTED] * len(b), [""] * len(b), [None] * len(b)
        for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
            for k in range(blk.size):
                comps[blk.b + k] = eager.components[c][blk.a + k]
                regions[blk.b + k] = eager.regions[c][blk.a + k]
                twins[blk.b + k] = blk.a + k
        unmatched = twins.count(None)
        if unmatched:
            out.notes.append(f"call {c}: {unmatched} of {len(b)} replayed ops have no eager twin (unattributed)")
        out.ops.append(ops)
        out.regions.append(regions)
        out.components.append(comps)
        out.twins.append(twins)
    out.notes = eager.notes + out.notes
    return out


def own_us(ops: list[DeviceOp]) -> list[float]:
    """Each op's device time not covered by the ops that started before it (in the ops' order): its end less
    the later of its start and the latest end before it, at least 0. Their sum is the union of the intervals."""
    own = [0.0] * len(ops)
    end = float("-inf")
    for i in sorted(range(len(ops)), key=lambda i: ops[i].start):
        s, e = ops[i].start, ops[i].start + ops[i].dur
        own[i] = max(0.0, e - max(s, end))
        end = max(end, e)
    return own


def busy_us(ops: list[DeviceOp]) -> float:
    """Length of the union of the ops' device intervals."""
    return sum(own_us(ops))


def device_us_per_call(trace: dict) -> list[tuple[float, int]]:
    """Per decode call of a trace (each a `decode/call` range, in time order): (the device time, in us, of the
    ops it launched -- the union of their intervals, `busy_us` --, their count). No regions needed: a call's
    cost to the GPU, to set beside its event-timed span."""
    ops, ranges, _ = parse_trace(trace)
    return [(busy_us([o for o, _ in call]), len(call)) for call in _by_call(ops, ranges, with_regions=False)]


def per_call(lab: Labelled) -> dict[str, dict]:
    """component -> {"us": mean device time per call (each op's `own_us`), "ops": mean op count per call}, with
    IDLE (span minus busy time) and "_span" (first start to last end), means over the calls."""
    n = len(lab.ops)
    if not n:
        raise ValueError("no decode calls in the trace (no decode/call range)")
    acc: dict = defaultdict(lambda: [0.0, 0])
    for ops, comps in zip(lab.ops, lab.components):
        own = own_us(ops)
        for us, c in zip(own, comps):
            acc[c][0] += us
            acc[c][1] += 1
        if ops:
            span = max(o.start + o.dur for o in ops) - min(o.start for o in ops)
            acc["_span"][0] += span
            acc[IDLE][0] += span - sum(own)
    return {c: {"us": v[0] / n, "ops": v[1] / n} for c, v in acc.items()}


def kernel_table(lab: Labelled, eager: Labelled | None = None) -> list[dict]:
    """One dict per op of every call: call, position, name, region, component, device us (start to end,
    including a wait under programmatic dependent launch; and, for a replay labelled through `eager`, its eager
    twin's us)."""
    rows = []
    for c, (ops, regs, comps) in enumerate(zip(lab.ops, lab.regions, lab.components)):
        for j, (o, r, k) in enumerate(zip(ops, regs, comps)):
            row = {"call": c, "index": j, "name": o.name, "region": r, "component": k, "us": round(o.dur, 3)}
            if eager is not None and lab.twins is not None:
                tw = lab.twins[c][j]
                row["eager_us"] = round(eager.ops[c][tw].dur, 3) if tw is not None else ""
            rows.append(row)
    return rows


def breakdown(dec, graphs: bool, traces: dict | None = None) -> tuple[Labelled, Labelled]:
    """Profile one eager search of `dec` and, with `graphs` (decoder captured), one graph-replayed search;
    return (the labelled ops the breakdown uses, the eager search's): the same object where the eager search is
    the breakdown ("eager" method), and where the replay cannot be split into the eager search's calls (noted).
    `traces`, when given, receives the raw Chrome traces ("eager", "graph")."""
    cuda = dec.model.device.type == "cuda"
    trace = trace_of(lambda: dec.run(use_graphs=False), cuda)
    if traces is not None:
        traces["eager"] = trace
    eager = label_eager(*parse_trace(trace)[:2])
    if len(eager.ops) != dec.T:
        raise ValueError(f"eager search shows {len(eager.ops)} decode calls, expected T={dec.T}")
    if not graphs:
        return eager, eager
    trace = trace_of(lambda: dec.run(use_graphs=True), cuda)
    if traces is not None:
        traces["graph"] = trace
    try:
        return label_replay(*parse_trace(trace)[:2], eager), eager
    except ValueError as e:
        eager.notes.append(f"graph replay not attributable ({e}); eager device times used")
        return eager, eager
