#!/usr/bin/env bash
# Set up .venv, lint (ruff), type-check (mypy; both configured in pyproject.toml), run the whole test suite,
# then the pure-Python lane below. Extra arguments go to both pytest runs (after ours, so `-n 0` runs them in
# one process). A lint or type finding fails the run before any test starts, so CI fails on it.
# Two pytest-xdist workers even on 2 cores: most integration tests wait on timers (ZooKeeper sessions, ISR
# lag, consumer timeouts) and on child processes, not on the CPU. --dist loadfile keeps a module on one
# worker, so its module-scoped broker clusters start once; each worker has its own ZooKeeper server and Spark
# session (session fixtures), and tests share no ports or paths. --max-worker-restart=0: a worker that dies
# ends the run at once with its test named (tests/support/worker_watch.py prints what it was doing), because
# xdist 3.8's loadfile scheduler can wait forever after replacing a crashed worker (its issues 1323 and 1378).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check --quiet .
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
.venv/bin/python -m mypy
status=0
.venv/bin/python -m pytest -n 2 --dist loadfile --max-worker-restart=0 "$@" || status=$?
# The pure-Python lane: the same broker, replication and client tests with every compiled kernel off, so the
# pure path is proven end to end (brokers and clients inherit the variable; tests/conftest.py fails the lane
# if anything compiled runs). These four files: the Kafka clients' interop matrix through every API the
# broker serves, replication with ISR and failover, produce/consume through sparklog's own client, and the
# idempotent producer's sequence checks (the Produce path's kernels: _cproduce, _cappend_check, _cverify) in
# about 4 minutes on 2 cores.
if [ "$status" -eq 0 ]; then
    SPARKLOG_NO_EXTENSIONS=1 .venv/bin/python -m pytest -n 2 --dist loadfile --max-worker-restart=0 "$@" tests/integration/test_broker_interop.py \
        tests/integration/test_replication.py tests/integration/test_client_produce_consume.py \
        tests/integration/test_idempotence.py || status=$?
fi
exit "$status"
