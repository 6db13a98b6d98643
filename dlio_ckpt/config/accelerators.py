"""The accelerators a process may stand for (``workload.accelerator_type``) and their memory in GB:
MLPerf Storage 3.0's Table 3, which rule 4.3.4 reads (the processes' memory must hold the checkpoint).
The configuration offers these names; ``check`` applies the rule."""

# Table 3 of Rules.md at 0366ccf: each simulated accelerator's memory, in "GB" compared with the
# checkpoint's size in GiB with no conversion, as mlpstorage compares them
ACCELERATOR_MEMORY_GB = {"b200": 180, "mi355": 288, "h100": 80, "a100": 80}

# An H100's device-to-host copy rate, GB/s: into pinned host memory (where DCP's async_save stages: torch 2.13.0
# torch/distributed/checkpoint/staging.py, use_pinned_memory=True) and into pageable memory (where a synchronous
# save copies each tensor: DCP's _SerialCpuLoader .cpu(), torch.save of a device tensor). Published figures, not
# measured here; scripts/gpu_check.sh measures both where a GPU is lent (its "copy" step)
H100_DEVICE_TO_HOST_GB_PER_SECOND = {"pinned": 55.0, "pageable": 12.5}
