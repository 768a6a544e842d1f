#!/usr/bin/env bash
# Set up .venv, lint (ruff, configured in pyproject.toml) and run the whole test suite. Extra arguments go
# to pytest. A lint finding fails the run before any test starts, so CI fails on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check --quiet .
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest "$@"
