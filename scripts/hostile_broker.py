"""Hostile input against a live broker (issue 14): the full run, with the broker's RSS and descriptors.

    python scripts/hostile_broker.py [--inputs 10000] [--idle 2000] [--slowloris 200] [--threads 4]
                                     [--override key=value ...]

Starts an embedded ZooKeeper and one `sparklog broker` subprocess (stopped at the end), runs a
confluent-kafka producer (acks=all) and consumer against it, and meanwhile sends `--inputs` hostile inputs
(tests/support/hostile.py lists them) while holding `--idle` silent and `--slowloris` trickling connections
open. Prints the broker's RSS before, at its peak and after, its descriptors, the well-behaved clients'
errors and the broker's `handler_errors`; exits 1 if the RSS grew by 100 MiB or more, a client saw an
error, a hostile CreateTopics went unanswered, or a handler raised. tests/integration/test_broker_hostile.py
runs a short version of the same.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

RSS_GROWTH_LIMIT = 100 * 1024 * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--slowloris", type=int, default=200)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    from support import hostile
    from support.cluster import LocalCluster

    overrides = dict(item.split("=", 1) for item in args.override)
    max_request = int(overrides.get("socket.request.max.bytes", 104857600))
    with tempfile.TemporaryDirectory(prefix="sparklog-hostile-") as tmp:
        with LocalCluster(Path(tmp), brokers=1, overrides=overrides) as cluster:
            broker = cluster.brokers[1]
            report = hostile.run(broker, inputs=args.inputs, idle=args.idle, slowloris=args.slowloris,
                                 threads=args.threads, seed=args.seed, max_request_bytes=max_request)
            running = broker.running
    for line in report.lines():
        print(line)
    handler_errors = ((report.broker_statistics or {}).get("server") or {}).get("handler_errors")
    ok = (report.rss_growth < RSS_GROWTH_LIMIT and not report.client_errors and not report.failures
          and report.consumed_in_order and report.produced > 0 and handler_errors == 0 and running)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
