"""The sink: batch and streaming Arrow writers that produce every row of a task with one batching producer.

Rule 1: the input schema is checked in `validate_schema`, called when Spark asks for a writer (analysis
time, in the driver): a missing `value`, a wrong type, or no topic anywhere fails before anything is
written, with the messages of Spark's Kafka sink.
Rule 2: a task succeeds only if every record it sent was acknowledged: `write()` flushes its producer and
raises the first delivery error, so Spark retries the task (at-least-once, as Spark's Kafka sink). Only the
producer batches not yet acknowledged are kept between Arrow batches (memory bounded by what is in flight).
Rule 3: rows reach the producer in bulk, one `Producer.send_many` per Arrow batch (and topic), which puts
them in the same partitions and order as one `send` per row would.
Rule 4 (login): with a SASL login configured, the driver logs in once when Spark asks for a writer
(`check_login`), so a refused login fails `save()`/`start()` with its message as the first line, before any
task runs; a task's own refusal is `AuthenticationFailed` too, under pyspark's one header line.
Rule 5 (a row the sink cannot write): a partition the topic lacks (Kafka's producer: the partition does not
exist), a null topic, a topic that does not exist is `SparklogRowError`, the same on every attempt. The task
that meets it stops sending, flushes what it sent (Rule 2 holds for those rows), reads the rest of its input
and returns the refusal in its commit message; the driver's commit raises it (`raise_refused`), so it is the
first line of what `save()` or the query raises (errors.py Rule 2), where a task's own error would come under
pyspark's "An exception was thrown from the Python worker:" line, and Spark does not retry a task that would
fail the same way. A schema error (Rule 1) is the first line of what `save()`/`start()` raises too.
Columns: `value` (binary or string, required), `key` (binary or string), `topic` (string; the `topic`
option overrides it), `partition` (int), `headers` (array<struct<key: string, value: binary>>); any other
column is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from sparklog.client.errors import InvalidPartition, UnknownTopic
from sparklog.client.sasl import SaslAuthenticationError
from sparklog.datasource.errors import AuthenticationFailed, show_message_first
from sparklog.datasource.options import EXACTLY_ONCE, WriteOptions, parse_write_options
from sparklog.datasource.security import security_of



class SparklogSchemaError(ValueError):
    """The DataFrame cannot be written to sparklog as it is (Rule 1), said first (errors.py Rule 2)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        show_message_first()


class SparklogRowError(ValueError):
    """A row the sink cannot write (Rule 5). Created in a task, which goes on (so the traceback stays shown for
    the worker's later errors); `raise_refused` raises it on the driver, said first."""

    sent = False  # whether the task queued rows before it (`send_all` says): an exactly-once task aborts them


def no_such_partition(error: InvalidPartition) -> SparklogRowError:
    count = error.count or 0
    return SparklogRowError(
        f"Partition {error.partition} of topic {error.topic} does not exist: the topic has {count} partitions "
        f"(0 to {count - 1}). Write a partition number in that range, or null to let the producer choose, or add "
        "partitions (sparklog topics alter --partitions)")


def no_such_topic(topic: str, max_block_ms: int) -> SparklogRowError:
    return SparklogRowError(
        f"Topic {topic} not present in metadata after {max_block_ms} ms: it does not exist and the brokers did not "
        "create it (auto.create.topics.enable=false). Create it first (sparklog topics create)")


def raise_refused(messages) -> None:
    """Rule 5, on the driver: the first refusal a task returned, said first."""
    refusal = next((m.refused for m in messages if getattr(m, "refused", None)), None)
    if refusal is not None:
        show_message_first()
        raise SparklogRowError(refusal)


def validate_schema(schema: StructType, options: WriteOptions) -> None:
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise SparklogSchemaError("Required attribute 'value' not found")
    if not isinstance(fields["value"], (BinaryType, StringType)):
        raise SparklogSchemaError(f"value attribute type must be a string or binary, not {fields['value'].simpleString()}")
    if "key" in fields and not isinstance(fields["key"], (BinaryType, StringType)):
        raise SparklogSchemaError(f"key attribute type must be a string or binary, not {fields['key'].simpleString()}")
    if options.topic is None:
        if "topic" not in fields:
            raise SparklogSchemaError(
                "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
            )
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise SparklogSchemaError(f"topic attribute type must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise SparklogSchemaError(f"partition attribute type must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields and not _is_headers_type(fields["headers"]):
        raise SparklogSchemaError(
            f"headers attribute type must be an array<struct<key:string,value:binary>>, "
            f"not {fields['headers'].simpleString()}"
        )


def _is_headers_type(data_type) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in data_type.elementType.fields}
    return (
        len(inner) == 2
        and isinstance(inner.get("key"), StringType)
        and isinstance(inner.get("value"), BinaryType)
    )


@dataclass
class SparklogCommitMessage(WriterCommitMessage):
    rows: int
    refused: Optional[str] = None  # Rule 5: why the task stopped writing


def _column(batch: pa.RecordBatch, name: str) -> list | None:
    """A column as Python values, strings encoded as UTF-8 bytes by Arrow; None when absent."""
    index = _index(batch, name)
    if index is None:
        return None
    column = batch.column(index)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


LOGIN_CHECK_TIMEOUT_S = 30.0


def check_login(options: WriteOptions) -> None:
    """Rule 4: log in once from the driver when the sink has a SASL login; a broker that cannot be reached here
    is left to the tasks, which report it (Rule 2)."""
    security = security_of(options.connection.settings)
    if not str(security.get("security.protocol", "")).startswith("sasl"):
        return
    from sparklog.client.admin import AdminClient

    c = options.connection
    admin = AdminClient(c.bootstrap_servers, c.zookeeper_connect, **security,
                        **{"zookeeper.connection.timeout.ms": c.zookeeper_timeout_ms})
    try:
        admin.metadata([], timeout=LOGIN_CHECK_TIMEOUT_S)
    except SaslAuthenticationError as exc:
        raise AuthenticationFailed(exc) from None
    except (ConnectionError, TimeoutError, OSError):
        pass  # not a refused login: the tasks reach the brokers themselves or say why not
    finally:
        admin.close()


def write_task(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> SparklogCommitMessage:
    """A task of the sink: its rows written (Rule 2), or the refusal of a row it cannot write (Rule 5)."""
    try:
        return SparklogCommitMessage(produce_batches(options, batches))
    except SparklogRowError as exc:
        return SparklogCommitMessage(0, str(exc))


def produce_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row with one producer, flush, and raise if any record was not acknowledged (Rule 2)."""
    producer = new_producer(options)
    try:
        return send_all(producer, options, batches)
    except SaslAuthenticationError as exc:
        raise AuthenticationFailed(exc) from None
    finally:
        producer.close()


def new_producer(options: WriteOptions, **settings):
    """A producer for the sink's options, `settings` laid over them."""
    from sparklog.client import producer as producer_module  # looked up per call: tests substitute it

    c = options.connection
    return producer_module.Producer(
        bootstrap_servers=c.bootstrap_servers, zookeeper=c.zookeeper_connect,
        **{**dict(options.producer_settings), "zookeeper.connection.timeout.ms": c.zookeeper_timeout_ms, **settings})


def send_all(producer, options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Rule 2 with `producer`: every row sent and acknowledged (else raise); the number of rows. A row it cannot
    write (Rule 5) is raised once the rows sent before it are acknowledged and the input is read."""
    pending: list = []
    rows = 0
    refusal = None
    try:
        for batch in batches:
            _send_batch(producer, options, batch, pending)
            rows += batch.num_rows
            pending = _not_acknowledged(pending)
    except SparklogRowError as exc:
        refusal = exc
        exc.sent = rows > 0 or bool(pending)
        for _ in batches:  # Spark's writer expects the task to read all of its input
            pass
    _check_acknowledged(producer, pending, rows)
    if refusal is not None:
        raise refusal
    return rows


def _check_acknowledged(producer, pending: list, rows: int) -> None:
    producer.flush()
    failed = _not_acknowledged(pending)  # after flush() every future is done: these failed
    if failed:
        if isinstance(failed[0].error, SaslAuthenticationError):
            raise failed[0].error
        lost = sum(len(f.records) for f in failed)
        raise RuntimeError(
            f"{lost} of {rows} records were not acknowledged; first error: {failed[0].error!r}"
        ) from failed[0].error
    return rows


def _not_acknowledged(batches: list) -> list:
    """The producer batches not (yet) acknowledged. Each Arrow batch drops the acknowledged ones, so a task
    holds the batches (and, through them, the records) in flight only, not every row it wrote: bounded
    memory. A batch holds records of this task only (one producer per task), so its outcome is theirs."""
    return [b for b in dict.fromkeys(batches) if not b.done() or b.error is not None]  # each batch once: an
    # open batch can hold the rows of two Arrow batches, and both `send_many` calls return it


def _send_batch(producer, options: WriteOptions, batch: pa.RecordBatch, sent: list | None = None) -> list:
    """Queue every row of one Arrow batch with one `send_many` per topic; returns the producer batches, added to
    `sent` as it goes (a refusal of a later topic's rows leaves those of the earlier ones there).

    Each column becomes a Python list once (`to_pylist`, in C), and the producer partitions and batches
    the rows in bulk (Producer.send_many): no Python call per row.
    """
    sent = [] if sent is None else sent
    if options.topic:
        sent.extend(_send_columns(producer, options.topic, batch))
        return sent
    index = _index(batch, "topic")
    topics = batch.column(index)
    if topics.null_count:
        raise SparklogRowError("Null topic present in the data. Use the topic option for setting a topic.")
    names = topics.unique().to_pylist()
    if len(names) == 1:
        sent.extend(_send_columns(producer, names[0], batch))
        return sent
    for name in names:  # each topic's rows, their order kept
        sent.extend(_send_columns(producer, name, batch.filter(pc.equal(topics, name))))
    return sent


def _send_columns(producer, topic: str, batch: pa.RecordBatch) -> list:
    headers = _column(batch, "headers")
    if headers is not None:
        headers = [[(h["key"], h["value"]) for h in row] if row else None for row in headers]
    try:
        return producer.send_many(topic, _column(batch, "value"), keys=_column(batch, "key"), headers=headers,
                                  partitions=_column(batch, "partition"))
    except InvalidPartition as exc:
        raise no_such_partition(exc) from None
    except UnknownTopic:
        raise no_such_topic(topic, producer.config["max.block.ms"]) from None


def _index(batch: pa.RecordBatch, name: str) -> int | None:
    return next((i for i, n in enumerate(batch.schema.names) if n.lower() == name), None)


class SparklogWriter(DataSourceArrowWriter):
    """`df.write.format("sparklog")`: each Spark task produces its rows (see module rules)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SparklogCommitMessage:
        return write_task(self.options, iterator)

    def commit(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        raise_refused(messages)  # Rule 5


class SparklogStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("sparklog")`: every micro-batch's tasks produce their rows; commit is a no-op
    because each acknowledged record is already durable in the log (at-least-once)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SparklogCommitMessage:
        return write_task(self.options, iterator)

    def commit(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        raise_refused(messages)  # Rule 5

    def abort(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        pass


def to_sparklog(**options: str):
    """A `foreachBatch` function that appends each micro-batch to sparklog, for output mode "update".

    Spark's Kafka sink takes update mode (each updated row of an aggregation becomes a record), but pyspark's
    Python sink cannot declare it ("sparklog does not support Update mode"). Each micro-batch of an
    update-mode query is an ordinary DataFrame, so it is written as a batch, with the same options:

        (counts.writeStream.outputMode("update")
         .foreachBatch(to_sparklog(**{"kafka.bootstrap.servers": "h:9092", "topic": "counts"}))
         .option("checkpointLocation", "/tmp/ckpt").start())

    The options are checked now, so a mistake fails at the definition, not in the first batch. Delivery is
    at-least-once, as with the sink: a replayed batch is written again; with deliveryGuarantee=exactly-once
    the micro-batch's id goes with it (the option batchId), so a replayed batch is not (exactly_once.py).
    """
    exactly_once = parse_write_options(options).delivery_guarantee == EXACTLY_ONCE

    def write(batch_df, batch_id: int) -> None:
        writer = batch_df.write.format("sparklog").mode("append")
        for key, value in options.items():
            writer = writer.option(key, str(value))
        if exactly_once:
            writer = writer.option("batchId", str(batch_id))
        writer.save()

    return write
