"""``checkpoint.layout=megatron`` held to Megatron-core's own ``torch_dist`` saves on CPU
(``tests/oracles/megatron_save.py``: a GPTModel, the distributed optimizer after one Adam step, the fully
parallel save): the same file names, every ``.distcp`` file within 0.5% (equal to the byte with
megatron-core 0.16.1 and torch 2.13.0), ``.metadata`` within 10%, ``common.pt`` and ``metadata.json``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.layouts import make_plan

pytestmark = pytest.mark.real
ORACLE = Path(__file__).resolve().parent / "oracles" / "megatron_save.py"

# world, TP, layers, hidden, ffn, heads, kv heads, vocabulary, dtype, files per rank
CASES = [
    pytest.param(1, 1, 2, 256, 688, 8, 4, 1000, "fp32", 2, id="1-rank"),
    pytest.param(2, 1, 2, 256, 688, 8, 4, 1000, "bf16", 2, id="dp2-fully-parallel"),
    pytest.param(2, 2, 2, 256, 688, 8, 4, 1000, "bf16", 2, id="tp2"),
    pytest.param(4, 2, 3, 192, 520, 6, 2, 998, "fp32", 1, id="tp2-dp2-other-shape-1-file"),
]


@pytest.mark.parametrize(("world", "tp", "layers", "hidden", "ffn", "heads", "kv", "vocab", "dtype", "files"), CASES)
def test_emulated_files_are_those_megatron_saves(tmp_path, world, tp, layers, hidden, ffn, heads, kv, vocab, dtype,
                                                 files):
    pytest.importorskip("megatron.core")
    out = tmp_path / "real"
    args = [str(a) for a in (out, world, tp, layers, hidden, ffn, heads, kv, vocab, dtype, files)]
    r = subprocess.run([sys.executable, str(ORACLE), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
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
    plan = make_plan(workload, world)
    plan.validate()
    emulated = {f"{f.stem}.distcp": f.size for r in plan.ranks for f in r.files} | \
        {c.name: c.size for c in plan.coordinator}
    assert sorted(emulated) == sorted(real)
    for name, size in real.items():
        print(f"{name}: emulated {emulated[name]} real {size} ({(emulated[name] - size) / size:+.2%})")
        bound = 0.10 if name == ".metadata" else 0.005
        assert abs(emulated[name] - size) <= bound * size, (name, emulated[name], size)


@pytest.mark.parametrize(("extra", "message"), [
    (["++workload.model.parallelism.tensor=3"], "workload.model.transformer.num_attention_heads=8: must be a multiple"),
    (["++workload.model.parallelism.pipeline=3"], "workload.model.num_layers=4: must divide into"),
    (["++workload.checkpoint.format=hdf5"], "means nothing with checkpoint.layout=megatron"),
])
def test_bad_megatron_input_is_refused_naming_the_rule(extra, message):
    from dlio_ckpt.errors import ConfigError

    with pytest.raises(ConfigError, match=message.split(": ")[1] if ": " in message else message) as info:
        compose(["workload=tiny", "++workload.checkpoint.layout=megatron", *extra], None)
    assert message in str(info.value)
