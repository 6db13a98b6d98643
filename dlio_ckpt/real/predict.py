"""What ``plan`` says about a real mode: the bytes one checkpoint will hold, without torch.

Why: a user sizing storage for a Lightning or FSDP run wants the number before running it, and the
lightning prediction is held to within 1% of the files real runs write (tests/test_real_modes.py).
"""

from __future__ import annotations

from typing import Any

from ..config import Workload
from ..model import DATATYPE_BYTES, TransformerShape
from .demo_shapes import predict

MIB = 1 << 20


def describe(workload: Workload, world_size: int) -> dict[str, Any]:
    ck = workload.checkpoint
    if workload.mode == "lightning":
        p = predict(workload)
        return {"mode": "lightning", "model": f"Lightning demo transformer, {workload.model.num_layers} layers",
                "parameters": p.num_parameters, "optimizer": workload.lightning.optimizer,
                "tensors_per_checkpoint": p.num_tensors, "payload_bytes": p.payload_bytes,
                "checkpoint_bytes": p.file_bytes, "checkpoint_MiB": round(p.file_bytes / MIB, 1),
                "files": [f"global_epoch1_step{i}.ckpt" for i in range(1, ck.num_checkpoints_write + 1)]}
    m = workload.model
    params = TransformerShape.from_model(m).num_parameters
    width = DATATYPE_BYTES[m.model_datatype]
    states = 3 if workload.mode == "fsdp" and workload.fsdp.optimizer == "adam" else 1
    payload = params * width * states
    out: dict[str, Any] = {"mode": workload.mode, "parameters": params, "model_datatype": m.model_datatype}
    if workload.mode == "fsdp":
        out.update({"optimizer": workload.fsdp.optimizer, "processes": world_size,
                    "payload_bytes": payload, "payload_bytes_per_process": payload // world_size,
                    "files_per_step": [f"__{r}_{j}.distcp" for r in range(min(world_size, 4))
                                       for j in range(workload.fsdp.thread_count)]
                    + (["..."] if world_size > 4 else []) + [".metadata"]})
    else:
        out.update({"bytes_per_path_per_process": workload.gds.size_mib * MIB, "paths": workload.gds.paths})
    return out
