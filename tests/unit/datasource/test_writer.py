"""`_send_batch`: the rows of an Arrow batch reach `send_many` as columns, one call per topic, in row order."""

import pyarrow as pa
import pytest

from sparklog.datasource.options import parse_write_options
from sparklog.datasource.writer import _send_batch


class FakeProducer:
    def __init__(self) -> None:
        self.sent = []

    def send_many(self, topic, values, keys=None, headers=None, partitions=None):
        n = len(values)
        rows = zip(values, keys or [None] * n, headers or [None] * n, partitions or [None] * n)
        self.sent.extend((topic, v, k, h, p) for v, k, h, p in rows)
        return [topic]


def options(**extra):
    return parse_write_options({"bootstrap.servers": "localhost:9092", **extra})


def test_values_only_with_the_topic_option():
    producer = FakeProducer()
    batch = pa.RecordBatch.from_pydict({"value": pa.array(["a", None, "c"], pa.string())})
    assert _send_batch(producer, options(topic="t"), batch) == ["t"]
    assert producer.sent == [("t", b"a", None, None, None), ("t", None, None, None, None), ("t", b"c", None, None, None)]


def test_every_column_and_the_topic_column():
    producer = FakeProducer()
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict({
        "Value": pa.array([b"1", b"2"], pa.binary()),
        "key": pa.array(["k", None], pa.string()),
        "topic": pa.array(["x", "y"], pa.string()),
        "partition": pa.array([None, 2], pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"v"}], []], headers_type),
        "ignored": pa.array([1, 2]),
    })
    assert _send_batch(producer, options(), batch) == ["x", "y"]
    assert producer.sent == [("x", b"1", b"k", [("h", b"v")], None), ("y", b"2", None, None, 2)]


def test_rows_of_several_topics_keep_their_order_within_each_topic():
    producer = FakeProducer()
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"1", b"2", b"3", b"4"]),
                                        "topic": pa.array(["x", "y", "x", "y"])})
    _send_batch(producer, options(), batch)
    assert producer.sent == [("x", b"1", None, None, None), ("x", b"3", None, None, None),
                             ("y", b"2", None, None, None), ("y", b"4", None, None, None)]


def test_a_null_topic_fails_before_anything_is_sent():
    producer = FakeProducer()
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"1", b"2"]), "topic": pa.array(["x", None])})
    with pytest.raises(ValueError, match="Null topic"):
        _send_batch(producer, options(), batch)
    assert producer.sent == []


def test_batch_overwrite_is_refused_and_complete_mode_streams_still_append():
    from pyspark.sql.types import StringType, StructField, StructType

    from sparklog.datasource.options import SparklogOptionError
    from sparklog.datasource.source import SparklogDataSource

    schema = StructType([StructField("value", StringType())])
    source = SparklogDataSource({"bootstrap.servers": "h:1", "topic": "t"})
    with pytest.raises(SparklogOptionError, match=r'Save mode "overwrite" is not allowed .* Use .mode\("append"\)'):
        source.writer(schema, True)
    assert source.writer(schema, False) is not None
    assert source.streamWriter(schema, True) is not None  # outputMode("complete"): every row is appended


def test_update_mode_helper_checks_its_options_when_defined():
    from sparklog.datasource.options import SparklogOptionError
    from sparklog.datasource.writer import to_sparklog

    with pytest.raises(SparklogOptionError, match="No brokers to connect to"):
        to_sparklog(topic="t")
    assert callable(to_sparklog(**{"kafka.bootstrap.servers": "h:1", "topic": "t"}))


class AckedBatch:
    """A producer batch of `records`, acknowledged at once, or failed with `error`."""

    def __init__(self, records, error=None) -> None:
        self.records = records
        self.error = error

    def done(self) -> bool:
        return True


class AckingProducer(FakeProducer):
    live = None  # a WeakSet of the batches handed out and still referenced

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def send_many(self, topic, values, keys=None, headers=None, partitions=None):
        batches = [AckedBatch(values[i:i + 10], RuntimeError("NOT_LEADER") if b"bad" in values[i:i + 10] else None)
                   for i in range(0, len(values), 10)]
        for batch in batches:
            AckingProducer.live.add(batch)
        return batches

    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        pass


def test_a_task_keeps_the_batches_in_flight_only_and_raises_a_failed_one(monkeypatch):
    import weakref

    import sparklog.client
    from sparklog.client import producer as producer_module
    from sparklog.datasource.writer import produce_batches

    assert sparklog.client.Producer is producer_module.Producer  # cached in the package, as after other tests
    monkeypatch.setattr(producer_module, "Producer", AckingProducer)
    AckingProducer.live = weakref.WeakSet()
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"v"] * 100)})
    seen = []

    def batches():
        for _ in range(5):
            seen.append(len(AckingProducer.live))  # what the writer still holds of the batches before
            yield batch

    assert produce_batches(options(topic="t"), batches()) == 500
    assert seen == [0] * 5
    failing = [batch, pa.RecordBatch.from_pydict({"value": pa.array([b"bad", b"v"])})]
    with pytest.raises(RuntimeError, match="2 of 102 records were not acknowledged.*NOT_LEADER"):
        produce_batches(options(topic="t"), iter(failing))


def test_a_failed_batch_that_two_arrow_batches_share_counts_its_records_once(monkeypatch):
    from sparklog.client import producer as producer_module
    from sparklog.datasource.writer import produce_batches

    shared = AckedBatch([b"a", b"b"], RuntimeError("NOT_LEADER"))

    class SharingProducer(AckingProducer):
        def send_many(self, topic, values, keys=None, headers=None, partitions=None):
            return [shared]  # the open batch that both Arrow batches' rows went into

    monkeypatch.setattr(producer_module, "Producer", SharingProducer)
    one = pa.RecordBatch.from_pydict({"value": pa.array([b"a"])})
    with pytest.raises(RuntimeError, match="^2 of 2 records were not acknowledged"):
        produce_batches(options(topic="t"), iter([one, one]))


def test_a_row_the_sink_cannot_write_ends_the_task_with_its_refusal_for_the_driver(monkeypatch):
    """writer.py Rule 5: the rows queued before the refused one are flushed and checked, the rest of the input is
    read, and the refusal goes back in the commit message, which the driver's commit raises, said first."""
    import os
    import weakref

    from sparklog.client import producer as producer_module
    from sparklog.client.errors import InvalidPartition
    from sparklog.datasource.writer import SparklogRowError, SparklogWriter, raise_refused, send_all

    class TwoPartitions(AckingProducer):
        config = {"max.block.ms": 60_000}

        def send_many(self, topic, values, keys=None, headers=None, partitions=None):
            if partitions and 5 in partitions:
                raise InvalidPartition(f"topic {topic!r} has no partition 5", topic, 5, 2)
            return super().send_many(topic, values, keys, headers, partitions)

    monkeypatch.setattr(producer_module, "Producer", TwoPartitions)
    monkeypatch.setenv("SPARK_HIDE_TRACEBACK", "")  # restored after: raise_refused sets it
    AckingProducer.live = weakref.WeakSet()
    good = pa.RecordBatch.from_pydict({"value": [b"v"], "topic": ["x"], "partition": pa.array([1], pa.int32())})
    bad = pa.RecordBatch.from_pydict({"value": [b"v", b"w"], "topic": ["x", "y"],
                                      "partition": pa.array([0, 5], pa.int32())})
    read = []

    def batches():
        for batch in (good, bad, good):
            read.append(batch)
            yield batch

    message = SparklogWriter(options()).write(batches())
    assert message.refused.startswith("Partition 5 of topic y does not exist: the topic has 2 partitions (0 to 1)")
    assert len(read) == 3
    with pytest.raises(SparklogRowError, match="^Partition 5 of topic y does not exist") as raised:
        raise_refused([None, message])
    assert os.environ["SPARK_HIDE_TRACEBACK"] == "1" and str(raised.value) == message.refused
    raise_refused([None, type(message)(1)])  # nothing refused: the write is committed
    with pytest.raises(SparklogRowError) as refused:
        send_all(TwoPartitions(), options(), iter([bad]))
    assert refused.value.sent  # topic x's row was queued before topic y's was refused: an exactly-once task aborts
