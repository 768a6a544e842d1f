"""Transaction history run: consume-transform-produce workers under random SIGKILLs, then the exactly-once check.

    python scripts/transactions_run.py [--minutes 5] [--seed N] [--inputs 20000] [--partitions 4] [--workers 3]
                                       [--batch 10] [--pause 0.3] [--no-offsets] [--worker-debug CONTEXTS]
                                       [--base-dir DIR]

Starts an embedded ZooKeeper and three brokers (`LocalCluster`, RF 3, min ISR 2) and runs the scenario of
`tests/support/transaction_run.py`: workers copying a pre-filled input topic to an output topic in transactions
(offsets sent in the transaction) while transaction coordinators, partition leaders and workers are SIGKILLed;
then the output is read read_committed and read_uncommitted to each partition's end and judged
(`tests/support/transaction_history.py`). Exit status 0 when every input value is committed exactly once and
nothing else is wrong; 1 on any violation, when no transaction was committed, or when the drain after the faults
did not commit the whole input by its deadline (`transaction_run.py` Rule 4). `--no-offsets` plants a defect
(workers that do not send their offsets in the transaction) to show the check failing.
`tests/integration/test_transactions_history.py` runs a short version in the suite.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.transaction_run import TransactionRunSettings, run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from sparklog.broker.launcher import LocalCluster

    args = parse_args(argv)
    settings = TransactionRunSettings(seconds=args.minutes * 60, inputs=args.inputs, partitions=args.partitions,
                                      workers=args.workers, seed=args.seed,
                                      worker_args=("--batch", str(args.batch), "--pause", str(args.pause),
                                                   *(("--no-offsets",) if args.no_offsets else ()),
                                                   *(("--debug", args.worker_debug) if args.worker_debug else ())))
    print(f"load average before: {os.getloadavg()}", flush=True)
    base = Path(args.base_dir or tempfile.mkdtemp(prefix="sparklog-txn-"))
    (base / "journals").mkdir(parents=True, exist_ok=True)
    with LocalCluster(base / "brokers", brokers=3, overrides=settings.broker_overrides()) as cluster:
        result = run(cluster, cluster.zookeeper, settings, base / "journals")
    print(result.summary())
    print(f"journals and worker logs: {base / 'journals'}")
    print(f"load average after: {os.getloadavg()}")
    return 0 if result.ok else 1


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--inputs", type=int, default=20000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--no-offsets", action="store_true", help="plant a defect: offsets not in the transaction")
    parser.add_argument("--batch", type=int, default=10, help="records a transaction (at most)")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds a worker sleeps between transactions")
    parser.add_argument("--worker-debug", default=None, help="librdkafka debug contexts of the workers, e.g. eos,cgrp")
    parser.add_argument("--base-dir", default=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
