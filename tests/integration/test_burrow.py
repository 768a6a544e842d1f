"""Burrow (LinkedIn's lag monitor, Debian's package) reports a Spark streaming query's group lag (issue 27).

A real cluster (two brokers, a real ZooKeeper), a Spark streaming query with `kafka.group.id` and no
ZooKeeper address, so its progress is committed as a Kafka group's offsets (stream_reader Rule 6), and
Burrow started on the cluster: it consumes `__consumer_offsets` itself (sarama), decodes the offset-commit
keys and values sparklog writes, reads every partition's end offset from its leader (ListOffsets v0, as
sarama sends it) and serves the group's lag over HTTP. Its answer must name the group and its partitions,
with each partition's committed offset (what confluent-kafka's OffsetFetch reads) and lag (the log end the
producer's acknowledgements imply, minus that offset); records produced behind the query raise the lag,
and the query catching up lowers it. Burrow 1.2's `[zookeeper]` section is required: it gets the test's
ZooKeeper under a root path of its own."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
import uuid

import pytest

from sparklog.coordination.zookeeper_server import free_port
from support.processes import terminate
from support.cluster import TEST_OFFSETS_TOPIC_PARTITIONS, wait_until
from support.spark import produce, run_available_now, stream

pytestmark = pytest.mark.slow

BURROW = shutil.which("Burrow")  # Debian's burrow package installs /usr/bin/Burrow (scripts/setup.sh)
KAFKA_VERSION = "2.1.0"  # the newest Burrow 1.2 knows: sarama's Fetch v10 and Metadata, both served here
CLUSTER = "sparklog"
TIMEOUT_S = 90
PARTITIONS = 3


def _burrow_config(zookeeper: str, bootstrap: str, port: int, work) -> str:
    servers = json.dumps(bootstrap.split(","))
    return f"""
[general]
pidfile="{work / 'burrow.pid'}"
[logging]
level="info"
[zookeeper]
servers={json.dumps(zookeeper.split(","))}
root-path="/burrow-{uuid.uuid4().hex[:8]}"
[client-profile.sparklog]
client-id="burrow-test"
kafka-version="{KAFKA_VERSION}"
[cluster.{CLUSTER}]
class-name="kafka"
servers={servers}
client-profile="sparklog"
topic-refresh=2
offset-refresh=1
[consumer.{CLUSTER}]
class-name="kafka"
cluster="{CLUSTER}"
servers={servers}
client-profile="sparklog"
[httpserver.default]
address="127.0.0.1:{port}"
[storage.default]
class-name="inmemory"
min-distance=1
[evaluator.default]
class-name="caching"
"""


def _offsets_topic_served(bootstrap: str) -> None:
    """Until every `__consumer_offsets` partition answers ListOffsets at its leader. The topic is made on the
    first FindCoordinator (as Kafka's is); Burrow 1.2 exits if a partition of it is not served yet when it
    starts ("failed to start consumer"), as it would against a fresh Kafka cluster."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "burrow-warm-up"})

    def served() -> bool:
        try:
            _committed_via(admin, "burrow-warm-up", "__consumer_offsets")  # FindCoordinator: the topic is made
            for p in range(TEST_OFFSETS_TOPIC_PARTITIONS):
                consumer.get_watermark_offsets(TopicPartition("__consumer_offsets", p), timeout=5)
        except KafkaException:
            return False
        return True
    try:
        wait_until(served, "__consumer_offsets served at its leaders", TIMEOUT_S)
    finally:
        consumer.close()


@pytest.fixture
def burrow(zookeeper, sparklog_cluster, tmp_path):
    """A Burrow process on the cluster; yields its HTTP address; stopped (SIGTERM, then SIGKILL) after."""
    assert BURROW, "Debian's burrow package is not installed (scripts/setup.sh installs it)"
    _offsets_topic_served(sparklog_cluster.bootstrap)
    work = tmp_path / "burrow"
    work.mkdir()
    port = free_port()
    (work / "burrow.toml").write_text(_burrow_config(zookeeper.connect_string, sparklog_cluster.bootstrap, port,
                                                     work))
    log = open(work / "burrow.log", "wb")
    proc = subprocess.Popen([BURROW, "--config-dir", str(work)], cwd=work, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}", work / "burrow.log"
    finally:
        terminate(proc)
        log.close()


def _get(url: str) -> dict | None:
    """Burrow's JSON answer, None while it is not answering or answers an error (an unknown group: 404)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.loads(reply.read())
    except OSError:
        return None
    return None if body.get("error") else body


def _burrow_lag(api: str, group: str) -> dict[int, tuple[int, int]] | None:
    """{partition: (committed offset, current lag)} from /v3/kafka/<cluster>/consumer/<group>/lag."""
    body = _get(f"{api}/v3/kafka/{CLUSTER}/consumer/{group}/lag")
    if body is None:
        return None
    return {p["partition"]: (p["end"]["offset"], p["current_lag"]) for p in body["status"]["partitions"]}


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets as Kafka's OffsetFetch answers them (confluent-kafka's admin)."""
    from confluent_kafka.admin import AdminClient

    return _committed_via(AdminClient({"bootstrap.servers": bootstrap}), group, topic)


def _committed_via(admin, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    found = admin.list_consumer_group_offsets([request])[group].result(timeout=30)  # admin alive till answered
    return {tp.partition: tp.offset for tp in found.topic_partitions}


def _ends(acked: list[tuple]) -> dict[int, int]:
    """Each partition's log end as the producer's acknowledgements imply it."""
    ends = {p: 0 for p in range(PARTITIONS)}
    for _, partition, offset, _, _ in acked:
        ends[partition] = max(ends[partition], offset + 1)
    return ends


def _expected(ends: dict[int, int], committed: dict[int, int]) -> dict[int, tuple[int, int]]:
    return {p: (committed[p], ends[p] - committed[p]) for p in committed}


def test_burrow_reports_a_spark_query_s_group_lag_and_its_fall_as_the_query_catches_up(
        burrow, spark, sparklog_cluster, make_topic, tmp_path):
    api, log_path = burrow
    topic, group = make_topic(partitions=PARTITIONS), f"spark-burrow-{uuid.uuid4().hex[:8]}"
    acked = produce(sparklog_cluster.bootstrap, [topic], 600)
    df = stream(spark, sparklog_cluster, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=250,
                **{"kafka.group.id": group})
    assert sum(run_available_now(df, tmp_path / "out", tmp_path / "ckpt")) == 600
    committed = _committed(sparklog_cluster.bootstrap, group, topic)
    assert sum(committed.values()) == 500  # Spark commits a batch's end when it plans the next: 250 + 250
    try:
        wait_until(lambda: _burrow_lag(api, group) == _expected(_ends(acked), committed),
                   "Burrow's lag of the query's group: log end minus committed", TIMEOUT_S)
        consumers = _get(f"{api}/v3/kafka/{CLUSTER}/consumer")
        assert consumers is not None and group in consumers["consumers"]

        acked += produce(sparklog_cluster.bootstrap, [topic], 300)  # behind the query: the lag grows by them
        behind = _expected(_ends(acked), committed)
        assert sum(lag for _, lag in behind.values()) == 400
        wait_until(lambda: _burrow_lag(api, group) == behind, "Burrow's lag after records produced behind the "
                   "query", TIMEOUT_S)
        topic_offsets = _get(f"{api}/v3/kafka/{CLUSTER}/topic/{topic}")
        assert topic_offsets is not None and topic_offsets["offsets"] == [_ends(acked)[p] for p in range(PARTITIONS)]

        assert sum(run_available_now(df, tmp_path / "out", tmp_path / "ckpt")) == 300  # the query catches up
        caught_up = _committed(sparklog_cluster.bootstrap, group, topic)
        assert sum(caught_up.values()) == 850  # the last batch's end (900) waits for the next plan
        fallen = _expected(_ends(acked), caught_up)
        wait_until(lambda: _burrow_lag(api, group) == fallen, "Burrow's lag after the query caught up", TIMEOUT_S)
        assert sum(lag for _, lag in fallen.values()) == 50 < 400
    except AssertionError:
        print(log_path.read_text(errors="replace")[-20_000:])  # Burrow's own account, for the failure report
        raise
