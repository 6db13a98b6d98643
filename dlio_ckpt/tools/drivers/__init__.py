"""Job drivers: what runs many runs (a sweep over keys, :mod:`~dlio_ckpt.tools.drivers.sweep`, and the files it
writes, :mod:`~dlio_ckpt.tools.drivers.sweep_files`; ``tune``, :mod:`~dlio_ckpt.tools.drivers.tune`, and fio's best
beside it, :mod:`~dlio_ckpt.tools.drivers.fio`; ``run --repeat``, :mod:`~dlio_ckpt.tools.drivers.repeats`). Above
the readers of finished runs, whose figures they summarize, and the run they start.
"""
