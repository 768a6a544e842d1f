"""The idempotent producer's cost on the broker's hot path: PartitionLog.append of batches carrying a producer
id and consecutive sequences (checked and recorded under the append lock, producer_state.py) beside the same
appends of batches without one (not checked), in the same run.

    .venv/bin/python benchmarks/idempotence.py [--batches 20000] [--records 1,50] [--rounds 3] [--dir DIR]

The batches are built before the clock starts (one producer, sequences following on); each round appends them
to a fresh log with flush.ms set to never (one fsync at the end), alternating which kind goes first, since the
machine may be shared. It prints each round, the medians, and the ratio idempotent / plain appends per second
(goal: >= 0.90, the check is per batch, not per record).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sparklog.records.batch import build_batch  # noqa: E402
from sparklog.storage import PartitionLog  # noqa: E402
from sparklog.storage.config import LONG_MAX  # noqa: E402

VALUE_BYTES = 200
PRODUCER_ID = 4242
LOG_CONFIG = {"flush.ms": LONG_MAX}  # fsync only at the end


def make_batches(count: int, records: int, idempotent: bool) -> list[bytes]:
    now = time.time_ns() // 1_000_000  # producer.id.expiration.ms counts from the batches' timestamps
    value = b"v" * VALUE_BYTES
    batches = []
    for b in range(count):
        rows = [(None, value, None, now) for _ in range(records)]
        if idempotent:
            batches.append(build_batch(rows, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=b * records))
        else:
            batches.append(build_batch(rows))
    return batches


def append_all(directory: str, batches: list[bytes]) -> float:
    log = PartitionLog.open(directory, LOG_CONFIG)
    try:
        append = log.append
        start = time.perf_counter()
        for batch in batches:
            append(batch)
        log.flush()
        return time.perf_counter() - start
    finally:
        log.close()
        shutil.rmtree(directory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--records", default="1,50", help="records per batch, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir under the cwd)")
    args = parser.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-idem-", dir=args.dir or os.getcwd()) as root:
        for records in (int(r) for r in args.records.split(",")):
            compare(root, args.batches, records, args.rounds)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def compare(root: str, count: int, records: int, rounds: int) -> None:
    """Rounds of both kinds, alternating which goes first; prints each round, the medians and the ratio."""
    kinds = {"plain": make_batches(count, records, False), "idempotent": make_batches(count, records, True)}
    times: dict[str, list[float]] = {"plain": [], "idempotent": []}
    for r in range(rounds):
        for kind in (("plain", "idempotent") if r % 2 == 0 else ("idempotent", "plain")):
            times[kind].append(append_all(os.path.join(root, f"{kind}-{r}-0"), kinds[kind]))
        print(f"records/batch {records:3d} round {r + 1}: "
              + "  ".join(f"{k} {count / times[k][-1]:9,.0f} appends/s" for k in times))
    plain, idem = statistics.median(times["plain"]), statistics.median(times["idempotent"])
    print(f"records/batch {records:3d} medians: plain {count / plain:9,.0f}  idempotent {count / idem:9,.0f} "
          f"appends/s   ratio idempotent/plain {plain / idem:.2f} (goal >= 0.90)")


if __name__ == "__main__":
    sys.exit(main())
