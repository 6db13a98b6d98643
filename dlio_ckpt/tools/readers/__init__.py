"""Readers of finished runs: a run folder as one object (:mod:`~dlio_ckpt.tools.readers.runfiles`), ``diff`` of two
runs or sweeps (:mod:`~dlio_ckpt.tools.readers.compare`), ``report`` (:mod:`~dlio_ckpt.tools.readers.report`),
``check`` against MLPerf Storage's rules (:mod:`~dlio_ckpt.tools.readers.mlperf`), ``trace-diff``
(:mod:`~dlio_ckpt.tools.readers.trace_compare`), and a sweep's and repeats' files read back
(:mod:`~dlio_ckpt.tools.readers.sweeps`, :mod:`~dlio_ckpt.tools.readers.repeated`). They read what a run wrote,
never run one: below the job drivers, above ``run``.
"""
