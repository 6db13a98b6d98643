"""The ``pt`` format's ``data.pkl`` against ``torch.save``'s own, byte for byte, for the dict shapes a layout
plans: flat and nested, one tensor, a few, and around the pickler's batches of 1000 (where Python's C pickler
writes an empty batch after a full one and a lone last item as a batch of one), and the one pickle writer's plain
values against Python's own pickler."""

from __future__ import annotations

import io
import zipfile

import pytest
import torch

from dlio_ckpt.plan.formats.pt import pickle_state
from dlio_ckpt.plan.types import FilePlan, TensorGroup

DTYPES = {"fp16": torch.float16, "fp32": torch.float32}


def _torch_pickle(groups: list[TensorGroup], dtype: str) -> bytes:
    def tensors(numels: tuple[int, ...]) -> dict[str, torch.Tensor]:
        return {str(i): torch.zeros(n, dtype=DTYPES[dtype]) for i, n in enumerate(numels)}

    state = tensors(groups[0].numels) if groups[0].key is None else {g.key: tensors(g.numels) for g in groups}
    buf = io.BytesIO()
    torch.save(state, buf)
    z = zipfile.ZipFile(buf)
    return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


GROUPS = [(1,), (3,), (1000,), (1001,), (2500,), (1, 5), (1000, 1, 1001), (7,) * 1001]  # tensors per group
CASES = [(True, g) for g in GROUPS] + [(False, g) for g in GROUPS if len(g) == 1]  # a flat file is one group


@pytest.mark.parametrize(("nested", "sizes"), CASES, ids=lambda v: v if isinstance(v, bool) else f"{len(v)}x{v[0]}")
def test_data_pkl_is_torch_saves_byte_for_byte(nested, sizes):
    groups = [TensorGroup(str(k) if nested else None, tuple(range(1, n + 1))) for k, n in enumerate(sizes)]
    plan = FilePlan("f", "model", "fp16", tuple(groups))
    assert pickle_state(plan) == _torch_pickle(groups, "fp16")


def test_the_reads_torch_load_makes_are_those_load_reads_plays():
    """``load_reads`` against a file object that logs what torch.load asks of it: torch.save's own archives
    (a tensor, an empty one, one under 4 KiB, a nested state dict) and a DCP item of the emulator's."""
    import io

    import torch

    from dlio_ckpt.plan.formats import file_size
    from dlio_ckpt.plan.formats.pt import load_reads
    from dlio_ckpt.plan.layouts.dcp import item_segments
    from dlio_ckpt.plan.types import Item

    class Logged(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self.f, self.reads = io.BytesIO(data), []

        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return True

        def seek(self, offset: int, whence: int = 0) -> int:
            at = self.f.seek(offset, whence)
            if whence == io.SEEK_END:  # the size asked: what a buffered file drops its buffer for
                self.reads.append((at, 0))
            return at

        def tell(self) -> int:
            return self.f.tell()

        def readinto(self, b) -> int:  # noqa: ANN001
            self.reads.append((self.f.tell(), len(b)))
            return self.f.readinto(b)

    archives = []
    for obj in (torch.ones(1 << 18), torch.zeros(0), torch.ones(3000, dtype=torch.bfloat16),
                {"a": torch.ones(3), "b": {"c": torch.ones(5), "d": 7}}):
        buf = io.BytesIO()
        torch.save(obj, buf)
        archives.append(buf.getvalue())
    segments = item_segments(Item("w", "bf16", (64, 32)))
    archives.append(b"".join(s if isinstance(s, bytes) else bytes(s) for s in segments))
    assert len(archives[-1]) == file_size(list(segments))
    for data in archives:
        logged = Logged(data)
        logged.read = lambda n=-1, f=logged: (f.reads.append((f.f.tell(), n)), f.f.read(n))[1]  # the magic's read
        torch.load(logged, weights_only=True)
        assert logged.reads == load_reads(len(data), lambda lo, hi, d=data: d[lo:hi])


def test_the_one_pickle_writer_writes_plain_values_as_pythons_pickler_does():
    """The values around a checkpoint's tensors (Lightning's: counters, floats, strings seen again, lists and dicts
    around the batches of 1000, tuples short and long, an int beyond 32 bits) against ``pickle.dumps`` at
    torch.save's protocol 2, and each int's opcode as DCP's ``.metadata`` prices it."""
    import pickle

    from dlio_ckpt.plan.formats.pt import Pickler, pickled_int

    for n in (0, 255, 256, 65535, 65536, -1, -(1 << 31), (1 << 31) - 1, 1 << 31, -(1 << 31) - 1, 1 << 70):
        assert pickled_int(n) == pickle.dumps(n, protocol=2)[2:-1], n
    lr = "lr"
    value = {"epoch": 0, "step": 70_000, "big": 1 << 40, "none": None, "flags": [True, False], "lr": 1e-3,
             "names": [lr, lr, "x"], "short": (1, 2), "long": (1, 2, 3, 4), "empty": (), "nested": {"d": {}},
             "thousand": list(range(1000)), "more": {str(i): i for i in range(1001)},
             "exact": {str(i): i for i in range(2000, 3000)}, "one": [7], "single": {"k": 1}}
    p = Pickler()
    p.value(value)
    assert p.done() == pickle.dumps(value, protocol=2)
    p = Pickler()  # a state dict's group of no tensors: an empty dict is its EMPTY_DICT alone, no batch
    p.dict([], lambda _: None)
    assert p.done() == pickle.dumps({}, protocol=2)
