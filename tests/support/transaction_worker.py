"""One consume-transform-produce worker of the transaction history run (support/transaction_run.py), a process.

    python transaction_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID JOURNAL [--no-offsets]
                                 [--batch N] [--pause S] [--drain] [--debug CONTEXTS]

Reads INPUT read_committed in GROUP (no auto commit), and for each batch polled (at most --batch records, then
--pause seconds of sleep, so that the work spans the faults): begin a transaction, write
every record to OUTPUT as `output_value(input, tag, i, count)`, send the batch's next offsets to the transaction
(unless --no-offsets: a planted defect), commit. JOURNAL gets `commit <tag>` after commit_transaction returned,
`abort <tag>` after abort_transaction returned (flushed at once: the worker may be SIGKILLed at any moment).
Rule 1: an abortable error aborts the attempt and rewinds the consumer to the group's committed offsets (the
records are read again); a fatal one (fenced) exits 3 for the run to restart the worker. SIGTERM stops the
worker between transactions; SIGABRT prints every thread's Python stack to stderr, then ends it. --debug sets
librdkafka's `debug` on both clients (their log is on stderr, which the run keeps beside the journal).
Rule 2 (the drain): SIGUSR1, or --drain at the start, ends the pacing: no pause, DRAIN_BATCH records a
transaction, so that what the faults left is committed at the worker's full rate.
Rule 3: the producer retries after RETRY_BACKOFF_MS, not librdkafka's 100 ms: the AddOffsetsToTxn that opens
the next transaction is answered CONCURRENT_TRANSACTIONS until the coordinator has written the previous one's
markers and CompleteCommit (Kafka's coordinator, as sparklog's), which takes tens of milliseconds on a loaded
machine; a 100 ms wait for it was the largest part of a transaction in librdkafka's eos log at load 6 (one worker,
no faults, 10 records a transaction: 170 ms a transaction in send_offsets_to_transaction, 21 ms in
commit_transaction). At load 11-16 the gain measured smaller (57 against 53 records/s, alternating in one
cluster). librdkafka doubles the backoff up to retry.backoff.max.ms, so a fault is not hammered.
Rule 4 (the watchdog): every transactional call that takes a timeout ends the process (exit 1, its Python
stack on stderr: faulthandler) if it has not returned WATCHDOG_S after it began. librdkafka's
send_offsets_to_transaction can block past its timeout for good when the group's coordinator went away
(confluentinc/librdkafka#5456, #5511: the coordinator request's timeout is never checked, and a coordinator
dropped from the metadata is never asked for again); a worker stuck there holds its input partitions in the
group (its consumer still heartbeats), so the drain could not finish. The run restarts the worker, as after
any crash: its successor's InitProducerId aborts the open transaction.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support.transaction_history import output_value  # noqa: E402

BATCH = 50
DRAIN_BATCH = 200
PAUSE_S = 0.0
TIMEOUT_S = 30
WATCHDOG_S = TIMEOUT_S + 15  # Rule 4
RETRY_BACKOFF_MS = 20  # Rule 3: Kafka's Java producer retries AddPartitionsToTxn after 20 ms for the same reason
stopping = False
pacing = {"batch": BATCH, "pause": PAUSE_S}


def main(argv: list[str]) -> int:
    bootstrap, source, sink, group, tid, journal_path = argv[:6]
    send_offsets = "--no-offsets" not in argv
    pacing.update(batch=int(_option(argv, "--batch", BATCH)), pause=float(_option(argv, "--pause", PAUSE_S)))
    if "--drain" in argv:
        _drain()
    faulthandler.enable()  # SIGABRT (the run's answer to a worker that ignores SIGTERM) prints where it is stuck
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGUSR1, _drain)
    consumer, producer = _clients(bootstrap, group, tid, _option(argv, "--debug", None))
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([source])
    with open(journal_path, "a", buffering=1) as journal:
        sequence = 0
        while not stopping:
            batch = [m for m in consumer.consume(pacing["batch"], 0.5) if m.error() is None]
            if batch:
                sequence += 1
                _transaction(consumer, producer, sink, batch, f"{tid}.{os.getpid()}.{sequence}", journal,
                             send_offsets)
                time.sleep(pacing["pause"])
    consumer.close()
    return 0


def _option(argv: list[str], name: str, default):
    return argv[argv.index(name) + 1] if name in argv else default


def _stop(*_):
    global stopping
    stopping = True


def _drain(*_):
    """Rule 2."""
    pacing.update(batch=DRAIN_BATCH, pause=0.0)


def _clients(bootstrap: str, group: str, tid: str, debug: str | None):
    from confluent_kafka import Consumer, Producer

    common = {"bootstrap.servers": bootstrap, "log_level": 2, **({"debug": debug, "log_level": 7} if debug else {})}
    consumer = Consumer({**common, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    producer = Producer({**common, "transactional.id": tid, "transaction.timeout.ms": 20000, "linger.ms": 5,
                         "retry.backoff.ms": RETRY_BACKOFF_MS})
    return consumer, producer


def _transaction(consumer, producer, sink: str, batch, tag: str, journal, send_offsets: bool) -> None:
    """One attempt (Rule 1): committed and journaled, or aborted, journaled and rewound; fatal errors raise."""
    from confluent_kafka import KafkaException

    try:
        producer.begin_transaction()
        for i, message in enumerate(batch):
            producer.produce(sink, output_value(message.value().decode(), tag, i, len(batch)), message.value())
        if send_offsets:
            with _watchdog():
                producer.send_offsets_to_transaction(_next_offsets(batch), consumer.consumer_group_metadata(),
                                                     TIMEOUT_S)
        _commit(producer)
        journal.write(f"commit {tag}\n")
    except KafkaException as exc:
        if exc.args[0].fatal() or not exc.args[0].txn_requires_abort():
            raise
        _abort(consumer, producer, tag, journal)


def _commit(producer) -> None:
    """commit_transaction, called again after a retriable error (librdkafka's rule: the outcome is not known)."""
    from confluent_kafka import KafkaException

    while True:
        try:
            with _watchdog():
                return producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            if not exc.args[0].retriable() or exc.args[0].txn_requires_abort():
                raise


def _abort(consumer, producer, tag: str, journal) -> None:
    from confluent_kafka import OFFSET_BEGINNING

    with _watchdog():
        producer.abort_transaction(TIMEOUT_S)
    journal.write(f"abort {tag}\n")
    assignment = consumer.assignment()
    if assignment:
        with _watchdog():
            committed = consumer.committed(assignment, TIMEOUT_S)
        for tp in committed:
            tp.offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            consumer.seek(tp)


@contextlib.contextmanager
def _watchdog():
    """Rule 4: the process ends if the block has not finished within WATCHDOG_S."""
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _next_offsets(batch):
    from confluent_kafka import TopicPartition

    last: dict[tuple[str, int], int] = {}
    for message in batch:
        last[(message.topic(), message.partition())] = message.offset() + 1
    return [TopicPartition(topic, partition, offset) for (topic, partition), offset in last.items()]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
