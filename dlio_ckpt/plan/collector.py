"""Python's garbage collector paused around work that makes many long-lived objects and frees none."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's garbage collector waits while a plan is built or checked (``plan.types.Plan.validate``): a plan
    of thousands of ranks is a million small objects that all live as long as the plan, and the collector's
    passes over them took a third of deepseek_v3's plan at 2048 ranks (they free nothing)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
