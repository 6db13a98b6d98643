"""What runs around runs, below ``cli`` and above ``run``, in two layers:

- :mod:`~dlio_ckpt.tools.drivers`, job drivers that run many: a sweep and the files it writes, ``tune``,
  ``run --repeat`` and fio's search beside it;
- :mod:`~dlio_ckpt.tools.readers`, readers of finished runs, below the drivers: a run folder
  (:mod:`~dlio_ckpt.tools.readers.runfiles`), ``diff``, ``report``, ``check`` (MLPerf's rules), ``trace-diff``, and
  a sweep's and repeats' files read back. They read what a run wrote and run nothing.
"""
