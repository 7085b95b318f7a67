"""ncu target: two eager decodes of the v8 default at R=4 W=512 O=3 (the first compiles; profile the second)."""
import sys
import torch
from artifact.workload import make_workload
from kernels.onela import OneLAStepper
R, T = int(sys.argv[1]), int(sys.argv[2])
wl = make_workload("qwen3_5_0_8b", R, 512, T, lineage="beam", seed=0, device="cuda")
st = OneLAStepper(wl.geometry, R, 512, T, "cuda")
out = torch.empty(T, R, 512, 16, 128, dtype=torch.bfloat16, device="cuda")
for _ in range(2):
    st.reset(wl.s_ctx)
    for t in range(T):
        st.step(t, wl.q[t], wl.k[t], wl.v[t], wl.g[t], wl.beta[t], wl.parents[t], out[t])
torch.cuda.synchronize()
print(st.config, st.kernel_info)
