"""Extensions from other packages: a storage backend that another installed package registers with an
entry point runs a checkpoint end to end, with no line of the tool changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support import PLUGINS
from tests.support.cli import dlio


def installed(site: Path) -> Path:
    """The plugin as ``pip install`` leaves it: its package, and a ``.dist-info`` naming its entry point."""
    shutil.copytree(PLUGINS / "dlio_ckpt_flatfs", site / "dlio_ckpt_flatfs")
    info = site / "dlio_ckpt_flatfs-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dlio_ckpt_flatfs\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dlio_ckpt.backends]\nflatfs = dlio_ckpt_flatfs:BACKEND\n")
    return site


def test_a_backend_registered_by_another_package_saves_and_restores(tmp_path):
    site = installed(tmp_path / "site")
    store = tmp_path / "store"
    store.mkdir()
    res = dlio(["run", "--world-size", "2", "workload=tiny", "++workload.storage.storage_type=flatfs",
                f"++workload.storage.storage_root={store}", "++workload.checkpoint.num_checkpoints_write=1",
                "++workload.checkpoint.num_checkpoints_read=1", f"++hydra.run.dir={tmp_path / 'run'}"],
               tmp_path, env={"PYTHONPATH": str(site)})
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["file_systems"]["checkpoint_storage"] == "flatfs"
    assert summary["metric"]["load_checkpoint_duration_mean_seconds"] > 0  # read back (and verified)
    provenance = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert provenance["storage_library"]["name"] == "flatfs"  # a fact of its registry entry
    step = "checkpoints%2Ftiny%2Fglobal_epoch1_step1%2F"
    assert sorted(p.name for p in store.iterdir() if p.name.endswith(".pt")) == [  # the tiny job's files, flat
        f"{step}model_0_model_states.pt", f"{step}model_1_model_states.pt",
        f"{step}zero_pp_rank_0_mp_rank_0_optim_states.pt", f"{step}zero_pp_rank_0_mp_rank_1_optim_states.pt"]
