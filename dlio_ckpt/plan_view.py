"""Printing a Plan: JSON for machines, a grouped table for people."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .formats import Format, planned_size
from .planner import GIB, Plan


def plan_json(plan: Plan, fmt: Format) -> dict[str, Any]:
    return {
        "world_size": plan.world_size,
        "num_parameters": plan.num_parameters,
        **({"mtp_parameters": plan.mtp_parameters} if plan.mtp_parameters else {}),
        "checkpoint_size_GB": plan.checkpoint_size_GB,
        "total_payload_bytes": plan.total_payload_bytes,
        "layout": plan.layout.name,
        "parallelism": plan.layout.describe(),
        "format": fmt.name,
        "coordinator_files": [{"name": c.name, "bytes": c.size, "written_as": c.staged or c.name, "rank": 0}
                              for c in plan.coordinator],
        "ranks": [
            {"rank": r.rank, "tp": r.tp, "pp": r.pp, "dp": r.dp, "files": [
                {"name": f.stem + fmt.extension, "payload_bytes": f.payload_bytes, "tensors": f.num_tensors,
                 "file_bytes": planned_size(fmt, f)}
                for f in r.files]}
            for r in plan.ranks
        ],
    }


def _ranks(ranks: list[int]) -> str:
    """Compact rank list: 0-7, 16, 24-31."""
    spans, start = [], ranks[0]
    for prev, cur in zip(ranks, ranks[1:] + [None], strict=True):
        if cur != prev + 1:
            spans.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = cur
    text = ", ".join(spans[:6])
    return text + (f", ... ({len(spans) - 6} more spans)" if len(spans) > 6 else "")


def plan_table(plan: Plan, fmt: Format) -> str:
    """Ranks with the same files sizes are one row: '232 ranks × 11.83 GiB in 5 files'."""
    groups: OrderedDict[tuple[int, ...], list[int]] = OrderedDict()
    for r in plan.ranks:
        groups.setdefault(tuple(f.payload_bytes for f in r.files), []).append(r.rank)
    lines = [
        f"layout {plan.layout.name}, world size {plan.world_size}: {plan.layout.describe()}, "
        f"{plan.num_parameters:,} parameters"
        f"{f' (and {plan.mtp_parameters:,} in the MTP module)' if plan.mtp_parameters else ''}, format {fmt.name}",
        f"checkpoint: {plan.total_payload_bytes:,} payload bytes = {plan.checkpoint_size_GB:.6f} GiB "
        f"(DLIO's checkpoint_size_GB), {plan.total_payload_bytes / 1e9:.3f} GB",
        "",
    ]
    for sizes, ranks in groups.items():
        total = sum(sizes)
        lines.append(f"{len(ranks)} ranks × {total / GIB:.2f} GiB in {len(sizes)} files   ranks {_ranks(ranks)}")
        example = plan.ranks[ranks[0]]
        for f in example.files[:4]:
            lines.append(f"    {f.stem}{fmt.extension}  {f.payload_bytes:,} B, {f.num_tensors} tensors")
        if len(example.files) > 4:
            lines.append(f"    ... {len(example.files) - 4} more files")
    for c in plan.coordinator:
        lines.append(f"rank 0 then writes {c.name} ({c.size:,} B{f', as {c.staged}, renamed' if c.staged else ''}), "
                     "which every rank reads first on load")
    return "\n".join(lines)
