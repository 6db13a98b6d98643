"""``checkpoint.layout=lightning``: the one ``.ckpt`` global rank 0 of a Lightning job writes, of the demo transformer.
Its size is the real mode's prediction to the byte, its pickle torch.save's own for the same dict, and torch.load
opens it with the demo module's tensors and torch's Adam state; only the demo model is accepted. In this process;
tests/e2e/test_lightning_layout.py runs it as a user does, and tests/e2e/test_real_modes.py holds the prediction
to real Lightning files."""

from __future__ import annotations

import collections
import io
import zipfile

import pytest
import torch

from dlio_ckpt.config import compose
from dlio_ckpt.model.lightning_demo import predict
from dlio_ckpt.plan.formats import file_size, planned_size
from dlio_ckpt.plan.layouts import file_format, load_caveat, make_plan, restore_plan
from dlio_ckpt.plan.layouts.lightning import ADAM_GROUP, SGD_GROUP, VERSION, _pickle

LIGHTNING = ["workload=lightning_demo", "++workload.mode=emulated", "++workload.checkpoint.layout=lightning"]
SMALL = ["++workload.lightning.vocab_size=16", "++workload.lightning.ninp=4", "++workload.lightning.nhead=2",
         "++workload.lightning.nhid=8"]  # the demo's tensors, a few bytes each


def _workload(optimizer: str, layers: int, *extra: str):
    workload, _, _ = compose([*LIGHTNING, f"++workload.lightning.optimizer={optimizer}",
                              f"++workload.model.num_layers={layers}", *extra], None)
    return workload


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("layers", [2, 10, 100])
def test_rank_0_writes_one_file_of_the_predicted_size(optimizer, layers):
    workload = _workload(optimizer, layers)
    plan, fmt, p = make_plan(workload, 4), file_format(workload), predict(workload)
    plan.validate()
    assert [len(r.files) for r in plan.ranks] == [1, 0, 0, 0]
    f = plan.ranks[0].files[0]
    assert f"{f.stem}{fmt.extension}" == "checkpoint.ckpt"
    assert (f.payload_bytes, f.num_tensors) == (p.payload_bytes, p.num_tensors)
    assert f.size == planned_size(fmt, f) == file_size(fmt.segments(f)) == p.file_bytes


def test_the_command_in_the_docs_writes_the_prediction_and_past_4_gib_the_archive_grows_beyond_it():
    """1000 layers: SGD's 2.5 GiB file is the prediction; Adam's 7.4 GiB one needs zip64's headers for its records
    past 4 GiB, which the prediction (fitted at 100 layers and below) does not count: the archive's own size."""
    sgd = _workload("sgd", 1000)
    assert make_plan(sgd, 1).ranks[0].files[0].size == predict(sgd).file_bytes
    adam = _workload("adam", 1000)
    f, predicted = make_plan(adam, 1).ranks[0].files[0], predict(adam).file_bytes
    assert predicted < f.size < predicted * 1.0001
    assert file_size(file_format(adam).segments(f)) == f.size


def test_a_scaled_file_keeps_the_full_sizes_bytes_beyond_its_payload():
    full, scaled = _workload("adam", 10), _workload("adam", 10, "++workload.checkpoint.scale=0.01")
    plan, p = make_plan(scaled, 1), predict(full)
    plan.validate()
    f = plan.ranks[0].files[0]
    assert p.payload_bytes * 0.009 < f.payload_bytes < p.payload_bytes * 0.011
    assert f.size - f.payload_bytes == p.file_bytes - p.payload_bytes
    assert file_size(file_format(scaled).segments(f)) == f.size


def _torch_checkpoint(items, optimizer: str) -> dict:
    """The dict this layout pickles, built of torch's own objects (Lightning's keys but loops; no _metadata)."""
    params = [i for i in items if not i.fqn.startswith("optimizer_states")]
    state = {k: {"step": torch.tensor(0.0), "exp_avg": torch.zeros(i.shape), "exp_avg_sq": torch.zeros(i.shape)}
             for k, i in enumerate(params)} if optimizer == "adam" else {}
    group = dict((*(ADAM_GROUP if optimizer == "adam" else SGD_GROUP), ("params", list(range(len(params))))))
    return {"epoch": 0, "global_step": 0, "pytorch-lightning_version": VERSION,
            "state_dict": collections.OrderedDict((i.fqn, torch.zeros(i.shape)) for i in params), "callbacks": {},
            "optimizer_states": [{"state": state, "param_groups": [group]}], "lr_schedulers": []}


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("layers", [2, 34])  # 34: 1027 parameters, past the pickler's batches of 1000
def test_data_pkl_is_torch_saves_byte_for_byte(optimizer, layers):
    items = make_plan(_workload(optimizer, layers, *SMALL), 1).ranks[0].files[0].items
    buf = io.BytesIO()
    torch.save(_torch_checkpoint(items, optimizer), buf)
    assert _pickle(items) == zipfile.ZipFile(buf).read("archive/data.pkl")


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("layers", [1, 2, 3])  # sizes whose last bytes fall differently on the 64-byte alignment
def test_torch_load_opens_it_with_the_demo_modules_tensors_and_torchs_adam_state(tmp_path, optimizer, layers):
    workload = _workload(optimizer, layers, *SMALL)
    f = make_plan(workload, 1).ranks[0].files[0]
    path = tmp_path / "checkpoint.ckpt"
    with path.open("wb") as out:
        for segment in file_format(workload).segments(f):
            out.write(segment if isinstance(segment, bytes) else bytes(segment))  # payload: zeros
    assert path.stat().st_size == f.size == predict(workload).file_bytes
    loaded = torch.load(path, weights_only=False)
    from lightning.pytorch.demos import Transformer  # here, not at collection: 3 s a pytest worker

    s = workload.lightning
    module = Transformer(vocab_size=s.vocab_size, ninp=s.ninp, nhead=s.nhead, nhid=s.nhid, nlayers=layers)
    assert [(k, v.shape, v.dtype) for k, v in loaded["state_dict"].items()] == \
        [(f"model.{k}", v.shape, v.dtype) for k, v in module.state_dict().items()]
    optimizer_class = torch.optim.Adam if optimizer == "adam" else torch.optim.SGD
    real = optimizer_class(module.parameters(), lr=1e-3 if optimizer == "adam" else 0.1)
    for p in module.parameters():
        p.grad = torch.zeros_like(p)
    real.step()  # as after a training step: Adam's state exists
    ours, theirs = loaded["optimizer_states"][0], real.state_dict()
    assert ours["param_groups"] == theirs["param_groups"]
    assert {k: {n: (t.shape, t.dtype) for n, t in v.items()} for k, v in ours["state"].items()} == \
        {k: {n: (t.shape, t.dtype) for n, t in v.items()} for k, v in theirs["state"].items()}
    tensors = len(loaded["state_dict"]) + sum(len(v) for v in ours["state"].values())
    assert tensors == predict(workload).num_tensors
    assert set(loaded) == {"epoch", "global_step", "pytorch-lightning_version", "state_dict", "callbacks",
                           "optimizer_states", "lr_schedulers"}


def test_every_rank_of_the_load_reads_rank_0s_file_whole_as_lightnings_own_load():
    workload = _workload("adam", 2)
    plan = make_plan(workload, 3)
    restore = restore_plan(workload, plan)
    assert [[(f.rank, f.index, f.ranges) for f in r.files] for r in restore.ranks] == [[(0, 0, ())]] * 3
    assert {r.needed for r in restore.ranks} == {predict(workload).payload_bytes}
    assert load_caveat(workload, restore) is None
    one = make_plan(workload, 1)
    assert load_caveat(workload, restore_plan(workload, one)) is None  # rank 0 reading its own file: the same load


@pytest.mark.parametrize("world,model_only", [(4, False), (1, False), (3, True)])
def test_a_load_at_another_world_size_or_of_the_model_alone_still_reads_the_whole_file_on_every_rank(world,
                                                                                                     model_only):
    """Lightning's state is not sharded: any loading rank torch.loads rank 0's whole file; the model alone
    (load_from_checkpoint) reads it whole too, and needs the parameters only."""
    workload = _workload("adam", 2, f"++workload.restore.world_size={world}",
                         f"++workload.restore.model_only={model_only}")
    restore = restore_plan(workload, make_plan(workload, 2))
    assert (restore.world_size, restore.saved_world_size, restore.model_only) == (world, 2, model_only)
    assert [[(f.rank, f.index, f.ranges) for f in r.files] for r in restore.ranks] == [[(0, 0, ())]] * world
    parameters = predict(workload).num_parameters * 4  # fp32
    assert {r.needed for r in restore.ranks} == {parameters if model_only else predict(workload).payload_bytes}


OTHERS = [
    (["workload=tiny"], "workload.model.transformer.vocab_size=1000: describes another model than Lightning's demo"),
    (["workload=llama3_8b"], "workload.model.transformer.vocab_size=128256: describes another model"),
    (["workload=tiny_moe"], "workload.model.family='moe': describes another model"),
    ([*LIGHTNING[:2], "++workload.model.parallelism.tensor=2"], "workload.model.parallelism.tensor=2: means nothing"),
    ([*LIGHTNING[:2], "++workload.model.model_datatype=bf16"], "workload.model.model_datatype='bf16': describes"),
    ([*LIGHTNING[:2], "++workload.checkpoint.format=raw"], "workload.checkpoint.format='raw': means nothing"),
    ([*LIGHTNING[:2], "++workload.lightning.checkpoint_io=s3"], "workload.lightning.checkpoint_io='s3'"),
    ([*LIGHTNING[:2], "++workload.storage.scope=node"], "workload.storage.scope='node': every rank of Lightning's"),
    (["workload=lightning_demo"], "workload.checkpoint.layout='lightning': applies to emulated runs only"),
]


@pytest.mark.parametrize("args,needle", OTHERS)
def test_another_model_or_what_lightning_does_not_do_is_refused(tmp_path, dlio_here, args, needle):
    res = dlio_here(["plan", "--world-size", "2", *args, "++workload.checkpoint.layout=lightning"])
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_demo_is_accepted_in_the_emulated_mode(dlio_here):
    res = dlio_here(["plan", "--world-size", "2", *LIGHTNING, "++workload.model.num_layers=1000"])
    assert res.returncode == 0, res.stderr
    assert "layout lightning, world size 2" in res.stdout and "checkpoint.ckpt" in res.stdout, res.stdout
