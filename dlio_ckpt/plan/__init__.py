"""What the job writes and what a load reads, worked out before any byte moves: the plan's frozen types
(:mod:`~dlio_ckpt.plan.types`: a rank's files, each file's items), the layouts that make it as each framework lays
its checkpoint out (:mod:`~dlio_ckpt.plan.layouts`), the file formats that give one file its bytes
(:mod:`~dlio_ckpt.plan.formats`), the restore (:mod:`~dlio_ckpt.plan.restore`: who reads what at load) and the plan
as ``plan`` shows it (:mod:`~dlio_ckpt.plan.view`; :mod:`~dlio_ckpt.plan.collector` pauses Python's garbage
collector while a large plan is built). Below ``io`` (which moves a plan's files) and above ``config`` and ``model``;
it knows nothing of processes, hosts or storage.
"""
