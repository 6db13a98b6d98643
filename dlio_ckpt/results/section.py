"""The base of every part of ``summary.json`` (:mod:`dlio_ckpt.results.schema`, :mod:`.latency_figures`): a model
whose None fields are left out when written, which keeps keys it does not enumerate, and which validates an
assignment as it validates a construction. Why a module of its own: the file's sections live in more than one
module, and each builds on this one."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Section(BaseModel):
    """A part of ``summary.json``: None fields are left out when written (see :mod:`dlio_ckpt.results.schema`), keys
    not enumerated are kept, and an assignment after construction is validated like a construction."""

    # defer_build: built on first use, so that a process writing no summary (every rank but 0) never builds them;
    # first used on the main thread, at results time
    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_assignment=True, defer_build=True)
    written_as_null: ClassVar[frozenset[str]] = frozenset()  # fields whose None is written as null when given

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        absent = {field.alias or name for name, field in type(self).model_fields.items()
                  if getattr(self, name) is None
                  and (name not in self.written_as_null or name not in self.model_fields_set)}
        return {key: value for key, value in data.items() if key not in absent}
