"""Processes and hosts, the bottom of the flow above the leaves: how the processes talk
(:mod:`~dlio_ckpt.cluster.comm`: MPI, torchrun's gloo, or one process alone, behind one interface), what a
process knows of its host (:mod:`~dlio_ckpt.cluster.host`: name, memory, peak RSS) and which pretend host each
process stands on when ``hosts.simulate`` asks (:mod:`~dlio_ckpt.cluster.placement`). It knows nothing of
checkpoints: a plan, a layout or a storage never reaches it.
"""
