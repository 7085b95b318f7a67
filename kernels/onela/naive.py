"""The naive reference of the OneLA op: every beam's full [V, K] state in plain PyTorch (fp64 by default)."""
from __future__ import annotations

import torch

from artifact.reference import TorchFullStateStepper
from artifact.workload import Geometry


def onela_naive(s_ctx, q, k, v, g, beta, parents, dtype=torch.float64) -> torch.Tensor:
    """What T calls of `OneLA.step` return, computed with one explicit state per beam, copied from its parent at
    every step. Inputs stacked over the steps: s_ctx [R, HV, V, K], q, k [T, R, W, HK, K], v [T, R, W, HV, V],
    g, beta [T, R, W, HV], parents [T, R, W]. Returns o [T, R, W, HV, V] in `dtype`."""
    T, R, W, HK, K = q.shape
    HV, V = v.shape[-2:]
    st = TorchFullStateStepper(Geometry(HK, HV, K, V), R, W, T, q.device, dtype=dtype)
    st.reset(s_ctx)
    out = torch.empty(T, R, W, HV, V, dtype=dtype, device=q.device)
    for t in range(T):
        st.step(t, q[t], k[t], v[t], g[t], beta[t], parents[t], out[t])
    return out
