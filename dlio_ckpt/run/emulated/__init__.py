"""The emulated mode (the default): the runner (:mod:`~dlio_ckpt.run.emulated.runner`: the plan, the saves
and loads in order, who reads what), each checkpoint's save and load through the engine
(:mod:`~dlio_ckpt.run.emulated.checkpoints`), asynchronous saves (:mod:`~dlio_ckpt.run.emulated.background`),
tiers and their drains (:mod:`~dlio_ckpt.run.emulated.tiers`) and lost hosts restored from peers
(:mod:`~dlio_ckpt.run.emulated.peers`). It knows nothing of :mod:`dlio_ckpt.run.real`.
"""
