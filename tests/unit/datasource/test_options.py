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
    assert o.subscription.matches("t-1") and not o.subscription.matches("t1")
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


def test_kafka_group_id_names_the_progress_group_but_never_keys_the_query():
    o = read(**{"kafka.group.id": "g1"})
    assert o.group_id == "g1" and o.query_key is None  # two queries may share a group (issue 13 item 3)
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


@pytest.mark.parametrize("name", ["startingOffsets", "endingOffsets"])
def test_an_offset_below_minus_two_is_refused_at_parse_naming_the_partition(name):
    """-3 read as an offset: a batch failed in its task with 'Offsets [-3, 0) ... are missing', a data loss
    report for a typo (and with failOnDataLoss=false, silently read from 0)."""
    with pytest.raises(SparklogOptionError, match=f"Option '{name}': a-0 is -3; use an offset >= 0, -2 for earliest "
                                                  "or -1 for latest"):
        read(streaming=False, **{name: '{"a":{"0":-3,"1":-2}}'})


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


def test_min_offsets_above_max_offsets_is_refused_with_sparks_message():
    with pytest.raises(SparklogOptionError, match=r"minOffsetPerTrigger\(100\) is higher than the maxOffsetsPerTrigger\(10\)"):
        read(minOffsetsPerTrigger="100", maxOffsetsPerTrigger="10")
    assert read(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="10").min_offsets_per_trigger == 10


def test_subscribe_pattern_finds_the_pattern_anywhere_in_the_name_as_spark_4():
    s = parse_read_options({"bootstrap.servers": "h:1", "subscribePattern": "pat"}, streaming=True).subscription
    assert s.matches("pat_a") and s.matches("x-pat") and not s.matches("pa_t")
    anchored = parse_read_options({"bootstrap.servers": "h:1", "subscribePattern": "^pat$"}, streaming=True)
    assert anchored.subscription.matches("pat") and not anchored.subscription.matches("pat_a")


def test_known_kafka_settings_reach_the_client_and_unknown_ones_are_logged(caplog):
    o = read(**{"kafka.max.poll.records": "7", "kafka.fetch.max.wait.ms": "20", "kafka.no.such.thing": "1",
                "kafka.security.protocol": "PLAINTEXT"})
    assert dict(o.connection.settings) == {"max.poll.records": "7", "fetch.max.wait.ms": "20"}
    assert "'kafka.no.such.thing' is not a setting of sparklog's client and is ignored" in caplog.text
    assert "security.protocol" not in caplog.text
    w = parse_write_options({"bootstrap.servers": "h:1", "kafka.linger.ms": "3", "kafka.acks": "all"})
    assert dict(w.producer_settings) == {"linger.ms": "3", "acks": "all"}


@pytest.mark.parametrize("name, value, words", [
    ("kafka.security.protocol", "TLS", "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ("kafka.ssl.truststore.password", "x", "is not supported by sparklog's client"),
    ("kafka.sasl.mechanism", "PLAIN", "kafka.security.protocol is PLAINTEXT, which does not use it")])
def test_security_settings_the_client_cannot_honour_are_refused(name, value, words):
    """The client speaks TLS and SASL now (test_security_options.py): what it cannot honour is still refused."""
    with pytest.raises(SparklogOptionError, match=f"Option '{name}'.*{words}"):
        read(**{name: value})
    with pytest.raises(SparklogOptionError, match=words):
        parse_write_options({"bootstrap.servers": "h:1", name: value})


def test_common_checks_run_before_the_kind_of_read_is_known():
    """`schema()` parses with streaming=None at load(): shared mistakes fail, kind-specific rules wait."""
    with pytest.raises(SparklogOptionError, match="must be specified"):
        parse_read_options({"bootstrap.servers": "h:1"}, streaming=None)
    with pytest.raises(SparklogOptionError, match="higher than"):
        read(streaming=None, minOffsetsPerTrigger="2", maxOffsetsPerTrigger="1")
    read(streaming=None, startingOffsets="latest", endingOffsets="latest")  # valid for a stream or a batch


def test_missing_brokers_error_says_what_to_set():
    with pytest.raises(SparklogOptionError, match="No brokers to connect to: set the option 'kafka.bootstrap.servers'"):
        parse_read_options({"subscribe": "t"}, streaming=True)


def test_wait_for_topics_is_opt_in():
    assert read().wait_for_topics is False
    assert read(**{"sparklog.waitForTopics": "true"}).wait_for_topics is True


def test_a_passed_through_value_the_client_refuses_fails_at_parse():
    with pytest.raises(SparklogOptionError, match="Option 'kafka.max.poll.records' has a value the client refuses"):
        read(**{"kafka.max.poll.records": "many"})
    with pytest.raises(SparklogOptionError, match="Option 'kafka.acks' has a value the client refuses"):
        parse_write_options({"bootstrap.servers": "h:1", "kafka.acks": "7"})


def test_kafka_client_rack_reaches_the_executors_consumers():
    """KIP-392: a Spark executor's consumer names its rack (client/read_replica.py)."""
    assert dict(read(**{"kafka.client.rack": "b"}).connection.settings) == {"client.rack": "b"}


def test_kafka_isolation_level_reaches_the_client_and_a_bad_one_is_refused():
    o = read(**{"kafka.isolation.level": "read_committed"})
    assert dict(o.connection.settings) == {"isolation.level": "read_committed"}
    with pytest.raises(SparklogOptionError, match="isolation.level"):
        read(**{"kafka.isolation.level": "committed"})
