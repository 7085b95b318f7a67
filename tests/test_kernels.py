"""Our Triton kernels (onela, controlled_fullstate) against the exact references.

On a CPU host they run under the Triton interpreter on small shapes (CI); on the H200 the `gpu` tests run
the named geometries against the FP32 FullState gate at the paper's tolerance. The interpreter rounds bf16
more coarsely than the GPU (DESIGN §1), so CPU tolerances are separate from the GPU's.
"""
import math

import pytest
import torch

from artifact.measure import DEFAULT_TOLERANCE, check_and_time, max_abs_err
from artifact.paths import get_path
from artifact.reference import fullstate_decode, replay_decode
from artifact.workload import GEOMETRIES, LINEAGES, Geometry, make_workload
from kernels.fullstate import ControlledFullStateStepper
from kernels.onela import OneLAStepper

SMALL = [  # (geometry, R, W, T): W not a power of two, T = 1, HV = 4 HK, K != V
    (Geometry(2, 4, 16, 16), 2, 5, 3),
    (Geometry(1, 4, 32, 16), 1, 20, 4),
    (Geometry(2, 2, 16, 32), 2, 17, 1),
    (Geometry(2, 8, 16, 16), 1, 19, 6),
]
# fp32 outputs vs fp64 with bf16 GTRs: relative to max|o| (these tiny-K shapes have |o| ~ 0.3, not the 0.1 of
# K = 128); the interpreter's bf16 rounding is coarser than the GPU's (DESIGN §1), hence two bounds.
CPU_REL_TOL, GPU_REL_TOL = 8e-3, 4e-3   # tiny K: |delta| (k.q) is large, so bf16 records cost ~0.5%


def _run(stepper_cls, wl, out_dtype=torch.float32, *ctor_args):
    st = stepper_cls(wl.geometry, wl.R, wl.W, wl.T, wl.device, *ctor_args)   # ctor_args: e.g. a config
    out = torch.full((wl.T, wl.R, wl.W, wl.geometry.hv, wl.geometry.v), math.nan, dtype=out_dtype,
                     device=wl.device)
    st.reset(wl.s_ctx)
    for t in range(wl.T):
        st.step(t, wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t], out[t])
    return st, out


CASES = [(OneLAStepper, lineage, *shape) for lineage in LINEAGES for shape in SMALL] + [
    # the FullState kernel runs one program per beam and head: slow under the interpreter, so fewer cases
    (ControlledFullStateStepper, lineage, *SMALL[i]) for lineage, i in (("beam", 0), ("reversed", 1), ("beam", 2))]


@pytest.mark.parametrize("stepper_cls,lineage,geo,R,W,T", CASES)
def test_kernel_matches_fp64_reference(stepper_cls, lineage, geo, R, W, T, device):
    wl = make_workload(geo, R, W, T, lineage=lineage, seed=R * 31 + W, device=device, prompt_len=16)
    ref = fullstate_decode(wl, torch.float64)
    _, out = _run(stepper_cls, wl)
    assert torch.isfinite(out).all(), "an output element was never written (poisoned NaN survived)"
    err = (out.double() - ref).abs().max().item()
    tol = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref.abs().max().item()
    if stepper_cls is ControlledFullStateStepper:
        tol = 1e-5   # fp32 state, no bf16 records
    assert err <= tol, f"max abs err {err:.3e} > {tol:.1e}"


@pytest.mark.parametrize("bk,stages", [(16, 1), (16, 2)])
def test_onela_k_chunked_projection_is_the_same_math(bk, stages, device):
    """The main kernel's K-chunked projection (config BK < K, a tuning option) gives the one-tile outputs."""
    geo, R, W, T = SMALL[1]                                    # K = 32: two chunks of 16
    wl = make_workload(geo, R, W, T, lineage="beam", seed=5, device=device, prompt_len=16)
    outs = [_run(OneLAStepper, wl, torch.float32, cfg)[1] for cfg in (None, {"BK": bk, "k_stages": stages})]
    assert torch.isfinite(outs[1]).all()
    # the same bf16 products summed in another order; that can flip a bf16 record's rounding (~1e-5 of |o|)
    assert (outs[0] - outs[1]).abs().max().item() <= 2e-4 * outs[0].abs().max().item()


def test_onela_s_lo_drops_the_lo_plane_from_the_named_projections(device):
    """s_lo "q" projects u_k against S_ctx rounded to bf16, "none" both projections: each moves the outputs off
    the two-plane ("qk") ones and off each other -- the key is live -- and stays within the fp64 reference's
    bound. The K > 128 default is "q", K <= 128's "none" (kernels/NOTES.md, stops 19 and 20)."""
    from kernels.onela import launch_config
    assert launch_config(128, 128, 512)["s_lo"] == "none" and launch_config(256, 256, 512)["s_lo"] == "q"
    geo, R, W, T = SMALL[1]
    wl = make_workload(geo, R, W, T, lineage="beam", seed=9, device=device, prompt_len=16)
    ref = fullstate_decode(wl, torch.float64)
    tol = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref.abs().max().item()
    outs = {lo: _run(OneLAStepper, wl, torch.float32, {"s_lo": lo})[1] for lo in ("qk", "q", "none")}
    for lo, out in outs.items():
        assert torch.isfinite(out).all(), lo
        assert (out.double() - ref).abs().max().item() <= tol, lo
    assert not torch.equal(outs["q"], outs["qk"]) and not torch.equal(outs["none"], outs["q"])
    # fp32 inputs (q, k split into bf16 hi + residual too) honour s_lo the same way
    wl32 = make_workload(geo, R, W, T, lineage="beam", seed=9, device=device, prompt_len=16, dtype=torch.float32)
    ref32 = fullstate_decode(wl32, torch.float64)
    tol32 = (GPU_REL_TOL if device == "cuda" else CPU_REL_TOL) * ref32.abs().max().item()
    for lo in ("q", "none"):
        out = _run(OneLAStepper, wl32, torch.float32, {"s_lo": lo})[1]
        assert (out.double() - ref32).abs().max().item() <= tol32, lo


@pytest.mark.parametrize("cfg", [{"beam_iters": 2}, {"beam_iters": 3, "loop_max_step": 0},
                                 {"beam_iters": 2, "loop_stages": 2, "fused": True},
                                 {"beam_iters": 2, "replay_stages": 2}, {"replay_stages": 1}])
def test_onela_beam_loop_gives_the_one_tile_per_program_outputs(cfg, device):
    """A program running several beam tiles (config beam_iters, the S tile split once for all of them; up to
    step loop_max_step) writes the same outputs and ancestry rows, partial last tiles and idle iterations
    included (W=20 or 19 at BB=16); so does the replay as a loop over depths (replay_stages)."""
    for geo, R, W, T in (SMALL[1], SMALL[3]):
        wl = make_workload(geo, R, W, T, lineage="beam", seed=R * 7 + W, device=device, prompt_len=16)
        (st0, out0), (st1, out1) = (_run(OneLAStepper, wl, torch.float32, {"BB": 16, "beam_iters": 1, **c})
                                    for c in ({}, cfg))
        assert torch.isfinite(out1).all(), "an output element was never written (poisoned NaN survived)"
        assert (out1 - out0).abs().max().item() <= 1e-5 * out0.abs().max().item(), (geo, R, W, T)
        assert torch.equal(st1.anc[(T - 1) % 2], st0.anc[(T - 1) % 2])


def test_onela_launch_config_beam_loop_rule():
    """v7's rule (kernels/NOTES.md): the most beam tiles per program, up to 8, that keep ~2 programs per SM,
    only where the S tile is one tile (K <= 128), at every step since v8; small grids keep one tile per
    program."""
    from kernels.onela import launch_config
    iters = {(R, W): launch_config(128, 128, W, R, 16, n_sm=132)["beam_iters"]
             for R in (4, 8, 16) for W in (128, 256, 512)}
    assert iters == {(4, 128): 1, (4, 256): 1, (4, 512): 2, (8, 128): 1, (8, 256): 2, (8, 512): 4,
                     (16, 128): 2, (16, 256): 4, (16, 512): 8}
    assert launch_config(256, 256, 512, 16, 16)["beam_iters"] == 1           # K-chunked: no S tile to keep
    # many value heads: the grid allows 8 tiles per program, but a (request, head) has only W / BB beam tiles
    assert launch_config(128, 128, 128, 16, 64)["beam_iters"] == 2
    assert launch_config(128, 128, 256, 16, 64)["beam_iters"] == 4
    assert launch_config(128, 128, 512, 4, 16, n_sm=264)["beam_iters"] == 1    # twice the SMs: no loop
    assert launch_config(128, 128, 512, 16, 16)["loop_max_step"] is None     # v8: the loop at every step
    # v8: PDL waits before the beam loop when there is one, after the one tile's projections otherwise
    assert launch_config(128, 128, 512, 4, 16)["pdl"] == 2 and launch_config(128, 128, 128, 4, 16)["pdl"] == 1
    assert launch_config(256, 256, 512, 16, 16)["pdl"] == 1
    # stop 18: K-chunked projections issue a chunk's q, k loads before its S load and split
    assert launch_config(256, 256, 512, 16, 16)["qk_first"] and not launch_config(128, 128, 512, 4, 16)["qk_first"]
    # stop 21: step 0 in one launch where the S tile spans K and a key head has at most 2 value heads
    assert launch_config(128, 128, 512, 4, 16)["fuse_step0"] and launch_config(128, 128, 512, 4, 32, G=2)["fuse_step0"]
    assert not launch_config(256, 256, 512, 16, 16)["fuse_step0"]
    assert not launch_config(128, 256, 512, 4, 16, G=4)["fuse_step0"]


@pytest.mark.parametrize("lineage", LINEAGES)
def test_onela_one_launch_kernel_gives_the_two_launch_outputs(lineage, device):
    """v6 (config fused: prep and main in one launch) writes the same outputs, GTRs and ancestry rows as the
    two-launch kernel on every small shape (HV = 4 HK, K != V, T = 1, partial beam tiles) and lineage."""
    for geo, R, W, T in SMALL:
        wl = make_workload(geo, R, W, T, lineage=lineage, seed=R * 7 + W, device=device, prompt_len=16)
        (st2, out2), (st1, out1) = (_run(OneLAStepper, wl, torch.float32, cfg) for cfg in (None, {"fused": True}))
        assert st1.coef is None and st2.coef is not None
        assert torch.isfinite(out1).all(), "an output element was never written (poisoned NaN survived)"
        assert (out1 - out2).abs().max().item() <= 1e-5 * out2.abs().max().item(), (geo, R, W, T)
        assert torch.equal(st1.anc[(T - 1) % 2], st2.anc[(T - 1) % 2])
        for a, b in zip(st1.store.tensors(), st2.store.tensors()):
            assert torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cfg", [{}, {"beam_iters": 2}, {"BV": 8}])
def test_onela_step0_in_one_launch_gives_the_two_launch_outputs(cfg, device):
    """Config fuse_step0 (the main kernel does step 0's key-axis work: norms, k-hat . q-hat, alpha, the k-hat_0
    and alpha_0 records; no prep launch at step 0) writes the two-launch kernel's outputs, GTRs and ancestry on
    every small shape (HV = 4 HK: only the group's first value head writes k-hat; T = 1), with a beam loop and
    with two V tiles (only the first V tile's program writes records). Launches: one kernel at step 0."""
    from kernels.onela import launch_config, step_launches
    for geo, R, W, T in SMALL:
        wl = make_workload(geo, R, W, T, lineage="beam", seed=R * 3 + W, device=device, prompt_len=16)
        (st0, out0), (st1, out1) = (_run(OneLAStepper, wl, torch.float32, {"BB": 16, **cfg, **f})
                                    for f in ({"fuse_step0": False}, {"fuse_step0": True}))
        assert torch.isfinite(out1).all(), "an output element was never written (poisoned NaN survived)"
        assert (out1 - out0).abs().max().item() <= 1e-5 * out0.abs().max().item(), (geo, R, W, T, cfg)
        assert torch.equal(st1.anc[(T - 1) % 2], st0.anc[(T - 1) % 2])
        for a, b in zip(st1.store.tensors(), st0.store.tensors()):
            assert torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-6), (geo, R, W, T, cfg)
    fused = {**launch_config(128, 128, 512, 4, 16), "fuse_step0": True}
    assert set(step_launches(fused, GEOMETRIES["qwen3_5_0_8b"], 4, 512, 0)) == {"main"}
    assert set(step_launches(fused, GEOMETRIES["qwen3_5_0_8b"], 4, 512, 1)) == {"prep", "main"}


@pytest.mark.parametrize("lineage", LINEAGES)
def test_onela_prep_alpha_tile_gives_the_depth_chain_coefficients(lineage, device):
    """Config prep_alpha_tile (every depth's ancestral alpha gathered as one tile before the suffix products)
    writes bit for bit the depth-by-depth chain's replay coefficients, outputs and ancestry -- the products are
    formed in the same order -- on every small shape (HV = 4 HK: G value heads per key head; T up to 6) and
    lineage, with the 16- and 32-beam prep tiles."""
    for geo, R, W, T in SMALL:
        wl = make_workload(geo, R, W, T, lineage=lineage, seed=R * 5 + W, device=device, prompt_len=16)
        for bbp in (16, 32):
            (st0, out0), (st1, out1) = (_run(OneLAStepper, wl, torch.float32, {"BB_PREP": bbp, **c})
                                        for c in ({"prep_alpha_tile": False}, {"prep_alpha_tile": True}))
            assert torch.isfinite(out1).all(), "an output element was never written (poisoned NaN survived)"
            n = 3 + 2 * (T - 1)       # the last step's columns: P inv_q, P inv_k, k-hat . q-hat, two per depth
            assert torch.equal(st1.coef[:n], st0.coef[:n]), (geo, R, W, T, bbp)
            assert torch.equal(out1, out0), (geo, R, W, T, bbp)
            assert torch.equal(st1.anc[(T - 1) % 2], st0.anc[(T - 1) % 2])


def test_onela_records_match_replay_and_never_move(device):
    """The kernel's GTRs equal the reference replay's (to bf16), and a later step never rewrites an earlier one."""
    wl = make_workload(Geometry(2, 4, 16, 16), 2, 9, 4, lineage="beam", seed=7, device=device, prompt_len=16)
    st = OneLAStepper(wl.geometry, wl.R, wl.W, wl.T, wl.device)
    out = torch.empty(wl.R, wl.W, 4, 16, dtype=torch.float32, device=device)
    st.reset(wl.s_ctx)
    snaps = []
    for t in range(wl.T):
        st.step(t, wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t], out)
        for j, snap in enumerate(snaps):
            assert all(torch.equal(x[j], s) for x, s in zip(st.store.tensors(), snap)), f"step {j} record moved"
        snaps.append(tuple(x[t].clone() for x in st.store.tensors()))
    from artifact.gtr import GtrStore
    ref_store = GtrStore(wl.geometry, wl.R, wl.W, wl.T, device=device, record_dtype=torch.float64,
                         alpha_dtype=torch.float64)
    replay_decode(wl, store=ref_store)
    assert torch.allclose(st.store.alpha.double(), ref_store.alpha, rtol=1e-6, atol=1e-7)
    assert torch.allclose(st.store.khat.double(), ref_store.khat, atol=8e-3)
    assert torch.allclose(st.store.delta.double(), ref_store.delta, atol=4e-3, rtol=1e-2)


def test_paths_pass_the_gate_on_cpu(device):
    """The registered paths through the one gate the sweep uses (bf16 outputs like the frameworks')."""
    wl = make_workload(Geometry(2, 4, 16, 16), 2, 6, 3, seed=3, device=device, prompt_len=16)
    ref = fullstate_decode(wl)
    for name in ("onela", "controlled_fullstate"):
        # bf16 outputs at |o| ~ 0.3 (tiny K): half a bf16 ulp is 1e-3, plus the records' rounding
        res = check_and_time(get_path(name), wl, ref, tolerance=0.015 * ref.abs().max().item(), time_it=False)
        assert res.status == "ok", (name, res.reason)
        assert res.persistent_bytes > 0 and res.written_bytes > 0


def test_paper_capacity_and_writes_from_real_tensors():
    """Fig 8b: at R=4 W=512 Qwen geometry OneLA keeps 36.3 / 101 MiB and writes 32.3 / 96.8 MiB (O=3 / O=7)."""
    geo = GEOMETRIES["qwen3_5_0_8b"]
    mib = 2 ** 20
    for T, persistent, written in ((2, 36.3, 32.3), (6, 101, 96.8)):
        st = OneLAStepper(geo, 4, 512, T, "cpu" if not torch.cuda.is_available() else "cuda")
        # the paper prints 3 significant digits
        assert math.isclose(st.persistent_bytes() / mib, persistent, rel_tol=0.003), st.persistent_bytes() / mib
        assert math.isclose(st.written_bytes() / mib, written, rel_tol=0.003), st.written_bytes() / mib
        # the ws kernel (the K = 128 default on Hopper) reads S_ctx's bf16 rounding, made at reset where it can
        # run: counted on top (2 MiB); elsewhere (this CPU host) no copy is made
        assert st.config["ws"] == "all"
        before = st.persistent_bytes()
        st.reset(torch.zeros(4, geo.hv, geo.v, geo.k, device=st.device))
        hopper = st.device.type == "cuda" and torch.cuda.get_device_capability(st.device)[0] == 9
        assert st.persistent_bytes() - before == (2 * mib if hopper else 0) == \
            (4 * geo.hv * geo.v * geo.k * 2 if hopper else 0)
        fs = ControlledFullStateStepper.__new__(ControlledFullStateStepper)   # accounting only: no 4 GiB pools
        fs.geometry, fs.R, fs.W, fs.T = geo, 4, 512, T
        assert fs.written_bytes() / st.written_bytes() > 100


def test_bad_input_is_rejected_before_launch(device):
    wl = make_workload(Geometry(2, 4, 16, 16), 2, 5, 2, seed=1, device=device, prompt_len=4)
    with pytest.raises(ValueError, match="K=48 unsupported"):
        OneLAStepper(Geometry(2, 4, 48, 16), 2, 5, 2, device)
    with pytest.raises(ValueError, match="V=24 unsupported"):
        ControlledFullStateStepper(Geometry(2, 4, 16, 24), 2, 5, 2, device)
    assert "K=48" in get_path("onela").supports(Geometry(2, 4, 48, 16), wl.shape, device)
    with pytest.raises(ValueError, match="BV=32, BK=16 must divide V=16"):
        OneLAStepper(wl.geometry, 2, 5, 2, device, {"BV": 32})
    with pytest.raises(ValueError, match=r"unknown launch config key\(s\) \['bv'\]"):
        OneLAStepper(wl.geometry, 2, 5, 2, device, {"bv": 32})
    with pytest.raises(ValueError, match="s_lo='fp8' unknown"):
        OneLAStepper(wl.geometry, 2, 5, 2, device, {"s_lo": "fp8"})
    st = OneLAStepper(wl.geometry, 2, 5, 2, device)
    st.reset(wl.s_ctx)
    out = torch.empty(2, 5, 4, 16, device=device)
    with pytest.raises(ValueError, match="q, k, v must share one dtype"):
        st.step(0, wl.q[0].float(), wl.k[0], wl.v[0], wl.g[0], wl.beta[0], wl.parents[0], out)
    with pytest.raises(ValueError, match=r"v has shape \(2, 5, 4, 8\)"):
        st.step(0, wl.q[0], wl.k[0], wl.v[0][..., :8], wl.g[0], wl.beta[0], wl.parents[0], out)
    bad = wl.parents[1].clone()
    bad[1, 2] = 5
    with pytest.raises(ValueError, match=r"parents out of range: values in \[0, 5\]"):
        st.step(1, wl.q[1], wl.k[1], wl.v[1], wl.g[1], wl.beta[1], bad, out)
    with pytest.raises(ValueError, match="step t=2 out of range"):
        st.step(2, wl.q[1], wl.k[1], wl.v[1], wl.g[1], wl.beta[1], wl.parents[1], out)
    with pytest.raises(ValueError, match="s_ctx must be"):
        st.reset(wl.s_ctx.double())


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_gpu_every_geometry_within_paper_tolerance(name):
    """On the H200, both kernels pass the FP32 FullState gate at 4.88e-4 on every geometry and lineage."""
    for lineage in LINEAGES:
        wl = make_workload(name, 2, 37, 5, lineage=lineage, seed=11, device="cuda")
        ref = fullstate_decode(wl)
        for path in ("onela", "controlled_fullstate"):
            res = check_and_time(get_path(path), wl, ref, tolerance=DEFAULT_TOLERANCE, time_it=False)
            assert res.status == "ok", (path, lineage, res.reason)


def test_bench_rejects_a_negative_idle_and_reads_no_clock_without_a_gpu(capsys):
    """`kernels.bench --idle S` (the first-cell check) names a bad value before anything runs; the SM clock it
    records per row is None, not an error, where NVML or a GPU is missing."""
    from kernels.bench import main, sm_clock_mhz
    with pytest.raises(SystemExit) as e:
        main(["--idle", "-1"])
    assert e.value.code == 2 and "--idle must be >= 0 seconds, got -1.0" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert sm_clock_mhz() is None


def test_bench_labels_tell_every_config_apart():
    """kernels.bench names each row by its config: every tuned config, and a key the label has no short form for,
    gets its own label (stop 27: two configs of a --config A/B both printed 'onela[]')."""
    from kernels.bench import _label, tune_configs
    for K in (128, 256):
        labels = [_label(cfg, K) for cfg in tune_configs(K)]
        assert len(set(labels)) == len(labels), labels
    assert _label({}, 128) == "" and _label({"some_new_key": "x"}, 128) == "some_new_key_x"
    assert _label({"ws": "main", "num_stages": 2}, 128) == "ws_main,num_stages_2"


@pytest.mark.parametrize("K,V", [(128, 128), (256, 64)])
def test_every_tune_config_gives_the_default_outputs(K, V, device):
    """Each launch configuration `kernels.bench --tune` times (tiles, warps, prep tile, K-chunks, the one-launch
    kernel; per K) runs and gives the default config's outputs, so a tuning run measures the same math (W=20:
    a partial tile). The s_lo configs round S_ctx differently by design and are checked on their own."""
    from kernels.bench import tune_configs
    wl = make_workload(Geometry(1, 1, K, V), 1, 20, 2, lineage="beam", seed=3, device=device, prompt_len=8)
    base = _run(OneLAStepper, wl, torch.float32, None)[1]
    for cfg in tune_configs(K):
        if "s_lo" in cfg:       # other rounding of S by design: test_onela_s_lo_drops_the_lo_plane_...
            continue
        out = _run(OneLAStepper, wl, torch.float32, cfg)[1]
        assert torch.isfinite(out).all(), cfg
        assert (out - base).abs().max().item() <= 2e-4 * base.abs().max().item(), cfg


def _graph_replays(cfg, wl, n):
    """The `onela` path under launch config `cfg`: its T-step decode captured in one CUDA graph and replayed n
    times into a NaN-poisoned output; returns (stepper, [output of each replay])."""
    from artifact.measure import _capture
    from kernels.bench import _ConfiguredOneLA
    path = _ConfiguredOneLA(cfg)
    path.prepare(wl)
    graph, out = _capture(path, wl)
    replays = []
    for _ in range(n):
        out.fill_(math.nan)
        graph.replay()
        replays.append(out.clone())
    torch.cuda.synchronize()
    return path.stepper, replays


@pytest.mark.gpu
@pytest.mark.parametrize("ws", ["off", "default"])
@pytest.mark.parametrize("R,W,T", [(4, 512, 6), (2, 37, 5)])
def test_gpu_pdl_launches_give_bit_identical_graph_replays(R, W, T, ws):
    """v8 (config pdl: each launch may start while the previous one finishes, its reads of this step's inputs
    before the grid-dependency wait and everything else after it) changes no result: a CUDA graph of the
    T-step decode, replayed many times, writes bit for bit the outputs, GTRs and ancestry of the plain
    launches -- a read moved above the wait that depends on the previous launch would show as a mismatch.
    For the Triton kernels (ws off) and the default, which at W=512 is the warp-specialised kernel (stop 23)."""
    wl = make_workload("qwen3_5_0_8b", R, W, T, lineage="beam", seed=R + W, device="cuda")
    results = []
    # 1: wait after the first projections, 2: before them; pdl_next_step False: the next step's prep not early
    for cfg in ({"pdl": 0}, {"pdl": 1}, {"pdl": 2}, {"pdl": 2, "pdl_next_step": False}):
        cfg = {**cfg, "ws": "off"} if ws == "off" else cfg
        results.append((cfg, *_graph_replays(cfg, wl, 8)))
    (_, st0, base), *pdl_runs = results
    for cfg, st1, replays in pdl_runs:
        for i, o in enumerate(replays + base):
            assert torch.equal(o, base[0]), f"{cfg}: replay {i} differs"
        assert torch.equal(st1.anc, st0.anc)
        for a, b in zip(st1.store.tensors(), st0.store.tensors()):
            assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("name,R,W,T", [("qwen3_5_0_8b", 4, 512, 6), ("qwen3_5_9b", 3, 192, 5),
                                        ("qwen3_5_397b", 2, 64, 4), ("kimi_linear", 1, 128, 6),
                                        ("gdn_small", 3, 192, 6), ("range_hk4_hv16", 2, 128, 5)])
def test_gpu_ws_kernel_matches_the_triton_kernels(name, R, W, T):
    """The warp-specialised Gluon kernel (config ws, kernels/onela_ws.py) in each mode -- after the prep kernel,
    the whole step, every step -- passes the FP32 FullState gate, writes the Triton kernels' ancestry exactly and
    their GTRs to within bf16 rounding (the one-launch modes form the norms and dots in another order), and its
    captured graph (PDL launches) replays bit for bit. The interpreter cannot run Gluon: this is its correctness
    test. R=4 W=512 gives programs several tiles across a head change; G = 2 and 4 share key heads; V = 256
    (gdn_small, range_hk4_hv16) runs each value head as two 128-column chunks (stop 30). A k-hat_t buffer of its
    own (config ws_kh_own_upto) writes the same bits as the shared one."""
    wl = make_workload(name, R, W, T, lineage="beam", seed=5, device="cuda")
    ref = fullstate_decode(wl)
    base, _ = _graph_replays({"ws": "off"}, wl, 1)      # the Triton kernels (ws is the default since stop 23)
    for mode in ("main", "step", "all"):    # "main" at every step (ws_step_upto -1; its default 1 is checked below)
        st, replays = _graph_replays({"ws": mode, "ws_step_upto": -1}, wl, 4)
        assert f"ws_{mode}" in st.kernel_info, (mode, st.kernel_info)
        assert max_abs_err(replays[0], ref) <= DEFAULT_TOLERANCE, mode
        for o in replays[1:]:
            assert torch.equal(o, replays[0]), mode
        assert torch.equal(st.anc, base.anc), mode
        for a, b in zip(st.store.tensors(), base.store.tensors()):
            a, b = a.float(), b.float()
            assert ((a - b).abs() <= 2 ** -6 * b.abs() + 1e-4 * b.abs().max()).all(), (mode, a.shape)
        # k-hat_t through a buffer of its own (ws_kh_own_upto, stop 28; "step" / "all" only; the default 1 uses
        # it at steps 0-1) changes when the stores are waited for, not what they write: never (-1) and at every
        # step (5) give the default's results bit for bit
        for upto in (-1, 5):
            st2, replays2 = _graph_replays({"ws": mode, "ws_step_upto": -1, "ws_kh_own_upto": upto}, wl, 2)
            assert all(torch.equal(o, replays[0]) for o in replays2), (mode, upto)
            assert torch.equal(st2.anc, st.anc) and all(
                torch.equal(a, b) for a, b in zip(st2.store.tensors(), st.store.tensors())), (mode, upto)
    # ws_step_upto (stop 30; where "main" is the default, G > 2): steps 0-1 in one launch pass the gate and are
    # "all"'s bit for bit (the same kernel on the same inputs); the later steps run "main" on those records
    if wl.geometry.group > 2:
        st3, replays3 = _graph_replays({"ws": "main", "ws_step_upto": 1}, wl, 2)
        assert max_abs_err(replays3[0], ref) <= DEFAULT_TOLERANCE and torch.equal(replays3[0], replays3[1])
        assert torch.equal(replays3[0][:2], replays[0][:2]) and torch.equal(st3.anc, st.anc)


def _as_conv_split(q, k, v):
    """q, k, v [R, W, H, D] as the model hands them over: views into one [R, W, HK*K + HK*K + HV*V] conv output."""
    mixed = torch.cat([q.flatten(-2), k.flatten(-2), v.flatten(-2)], dim=-1)
    qs, ks, vs = torch.split(mixed, [q[0, 0].numel(), k[0, 0].numel(), v[0, 0].numel()], dim=-1)
    return qs.unflatten(-1, q.shape[-2:]), ks.unflatten(-1, k.shape[-2:]), vs.unflatten(-1, v.shape[-2:])


def test_ws_even_grid_is_head_aligned_and_never_wider():
    """Config ws_even_upto (stop 29): at the steps it covers, the ws kernel's persistent grid splits the beam tiles
    into equal ranges of whole heads (or whole fractions of one), never more programs than one per SM or one per
    tile; elsewhere one program per SM. Only the grid changes, so a CPU test is enough here."""
    from kernels.onela import launch_config
    from kernels.onela_ws import _ws_programs, ws_launch_params
    for nt, nbt in [(512, 8), (2048, 8), (1024, 8), (4096, 8), (128, 2), (96, 3), (60, 1), (264, 8), (133, 1)]:
        plain, even = _ws_programs(nt, nbt, 132, False), _ws_programs(nt, nbt, 132, True)
        assert plain == min(nt, 132) and 1 <= even <= plain, (nt, nbt)
        per = nt // even
        assert nt % even == 0 and (per % nbt == 0 or nbt % per == 0), (nt, nbt, even)
    geo = GEOMETRIES["qwen3_5_0_8b"]
    for R, want in ((4, 128), (16, 128)):       # 512 / 2,048 tiles: 4 / 16 per program, not 132 x 3-4 / 15-16
        cfg = launch_config(geo.k, geo.v, 512, R, geo.hv, 132, geo.group)
        assert ws_launch_params(cfg, geo, R, 512, 1, "step", 132)[0] == (132,)
        for t in (0, 1, 5):
            grid = ws_launch_params({**cfg, "ws_even_upto": 1}, geo, R, 512, t, "step", 132)[0]
            assert grid == ((want,) if t <= 1 else (132,)), (R, t, grid)


def test_ws_step_upto_runs_the_shallow_steps_in_one_launch():
    """Config ws_step_upto (stop 30): where ws is "main" (G > 2: the prep kernel, then the ws kernel), steps <= it
    launch the one-launch kernel alone; the other steps, and every step at its default -1, keep both launches."""
    from kernels.onela import launch_config, step_launches
    geo = GEOMETRIES["qwen3_5_397b"]
    cfg = launch_config(geo.k, geo.v, 512, 4, geo.hv, 132, geo.group)
    assert cfg["ws"] == "main"
    for upto, one_launch in ((-1, ()), (1, (0, 1)), (5, range(6))):
        for t in range(6):
            launches = step_launches({**cfg, "ws_step_upto": upto}, geo, 4, 512, t, interpret=False, ws_ok=True)
            assert sorted(launches) == (["ws"] if t in one_launch else ["prep", "ws"]), (upto, t)
            assert launches["ws"][1]["FUSE"] == (t in one_launch), (upto, t)


def test_ws_takes_the_models_conv_split_and_rejects_other_layouts():
    """The warp-specialised kernel reads q, k, v as evenly spaced rows (TMA / cp.async), so the model's split of
    its conv output qualifies; rows it cannot address that way, unaligned ones or another dtype go to the Triton
    kernels with the reason named (layout only: this runs on CPU)."""
    from kernels.onela_ws import ws_layout_supports
    wl = make_workload("qwen3_5_0_8b", 2, 64, 2, lineage="beam", seed=0)
    q, k, v = wl.q[0], wl.k[0], wl.v[0]
    out = torch.empty(2, 64, 16, 128, dtype=torch.bfloat16)
    assert ws_layout_supports(64, q, k, v, out) is None
    qs, ks, vs = _as_conv_split(q, k, v)
    assert qs.stride(1) == 3 * 16 * 128 and ws_layout_supports(64, qs, ks, vs, out) is None
    wide = torch.zeros(2, 64, 16 * 128 + 1, dtype=torch.bfloat16)    # a view one element in: not 16-byte aligned
    shifted = wide[..., 1:].unflatten(-1, (16, 128))
    assert "k is not laid out" in ws_layout_supports(64, q, shifted, v, out)
    assert "v is not laid out" in ws_layout_supports(64, q, k, v.transpose(2, 3), out)
    out_t = torch.empty(2, 16, 64, 128, dtype=torch.bfloat16).transpose(1, 2)
    assert "out is not laid out" in ws_layout_supports(64, q, k, v, out_t)
    assert "q dtype torch.float32" in ws_layout_supports(64, q.float(), k, v, out)


@pytest.mark.gpu
def test_gpu_ws_kernel_reads_the_models_conv_split():
    """q, k, v as views into one conv output (the full model's layout) run the warp-specialised kernel and give
    bit for bit what contiguous copies give, within the FP32 FullState gate."""
    wl = make_workload("qwen3_5_0_8b", 4, 256, 4, lineage="beam", seed=3, device="cuda")
    ref = fullstate_decode(wl)
    outs = []
    for split in (False, True):
        st = OneLAStepper(wl.geometry, wl.R, wl.W, wl.T, "cuda")
        out = torch.full((wl.T, wl.R, wl.W, 16, 128), math.nan, dtype=torch.bfloat16, device="cuda")
        st.reset(wl.s_ctx)
        for t in range(wl.T):
            q, k, v = _as_conv_split(wl.q[t], wl.k[t], wl.v[t]) if split else (wl.q[t], wl.k[t], wl.v[t])
            st.step(t, q, k, v, wl.g[t], wl.beta[t], wl.parents[t], out[t])
        assert "ws_all" in st.kernel_info and "main" not in st.kernel_info, st.kernel_info
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert max_abs_err(outs[1], ref) <= DEFAULT_TOLERANCE


def test_inspect_compiles_hopper_kernels_without_a_gpu():
    """`kernels.inspect` compiles the launch's kernels for sm_90a on this host (ptxas ships with Triton) and
    reports registers / spills per step; at K = 256 the default (`qk_first`, since stop 18) issues each
    K-chunk's q, k and S loads (16 128-bit loads per thread) before the chunk's first fp32 -> bf16 convert,
    while v7's order (`qk_first` false) converts S before the q, k loads issue -- stop 17's K = 256 regression,
    17-20 % (kernels/NOTES.md)."""
    import os
    import subprocess
    import sys

    from kernels.inspect import _nvidia_tool
    for tool in ("ptxas", "cuobjdump"):
        if not os.access(_nvidia_tool(tool), os.X_OK):
            pytest.skip(f"Triton's {tool} not found at {_nvidia_tool(tool)} (a wheel without its NVIDIA binaries)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}

    def inspect(*args):
        res = subprocess.run([sys.executable, "-m", "kernels.inspect", *args], env=env, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        return res.stdout.splitlines()

    lines = [ln for ln in inspect("--geometry", "gdn_small", "--R", "1", "--W", "48", "--O", "3", "--steps", "1")
             if ln.startswith("step 1 ")]     # W = 48: not a multiple of the ws kernel's 64-beam tile
    assert [ln.split()[2] for ln in lines] == ["prep", "main"]
    for ln in lines:
        assert 0 < int(ln.split(":")[1].split()[0]) <= 255, ln

    def loads_before_first_convert(cfg):
        out = inspect("--geometry", "range_k256_v256", "--R", "16", "--O", "3", "--steps", "1", "--order",
                      "--config", cfg)
        order = out[out.index(next(ln for ln in out if ln.startswith("step 1 main"))) + 1]
        head = order.split("F2F")[0]
        return sum(int(part.split(" x")[1]) for part in head.split(" | ") if part.strip().startswith("LDG"))

    assert loads_before_first_convert("{}") >= 16
    assert loads_before_first_convert('{"qk_first": false}') < 16

    # the warp-specialised Gluon kernel (the interpreter cannot run it; this is its CPU check): what the stepper
    # launches per mode, no spills at the deepest step (the register split of stop 23), shared memory in the
    # 227 KB an sm_90 block may take, and its async machinery in the SASS (TMA loads, cp.async gathers, wgmma)
    # V = 256 (stop 30) runs each value head as two 128-column chunks: the same kernel; gdn_small's step 5 spills
    # 8 bytes (2 registers, kernels/NOTES.md stop 30) and no more, its other steps none
    # (G > 2: steps 0-1 in one launch since stop 30's ws_step_upto, the prep kernel first after them)
    for geometry, kernels5, spill5 in (("qwen3_5_0_8b", ["ws"], 0), ("qwen3_5_397b", ["prep", "ws"], 0),
                                       ("gdn_small", ["ws"], 8), ("range_hk4_hv16", ["prep", "ws"], 0)):
        out = inspect("--geometry", geometry, "--O", "7", "--steps", "0", "5", "--order")
        for step in (0, 5):
            lines = [ln for ln in out if ln.startswith(f"step {step} ")]
            assert [ln.split()[2] for ln in lines] == (kernels5 if step == 5 else ["ws"]), (geometry, step, out)
            ws = lines[-1]
            spilled = int(ws.split(" bytes spilled")[0].split()[-1])
            assert spilled <= (spill5 if step == 5 else 0) and int(ws.split(", ")[-1].split()[0]) <= 227 * 1024, ws
        order = out[out.index(ws) + 1]
        assert all(op in order for op in ("UTMALDG", "LDGSTS", "HGMMA", "UTMASTG")), order
    # stop 28's ws_kh_own_upto (k-hat_t through a buffer of its own, the ring one entry shorter) fits and does not spill
    out = [ln for ln in inspect("--O", "7", "--steps", "0", "5", "--config", '{"ws_kh_own_upto": 5}')
           if ln.startswith("step ")]
    assert len(out) == 2 and all(" 0 bytes spilled" in ln and int(ln.split(", ")[-1].split()[0]) <= 227 * 1024
                                 for ln in out), out
