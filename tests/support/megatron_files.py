"""A real megatron-core save's files and items held to the emulated plan of the same job: every file's size and
every item where megatron-core put it, as its ``.metadata`` lists them. The Megatron layout's tests
(tests/against_frameworks/test_megatron_layout.py), the save traced under strace (test_io_patterns.py), the
restores (test_restore.py, test_megatron_moe_restore.py) and their recordings (tests/oracles/record_*.py) share
them."""

from __future__ import annotations

import pickle
from pathlib import Path

from dlio_ckpt.plan.layouts import make_plan

StoredItem = tuple[str, int, str, tuple[int, ...], int]  # file, offset, tensor, its chunk's offsets, length


def stored_items(step: Path) -> list[StoredItem]:
    """Every item a real save's ``.metadata`` places, sorted: (file, offset, tensor, chunk, length)."""
    stored = pickle.loads((step / ".metadata").read_bytes()).storage_data
    return sorted((v.relative_path, v.offset, k.fqn, tuple(k.offset or ()), v.length) for k, v in stored.items())


def placed_items(plan) -> list[StoredItem]:
    """Every item of the plan where it lies, sorted as :func:`stored_items`: (file, offset, tensor, chunk, length)."""
    from dlio_ckpt.plan.layouts.dcp import item_size

    out = []
    for rank in plan.ranks:
        for f in rank.files:
            at = 0
            for item in f.items:
                out.append((f"{f.stem}.distcp", at, item.fqn, tuple(item.offsets), item_size(item)))
                at += item_size(item)
    return sorted(out)


def assert_same_items(step: Path | list[StoredItem], plan, ordered: bool = True) -> None:
    """Every item of the plan where megatron-core put it: file, offset, tensor, chunk and length, as the
    real save's ``.metadata`` lists them (megatron-core's state-dict order, not only the files' sizes), read
    from the step folder or given as :func:`stored_items` recorded them.
    ``ordered=False``: each rank holds the same items (tensor, chunk, length), wherever in which of its files
    (the MoE saves here; where they lie is held by the recorded saves of test_megatron_moe_restore.py)."""
    real = stored_items(step) if isinstance(step, Path) else sorted(step)
    ours = placed_items(plan)
    if not ordered:  # per rank (its files' name up to the writer thread), wherever in which of its files
        real, ours = (sorted((path.rsplit("_", 1)[0], fqn, chunk, n) for path, _, fqn, chunk, n in rows)
                      for rows in (real, ours))
    assert ours == real


def assert_same_files(real: dict[str, int], workload, world: int) -> None:
    plan = make_plan(workload, world)
    plan.validate()
    emulated = {f"{f.stem}.distcp": f.size for r in plan.ranks for f in r.files} | \
        {c.name: c.size for c in plan.coordinator}
    assert sorted(emulated) == sorted(real)
    for name, size in real.items():
        print(f"{name}: emulated {emulated[name]} real {size} ({(emulated[name] - size) / size:+.2%})")
        if name == ".metadata":  # its pickle's size is derived, not built: the README states this bound
            assert abs(emulated[name] - size) <= 0.10 * size, (name, emulated[name], size)
        else:  # every .distcp, common.pt and metadata.json: to the byte
            assert emulated[name] == size, (name, emulated[name], size)
