"""The full-model correctness gate: every GDN layer's stepper outputs of a finished decode against FP32 FullState.

A decode leaves each GDN layer's per-step inputs (q|k|v, g, beta) and outputs o in `BeamDecoder.gdn_io`, and its
lineage in the BeamResult. The reference re-runs the plain-torch per-beam FullState stepper (fp32, from the
full post-prompt S_ctx, with the same parents) on those inputs, layer by layer, and reports max |o - o_ref| --
the same quantity, against the same oracle, as the operator suite's max_abs_err (docs/design.md §5). A path whose
recurrent state followed the wrong parents, started from a stale or wrong prompt state, or whose captured graph
skipped a kernel (its outputs are poisoned with NaN before the checked replay) fails it.
"""
from __future__ import annotations

import math

import torch

from artifact.model.beam import BeamResult
from artifact.reference import TorchFullStateStepper, full_precision


@torch.no_grad()
def stepper_max_abs_err(decoder, result: BeamResult) -> float:
    """max over GDN layers, steps, beams and elements of |o_path - o_fp32_fullstate| (inf if any is not finite)."""
    geo = decoder.model.cfg.geometry
    R, W, T = decoder.R, decoder.W, decoder.T
    parents = result.parents.to(decoder.tree.parents.device)
    worst = 0.0
    with full_precision():
        for i, io in enumerate(decoder.gdn_io):
            ref = TorchFullStateStepper(geo, R, W, T, decoder.model.device, torch.float32)
            ref.reset(decoder.prompt["s_ctx"][i])
            out = torch.empty(R, W, geo.hv, geo.v, dtype=torch.float32, device=decoder.model.device)
            for t in range(T):
                q, k, v = decoder.split_qkv(io["mixed"][t])
                ref.step(t, q, k, v, io["g"][t], io["beta"][t], parents[t].to(torch.int32), out)
                d = (io["out"][t].double() - out.double()).abs()
                if not torch.isfinite(d).all():
                    return math.inf
                worst = max(worst, float(d.max()))
            del ref
    return worst


def poison(decoder) -> None:
    """Fill every stepper output slot and the hidden states with NaN (before a replay that must rewrite them)."""
    for io in decoder.gdn_io:
        io["out"].fill_(math.nan)
    decoder.hidden.fill_(math.nan)
