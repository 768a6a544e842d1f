"""Issue 9's hard bounce: partition leaders (the controller among them) SIGKILLed and restarted under acks=all.

    python scripts/hard_bounce.py [--cycles 20] [--rate 100] [--idempotence] [--session-timeout-ms 3000]
                                  [--base-dir DIR]

The scenario, exactly as the issue states it: an embedded ZooKeeper and three broker processes
(`LocalCluster`), one topic with 6 partitions, replication factor 3 and `min.insync.replicas=2`; two
producers at a steady rate with acks=all and retries — confluent-kafka and kafka-python, idempotence off by
default (`--idempotence` turns it on in both) — and a live confluent-kafka consumer recording every read.

Each cycle waits for a full ISR everywhere, picks a victim — the leader of partition `cycle % 6`, or, every
CONTROLLER_EVERY-th cycle, the controller on purpose — SIGKILLs it, waits until the controller has moved
every leadership off it and writes are acknowledged on the successors, restarts it and waits until it is
back in every ISR (the victim's negotiated ZooKeeper session checked to be --session-timeout-ms first: the
leaderships' move is bounded by it). Then the producers flush, every partition is read from offset 0 to its high watermark,
and the checks run, one summary line each:

- acknowledged - consumed = 0: every acknowledged write read back at its acknowledged offset by the final
  read (counted there, in the final log), and at least one write acknowledged;
- the final read reached every partition's end (a final read cut short fails, never passes as "read");
- nothing a live reader saw is missing from the final log;
- no offset read (live or final) or acknowledged with two different values;
- no duplicate that the producers' own retries do not explain (with `--idempotence`: no copy at all);
- no reader going backwards;
- no error reported to either application (retries hide a failover);
- the replicas' logs byte-identical: each partition's segment files, concatenated, equal on all three brokers
  once the cluster is quiet and every ISR is full.

Rule 1: every wait has a deadline (a timeout is a violation, reported as such); every thread is joined and
every process (brokers, ZooKeeper) stopped on success, failure and Ctrl-C.
Exit status 0 when every check passes, 1 otherwise. `tests/integration/test_replication.py` runs a 3-cycle
version in the suite; `scripts/fault_run.py` mixes in pauses and clean stops.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.cluster import wait_until  # noqa: E402
from support.fault_run import (  # noqa: E402
    RunResult,
    consume,
    final_read,
    heal,
    produce,
    wait_for_leaders,
)
from support.history import History  # noqa: E402
from support.zookeeper import failover_session_s  # noqa: E402

BROKERS = 3
PARTITIONS = 6
REPLICATION_FACTOR = 3
MIN_INSYNC = 2
CONTROLLER_EVERY = 4  # cycles 1, 5, 9, ... kill the controller (whether or not it leads partition cycle % 6)
FULL_ISR_TIMEOUT_S = 90.0
MOVE_SLACK_S = 30.0  # beyond the session timeout, for the controller to move the victim's leaderships
ACKS_PER_STEP = 20  # acknowledged writes that show produce goes on at each step of a cycle
ACKS_TIMEOUT_S = 60.0
IDENTICAL_TIMEOUT_S = 60.0
JOIN_TIMEOUT_S = 180.0  # a producer's final flush is bounded by its message timeout (120 s)
# kafka-python: give up a request to a dead broker after this (its default is 30000), then retry elsewhere;
# a record is reported failed only after its delivery timeout (the librdkafka run uses 120 s as well).
KAFKA_PYTHON_REQUEST_TIMEOUT_MS = 5000
KAFKA_PYTHON_DELIVERY_TIMEOUT_MS = 120_000
RETRY_BACKOFF_MS = 100


def main(argv: list[str] | None = None) -> int:
    from sparklog.broker.launcher import LocalCluster

    args = parse_args(argv)
    overrides = {"zookeeper.session.timeout.ms": str(args.session_timeout_ms), "log.flush.interval.ms": "50",
                 "auto.create.topics.enable": "false"}
    base = Path(args.base_dir or tempfile.mkdtemp(prefix="sparklog-bounce-"))
    with LocalCluster(base, brokers=BROKERS, overrides=overrides) as cluster:
        checks = run(cluster, args)
    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    return 0 if all(ok for _, ok, _ in checks) else 1


def run(cluster, args) -> list[tuple[str, bool, str]]:
    """The whole scenario on a started LocalCluster; (check, passed, detail) per check."""
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    topic = f"bounce-{uuid.uuid4().hex[:8]}"
    history, stop = History(idempotent=args.idempotence), threading.Event()
    confluent, kafka_python = RunResult(), Clients()
    zk = connect(cluster.zookeeper)
    try:
        topics.create_topic(zk, topic, PARTITIONS, REPLICATION_FACTOR, config={"min.insync.replicas": str(MIN_INSYNC)})
        wait_for_leaders(cluster.bootstrap, topic, PARTITIONS)
        workers = [
            threading.Thread(target=produce, args=(cluster, topic, history, confluent, args.rate, stop),
                             kwargs={"idempotent": args.idempotence}),
            threading.Thread(target=produce_kafka_python,
                             args=(cluster.bootstrap, topic, history, kafka_python, args.rate, stop, args.idempotence)),
            threading.Thread(target=consume, args=(cluster, topic, PARTITIONS, history, "live", stop))]
        for worker in workers:
            worker.start()
        try:
            victims = bounce(cluster, zk, topic, history, args)
        except AssertionError as exc:  # a deadline passed: a violation, reported after the cleanup
            return [("cycles", False, str(exc))]
        finally:
            stop.set()
            for worker in workers:
                worker.join(JOIN_TIMEOUT_S)
            heal(cluster)
        wait_for_leaders(cluster.bootstrap, topic, PARTITIONS)
        try:
            final_read(cluster, topic, PARTITIONS, history)
        except AssertionError as exc:  # a partition not read to its end: a violation, never a short pass
            return [("final read", False, str(exc))]
        return [("cycles", True, f"{args.cycles} SIGKILL+restart cycles, victims {victims}"),
                *history_checks(history, confluent, kafka_python),
                identical_logs(cluster, zk, topic)]
    finally:
        close(zk)


def bounce(cluster, zk, topic: str, history: History, args) -> list[str]:
    """The cycles (module docstring); the victims, e.g. "2 (controller)", "1 (leader of 3)"."""
    from sparklog.coordination.controller_election import read_controller

    victims = []
    for cycle in range(args.cycles):
        states = wait_until(lambda: full_isr(zk, topic), f"a full ISR before cycle {cycle}", FULL_ISR_TIMEOUT_S)
        acks_go_on(history, f"acknowledged writes before cycle {cycle}")
        controller = read_controller(zk)
        if cycle % CONTROLLER_EVERY == 1:
            victim, why = controller, "controller"
        else:
            victim = states[cycle % PARTITIONS].leader
            why = f"leader of {cycle % PARTITIONS}" + (", also controller" if victim == controller else "")
        victims.append(f"{victim} ({why})")
        session_s = failover_session_s(cluster.zk_server, zk, victim, args.session_timeout_ms)
        cluster.brokers[victim].kill()
        wait_until(lambda: all(s.leader not in (victim, -1) for s in partition_states(zk, topic).values()),
                   f"cycle {cycle}: leaderships moved off broker {victim}", session_s + MOVE_SLACK_S)
        acks_go_on(history, f"cycle {cycle}: acknowledged writes on the successors")
        cluster.brokers[victim].start()
        print(f"cycle {cycle + 1}/{args.cycles}: SIGKILLed broker {victims[-1]}, restarted", flush=True)
    wait_until(lambda: full_isr(zk, topic), "a full ISR after the last cycle", FULL_ISR_TIMEOUT_S)
    return victims


def acks_go_on(history: History, what: str) -> None:
    before = history.acknowledged()
    wait_until(lambda: history.acknowledged() >= before + ACKS_PER_STEP, what, ACKS_TIMEOUT_S)


def partition_states(zk, topic: str) -> dict:
    from sparklog.coordination import topics

    return topics.get_topic(zk, topic).states


def full_isr(zk, topic: str):
    states = partition_states(zk, topic)
    return states if len(states) == PARTITIONS and all(
        len(s.isr) == REPLICATION_FACTOR and s.leader > 0 for s in states.values()) else None


class Clients:
    """What the kafka-python producer reported: acknowledgements and errors by name (from its I/O thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked = 0
        self.produce_errors: Counter = Counter()


def produce_kafka_python(bootstrap: str, topic: str, history: History, result: Clients, rate: float,
                         stop: threading.Event, idempotent: bool) -> None:
    """kafka-python at `rate` msg/s, acks=all with retries, until `stop`; then a flush and a close."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, retries=1_000_000,
                             retry_backoff_ms=RETRY_BACKOFF_MS, request_timeout_ms=KAFKA_PYTHON_REQUEST_TIMEOUT_MS,
                             delivery_timeout_ms=KAFKA_PYTHON_DELIVERY_TIMEOUT_MS,
                             enable_idempotence=idempotent)

    def acked(value: bytes):
        def record(md) -> None:
            history.record_ack(md.topic, md.partition, md.offset, value)
            with result.lock:
                result.acked += 1
        return record

    def failed(exc) -> None:
        with result.lock:
            result.produce_errors[type(exc).__name__] += 1

    interval, next_at = 1.0 / rate, time.monotonic()
    try:
        while not stop.is_set():
            value = history.next_value("kp")
            producer.send(topic, value=value).add_callback(acked(value)).add_errback(failed)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        producer.flush(KAFKA_PYTHON_DELIVERY_TIMEOUT_MS / 1000.0)
    finally:
        producer.close(KAFKA_PYTHON_DELIVERY_TIMEOUT_MS / 1000.0)


def history_checks(history: History, confluent: RunResult, kafka_python: Clients) -> list[tuple[str, bool, str]]:
    report = history.check()
    kinds = Counter(p.kind for p in report.problems)
    examples = {kind: next(str(p) for p in report.problems if p.kind == kind) for kind in kinds}

    def line(names: tuple[str, ...], name: str, detail: str, ok: bool = True) -> tuple[str, bool, str]:
        shown = [examples[kind] for kind in names if kind in examples]
        return name, ok and not any(kinds[kind] for kind in names), detail + (f"; e.g. {shown[0]}" if shown else "")

    errors = {"confluent-kafka": dict(confluent.produce_errors), "kafka-python": dict(kafka_python.produce_errors)}
    return [
        line(("lost",), "acknowledged - consumed = 0",
             f"{report.acknowledged} acknowledged (kafka-python {kafka_python.acked}, confluent-kafka "
             f"{report.acknowledged - kafka_python.acked}), {report.found} of them read back at their offsets by the "
             f"final read, {report.acknowledged - report.found} missing",
             ok=report.acknowledged > 0 and report.found == report.acknowledged),
        line(("unread", "short"), "the final read reached every partition's end",
             f"{report.read} offsets read in {PARTITIONS} partitions"),
        line(("vanished",), "nothing read live that the final log lost", f"{kinds['vanished']} vanished reads"),
        line(("divergent",), "no offset read with two values",
             f"{kinds['divergent']} offsets acknowledged or read (live or final) with two values"),
        line(("duplicate",), "no unexplained duplicate",
             f"{kinds['duplicate']} duplicates; {len(report.retries)} values written twice by non-idempotent "
             f"retries (legal: idempotence {'on' if history.idempotent else 'off'})"),
        line(("non-monotonic",), "no reader going backwards", f"{kinds['non-monotonic']} backward reads"),
        ("no error reported to the producers", not any(errors.values()), str(errors)),
    ]


def identical_logs(cluster, zk, topic: str) -> tuple[str, bool, str]:
    """Each partition's segment files equal on every broker once every ISR is full (followers may still be
    fetching the last batches when the check starts: equality is awaited, with a deadline)."""
    def all_equal() -> bool:
        return all(len({segment_bytes(broker, topic, p) for broker in cluster.brokers.values()}) == 1
                   for p in range(PARTITIONS))

    try:
        wait_until(lambda: full_isr(zk, topic), "a full ISR", FULL_ISR_TIMEOUT_S)
        wait_until(all_equal, "byte-identical replicas", IDENTICAL_TIMEOUT_S)
    except AssertionError as exc:
        differing = [p for p in range(PARTITIONS)
                     if len({segment_bytes(b, topic, p) for b in cluster.brokers.values()}) > 1]
        return "replicas byte-identical", False, f"{exc}; partitions differing: {differing}"
    sizes = [len(segment_bytes(cluster.brokers[1], topic, p)) for p in range(PARTITIONS)]
    return ("replicas byte-identical", True,
            f"{PARTITIONS} partitions x {len(cluster.brokers)} brokers, segment bytes per partition {sizes}")


def segment_bytes(broker, topic: str, partition: int) -> bytes:
    """The partition's whole log as the broker's files hold it (every segment, in offset order)."""
    directory = Path(broker.log_dir) / f"{topic}-{partition}"
    names = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    return b"".join((directory / n).read_bytes() for n in names)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--rate", type=float, default=100.0, help="messages per second, per producer")
    parser.add_argument("--idempotence", action="store_true", help="enable.idempotence in both producers")
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--base-dir", default=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
