"""The real training modes' bad input, refused before anything is written (in this process). The modes run for
real in tests/e2e/test_real_modes.py."""

from __future__ import annotations

import pytest

from tests.support.workloads import TINY_FSDP


@pytest.mark.parametrize("extra,message", [
    (["++workload.storage.storage_type=null"], "mode=fsdp supports storage_type local_fs, parallel_fs, s3, gcs"),
    (["++workload.checkpoint.num_checkpoints_write=0"], "must be >= 1 in mode=fsdp"),
    (["++workload.fsdp.thread_count=0"], "workload.fsdp.thread_count"),
    (["++workload.fsdp.backend=mpi"], "workload.fsdp.backend"),
    (["++workload.storage.storage_type=s3", "++workload.storage.storage_root=b",
      "++workload.storage.storage_options.endpoint_url=http://127.0.0.1:1",
      "++workload.storage.storage_options.spread_prefixes=4"], "applies to emulated runs only"),
    (["++workload.checkpoint.format=safetensors"], "workload.checkpoint.format='safetensors': applies to emulated"),
    (["++workload.checkpoint.odirect=True"], "workload.checkpoint.odirect=True: applies to emulated"),
])
def test_fsdp_bad_input_exits_2_before_anything_is_written(tmp_path, dlio_here, extra, message):
    r = dlio_here(TINY_FSDP + extra)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "hydra_log").exists()


def test_the_fsdp_llama_trains_to_finite_state_in_bf16():
    """mode=fsdp's model, made as it makes it (on the meta device, cast, ``to_empty``, ``init_weights``: here with
    no process group, which the weights' initialization does not need), gives finite logits and a finite Adam step:
    the state a real job saves, not NaN (``to_empty`` leaves the rotary buffers uninitialized; a bf16 model trained
    on them saved NaN, which compressing storage shrank to a few per cent of its size)."""
    import torch

    from dlio_ckpt.model.dense import TransformerShape
    from dlio_ckpt.run.real.llama import Llama

    with torch.device("meta"):
        model = Llama(TransformerShape(2, 256, 704, 1000, 8, 4)).to(torch.bfloat16)
    model.to_empty(device="cpu")
    for buffer in (model.model.rotary_emb.inv_freq, model.model.rotary_emb.original_inv_freq):
        buffer.fill_(float("nan"))  # what uninitialized memory may hold
    model.init_weights()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-8)
    tokens = torch.randint(0, 1000, (2, 33), generator=torch.Generator().manual_seed(0))
    logits = model(tokens[:, :-1])
    assert torch.isfinite(logits).all()
    torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten()).backward()
    opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(torch.isfinite(v).all() for state in opt.state.values() for v in state.values())
