"""What the job writes and what a load reads, worked out before any byte moves: the plan's frozen types
(:mod:`~dlio_ckpt.plan.types`: a rank's files, each file's items), the layouts that make it as each framework lays
its checkpoint out (:mod:`~dlio_ckpt.plan.layouts`, with ``make_plan`` and ``restore_plan``), the file formats that
give one file its bytes (:mod:`~dlio_ckpt.plan.formats`), the restore's shape (:mod:`~dlio_ckpt.plan.reads`: who
reads what at load), a scaled run's sample of whole items (:mod:`~dlio_ckpt.plan.sample`), the words a framework's
I/O pattern is said in (:mod:`~dlio_ckpt.plan.pattern`: what a layout declares and the engine plays) and the plan
as ``plan`` shows it (:mod:`~dlio_ckpt.plan.view`; :mod:`~dlio_ckpt.plan.collector` pauses Python's garbage
collector while a large plan is built). Below ``io`` (which moves a plan's files) and above ``config`` and ``model``;
it knows nothing of processes, hosts or storage. A job's layout rules run here too, after the configuration's
(:func:`~dlio_ckpt.plan.layouts.check_job`).
"""
