"""Stepper misuse is refused, not answered with garbage: every stepper (our kernels, the plain-torch references)
takes reset, then steps 0, 1, ..., T-1, and writes into an `out` of the inputs' dtype or float32. A step before
reset, a skipped or repeated step, a step past T, or an int / wrong-shape `out` raises before anything runs
(these used to give NaN, 1e15 or zeros); a refused call leaves the decode where it was; a path's `run` (reset +
the T steps, what a CUDA graph captures) still matches the reference, twice in a row."""
from __future__ import annotations

import math

import pytest
import torch

from artifact.paths import get_path
from artifact.reference import TorchFullStateStepper, TorchReplayStepper, fullstate_decode
from artifact.workload import Geometry, make_workload
from kernels.fullstate import ControlledFullStateStepper
from kernels.onela import OneLAStepper

GEO, R, W, T = Geometry(2, 4, 16, 16), 2, 5, 3
STEPPERS = [OneLAStepper, ControlledFullStateStepper, TorchFullStateStepper, TorchReplayStepper]


@pytest.fixture(scope="module")
def wl():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    return make_workload(GEO, R, W, T, seed=3, device=dev, prompt_len=4)


def _step(st, wl, t, out):
    i = min(t, T - 1)             # the inputs of step i (a step past T reuses the last step's)
    return st.step(t, wl.q[i], wl.k[i], wl.v[i], wl.g[i], wl.beta[i], wl.parents[i], out)


@pytest.mark.parametrize("cls", STEPPERS, ids=lambda c: c.__name__)
def test_step_order_and_out_are_checked(cls, wl):
    st = cls(GEO, R, W, T, wl.device)
    out = torch.empty(R, W, GEO.hv, GEO.v, dtype=torch.float32, device=wl.device)
    name = cls.__name__
    with pytest.raises(RuntimeError, match=rf"{name}: step\(0\) before reset\(s_ctx\)"):
        _step(st, wl, 0, out)
    st.reset(wl.s_ctx)
    with pytest.raises(RuntimeError, match=r"step\(1\) out of order: the next step since reset is 0"):
        _step(st, wl, 1, out)                                                    # step 1 first
    with pytest.raises(ValueError, match=r"out has dtype torch.int32; this stepper writes"):
        _step(st, wl, 0, torch.zeros(R, W, GEO.hv, GEO.v, dtype=torch.int32, device=wl.device))
    with pytest.raises(ValueError, match=r"out has shape \(2, 5, 4, 8\), expected \(2, 5, 4, 16\)"):
        _step(st, wl, 0, out[..., :8])
    assert st.steps_done == 0                                                    # refused calls took no step
    _step(st, wl, 0, out)
    with pytest.raises(RuntimeError, match=r"step\(2\) out of order: the next step since reset is 1"):
        _step(st, wl, 2, out)                                                    # steps 0 then 2
    with pytest.raises(RuntimeError, match=r"step\(0\) out of order"):
        _step(st, wl, 0, out)                                                    # a step repeated
    _step(st, wl, 1, out)
    _step(st, wl, 2, out)
    with pytest.raises(RuntimeError, match=rf"step\(3\) after all T={T} steps since reset"):
        _step(st, wl, 3, out)
    st.reset(wl.s_ctx)                                                           # the next decode
    assert st.steps_done == 0
    _step(st, wl, 0, out)


@pytest.mark.parametrize("cls", STEPPERS, ids=lambda c: c.__name__)
def test_a_decode_after_refused_calls_matches_the_reference(cls, wl):
    """Refused calls change nothing: the decode that follows them equals FP32 FullState (within the
    interpreter's bf16 rounding for our kernels), and a failed reset leaves no decode in progress."""
    ref = fullstate_decode(wl)
    st = cls(GEO, R, W, T, wl.device)
    out = torch.full((T, R, W, GEO.hv, GEO.v), math.nan, device=wl.device)
    st.reset(wl.s_ctx)
    for t in range(T):
        with pytest.raises(RuntimeError):
            _step(st, wl, t + 1, out[t])
        _step(st, wl, t, out[t])
    err = float((out.double() - ref.double()).abs().max())
    assert err < 3e-2 * float(ref.abs().max()), err
    if cls in (OneLAStepper, ControlledFullStateStepper):
        with pytest.raises(ValueError, match="s_ctx must be"):
            st.reset(wl.s_ctx.double())
        with pytest.raises(RuntimeError, match="before reset"):
            _step(st, wl, 0, out[0])


@pytest.mark.parametrize("name", ["onela", "controlled_fullstate", "reference_fullstate", "reference_replay"])
def test_a_paths_run_is_reset_plus_the_steps_every_time(name, wl):
    """`run` (what the timer captures in a CUDA graph and replays) resets before its T steps, so running it
    again is a fresh decode, not a step past T."""
    path = get_path(name)
    path.prepare(wl)
    first = path.run(wl).clone()
    second = path.run(wl)
    assert torch.equal(first, second)
    assert path.stepper.steps_done == T
