"""``checkpoint.layout=megatron`` held to Megatron-core's own ``torch_dist`` saves on CPU
(``tests/oracles/megatron_save.py``: a GPTModel, the distributed optimizer after one Adam step, the fully
parallel save): the same file names, every ``.distcp`` file, ``common.pt`` and ``metadata.json`` equal to the
byte (megatron-core 0.16.1, torch 2.13.0), ``.metadata`` within 10% (its pickle's size is derived, not built);
dense models (tensor, pipeline and data parallelism: the TP 2 x PP 2 x DP 2 save is in
``tests/against_frameworks/test_restore.py``, recorded with its loads) and mixtures of experts (stacked and
per-block keys, expert and expert-tensor parallelism, latent attention, shared experts, the router's bias). Every
case's real save comes from one run of the oracle (``real_saves``: megatron-core imported once, each case's ranks
forked afresh), each case held to its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import check_job, make_plan
from tests.support import ORACLES
from tests.support.dcp_moe_model import MLA
from tests.support.megatron_files import assert_same_files, assert_same_items

pytestmark = pytest.mark.real
ORACLE = ORACLES / "megatron_save.py"

# world, TP, layers, hidden, ffn, heads, kv heads, vocabulary, dtype, files per rank (tensor and pipeline
# parallelism: TP 2 x PP 2 x DP 2, 3 layers split 1 + 2, fp32, one file in tests/against_frameworks/test_restore.py,
# whose save is compared item by item and also loaded back, as tests/oracles/record_restore_reads.py recorded
# them; a TP 2 x DP 1 case here took 12 s of the suite and found nothing that one did not; DP 2 with 2 files a
# rank, bf16, is the save traced in
# tests/against_frameworks/test_io_patterns.py, checked there by assert_same_files and assert_same_items, as
# here: tests/support/megatron_files.py)
CASES = [
    pytest.param(1, 1, 2, 256, 688, 8, 4, 1000, "fp32", 2, id="1-rank"),
]


@pytest.mark.parametrize(("world", "tp", "layers", "hidden", "ffn", "heads", "kv", "vocab", "dtype", "files"), CASES)
def test_emulated_files_are_those_megatron_saves(real_saves, request, world, tp, layers, hidden, ffn, heads, kv,
                                                 vocab, dtype, files):
    out = real_saves[request.node.callspec.id]
    real = {p.name: p.stat().st_size for p in out.iterdir()}
    workload, _, _ = compose(["workload=tiny", "++workload.checkpoint.layout=megatron",
                              f"++workload.model.parallelism.tensor={tp}", f"++workload.model.num_layers={layers}",
                              f"++workload.model.transformer.hidden_size={hidden}",
                              f"++workload.model.transformer.ffn_hidden_size={ffn}",
                              f"++workload.model.transformer.num_attention_heads={heads}",
                              f"++workload.model.transformer.num_kv_heads={kv}",
                              f"++workload.model.transformer.vocab_size={vocab}",
                              f"++workload.model.model_datatype={dtype}",
                              f"++workload.checkpoint.files_per_rank={files}"], None)
    assert_same_files(real, workload, world)
    assert_same_items(out, make_plan(workload, world))


# world, TP, layers, dtype, files per rank, and the oracle's MoE settings (4 experts of width 32; DeepSeek's
# MTP module with the last)
MOE_CASES = [
    pytest.param(2, 1, 3, "bf16", 1, {"freq": [0, 1, 1], "shared": 32, "ep": 2, "etp": 1, "expert_bias": True,
                                      "qk_norm": True}, id="first-dense-shared-bias-ep2"),
    pytest.param(4, 2, 2, "bf16", 2, {"freq": 1, "ep": 2, "etp": 1, "qk_norm": True}, id="stacked-tp2-ep2-over-tp"),
    pytest.param(4, 2, 2, "fp32", 1, {"freq": [0, 1], "shared": 32, "ep": 2, "etp": 2, "expert_bias": True,
                                      "qk_norm": True, "mla": MLA, "mtp": 1}, id="mla-etp2-mtp"),
]


def moe_settings(moe: dict) -> dict:
    return {"experts": 4, "moe_ffn": 32, **moe}


@pytest.fixture(scope="module")
def real_saves(tmp_path_factory) -> dict[str, Path]:
    """Every case's real save above and below, made by one run of the oracle (its ``saves`` form: megatron-core,
    most of a case's cost, imported once, each case's ranks forked from it afresh in turn): its folder by case id."""
    pytest.importorskip("megatron.core")
    tmp = tmp_path_factory.mktemp("megatron_saves")
    cases = {case.id: [str(tmp / case.id), *map(str, case.values)] for case in CASES}
    for case in MOE_CASES:
        world, tp, layers, dtype, files, moe = case.values
        cases[case.id] = [str(tmp / case.id), *map(str, (world, tp, layers, 64, 96, 4, 2, 1000, dtype, files)),
                          json.dumps(moe_settings(moe))]
    r = subprocess.run([sys.executable, str(ORACLE), "saves", *(a for args in cases.values() for a in (*args, "+"))],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return {name: tmp / name for name in cases}


@pytest.mark.parametrize(("world", "tp", "layers", "dtype", "files", "moe"), MOE_CASES)
def test_emulated_moe_files_are_those_megatron_saves(real_saves, request, world, tp, layers, dtype, files, moe):
    out, settings = real_saves[request.node.callspec.id], moe_settings(moe)
    freq = settings["freq"]
    first_dense = freq.index(1) if isinstance(freq, list) else 0
    overrides = ["workload=tiny_moe", "++workload.checkpoint.layout=megatron",
                 f"++workload.model.mtp_layers={moe.get('mtp', 0)}",
                 f"++workload.model.parallelism.tensor={tp}", f"++workload.model.parallelism.expert={moe['ep']}",
                 f"++workload.model.parallelism.expert_tensor={moe['etp']}", f"++workload.model.num_layers={layers}",
                 "++workload.model.transformer.hidden_size=64", "++workload.model.transformer.ffn_hidden_size=96",
                 "++workload.model.transformer.num_attention_heads=4", "++workload.model.transformer.vocab_size=1000",
                 f"++workload.model.model_datatype={dtype}", f"++workload.checkpoint.files_per_rank={files}",
                 "++workload.model.moe.num_experts=4", "++workload.model.moe.expert_ffn_hidden_size=32",
                 f"++workload.model.moe.num_shared_experts={1 if moe.get('shared') else 0}",
                 f"++workload.model.moe.first_dense_layers={first_dense}",
                 f"++workload.model.moe.router_bias={moe.get('expert_bias', False)}"]
    if "mla" in moe:
        m = moe["mla"]
        overrides += ["++workload.model.transformer.num_kv_heads=4",
                      f"++workload.model.transformer.q_lora_rank={m['q_lora']}",
                      f"++workload.model.transformer.kv_lora_rank={m['kv_lora']}",
                      f"++workload.model.transformer.qk_nope_head_dim={m['nope']}",
                      f"++workload.model.transformer.qk_rope_head_dim={m['rope']}",
                      f"++workload.model.transformer.v_head_dim={m['v']}"]
    else:
        overrides += ["++workload.model.transformer.attention=gqa", "++workload.model.transformer.num_kv_heads=2",
                      f"++workload.model.transformer.qk_norm={moe['qk_norm']}",
                      *(f"~workload.model.transformer.{k}" for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                                     "qk_rope_head_dim", "v_head_dim"))]
    workload, _, _ = compose(overrides, None)
    assert_same_files({p.name: p.stat().st_size for p in out.iterdir()}, workload, world)
    assert_same_items(out, make_plan(workload, world), ordered=False)


@pytest.mark.parametrize(("extra", "message"), [
    (["++workload.model.parallelism.tensor=3"], "workload.model.transformer.num_attention_heads=8: must be a multiple"),
    (["++workload.model.parallelism.pipeline=3"], "workload.model.num_layers=4: must split into 3 pipeline stages"),
    (["++workload.checkpoint.format=hdf5"], "means nothing with checkpoint.layout=megatron"),
])
def test_bad_megatron_input_is_refused_naming_the_rule(extra, message):
    from dlio_ckpt.errors import ConfigError

    with pytest.raises(ConfigError, match=message.split(": ")[1] if ": " in message else message) as info:
        check_job(compose(["workload=tiny", "++workload.checkpoint.layout=megatron", *extra], None)[0])
    assert message in str(info.value)
