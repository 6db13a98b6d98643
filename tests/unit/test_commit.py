"""A step's commit as a rank that does not write the manifest lives it: a signal that reaches it after the
manifest landed, while it still waits in the collective to hear so, leaves a failed summary that counts the
step (every rank gets SIGTERM from mpiexec, and the summary written last is whichever rank's).

In process, the window held open by the test: the collective is a stand-in that lands the manifest (as rank 0
does) and then delivers the signal's summary, the race a two-process run loses about once in eight."""

from __future__ import annotations

import json
from types import SimpleNamespace

from dlio_ckpt.io.backends import get_backend
from dlio_ckpt.run.emulated.checkpoints import EmulatedRun
from dlio_ckpt.run.failure import RunState, write_failed_summary
from dlio_ckpt.run.steps import manifest_path


def commit_on_rank_1(tmp_path, collective) -> tuple[RunState, dict]:
    """Step 1's commit as rank 1 lives it, ``collective(backend, state)`` standing in for the one rank 1 waits in;
    the state after it, and the failed summary written meanwhile."""
    backend = get_backend("local_fs", str(tmp_path), {})
    (tmp_path / "out").mkdir()
    (tmp_path / "ck").mkdir()
    state = RunState(run_dir=str(tmp_path / "out"), phase="save", step=1, committed=[])
    ctx = SimpleNamespace(state=state, backend=backend, ck=SimpleNamespace(checkpoint_folder="ck"),
                          comm=SimpleNamespace(gather=lambda _mine: None), acts_on=lambda _tier: False,
                          on_tier_io=lambda _tier, _put: collective(backend, state))
    EmulatedRun(ctx, None, 0, {}).commit(1, 0.1)  # type: ignore[arg-type]
    return state, json.loads((tmp_path / "out" / "summary.json").read_text())


def the_signal(state: RunState) -> None:
    write_failed_summary(state, 1, "rank 1 on h, during commit of step 1: interrupted by SIGTERM")


def test_a_signal_after_the_manifest_landed_counts_the_step_on_a_rank_that_did_not_write_it(tmp_path):
    def rank_0_lands_it_then_the_signal_comes(backend, state):
        backend.put_marker(manifest_path(backend, "ck", 1), b"{}")
        the_signal(state)

    state, summary = commit_on_rank_1(tmp_path, rank_0_lands_it_then_the_signal_comes)
    assert summary["steps_committed"] == [1]
    assert state.committed == [1] and state.landing is None


def test_a_signal_before_the_manifest_landed_does_not_count_the_step(tmp_path):
    _, summary = commit_on_rank_1(tmp_path, lambda _backend, state: the_signal(state))
    assert summary["steps_committed"] == []
