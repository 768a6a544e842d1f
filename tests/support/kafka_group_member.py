"""One consumer process in a broker-coordinated Kafka group, driven through a real client's `subscribe()`.

    python tests/support/kafka_group_member.py CLIENT BOOTSTRAP TOPIC GROUP [--instance ID]
        [--session-ms N] [--heartbeat-ms N] [--assignor NAME] [--async-commit]
        [--process-ms N] [--wait-for-go]

CLIENT is `confluent` (librdkafka), `confluent-848` (librdkafka with group.protocol=consumer, KIP-848: --assignor
is then the broker's, `uniform` or `range`), `kafka-python`, `aiokafka` or `sparklog` (its KafkaGroupConsumer). The process prints one JSON object per line on
stdout, each with "t", the wall-clock time it was printed: {"assigned": [partitions]} after every rebalance
(the whole assignment), {"revoked": [partitions]}, {"m": [partition, offset]} per message, {"committed": true}
after each synchronous commit (one per poll batch), {"poll_failed": "..."} when kafka-python's poll() raised a
retriable error (the member polls again), and {"error": "..."} on a fatal client error (then it exits 3). It
runs until killed or SIGTERM (then it closes the consumer: a dynamic member leaves the group, a static one
does not). With --wait-for-go it prints {"ready": true} once its client is made and subscribes only
after a line on stdin: a test can have a member's interpreter and library started before the moment it joins.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

POLL_S = 0.2
HEARTBEAT_MS = 300  # well under the tests' session timeouts


def say(**event) -> None:
    print(json.dumps({**event, "t": time.time()}), flush=True)


# librdkafka refuses these with group.protocol=consumer: the coordinator owns them (KIP-848)
_CLASSIC_ONLY = ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy")


def run_confluent(args, stopping) -> int:
    from confluent_kafka import Consumer, KafkaError

    config = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": args.session_ms,
              "heartbeat.interval.ms": args.heartbeat_ms, "partition.assignment.strategy": args.assignor,
              "client.id": f"member-{args.instance or 'dynamic'}"}
    if args.client == "confluent-848":  # KIP-848: the broker assigns and sets the session and heartbeat
        config = {k: v for k, v in config.items() if k not in _CLASSIC_ONLY}
        config.update({"group.protocol": "consumer", "group.remote.assignor": args.assignor})
    if args.instance:
        config["group.instance.id"] = args.instance
    fatal: list[str] = []
    config["error_cb"] = lambda err: err.fatal() and fatal.append(str(err))
    consumer = Consumer(config)
    if args.wait_for_go:
        say(ready=True)
        sys.stdin.readline()
    cooperative = args.assignor == "cooperative-sticky" or args.client == "confluent-848"
    owned: set[int] = set()

    def on_assign(c, parts):
        owned.update(p.partition for p in parts)
        if cooperative:
            c.incremental_assign(parts)
        say(assigned=sorted(owned))

    def on_revoke(c, parts):
        owned.difference_update(p.partition for p in parts)
        if cooperative:
            c.incremental_unassign(parts)
        say(revoked=sorted(p.partition for p in parts))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    while not stopping:
        if fatal:
            say(error=fatal[0])
            return 3
        batch = consumer.consume(100, POLL_S)
        if batch and args.process_ms:
            time.sleep(args.process_ms / 1000)  # the application's work on a batch, between two polls
        got = False
        for msg in batch:
            if msg.error():
                if msg.error().fatal() or msg.error().code() == KafkaError._FATAL:
                    say(error=str(msg.error()))
                    return 3
                continue
            say(m=[msg.partition(), msg.offset()])
            got = True
        if got and args.async_commit:
            consumer.commit(asynchronous=True)
        elif got:
            try:
                consumer.commit(asynchronous=False)
                say(committed=True)
            except Exception as exc:  # noqa: BLE001 - a rebalance in between: the next batch commits
                say(commit_failed=str(exc))
    consumer.close()
    return 0


def run_kafka_python(args, stopping) -> int:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import KafkaError
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[args.assignor]
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=args.session_ms,
                             heartbeat_interval_ms=args.heartbeat_ms, partition_assignment_strategy=[assignor],
                             client_id="member-kafka-python", group_instance_id=args.instance)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            say(revoked=sorted(p.partition for p in revoked))

        def on_partitions_assigned(self, assigned):
            say(assigned=sorted(p.partition for p in assigned))

    consumer.subscribe([args.topic], listener=Listener())
    while not stopping:
        try:
            records = consumer.poll(timeout_ms=int(POLL_S * 1000), max_records=100)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            # kafka-python 3.0 can raise a retriable error out of poll() while a broker is down: after a
            # FindCoordinator that failed, ensure_coordinator_ready_async awaits a metadata refresh and lets
            # its failure through (KafkaConnectionError, 111 ECONNREFUSED, when the refresh went to the
            # SIGKILLed broker); the heartbeat loop's errors come out of poll() the same way. An application
            # polls again, and so does this member; a fatal error still ends it.
            say(poll_failed=str(exc))
            continue
        for messages in records.values():
            for msg in messages:
                say(m=[msg.partition, msg.offset])
        if records:
            try:
                consumer.commit()
                say(committed=True)
            except Exception as exc:  # noqa: BLE001
                say(commit_failed=str(exc))
    consumer.close()
    return 0


def run_aiokafka(args, stopping) -> int:
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[args.assignor]

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            say(revoked=sorted(p.partition for p in revoked))

        async def on_partitions_assigned(self, assigned):
            say(assigned=sorted(p.partition for p in assigned))

    async def consume() -> None:
        # client_id stays aiokafka's default: aiokafka sends no client software name, so the broker's api
        # matrix names it by its client id
        consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=args.session_ms, heartbeat_interval_ms=args.heartbeat_ms,
                                    partition_assignment_strategy=(assignor,), group_instance_id=args.instance)
        consumer.subscribe([args.topic], listener=Listener())
        await consumer.start()
        try:
            while not stopping:
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000), max_records=100)
                for messages in batches.values():
                    for msg in messages:
                        say(m=[msg.partition, msg.offset])
                if batches:
                    try:
                        await consumer.commit()
                        say(committed=True)
                    except Exception as exc:  # noqa: BLE001
                        say(commit_failed=str(exc))
        finally:
            await consumer.stop()

    asyncio.run(consume())
    return 0


def run_sparklog(args, stopping) -> int:
    """sparklog's own member (sparklog.client.KafkaGroupConsumer); it has no rebalance callbacks, so the
    assignment is reported whenever a poll finds it changed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from sparklog.client import KafkaGroupConsumer

    consumer = KafkaGroupConsumer([args.topic], bootstrap_servers=args.bootstrap, **{
        "group.id": args.group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": args.session_ms, "heartbeat.interval.ms": args.heartbeat_ms,
        "client.id": f"sparklog-python-member-{args.instance or 'dynamic'}", "group.instance.id": args.instance})
    owned: list[int] = []
    while not stopping:
        records = consumer.poll(POLL_S, max_records=100)
        now = sorted(p for _, p in consumer.assignment())
        if now != owned:
            if owned:
                say(revoked=owned)
            owned = now
            say(assigned=owned)
        for record in records:
            say(m=[record.partition, record.offset])
        if records:
            try:
                consumer.commit()
                say(committed=True)
            except Exception as exc:  # noqa: BLE001
                say(commit_failed=str(exc))
    consumer.close()
    return 0


RUNNERS = {"confluent": run_confluent, "confluent-848": run_confluent, "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka, "sparklog": run_sparklog}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=sorted(RUNNERS))
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--instance")
    parser.add_argument("--session-ms", type=int, default=3000)
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--heartbeat-ms", type=int, default=HEARTBEAT_MS)
    parser.add_argument("--process-ms", type=int, default=0,
                        help="confluent only: time spent on each non-empty batch before the next poll")
    parser.add_argument("--async-commit", action="store_true",
                        help="confluent only: commit without waiting (no \"committed\" events)")
    parser.add_argument("--wait-for-go", action="store_true",
                        help="confluent only: subscribe after a line on stdin (prints \"ready\" first)")
    args = parser.parse_args()
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        return RUNNERS[args.client](args, stopping)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which shows it
        say(error=f"{type(exc).__name__}: {exc}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
