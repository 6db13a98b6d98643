"""Override lists that several test files start their workloads from."""

from __future__ import annotations

# tiny in torch.distributed.checkpoint's layout, as FSDP2 saves it (no tensor parallelism)
DCP = ["workload=tiny", "++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1"]


def datatypes(name: str) -> list[str]:
    """The model's and the optimizer's datatype, both ``name``."""
    return [f"++workload.model.model_datatype={name}", f"++workload.model.optimizer_datatype={name}"]


# bf16, a vocabulary of 1001 rows (odd: dim 0 uneven over 2 or 4 ranks): the DCP save traced under strace in
# tests/against_frameworks/test_io_patterns.py, its files held by tests/support/dcp_files.py
UNEVEN_BF16 = [*datatypes("bf16"), "++workload.model.transformer.vocab_size=1001"]

# tiny, its checkpoints in ck/ (tune's grids and refusals)
TINY_CK = ["workload=tiny", "++workload.checkpoint.checkpoint_folder=ck"]
# the same, its results in out/ (the run skeleton's checks, in process and on a small file system)
TINY_CK_OUT = [*TINY_CK, "++hydra.run.dir=out"]
# tiny on 2 processes, one save and one load (the run folder's rules)
TINY_ONE_SAVE_ONE_LOAD = ["workload=tiny", "--world-size", "2", "++workload.checkpoint.num_checkpoints_write=1",
                          "++workload.checkpoint.num_checkpoints_read=1"]
# tiny for the tiers' tests: 4 saves and a load, its checkpoints in local/ck (each test adds its own tiers)
TINY_TIERED = ["workload=tiny", "++workload.checkpoint.num_checkpoints_write=4",
               "++workload.checkpoint.num_checkpoints_read=1",
               "++workload.checkpoint.checkpoint_folder=ck", "++workload.storage.storage_root=local"]
# tiny trained for real: transformers' Llama under FSDP2 (mode=fsdp)
TINY_FSDP = ["workload=tiny", "++workload.mode=fsdp"]
# llama_7b_zero3 on 2 processes at 88 MiB a checkpoint, 3 saves and a load, fsynced, a failure every 8 h (the
# async saves' costs and goodput)
LLAMA_7B_88MIB = ["workload=llama_7b_zero3", "--world-size", "2", "++workload.checkpoint.scale=0.001",
                  "++workload.checkpoint.num_checkpoints_write=3", "++workload.checkpoint.num_checkpoints_read=1",
                  "++workload.checkpoint.fsync=True", "++workload.checkpoint.mtbf_hours=8"]
# a small emulated workload in each layout of the registry (tiny; Lightning's demo model for Lightning): the tests
# that walk every layout (tests/e2e/test_fault_matrix.py, tests/unit/test_plan_loads.py)
EVERY_LAYOUT = {"dlio": ["workload=tiny"],
                "deepspeed": ["workload=tiny", "++workload.checkpoint.layout=deepspeed"],
                "dcp": DCP,
                "megatron": ["workload=tiny", "++workload.checkpoint.layout=megatron"],
                "lightning": ["workload=lightning_demo", "++workload.mode=emulated",
                              "++workload.checkpoint.layout=lightning"]}
