#!/usr/bin/env bash
# The test command: set up (idempotent), lint, then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check dlio_ckpt tests bench
# two workers on the two cores: the suite's processes mostly wait on storage, servers and each other
.venv/bin/python -m pytest -q -n 2
