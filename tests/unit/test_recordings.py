"""Every recording in ``tests/data/`` holds only for the versions that made it, and each is held to them: a
framework installed here at the release it was recorded with (the restores' reads: torch, transformers,
megatron-core), and one that is not a dependency at the pins of the environment its script was run in (DeepSpeed:
``tests/oracles/deepspeed-requirements.txt``; upstream DLIO: ``scripts/dlio_reference_env.sh``). The walk covers
every file and folder there: a new recording no entry of ``RECORDINGS`` names fails until it says what holds it.
In this process; what each recording is then compared with: the tests that read it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import DATA, ORACLES, REPO
from tests.support.recorded import assert_made_with_installed, assert_made_with_pinned, pinned

INSTALLED = "the installed frameworks"
DEEPSPEED = ORACLES / "deepspeed-requirements.txt"
DLIO = REPO / "scripts" / "dlio_reference_env.sh"
# each recording, and what its versions are held to: the installed packages, or an environment's pins
RECORDINGS: dict[str, str | Path] = {
    "dcp_restore_reads.json": INSTALLED,
    "dcp_moe_restore_reads.json": INSTALLED,
    "megatron_restore_reads.json": INSTALLED,
    "megatron_moe_restore_reads.json": INSTALLED,
    "deepspeed_dense.json": DEEPSPEED,
    "deepspeed_moe.json": DEEPSPEED,
    "deepspeed_load_reads.json": DEEPSPEED,
    "dlio_reference_trace.json": DLIO,
    "dlio_run": DLIO,  # DLIO's own run folder: its SOURCE.md notes the versions
}


def reimplemented() -> dict[str, str]:
    """A package an oracle reimplements rather than imports (not installed): the release it follows
    (tests/oracles/dcp_moe_save.py). Imported when asked: the oracle imports torch.distributed, 2 s of every pytest
    worker's collection."""
    from tests.oracles.dcp_moe_load_reads import TORCHTITAN

    return {"torchtitan": TORCHTITAN}


def noted_versions(path: Path) -> dict[str, str]:
    """The versions a recording notes, by package: its ``versions`` (a dict, or pip freeze's ``name==version``
    lines), the top-level keys of DeepSpeed's save recordings, or the table of a run folder's SOURCE.md."""
    if path.is_dir():
        rows = re.findall(r"^\| ([A-Za-z0-9_.-]+) \| (\d[^ |]*)", (path / "SOURCE.md").read_text(), re.M)
        return {name: v for name, v in rows if name != "dlio_benchmark"}  # DLIO itself: a commit, checked apart
    data = json.loads(path.read_text())
    versions = data.get("versions", {k: v for k, v in data.items() if k in ("deepspeed", "torch", "python")})
    return dict(v.split("==") for v in versions) if isinstance(versions, list) else versions


def test_every_recording_says_what_holds_it():
    assert sorted(p.name for p in DATA.iterdir()) == sorted(RECORDINGS), \
        "a recording in tests/data/ that RECORDINGS does not name (or one named that is gone)"


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_each_recording_was_made_with_the_versions_it_is_held_to(name):
    """Each notes its framework (torch at least: every one was made with it) and its script where it has one; an
    installed framework at the recorded release, a reimplemented one at the release its oracle follows; a
    recording made apart at its environment's pins, every package it notes pinned there."""
    path, held = DATA / name, RECORDINGS[name]
    versions = noted_versions(path)
    assert "torch" in versions, f"{name} notes no torch version: {versions}"
    script = json.loads(path.read_text()).get("script") if path.suffix == ".json" else None
    assert script is None or (REPO / script).is_file(), f"{name}'s script {script} is gone"
    if held == INSTALLED:
        followed = reimplemented()
        apart = {p: v for p, v in versions.items() if p in followed}
        assert apart == {p: followed[p] for p in apart}, f"{name}: recorded for another release than the " \
            f"oracle follows ({followed})"
        installed = {p: v for p, v in versions.items() if p not in followed}
        assert_made_with_installed(installed, name, f"{script}: its docstring says how")
    else:
        assert isinstance(held, Path)
        assert_made_with_pinned(versions, name, pinned(held), held.relative_to(REPO).as_posix())


def test_the_dlio_recordings_are_of_the_commit_their_environment_installs():
    """Upstream DLIO is installed from a commit, not a release: the trace and the run folder name the one
    scripts/dlio_reference_env.sh names."""
    (commit,) = set(re.findall(r"dlio_benchmark ([0-9a-f]{7,40})", DLIO.read_text()))
    assert f"at {commit} " in json.loads((DATA / "dlio_reference_trace.json").read_text())["tool"]
    (full,) = re.findall(r"commit: `([0-9a-f]{40})`", (DATA / "dlio_run" / "SOURCE.md").read_text())
    assert full.startswith(commit)
