"""Bad input through the real entry point, ``python -m dlio_ckpt`` (under mpiexec too): exit 2, one message
naming key, value and rule, nothing created. tests/unit/test_validation.py holds every rule's case in this
process; here a case of each kind of refusal (Hydra's composition, a rule of the configuration, argparse's, a
rule of the job's processes) is held to what a user's shell sees; and runs that follow a refusal, or that an
option must not refuse."""

from __future__ import annotations

import pytest

from tests.support.cli import dlio

REFUSED = [  # (command line, what the one message says), each also in tests/unit/test_validation.py's tables
    (["workload=nope"], "available: "),  # Hydra's: no such workload
    (["workload=tiny", "++workload.checkpoint.num_checkpoints_write=abc"], "num_checkpoints_write='abc'"),  # a type
    (["workload=tiny", "--world-size", "0"], "--world-size=0: must be >= 1"),  # the command line's own rule
    (["sweep", "workload=tiny", "--read-bandwidth", "40GB/s"], "unrecognized arguments: --read-bandwidth"),  # argparse
]


@pytest.mark.parametrize("args,said", REFUSED)
def test_bad_input_exits_2_with_one_message_and_creates_nothing(tmp_path, args, said):
    res = dlio(args, tmp_path)
    assert res.returncode == 2 and said in res.stderr, res.stderr
    assert res.stderr.count("error:") == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("dlio_ckpt sweep: error:" if args[0] == "sweep" else "dlio_ckpt: error:")
    assert list(tmp_path.iterdir()) == [], "nothing may be created on bad input"


def test_options_that_work_today_still_do(tmp_path):
    """Options come between overrides, plan's with plan and run's with a run, as before."""
    plan = dlio(["plan", "workload=tiny", "--format", "json", "++workload.checkpoint.scale=0.5", "--world-size", "2",
                 "--write-bandwidth", "1GB/s", "--read-bandwidth", "2GB/s", "--mtbf-hours", "1"], tmp_path)
    assert plan.returncode == 0 and "goodput" in plan.stdout, plan.stderr
    assert list(tmp_path.iterdir()) == []
    run = dlio(["workload=tiny", "--world-size", "2", "++hydra.run.dir=r", "--replace-results",
                "++workload.checkpoint.scale=0.01", "++workload.checkpoint.checkpoint_folder=ck"], tmp_path)
    assert run.returncode == 0, run.stderr


def test_a_read_only_run_names_both_layouts_and_the_key(tmp_path):
    """Reading another layout's checkpoint said "written with another layout" and named neither."""
    base = ["workload=tiny", "--world-size", "2", "++workload.checkpoint.checkpoint_folder=ck",
            "++workload.checkpoint.scale=0.01", "++workload.checkpoint.progress=False"]
    w = dlio([*base, "++workload.checkpoint.layout=deepspeed", "++workload.checkpoint.num_checkpoints_write=1",
              "++workload.checkpoint.num_checkpoints_read=0", "++hydra.run.dir=w"], tmp_path)
    assert w.returncode == 0, w.stderr
    r = dlio([*base, "++workload.checkpoint.num_checkpoints_write=0", "++workload.checkpoint.num_checkpoints_read=1",
              "++hydra.run.dir=r"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert "workload.checkpoint.layout='dlio': global_epoch1_step1 in ./ck was written with " \
           "checkpoint.layout=deepspeed, and this run reads checkpoint.layout=dlio's files: set " \
           "++workload.checkpoint.layout=deepspeed to read it" in r.stderr, r.stderr
    assert r.stderr.count("error:") == 1 and not (tmp_path / "r").exists()
    same = dlio([*base, "++workload.checkpoint.layout=deepspeed", "++workload.checkpoint.num_checkpoints_write=0",
                 "++workload.checkpoint.num_checkpoints_read=1", "++hydra.run.dir=r"], tmp_path)
    assert same.returncode == 0, same.stderr


@pytest.mark.mpi
def test_lightning_on_more_than_one_process_is_refused(tmp_path):
    res = dlio(["workload=lightning_demo"], tmp_path, nprocs=2)
    assert res.returncode == 2 and "workload.mode='lightning': runs one process" in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []
