"""The model's arithmetic, below the plan: the tensors of a dense transformer as DLIO counts them
(:mod:`~dlio_ckpt.model.dense`), of a mixture of experts (:mod:`~dlio_ckpt.model.moe`), of Lightning's demo
model (:mod:`~dlio_ckpt.model.lightning_demo`), and the datatypes' sizes (:mod:`~dlio_ckpt.model.dtypes`).
Pure functions of the workload's model section: no processes, hosts or storage; the layouts in
:mod:`dlio_ckpt.plan.layouts` shard what it counts.
"""
