"""The exactly-once sink (`deliveryGuarantee=exactly-once`, `transactionalIdPrefix=P`): a two-phase commit of
each micro-batch, as Flink's KafkaSink and KIP-939 do it, with the driver as the one who decides.

    df.writeStream.format("sparklog").option("deliveryGuarantee", "exactly-once")
      .option("transactionalIdPrefix", "orders-eos").option("topic", "out")...

Phase 1 (each task, `prepare_task`): a producer with `transactional.id = P-<Spark partition id>` (stable
across micro-batches and attempts) calls InitProducerId, which fences any earlier attempt of that partition
and aborts its open transaction; the task writes its rows in one transaction, flushes until every record is
acknowledged (any failure fails the task, which Spark retries), and does NOT commit: it returns (transactional
id, producer id, epoch) in its commit message and closes its producer, the transaction left open (prepared).
A task without rows begins no transaction (its InitProducerId still fences an earlier attempt). A task that
meets a row it cannot write (writer.py Rule 5) aborts its transaction and returns the refusal instead.

Phase 2 (the driver, `decide`, in the writer's commit(messages, batchId)):
Rule 0: a batch with a refused row is not decided: commit raises the refusal (writer.py Rule 5), so it is
the first line the user reads, and Spark's abort of the failed write aborts every task's prepared transaction:
nothing of the batch becomes visible.
Rule 1: the decision is durable before it is acted on: the ledger gets "batch B deciding, these transactions",
then EndTxn commit is sent for each (`client.transactions.complete_prepared`: the coordinator takes EndTxn
with the id, producer id and epoch from any connection), then "batch B done".
Rule 2: a batch the ledger has already decided (B <= the last decided batch: Spark replays a batch whose
commit its own commit log did not record) is not decided again: the replay's transactions are aborted.
Rule 3 (recovery, when the writer is created on the driver: a query's start or restart): a last decision
"deciding" without "done" is finished: EndTxn commit of each transaction (a completed commit answers NONE,
so a commit sent twice is harmless), then "done". If the coordinator aborted them all meanwhile (the driver
stayed away longer than transaction.timeout.ms) the decision is recorded "abandoned" and the replay of the
batch commits anew; if it aborted only some, the batch is partly visible and the writer refuses to go on
with a one-line error naming the batch (this is the guarantee's one hole: keep the driver's downtime under
the transaction timeout). Transactions of an undecided batch are aborted by the re-run tasks' InitProducerId.
Rule 4 (the ledger): one compacted, replicated topic per prefix, `__sparklog_eos-P` (one partition, key
"decision", RF min(3, brokers)), whose last record is the last decision as JSON. A topic of its own rather than
a group's offset metadata: a decision lists every task's transaction, which offset.metadata.max.bytes (4096)
would cap at a few hundred tasks, and it needs no output topic to hang offsets on (the rows may name topics).
Rule 5 (timeouts): the tasks' `transaction.timeout.ms` defaults to 900000 (Kafka's transaction.max.timeout.ms
default, the most a broker allows unless raised), so a slow or restarted driver's commit still finds its
prepared transactions; `kafka.transaction.timeout.ms` sets it (at most the broker's
transaction.max.timeout.ms). The cost: read_committed readers of the output wait for the driver's commit
(the last stable offset stays at a prepared transaction's first record until then), and an open transaction
of a dead query holds them back until the re-run fences it or the timeout aborts it.

What is guaranteed: each micro-batch's rows become visible to read_committed readers once, whatever process is
killed when, provided the query is restarted from its checkpoint within transaction.timeout.ms, one query
per prefix, no speculative execution (a speculative attempt's InitProducerId would fence the other attempt).
read_uncommitted readers see every attempt's rows, as in Kafka.

Batch writes (`df.write`) are one job: commit decides it as batch `batchId` (the option, which `to_sparklog`
passes from foreachBatch so a replayed micro-batch is aborted), else as the ledger's next batch number.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from sparklog.datasource.options import WriteOptions
from sparklog.datasource.security import security_of
from sparklog.datasource.writer import SparklogRowError, new_producer, raise_refused, send_all

log = logging.getLogger(__name__)

SINK_TRANSACTION_TIMEOUT_MS = 900_000  # Rule 5
DECIDING, DONE, ABANDONED = "deciding", "done", "abandoned"
LEDGER_KEY = b"decision"
LEDGER_TIMEOUT_S = 60.0


class ExactlyOnceError(RuntimeError):
    """A decided batch could not be completed as decided (Rule 3)."""


@dataclass
class PreparedCommitMessage(WriterCommitMessage):
    """A task's prepared transaction (None: the task had no rows)."""
    rows: int
    transaction: Optional[tuple[str, int, int]]  # (transactional id, producer id, epoch)
    refused: Optional[str] = None  # writer.py Rule 5: why the task stopped writing (its transaction aborted)


@dataclass(frozen=True)
class Decision:
    batch: int
    state: str
    transactions: tuple[tuple[str, int, int], ...]

    def encode(self) -> bytes:
        return json.dumps({"batch": self.batch, "state": self.state,
                           "transactions": [list(t) for t in self.transactions]}).encode()

    @classmethod
    def decode(cls, value: bytes) -> "Decision":
        data = json.loads(value)
        return cls(int(data["batch"]), data["state"], tuple(tuple(t) for t in data["transactions"]))


# -- phase 1: the tasks ---------------------------------------------------------------------------------------

def prepare_task(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> PreparedCommitMessage:
    from pyspark import TaskContext

    tid = f"{options.transactional_id_prefix}-{TaskContext.get().partitionId()}"
    settings = {"transactional.id": tid}
    if "transaction.timeout.ms" not in dict(options.producer_settings):
        settings["transaction.timeout.ms"] = SINK_TRANSACTION_TIMEOUT_MS
    producer = new_producer(options, **settings)
    try:
        producer.init_transactions()  # fences an earlier attempt of this partition, aborting its transaction
        producer.begin_transaction()
        try:
            rows = send_all(producer, options, batches)
        except SparklogRowError as exc:
            if exc.sent:  # an empty transaction has nothing to abort (the coordinator refuses its EndTxn)
                producer.abort_transaction()
            return PreparedCommitMessage(0, None, str(exc))
        if rows == 0:
            return PreparedCommitMessage(0, None)
        prepared = producer.prepare_transaction()
        return PreparedCommitMessage(rows, (prepared.transactional_id, prepared.producer_id, prepared.producer_epoch))
    finally:
        producer.close()  # no abort: the transaction stays prepared for the driver


# -- phase 2: the driver --------------------------------------------------------------------------------------

def decide(options: WriteOptions, messages: Iterable, batch_id: int) -> None:
    """Rules 1 and 2."""
    transactions = _transactions(messages)
    ledger = Ledger(options)
    last = ledger.last()
    if last is not None and last.state != ABANDONED and last.batch >= batch_id:
        log.warning("batch %d of %s was decided before (the last decided is %d): its replay's %d transactions "
                    "are aborted", batch_id, options.transactional_id_prefix, last.batch, len(transactions))
        end_all(options, transactions, commit=False)
        return
    ledger.record(Decision(batch_id, DECIDING, transactions))
    end_all(options, transactions, commit=True)
    ledger.record(Decision(batch_id, DONE, ()))


def next_batch_id(options: WriteOptions) -> int:
    """A batch write without batchId: the batch after the ledger's last."""
    last = Ledger(options).last()
    return 0 if last is None else last.batch + 1


def recover(options: WriteOptions) -> None:
    """Rule 3."""
    ledger = Ledger(options)
    last = ledger.last()
    if last is None or last.state != DECIDING:
        return
    log.info("%s: completing the commit of batch %d (%d transactions)", options.transactional_id_prefix,
             last.batch, len(last.transactions))
    aborted = end_all(options, last.transactions, commit=True)
    if aborted and len(aborted) < len(last.transactions):
        raise ExactlyOnceError(
            f"{options.transactional_id_prefix}: batch {last.batch} is partly visible: the coordinator aborted "
            f"{len(aborted)} of its {len(last.transactions)} transactions ({', '.join(aborted)}) before the driver "
            "came back to commit them (transaction.timeout.ms passed)")
    ledger.record(Decision(last.batch, ABANDONED if aborted else DONE, ()))


def abort(options: WriteOptions, messages: Iterable) -> None:
    end_all(options, _transactions(messages), commit=False)


def end_all(options: WriteOptions, transactions, commit: bool) -> list[str]:
    """EndTxn for each; the ids found fenced (their transaction already aborted by a newer epoch or the
    coordinator's timeout). Any other failure is raised."""
    from sparklog.client.producer import bootstrap_from
    from sparklog.client.transactions import PreparedTransaction, TransactionError, complete_prepared

    c = options.connection
    servers = bootstrap_from(c.bootstrap_servers, c.zookeeper_connect, c.zookeeper_timeout_ms)
    fenced = []
    for tid, pid, epoch in transactions:
        try:
            complete_prepared(servers, [PreparedTransaction(tid, pid, epoch)], commit, LEDGER_TIMEOUT_S,
                              **security_of(c.settings))
        except TransactionError as exc:
            if not exc.fatal():
                raise
            fenced.append(tid)
    return fenced


def _transactions(messages: Iterable) -> tuple[tuple[str, int, int], ...]:
    return tuple(tuple(m.transaction) for m in messages if m is not None and m.transaction is not None)


class Ledger:
    """Rule 4: the last decision of prefix P in the compacted topic `__sparklog_eos-P`."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.topic = f"__sparklog_eos-{options.transactional_id_prefix}"
        self._ensure_topic()

    def _clients(self) -> dict:
        c = self.options.connection
        return {"bootstrap_servers": c.bootstrap_servers, "zookeeper": c.zookeeper_connect, **security_of(c.settings)}

    def _ensure_topic(self) -> None:
        from sparklog.client.admin import AdminClient

        admin = AdminClient(**self._clients())
        try:
            brokers = len(admin.describe_cluster()[2])
            admin.create_topic(self.topic, 1, min(3, brokers), {"cleanup.policy": "compact"}, exist_ok=True,
                               timeout=LEDGER_TIMEOUT_S)
        finally:
            admin.close()

    def last(self) -> Decision | None:
        from sparklog.client.consumer import Consumer

        tp = (self.topic, 0)
        consumer = Consumer(**self._clients())
        try:
            end = consumer.end_offsets([tp])[tp]
            if end == 0:
                return None
            consumer.assign([tp])
            consumer.seek(tp, end - 1)
            deadline = time.monotonic() + LEDGER_TIMEOUT_S
            while time.monotonic() < deadline:
                for record in consumer.poll(1.0):
                    if record.offset == end - 1:
                        return Decision.decode(record.value)
            raise TimeoutError(f"the last decision of {self.topic} (offset {end - 1}) could not be read")
        finally:
            consumer.close()

    def record(self, decision: Decision) -> None:
        from sparklog.client.producer import Producer

        producer = Producer(**self._clients())
        try:
            producer.send(self.topic, decision.encode(), key=LEDGER_KEY, partition=0).get(LEDGER_TIMEOUT_S)
        finally:
            producer.close()


# -- the writers ----------------------------------------------------------------------------------------------

class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    """`writeStream` with deliveryGuarantee=exactly-once (module docstring). Created on the driver: recovers."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        recover(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PreparedCommitMessage:
        return prepare_task(self.options, iterator)

    def commit(self, messages: list, batchId: int) -> None:
        raise_refused(messages)  # Rule 0
        decide(self.options, messages, batchId)

    def abort(self, messages: list, batchId: int) -> None:
        abort(self.options, messages)


class ExactlyOnceWriter(DataSourceArrowWriter):
    """`write` with deliveryGuarantee=exactly-once: one job, one decision (module docstring, batch writes)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        recover(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PreparedCommitMessage:
        return prepare_task(self.options, iterator)

    def commit(self, messages: list) -> None:
        raise_refused(messages)  # Rule 0
        batch_id = self.options.batch_id
        decide(self.options, messages, next_batch_id(self.options) if batch_id is None else batch_id)

    def abort(self, messages: list) -> None:
        abort(self.options, messages)
