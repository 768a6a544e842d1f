"""A fault run: random SIGKILL / SIGSTOP / SIGTERM of brokers under an acks=all producer and a live consumer,
then a final read of every partition and the history check (history.py). The scenario of issue 9's "history
checker"; `scripts/fault_run.py` runs it for minutes on its own cluster, `tests/integration/test_fault_run.py`
for seconds on the suite's ZooKeeper.

- a confluent-kafka producer (acks=all, retries, no idempotence) sends unique values at `rate` msg/s; every
  delivery report without error is an acknowledged write, every error is counted by name;
- a live consumer reads every partition from offset 0 (its reads are checked for divergence and order);
- a nemesis that every few seconds picks a running broker and kills it (SIGKILL, restarted after a pause),
  pauses it (SIGSTOP past the session timeout, then SIGCONT: a zombie), or stops it cleanly (SIGTERM: a
  controlled shutdown, then a restart). At most `replication factor - min.insync` brokers (at least one)
  are down at once, so acks=all writes stay possible with RF >= 2.
Rule 1: at the end every broker is running again and every partition has a leader before the final read,
which reads each partition up to its high watermark (asked again while a restarted leader takes over) and
records it as the checker's final log: an unreachable partition, or one not read to its end by the deadline,
raises, never reads as empty or short.
Rule 2: every thread started here is joined before `run` returns; the caller owns the cluster.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from support.history import History, Report

FAULT_INTERVAL_S = (2.0, 5.0)  # a fault every so many seconds, uniformly
DOWN_S = (1.0, 4.0)  # a killed or stopped broker stays down this long
FINAL_READ_TIMEOUT_S = 120.0
LEADERS_TIMEOUT_S = 120.0
LIBRDKAFKA_LOG_LEVEL = 2  # syslog levels: hide the connection-refused noise faults cause (3 = error)
# librdkafka's default is 30000: a request in flight to a paused broker (SIGSTOP keeps its connections
# open) is given up and retried elsewhere after this, instead of holding the run's final flush.
PRODUCE_REQUEST_TIMEOUT_MS = 5000
FLUSH_INTERVAL_MS = "50"  # log.flush.interval.ms of the brokers: RF 1 acks=all waits for an fsync


@dataclass(frozen=True)
class FaultRunSettings:
    seconds: float = 300.0
    partitions: int = 6
    replication_factor: int = 3
    min_insync: int = 2
    session_timeout_ms: int = 3000
    rate: float = 200.0  # messages per second
    seed: int | None = None
    # The nemesis goes on past `seconds` until it has made this many faults: a seed then draws the same faults
    # however long a loaded machine takes to restart a broker (the draws are fixed, their pace is not).
    min_faults: int = 0

    def broker_overrides(self) -> dict[str, str]:
        return {"zookeeper.session.timeout.ms": str(self.session_timeout_ms),
                "log.flush.interval.ms": FLUSH_INTERVAL_MS}


@dataclass
class RunResult:
    faults: list[str] = field(default_factory=list)
    produce_errors: Counter = field(default_factory=Counter)  # error name -> count
    report: Report | None = None

    @property
    def ok(self) -> bool:
        """The run's verdict: a clean history with writes acknowledged (Report.ok) and no error reported to the
        producer (retries absorb every failover)."""
        return self.report is not None and self.report.ok and not self.produce_errors

    def summary(self) -> str:
        faults = ", ".join(self.faults[:20]) + (" ..." if len(self.faults) > 20 else "")
        return (f"faults: {len(self.faults)} ({faults})\n"
                f"produce errors reported to the application: {sum(self.produce_errors.values())} "
                f"{dict(self.produce_errors)}\n{self.report}")


def run(cluster, zk_connect: str, settings: FaultRunSettings) -> RunResult:
    """The whole scenario on a started `cluster` (launcher.Cluster) whose brokers use `zk_connect`."""
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    rnd = random.Random(settings.seed)
    history, result = History(), RunResult()
    topic = f"fault-{uuid.uuid4().hex[:8]}"
    zk = connect(zk_connect)
    try:
        topics.create_topic(zk, topic, settings.partitions, settings.replication_factor,
                            config={"min.insync.replicas": str(settings.min_insync)})
    finally:
        close(zk)
    wait_for_leaders(cluster.bootstrap, topic, settings.partitions)
    stop = threading.Event()
    workers = [threading.Thread(target=produce, args=(cluster, topic, history, result, settings.rate, stop)),
               threading.Thread(target=consume, args=(cluster, topic, settings.partitions, history, "live", stop))]
    for worker in workers:
        worker.start()
    try:
        nemesis(cluster, settings, rnd, result, deadline=time.monotonic() + settings.seconds)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        heal(cluster)
    wait_for_leaders(cluster.bootstrap, topic, settings.partitions)
    final_read(cluster, topic, settings.partitions, history)
    result.report = history.check()
    return result


def nemesis(cluster, settings: FaultRunSettings, rnd: random.Random, result: RunResult, deadline: float) -> None:
    """Random faults until `deadline` and `settings.min_faults`; never more than RF - min.insync brokers down at
    once."""
    may_be_down = max(1, settings.replication_factor - settings.min_insync) if settings.replication_factor > 1 else 1
    while time.monotonic() < deadline or len(result.faults) < settings.min_faults:
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
            time.sleep(settings.session_timeout_ms / 1000.0 + rnd.uniform(*DOWN_S))
            os.kill(victim.pid, signal.SIGCONT)


def heal(cluster) -> None:
    for broker in cluster.brokers.values():
        if broker.running:
            os.kill(broker.pid, signal.SIGCONT)
        else:
            broker.start()


def produce(cluster, topic: str, history: History, result: RunResult, rate: float, stop: threading.Event,
            idempotent: bool = False) -> None:
    """confluent-kafka at `rate` msg/s (acks=all, retries) until `stop`, then a flush; idempotence optional."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                         "retries": 1_000_000, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
                         "request.timeout.ms": PRODUCE_REQUEST_TIMEOUT_MS,
                         "enable.idempotence": idempotent, "log_level": LIBRDKAFKA_LOG_LEVEL})

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
    """Every partition from 0 to its high watermark, recorded as the checker's final logs (Rule 1): a read
    that cannot reach a partition's end within FINAL_READ_TIMEOUT_S raises, naming where it stopped."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"final-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": LIBRDKAFKA_LOG_LEVEL})
    try:
        ends = {p: high_watermark(consumer, TopicPartition(topic, p)) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        logs = read_to_ends(consumer, ends, time.monotonic() + FINAL_READ_TIMEOUT_S)
    finally:
        consumer.close()
    for p, records in logs.items():
        history.record_final_log(topic, p, ends[p], records)


def read_to_ends(consumer, ends: dict[int, int], deadline: float) -> dict[int, list[tuple[int, bytes]]]:
    """Each partition's (offset, value) records until its position reaches `ends[p]`; AssertionError naming
    the partitions it could not finish by `deadline`."""
    logs: dict[int, list[tuple[int, bytes]]] = {p: [] for p in ends}
    position = dict.fromkeys(ends, 0)
    while short := {p: f"{position[p]} of {ends[p]}" for p in ends if position[p] < ends[p]}:
        if time.monotonic() > deadline:
            raise AssertionError(f"the final read stopped short of the partitions' ends (read to, of end): {short}")
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                logs[msg.partition()].append((msg.offset(), msg.value()))
                position[msg.partition()] = msg.offset() + 1
    return logs


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
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic, timeout=5).topics.get(topic)
        except KafkaException:  # no answer within the call's timeout (a broker restarting, a loaded machine)
            md = None
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} has no leaders after {timeout}s")


