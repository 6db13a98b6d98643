"""Megatron's load of a mixture of experts as megatron-core does it (``checkpoint.layout=megatron``,
``model.family=moe``): real saves by megatron-core 0.16.1 (``tests/oracles/megatron_save.py`` with an MoE
argument: local specs, SequentialMLP experts, the distributed optimizer after one Adam step, the fully parallel
save, gloo on CPU) and its default ``dist_checkpointing.load`` of each at the save's parallelism and at others
(world size, ``restore.tensor``, ``restore.expert``, the model alone), DCP's ``FileSystemReader`` instrumented.
They are recorded, with the versions they ran with, into ``tests/data/megatron_moe_restore_reads.json`` (four
saves and fifteen loads by up to 8 forked ranks take about 1.5 minutes, for reads that change only with the
frameworks: ``tests/oracles/record_megatron_moe_restore_reads.py``); the comparisons run in this process.

Held: every file of each save (every ``.distcp``, ``common.pt`` and ``metadata.json`` to the byte, ``.metadata``
within 10%) and every item where megatron-core put it (file, offset, tensor, chunk, length: the state dict's
order, not only each rank's set); then, on every rank of every load, the files it opens whole first
(``metadata.json``, ``common.pt``, ``.metadata``) and every (file, offset, length) it reads after, in order."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.layouts import check_job, make_plan, restore_plan
from tests.support.megatron_files import placed_items
from tests.support.restore_cases import MEGATRON_MOE_CASES, MEGATRON_MOE_READS

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

RECORD = "PYTHONPATH=. .venv/bin/python tests/oracles/record_megatron_moe_restore_reads.py"


def recorded() -> dict:
    return json.loads(MEGATRON_MOE_READS.read_text())


def workload_of(model: list[str], *extra: str) -> Workload:
    """The workload of the oracle's model (``MEGATRON_MOE_CASES``), with ``extra`` overrides."""
    tp_pp, layers, hidden, ffn, heads, kv, vocab, dtype, threads, settings = model
    parts = tp_pp.split("x")  # TP, TPxPP or TPxPPxFIRST (the first stage's blocks)
    tp, pp, first = parts[0], parts[1] if len(parts) > 1 else "1", parts[2] if len(parts) > 2 else ""
    m = json.loads(settings)
    freq = m["freq"]
    overrides = ["workload=tiny_moe", "++workload.checkpoint.layout=megatron",
                 f"++workload.model.mtp_layers={m.get('mtp', 0)}", f"++workload.model.parallelism.tensor={tp}",
                 f"++workload.model.parallelism.pipeline={pp}", f"++workload.model.parallelism.expert={m['ep']}",
                 f"++workload.model.parallelism.expert_tensor={m['etp']}", f"++workload.model.num_layers={layers}",
                 f"++workload.model.transformer.hidden_size={hidden}",
                 f"++workload.model.transformer.ffn_hidden_size={ffn}",
                 f"++workload.model.transformer.num_attention_heads={heads}",
                 f"++workload.model.transformer.vocab_size={vocab}", f"++workload.model.model_datatype={dtype}",
                 f"++workload.checkpoint.files_per_rank={threads}",
                 f"++workload.model.moe.num_experts={m['experts']}",
                 f"++workload.model.moe.expert_ffn_hidden_size={m['moe_ffn']}",
                 f"++workload.model.moe.num_shared_experts={1 if m.get('shared') else 0}",
                 f"++workload.model.moe.first_dense_layers={freq.index(1) if isinstance(freq, list) else 0}",
                 f"++workload.model.moe.router_bias={m.get('expert_bias', False)}"]
    if first:
        overrides.append(f"++workload.model.parallelism.first_stage_layers={first}")
    if "mla" in m:  # MLA's heads are the attention heads (megatron's num_query_groups is unused)
        a = m["mla"]
        overrides += [f"++workload.model.transformer.num_kv_heads={heads}",
                      f"++workload.model.transformer.q_lora_rank={a['q_lora']}",
                      f"++workload.model.transformer.kv_lora_rank={a['kv_lora']}",
                      f"++workload.model.transformer.qk_nope_head_dim={a['nope']}",
                      f"++workload.model.transformer.qk_rope_head_dim={a['rope']}",
                      f"++workload.model.transformer.v_head_dim={a['v']}"]
    else:
        overrides += ["++workload.model.transformer.attention=gqa", f"++workload.model.transformer.num_kv_heads={kv}",
                      f"++workload.model.transformer.qk_norm={m.get('qk_norm', False)}",
                      *(f"~workload.model.transformer.{k}" for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                                     "qk_rope_head_dim", "v_head_dim"))]
    workload, _, _ = compose([*overrides, *extra], None)
    return workload


def load_overrides(load: str) -> list[str]:
    """A recorded load's ``workload.restore`` keys: TP:WORLD:MODEL_ONLY[:EP]."""
    tp, world, model_only, *ep = load.split(":")
    return [f"++workload.restore.tensor={tp}", f"++workload.restore.world_size={world}",
            f"++workload.restore.model_only={model_only == '1'}", *(f"++workload.restore.expert={e}" for e in ep)]


def test_the_recording_is_of_these_cases():
    found = {name: (c["model"], c["world"], sorted(c["loads"])) for name, c in recorded()["cases"].items()}
    cases = {name: (model, world, sorted(loads)) for name, (model, world, loads) in MEGATRON_MOE_CASES.items()}
    assert found == cases, f"recorded for other cases: {RECORD}"


@pytest.mark.parametrize("name", MEGATRON_MOE_CASES)
def test_every_item_of_the_emulated_save_is_where_megatron_core_put_it(name):
    """Every file's name and size, and every item's file, offset, chunk and length in the state dict's order."""
    case = recorded()["cases"][name]
    plan = make_plan(workload_of(case["model"]), case["world"])
    plan.validate()
    emulated = {f"{f.stem}.distcp": f.size for r in plan.ranks for f in r.files} | \
        {c.name: c.size for c in plan.coordinator}
    assert sorted(emulated) == sorted(case["files"])
    for file, size in case["files"].items():  # .metadata's pickle is sized, not built: within 10%
        assert abs(emulated[file] - size) <= (0.10 * size if file == ".metadata" else 0), (file, emulated[file], size)
    assert placed_items(plan) == [(f, o, fqn, tuple(chunk), n) for f, o, fqn, chunk, n in case["items"]]


@pytest.mark.parametrize("name", MEGATRON_MOE_CASES)
def test_the_emulated_moe_restore_reads_what_dist_checkpointing_load_reads(name):
    """Every load of the case: the ranks that read are ours; each opens metadata.json, common.pt and .metadata
    whole (what our emulated load reads first, on every rank), then reads the (file, offset, length) our restore
    plan reads, in the same order: the dense parts' TP slices and norms on every rank (replicas included), the
    routed experts' chunks the rank holds at the load's expert (tensor) parallelism, the objects, the two chained
    optimizers' state (one without EP) in model space."""
    case = recorded()["cases"][name]
    model, world = case["model"], case["world"]
    plan = make_plan(workload_of(model), world)
    first = {c.name: c.size for c in plan.coordinator}
    for load, reads in case["loads"].items():
        restore = restore_plan(workload_of(model, *load_overrides(load)), plan)
        real = {int(rank): [tuple(x) for x in r] for rank, r in reads.items()}
        assert sorted(real) == [rr.rank for rr in restore.ranks] == list(range(int(load.split(":")[1]))), load
        for rr in restore.ranks:
            whole, items = real[rr.rank][:3], real[rr.rank][3:]
            assert [n for n, _, _ in whole] == ["metadata.json", "common.pt", ".metadata"] and \
                sorted(first) == sorted(n for n, _, _ in whole), (load, whole)
            for file, offset, size in whole:
                bound = 0.10 * size if file == ".metadata" else 0
                assert offset == 0 and abs(first[file] - size) <= bound, (load, file, first[file], size)
            mine = [(f"{plan.ranks[f.rank].files[f.index].stem}.distcp", o, n) for f in rr.files for o, n in f.ranges]
            assert mine == items, (name, load, rr.rank)


GQA_TP2 = MEGATRON_MOE_CASES["gqa-stacked-tp2-ep2"][0]


@pytest.mark.parametrize(("extra", "message"), [
    (["++workload.restore.expert=3"], "workload.restore.expert=3: must divide model.moe.num_experts (4)"),
    (["++workload.restore.expert=1"], "workload.restore.expert=1: cannot load the optimizer's state saved at expert "
                                      "parallelism 2"),
    (["++workload.restore.tensor=1", "++workload.restore.world_size=3"],
     "workload.restore.world_size=3: must give each pipeline stage a multiple of expert x expert_tensor (2 x 1)"),
    (["++workload.restore.tensor=3"], "workload.restore.tensor=3: must divide the split width "
                                      "model.transformer.num_attention_heads=4 gives (4)"),
])
def test_a_moe_load_megatron_cannot_do_is_refused_naming_the_key_and_rule(extra, message):
    workload = workload_of(GQA_TP2, *extra)
    with pytest.raises(ConfigError) as info:
        restore_plan(workload, make_plan(workload, 4))
    assert message in str(info.value)


@pytest.mark.parametrize(("extra", "message"), [
    (["workload=tiny", "++workload.checkpoint.layout=megatron"], "workload.restore.expert=2: means nothing for a "
                                                                 "dense model"),
    (["workload=tiny_moe", "++workload.checkpoint.layout=dcp"], "workload.restore.expert=2: means nothing with "
                                                                "checkpoint.layout=dcp"),
])
def test_expert_parallelism_at_the_load_is_refused_where_nothing_reads_it(extra, message):
    with pytest.raises(ConfigError) as info:
        check_job(compose([*extra, "++workload.restore.expert=2"], None)[0])
    assert message in str(info.value)


def test_a_scaled_moe_save_loads_at_other_parallelisms_with_the_shapes_it_saved():
    """checkpoint.scale rounds widths to the save's TP and expert TP: a load at TP 1 and EP 4 asks for the tensors
    as saved, and every stored byte is read by some rank."""
    from dlio_ckpt.plan.layouts.megatron_moe import load_layout

    workload = workload_of(GQA_TP2, "++workload.checkpoint.scale=0.3", "++workload.restore.tensor=1",
                           "++workload.restore.expert=4", "++workload.restore.world_size=4")
    plan = make_plan(workload, 4)
    loaded = load_layout(workload, plan.layout, 4)  # type: ignore[arg-type]
    assert {t.fqn: t.shape for t in loaded.tensors()} == {t.fqn: t.shape for t in plan.layout.tensors()}
    restore = restore_plan(workload, plan)
    read = {(f.rank, f.index, r) for rr in restore.ranks for f in rr.files for r in f.ranges}
    assert sum(n for _, _, (_, n) in read) == sum(f.size for r in plan.ranks for f in r.files)


@pytest.mark.parametrize(("extra", "ranks"), [
    ([], 2),  # no expert parallelism at TP 1: every rank holds every tensor, and both chains' state is one's
    (["++workload.restore.world_size=4", "++workload.restore.model_only=True", "++workload.restore.expert=2"], 0),
])
def test_what_a_moe_load_needs_is_what_each_rank_holds(extra, ranks):
    """The bytes a rank needs are those of the chunks it holds, in each one's stored dtype (the router's bias in
    fp32, the optimizer's parameters in fp32, its moments in moments_datatype): saved without EP at TP 1, each of
    2 loading ranks needs every byte saved; loaded at EP 2, the model alone, the ranks of an EP rank need the
    dense model and half the experts, the two EP ranks every byte of the model together."""
    workload = workload_of(MEGATRON_MOE_CASES["no-ep"][0], "++workload.model.moments_datatype=bf16", *extra)
    plan = make_plan(workload, 2)
    restore = restore_plan(workload, plan)
    items = [i for r in plan.ranks for f in r.files for i in f.items]
    if ranks:
        assert [r.needed for r in restore.ranks] == [sum(i.nbytes + len(i.pickled) for i in items)] * ranks
        return
    model = [i for i in items if not i.fqn.startswith("optimizer.")]
    experts = sum(i.nbytes + len(i.pickled) for i in model if ".experts.experts." in i.fqn)
    dense = sum(i.nbytes + len(i.pickled) for i in model) - experts
    assert [r.needed for r in restore.ranks] == [dense + experts // 2] * 4
