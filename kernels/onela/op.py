"""The public OneLA op: shared-context large-beam GDN decode for one layer, without the benchmark harness."""
from __future__ import annotations

import torch

from artifact.workload import Geometry
from kernels.onela.stepper import OneLAStepper


class OneLA:
    r"""Beam-search decode of one Gated DeltaNet layer from a shared prompt state (paper §3).

    Every beam of a request starts from the same post-prefill state ``s_ctx``; instead of a full ``[V, K]``
    state per beam, each step appends one transition record per beam (alpha fp32, delta bf16 ``[V]``, k-hat bf16
    ``[K]``) and a beam's state is ``s_ctx`` plus its ancestors' records, replayed in closed form inside the
    kernel. Beam selection only moves indices (``parents``); records never move.

    Per step, for each request r, beam b and value head h (key head ``h // (HV // HK)``)::

        q_hat = l2norm(q) * K**-0.5,  k_hat = l2norm(k),  alpha = exp(g)
        S_t   = alpha * S_prev + beta * (v - alpha * S_prev @ k_hat) k_hat^T,   o = S_t @ q_hat

    where ``S_prev`` is ``s_ctx`` at step 0 and the state of beam ``parents[r, b]`` (a beam of the previous
    step) afterwards. ``kernels.onela.naive.onela_naive`` computes the same in plain PyTorch (fp64).

    Args:
        num_requests (R), beam_width (W), max_steps (T): the decode's shape; at most T steps follow a reset.
        num_k_heads (HK), num_v_heads (HV), head_k_dim (K), head_v_dim (V): the layer's geometry; HV is a
            multiple of HK; K and V any multiple of 16 in 16..512.
        device: a CUDA device (or the CPU under ``TRITON_INTERPRET=1``, for tests).
        check_parents: check every step's ``parents`` against ``[0, W)`` (a host sync per step, skipped inside
            a CUDA-graph capture). ``False`` for a caller that checks them itself, once per decode call for all
            its layers (``kernels.onela.transformers``); an out-of-range parent then reads another beam's rows.

    Inputs of `step` (one decode step, every beam):
        q, k: ``[R, W, HK, K]``, raw (the op normalises them), bf16 or fp32 (same dtype as v; fp16 is refused)
        v: ``[R, W, HV, V]``
        g: ``[R, W, HV]`` fp32 log-decay; beta: ``[R, W, HV]`` fp32 in (0, 1)
        parents: ``[R, W]`` int32, beam b's parent among the previous step's beams (ignored at step 0)
    Every tensor argument lies on the op's device (a step names the one that does not).
    Returns o: ``[R, W, HV, V]`` in the input dtype (or written into ``out``).

    On Hopper with K = 128 or 256, V = 128, 256 or 512, W a multiple of 64 and bf16 inputs each step is one launch
    of a warp-specialised kernel (after a Triton prep kernel at deeper steps: past step 7, or past step 1 when
    HV > 2 HK); elsewhere, past step 31, and at K = 128 past step 5 where the prep kernel runs, two Triton
    launches. Any number of steps (``max_steps``) is taken, up to int32 offsets into the
    per-step coefficient table: (3 + 2T) R HV W < 2**31; on a GPU, R x HV and W / 64 up to CUDA's grid extent
    of 65,535 (the constructor names a shape past either). Every step is CUDA-graph capturable.

    On Hopper a step's launches use programmatic dependent launch, and its first launch reads the step's inputs
    (q, k, parents) before it waits on the launch before it. So whatever writes them must not trigger its
    dependents early (``griddepcontrol.launch_dependents`` before its last write): a plain launch before the step
    is safe, one that triggers at its start is not (the step then reads q and k half-written).

    Example::

        >>> import torch
        >>> from kernels.onela import OneLA
        >>> dev = "cuda" if torch.cuda.is_available() else "cpu"   # CPU: run under TRITON_INTERPRET=1
        >>> R, W, T, H, D = 1, 4, 3, 2, 16
        >>> op = OneLA(R, W, T, num_k_heads=H, num_v_heads=H, head_k_dim=D, head_v_dim=D, device=dev)
        >>> op.reset(torch.randn(R, H, D, D, device=dev) * 0.1)            # the post-prefill state S_ctx
        >>> parents = torch.zeros(R, W, dtype=torch.int32, device=dev)     # step 0: every beam from S_ctx
        >>> for t in range(T):
        ...     q, k = (torch.randn(R, W, H, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
        ...     v = torch.randn(R, W, H, D, device=dev, dtype=torch.bfloat16)
        ...     g = -torch.rand(R, W, H, device=dev)                       # log-decay < 0
        ...     beta = torch.rand(R, W, H, device=dev)
        ...     o = op.step(q, k, v, g, beta, parents)                     # [R, W, H, D] bf16
        ...     parents = torch.randint(0, W, (R, W), dtype=torch.int32, device=dev)   # the beam search's choice
        >>> o.shape
        torch.Size([1, 4, 2, 16])
        >>> op.capacity_bytes > 0
        True
    """

    def __init__(self, num_requests: int, beam_width: int, max_steps: int, *, num_k_heads: int, num_v_heads: int,
                 head_k_dim: int, head_v_dim: int, device="cuda", check_parents: bool = True):
        for name, x in (("num_requests", num_requests), ("beam_width", beam_width), ("max_steps", max_steps),
                        ("num_k_heads", num_k_heads), ("num_v_heads", num_v_heads)):
            if not isinstance(x, int) or x < 1:
                raise ValueError(f"OneLA: {name} must be a positive int, got {x!r}")
        if num_v_heads % num_k_heads:
            raise ValueError(f"OneLA: num_v_heads={num_v_heads} is not a multiple of num_k_heads={num_k_heads}")
        geometry = Geometry(num_k_heads, num_v_heads, head_k_dim, head_v_dim)
        self._stepper = OneLAStepper(geometry, num_requests, beam_width, max_steps, device,
                                     check_parents=bool(check_parents))
        self._t = None

    @property
    def capacity_bytes(self) -> int:
        """Recurrent-state bytes this op holds for a `max_steps` decode: S_ctx (and its bf16 copy where the
        warp-specialised kernel reads it), the record store and the ancestry index."""
        return self._stepper.persistent_bytes()

    @property
    def steps_done(self) -> int:
        """Steps taken since the last `reset` (0 right after it)."""
        if self._t is None:
            raise RuntimeError("OneLA: no decode in progress; call reset(s_ctx) first")
        return self._t

    def reset(self, s_ctx: torch.Tensor) -> None:
        """Begin a decode from the post-prefill state ``s_ctx`` ``[R, HV, V, K]`` fp32 contiguous (read, not
        copied, during the decode)."""
        self._stepper.reset(s_ctx)
        self._t = 0

    def step(self, q, k, v, g, beta, parents, out: torch.Tensor | None = None) -> torch.Tensor:
        """One decode step for every beam; returns o ``[R, W, HV, V]`` (``out`` if given)."""
        t = self.steps_done
        st = self._stepper
        if t >= st.T:
            raise RuntimeError(f"OneLA: max_steps={st.T} steps already taken since reset")
        if out is None:
            geo = st.geometry
            out = torch.empty(st.R, st.W, geo.hv, geo.v, dtype=q.dtype, device=q.device)
        st.step(t, q, k, v, g, beta, parents, out)
        self._t = t + 1
        return out
