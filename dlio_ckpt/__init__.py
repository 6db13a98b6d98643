"""dlio_ckpt: how fast storage saves and restores large-model training checkpoints, without GPUs."""

import time

__version__ = "0.1.0"
# When this invocation began, before MPI, the configuration or the storage: MLPerf Storage 3.0 times
# the gap between a write invocation's end and a read invocation's start from here (its §4.7.1).
INVOCATION_START = time.time()
