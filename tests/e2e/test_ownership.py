"""The tool removes only what it wrote: ``overwrite``, ``keep_last``, sweeps' point folders and the
clean-up of an interrupted attempt remove exactly the files a manifest or a run record of dlio_ckpt
names; anything else is left alone, and where it sits in a step the run must replace, the run is
refused (exit 2) naming it, with nothing removed. On local files and on S3. The runs that write are processes;
those refused run in the test's process (:func:`refused`), as bad input is tested."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.support.cli import dlio
from tests.support.storage import Store

# tiny at 1/20 of its bytes (2 MiB a step, its files and their names as at full size): what is removed or kept is
# decided by names, manifests and run records, never by bytes, and each run and each tree() read is then quick
RUN = ["workload=tiny", "--world-size", "2", "++workload.checkpoint.checkpoint_folder=ck",
       "++workload.checkpoint.num_checkpoints_read=0", "++workload.checkpoint.scale=0.05"]
USERS = {"global_epoch1_step1.txt": b"p", "global_epoch1_step9_backup/keep": b"b",
         "global_epoch1_step12/mine.bin": b"m", "notes.md": b"n"}


@pytest.fixture(params=["local_fs", "s3"])
def where(request, tmp_path, monkeypatch) -> Store:
    if request.param == "local_fs":
        return Store("local_fs", str(tmp_path / "storage"))
    server = request.getfixturevalue("s3_server")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    root = f"{server.bucket}/owned-{time.monotonic_ns()}"
    return Store("s3", root, {"endpoint_url": server.endpoint}, dict(server.env))


def run(where: Store, cwd, *extra: str, rundir: str = "run"):
    return dlio([*RUN, *where.overrides(), f"++hydra.run.dir={cwd / rundir}", *extra], cwd, env=where.env)


def refused(dlio_here, where: Store, cwd, *extra: str, rundir: str = "run"):
    """The same run where the test expects it refused (exit 2, nothing written or removed): in this process, as
    bad input is tested (``dlio_here``); its storage checks are the same calls as a process's."""
    return dlio_here([*RUN, *where.overrides(), f"++hydra.run.dir={cwd / rundir}", *extra], cwd, env=where.env)


def tree(where: Store, folder: str = "ck") -> dict[str, bytes | None]:
    backend = where.backend()
    return {p: backend.get_small(backend.join(folder, p)) for p in backend.list_tree(backend.join(folder))
            if not p.endswith("/")}


def put(where: Store, files: dict[str, bytes], folder: str = "ck") -> None:
    backend = where.backend()
    for name, data in files.items():
        if where.storage_type == "local_fs":
            backend.makedirs(backend.join(folder, name.rsplit("/", 1)[0]) if "/" in name else backend.join(folder))
        backend.put_small(backend.join(folder, name), data)


def steps_of(files) -> list[str]:
    """The step folders and manifests among ``files`` (a user's global_epoch1_step1.txt is neither)."""
    return sorted({m.group(0) for p in files if (m := re.match(r"global_epoch1_step\d+(?=/|\.manifest\.json$)", p))})


def test_overwrite_removes_an_earlier_runs_steps_and_nothing_of_the_users(where, tmp_path):
    first = run(where, tmp_path, "++workload.checkpoint.num_checkpoints_write=3")
    assert first.returncode == 0, first.stderr
    put(where, USERS)
    before = tree(where)
    again = run(where, tmp_path, "++workload.checkpoint.overwrite=True", rundir="run2")
    assert again.returncode == 0, again.stderr
    after = tree(where)
    assert {p: after[p] for p in USERS} == USERS  # the user's files, byte for byte
    assert steps_of(after) == ["global_epoch1_step1", "global_epoch1_step12", "global_epoch1_step2"]
    assert not any(p.startswith("global_epoch1_step3") for p in after)  # the earlier run's third step is gone
    assert json.loads(after["dlio_ckpt_run.json"])["steps"] == [1, 2]
    assert set(before) - set(after) == {p for p in before if p.startswith("global_epoch1_step3")}


PLANTED = ["global_epoch1_step1/mine.bin", "global_epoch1_step3/mine.bin", "global_epoch1_step2.manifest.json",
           "dlio_ckpt_run.json"]


def test_a_foreign_file_where_a_step_must_be_replaced_refuses_the_run_and_nothing_is_removed(where, tmp_path,
                                                                                           dlio_here):
    """Step 1 is rewritten, step 3 (the earlier run's) removed: neither may hold a file of the user's;
    nor may a manifest or run record that this tool did not write stand under those names. Each planted file
    in turn beside one earlier run: a refused run removes nothing, so once the planted file is taken back (or
    ours put back where it replaced ours) the folder is the earlier run's again, byte for byte, for the next."""
    first = run(where, tmp_path, "++workload.checkpoint.num_checkpoints_write=3")
    assert first.returncode == 0, first.stderr
    ours = tree(where)
    backend = where.backend()
    for planted in PLANTED:
        put(where, {planted: b"the user's"})
        before = tree(where)
        again = refused(dlio_here, where, tmp_path, "++workload.checkpoint.overwrite=True", rundir="run2")
        assert again.returncode == 2, (planted, again.stderr)
        assert f"workload.checkpoint.checkpoint_folder='ck': holds {planted}" in again.stderr, again.stderr
        assert "which dlio_ckpt did not write" in again.stderr and "nothing was removed" in again.stderr
        assert tree(where) == before and not (tmp_path / "run2").exists(), planted
        if planted in ours:
            put(where, {planted: ours[planted]})
        else:
            backend.remove(backend.join("ck", planted))
        assert tree(where) == ours, planted


def test_a_step_this_run_writes_must_not_hold_a_foreign_file_even_in_an_empty_folder(tmp_path, dlio_here):
    """No earlier run of ours here at all: the user's own global_epoch1_step2/ is not written into."""
    where = Store("local_fs", str(tmp_path / "storage"))
    put(where, {"global_epoch1_step2/theirs.pt": b"x", "global_epoch1_step9.manifest.json": b"{}"})
    for extra in ([], ["++workload.checkpoint.overwrite=True"]):
        r = refused(dlio_here, where, tmp_path, *extra)
        assert r.returncode == 2 and "holds global_epoch1_step2/theirs.pt" in r.stderr, r.stderr
    assert tree(where) == {"global_epoch1_step2/theirs.pt": b"x", "global_epoch1_step9.manifest.json": b"{}"}


def test_an_interrupted_attempts_files_are_named_by_its_run_record_and_replaced(where, tmp_path, dlio_here):
    """A run killed before step 2 was committed leaves step 2's files without a manifest: the run
    record names them, so overwrite replaces them; without the record they would be refused."""
    first = run(where, tmp_path, "++workload.checkpoint.num_checkpoints_write=2")
    assert first.returncode == 0, first.stderr
    backend = where.backend()
    backend.remove(backend.join("ck", "global_epoch1_step2.manifest.json"))  # as if killed before the commit
    again = run(where, tmp_path, "++workload.checkpoint.overwrite=True",
                "++workload.checkpoint.num_checkpoints_write=1", rundir="run2")
    assert again.returncode == 0, again.stderr
    assert steps_of(tree(where)) == ["global_epoch1_step1"]
    backend.remove(backend.join("ck", "dlio_ckpt_run.json"))
    backend.remove(backend.join("ck", "global_epoch1_step1.manifest.json"))  # nothing names step 1's files now
    third = refused(dlio_here, where, tmp_path, "++workload.checkpoint.overwrite=True", rundir="run3")
    assert third.returncode == 2 and "holds global_epoch1_step1/" in third.stderr, third.stderr


def test_keep_last_removes_a_steps_files_and_leaves_a_foreign_one_with_its_folder(tmp_path):
    from dlio_ckpt.io.backends import get_backend
    from dlio_ckpt.run.steps import Writes, remove_step

    backend = get_backend("local_fs", str(tmp_path), {})
    step = tmp_path / "ck" / "global_epoch1_step1"
    step.mkdir(parents=True)
    for name in ("a.pt", "b.pt", "theirs.txt"):
        (step / name).write_bytes(b"x")
    (tmp_path / "ck" / "global_epoch1_step1.manifest.json").write_text("{}")
    remove_step(backend, "ck", 1, Writes((1,), ("a.pt", "b.pt")))
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["global_epoch1_step1"]
    assert [p.name for p in step.iterdir()] == ["theirs.txt"]
    (step / "theirs.txt").unlink()
    (step / "a.pt").write_bytes(b"x")
    remove_step(backend, "ck", 1, Writes((1,), ("a.pt",)))
    assert not step.exists()  # empty: the folder goes too


def test_a_run_record_of_an_earlier_version_without_the_folders_files_is_still_ours(tmp_path):
    """A record written before the folder's own files were listed names its steps' files all the same; one whose
    list is not a list of names is not ours."""
    from dlio_ckpt.io.backends import get_backend
    from dlio_ckpt.run.steps import RECORD, Writes, survey

    backend = get_backend("local_fs", str(tmp_path), {})
    (tmp_path / "ck" / "global_epoch1_step1").mkdir(parents=True)
    (tmp_path / "ck" / "global_epoch1_step1" / "a.pt").write_bytes(b"x")
    older = {"tool": "dlio_ckpt", "version": "0.1", "steps": [1], "files": ["a.pt"], "beside": []}
    (tmp_path / "ck" / RECORD).write_text(json.dumps(older))
    assert survey(backend, "ck", Writes((1,), ("a.pt",))).ours == [RECORD, "global_epoch1_step1/a.pt"]
    (tmp_path / "ck" / RECORD).write_text(json.dumps({**older, "folder": "latest"}))
    assert survey(backend, "ck", Writes((1,), ("a.pt",))).foreign == [RECORD, "global_epoch1_step1/a.pt"]


@pytest.mark.mpi
def test_a_sweep_removes_its_points_checkpoints_and_leaves_the_users_files(tmp_path):
    (tmp_path / "ck" / "sw").mkdir(parents=True)
    (tmp_path / "ck" / "sw" / "notes.txt").write_text("mine")
    (tmp_path / "ck" / "other").mkdir()
    r = dlio(["sweep", "workload=tiny", "++workload.checkpoint.checkpoint_folder=ck", "++workload.checkpoint.scale=.05",
              "++workload.checkpoint.num_checkpoints_read=1", "++workload.checkpoint.format=pt,raw",
              "++hydra.sweep.dir=sw"], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr
    assert sorted(str(p.relative_to(tmp_path / "ck")) for p in (tmp_path / "ck").rglob("*")) == [
        "other", "sw", "sw/notes.txt"]
    (tmp_path / "ck" / "sw" / "notes.txt").unlink()
    r = dlio(["sweep", "workload=tiny", "++workload.checkpoint.checkpoint_folder=ck", "++workload.checkpoint.scale=.05",
              "++workload.checkpoint.format=pt,raw", "++hydra.sweep.dir=sw2"], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["other", "sw"]  # sw2: emptied, removed


@pytest.mark.parametrize("case", ["symlink", "subfolder", "malformed_record", "leading_zero"])
def test_what_only_looks_like_ours_is_never_taken_for_ours(tmp_path, case, dlio_here):
    """A link inside a step is not entered and not ours; a folder of the user's inside a step is not
    ours; a record that claims to be ours without its lists is not ours (and no traceback); a step
    written global_epoch1_step01 is not step 1."""
    where = Store("local_fs", str(tmp_path / "storage"))
    first = run(where, tmp_path, "++workload.checkpoint.num_checkpoints_write=1")
    assert first.returncode == 0, first.stderr
    ck = tmp_path / "storage" / "ck"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine.bin").write_text("mine")
    if case == "symlink":
        (ck / "global_epoch1_step1" / "linked").symlink_to(elsewhere)
    elif case == "subfolder":
        (ck / "global_epoch1_step1" / "mydir").mkdir()
    elif case == "malformed_record":
        (ck / "dlio_ckpt_run.json").write_text('{"tool": "dlio_ckpt", "steps": [1], "beside": null}')
    else:
        (ck / "global_epoch1_step01").mkdir()
        (ck / "global_epoch1_step01" / "theirs.pt").write_text("x")
    before = sorted(str(p.relative_to(ck)) for p in ck.rglob("*"))
    if case == "leading_zero":  # not a step of ours: left alone, the run goes on
        again = run(where, tmp_path, "++workload.checkpoint.overwrite=True", rundir="run2")
        assert again.returncode == 0, again.stderr
        assert (ck / "global_epoch1_step01" / "theirs.pt").read_text() == "x"
        return
    again = refused(dlio_here, where, tmp_path, "++workload.checkpoint.overwrite=True", rundir="run2")
    assert again.returncode == 2 and "which dlio_ckpt did not write" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr
    assert {"symlink": "global_epoch1_step1/linked", "subfolder": "global_epoch1_step1/mydir/",
            "malformed_record": "dlio_ckpt_run.json"}[case] in again.stderr
    assert sorted(str(p.relative_to(ck)) for p in ck.rglob("*")) == before
    assert (elsewhere / "mine.bin").read_text() == "mine"


def test_the_storage_root_itself_as_checkpoint_folder_on_s3(tmp_path, s3_server, monkeypatch, dlio_here):
    """checkpoint_folder='.': the steps lie directly under the bucket's prefix, and an earlier run
    there is seen (refused without overwrite, replaced with it), with spread prefixes (without them: the test below)."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    for spread in (4,):  # '.' without spreading, locally and with foreign files: the test below
        where = Store("s3", f"{s3_server.bucket}/dot-{time.monotonic_ns()}",
                      {"endpoint_url": s3_server.endpoint, "spread_prefixes": spread}, dict(s3_server.env))
        dot = ["++workload.checkpoint.checkpoint_folder=."]
        assert run(where, tmp_path, *dot, rundir=f"a{spread}").returncode == 0
        held = refused(dlio_here, where, tmp_path, *dot, rundir=f"b{spread}")
        assert held.returncode == 2 and "already holds checkpoints of an earlier run" in held.stderr
        again = run(where, tmp_path, *dot, "++workload.checkpoint.overwrite=True", rundir=f"c{spread}")
        assert again.returncode == 0 and "removed" in again.stdout, again.stdout + again.stderr
    plain = Store("s3", f"{s3_server.bucket}/dot-{time.monotonic_ns()}", {"endpoint_url": s3_server.endpoint},
                  dict(s3_server.env))
    assert run(plain, tmp_path, "++workload.checkpoint.checkpoint_folder=.", rundir="d").returncode == 0
    spread = Store("s3", plain.root, {"endpoint_url": s3_server.endpoint, "spread_prefixes": 4}, dict(s3_server.env))
    other = refused(dlio_here, spread, tmp_path, "++workload.checkpoint.checkpoint_folder=.",
                    "++workload.checkpoint.overwrite=True",
                    rundir="e")  # written without spreading, now asked to hash every key: named, not mistaken
    assert other.returncode == 2 and "written with another storage_options.spread_prefixes" in other.stderr, \
        other.stderr


@pytest.mark.parametrize("kind, spread", [("local_fs", 0), ("s3", 0), ("s3", 4)], ids=["local", "s3", "s3-spread"])
def test_the_storage_root_itself_as_checkpoint_folder_keeps_what_is_not_ours(tmp_path, request, monkeypatch, kind,
                                                                            spread, dlio_here):
    """checkpoint_folder='.': the storage root is the checkpoint folder, so whatever else lies there is beside our
    steps. A user's files at the root, at a step's name and inside a folder of their own survive a run refused
    without overwrite and a run with it, byte for byte; a file of theirs inside a step the run must replace refuses
    that run (exit 2, naming it), and nothing is removed. Local files, and S3 with and without spread prefixes."""
    if kind == "local_fs":
        where = Store("local_fs", str(tmp_path / "storage"))
    else:
        server = request.getfixturevalue("s3_server")
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        where = Store("s3", f"{server.bucket}/dot-{time.monotonic_ns()}",
                      {"endpoint_url": server.endpoint, **({"spread_prefixes": spread} if spread else {})},
                      dict(server.env))
    dot = ["++workload.checkpoint.checkpoint_folder=.", "++workload.checkpoint.num_checkpoints_write=3"]
    first = run(where, tmp_path, *dot, rundir="a")
    assert first.returncode == 0, first.stderr
    theirs = {"notes.md": b"n", "global_epoch1_step1.txt": b"p", "mine/global_epoch1_step2/keep.bin": b"k"}
    put(where, theirs, ".")
    ours_before = {p for p in tree(where, ".") if p not in theirs}
    assert "global_epoch1_step3.manifest.json" in ours_before and "dlio_ckpt_run.json" in ours_before
    held = refused(dlio_here, where, tmp_path, *dot, rundir="b")
    assert held.returncode == 2 and "already holds checkpoints of an earlier run" in held.stderr, held.stderr
    again = run(where, tmp_path, "++workload.checkpoint.checkpoint_folder=.", "++workload.checkpoint.overwrite=True",
                rundir="c")  # two steps: the earlier run's third is removed, the user's files are not
    assert again.returncode == 0, again.stderr
    after = tree(where, ".")
    assert {p: after.get(p) for p in theirs} == theirs
    assert steps_of(after) == ["global_epoch1_step1", "global_epoch1_step2"]
    assert json.loads(after["dlio_ckpt_run.json"])["steps"] == [1, 2]
    put(where, {"global_epoch1_step2/mine.bin": b"the user's"}, ".")
    before = tree(where, ".")
    blocked = refused(dlio_here, where, tmp_path, "++workload.checkpoint.checkpoint_folder=.",
                      "++workload.checkpoint.overwrite=True", rundir="d")
    assert blocked.returncode == 2, blocked.stderr
    assert "holds global_epoch1_step2/mine.bin" in blocked.stderr and "nothing was removed" in blocked.stderr, \
        blocked.stderr
    assert tree(where, ".") == before and not (tmp_path / "d").exists()


@pytest.mark.parametrize("pattern", ["framework", "stream"])
def test_deepspeeds_files_beside_the_steps_are_rewritten_by_every_save_and_a_users_own_is_refused(tmp_path,
                                                                                                  dlio_here, pattern):
    """layout=deepspeed: rank 0 writes DeepSpeed's recovery scripts and ``latest`` (the newest step's name) in the
    checkpoint folder at every save, as DeepSpeed 0.19.8 does, on the first tier alone. No step's manifest lists
    them, keep_last leaves them, a drain to a lower tier copies the steps alone; the run record names them, so
    overwrite replaces them; a user's own ``latest`` there refuses the run (exit 2) and is left as it was."""
    where, lower = Store("local_fs", str(tmp_path / "storage")), tmp_path / "lower"
    ds = ["++workload.checkpoint.layout=deepspeed", f"++workload.checkpoint.io_pattern={pattern}"]
    first = run(where, tmp_path, *ds, "++workload.checkpoint.num_checkpoints_write=3", "++workload.storage.keep_last=1",
                f"++workload.tiers=[{{storage_type: local_fs, storage_root: {lower}}}]")
    assert first.returncode == 0, first.stderr
    files = tree(where)
    assert files["latest"] == b"global_epoch1_step3"
    assert (len(files["zero_to_fp32.py"] or b""), len(files["zero_to_torch.py"] or b"")) == (38_580, 2_490)
    assert steps_of(files) == ["global_epoch1_step3"]  # keep_last removed steps 1 and 2, not the folder's files
    assert not any("latest" in json.loads(files[p] or b"")["files"] for p in files if p.endswith(".manifest.json"))
    assert json.loads(files["dlio_ckpt_run.json"])["folder"] == ["zero_to_fp32.py", "zero_to_torch.py", "latest"]
    drained = {p.name for p in (lower / "ck").iterdir()}
    assert "global_epoch1_step1" in drained and not drained & {"latest", "zero_to_fp32.py", "zero_to_torch.py"}
    assert json.loads((lower / "ck" / "dlio_ckpt_run.json").read_text())["folder"] == []
    again = run(where, tmp_path, *ds, "++workload.checkpoint.overwrite=True",
                "++workload.checkpoint.num_checkpoints_write=1", rundir="run2")
    assert again.returncode == 0, again.stderr
    assert tree(where)["latest"] == b"global_epoch1_step1"
    theirs = Store("local_fs", str(tmp_path / "theirs"))
    put(theirs, {"latest": b"global_step7"})  # the user's own DeepSpeed job's, in the folder asked
    for extra in ([], ["++workload.checkpoint.overwrite=True"]):
        r = refused(dlio_here, theirs, tmp_path, *ds, *extra, rundir="run3")
        assert r.returncode == 2 and "holds latest in " in r.stderr, r.stderr
        assert "checkpoint.layout=deepspeed writes it there at every save" in r.stderr, r.stderr
    assert tree(theirs) == {"latest": b"global_step7"} and not (tmp_path / "run3").exists()
