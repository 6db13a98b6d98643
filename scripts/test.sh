#!/usr/bin/env bash
# The test command: set up (idempotent), lint, then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check dlio_ckpt tests bench
.venv/bin/python -m pytest -q
