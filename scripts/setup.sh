#!/usr/bin/env bash
# Create .venv at the repo root and install sparklog with its test extras; fast when nothing changed.
# Also makes sure a Java runtime (for the embedded ZooKeeper and Spark) and kcat are present.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

apt_install() {
    # Only as root and only for what is missing: a developer's machine may not allow it.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq || true) >/dev/null 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        echo "setup: please install: $*" >&2
    fi
}
command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
# the metrics endpoint's test scrapes three brokers with a real Prometheus server
command -v prometheus >/dev/null 2>&1 || apt_install --no-install-recommends prometheus
# Burrow (LinkedIn's lag monitor) reads a Spark query's group lag in tests/integration/test_burrow.py
command -v Burrow >/dev/null 2>&1 || apt_install --no-install-recommends burrow
command -v kcat >/dev/null 2>&1 || { apt_install kcat; command -v kcat >/dev/null 2>&1; } || echo "setup: kcat not installed; its interop tests will fail" >&2

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
fi
stamp=.venv/.sparklog-installed
# The compiled kernels are built by the install: a change to any kernel's source (every .pyx, .pxd and .h of
# sparklog/, so a new kernel counts too) reinstalls.
kernels=$(find sparklog \( -name '*.pyx' -o -name '*.pxd' -o -name '*.h' \) -print | LC_ALL=C sort)
# shellcheck disable=SC2086  # the paths are ours, without spaces
want=$( (echo $kernels; cat pyproject.toml $kernels) | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # compat mode puts the checkout itself on the path, where pyspark finds `pyspark_sparklog` (and
    # `sparklog demo` finds jobs/); the default editable mode hides both.
    if ! .venv/bin/python -m pip install -q --config-settings editable_mode=compat -e ".[test]" \
            > .venv/pip-install.log 2>&1; then
        grep -v '^WARNING: Location' .venv/pip-install.log >&2
        echo "setup: pip install failed (log: .venv/pip-install.log)" >&2
        exit 1
    fi
    .venv/bin/python -c "import sparklog, pyspark_sparklog, jobs, pyspark, kazoo, confluent_kafka, kafka, nbclient"
    SPARKLOG_NO_EXTENSIONS= .venv/bin/python -c "import sparklog.protocol.produce_run, sparklog.client.sendpath; \
        from sparklog.records import implementation as i; pure = [s for s in i.report() if not s.compiled]; \
        pure and print('setup: running pure-Python twins (a C compiler builds the kernels):', i.describe(pure), sep='\n')" >&2
    echo "$want" > "$stamp"
fi
# Bytecode for the checkout's modules: every broker, ZooKeeper-group member and Spark Python worker a run starts
# imports sparklog, and with PYTHONDONTWRITEBYTECODE set (CI images set it) each would compile it again.
.venv/bin/python -m compileall -q -j 0 sparklog pyspark_sparklog jobs >/dev/null
