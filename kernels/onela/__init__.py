"""OneLA: shared-context large-beam Gated DeltaNet decode (paper §3), as one op.

- `OneLA` (op.py): the public op -- reset with S_ctx, then one call per decode step returning o.
- `onela_naive` (naive.py): the same outputs from one explicit state per beam, in plain PyTorch.
- `OneLAStepper`, `OneLAPath` (stepper.py): the benchmark harness's stepper and path (`onela`).
- `launch_config`, `step_launches` (plan.py): which kernels a step launches, with which tiles.
- `onela_generate` (transformers.py, imported on its own: it needs transformers): transformers' own beam search
  with the GDN decode through `OneLA`.
- the kernels: `triton_kernels.py` (prep, pipelined deep-step prep + main, Triton), `ws.py` (warp-specialised,
  Gluon, Hopper), `tree.py` (the deep steps' record-major replay in tree order), `tree_ws.py` (its step kernel
  warp-specialised, Gluon, Hopper), `records.py` (the record layout every kernel indexes).
"""
from kernels.onela.naive import onela_naive
from kernels.onela.op import OneLA
from kernels.onela.plan import CONFIG_KEYS, launch_config, step_launches
from kernels.onela.stepper import OneLAPath, OneLAStepper
from kernels.onela.tree import onela_tree_lists_kernel, onela_tree_step_kernel
from kernels.onela.tree_ws import onela_tree_ws_kernel
from kernels.onela.triton_kernels import onela_main_kernel, onela_prep_kernel, onela_prep_pipe_kernel
from kernels.onela.ws import onela_ws_kernel, ws_layout_supports, ws_shape_supports

# Kernel name in a launch plan -> its JIT function (what `tools.compile_report` compiles).
KERNELS = {"prep": onela_prep_kernel, "prep_pipe": onela_prep_pipe_kernel, "main": onela_main_kernel,
           "ws": onela_ws_kernel, "tree_lists": onela_tree_lists_kernel, "tree_step": onela_tree_step_kernel,
           "tree_ws": onela_tree_ws_kernel}

__all__ = ["OneLA", "onela_naive", "OneLAStepper", "OneLAPath", "launch_config", "step_launches", "CONFIG_KEYS",
           "KERNELS", "ws_shape_supports", "ws_layout_supports"]
