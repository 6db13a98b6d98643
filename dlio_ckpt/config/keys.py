"""The workload's keys as a reader wants them: every dotted key (what an override may name) and
``dlio_ckpt keys``' description of each (type and rules, default, meaning), read from the models."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ByteSize

from dlio_ckpt.config.schema import Workload
from dlio_ckpt.errors import ConfigError


def workload_keys(model: type[BaseModel] = Workload, prefix: str = "workload") -> list[str]:
    """Every key of the workload, dotted (``workload.checkpoint.format``), sections included: what an
    override may name (a dict-valued key such as ``storage.storage_options`` takes any key below it)."""
    keys = []
    for name, field in model.model_fields.items():
        keys.append(f"{prefix}.{name}")
        if (section := _section(field.annotation)) is not None:
            keys += workload_keys(section, f"{prefix}.{name}")
    return keys


def _section(ann: Any) -> type[BaseModel] | None:
    """The section a field holds, an optional one (``moe: Moe | None``) included; None for a value."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    held = [a for a in get_args(ann) if a is not type(None)] if get_origin(ann) in (Union, UnionType) else []
    return held[0] if len(held) == 1 and isinstance(held[0], type) and issubclass(held[0], BaseModel) else None


def _keys_of(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, pydantic field) of every key under a model; a list of sections (``tiers``) gives
    its own key, then its items' keys as ``tiers[N].KEY``."""
    for name, field in model.model_fields.items():
        ann, key = field.annotation, f"{prefix}.{name}"
        item = get_args(ann)[0] if get_origin(ann) is list and get_args(ann) else None
        if (section := _section(ann)) is not None:
            yield from _keys_of(section, key)
            continue
        yield key, field
        if isinstance(item, type) and issubclass(item, BaseModel):
            yield from _keys_of(item, f"{key}[N]")


def describe_keys(section: str | None = None, more: Iterable[tuple[str, Any, str]] = ()) -> str:
    """``dlio_ckpt keys``: each key as ``++workload.KEY``, its type and rules, its default and its
    meaning; ``more``: (key, field, note) of keys the workload passes on unchecked (storage options,
    which each backend's own model checks)."""
    rows = [(k, f, "") for k, f in _keys_of(Workload, "workload")] + list(more)
    lines = []
    for key, field, note in rows:
        top = key.split(".")[1].split("[")[0]
        if section and section not in (top, key.removeprefix("workload.").split("[")[0]):
            continue
        default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
        rules = ", ".join([_kind(field.annotation), *(_rule(m) for m in field.metadata if _rule(m))])
        meaning = "; ".join(t for t in (field.description, note) if t)
        lines.append(f"++{key}  ({rules}; default {default})" + (f"\n      {meaning}" if meaning else ""))
    if not lines:
        raise ConfigError("SECTION", section, "names no key of the workload; one of "
                          + ", ".join(sorted({k.split(".")[1].split("[")[0] for k, _, _ in rows})))
    return "\n".join(lines)


def _kind(ann: Any) -> str:
    if ann is ByteSize:
        return "size: bytes, or with a unit (32MiB, 1.5GB)"
    if get_origin(ann) is Literal:
        return "one of " + "|".join(str(a) for a in get_args(ann))
    return getattr(ann, "__name__", None) or str(ann).replace("typing.", "").replace("pydantic.types.", "")


def _rule(meta: Any) -> str:
    """A pydantic constraint as a reader writes it (``>= 1``)."""
    for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("multiple_of", "a multiple of")):
        if getattr(meta, attr, None) is not None:
            return f"{sign} {getattr(meta, attr)}"
    return ""


# The keys only some layouts read (each layout declares those it reads: Layout.reads_keys), and what
# each means, for the message that refuses it under a layout that would ignore it
LAYOUT_KEYS = {
    "checkpoint.files_per_rank": "the writer's thread_count, files per rank",
    "model.master_weights": "FSDP2's mixed precision without master weights",
    "model.moments_datatype": "Adam's moments in a dtype of their own",
    "model.parallelism.first_stage_layers": "Megatron's uneven pipeline split",
    "model.parallelism.last_stage_layers": "Megatron's uneven pipeline split",
    "checkpoint.miniature": "a scaled run's sample of whole items, for layouts whose files are many items",
    "restore.tensor": "a load at another tensor parallelism",
    "restore.expert": "a mixture of experts' load at another expert parallelism",
}


def layout_keys_set(workload: Workload) -> list[tuple[str, Any, str]]:
    """The keys only some layouts read (:data:`LAYOUT_KEYS`) that ``workload`` sets away from their defaults:
    (key, value, what it means); a layout that does not read one refuses it
    (:func:`dlio_ckpt.plan.layouts.check_job`)."""
    out = []
    for key, meaning in LAYOUT_KEYS.items():
        dotted, _, name = key.rpartition(".")
        section: Any = workload
        for part in dotted.split("."):
            section = getattr(section, part)
        value = getattr(section, name)
        if value != type(section).model_fields[name].get_default(call_default_factory=True):  # its section's default
            out.append((key, value, meaning))
    return out
