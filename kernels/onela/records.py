"""Where a record lives: the row formula every OneLA kernel (Triton and Gluon) indexes the GTR store with.

`artifact.gtr.GtrStore` keeps each record tensor in memory as [T, R, H, W(, D)] -- one head's records of one
step contiguous, so the ancestral rows a beam tile gathers lie close together -- and exposes [T, R, W, H(, D)]
views. A record (step t, request r, head h, beam slot b) is row ((t * R + r) * H + h) * W + b of that memory:
alpha [.., HV] (fp32, one value per row), delta [.., HV, V] and k-hat [.., HK, K] (bf16, D values per row).
The ancestry table is int32 [R, W, T_CAP]: row r * W + b, column j holds the beam slot whose depth-j record
beam b replays (docs/design.md §1).
"""
import triton
import triton.language as tl  # noqa: F401 -- the CPU interpreter runs a jit function only where its module sees tl


@triton.jit
def record_row(t, r, h, b, R, H, W):
    """Row of record (step t, request r, head h, beam slot b) in a GtrStore tensor's memory."""
    return ((t * R + r) * H + h) * W + b
