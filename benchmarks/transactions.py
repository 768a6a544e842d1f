"""What transactions cost: confluent-kafka's transactional producer against the idempotent one, and a
read_committed consumer against a read_uncommitted one, on one broker in the same run.

    .venv/bin/python benchmarks/transactions.py [--seconds 10] [--intervals 10,100,1000] [--value-bytes 200]
                                                [--rounds 2]

Starts an embedded ZooKeeper and one broker (LocalCluster, the transaction log with one replica). Each round
sends `--value-bytes` messages for `--seconds` to a fresh single-partition topic, the idempotent producer
first, then the transactional one at each commit interval (begin, send for the interval, commit_transaction,
again), alternating the order per round since the machine may be shared. Only acknowledged messages count
(measure.py Rule 1); for the transactional producer only those of transactions whose commit_transaction
returned. It prints each round, the medians, the ratio transactional / idempotent per interval (goal at 100 ms:
>= 0.8) and the commit_transaction latency p50 / p99 per interval. Then it reads the topic the 100 ms
transactional producer wrote (its commit markers in between) from its start with read_committed and with
read_uncommitted, alternating, and prints the ratio (goal >= 0.9). A row that fell short (a send not
acknowledged, a commit that failed, a read short of its count) is FAILED or SHORT and the run exits 1
(measure.py Rule 4). Every loop has a deadline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

import measure  # noqa: E402

BROKER_SETTINGS = measure.ONE_BROKER_TRANSACTIONS  # the transaction log on the one broker
COMMIT_TIMEOUT_S = 30.0
FLUSH_DEADLINE_S = 60.0
CONSUME_DEADLINE_S = 300.0
# librdkafka's queue holds what the broker has not taken yet: a loaded machine must not make produce() refuse
PRODUCER = {"linger.ms": 5, "log_level": 2, "queue.buffering.max.messages": 1_000_000}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from sparklog.broker.launcher import LocalCluster

    print(f"load average before: {measure.load()}")
    intervals = [int(i) for i in args.intervals.split(",")]
    value = measure.payload(args.value_bytes)
    with LocalCluster(Path(tempfile.mkdtemp(prefix="sparklog-bench-txn-")), brokers=1,
                      overrides=BROKER_SETTINGS) as cluster:
        rates, latencies, read_topic = produce_rounds(cluster.bootstrap, intervals, value, args)
        report_produce(rates, latencies, intervals)
        if read_topic is not None:
            compare_reads(cluster.bootstrap, *read_topic, args.rounds)
    print(f"load average after: {measure.load()}")
    return 0


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="each producer's sending time per round")
    parser.add_argument("--intervals", default="10,100,1000", help="commit intervals in ms, comma-separated")
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    return parser.parse_args(argv)


def produce_rounds(bootstrap: str, intervals: list[int], value: bytes, args):
    """{kind: [msg/s per round]}, {interval: [commit latencies]}, and (topic, committed count) of the last
    100 ms (or first) transactional run, for the reads."""
    kinds = ["idempotent", *(f"txn {i} ms" for i in intervals)]
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    latencies: dict[int, list[float]] = {i: [] for i in intervals}
    read_topic = None
    for r in range(args.rounds):
        for kind in (kinds if r % 2 == 0 else kinds[::-1]):
            topic = new_topic(bootstrap)
            if kind == "idempotent":
                rate = idempotent_rate(bootstrap, topic, value, args.seconds)
            else:
                interval = int(kind.split()[1])
                rate, committed = transactional_rate(bootstrap, topic, value, args.seconds, interval,
                                                     latencies[interval])
                if interval == (100 if 100 in intervals else intervals[0]):
                    read_topic = (topic, committed)
            rates[kind].append(rate)
        print(f"round {r + 1}: " + "  ".join(f"{k} {rates[k][-1]:9,.0f} msg/s" for k in kinds))
    return rates, latencies, read_topic


def new_topic(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"txbench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    time.sleep(measure.TOPIC_OPEN_S)
    return topic


def idempotent_rate(bootstrap: str, topic: str, value: bytes, seconds: float) -> float:
    done = measure.confluent_produce({"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER},
                                     topic, 10**9, value, partition=0, cap_s=seconds,
                                     deadline_s=seconds + FLUSH_DEADLINE_S)
    note = done.note()
    if note:
        print(f"idempotent{note}")
    return done.acked / done.seconds if done.seconds else 0.0


def transactional_rate(bootstrap: str, topic: str, value: bytes, seconds: float, interval_ms: int,
                       latencies: list[float]) -> tuple[float, int]:
    """Transactions of `interval_ms` each for `seconds`: (committed acknowledged msg/s, their count); each
    commit_transaction's duration appended to `latencies`."""
    from confluent_kafka import KafkaException, Producer

    acked = [0]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                         **PRODUCER, "on_delivery": lambda err, _m: acked.__setitem__(0, acked[0] + (err is None))})
    producer.init_transactions(COMMIT_TIMEOUT_S)
    committed = sent = 0
    started = time.perf_counter()
    stop_at = started + seconds
    while time.perf_counter() < stop_at:
        producer.begin_transaction()
        acked[0] = 0
        sent += _send_for(producer, topic, value, min(stop_at, time.perf_counter() + interval_ms / 1e3))
        commit_started = time.perf_counter()
        try:
            producer.commit_transaction(COMMIT_TIMEOUT_S)
        except KafkaException as exc:
            print(measure.shortfall(f"txn {interval_ms} ms: FAILED commit_transaction: {exc}"))
            break
        latencies.append(time.perf_counter() - commit_started)
        committed += acked[0]
    elapsed = time.perf_counter() - started
    if committed != sent:
        print(measure.shortfall(f"txn {interval_ms} ms: SHORT {committed:,} of {sent:,} sent acknowledged in "
                                f"committed transactions"))
    return committed / elapsed, committed


def _send_for(producer, topic: str, value: bytes, until: float) -> int:
    sent = 0
    while time.perf_counter() < until:
        for _ in range(1000):
            while True:
                try:
                    producer.produce(topic, value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += 1
        producer.poll(0)
    return sent


def report_produce(rates, latencies, intervals) -> None:
    idem = statistics.median(rates["idempotent"])
    print(f"medians: idempotent {idem:,.0f} msg/s")
    for i in intervals:
        txn = statistics.median(rates[f"txn {i} ms"])
        lat = sorted(latencies[i])
        p50, p99 = (lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]) if lat else (0.0, 0.0)
        goal = "  (goal >= 0.80)" if i == 100 else ""
        print(f"txn {i:5d} ms: {txn:9,.0f} msg/s  ratio txn/idempotent {txn / idem if idem else 0:.2f}{goal}  "
              f"commit latency p50 {p50 * 1e3:.1f} ms p99 {p99 * 1e3:.1f} ms ({len(lat)} commits)")


def compare_reads(bootstrap: str, topic: str, count: int, rounds: int) -> None:
    """read_committed against read_uncommitted over the transactional topic, alternating; each read must get
    `count` messages by its deadline (measure.py Rule 2) or its row is SHORT."""
    rates: dict[str, list[float]] = {"read_committed": [], "read_uncommitted": []}
    for r in range(rounds):
        for isolation in (rates if r % 2 == 0 else list(rates)[::-1]):
            done = measure.confluent_consume({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                                              "group.id": f"bench-{uuid.uuid4().hex[:6]}"}, topic, count,
                                             deadline_s=CONSUME_DEADLINE_S)
            short = "" if done.got == count and not done.errors else measure.shortfall(
                f"; SHORT {isolation}: {done.got:,} of {count:,} ({done.errors} errors)")
            rates[isolation].append(done.got / done.seconds)
            print(f"read round {r + 1}: {isolation} {rates[isolation][-1]:9,.0f} msg/s ({done.got:,}){short}")
    rc, ru = (statistics.median(rates[k]) for k in rates)
    print(f"read medians: read_committed {rc:,.0f} msg/s  read_uncommitted {ru:,.0f} msg/s  ratio "
          f"{rc / ru if ru else 0:.2f} (goal >= 0.90)")


if __name__ == "__main__":
    sys.exit(measure.run(main))
