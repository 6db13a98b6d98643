"""The package's size rules (ARCHITECTURE.md, issue 48): no module over 700 lines, no function over 80. Why
held by a test: a module that grows one docstring at a time passes every review and still ends where the next
reader gets lost (``results/schema.py`` had reached 709 lines unnoticed). In this process: read with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

import dlio_ckpt

PACKAGE = Path(dlio_ckpt.__file__).parent
MODULE_LINES, FUNCTION_LINES = 700, 80


def test_no_module_is_over_700_lines_and_no_function_over_80():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(PACKAGE.parent)
        if len(text.splitlines()) > MODULE_LINES:
            too_long.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {lines} lines")
    assert not too_long, too_long
