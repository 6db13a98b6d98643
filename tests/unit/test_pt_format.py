"""The ``pt`` format's ``data.pkl`` against ``torch.save``'s own, byte for byte, for the dict shapes a layout
plans: flat and nested, one tensor, a few, and around the pickler's batches of 1000 (where Python's C pickler
writes an empty batch after a full one and a lone last item as a batch of one)."""

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
