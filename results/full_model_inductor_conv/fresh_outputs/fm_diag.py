"""Driver: artifact.fullmodel_bench with Inductor's autotune log (every config's benchmark time and the winner) at
DEBUG into argv[1], so a 29-us and a 102-us run of OneLA's conv-with-gather kernel can be told apart."""
import logging
import sys

h = logging.FileHandler(sys.argv[1])
h.setLevel(logging.DEBUG)
h.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
lg = logging.getLogger("torch._inductor.runtime.triton_heuristics")
lg.setLevel(logging.DEBUG)
lg.addHandler(h)
lg.propagate = False
from artifact.fullmodel_bench import main  # noqa: E402
sys.exit(main(sys.argv[2:]))
