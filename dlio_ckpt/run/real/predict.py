"""What ``plan`` says about a real mode: the bytes one checkpoint will hold, without torch.

Why: a user sizing storage for a Lightning or FSDP run wants the number before running it, and the
lightning prediction is held to within 1% of the files real runs write (tests/e2e/test_real_modes.py).
"""

from __future__ import annotations

from typing import Any

from dlio_ckpt.config import Workload
from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.model.dtypes import DATATYPE_BYTES
from dlio_ckpt.model.lightning_demo import predict

MIB = 1 << 20


def lightning(workload: Workload, world_size: int) -> dict[str, Any]:
    p, ck = predict(workload), workload.checkpoint
    return {"mode": "lightning", "model": f"Lightning demo transformer, {workload.model.num_layers} layers",
            "parameters": p.num_parameters, "optimizer": workload.lightning.optimizer,
            "tensors_per_checkpoint": p.num_tensors, "payload_bytes": p.payload_bytes,
            "checkpoint_bytes": p.file_bytes, "checkpoint_MiB": round(p.file_bytes / MIB, 1),
            "files": [f"global_epoch1_step{i}.ckpt" for i in range(1, ck.num_checkpoints_write + 1)]}


def _model(workload: Workload) -> tuple[int, dict[str, Any]]:
    m = workload.model
    params = TransformerShape.from_model(m).num_parameters
    return params, {"mode": workload.mode, "parameters": params, "model_datatype": m.model_datatype}


def fsdp(workload: Workload, world_size: int) -> dict[str, Any]:
    params, out = _model(workload)
    states = 3 if workload.fsdp.optimizer == "adam" else 1
    payload = params * DATATYPE_BYTES[workload.model.model_datatype] * states
    return {**out, "optimizer": workload.fsdp.optimizer, "processes": world_size,
            "payload_bytes": payload, "payload_bytes_per_process": payload // world_size,
            "files_per_step": [f"__{r}_{j}.distcp" for r in range(min(world_size, 4))
                               for j in range(workload.fsdp.thread_count)]
            + (["..."] if world_size > 4 else []) + [".metadata"]}


def gds(workload: Workload, world_size: int) -> dict[str, Any]:
    _, out = _model(workload)
    return {**out, "bytes_per_path_per_process": workload.gds.size_mib * MIB, "paths": workload.gds.paths}
