#!/usr/bin/env bash
# The test command: set up (idempotent), lint, then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check dlio_ckpt tests bench
.venv/bin/lint-imports  # ARCHITECTURE.md's rules (pyproject.toml [tool.importlinter])
.venv/bin/mypy  # the package's types (pyproject.toml [tool.mypy])
# the documentation site: broken links or pages fail it; every key, command, flag and summary.json field is in
# its generated reference
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -q -d "$site"
.venv/bin/python docs/_hooks/check_reference.py "$site"
# two workers on the two cores: the suite's processes mostly wait on storage, servers and each other; each
# takes the next test when it is free (worksteal), the slowest first (tests/conftest.py)
.venv/bin/python -m pytest -q -n 2 --dist worksteal
