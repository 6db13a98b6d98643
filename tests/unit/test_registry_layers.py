"""The registry's string targets held to the layers (ARCHITECTURE.md, pyproject's importlinter contracts):
``lint-imports`` sees import statements, not ``Registry.load``'s ``importlib`` calls, so a module that loads a
registry entry imports its target unseen. Read from the source: every ``X.load(...)`` on a registry, the module
that makes it, and every target of that registry's entries (their object, a backend's options model, a real
mode's prediction), each of which must sit in the caller's layer or below it. Validating a workload (``config``)
once ran every layout's check this way, above it."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from dlio_ckpt import registry

PACKAGE = Path(registry.__file__).parent
REGISTRIES = {name: getattr(registry, name) for name in ("BACKENDS", "LAYOUTS", "FORMATS", "MODES")}


def _layers() -> list[list[str]]:
    """The layers contract's layers, top first; a layer of independent siblings as several modules."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def _layer(module: str, layers: list[list[str]]) -> int:
    """The index (0: top) of the layer that holds ``module``: the longest of the layers' modules it is in."""
    found = [(len(m), i) for i, layer in enumerate(layers) for m in layer if module == m or module.startswith(m + ".")]
    assert found, f"{module} is in no layer of the contract"
    return max(found)[1]


def _loads() -> list[tuple[str, str]]:
    """(calling module, registry name) of every ``REGISTRY.load(...)`` in the package."""
    out = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load" \
                    and (name := _registry_named(node.func.value)) is not None:
                out.append((module, name))
    return out


def _registry_named(node: ast.expr) -> str | None:
    """The registry an expression names: ``LAYOUTS`` or ``registry.LAYOUTS`` (an alias would escape this)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name if name in REGISTRIES else None


def _targets(name: str) -> set[str]:
    """The modules every entry of a registry names: any ``module:attribute`` (or bare module) among its fields."""
    out = set()
    for _, entry in REGISTRIES[name].items():
        for value in vars(entry).values():
            if isinstance(value, str) and value.startswith("dlio_ckpt."):
                out.add(value.partition(":")[0])
    return out


def test_every_registry_is_loaded_from_its_targets_layer_or_above():
    layers, loads = _layers(), _loads()
    assert {name for _, name in loads} == set(REGISTRIES)  # each registry is loaded somewhere, found by the scan
    wrong = [f"{caller} loads {name}'s {target}"
             for caller, name in loads for target in sorted(_targets(name))
             if _layer(target, layers) < _layer(caller, layers)]
    assert not wrong, "a registry's target above the module that loads it: " + "; ".join(wrong)


@pytest.mark.parametrize("module, above", [("dlio_ckpt.plan.layouts.dcp", "dlio_ckpt.config.rules")])
def test_the_layers_are_read_as_the_contract_orders_them(module, above):
    """The test's own reading of the contract: the plan sits above the configuration."""
    layers = _layers()
    assert _layer(module, layers) < _layer(above, layers)
