"""The limits every path is held to, each defined once: the paper's error bound (every run's default gate, and the
bound the reported numbers count rows within), CUDA's launch-grid limit, and the free-memory check that makes a
cell too large for the GPU a recorded skip. Our kernels (kernels/), the framework adapters (baselines/), the
sweeps and the plots read them from here. torch is imported where a function needs it, so the plots read the
error bound without it.
"""
from __future__ import annotations

DEFAULT_TOLERANCE = 4.88e-4   # the paper's max |o - o_fp32| over its 405 shapes (paper §4.3; 2^-11 to 3 digits)

CUDA_GRID_YZ_MAX = 65535      # CUDA's limit on gridDim.y and gridDim.z (x: 2^31 - 1)


def grid_reason(n_programs: int, what: str) -> str | None:
    """A skip reason if `n_programs` exceed the launch grid's y / z extent, on which a framework's kernel puts
    `what` (our kernels name their own axes: kernels/checks.py)."""
    if n_programs > CUDA_GRID_YZ_MAX:
        return (f"not natively supported: {what} = {n_programs} > {CUDA_GRID_YZ_MAX}, the CUDA launch-grid limit "
                f"of the axis the framework puts it on")
    return None


def device_free_bytes(device) -> int:
    """Bytes a new allocation can get on `device` now: the driver's free memory plus the blocks PyTorch's
    caching allocator holds but no tensor uses (mem_get_info alone counts those as taken)."""
    import torch
    dev = torch.device(device)
    free, _ = torch.cuda.mem_get_info(dev)
    return int(free + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev))


def memory_reason(nbytes: int, device, what: str, share: float = 1.0) -> str | None:
    """A skip reason if `nbytes` of `what` exceed `share` of the device's free memory now (device_free_bytes);
    None off CUDA (nothing is reserved there)."""
    import torch
    if not 0 < share <= 1:
        raise ValueError(f"memory_reason: share={share!r} must be in (0, 1]")
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    free = device_free_bytes(dev)
    if nbytes <= share * free:
        return None
    limit = "" if share == 1 else f"{share:.0%} of "
    return (f"{what}: {nbytes / 2**30:.2f} GiB needed, more than {limit}the {free / 2**30:.2f} GiB of GPU memory "
            f"free")
