"""Option parsing: Spark's Kafka source names, refusals with its advice, batch vs stream rules."""

import pickle

import pytest

from sparklog.datasource.options import (
    OffsetSpec,
    SparklogOptionError,
    parse_duration_ms,
    parse_read_options,
    parse_write_options,
)

BASE = {"bootstrap.servers": "h:9092", "subscribe": "b,a"}


def read(streaming=True, **extra):
    return parse_read_options({**BASE, **extra}, streaming=streaming)


def test_defaults_match_spark_kafka_source():
    o = read()
    assert o.subscription.kind == "subscribe" and o.subscription.topics == ("a", "b")
    assert o.starting == OffsetSpec("latest")
    assert o.fail_on_data_loss is True and o.include_headers is False
    assert o.max_offsets_per_trigger is None and o.max_trigger_delay_ms == 15 * 60 * 1000
    assert parse_read_options(BASE, streaming=False).starting == OffsetSpec("earliest")


def test_names_are_case_insensitive_and_kafka_prefix_accepted():
    o = parse_read_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "t-.*",
                            "MAXOFFSETSPERTRIGGER": "7"}, streaming=True)
    assert o.connection.bootstrap_servers == "h:1"
    assert o.subscription.matches("t-1") and not o.subscription.matches("xt-1")
    assert o.max_offsets_per_trigger == 7


@pytest.mark.parametrize("name, fragment", [
    ("group.id", "user-specified consumer groups"),
    ("auto.offset.reset", "set the source option 'startingOffsets'"),
    ("kafka.auto.offset.reset", "set the source option 'startingOffsets'"),
    ("key.deserializer", "Use DataFrame operations to explicitly deserialize the keys"),
    ("kafka.value.deserializer", "explicitly deserialize the values"),
    ("enable.auto.commit", "'enable.auto.commit' is not supported"),
    ("kafka.interceptor.classes", "not supported"),
])
def test_refused_options_carry_spark_advice(name, fragment):
    with pytest.raises(SparklogOptionError, match=fragment):
        read(**{name: "x"})


def test_kafka_group_id_names_the_progress_group():
    o = read(**{"kafka.group.id": "g1"})
    assert o.group_id == "g1" and o.query_key == "g1"
    assert read(**{"sparklog.queryId": "q", "kafka.group.id": "g1"}).query_key == "q"


def test_exactly_one_subscription():
    with pytest.raises(SparklogOptionError, match="must be specified"):
        parse_read_options({"bootstrap.servers": "h:1"}, streaming=True)
    with pytest.raises(SparklogOptionError, match="Only one of"):
        read(subscribePattern="x")


def test_servers_or_zookeeper_required():
    with pytest.raises(SparklogOptionError, match="bootstrap.servers"):
        parse_read_options({"subscribe": "t"}, streaming=True)
    assert parse_read_options({"subscribe": "t", "zookeeper.connect": "z:2181/c"}, True).connection.zookeeper_connect == "z:2181/c"


def test_assign_and_offset_json():
    o = parse_read_options({"bootstrap.servers": "h", "assign": '{"t":[1,0],"u":[2]}',
                            "startingOffsets": '{"t":{"0":23,"1":-2},"u":{"2":-1}}'}, streaming=True)
    assert o.subscription.partitions == (("t", 0), ("t", 1), ("u", 2))
    assert o.starting.by_partition == {("t", 0): 23, ("t", 1): -2, ("u", 2): -1}
    with pytest.raises(SparklogOptionError, match="not valid JSON"):
        read(startingOffsets="{nope")


def test_timestamp_options_take_precedence():
    assert read(startingTimestamp="1000", startingOffsets="earliest").starting == OffsetSpec("timestamp", timestamp=1000)
    o = read(startingOffsetsByTimestamp='{"a":{"0":5}}', startingOffsets="earliest")
    assert o.starting.kind == "timestamps" and o.starting.by_partition == {("a", 0): 5}
    with pytest.raises(SparklogOptionError, match="startingOffsetsByTimestampStrategy"):
        read(startingOffsetsByTimestampStrategy="maybe")


def test_batch_rules():
    with pytest.raises(SparklogOptionError, match="can't be latest for batch"):
        read(streaming=False, startingOffsets="latest")
    with pytest.raises(SparklogOptionError, match="can't be latest for batch"):
        read(streaming=False, startingOffsets='{"a":{"0":-1}}')
    with pytest.raises(SparklogOptionError, match="can't be earliest for batch"):
        read(streaming=False, endingOffsets="earliest")
    with pytest.raises(SparklogOptionError, match="can't be earliest for batch"):
        read(streaming=False, endingOffsets='{"a":{"0":-2}}')
    with pytest.raises(SparklogOptionError, match="ending offset not valid in streaming"):
        read(endingOffsets="latest")


@pytest.mark.parametrize("name, value", [("maxOffsetsPerTrigger", "0"), ("maxOffsetsPerTrigger", "x"),
                                         ("minPartitions", "-1"), ("failOnDataLoss", "yes")])
def test_bad_values(name, value):
    with pytest.raises(SparklogOptionError, match=name):
        read(**{name: value})


def test_durations():
    assert parse_duration_ms("15m") == 900_000
    assert parse_duration_ms("30s") == 30_000
    assert parse_duration_ms("250ms") == 250
    assert parse_duration_ms("42") == 42
    with pytest.raises(SparklogOptionError):
        parse_duration_ms("soon")


def test_parsed_options_pickle():
    o = read(**{"kafka.fetch.max.bytes": "1000", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "1s"})
    assert pickle.loads(pickle.dumps(o)) == o
    assert dict(o.connection.settings) == {"fetch.max.bytes": "1000"}


def test_write_options():
    w = parse_write_options({"bootstrap.servers": "h:1", "topic": "t", "sparklog.linger.ms": "5", "kafka.acks": "all"})
    assert w.topic == "t" and dict(w.producer_settings) == {"linger.ms": "5", "acks": "all"}
    with pytest.raises(SparklogOptionError, match="ByteArraySerializer"):
        parse_write_options({"bootstrap.servers": "h:1", "kafka.value.serializer": "x"})
