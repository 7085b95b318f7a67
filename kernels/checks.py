"""Input checks shared by our steppers (`onela`, `controlled_fullstate`): what they accept, checked before any
launch, since a kernel would read out of bounds instead of failing."""
from __future__ import annotations

import os

import torch

from artifact.paths import Stepper


# The dtypes q, k, v may have: the kernels load them as bf16 or fp32 and compute in fp32; the records they store
# are bf16. fp16 inputs are refused: no test checks them against the fp64 reference.
INPUT_DTYPES = (torch.bfloat16, torch.float32)


def _on(x: torch.Tensor, device: torch.device) -> bool:
    """x lies on `device`; "cuda" without an index stands for the current CUDA device (a CUDA tensor always
    carries its index)."""
    if x.device.type != device.type:
        return False
    if device.type != "cuda":
        return True
    return x.device.index == (torch.cuda.current_device() if device.index is None else device.index)


def check_devices(st: Stepper, **tensors) -> None:
    """Every tensor argument lies on the stepper's device; a kernel launch would otherwise fail inside Triton
    ("Pointer argument ... cannot be accessed from Triton (cpu tensor?)") without naming the argument."""
    for name, x in tensors.items():
        if not _on(x, st.device):
            raise ValueError(f"{name} is on {x.device}, the op on {st.device}: every tensor argument must be on "
                             f"the op's device")


def check_reset(st: Stepper, s_ctx, tail):
    """Our kernels start from the full post-prefill state: contiguous fp32 [R, HV, V, K], no prompt tail."""
    geo = st.geometry
    if tail is not None:
        raise ValueError("our kernels start from the full post-prefill state; a prompt tail is ReplaySSM-only")
    check_devices(st, s_ctx=s_ctx)
    if tuple(s_ctx.shape) != (st.R, geo.hv, geo.v, geo.k) or s_ctx.dtype != torch.float32 \
            or not s_ctx.is_contiguous():
        raise ValueError(f"s_ctx must be contiguous fp32 {(st.R, geo.hv, geo.v, geo.k)}, got {s_ctx.dtype} "
                         f"{tuple(s_ctx.shape)}")
    return s_ctx


def check_step(st: Stepper, t, q, k, v, g, beta, parents, out, check_parents: bool = True):
    """Reject bad input before launch (a kernel would read out of bounds instead of failing). The parents'
    range costs a host sync; `check_parents=False` leaves it to a caller that checked the same parents once
    for every layer of its decode call."""
    geo, R, W = st.geometry, st.R, st.W
    if not 0 <= t < st.T:
        raise ValueError(f"step t={t} out of range 0..{st.T - 1}")
    want = {"q": (q, (R, W, geo.hk, geo.k)), "k": (k, (R, W, geo.hk, geo.k)), "v": (v, (R, W, geo.hv, geo.v)),
            "g": (g, (R, W, geo.hv)), "beta": (beta, (R, W, geo.hv)), "parents": (parents, (R, W)),
            "out": (out, (R, W, geo.hv, geo.v))}
    for name, (x, shape) in want.items():
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {shape}")
    check_devices(st, q=q, k=k, v=v, g=g, beta=beta, parents=parents, out=out)
    if q.dtype != k.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in INPUT_DTYPES:
        raise ValueError(f"q, k, v have dtype {q.dtype}; the op takes {' or '.join(map(str, INPUT_DTYPES))}")
    if q.stride() != k.stride() or q.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("q and k must share strides with a contiguous last dim; v's last dim contiguous")
    for name, x in (("g", g), ("beta", beta)):
        if x.dtype != torch.float32 or not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous float32, got {x.dtype}")
    if parents.dtype != torch.int32 or not parents.is_contiguous():
        raise ValueError(f"parents must be contiguous int32, got {parents.dtype}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    if check_parents and not (q.device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        lo, hi = int(parents.min()), int(parents.max())   # a host sync: checked eagerly, not inside a graph
        if lo < 0 or hi >= W:
            raise ValueError(f"parents out of range: values in [{lo}, {hi}], must be in [0, {W - 1}]")


MAX_HEAD_DIM = 512


def _head_dim_ok(x: int) -> bool:
    return 16 <= x <= MAX_HEAD_DIM and x % 16 == 0


def kernel_supports(name: str, geometry, device) -> str | None:
    """Why our kernels (path `name`) cannot run this geometry on `device` (None: they can)."""
    dev = torch.device(device)
    if dev.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return f"{name}: Triton kernel needs a CUDA device or TRITON_INTERPRET=1 (device {dev})"
    if not _head_dim_ok(geometry.k):
        return f"{name}: K={geometry.k} unsupported (a multiple of 16 in 16..{MAX_HEAD_DIM})"
    if not _head_dim_ok(geometry.v):
        return f"{name}: V={geometry.v} unsupported (a multiple of 16 in 16..{MAX_HEAD_DIM})"
    return None
