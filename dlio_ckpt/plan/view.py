"""Printing a Plan: JSON for machines, a grouped table for people."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from dlio_ckpt.plan.formats import Format, planned_size
from dlio_ckpt.plan.types import GIB, ItemFile, Plan


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
        # beside the step folders, at every save ("bytes" None: the step's name)
        **({"folder_files": [{"name": f.name, "bytes": f.size, "rank": 0} for f in plan.folder]}
           if plan.folder else {}),
        **({"scaled": scaled} if (scaled := scaled_figures(plan, fmt)) is not None else {}),
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
    spans = []
    start: int | None = ranks[0]  # None only after the last rank
    for prev, cur in zip(ranks, ranks[1:] + [None], strict=True):
        if cur != prev + 1:
            spans.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = cur
    text = ", ".join(spans[:6])
    return text + (f", ... ({len(spans) - 6} more spans)" if len(spans) > 6 else "")


def _counted(n: int, noun: str) -> str:
    """'1 file', '2 files', '0 files'."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


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
        lines.append(f"{_counted(len(ranks), 'rank')} × {total / GIB:.2f} GiB in {_counted(len(sizes), 'file')}   "
                     f"rank{'' if len(ranks) == 1 else 's'} {_ranks(ranks)}")
        example = plan.ranks[ranks[0]]
        for f in example.files[:4]:
            lines.append(f"    {f.stem}{fmt.extension}  {f.payload_bytes:,} B, {_counted(f.num_tensors, 'tensor')}")
        if len(example.files) > 4:
            lines.append(f"    ... {_counted(len(example.files) - 4, 'more file')}")
    for c in plan.coordinator:
        lines.append(f"rank 0 then writes {c.name} ({c.size:,} B{f', as {c.staged}, renamed' if c.staged else ''}), "
                     "which every rank reads first on load")
    if plan.folder:
        said = (f"{f.name} (the step's name)" if f.size is None else f"{f.name} ({f.size:,} B)" for f in plan.folder)
        lines.append(f"rank 0 then writes beside the step folders, at every save: {', '.join(said)}")
    if (scaled := scaled_figures(plan, fmt)) is not None:
        here, full = scaled["this_run"], scaled["full_size"]
        kept = (f"a sample of {here['items']:,} of its {full['items']:,} items whole, on {here['writing_ranks']} of "
                f"its {full['writing_ranks']} writing ranks" if plan.sample else
                "every rank's share and files as at full size")
        lines.append(f"scaled: {here['bytes_per_checkpoint']:,} B per checkpoint stand for the job's "
                     f"{full['bytes_per_checkpoint']:,} B ({full['checkpoint_size_GiB']:,.2f} GiB of payload), "
                     f"1/{1 / scaled['bytes_ratio']:,.0f}; {kept}; the "
                     f"format's headers are {here['headers_share']:.1%} of the bytes here, "
                     f"{full['headers_share']:.2%} at full size")
    return "\n".join(lines)


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _span(spread: dict[str, float]) -> str:
    """'482-639' (min-max), or one figure when every rank has the same."""
    lo, hi = int(spread["min"]), int(spread["max"])
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def restore_table(restore: dict[str, Any], plan: Plan) -> str:
    """The restore's plan for people: ``restore`` is summary.json's ``io.restore`` of a run of this workload
    (``cli._restore``). Why beside the save's table: a restart on another world size, or a load of the model
    alone, reads other amounts than the save wrote (whole stored chunks of which a rank needs a part), and
    the load's time is its heaviest rank's, not the checkpoint's over the bandwidth."""
    needed, read = restore["bytes_needed_per_rank"], restore["bytes_read_per_rank"]
    what = "the model alone" if restore["model_only"] else "model and optimizer"
    at = (f"{restore['world_size']} ranks from the save's {restore['saved_world_size']} (resharded)"
          if restore["resharded"] else f"{restore['world_size']} ranks, the save's")
    amplification = restore["read_amplification"]
    lines = [
        "",
        f"restore: {at}, {what}; reads as {restore['follows']}",
        f"  needed per rank: mean {_gib(needed['mean'])} (min {_gib(needed['min'])}, median "
        f"{_gib(needed['median'])}, max {_gib(needed['max'])}); {restore['bytes_needed']:,} B in all",
        f"  read per rank:   mean {_gib(read['mean'])} (min {_gib(read['min'])}, median {_gib(read['median'])}, "
        f"max {_gib(read['max'])}); {restore['bytes_read']:,} B in all",
        f"  read amplification {amplification:.3f} (read / needed); the job reads "
        f"{restore['bytes_read'] / plan.total_payload_bytes:.3f} x the checkpoint's payload"
        if amplification is not None else "  nothing needed",
        f"  metadata: {restore['metadata_bytes_per_rank'] / (1 << 20):.1f} MiB read first by every rank"
        if restore["metadata_bytes_per_rank"] else "  metadata: none (no coordinator's file to read first)",
        f"  reads per rank {_span(restore['reads_per_rank'])}, files per rank {_span(restore['files_per_rank'])}, "
        f"ranged requests per rank {_span(restore['ranged_requests_per_rank'])}",
        f"  heaviest rank {restore['heaviest_rank']}: reads {_gib(read['max'])} for "
        f"{_gib(restore['heaviest_rank_bytes_needed'])} needed, {restore['imbalance']:.2f} x the mean rank's reads",
    ]
    return "\n".join(lines)


def scaled_figures(plan: Plan, fmt: Format, processes: int | None = None) -> dict[str, Any] | None:
    """What a scaled plan stands for (None at full size): this run's bytes per checkpoint beside the full
    size's, with the share of each that is the format's headers (a ``torch.save`` archive's records do not
    shrink with the tensors: at small scales they are a visible part of what is written), and the ratio of
    the two by which :func:`dlio_ckpt.results.summary.summary` projects the measured times. With the run's
    ``processes``: the largest share of the ranks' bytes one of them holds (each plays a contiguous block of
    ranks), since the slowest process sets a checkpoint's time."""
    if plan.full_size is None:
        return None

    def figures(p: Plan) -> dict[str, Any]:
        coordinator = sum(c.size for c in p.coordinator)
        per_rank = [sum(planned_size(fmt, f) for f in r.files) for r in p.ranks]
        ranks = sum(per_rank)
        stored = ranks + coordinator
        headers = stored - p.total_payload_bytes - coordinator
        return {"checkpoint_size_GiB": p.checkpoint_size_GB, "bytes_per_checkpoint": stored,
                "coordinator_bytes": coordinator, "headers_share": headers / stored,
                "writing_ranks": sum(1 for r in p.ranks if r.files), "files": sum(len(r.files) for r in p.ranks),
                "items": sum(len(f.items) if isinstance(f, ItemFile) else f.num_tensors for r in p.ranks
                             for f in r.files),
                **({"busiest_process_share": max(sum(per_rank[r.rank] for r in p.ranks_of_process(k, processes))
                                                 for k in range(processes)) / ranks}
                   if processes and ranks else {})}

    here, full = figures(plan), figures(plan.full_size)
    return {"miniature": "sample" if plan.sample else "shrink",
            "bytes_ratio": here["bytes_per_checkpoint"] / full["bytes_per_checkpoint"], "this_run": here,
            "full_size": full}
