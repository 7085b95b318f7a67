"""Measurement tools beside the kernels and the sweeps, each `python -m tools.<name>` (its module docstring
says what it measures); their logs are under results/kernels/.

bench          the timed kernel table of onela and controlled_fullstate on one geometry (GPU)
inspect        a compile report of the OneLA kernels for sm_90a: registers, spills, shared memory (any host)
launch_floor   what one launch per step costs when it only streams the step's bytes, and the L2 flush's share (GPU)
gather_bench   how fast a kernel that only gathers the ancestral 256 B records runs (GPU)
suite_check    the onela path's correctness over the operator suite's shapes, untimed (GPU)
"""
