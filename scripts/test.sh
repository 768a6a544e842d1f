#!/usr/bin/env bash
# Set up .venv, lint (ruff, configured in pyproject.toml) and run the whole test suite. Extra arguments go
# to pytest (after ours, so `-n 0` runs it in one process). A lint finding fails the run before any test
# starts, so CI fails on it.
# Two pytest-xdist workers even on 2 cores: most integration tests wait on timers (ZooKeeper sessions, ISR
# lag, consumer timeouts) and on child processes, not on the CPU. --dist loadfile keeps a module on one
# worker, so its module-scoped broker clusters start once; each worker has its own ZooKeeper server and Spark
# session (session fixtures), and tests share no ports or paths.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check --quiet .
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest -n 2 --dist loadfile "$@"
