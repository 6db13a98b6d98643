"""Override lists that several test files start their workloads from."""

from __future__ import annotations

# tiny in torch.distributed.checkpoint's layout, as FSDP2 saves it (no tensor parallelism)
DCP = ["workload=tiny", "++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1"]


def datatypes(name: str) -> list[str]:
    """The model's and the optimizer's datatype, both ``name``."""
    return [f"++workload.model.model_datatype={name}", f"++workload.model.optimizer_datatype={name}"]
