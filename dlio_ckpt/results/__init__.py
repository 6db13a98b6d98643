"""What a run reports, below the run and above ``io``: ``summary.json`` and the per-process files
(:mod:`~dlio_ckpt.results.summary`, their model in :mod:`~dlio_ckpt.results.schema`, its latency figures in
:mod:`~dlio_ckpt.results.latency_figures`, both on :mod:`~dlio_ckpt.results.section`), what a run folder holds
(:mod:`~dlio_ckpt.results.folder`), what a restore reads (:mod:`~dlio_ckpt.results.restore`), provenance,
goodput, the what-if of ``plan``, the latency figures, and the projection of scaled runs to the full size
(:mod:`~dlio_ckpt.results.projection`). Every mode ends in it, so their result files agree; the offline tools
read what it wrote.
"""
