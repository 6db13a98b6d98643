"""Bad input: one message naming key, value and rule; exit 2; nothing created. In this process (the
``dlio_here`` fixture): the same command line, parser, composition and checks as ``python -m dlio_ckpt``, without
a process's start for each case; tests/e2e/test_bad_input.py holds a few of these cases to the real entry point."""

from __future__ import annotations

import pytest

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
    (["workload=tiny", "workload.checkpoint.fsyncc=1"], "not a key of the configuration (did you mean "
                                                        "workload.checkpoint.fsync?)"),
    (["workload=tiny", "workload.checkpoint.format=raw"], "not in the workload's YAML, so Hydra cannot override it: "
                                                          "write ++workload.checkpoint.format=..."),
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
def test_bad_input_is_rejected_before_anything_is_written(tmp_path, dlio_here, args, needle):
    for command in (["plan", "--world-size", "4"], []):
        res = dlio_here(command + args)
        assert res.returncode == 2, res.stderr
        assert needle in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
        assert list(tmp_path.iterdir()) == [], "nothing may be created on bad input"


def test_user_config_dir_and_malformed_yaml(tmp_path, dlio_here):
    conf = tmp_path / "conf" / "workload"
    conf.mkdir(parents=True)
    (conf / "broken.yaml").write_text("model: [unclosed\n")
    (conf / "mine.yaml").write_text("model:\n  name: mine\n  num_layers: 2\n")
    res = dlio_here(["plan", "workload=broken", "--config-dir", str(tmp_path / "conf"), "--world-size", "1"])
    assert res.returncode == 2 and "error" in res.stderr.lower()
    res = dlio_here(["plan", "workload=mine", "--config-dir", str(tmp_path / "conf"), "--world-size", "1",
                     "--format", "json"])
    assert res.returncode == 0, res.stderr
    assert '"world_size": 1' in res.stdout


# One bad input for each rule of config.py that the table above and the other files' tables do not
# already hold (empty paths and override keys: test_run_folder.py; tiers: test_tiers.py; real modes'
# emulator-only keys and storages: below), on one process.
RULES = [
    (["--world-size", "0"], "--world-size=0: must be >= 1"),
    (["--world-size", "262148"], "--world-size=262148: must be <= 262144"),
    (["++workload.mode=fsdp", "--world-size", "2"], "--world-size=2: mode=fsdp runs one rank per process (1 here)"),
    (["++workload.checkpoint.mode=subset", "++workload.model.parallelism.data=1", "--world-size", "4"],
     "data*tensor*pipeline=2 must be >= the world size 4"),
    (["++workload.mode=lightning", "++workload.lightning.checkpoint_io=s3"],
     "workload.lightning.checkpoint_io='s3': needs storage_type=s3 (storage_type is local_fs)"),
    (["++workload.mode=lightning", "++workload.lightning.checkpoint_io=dataflux"],
     "workload.lightning.checkpoint_io='dataflux': needs storage_type=gcs (storage_type is local_fs)"),
    # this environment's google-cloud-storage 3 (gcsfs 2026 needs it): Dataflux runs from .venv-dataflux
    (["++workload.mode=lightning", "++workload.lightning.checkpoint_io=dataflux", "++workload.storage.storage_type=gcs",
      "++workload.storage.storage_root=b", "++workload.storage.storage_options.endpoint_url=http://127.0.0.1:9"],
     "workload.lightning.checkpoint_io='dataflux': needs gcs-torch-dataflux with google-cloud-storage<3"),
    # hosts and their own tiers (test_hosts.py runs them)
    (["++workload.storage.storage_type=s3", "++workload.storage.storage_root=b", "++workload.storage.scope=node"],
     "workload.storage.scope='node': needs a folder on each host (local_fs); storage_type=s3 is one store"),
    (["++workload.restore.lost_hosts=[1]"], "workload.restore.lost_hosts=[1]: needs a node-scoped read tier"),
    (["++workload.storage.scope=node", "++workload.restore.lost_hosts=[0]"],
     "no tier below workload.storage holds a lost host's share"),
    (["++workload.hosts.simulate=2", "++workload.storage.scope=node",
      "++workload.tiers=[{storage_type: local_fs, storage_root: p, scope: peer, replicas: 2}]"],
     "workload.tiers[0].replicas=2: must be below the number of hosts (2)"),
    (["++workload.hosts.simulate=3", "--world-size", "2"], "workload.hosts.simulate=3: must divide the 1 processes"),
    (["++workload.storage.scope=node", "++workload.checkpoint.recovery_rank_shift=True"],
     "recovery_rank_shift=True: reads another host's files, and workload.storage (the read tier) is node-scoped"),
    (["++workload.mode=fsdp", "++workload.tiers=[{storage_type: local_fs, storage_root: far}]"],
     "tiers apply to emulated runs only"),
    (["++workload.tiers=[{storage_type: gds, storage_root: far}]"],
     "workload.tiers[0].storage_type='gds': cannot be a tier"),
    (["++workload.mode=lightning", "++workload.lightning.nhead=3"], "nhead=3 must divide ninp=200"),
    (["++workload.checkpoint.staging=real"], "workload.checkpoint.staging='real': applies to async saves only"),
    (["++workload.mode=fsdp", "++workload.model.model_datatype=int8"], "mode=fsdp trains in one of fp16, bf16"),
    (["workload.checkpoint.formt=raw"], "workload.checkpoint.formt: not a key of the configuration (did you mean "
                                        "workload.checkpoint.format?)"),
    (["plan", "--world-size", "2", "--mtbf-hours", "8"], "--mtbf-hours=8.0: the goodput what-if needs "
                                                         "--write-bandwidth and --read-bandwidth too"),
    (["plan", "--world-size", "2", "--write-bandwidth", "1GB/s", "--mtbf-hours", "8"],
     "--mtbf-hours=8.0: the goodput what-if needs --read-bandwidth too"),
    (["plan", "--world-size", "2", "--hosts", "4"], "--hosts=4: is the what-if's host count for "
                                                    "--interconnect-bandwidth"),
    (["plan", "--world-size", "2", "--replace-results"], "dlio_ckpt: error: unrecognized arguments: --replace-results"),
    (["--write-bandwidth", "1GB/s"], "dlio_ckpt: error: unrecognized arguments: --write-bandwidth"),
    (["plan", "--world-size", "2", "--write-bandwidth", "20", "--read-bandwidth", "1GB/s", "--mtbf-hours", "8"],
     "--write-bandwidth='20': must be a positive rate such as 20GB/s, 500MiB/s or 1.5TB/s"),
    (["plan", "--world-size", "2", "--write-bandwidth", "1GB/s", "--read-bandwidth", "1GB/s", "--mtbf-hours", "0"],
     "--mtbf-hours=0.0: must be > 0"),
    (["++workload.mode=gds", "++workload.checkpoint.format=raw"], "workload.checkpoint.format='raw': applies to "
                                                                  "emulated runs only"),
    (["++workload.storage.storage_options.threads=256", "++workload.storage.storage_options.queue_depth=64",
      "++workload.checkpoint.chunk_size=67108864", "--world-size", "2"],
     "workload.storage.storage_options.queue_depth=64: holds 2064.00 GiB of I/O buffers per process"),
    (["++workload.storage.storage_options.queue_depth=65", "--world-size", "2"],
     "queue_depth=65: Input should be less than or equal"),
    (["++workload.mode=fsdp", "++workload.storage.storage_type=s3", "++workload.storage.storage_root=b",
      "++workload.storage.storage_options.library=botocore"],
     "workload.storage.storage_options.library='botocore': applies to emulated runs only"),
]


@pytest.mark.parametrize("args,said", RULES)
def test_each_rule_has_its_bad_input(tmp_path, dlio_here, args, said):
    head = args[:1] if args[:1] == ["plan"] else []
    res = dlio_here([*head, "workload=tiny", "++workload.checkpoint.num_checkpoints_read=0", *args[len(head):]])
    assert res.returncode == 2 and said in res.stderr, res.stderr
    assert res.stderr.count("error:") == 1 and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == [], "nothing may be created on bad input"


PLANS_OWN = [("--format", "json"), ("--write-bandwidth", "20GB/s"), ("--read-bandwidth", "40GB/s"),
             ("--mtbf-hours", "8"), ("--drain-bandwidth", "5GB/s"), ("--interconnect-bandwidth", "25GB/s"),
             ("--hosts", "4")]


@pytest.mark.parametrize("flag,value", PLANS_OWN)
@pytest.mark.parametrize("command", [[], ["run"], ["sweep"], ["tune"]])
def test_plan_only_options_are_refused_elsewhere_by_name(tmp_path, dlio_here, command, flag, value):
    """A run, sweep or tune given plan's what-if options measured the storage and ignored them, silently. Each
    command's parser takes only its own options, so argparse refuses plan's, naming the option and the command."""
    res = dlio_here([*command, "workload=tiny", flag, value])
    said = f"unrecognized arguments: {flag}"
    assert res.returncode == 2 and said in res.stderr, res.stderr
    assert res.stderr.startswith("dlio_ckpt: error:" if command in ([], ["run"]) else f"dlio_ckpt {command[0]}: error:")
    assert res.stderr.count("error:") == 1 and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == [], "nothing may be created on bad input"


def test_a_read_only_what_if_gives_the_loads_time(tmp_path, dlio_here):
    """--read-bandwidth alone: how long a restart's load takes, without the write bandwidth and MTBF the goodput
    needs (it was refused, naming --write-bandwidth=None)."""
    import json

    res = dlio_here(["plan", "workload=tiny", "--world-size", "2", "--read-bandwidth", "1GB/s", "--format", "json"])
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    load = out["restore"]["bytes_read_per_rank"]["max"] * 2 / 1e9  # the heaviest of the load's 2 ranks
    assert "goodput" not in out and out["load"]["load_seconds"] == load
    table = dlio_here(["plan", "workload=tiny", "--world-size", "2", "--read-bandwidth", "1GB/s"])
    assert table.returncode == 0 and f"load_seconds: {load:.4g}" in table.stdout
    assert "goodput" not in table.stdout and "None" not in table.stdout + table.stderr
    assert list(tmp_path.iterdir()) == []
