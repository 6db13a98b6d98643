"""One run, from the command to its result files: launch (:mod:`~dlio_ckpt.run.launch`: checks, the run folder,
the mode), preparation (:mod:`~dlio_ckpt.run.preparation`: the storage's checks, foreign files, room), the
context every mode shares (:mod:`~dlio_ckpt.run.context`), the modes themselves (:mod:`~dlio_ckpt.run.emulated`,
the default; :mod:`~dlio_ckpt.run.real`, the frameworks' own saves; chosen through :mod:`~dlio_ckpt.run.modes`),
failures that end every rank (:mod:`~dlio_ckpt.run.failure`), rank 0's progress lines
(:mod:`~dlio_ckpt.run.progress`) and the checkpoint steps on storage (:mod:`~dlio_ckpt.run.steps`: their names,
manifests and what an earlier run left). Below ``cli`` and ``tools``, above ``results``.
"""
