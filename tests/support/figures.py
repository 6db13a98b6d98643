"""The figures ``report`` draws, as files: their size in pixels (the report's tests on made run folders,
tests/unit/test_results_tools.py, and after real runs, tests/e2e/test_results_tools.py, hold it)."""

from __future__ import annotations

from pathlib import Path


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height in pixels."""
    from PIL import Image

    with Image.open(path) as im:
        return im.size
