#!/usr/bin/env bash
# Set up .venv and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest "$@"
