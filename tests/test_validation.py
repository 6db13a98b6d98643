"""Bad input: one message naming key, value and rule; exit 2; nothing created."""

from __future__ import annotations

import pytest

from .conftest import dlio

BAD = [
    (["workload=nope"], "available: "),
    ([], "You must specify 'workload'"),
    (["workload=tiny", "++workload.checkpoint.fsyncc=True"], "did you mean 'fsync'"),
    (["workload=tiny", "++workload.checkpoint.num_checkpoints_write=abc"], "num_checkpoints_write='abc'"),
    (["workload=tiny", "++workload.checkpoint.num_checkpoints_write=-1"], "greater than or equal to 0"),
    (["workload=tiny", "++workload.checkpoint.num_checkpoints_read=5"], "must be <= num_checkpoints_write"),
    (["workload=tiny", "++workload.model.parallelism.tensor=3"], "tensor*pipeline=3 must divide the world size"),
    (["workload=tiny", "++workload.model.num_layers=1", "++workload.model.parallelism.pipeline=2"],
     "every pipeline stage needs a layer"),
    (["workload=tiny", "++workload.model.parallelism.zero_stage=3", "++workload.model.parallelism.pipeline=2"],
     "must be 1 with zero_stage=3"),
    (["workload=tiny", "++workload.checkpoint.mode=subset"], "is required when checkpoint.mode=subset"),
    (["workload=tiny", "++workload.model.parallelism.data=2"], "only allowed with checkpoint.mode=subset"),
    (["workload=tiny", "++workload.model.model_datatype=fp8"], "model_datatype='fp8'"),
    (["workload=tiny", "++workload.checkpoint.scale=0"], "scale=0"),
    (["workload=tiny", "++workload.storage.storage_type=nfs"], "storage_type='nfs'"),
    (["workload=tiny", "++workload.checkpoint.format=hdf9"], "format='hdf9'"),
    (["workload=tiny", "workload.checkpoint.fsyncc=1"], "not in the workload's YAML, so Hydra cannot override it"),
    (["workload=tiny", "++workload.checkpoint.fsync=[1"], "no viable alternative"),
    (["workload=tiny", "--config-dir", "/does/not/exist"], "--config-dir='/does/not/exist'"),
    (["workload=tiny", "++workload.workflow.train=True"], "workflow.train=True"),
    (["workload=tiny", "++workload.checkpoint.time_between_checkpoints=-1"], "time_between_checkpoints=-1"),
    (["workload=tiny", "++workload.checkpoint.chunk_size=5000"], "multiple of 4096"),
    (["workload=tiny", "++workload.model.num_layers=0"], "num_layers=0"),
    (["workload=tiny", "++workload.checkpoint.scale=2"], "less than or equal to 1"),
    (["workload=tiny", "++workload.checkpoint.io_timeout=-5"], "io_timeout=-5"),
    (["workload=tiny", "++workload.checkpoint.mode=partial"], "mode='partial'"),
    (["workload=tiny", "++workload.storage.storage_options.retries=-1", "--world-size", "2"],
     "storage_options.retries=-1"),
    (["workload=tiny", "++workload.model.parallelism.zero_stage=4"], "zero_stage=4"),
    (["workload=tiny", "++workload.storage.storage_type=s3", "++workload.storage.storage_root=b", "--world-size", "2",
      "++workload.storage.storage_options.read_size=1000"], "storage_options.read_size=1000: Value error, must be 0"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_is_rejected_before_anything_is_written(tmp_path, args, needle):
    for command in (["plan", "--world-size", "4"], []):
        res = dlio(command + args, tmp_path)
        assert res.returncode == 2, res.stderr
        assert needle in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
        assert list(tmp_path.iterdir()) == [], "nothing may be created on bad input"


def test_user_config_dir_and_malformed_yaml(tmp_path):
    conf = tmp_path / "conf" / "workload"
    conf.mkdir(parents=True)
    (conf / "broken.yaml").write_text("model: [unclosed\n")
    (conf / "mine.yaml").write_text("model:\n  name: mine\n  num_layers: 2\n")
    res = dlio(["plan", "workload=broken", "--config-dir", str(tmp_path / "conf"), "--world-size", "1"], tmp_path)
    assert res.returncode == 2 and "error" in res.stderr.lower()
    res = dlio(["plan", "workload=mine", "--config-dir", str(tmp_path / "conf"), "--world-size", "1",
                "--format", "json"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert '"world_size": 1' in res.stdout
