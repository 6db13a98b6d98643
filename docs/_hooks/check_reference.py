"""Check a built site's reference against the code: every key ``dlio_ckpt keys`` lists is in the keys page,
every command and flag of the parsers in the commands page, every field of ``summary.json``'s model in its page.

    .venv/bin/mkdocs build --strict -d /tmp/site && .venv/bin/python docs/_hooks/check_reference.py /tmp/site

Exit 0 when nothing is missing; 1 naming what is (the keys are read from the command itself, as a user runs it).
"""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
from pathlib import Path


def codes(page: Path) -> set[str]:
    """The text of every ``<code>`` element of a built page."""
    text = page.read_text()
    return {html.unescape(re.sub(r"<[^>]+>", "", m)) for m in re.findall(r"<code[^>]*>(.*?)</code>", text, re.S)}


def missing_keys(site: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "dlio_ckpt", "keys"], check=True, capture_output=True, text=True).stdout
    keys = [line.split()[0].removeprefix("++") for line in out.splitlines() if line.startswith("++")]
    if not keys:
        return ["`dlio_ckpt keys` listed no key"]
    shown = codes(site / "reference" / "keys" / "index.html")
    return [f"key {k}" for k in keys if k not in shown]


def missing_commands(site: Path) -> list[str]:
    from dlio_ckpt.cli.parser import build_parsers

    page = site / "reference" / "commands" / "index.html"
    shown, text = codes(page), page.read_text()
    missing = []
    for name, parser in build_parsers().commands.items():
        if f'id="{name}"' not in text:
            missing.append(f"command {name}")
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in shown and flag not in ("-h", "--help"):
                    missing.append(f"flag {name} {flag}")
    return missing


def missing_fields(site: Path) -> list[str]:
    from pydantic import BaseModel

    from dlio_ckpt.results.schema import FailedSummary, Summary

    shown = codes(site / "reference" / "summary-json" / "index.html")
    names = {name.rsplit(".", 1)[-1].split("[")[0] for name in shown}
    missing, seen = [], set()

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            if (field.alias or name) not in names:
                missing.append(f"summary.json field {model.__name__}.{field.alias or name}")
            for sub in _models(field.annotation):
                walk(sub)

    walk(Summary)
    walk(FailedSummary)
    return missing


def _models(ann: object) -> list:
    from typing import get_args

    from pydantic import BaseModel

    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in get_args(ann) for m in _models(a)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the folder mkdocs built (-d)")
    site = parser.parse_args().site
    missing = missing_keys(site) + missing_commands(site) + missing_fields(site)
    for item in missing:
        print(f"missing from the built reference: {item}")
    if not missing:
        print(f"{site}: every key, command, flag and summary.json field is in the reference")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
