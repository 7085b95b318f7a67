"""Driver: run artifact.fullmodel_bench with Inductor's pointwise autotuning set by argv[1] (on/off)."""
import sys
import torch._inductor.config as ic
ic.triton.autotune_pointwise = sys.argv[1] == "on"
from artifact.fullmodel_bench import main
sys.exit(main(sys.argv[2:]))
