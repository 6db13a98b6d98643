"""The accelerators a process may stand for (``workload.accelerator_type``) and their memory in GB:
MLPerf Storage 3.0's Table 3, which rule 4.3.4 reads (the processes' memory must hold the checkpoint).
The configuration offers these names; ``check`` applies the rule."""

# Table 3 of Rules.md at 0366ccf: each simulated accelerator's memory, in "GB" compared with the
# checkpoint's size in GiB with no conversion, as mlpstorage compares them
ACCELERATOR_MEMORY_GB = {"b200": 180, "mi355": 288, "h100": 80, "a100": 80}
