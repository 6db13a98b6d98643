"""``checkpoint.layout=dcp`` held to the real thing: the files a real ``dcp.save`` of an FSDP2 job writes
here (``mode=fsdp``, gloo on CPU) against the emulated plan of the same workload, byte for byte and item by
item; ``torch.save``'s archives against our own; the model's tensors against Hugging Face transformers'
``LlamaForCausalLM`` (the class that real mode trains); and the layout run end to end under mpiexec on every
backend."""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.plan.formats import file_size
from dlio_ckpt.plan.formats.pt import archive, tensor_pickle
from dlio_ckpt.plan.layouts import make_plan
from tests.support import ORACLES
from tests.support.bounds import DCP_METADATA
from tests.support.dcp_files import assert_files_are_dcps, real_save, real_saves
from tests.support.dcp_moe_model import GQA, MLA, moe_overrides
from tests.support.workloads import datatypes

SHAPE_B = ["++workload.model.num_layers=2", "++workload.model.transformer.hidden_size=192",
           "++workload.model.transformer.ffn_hidden_size=520", "++workload.model.transformer.num_attention_heads=6",
           "++workload.model.transformer.num_kv_heads=2", "++workload.model.transformer.vocab_size=997"]


# world size, writer threads (files per rank), the model: two shapes, one whose dim 0 does not divide (2 ranks,
# 2 files each, bf16, vocabulary 1001: the save traced in tests/against_frameworks/test_io_patterns.py, checked there
# by tests/support/dcp_files.py's assert_files_are_dcps)
ORACLE = [
    pytest.param(1, 1, datatypes("fp32"), id="1-rank"),
    pytest.param(2, 1, datatypes("fp32"), id="2-ranks"),
    pytest.param(4, 1, [*datatypes("fp32"), "++workload.model.transformer.vocab_size=1001"], id="4-ranks-uneven"),
    pytest.param(4, 2, [*datatypes("bf16"), *SHAPE_B], id="4-ranks-2-files-shape-b"),
    pytest.param(1, 2, [*datatypes("fp32"), *SHAPE_B], id="1-rank-2-files-shape-b"),
]


@pytest.fixture(scope="module")
def dcp_saves(tmp_path_factory) -> dict[str, Path]:
    """Every case's real dcp.save (``mode=fsdp``), its folder by case id: the cases of one world size as the points
    of one sweep (``real_saves``: each process imports torch and transformers once for them all, most of a real
    save's cost here), a world size's only case by ``real_save``."""
    worlds: dict[int, dict[str, tuple[int, list[str]]]] = {}
    for case in ORACLE:
        world, threads, extra = case.values
        worlds.setdefault(world, {})[case.id] = (threads, extra)
    saves = {}
    for world, cases in worlds.items():
        tmp = tmp_path_factory.mktemp(f"dcp_saves_{world}")
        if len(cases) == 1:
            ((name, (threads, extra)),) = cases.items()
            saves[name] = real_save(tmp, world, threads, extra)
        else:
            saves |= real_saves(tmp, world, cases)
    return saves


@pytest.mark.real
@pytest.mark.mpi
@pytest.mark.parametrize(("world", "threads", "extra"), ORACLE)
def test_emulated_files_are_those_dcp_save_writes(dcp_saves, request, world, threads, extra):
    """Every ``.distcp`` equal to the byte, and item by item: the same names at the same offsets with the same
    lengths, in the same files (each item a whole ``torch.save`` archive); ``.metadata`` within its tolerance."""
    assert_files_are_dcps(dcp_saves[request.node.callspec.id], world, threads, extra)


def test_torch_save_archives_are_ours_to_the_byte():
    torch = pytest.importorskip("torch")
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    for name, dtype in dtypes.items():
        for shape in [(), (1,), (128,), (500, 256), (0, 256), (70000, 3), (3, 70000), (2, 3, 4, 5)]:
            buf = io.BytesIO()
            torch.save(torch.zeros(shape, dtype=dtype), buf)
            nbytes = torch.zeros(shape, dtype=dtype).nbytes
            assert file_size(archive(tensor_pickle(name, shape), [nbytes], b"0" * 40)) == len(buf.getvalue())
    for value in [1e-4, (0.9, 0.999), False, None, ["model.layers.0.self_attn.q_proj.weight"] * 30]:
        buf = io.BytesIO()
        torch.save(value, buf)
        assert file_size(archive(pickle.dumps(value, protocol=2), [], b"0" * 40)) == len(buf.getvalue())


# tiny, and llama3_8b's and llama3_70b's shapes (as the workloads give them), and one whose vocabulary and
# FFN width divide by nothing
MODELS = [pytest.param(["workload=tiny"], id="tiny"), pytest.param(["workload=llama3_8b"], id="llama3_8b"),
          pytest.param(["workload=llama3_70b"], id="llama3_70b"),
          pytest.param(["workload=tiny", *SHAPE_B], id="shape-b")]


@pytest.mark.parametrize("model", MODELS)
def test_the_layouts_tensors_are_transformers_llama_and_mode_fsdps(model):
    """Names, shapes, count and order of the layout's model tensors, of transformers' ``LlamaForCausalLM`` on the
    meta device (its state dict: what ``dcp.save`` writes) and of ``mode=fsdp``'s module, all the same."""
    import torch
    from transformers import LlamaForCausalLM

    from dlio_ckpt.plan.layouts.dcp import DcpParams
    from dlio_ckpt.run.real.llama import Llama, llama_config

    workload, _, _ = compose([*model, "++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1",
                              "++workload.model.parallelism.pipeline=1"], None)
    shape = TransformerShape.from_model(workload.model)
    with torch.device("meta"):
        hf = LlamaForCausalLM(llama_config(shape))
        ours = Llama(shape)
    theirs = [(n, tuple(t.shape)) for n, t in hf.state_dict().items()]
    assert theirs == [(n, tuple(p.shape)) for n, p in hf.named_parameters()]  # no buffer saved, nothing tied
    assert theirs == list(shape.named_shapes())
    assert theirs == [(n, tuple(t.shape)) for n, t in ours.state_dict().items()]
    layout = DcpParams.from_workload(workload, 64)
    assert [(n, s) for n, s, _ in layout.params()] == theirs
    assert len(theirs) == 9 * shape.num_layers + 3
    assert sum(p.numel() for p in hf.parameters()) == shape.num_parameters
    model_tensors = [t for t in layout.tensors() if t.fqn.startswith("model.")]
    assert [t.fqn for t in model_tensors] == [f"model.{n}" for n, _ in theirs] and all(t.sharded for t in model_tensors)


MOE_ORACLE = ORACLES / "dcp_moe_save.py"
# world, and the oracle's model: torchtitan's modules and placements (tests/oracles/dcp_moe_save.py)
MOE_CASES = [
    pytest.param(4, {"layers": 3, "dense": 1, "experts": 4, "shared": 1, "bias": True, "ep": 2, "threads": 1,
                     "mla": MLA}, id="mla-ep2-whole-experts-per-rank"),
    pytest.param(4, {"layers": 2, "dense": 0, "experts": 2, "shared": 0, "bias": False, "ep": 2, "threads": 2, **GQA},
                 id="gqa-ep2-expert-rows-split-2-files-empty-router-shards"),
    pytest.param(3, {"layers": 3, "dense": 1, "experts": 4, "shared": 1, "bias": True, "ep": 1, "threads": 1,
                     "vocab": 1001, **GQA, "head_dim": 16, "qk_norm": False}, id="no-ep-uneven-empty-expert-shard"),
]


def moe_config(model: dict) -> dict:
    return {"dim": 64, "inter": 96, "vocab": 1000, "heads": 4, "moe_inter": 32, **model}


@pytest.fixture(scope="module")
def moe_saves(tmp_path_factory) -> dict[str, Path]:
    """Every MoE case's real save, made by one run of the oracle (torch imported once, each case's ranks forked from
    it afresh in turn): its folder by case id."""
    tmp = tmp_path_factory.mktemp("dcp_moe_saves")
    args = [a for case in MOE_CASES for a in (str(tmp / case.id), str(case.values[0]),
                                              json.dumps(moe_config(case.values[1])))]
    r = subprocess.run([sys.executable, str(MOE_ORACLE), *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return {case.id: tmp / case.id for case in MOE_CASES}


@pytest.mark.real
@pytest.mark.parametrize(("world", "model"), MOE_CASES)
def test_emulated_moe_files_are_those_dcp_save_writes_for_torchtitans_placements(moe_saves, request, world, model):
    """Every ``.distcp`` equal to the byte (expert chunks, DCP's deduplication of the experts' bias and of the
    empty shards past a tensor's last rows, the split into files by whole-tensor size), ``.metadata`` within
    ``DCP_METADATA``. The real saves: ``moe_saves``."""
    c, out = moe_config(model), moe_saves[request.node.callspec.id]
    real = {p.name: p.stat().st_size for p in out.iterdir()}
    plan = make_plan(compose(moe_overrides(c), None)[0], world)
    plan.validate()
    emulated = {f"{f.stem}.distcp": f.size for r in plan.ranks for f in r.files}
    emulated[".metadata"] = plan.coordinator[0].size
    assert sorted(emulated) == sorted(real)
    for name, size in real.items():
        print(f"{name}: emulated {emulated[name]} real {size} ({(emulated[name] - size) / size:+.2%})")
        assert emulated[name] == size if name != ".metadata" else abs(emulated[name] - size) <= DCP_METADATA * size
