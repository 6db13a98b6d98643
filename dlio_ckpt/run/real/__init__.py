"""The real modes (``++workload.mode=lightning|fsdp|gds``): the framework's own checkpoint path,
timed and reported in the same result files as the emulator. Imported only when one runs
(:mod:`dlio_ckpt.run.modes`), since torch and Lightning are heavy.
"""
