"""Fault run: random SIGKILL / SIGSTOP / restart of brokers under an acks=all producer, then the history check.

    python scripts/fault_run.py [--minutes 5] [--brokers 3] [--partitions 6] [--replication-factor 3]
                                [--min-insync 2] [--session-timeout-ms 3000] [--seed N] [--rate 200]
                                [--base-dir DIR]

Starts an embedded ZooKeeper and `--brokers` broker processes (`LocalCluster`), creates one topic, and runs:
- a confluent-kafka producer (acks=all, retries) sending unique values at `--rate` msg/s; every delivery
  report without error is an acknowledged write in the history (`tests/support/history.py`);
- a live consumer reading every partition from offset 0 (its reads are checked for divergence and order);
- a nemesis that every few seconds picks a running broker and kills it (SIGKILL, restarted after a pause),
  pauses it (SIGSTOP past the session timeout, then SIGCONT: a zombie), or stops it cleanly (SIGTERM: a
  controlled shutdown, then a restart). At most `replication factor - min.insync` brokers are down at once,
  so acks=all writes stay possible.
At the end every broker is running again; a final consumer reads each partition up to its high watermark,
and the checker reports lost acknowledged writes, offsets read with two values, duplicates and non-monotonic
reads. Exit status 0 when the history is clean, 1 otherwise.

With `--replication-factor 1` it exercises failover without data movement (a partition is offline while its
only broker is down); RF >= 2 exercises the replication data path (followers, high watermark, acks=all).
Values written more than once by the producer's own retries (no idempotence) are reported apart from the
problems: they are legal (tests/support/history.py). `tests/integration/test_fault_run.py` runs a short RF 3
version in the suite.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.history import History  # noqa: E402

FAULT_INTERVAL_S = (2.0, 5.0)  # a fault every so many seconds, uniformly
DOWN_S = (1.0, 4.0)  # a killed or stopped broker stays down this long
FINAL_READ_TIMEOUT_S = 120.0
LEADERS_TIMEOUT_S = 120.0
LIBRDKAFKA_LOG_LEVEL = 2  # syslog levels: hide the connection-refused noise faults cause (3 = error)


@dataclass
class RunResult:
    faults: list[str] = field(default_factory=list)
    produce_errors: Counter = field(default_factory=Counter)  # error name -> count
    report: object = None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = Path(args.base_dir or tempfile.mkdtemp(prefix="sparklog-fault-"))
    result = run(args, base)
    print(f"faults: {len(result.faults)} ({', '.join(result.faults[:20])}{' ...' if len(result.faults) > 20 else ''})")
    print(f"produce errors reported to the application: {sum(result.produce_errors.values())} "
          f"{dict(result.produce_errors)}")
    print(result.report)
    return 0 if result.report.ok else 1


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


def run(args, base: Path) -> RunResult:
    from sparklog.broker.launcher import LocalCluster
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    rnd = random.Random(args.seed)
    overrides = {"zookeeper.session.timeout.ms": str(args.session_timeout_ms), "log.flush.interval.ms": "50"}
    history, result = History(), RunResult()
    topic = f"fault-{uuid.uuid4().hex[:8]}"
    with LocalCluster(base, brokers=args.brokers, overrides=overrides) as cluster:
        zk = connect(cluster.zookeeper)
        try:
            topics.create_topic(zk, topic, args.partitions, args.replication_factor,
                                config={"min.insync.replicas": str(args.min_insync)})
            wait_for_leaders(cluster.bootstrap, topic, args.partitions)
            stop = threading.Event()
            workers = [threading.Thread(target=produce, args=(cluster, topic, history, result, args.rate, stop)),
                       threading.Thread(target=consume, args=(cluster, topic, args.partitions, history, "live",
                                                              stop))]
            for worker in workers:
                worker.start()
            nemesis(cluster, args, rnd, result, deadline=time.monotonic() + args.minutes * 60)
            stop.set()
            for worker in workers:
                worker.join()
            heal(cluster)
            wait_for_leaders(cluster.bootstrap, topic, args.partitions)
            final_read(cluster, topic, args.partitions, history)
        finally:
            close(zk)
    result.report = history.check()
    return result


def nemesis(cluster, args, rnd: random.Random, result: RunResult, deadline: float) -> None:
    """Random faults until `deadline`; never more than RF - min.insync brokers down at once."""
    may_be_down = max(1, args.replication_factor - args.min_insync) if args.replication_factor > 1 else 1
    while time.monotonic() < deadline:
        time.sleep(rnd.uniform(*FAULT_INTERVAL_S))
        up = [b for b in cluster.brokers.values() if b.running]
        if len(cluster.brokers) - len(up) >= may_be_down or not up:
            continue
        victim = rnd.choice(up)
        kind = rnd.choice(["kill", "kill", "pause", "stop"])
        result.faults.append(f"{kind} {victim.broker_id}")
        if kind == "kill":
            victim.kill()
            time.sleep(rnd.uniform(*DOWN_S))
            victim.start()
        elif kind == "stop":
            victim.stop()
            time.sleep(rnd.uniform(*DOWN_S))
            victim.start()
        else:  # a zombie: paused past its session, so others take over, then resumed
            os.kill(victim.pid, signal.SIGSTOP)
            time.sleep(args.session_timeout_ms / 1000.0 + rnd.uniform(*DOWN_S))
            os.kill(victim.pid, signal.SIGCONT)


def heal(cluster) -> None:
    for broker in cluster.brokers.values():
        if broker.running:
            os.kill(broker.pid, signal.SIGCONT)
        else:
            broker.start()


def produce(cluster, topic: str, history: History, result: RunResult, rate: float, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                         "retries": 1_000_000, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
                         "enable.idempotence": False, "log_level": LIBRDKAFKA_LOG_LEVEL})

    def delivered(err, msg) -> None:
        if err is None:
            history.record_ack(msg.topic(), msg.partition(), msg.offset(), msg.value())
        else:
            result.produce_errors[err.name()] += 1

    interval = 1.0 / rate
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            producer.produce(topic, history.next_value(), on_delivery=delivered)
        except BufferError:
            producer.poll(0.1)
            continue
        producer.poll(0)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    producer.flush(FINAL_READ_TIMEOUT_S)


def consume(cluster, topic: str, partitions: int, history: History, reader: str, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"{reader}-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": LIBRDKAFKA_LOG_LEVEL})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        while not stop.is_set():
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    history.record_read(reader, msg.topic(), msg.partition(), msg.offset(), msg.value())
    finally:
        consumer.close()


def final_read(cluster, topic: str, partitions: int, history: History) -> None:
    """Every partition from 0 to its high watermark, as the checker's ground truth."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"final-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": LIBRDKAFKA_LOG_LEVEL})
    try:
        ends = {p: high_watermark(consumer, TopicPartition(topic, p)) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        position = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    history.record_read("final", msg.topic(), msg.partition(), msg.offset(), msg.value())
                    position[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()


def high_watermark(consumer, tp, timeout: float = LEADERS_TIMEOUT_S) -> int:
    """The partition's high watermark, asked again while its leader is still taking over (a restarted broker
    opens its logs after it is elected: NOT_LEADER_OR_FOLLOWER and an unknown partition are retriable)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=10)[1]
        except KafkaException as exc:
            if time.monotonic() > deadline or not (exc.args[0].retriable() or exc.args[0].code() < 0):
                raise
            time.sleep(0.5)


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout: float = LEADERS_TIMEOUT_S) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} has no leaders after {timeout}s")


if __name__ == "__main__":
    sys.exit(main())
