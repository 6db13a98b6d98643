"""The cases of the restores' recordings: what each recording script (``tests/oracles/``) saves and loads, and what
the test comparing with it (``tests/against_frameworks/``) expects it to hold: the script records them beside the
reads, and the test refuses a recording of other cases. One place for both, so that neither reads the other.

- ``DCP_*``: ``mode=fsdp``'s ``dcp.save`` and ``dcp.load`` (tests/oracles/record_restore_reads.py;
  test_restore.py);
- ``MEGATRON_*``: megatron-core's dense save and ``dist_checkpointing.load`` (the same script and test);
- ``DCP_MOE_*``: torchtitan's MoE placements saved and loaded by DCP (tests/oracles/dcp_moe_load_reads.py;
  test_moe_restore.py);
- ``MEGATRON_MOE_*``: megatron-core's MoE saves and loads (tests/oracles/record_megatron_moe_restore_reads.py;
  test_megatron_moe_restore.py).
"""

from __future__ import annotations

import json

from tests.support import DATA
from tests.support.dcp_moe_model import GQA, MLA
from tests.support.workloads import datatypes

DCP_READS = DATA / "dcp_restore_reads.json"
MEGATRON_READS = DATA / "megatron_restore_reads.json"
DCP_MOE_READS = DATA / "dcp_moe_restore_reads.json"
MEGATRON_MOE_READS = DATA / "megatron_moe_restore_reads.json"

DCP_SHAPE = [*datatypes("fp32"), "++workload.model.transformer.vocab_size=1001"]  # dim 0 uneven over 3 and 4 ranks
# saved at 3 ranks (rows uneven), loaded resharded to 2 and to 4, at the same world size (replicated items read
# from the ranks that stored them), and the model alone: (world size, model alone)
DCP_SAVED, DCP_LOADS = 3, [(2, False), (4, False), (3, False), (2, True)]

# TP 2 x PP 2 x DP 2 (8 ranks), the first stage one block of 3 (Megatron's uneven split)
MEGATRON = ["workload=tiny", "++workload.checkpoint.layout=megatron", "++workload.model.parallelism.tensor=2",
            "++workload.model.parallelism.pipeline=2", "++workload.model.parallelism.first_stage_layers=1",
            "++workload.model.num_layers=3", "++workload.model.transformer.hidden_size=64",
            "++workload.model.transformer.ffn_hidden_size=96", "++workload.model.transformer.num_attention_heads=4",
            "++workload.model.transformer.num_kv_heads=2", "++workload.model.transformer.vocab_size=998",
            "++workload.model.model_datatype=fp32", "++workload.checkpoint.files_per_rank=1"]
# the same model as tests/oracles/megatron_save.py's arguments: TP x PP x the first stage's blocks, layers, hidden,
# FFN, heads, KV heads, vocabulary, dtype, writer threads
MEGATRON_MODEL = ["2x2x1", "3", "64", "96", "4", "2", "998", "fp32", "1"]
MEGATRON_WORLD = 8
MEGATRON_LOADS = [(1, 4, False), (2, 4, True)]  # (TP, world size, model alone)

# the DCP MoE oracle's model (tests/support/dcp_moe_model.py)
MOE_BASE = {"dim": 64, "inter": 96, "vocab": 1000, "heads": 4, "moe_inter": 32}
# latent attention, 4 routed experts over EP 2, a dense first block, a shared expert, the experts' bias buffer, a
# vocabulary uneven over 4 and 8 ranks
MLA_EP2 = {**MOE_BASE, "vocab": 1001, "layers": 3, "dense": 1, "experts": 4, "shared": 1, "bias": True, "ep": 2,
           "threads": 1, "mla": MLA}
# grouped-query attention, 2 routed experts over EP 2 (rows split by FSDP2 at 4 and 8 ranks, whole at 2), the
# router's dim 0 (2) leaving the last ranks empty shards, 2 files per rank
GQA_EP2 = {**MOE_BASE, "layers": 2, "dense": 0, "experts": 2, "shared": 0, "bias": False, "ep": 2, "threads": 2,
           **GQA}
# name: the oracle's model, the save's world size, the loads (world size, model alone). At each world size the
# expert mesh is (world / EP, EP), and FSDP2 splits the experts on dim 0, or on dim 1 where world > experts:
# MLA_EP2 saved at 4 (one expert a rank), loaded at 4, at 2 (two experts a rank), at 8 (each expert's rows split
# over 4) and the model alone at 2; saved at 2, loaded at 4; GQA_EP2 saved at 4 (rows split over 2), loaded at 4,
# at 2 (whole experts) and at 8 (rows split over 4)
DCP_MOE_CASES: dict[str, tuple[dict, int, list[tuple[int, bool]]]] = {
    "mla-ep2-saved-at-4": (MLA_EP2, 4, [(4, False), (2, False), (8, False), (2, True)]),
    "mla-ep2-saved-at-2": (MLA_EP2, 2, [(4, False)]),
    "gqa-ep2-rows-split-saved-at-4": (GQA_EP2, 4, [(4, False), (2, False), (8, False)]),
    # no expert parallelism: the experts are ordinary FSDP2 parameters over every rank, 4 experts over 3 ranks (2, 2,
    # 0: the last rank writes its empty shards, which DCP keeps once, among its replicated items)
    "gqa-no-ep-saved-at-3": ({**MOE_BASE, "vocab": 1001, "layers": 3, "dense": 1, "experts": 4, "shared": 1,
                              "bias": True, "ep": 1, "threads": 1, **GQA, "head_dim": 16, "qk_norm": False}, 3,
                             [(2, False), (4, False)]),
}


def megatron_moe(**settings: object) -> str:
    """megatron_save.py's MOE argument: 4 routed experts of width 32, and ``settings``."""
    return json.dumps({"experts": 4, "moe_ffn": 32, **settings})


# name: the oracle's model (megatron_save.py's arguments: TP[xPP[xFIRST]], layers, hidden, FFN, heads, KV heads,
# vocabulary, dtype, writer threads, MOE; its latent attention's ranks are MLA's), the save's world size, and its
# loads, TP:WORLD:MODEL_ONLY[:EP]
MEGATRON_MOE_CASES: dict[str, tuple[list[str], int, list[str]]] = {
    # stacked keys (every block MoE), TP 2, EP 2 over TP, 2 files a rank: loaded as saved, at TP 1 on 2 ranks, on 8
    # (expert data parallelism 4), at EP 4 (one expert a rank) and the model alone at EP 1 on 2 ranks
    "gqa-stacked-tp2-ep2": (["2", "2", "64", "96", "4", "2", "1000", "bf16", "2",
                             megatron_moe(freq=1, ep=2, etp=1, qk_norm=True)], 4,
                            ["2:4:0", "1:2:0", "2:8:0", "1:4:0:4", "1:2:1:1"]),
    # per-block keys (a dense first block), latent attention, a shared expert, the router's bias, DeepSeek's MTP
    # module, expert TP 2: loaded as saved, on 8 ranks, at TP 1 (expert TP still 2) and the model alone
    "mla-per-block-etp2-mtp": (["2", "2", "64", "96", "4", "4", "1000", "fp32", "1",
                                megatron_moe(freq=[0, 1], shared=32, ep=2, etp=2, expert_bias=True, qk_norm=True,
                                             mla=MLA, mtp=1)], 4,
                               ["2:4:0", "2:8:0", "1:4:0", "2:4:1"]),
    # pipeline parallelism 2 (3 blocks split 2 + 1: a stage must hold an MoE block), a dense first block, a shared
    # expert, the router's bias, 2 files a rank: loaded on 4 ranks, at TP 2 on 8 and the model alone at EP 1
    "pp2-first-dense-shared-bias": (["1x2x2", "3", "64", "96", "4", "2", "1000", "bf16", "2",
                                     megatron_moe(freq=[0, 1, 1], shared=32, ep=2, etp=1, expert_bias=True,
                                                  qk_norm=True)], 4,
                                    ["1:4:0", "2:8:0", "1:2:1:1"]),
    # no expert parallelism: one optimizer, the experts among its parameters (no chained_ prefix); loaded as saved,
    # on 4 ranks, and the model alone at EP 2
    "no-ep": (["1", "2", "64", "96", "4", "2", "1000", "bf16", "1", megatron_moe(freq=1, ep=1, etp=1, qk_norm=True)],
              2, ["1:2:0", "1:4:0", "1:4:1:2"]),
}
