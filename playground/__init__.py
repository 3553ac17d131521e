"""Assisted-decoding playground: see what drafting does, step by step, and whether it pays."""

import os

# torch's OpenMP threads spin while they wait for work by default. On a machine whose cores are shared (a
# two-core Space, the browser beside the server, other jobs), the spinning threads take the cores from each
# other and from the rest: at load average ~10 on two cores, 8 tokens of Gemma 3 270M took 7-18 s of wall
# time (10-13 s of CPU for the whole CLI run) with spinning and 1.3-1.4 s (6.4-6.8 s of CPU) with passive
# waits. Waiting does not change how the work is split, so outputs are the same. Read by OpenMP when torch
# loads, so it is set here, before anything imports torch; a value already in the environment is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
