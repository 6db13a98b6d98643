"""Exceptions that carry a user-facing message and an exit status.

Why a module of its own: every layer (config, planner, backends, engine) raises these, and only the
command line decides how they end the process. Keeping them here stops modules from importing the CLI.
"""

from __future__ import annotations


class DlioCkptError(Exception):
    """Base of the errors we expect and explain; anything else is a bug and shows a traceback."""

    exit_code = 1


class ConfigError(DlioCkptError):
    """Bad input: a key, its value and the rule it breaks. Raised before any I/O; exits with 2."""

    exit_code = 2

    def __init__(self, key: str, value: object, rule: str) -> None:
        self.key, self.value, self.rule = key, value, rule
        super().__init__(f"{key}={value!r}: {rule}" if key else rule)

    def __reduce__(self) -> tuple:  # travels between ranks (comm.on_root) by pickle
        return (type(self), (self.key, self.value, self.rule))


class StorageError(DlioCkptError):
    """A storage operation failed; the message names the file and the cause. ``transient`` errors
    (a dropped connection, a timeout, a 5xx) are worth retrying the whole file for."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient

    def __reduce__(self) -> tuple:
        return (type(self), (str(self), self.transient))


class VerifyError(DlioCkptError):
    """Data read back differs from what was written at a given file offset."""


# Which rank reports an error that every rank raises (a shared check's, re-raised on each): that rank says
# it, the others end quietly, so a failure is one message and not one per rank. Kept on the exception,
# whatever its type, under one attribute named here only.
_REPORTED_BY = "dlio_ckpt_reported_by"


def mark_reported_by(exc: BaseException, rank: int) -> None:
    setattr(exc, _REPORTED_BY, rank)


def reporting_rank(exc: BaseException, default: int) -> int:
    """The rank that reports ``exc`` (``default`` when none was marked: the rank that raised it)."""
    return getattr(exc, _REPORTED_BY, default)
