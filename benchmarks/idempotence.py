"""The idempotent producer's cost on the broker's hot path: PartitionLog.append of batches carrying a producer
id and consecutive sequences (checked and recorded under the append lock, producer_state.py) beside the same
appends of batches without one (not checked), in the same run.

    .venv/bin/python benchmarks/idempotence.py [--batches 20000] [--records 1,50] [--rounds 3] [--dir DIR]
                                               [--producer-messages 30000] [--leader] [--clock cpu]
                                               [--compression lz4]

The batches are built before the clock starts (one producer, sequences following on); each round appends them
to a fresh log with flush.ms set to never (one fsync at the end), alternating which kind goes first, since the
machine may be shared. It prints each round, the medians, and the ratio idempotent / plain appends per second
(goal: >= 0.90, the check is per batch, not per record). With --leader the appends are
PartitionLog.append_as_leader's, a Produce request's (a client's checks: attributes, sequence, records).

With --producer-messages N > 0 it then starts ZooKeeper and one broker (LocalCluster) and sends N 200-byte
messages with sparklog's producer (default batching) three ways, in rounds: acks=1 without idempotence (the
old default), acks=all without idempotence, and the new default (idempotent, so acks=all); each to a fresh
single-partition topic, timed to the last acknowledgement. Only acknowledged messages count (the futures
`send` returned, read after the clock stops: measure.sparklog_produce); a round with a failed or
unacknowledged send is FAILED and the script exits 1 (measure.py Rule 4). On this broker acks=all waits for the fsync of a
single-replica log (its high watermark is the flushed offset), and an idempotent producer keeps at most five
batches of a partition unacknowledged (the broker's dedup window).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import run, shortfall, sparklog_produce  # noqa: E402

from sparklog.records.batch import build_batch  # noqa: E402
from sparklog.storage import PartitionLog  # noqa: E402
from sparklog.storage.config import LONG_MAX  # noqa: E402

VALUE_BYTES = 200
PRODUCER_ID = 4242
LOG_CONFIG = {"flush.ms": LONG_MAX}  # fsync only at the end


def make_batches(count: int, records: int, idempotent: bool, compression: str = "none") -> list[bytes]:
    now = time.time_ns() // 1_000_000  # producer.id.expiration.ms counts from the batches' timestamps
    value = b"v" * VALUE_BYTES
    batches = []
    for b in range(count):
        rows = [(None, value, None, now) for _ in range(records)]
        if idempotent:
            batches.append(build_batch(rows, compression, producer_id=PRODUCER_ID, producer_epoch=0,
                                       base_sequence=b * records))
        else:
            batches.append(build_batch(rows, compression))
    return batches


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # cpu: this process's CPU, not the scheduler's gaps


def append_all(directory: str, batches: list[bytes], leader: bool = False, clock=time.perf_counter) -> float:
    log = PartitionLog.open(directory, LOG_CONFIG)
    try:
        append = functools.partial(log.append_as_leader, leader_epoch=0) if leader else log.append
        start = clock()
        for batch in batches:
            append(batch)
        log.flush()
        return clock() - start
    finally:
        log.close()
        shutil.rmtree(directory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--records", default="1,50", help="records per batch, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--producer-messages", type=int, default=30_000, help="0: skip the producer part")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir under the cwd)")
    parser.add_argument("--leader", action="store_true",
                        help="append with append_as_leader (a Produce request's path: a client's checks) "
                             "instead of append")
    parser.add_argument("--compression", default="none", help="the batches' codec (none, gzip, snappy, lz4, zstd)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="what the append rounds time: wall (default) or this process's CPU time, which a "
                             "loaded machine's scheduler does not inflate")
    args = parser.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-idem-", dir=args.dir or os.getcwd()) as root:
        for records in (int(r) for r in args.records.split(",")):
            compare(root, args.batches, records, args.rounds, args.leader, CLOCKS[args.clock], args.compression)
        if args.producer_messages:
            compare_producers(root, args.producer_messages, args.rounds)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def compare(root: str, count: int, records: int, rounds: int, leader: bool = False, clock=time.perf_counter,
            compression: str = "none") -> None:
    """Rounds of both kinds, alternating which goes first; prints each round, the medians and the ratio."""
    kinds = {"plain": make_batches(count, records, False, compression),
             "idempotent": make_batches(count, records, True, compression)}
    times: dict[str, list[float]] = {"plain": [], "idempotent": []}
    for r in range(rounds):
        for kind in (("plain", "idempotent") if r % 2 == 0 else ("idempotent", "plain")):
            times[kind].append(append_all(os.path.join(root, f"{kind}-{r}-0"), kinds[kind], leader, clock))
        print(f"records/batch {records:3d} round {r + 1}: "
              + "  ".join(f"{k} {count / times[k][-1]:9,.0f} appends/s" for k in times))
    plain, idem = statistics.median(times["plain"]), statistics.median(times["idempotent"])
    print(f"records/batch {records:3d} medians: plain {count / plain:9,.0f}  idempotent {count / idem:9,.0f} "
          f"appends/s ({1e6 * plain / count:.2f} / {1e6 * idem / count:.2f} us an append)   ratio "
          f"idempotent/plain {plain / idem:.2f} (goal >= 0.90)")


PRODUCER_WAYS = {"acks=1, no idempotence": {"acks": 1, "enable.idempotence": False},
                 "acks=all, no idempotence": {"enable.idempotence": False},
                 "default: idempotent, acks=all": {}}


def compare_producers(root: str, count: int, rounds: int) -> None:
    from pathlib import Path

    from sparklog.broker.launcher import LocalCluster
    from sparklog.client import Producer
    from sparklog.client.admin import AdminClient

    rates: dict[str, list[float]] = {name: [] for name in PRODUCER_WAYS}
    with LocalCluster(Path(root) / "cluster", brokers=1) as cluster:
        for r in range(rounds):
            for name, settings in PRODUCER_WAYS.items():
                topic = f"bench-{r}-{len(rates[name])}-{abs(hash(name)) % 10_000}"
                with AdminClient(cluster.bootstrap) as admin:
                    admin.create_topic(topic, 1)
                with Producer(cluster.bootstrap, **settings) as producer:
                    done = sparklog_produce(producer, topic, count, b"v" * VALUE_BYTES, deadline_s=300)
                if done.acked != count:
                    print(shortfall(f"{name}: FAILED {done.failed}, unacknowledged {done.unacknowledged} of "
                                    f"{count} (first error: {done.first_error})"), flush=True)
                rates[name].append(done.acked / done.seconds)
            print(f"producer round {r + 1}: " + "  ".join(f"{n} {v[-1]:9,.0f}" for n, v in rates.items()) + " msg/s")
    medians = {name: statistics.median(v) for name, v in rates.items()}
    old, all_acks, new = medians.values()
    print("producer medians: " + "  ".join(f"{n} {v:9,.0f}" for n, v in medians.items()) + " msg/s")
    if not (old and all_acks):
        print("no ratio: a way acknowledged nothing (FAILED above)")
        return
    print(f"ratio idempotent / acks=all without idempotence {new / all_acks:.2f}; idempotent / acks=1 {new / old:.2f}")


if __name__ == "__main__":
    sys.exit(run(main))
