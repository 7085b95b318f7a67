"""The path interface (docs/design.md §4); the paths are registered in artifact/registry.py (PATHS).

A path is one way of running all T decode steps of a workload, OneLA and every baseline alike:
    supports(geometry, shape, device) -> None | reason      (a reason makes the cell a recorded skip)
    prepare(wl)                                             allocate persistent state; never timed
    run(wl) -> o [T, R, W, HV, V]                           all T steps incl. beam-state maintenance; timed
    persistent_bytes(), written_bytes()                     from the tensors the path really keeps / stores
    cost(wl)                                                the cost model of the path's `algorithm` (artifact.cost)
`run` must read every input from `wl`'s tensors on each call (the timer captures it in a CUDA graph once
and replays it after copying fresh inputs into those tensors), and must not synchronise with the host.
"""
from __future__ import annotations

import abc
import functools
import operator

import torch

from artifact.cost import Algorithm
from artifact.registry import PATHS, load_object  # noqa: F401 - PATHS: get_path's table, and where callers find it


class DecodePath(abc.ABC):
    name: str = ""
    capturable: bool = True   # whether run() can be captured in a CUDA graph
    # What the path computes, an artifact.cost algorithm (FullState with the state copies its maintenance pays,
    # ProjectionReplay, RecordReplay, TokenReplay, each with the matrix rate of its arithmetic): its cost() and so
    # every floor, FLOP count and arithmetic intensity of its rows. None: the path does not model itself.
    algorithm: Algorithm | None = None
    # What the path is, where the core treats kinds of path differently; each path class declares its own, so
    # the core keeps no lists of path names.
    keeps_ancestry: bool = False      # its beams read their history through the ancestry index and never copy
                                      # it (OneLA): the full model's conv windows and decode KV do the same
    replays_prompt_tail: bool = False  # its steppers start from the last prompt-block checkpoint and replay the
                                       # prompt tail after it (vLLM align-mode prefix caching): reset gets `tail`

    def supports(self, geometry, shape, device) -> str | None:
        """None if this path can run the cell, else the reason it cannot (recorded as a skip)."""
        return None

    @abc.abstractmethod
    def prepare(self, wl) -> None: ...

    @abc.abstractmethod
    def run(self, wl) -> torch.Tensor: ...

    @abc.abstractmethod
    def persistent_bytes(self) -> int: ...

    @abc.abstractmethod
    def written_bytes(self) -> int: ...

    def workspace_bytes(self) -> int:
        """Transient state bytes a step uses and no later step reads (not in persistent_bytes); 0 by default."""
        return 0

    def cost(self, wl) -> dict | None:
        """Roofline inputs of this path's algorithm on `wl` (artifact.cost: {"compulsory_bytes", "step_bytes",
        "flops", "step_flops", "rate"}); a ReplaySSM path's `replay_tail_len` prompt-tail tokens included. None if
        the path declares no algorithm."""
        if self.algorithm is None:
            return None
        return self.algorithm.cost(wl, tail_len=getattr(self, "replay_tail_len", 0))


class UnavailablePath(DecodePath):
    """Stands in for a path whose module cannot be imported; every cell is a skip with the import error."""

    capturable = False

    def __init__(self, name: str, reason: str):
        self.name, self.reason = name, reason

    def supports(self, geometry, shape, device) -> str | None:
        return self.reason

    def prepare(self, wl) -> None:
        raise RuntimeError(self.reason)

    def run(self, wl) -> torch.Tensor:
        raise RuntimeError(self.reason)

    def persistent_bytes(self) -> int:
        return 0

    def written_bytes(self) -> int:
        return 0


def _checked_reset(fn):
    @functools.wraps(fn)
    def reset(self, *args, **kwargs):
        self._next_step = None                  # a reset that raises leaves no decode in progress
        result = fn(self, *args, **kwargs)
        self._next_step = 0
        return result
    return reset


def _checked_step(fn):
    @functools.wraps(fn)
    def step(self, t, q, k, v, g, beta, parents, out):
        self.check_call(t, q, out)
        result = fn(self, t, q, k, v, g, beta, parents, out)
        self._next_step = t + 1                 # only a step that returned counts
        return result
    return step


class Stepper(abc.ABC):
    """One GDN layer's recurrent state for R requests x W beams across the T decode steps of one decode.

    The unit a full model calls once per layer and step; a path's `run` is `reset` plus T `step`s.
    Inputs of one step: q, k [R, W, HK, K] (raw, bf16), v [R, W, HV, V], g, beta [R, W, HV] fp32,
    parents [R, W] int32 (beam b's parent at the previous step; ignored at t = 0). Every method must be
    CUDA-graph capturable (no host sync, no data-dependent allocation).

    Call order: reset(s_ctx), then step(0), step(1), ..., step(T-1); the next decode begins with reset. Every
    subclass's reset and step are wrapped (at class creation) so that a step before reset, a step out of order
    or past T, and an `out` of another shape, device or dtype than `out_dtypes` allows raise before the
    subclass runs (`check_call`): a kernel would otherwise read a state never written (NaN, 1e15) or store into
    an int tensor (zeros). The checks are host-side Python on a counter; nothing touches the device, so a CUDA
    graph captured over reset + the T steps replays exactly what it captured.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "reset" in cls.__dict__:
            cls.reset = _checked_reset(cls.__dict__["reset"])
        if "step" in cls.__dict__:
            cls.step = _checked_step(cls.__dict__["step"])

    def __init__(self, geometry, R: int, W: int, T: int, device):
        self.geometry, self.R, self.W, self.T, self.device = geometry, R, W, T, torch.device(device)
        self._next_step = None          # the step the decode in progress takes next; None before a reset

    @property
    def steps_done(self) -> int | None:
        """Steps taken since the last reset (None before the first reset)."""
        return getattr(self, "_next_step", None)

    def out_dtypes(self, q: torch.Tensor) -> tuple:
        """The dtypes `out` may have for inputs like `q`: the inputs' own, or float32 (the kernels compute in fp32
        and cast on store)."""
        return (q.dtype, torch.float32)

    def check_call(self, t, q, out) -> None:
        """Refuse a step call the decode in progress cannot take: before reset, out of order or past T, or an
        `out` not [R, W, HV, V] of an allowed float dtype on q's device."""
        name = type(self).__name__
        nxt = getattr(self, "_next_step", None)
        try:
            t = operator.index(t)
        except TypeError:
            raise TypeError(f"{name}: step index t must be an int, got {t!r}") from None
        if nxt is None:
            raise RuntimeError(f"{name}: step({t}) before reset(s_ctx): call reset(s_ctx) to begin a decode")
        if t != nxt or t >= self.T:
            if nxt >= self.T:
                raise RuntimeError(f"{name}: step({t}) after all T={self.T} steps since reset: call reset(s_ctx) "
                                   "to begin the next decode")
            raise RuntimeError(f"{name}: step({t}) out of order: the next step since reset is {nxt} (a decode "
                               f"runs steps 0, 1, ..., {self.T - 1} after reset)")
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"{name}: out must be a tensor, got {type(out).__name__}")
        geo = self.geometry
        want = (self.R, self.W, geo.hv, geo.v)
        if tuple(out.shape) != want:
            raise ValueError(f"{name}: out has shape {tuple(out.shape)}, expected {want}")
        allowed = tuple(dict.fromkeys(self.out_dtypes(q)))
        if out.dtype not in allowed:
            raise ValueError(f"{name}: out has dtype {out.dtype}; this stepper writes "
                             f"{' or '.join(str(d) for d in allowed)} (the inputs' dtype, or float32)")
        if out.device != q.device:
            raise ValueError(f"{name}: out is on {out.device}, the inputs on {q.device}")

    @abc.abstractmethod
    def reset(self, s_ctx: torch.Tensor, tail: dict | None = None) -> None:
        """Begin a decode from the post-prefill state s_ctx [R, HV, V, K] fp32 (kept by reference, read
        during the steps). `tail` (ReplaySSM only) holds prompt-tail inputs to replay after s_ctx."""

    @abc.abstractmethod
    def step(self, t: int, q, k, v, g, beta, parents, out: torch.Tensor) -> torch.Tensor:
        """Decode step t for every beam; writes o [R, W, HV, V] into `out` and returns it."""

    @abc.abstractmethod
    def persistent_bytes(self) -> int:
        """Recurrent-state capacity this stepper keeps for a T-step decode (from its real tensors)."""

    @abc.abstractmethod
    def written_bytes(self) -> int:
        """Recurrent-state bytes its kernels store over a T-step decode (state or record writes)."""

    def workspace_bytes(self) -> int:
        """Transient state bytes a step uses and no later step reads (e.g. the paper FullState's gather
        workspace, kept as the tensor `work`); reported beside persistent_bytes, never in it. 0 without one."""
        work = getattr(self, "work", None)
        return 0 if work is None else work.numel() * work.element_size()


class StepperPath(DecodePath):
    """A path that is a Stepper run over the workload's T steps (the common case)."""

    stepper_cls: type[Stepper]
    out_dtype = None  # None: the input dtype (bf16 outputs like the frameworks')

    def make_stepper(self, wl) -> Stepper:
        return self.stepper_cls(wl.geometry, wl.R, wl.W, wl.T, wl.device)

    def prepare(self, wl) -> None:
        self.stepper = self.make_stepper(wl)
        geo = wl.geometry
        self.out = torch.empty(wl.T, wl.R, wl.W, geo.hv, geo.v, dtype=self.out_dtype or wl.q.dtype,
                               device=wl.device)

    def run(self, wl) -> torch.Tensor:
        st = self.stepper
        st.reset(wl.s_ctx)
        for t in range(wl.T):
            st.step(t, wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t], self.out[t])
        return self.out

    def persistent_bytes(self) -> int:
        return self.stepper.persistent_bytes()

    def written_bytes(self) -> int:
        return self.stepper.written_bytes()

    def workspace_bytes(self) -> int:
        return self.stepper.workspace_bytes()


def make_stepper(name: str, geometry, R: int, W: int, T: int, device) -> Stepper:
    """The Stepper of a registered StepperPath (what the full model calls per GDN layer)."""
    path = get_path(name)
    if isinstance(path, UnavailablePath):
        raise RuntimeError(path.reason)
    if not isinstance(path, StepperPath):
        raise ValueError(f"path {name!r} is not a StepperPath; it has no per-step stepper")
    return path.stepper_cls(geometry, R, W, T, device)


def get_path(name: str) -> DecodePath:
    """A fresh instance of the named path (an UnavailablePath if its module will not import)."""
    if name not in PATHS:
        raise ValueError(f"unknown path {name!r}; registered: {', '.join(PATHS)}")
    try:
        return load_object(PATHS[name])()
    except (ImportError, AttributeError) as e:
        return UnavailablePath(name, f"{name}: cannot load {PATHS[name]}: {type(e).__name__}: {e}")
