"""What runs around runs, below ``cli`` and above ``run``: job drivers that run many (:mod:`~dlio_ckpt.tools.sweep`
and its results, :mod:`~dlio_ckpt.tools.tune`, :mod:`~dlio_ckpt.tools.repeats`, :mod:`~dlio_ckpt.tools.fio`) and
readers of finished runs (:mod:`~dlio_ckpt.tools.runfiles`, ``diff`` in :mod:`~dlio_ckpt.tools.compare`,
:mod:`~dlio_ckpt.tools.report`, ``check`` in :mod:`~dlio_ckpt.tools.mlperf`, ``trace-diff`` in
:mod:`~dlio_ckpt.tools.trace_compare`).
"""
