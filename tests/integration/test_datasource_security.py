"""The Spark source and sink over SASL_SSL (issue 24), with Spark local[2] and a broker whose only listener is
SASL_SSL (SCRAM-SHA-256, PEM stores): a batch read, a streaming read, the at-least-once and exactly-once sinks,
with the login given as Spark's Kafka users give it (`kafka.sasl.jaas.config`) and as librdkafka's
(`kafka.sasl.username`/`kafka.sasl.password`), Kafka's Java trust store name (`kafka.ssl.truststore.location`,
PEM) and librdkafka's (`kafka.ssl.ca.location`). A wrong password is one clear first line, never zero rows; no
password is shown in a plan or an error; a plaintext reader of the TLS port fails at load."""

from __future__ import annotations

import uuid

import pytest
from pyspark.testing import assertDataFrameEqual

from support.certs import make_pki
from support.cluster import Cluster
from support.secured import MECHANISM, confluent_config, sasl_ssl_overrides, scram_jaas, store_users
from support.spark import COLUMNS, expected_df, run_available_now

pytestmark = pytest.mark.slow

USER, PASSWORD = "spark-user", "spark-secret-pw"
WRONG = "not-the-spark-pw"
TIMEOUT_S = 60
FAST_TIMEOUT_MS = 5000  # kafkaConsumer.pollTimeoutMs for the failure cases: they must not wait it out
SINGLE_BROKER = {"offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                 "transaction.state.log.min.isr": "1", "transaction.state.log.num.partitions": "3"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(request, zookeeper, pki, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/dssec-{uuid.uuid4().hex}"
    store_users(zk_connect, {"admin": "admin-pw", USER: PASSWORD})
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("dssec"), brokers=1,
                      overrides={**sasl_ssl_overrides(pki), **SINGLE_BROKER})
    request.addfinalizer(cluster.stop)
    return cluster.start()


def jaas_options(broker, pki, password: str = PASSWORD) -> dict:
    """The options as Spark's Kafka source users type them: Kafka's Java client names."""
    return {"kafka.bootstrap.servers": broker.bootstrap, "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": MECHANISM, "kafka.sasl.jaas.config": scram_jaas(USER, password),
            "kafka.ssl.truststore.location": str(pki.ca), "kafka.ssl.truststore.type": "PEM"}


def librdkafka_options(broker, pki, password: str = PASSWORD) -> dict:
    """The same login under librdkafka's names."""
    return {"kafka.bootstrap.servers": broker.bootstrap, "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": MECHANISM, "kafka.sasl.username": USER, "kafka.sasl.password": password,
            "kafka.ssl.ca.location": str(pki.ca)}


def read(spark, options: dict, streaming: bool = False, **more):
    reader = (spark.readStream if streaming else spark.read).format("sparklog")
    for key, value in {**options, **more}.items():
        reader = reader.option(key, str(value))
    return reader.load()


def make_topic(broker, pki, partitions: int = 2) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"sec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(confluent_config(broker.bootstrap, pki, USER, PASSWORD))
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)
    return topic


def produce(broker, pki, topic: str, count: int, tag: str = "") -> list[tuple]:
    """(topic, partition, offset, key, value) of each record confluent-kafka wrote over SASL_SSL, acked."""
    from confluent_kafka import Producer

    acked, errors = [], []

    def report(err, msg):
        (errors if err is not None else acked).append(err or (msg.topic(), msg.partition(), msg.offset(),
                                                             msg.key(), msg.value()))
    producer = Producer(confluent_config(broker.bootstrap, pki, USER, PASSWORD, acks="all", **{"linger.ms": 5}))
    for i in range(count):
        producer.produce(topic, value=f"{tag}v{i}".encode(), key=f"k{i}".encode(), on_delivery=report)
    assert producer.flush(TIMEOUT_S) == 0 and not errors, errors
    return acked


def consume_committed(broker, pki, topic: str, count: int) -> list[bytes]:
    """Every value of `topic` a read_committed confluent-kafka consumer sees over SASL_SSL."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    partitions = AdminClient(confluent_config(broker.bootstrap, pki, USER, PASSWORD)).list_topics(
        topic, timeout=TIMEOUT_S).topics[topic].partitions
    consumer = Consumer(confluent_config(broker.bootstrap, pki, USER, PASSWORD, **{
        "group.id": f"g-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    values, ends = [], set()
    try:
        import time
        deadline = time.monotonic() + TIMEOUT_S
        while (len(values) < count or len(ends) < len(partitions)) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is None:
                values.append(message.value())
            elif message.error().code() == -191:  # _PARTITION_EOF
                ends.add(message.partition())
    finally:
        consumer.close()
    return values


def first_line(exc: BaseException) -> str:
    return next(line for line in str(exc).strip().splitlines() if line.strip())


# -- reads -----------------------------------------------------------------------------------------------------------

def test_a_batch_read_over_sasl_ssl_with_the_jaas_form_reads_every_record(spark, broker, pki):
    topic = make_topic(broker, pki)
    produced = produce(broker, pki, topic, 200)
    df = read(spark, jaas_options(broker, pki), subscribe=topic)
    assertDataFrameEqual(df.select(*COLUMNS), expected_df(spark, produced))


def test_a_streaming_read_over_sasl_ssl_with_librdkafkas_names_reads_every_record(spark, broker, pki, tmp_path):
    topic = make_topic(broker, pki)
    produced = produce(broker, pki, topic, 150)
    df = read(spark, librdkafka_options(broker, pki), streaming=True, subscribe=topic, startingOffsets="earliest",
              maxOffsetsPerTrigger=60)
    assert sum(run_available_now(df, tmp_path / "out", tmp_path / "ckpt")) == 150
    got = spark.read.parquet(str(tmp_path / "out")).select(*COLUMNS)
    assertDataFrameEqual(got, expected_df(spark, produced))


# -- writes ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_the_sink_writes_over_sasl_ssl(spark, broker, pki, guarantee):
    topic = make_topic(broker, pki)
    extra = {"deliveryGuarantee": guarantee}
    if guarantee == "exactly-once":
        extra["transactionalIdPrefix"] = f"sec-{uuid.uuid4().hex[:6]}"
    writer = spark.range(120).selectExpr("CAST(id AS STRING) AS value").write.format("sparklog").mode("append")
    for key, value in {**jaas_options(broker, pki), "topic": topic, **extra}.items():
        writer = writer.option(key, value)
    writer.save()
    assert sorted(consume_committed(broker, pki, topic, 120)) == sorted(str(i).encode() for i in range(120))


def test_a_streaming_query_writes_over_sasl_ssl_to_the_exactly_once_sink(spark, broker, pki, tmp_path):
    source, sink = make_topic(broker, pki), make_topic(broker, pki)
    produce(broker, pki, source, 80)
    df = read(spark, librdkafka_options(broker, pki), streaming=True, subscribe=source, startingOffsets="earliest")
    writer = (df.selectExpr("key", "value").writeStream.format("sparklog").trigger(availableNow=True)
              .option("checkpointLocation", str(tmp_path / "ckpt")).option("topic", sink)
              .option("deliveryGuarantee", "exactly-once").option("transactionalIdPrefix", f"s-{uuid.uuid4().hex[:6]}"))
    for key, value in librdkafka_options(broker, pki).items():
        writer = writer.option(key, value)
    query = writer.start()
    query.awaitTermination(240)
    assert sorted(consume_committed(broker, pki, sink, 80)) == sorted(f"v{i}".encode() for i in range(80))


# -- refusals ------------------------------------------------------------------------------------------------------

def test_a_wrong_password_is_one_clear_first_line_not_zero_rows(spark, broker, pki, tmp_path):
    topic = make_topic(broker, pki)
    produce(broker, pki, topic, 10)
    bad = {**jaas_options(broker, pki, WRONG), "kafkaConsumer.pollTimeoutMs": FAST_TIMEOUT_MS}
    with pytest.raises(Exception) as batch:
        read(spark, bad, subscribe=topic).collect()
    stream = read(spark, {**librdkafka_options(broker, pki, WRONG), "kafkaConsumer.pollTimeoutMs": FAST_TIMEOUT_MS},
                  streaming=True, subscribe=topic, startingOffsets="earliest")
    with pytest.raises(Exception) as streaming:
        run_available_now(stream, tmp_path / "out", tmp_path / "ckpt")
    writer = spark.range(5).selectExpr("CAST(id AS STRING) AS value").write.format("sparklog").mode("append")
    for key, value in {**bad, "topic": topic}.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception) as write:
        writer.save()
    heads = ["\n".join(str(f.value).strip().splitlines()[:3]) for f in (batch, streaming, write)]
    for failure, head in zip((batch, streaming, write), heads):
        line = first_line(failure.value)
        assert "SASL SCRAM-SHA-256 authentication of 'spark-user' failed" in line, heads
        assert "kafka.sasl" in line, line  # what to check
        assert WRONG not in str(failure.value)


def test_no_password_is_shown_in_a_plan_or_an_options_error(spark, broker, pki):
    topic = make_topic(broker, pki)
    df = read(spark, jaas_options(broker, pki), subscribe=topic)
    plans = [df._jdf.queryExecution().toString(), str(df.schema)]
    df.explain(True)
    assert not any(PASSWORD in plan for plan in plans)
    with pytest.raises(Exception) as refused:
        read(spark, {**librdkafka_options(broker, pki), "kafka.sasl.mechanism": "GSSAPI"}, subscribe=topic)
    assert "Option 'kafka.sasl.mechanism'" in first_line(refused.value) and PASSWORD not in str(refused.value)


@pytest.mark.parametrize("change, words", [
    ({"kafka.security.protocol": "PLAINTEXT"}, ["kafka.sasl.jaas.config", "PLAINTEXT"]),
    ({"kafka.ssl.truststore.type": "JKS"}, ["kafka.ssl.truststore.type", "PEM"]),
    ({"kafka.ssl.truststore.location": "/no/such/ca.pem"}, ["kafka.ssl.truststore.location", "/no/such/ca.pem"]),
    ({"kafka.ssl.keystore.password": "x"}, ["kafka.ssl.keystore.password", "not supported"]),
    ({"kafka.sasl.mechanism": "OAUTHBEARER"}, ["kafka.sasl.mechanism", "OAUTHBEARER"]),
])
def test_an_unsupported_security_option_is_refused_at_load_naming_it(spark, broker, pki, change, words):
    with pytest.raises(Exception) as refused:
        read(spark, {**jaas_options(broker, pki), **change}, subscribe="any")
    line = first_line(refused.value)
    assert all(word in line for word in words), line
    assert PASSWORD not in str(refused.value)
