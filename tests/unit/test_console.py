"""Messages named as the user gave them (in this process). What a user sees of runs, at a terminal and under
mpiexec: tests/e2e/test_console.py."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("size, said", [("0", "--world-size=0: must be >= 1"),
                                        ("100000000", "--world-size=100000000: must be <= 262144")])
def test_world_sizes_out_of_range_are_named_as_given(tmp_path, dlio_here, size, said):
    for head in ([], ["plan"]):
        r = dlio_here([*head, "workload=tiny", "--world-size", size])
        assert r.returncode == 2 and said in r.stderr and "world size 1" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_ranks_error_line_reaches_stderr_in_one_write(monkeypatch):
    """Ranks failing at once share mpiexec's stderr: a line written in two parts (print's text, then its newline)
    ran into another rank's. One write of the whole line cannot be split between them."""
    import sys

    from dlio_ckpt.run.failure import say_error

    writes: list[str] = []

    class Recorder:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stderr", Recorder())
    say_error("rank 1 on h, during save of step 2: write failed on f: No space left on device (errno 28)")
    assert writes == ["dlio_ckpt: error: rank 1 on h, during save of step 2: write failed on f: No space left on "
                      "device (errno 28)\n"]
