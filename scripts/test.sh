#!/usr/bin/env bash
# The test command: set up (idempotent), lint, then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check dlio_ckpt tests bench
# The static checks run beside the suite, which leaves part of a core idle while its processes wait; their
# output follows the suite's, and either failing fails the command:
# - lint-imports: ARCHITECTURE.md's rules (pyproject.toml [tool.importlinter])
# - mypy: the package's types (pyproject.toml [tool.mypy])
# - the documentation site: broken links or pages fail it; every key, command, flag and summary.json field is
#   in its generated reference
site=$(mktemp -d)
checks_log=$(mktemp)
# the suite's temporary files in a folder of their own, removed at the end: what the tests' servers and tools leave
# in $TMPDIR (SeaweedFS's logs, torch's elastic folders) goes with it (SeaweedFS's sockets go to /tmp whatever it says)
scratch=$(mktemp -d -t dlio_ckpt_suite.XXXXXX)
trap 'rm -rf "$site" "$checks_log" "$scratch"' EXIT
(
  set -e
  .venv/bin/lint-imports
  .venv/bin/mypy
  NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -q -d "$site"
  .venv/bin/python docs/_hooks/check_reference.py "$site"
) > "$checks_log" 2>&1 &
checks=$!
# three workers on the two cores: many tests wait on servers, timeouts and each other, which a third fills
# (bench/results/2026-12-07-suite.md); each takes the next test when it is free (worksteal), the slowest first
# (tests/conftest.py)
suite=0
# the package and the tests' support modules compiled once: where PYTHONDONTWRITEBYTECODE is set (as on the
# machines this runs on) each of the suite's several hundred processes would compile them again (the report above)
.venv/bin/python -m compileall -q dlio_ckpt tests bench
TMPDIR="$scratch" .venv/bin/python -m pytest -q -n 3 --dist worksteal || suite=$?
checked=0
wait "$checks" || checked=$?
cat "$checks_log"
[ "$checked" -eq 0 ] || echo "static checks failed (exit $checked): see above"
exit $(( suite != 0 ? suite : checked ))
