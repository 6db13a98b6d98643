"""A ``summary.json`` held to its model (``dlio_ckpt.results.schema``): the file validates and is, byte for byte,
the model's dump of itself, with no key the model does not name. The model's tests in this process
(tests/unit/test_summary_schema.py) and on what real runs write (tests/e2e/test_summary_schema.py) share it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dlio_ckpt.results.schema import FailedSummary, Summary, read_summary
from dlio_ckpt.results.summary import dumps

# keys a run adds under names of its own, which the model keeps as further keys: each tier's drains and figures
NAMED_BY_RUN = ("drain_tier", "save_checkpoint_time_to_durable_tier")


def unnamed_keys(model: Any, where: str = "") -> list[str]:
    """Keys of ``model`` (and every section in it) that the model does not name, but those a run names itself."""
    if isinstance(model, list):
        return [key for i, item in enumerate(model) for key in unnamed_keys(item, f"{where}[{i}]")]
    if isinstance(model, dict):
        return [key for k, item in model.items() for key in unnamed_keys(item, f"{where}.{k}")]
    if not isinstance(model, BaseModel):
        return []
    extra = model.model_extra or {}
    found = [f"{where}.{k}" for k in extra if not k.startswith(NAMED_BY_RUN)]
    for name in type(model).model_fields:
        found += unnamed_keys(getattr(model, name), f"{where}.{name}")
    return found + [key for k, item in extra.items() for key in unnamed_keys(item, f"{where}.{k}")]


def assert_is_the_models_dump(path: Path) -> Summary | FailedSummary:
    text = path.read_text()
    summary = read_summary(json.loads(text))
    assert dumps(summary) == text, f"{path}: the model's dump differs from the file written"
    assert unnamed_keys(summary) == [], f"{path}: keys the model does not name"
    return summary
