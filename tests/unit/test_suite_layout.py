"""The suite's layout: no module under ``tests/`` (a test, an oracle, a helper) imports a test module. What tests
share lives in ``tests/support/`` (tests/README.md lists its modules): a test module imported by another is
collected twice over, runs its module-level setup for a test of another feature, and ties one feature's file to
another's (an e2e file to a unit file, an oracle's recording to a test's constants). In this process: the files
are read with ``ast``, nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import TESTS


def module_name(path: Path) -> str:
    """``tests/unit/test_x.py`` -> ``tests.unit.test_x`` (a package's ``__init__.py`` is the package)."""
    parts = path.relative_to(TESTS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_test_module(name: str) -> bool:
    """A module of the suite whose own name is a test file's: ``tests.<folder>.test_<feature>``."""
    parts = name.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def imported_test_modules(source: str, importer: str, is_package: bool = False) -> list[tuple[int, str]]:
    """The test modules that ``source`` (the module ``importer``) imports, each with its line: ``import
    tests.a.test_b``, ``from tests.a.test_b import x``, ``from tests.a import test_b`` and relative imports."""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if is_test_module(module):
                found.append((node.lineno, module))
            else:
                found += [(node.lineno, f"{module}.{a.name}") for a in node.names
                          if is_test_module(f"{module}.{a.name}")]
    return found


def test_no_module_of_the_suite_imports_a_test_module():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        name = module_name(path)
        for line, imported in imported_test_modules(path.read_text(), name, path.name == "__init__.py"):
            found.append(f"{path.relative_to(TESTS.parent)}:{line} imports {imported}")
    assert not found, "a test module imported by another module: move what it shares into tests/support/\n" + \
        "\n".join(found)


@pytest.mark.parametrize(("source", "imported"), [
    ("import tests.unit.test_x", "tests.unit.test_x"),
    ("from tests.e2e.test_x import helper", "tests.e2e.test_x"),
    ("from tests.against_frameworks import test_x as case", "tests.against_frameworks.test_x"),
    ("def f():\n    from tests.unit.test_x import helper", "tests.unit.test_x"),
    ("from .test_x import helper", "tests.unit.test_x"),
    ("from . import test_x", "tests.unit.test_x"),
    ("from ..e2e.test_x import helper", "tests.e2e.test_x"),
    ("from tests.support.workloads import TINY_CK", None),
    ("from tests.oracles.dcp_moe_load_reads import TORCHTITAN", None),
    ("from . import conftest", None),
])
def test_every_form_of_import_of_a_test_module_is_found(source, imported):
    """Held on the forms themselves, as ``tests/unit/test_here.py`` would write them."""
    assert [m for _, m in imported_test_modules(source, "tests.unit.test_here")] == ([imported] if imported else [])
