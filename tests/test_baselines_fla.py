"""fla FullState (baselines/fla_fullstate.py): its mode mapping on CPU against a stand-in with fla's contract and
against fla's own kernel under Triton's interpreter; fla's kernel against FP32 FullState on the GPU.

The stand-in implements fused_recurrent_gated_delta_rule's documented contract for one token per sequence (read
initial_state[n], return a new final_state, gates as given) in plain torch: it tests this repository's gathers,
row mapping and byte accounting, not fla. fla's own kernel runs on CPU where Triton's interpreter can run it:
Triton 3.6's interpreter converts the kernel's runtime loop bound with int() of a one-element numpy array, which
numpy 2.4 refuses (fla_fullstate.interpreter_reason), so that test supplies this one conversion for the length
of the test; everything else, fla's kernel included, runs as shipped.
"""
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from artifact.measure import check_and_time, check_and_time_steps
from artifact.paths import UnavailablePath, get_path
from artifact.cost import FullState
from artifact.reference import fullstate_decode
from artifact.gdn import l2norm
from artifact.workload import LINEAGES, Geometry, Shape, make_workload
from baselines import fla_fullstate as fla

REPO = Path(__file__).resolve().parent.parent
NAMES = ["fla_fullstate", "fla_fullstate_paper"]


def _has_fla() -> bool:
    try:
        fla.kernel()
    except ImportError:
        return False
    return True


def fake_fla_fused_recurrent(q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False,
                             use_qk_l2norm_in_kernel=False, state_v_first=False, **kw):
    """fla's contract for one token per sequence: read initial_state[n] ([N, HV, V, K] when state_v_first), write
    every final state into a new tensor; g log-space and beta post-sigmoid as given; value head hv reads key head
    hv // (HV / H)."""
    assert use_qk_l2norm_in_kernel and state_v_first and output_final_state and q.shape[1] == 1
    assert not kw, kw
    assert initial_state.shape[0] == q.shape[0] and initial_state.dtype == torch.float32
    grp = v.shape[2] // q.shape[2]
    qh = (l2norm(q[:, 0].float()) * scale).repeat_interleave(grp, 1)
    kh = l2norm(k[:, 0].float()).repeat_interleave(grp, 1)
    S = initial_state * torch.exp(g[:, 0])[..., None, None]
    delta = beta[:, 0, :, None] * (v[:, 0].float() - torch.einsum("nhvk,nhk->nhv", S, kh))
    S = S + delta[..., None] * kh[:, :, None, :]
    o = torch.einsum("nhvk,nhk->nhv", S, qh)
    return o[:, None].to(v.dtype), S


@pytest.fixture
def interpreter_int_conversion(monkeypatch):
    """Supply the one conversion Triton 3.6's interpreter gets wrong under numpy >= 2.4 (a one-element array to
    int, the kernel's runtime loop bound), for this test only; fla's kernel itself runs unmodified."""
    import triton.runtime.interpreter as interp
    patch_tensor = interp._patch_lang_tensor

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    monkeypatch.setattr(interp, "_patch_lang_tensor", patched)
    monkeypatch.setattr(fla, "interpreter_reason", lambda: None)


@pytest.mark.parametrize("name", NAMES)
def test_adapter_module_imports_and_names_itself(name):
    path = get_path(name)
    assert not isinstance(path, UnavailablePath), path.supports(None, None, "cpu")
    assert path.name == name and path.paper == name.endswith("_paper")


def test_missing_fla_is_a_named_reason():
    """Without fla installed, supports() names the package to install (fresh interpreter, fla import blocked)."""
    code = textwrap.dedent("""
        import sys
        sys.modules["fla"] = None          # what an interpreter without fla-core sees
        from artifact.paths import get_path
        from artifact.workload import Geometry, Shape
        for name in %r:
            print(name, "::", get_path(name).supports(Geometry(16, 16, 128, 128), Shape(2, 6, 3), "cuda"))
        """ % NAMES)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert "fla.ops.gated_delta_rule cannot be imported" in line and "fla-core==0.6.0" in line, line


def test_cpu_without_interpreter_is_a_named_reason(monkeypatch):
    if not _has_fla():
        pytest.skip("fla-core is not installed")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    why = get_path("fla_fullstate").supports(Geometry(2, 2, 16, 8), Shape(2, 5, 2), "cpu")
    assert why and "CUDA device" in why, why


def test_interpreter_reason_is_true(monkeypatch):
    """The CPU promise: where interpreter_reason() names the numpy conversion, fla's kernel really fails under
    the interpreter; where it returns None, the kernel runs. Either way supports() says the same."""
    if not _has_fla():
        pytest.skip("fla-core is not installed")
    if torch.cuda.is_available():
        pytest.skip("fla's kernels are compiled for the GPU on this host, not interpreted")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    geo, shape = Geometry(1, 2, 16, 8), Shape(1, 2, 1)
    why = fla.interpreter_reason()
    assert get_path("fla_fullstate").supports(geo, shape, "cpu") == why
    wl = make_workload(geo, 1, 2, 1, device="cpu", prompt_len=2)
    path = get_path("fla_fullstate")
    path.prepare(wl)
    if why is None:
        path.run(wl)
        return
    assert "numpy" in why and "tl.range(0, T)" in why
    with pytest.raises(Exception, match="0-dimensional"):
        path.run(wl)


def test_launch_grid_limit_is_a_named_reason():
    why = get_path("fla_fullstate").supports(Geometry(16, 64, 128, 128), Shape(4096, 4096, 2), "cpu")
    assert why and "not natively supported" in why and str(fla.GRID_MAX) in why, why


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lineage", LINEAGES)
@pytest.mark.parametrize("geo", [Geometry(2, 2, 16, 8), Geometry(1, 3, 8, 16)])
def test_mode_mapping_against_kernel_contract(monkeypatch, name, lineage, geo):
    """Both modes gather each beam's parent state (t = 0: its request's s_ctx) into the kernel's initial_state and
    keep the kernel's output for the next step; a wrong parent shows in the outputs."""
    calls = []

    def spy(*args, **kw):
        calls.append(kw["initial_state"])
        return fake_fla_fused_recurrent(*args, **kw)

    monkeypatch.setattr(fla, "kernel", lambda: spy)
    R, W, T = 2, 5, 4
    wl = make_workload(geo, R, W, T, lineage=lineage, device="cpu", prompt_len=6)
    wl.g.mul_(0.02)   # long-memory heads, so a wrong parent state shows in the outputs
    ref = fullstate_decode(wl)
    tol = float(ref.abs().max()) * 2.0 ** -8     # bf16 outputs
    path = get_path(name)
    res = check_and_time(path, wl, ref, tolerance=tol, time_it=False)
    assert res.status == "ok", res.reason
    st, sb, N = path.stepper, geo.state_bytes, R * W
    assert len(calls) == T and all(c is st.work for c in calls)            # one preallocated gather buffer
    assert st.state.shape == (N, geo.hv, geo.v, geo.k)                     # the kernel's last output, kept
    assert res.written_bytes == 2 * T * N * sb                             # gather + kernel, every step
    if path.paper:
        assert res.persistent_bytes == N * sb and path.workspace_bytes() == N * sb
    else:
        assert res.persistent_bytes == 2 * N * sb and path.workspace_bytes() == 0
    if lineage == "beam":
        wl2 = make_workload(geo, R, W, T, lineage="reversed", device="cpu", prompt_len=6)
        wl2.g.copy_(wl.g)
        wl2.parents.copy_(wl.parents.flip(-1))
        assert check_and_time(get_path(name), wl2, ref, tolerance=tol, time_it=False).status == "failed"


def test_modes_share_one_cost(monkeypatch):
    """fla's kernel takes no state index: both modes gather once per step, t = 0 included (SGLang's index-mode
    cost), and differ only in how the gather buffer is counted."""
    wl = make_workload("qwen3_5_0_8b", 2, 4, 3, device="cpu", prompt_len=0)
    index, paper = get_path("fla_fullstate").cost(wl), get_path("fla_fullstate_paper").cost(wl)
    assert index == paper == FullState(first_copies=1, copies=1).cost(wl)
    assert index["compulsory_bytes"] > FullState().cost(wl)["compulsory_bytes"]


@pytest.mark.parametrize("name", NAMES)
def test_step_before_reset_and_tail_refused(monkeypatch, name):
    monkeypatch.setattr(fla, "kernel", lambda: fake_fla_fused_recurrent)
    wl = make_workload(Geometry(2, 2, 16, 8), 2, 3, 2, device="cpu", prompt_len=4)
    path = get_path(name)
    path.prepare(wl)
    with pytest.raises(RuntimeError, match="before reset"):
        path.stepper.step(0, wl.q[0], wl.k[0], wl.v[0], wl.g[0], wl.beta[0], wl.parents[0], path.out[0])
    with pytest.raises(ValueError, match="prompt tail"):
        path.stepper.reset(wl.s_ctx, tail={})


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lineage", ["beam", "reversed"])
def test_fla_kernel_under_interpreter(interpreter_int_conversion, monkeypatch, name, lineage):
    """fla's own kernel on CPU (Triton's interpreter, the one conversion supplied): the adapter matches FP32
    FullState at the run's gate, on a GQA geometry with V != K, step by step and as one decode."""
    if not _has_fla():
        pytest.skip("fla-core is not installed")
    if torch.cuda.is_available():
        pytest.skip("the GPU tests run fla's compiled kernel")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    geo = Geometry(1, 2, 16, 8)
    wl = make_workload(geo, 2, 3, 3, lineage=lineage, device="cpu", prompt_len=6)
    path = get_path(name)
    assert path.supports(geo, wl.shape, "cpu") is None
    ref = fullstate_decode(wl)
    res = check_and_time(path, wl, ref, time_it=False)
    assert res.status == "ok", res.reason
    steps = check_and_time_steps(get_path(name), wl, ref, time_it=False)
    assert steps.status == "ok", steps.reason


# ---------------------------------------------------------------- GPU: fla's compiled kernel


GPU_GEOMETRIES = [Geometry(16, 16, 128, 128), Geometry(16, 64, 128, 128), Geometry(4, 16, 128, 256),
                  Geometry(6, 6, 256, 512)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("geo", GPU_GEOMETRIES, ids=lambda g: f"{g.hk}-{g.hv}-{g.k}-{g.v}")
@pytest.mark.parametrize("lineage", LINEAGES)
def test_fla_kernel_matches_reference(name, geo, lineage):
    """The whole decode captured in one CUDA graph (fla allocates its output inside the capture) against FP32
    FullState at the run's gate."""
    wl = make_workload(geo, 2, 6, 3, lineage=lineage, device="cuda", prompt_len=256)
    path = get_path(name)
    why = path.supports(geo, wl.shape, wl.device)
    assert why is None, why
    res = check_and_time(path, wl, fullstate_decode(wl), time_it=False)
    print(f"{name} {geo} {lineage}: {res.status} err={res.max_abs_err:.3e} persistent={res.persistent_bytes}")
    assert res.status == "ok", res.reason
    assert res.persistent_bytes > 0 and res.written_bytes > 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_fla_per_step_graphs_match_reference(name):
    """One CUDA graph per step in one pool (the beam-scaling suite's timer): each step's graph reads the output
    the previous step's graph allocated."""
    wl = make_workload("qwen3_5_0_8b", 4, 64, 6, device="cuda", prompt_len=256)
    res = check_and_time_steps(get_path(name), wl, fullstate_decode(wl), repeats=3)
    assert res.status == "ok", res.reason
    assert len(res.steps) == 6


def test_gpu_check_script_names_registered_paths_and_suites():
    """tools/gpu_fla_check.sh (the H200 commands for fla's tests and rows) parses and names what exists."""
    import re
    from artifact.paths import PATHS
    script = REPO / "tools" / "gpu_fla_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    (paths,) = re.findall(r"path=\[([^\]]+)\]", text)
    assert paths.split(",") == NAMES and set(NAMES) <= set(PATHS)
    suites = set(re.findall(r"\b(recurrent_path|operator|traffic|beam_scaling)\b", text))
    assert suites == {"recurrent_path", "operator", "traffic", "beam_scaling"}
    for s in suites:
        assert (REPO / "sweeps" / "conf" / "suite" / f"{s}.yaml").is_file()
    assert "tests/test_baselines_fla.py" in text and "-m gpu" in text
