"""Fault run: random SIGKILL / SIGSTOP / restart of brokers under an acks=all producer, then the history check.

    python scripts/fault_run.py [--minutes 5] [--brokers 3] [--partitions 6] [--replication-factor 3]
                                [--min-insync 2] [--session-timeout-ms 3000] [--seed N] [--rate 200]
                                [--base-dir DIR]

Starts an embedded ZooKeeper and `--brokers` broker processes (`LocalCluster`) and runs the scenario of
`tests/support/fault_run.py` on them: an acks=all producer and a live consumer under random kill, pause and
stop faults, then a final read of every partition and the history check (lost acknowledged writes, offsets
read with two values, reads that vanished, duplicates, non-monotonic reads). Exit status 0 when the history is
clean, writes were acknowledged and the producer reported no error; 1 otherwise (`RunResult.ok`).

With `--replication-factor 1` it exercises failover without data movement (a partition is offline while its
only broker is down); RF >= 2 exercises the replication data path (followers, high watermark, acks=all).
Values written more than once by the producer's own retries (no idempotence) are reported apart from the
problems: they are legal (tests/support/history.py). `tests/integration/test_fault_run.py` runs a short RF 3
version in the suite.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.fault_run import FaultRunSettings, run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from sparklog.broker.launcher import LocalCluster

    args = parse_args(argv)
    settings = FaultRunSettings(seconds=args.minutes * 60, partitions=args.partitions,
                                replication_factor=args.replication_factor, min_insync=args.min_insync,
                                session_timeout_ms=args.session_timeout_ms, rate=args.rate, seed=args.seed)
    base = Path(args.base_dir or tempfile.mkdtemp(prefix="sparklog-fault-"))
    with LocalCluster(base, brokers=args.brokers, overrides=settings.broker_overrides()) as cluster:
        result = run(cluster, cluster.zookeeper, settings)
    print(result.summary())
    return 0 if result.ok else 1


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--min-insync", type=int, default=2)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--base-dir", default=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
