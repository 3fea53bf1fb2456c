#!/usr/bin/env bash
# Install the test dependencies (torch CPU, transformers, Playwright, Debian chromium) and run
# the whole suite: lint, types, import contracts, then pytest (unit, importer, worker and
# browser tests).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[model,test]'
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi
export DEBUG=${DEBUG:-1}
.venv/bin/ruff check studio inference tests examples
.venv/bin/ruff format --check studio inference tests examples
.venv/bin/mypy studio inference
.venv/bin/lint-imports  # import contracts: see [tool.importlinter] in pyproject.toml
# Two pytest processes (pytest-xdist): most tests wait on workers, browsers and servers, so two
# share 2 cores well; a file stays in one process (its module fixtures are built once). Each
# process has its own test database and data dir (tests/settings.py).
.venv/bin/python -m pytest -n "${STUDIO_TEST_PROCESSES:-2}" --dist loadfile "$@"
