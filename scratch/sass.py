"""Compile the main kernel for sm_90 on this CPU host (ptxas ships with Triton) and report registers / spills."""
import sys, re
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from kernels.onela import _onela_main_kernel, _onela_prep_kernel

def main_src(K, V, STEP, qk_first, BV=64, BK=64, iters=1, rs=3, pdl=1):
    sig = {n: t for n, t in zip(
        ["q_ptr", "k_ptr", "v_ptr", "beta_ptr", "s_ptr", "anc_ptr", "coef_ptr", "delta_ptr", "out_ptr",
         "R", "W", "HV", "T_CAP", "sq_r", "sq_w", "sq_h", "sv_r", "sv_w", "sv_h"],
        ["*bf16", "*bf16", "*bf16", "*fp32", "*fp32", "*i32", "*fp32", "*bf16", "*bf16"] + ["i32"] * 10)}
    const = dict(K=K, V=V, G=1, STEP=STEP, BB=64, BV=BV, BK=BK, K_STAGES=1, QK_FIRST=qk_first, BEAM_ITERS=iters,
                 LOOP_STAGES=1, REPLAY_STAGES=rs, QK_BF16=True, UPCAST=False, PDL=pdl, PDL_NEXT=True)
    for k in const:
        sig[k] = "constexpr"
    names = list(sig)
    div = [n for n in names[:19] if n != "T_CAP"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div}
    return ASTSource(_onela_main_kernel, sig, const, attrs)

target = GPUTarget("cuda", 90, 32)
for K, V, BV, BK, iters in ((256, 512, 64, 64, 1), (256, 256, 64, 64, 1), (128, 128, 128, 128, 2)):
    for step in (1, 5):
        for qf in (False, True):
            ck = triton.compile(main_src(K, V, step, qf, BV, BK, iters), target=target, options={"num_warps": 4})
            sass = ck.asm.get("sass") or ""
            path = f"/tmp/sass_K{K}_V{V}_s{step}_qf{int(qf)}.ptx"
            with open(path, "w") as f:
                f.write(ck.asm["ptx"])
            import subprocess, os
            ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
            out = subprocess.run([ptxas, "-v", "-arch=sm_90a", path, "-o", "/tmp/x.cubin"], capture_output=True,
                                 text=True).stderr
            info = " ".join(re.findall(r"Used \d+ registers|\d+ bytes spill stores|\d+ bytes spill loads", out))
            print(f"K={K} V={V} step={step} qk_first={qf}: {info} shared {ck.metadata.shared}", flush=True)
