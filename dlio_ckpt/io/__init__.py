"""One process's I/O, below the run and above the plan: the engine (:mod:`~dlio_ckpt.io.engine`) turns a plan's
files into storage calls (the tuned stream of chunks in flight, or a framework's own calls through its file
object), with the synthetic bytes (:mod:`~dlio_ckpt.io.synthetic`), verification of what it reads, the object
stores' request accounting (:mod:`~dlio_ckpt.io.requests`), the storage calls' latency histograms
(:mod:`~dlio_ckpt.io.latency`) and the trace (:mod:`~dlio_ckpt.io.trace`). The storages themselves are in
:mod:`~dlio_ckpt.io.backends`. It moves bytes it is given: it never reads the workload, the model or a layout.
"""
