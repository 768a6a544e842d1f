#!/usr/bin/env bash
# The full version of tests/integration/test_client_packaging.py: build the wheel, install it with --no-deps
# into a fresh venv (dependencies from .venv through a .pth file) and run `sparklog demo` with its Spark steps
# from a directory outside the checkout. Takes minutes; the suite runs the --no-spark version.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export WORK="$work"
.venv/bin/python - <<'PY'
import os, sys
from pathlib import Path
sys.path.insert(0, "tests")
from integration.test_client_packaging import install_wheel
print(install_wheel(Path(os.environ["WORK"])))
PY
cd "$work"
PYSPARK_PYTHON="$work/venv/bin/python" "$work/venv/bin/sparklog" demo --events "${EVENTS:-2000}" --dir "$work/demo" \
    --chart "$work/chart.png"
