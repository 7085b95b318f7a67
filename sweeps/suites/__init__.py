"""The cell runners of the sweeps, one module per `suite.runner` (dispatch table: sweeps.runners).

operator       the operator, recurrent_path and smoke suites: correctness gate, then CUDA-graph timing
full_model     the full_model suite (Fig 6): a hybrid model's beam search, per-call graphs, event timing
traffic        the traffic suite (Fig 8c): DRAM counters of one run per cell, measured in a child process
traffic_child  that child process (`python -m sweeps.suites.traffic_child`)
"""
