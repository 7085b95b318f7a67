"""What the framework adapters share: the device check, gate conversion, slot-pool helpers. The grid and
free-memory checks are artifact.limits's, the cost counts artifact.cost's."""
from __future__ import annotations

import os

import torch

# Both frameworks' fla kernels bind `exp = tl.exp` at module level (fla/op.py) and call the alias inside
# @triton.jit code; Triton 3.6's CPU interpreter only patches `tl.*` looked up at run time, so the call
# fails ("_semantic argument must be provided outside of JIT functions"). Checked under TRITON_INTERPRET=1.
FLA_ALIAS_CPU_REASON = ("{fw}'s fla kernels call `exp`, a module-level alias of tl.exp, which Triton's CPU "
                        "interpreter cannot execute; this path is tested on the GPU")


def device_reason(device, framework: str, cpu_reason: str | None = None) -> str | None:
    """None on a CUDA device; on a CPU, why a framework's Triton kernel cannot run here (`cpu_reason` when
    the framework's code itself rules the interpreter out)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return None
    if dev.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        return cpu_reason
    return (f"{framework}'s Triton kernels need a CUDA device (got {dev}; on a CPU they can run only under "
            f"TRITON_INTERPRET=1 where the framework allows it)")


def gates_to_logits(g: torch.Tensor, beta: torch.Tensor, a_out: torch.Tensor, b_out: torch.Tensor) -> None:
    """Raw gate inputs for kernels that form the gates themselves (g = -exp(A_log)·softplus(a + dt_bias),
    beta = sigmoid(b)): with A_log = dt_bias = 0, a = log(expm1(-g)) and b = logit(beta) reproduce the
    workload's g and beta to fp32 rounding. Elementwise, [N, HV] per step: the model's projection would
    emit a and b directly, so this stands in for no framework work.

    As a = log(-expm1(g)) - g (the same value): the direct form's expm1(-g) overflows fp32 for g < -88.7 (a
    strong-decay head, A near 16, meeting a large gate input), which makes a = +inf and turns the chunk
    (prefill) kernels' within-chunk gate differences -inf - (-inf) into NaN, an infinite error in the ReplaySSM
    paths. A model's projection emits a finite a ~ -g there, as this does. In place, in fp32: four elementwise
    kernels per step inside the baselines' timed graphs, no temporaries. (The FullState kernels would not
    notice the direct form: exp(-inf) = 0 differs from exp(-89) by 1e-39.)"""
    torch.expm1(g, out=a_out)
    a_out.neg_().log_().sub_(g)
    torch.logit(beta, out=b_out)


def slot_pool_written_bytes(st) -> int:
    """State bytes a slot-pool FullState stepper (vLLM's and FlashInfer's layout: context slots, then beam slots)
    writes over a T-step decode: the context copy at reset (R states), the kernel's R·W states per step and, in
    paper mode, the reorder's gather into the workspace per step t >= 1."""
    one, N = st.geometry.state_bytes, st.R * st.W
    copies = st.T - 1 if st.paper else 0
    return st.R * one + (st.T + copies) * N * one


def slot_pool_with_workspace(st, n_slots: int, n_work: int, geometry) -> None:
    """One fp32 slot tensor for a kernel that takes a single state tensor with separate read and write slot
    indices (vLLM's, FlashInfer's): `n_slots` persistent slots, then `n_work` workspace rows (st.work, a view)
    that the paper mode's reorder gathers the parents' states into and the kernel reads. `st.slots` is the
    persistent part, the gather's source: its memory does not overlap the workspace's."""
    g = geometry
    st.pool = torch.zeros(n_slots + n_work, g.hv, g.v, g.k, dtype=torch.float32, device=st.device)
    st.slots = st.pool[:n_slots]
    st.ws0 = n_slots
    st.work = st.pool[n_slots:] if n_work else None


def reorder_beam_slots(st, parents: torch.Tensor) -> None:
    """The paper mode's explicit beam-state maintenance in a slot pool: the parents' states (pool rows
    parents + row_base64) gathered into the workspace rows, which the kernel then reads while it writes each
    child's own beam slot. Preallocated buffers only: graph-capturable."""
    torch.add(parents, st.row_base64, out=st.parent_rows)
    torch.index_select(st.slots, 0, st.parent_rows.view(-1), out=st.work)
