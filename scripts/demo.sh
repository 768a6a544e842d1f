#!/usr/bin/env bash
# Set up .venv and run the main job: `sparklog demo`, an embedded ZooKeeper and brokers started locally.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/sparklog demo "$@"
