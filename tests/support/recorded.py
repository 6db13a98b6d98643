"""Oracles recorded by a script (the real frameworks' reads, too slow to run in every suite): how a recording is
written, and the checks that it still holds: for the frameworks installed, or for the pins of the environment it was
made in (a framework that is not a dependency: DeepSpeed, upstream DLIO)."""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest


def dumps(value: object, level: int = 0) -> str:
    """JSON with each read and each item on a line of its own: a new recording's diff reads line by line."""
    pad = " " * (level + 1)
    if isinstance(value, dict):
        return "{\n" + ",\n".join(f"{pad}{json.dumps(k)}: {dumps(v, level + 1)}" for k, v in value.items()) + \
            "\n" + " " * level + "}"
    if isinstance(value, list | tuple) and value and all(isinstance(v, list | tuple | dict) for v in value):
        return "[\n" + ",\n".join(pad + dumps(v, level + 1) for v in value) + "\n" + " " * level + "]"
    return json.dumps(value)


def assert_made_with_installed(versions: dict[str, str], name: str, record: str, missing: str = "skip",
                               hint: dict[str, str] | None = None) -> None:
    """A recording holds only for the versions that made it (``versions``, as the recording script noted them):
    where a package is installed at another release (the local label, torch's +cpu or +cu128, changes no read),
    the recording must be made again by ``record``. A package not installed: the test skips saying so
    (``missing="skip"``), or the recording is not checked against it (``"ignore"``: one the oracle reimplements);
    ``hint``: what to say beside the command, by package."""
    for package, made_with in versions.items():
        if package == "python":  # the interpreter's own version: noted, reads nothing
            continue
        try:
            installed = version(package)
        except PackageNotFoundError:
            if missing == "skip":
                pytest.skip(f"{package} is not installed: {name}, recorded with {package} {made_with}, is not "
                            "checked against it")
            continue
        assert installed.split("+")[0] == made_with.split("+")[0], (
            f"{name} was recorded with {package} {made_with}, and {installed} is installed: record it again "
            f"({record}{(hint or {}).get(package, '')})")


def canonical(name: str) -> str:
    """A package's name as pip compares them (PEP 503): tensorflow_cpu is tensorflow-cpu."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path: Path) -> dict[str, str]:
    """The versions an environment's file pins, ``name==version`` outside comments: a requirements file, or a
    script's ``pip install`` lines."""
    text = "\n".join(line.split("#")[0] for line in path.read_text().splitlines())
    return {canonical(n): v for n, v in re.findall(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!]+)", text)}


def assert_made_with_pinned(versions: dict[str, str], name: str, pins: dict[str, str], where: str) -> None:
    """A recording made in an environment of its own (``where`` pins ``pins``): every package it notes is pinned
    there, at the release it notes (the local label, +cpu, changes no call); otherwise the pins moved and the
    recording must be made again in that environment, or the recording is of another one."""
    for package, made_with in versions.items():
        if package == "python":  # the interpreter's own version: noted, reads nothing
            continue
        pin = pins.get(canonical(package))
        assert pin is not None, f"{name} was recorded with {package} {made_with}, which {where} does not pin"
        assert made_with.split("+")[0] == pin.split("+")[0], (
            f"{name} was recorded with {package} {made_with}, and {where} pins {pin}: record it again in that "
            "environment")
