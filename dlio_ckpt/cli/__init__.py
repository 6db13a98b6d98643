"""The command line: one sub-parser per command (:mod:`~dlio_ckpt.cli.parser`), the commands themselves
(:mod:`~dlio_ckpt.cli.commands`) and the entry point that picks the processes' communicator and turns errors into
exit codes (:mod:`~dlio_ckpt.cli.main`: 2 for bad input, 1 for a fault). The top of the flow: it calls down into
``tools`` (sweeps, tune, readers of finished runs) and ``run`` (one run), and nothing imports it.
"""
