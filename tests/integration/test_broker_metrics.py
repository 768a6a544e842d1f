"""The Prometheus endpoint (issue 27; sparklog/broker/metrics.py) on real brokers: three brokers in subprocesses
with `metrics.listener`, a real ZooKeeper, confluent-kafka clients. The topic, request, lag and under-replicated
series move as records are produced, offsets committed and a follower SIGKILLed (each scrape parsed with
prometheus_client's own parser); a real Prometheus server (Debian's package) scrapes the three brokers and its
HTTP API answers for those series; a scrape during startup with ZooKeeper unreachable, during a controller
failover and during a ZooKeeper outage answers (stale values marked by sparklog_metrics_stale); a metrics
listener that cannot bind stops the broker with one line."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid

import pytest

from support.broker_metrics import SCRAPE_TIMEOUT_S, metrics_url, scrape, value
from support.processes import terminate
from support.cluster import BrokerProcess, BrokerStartError, Cluster, LocalCluster, wait_until
from support.fault_run import wait_for_leaders

pytestmark = pytest.mark.slow

SESSION_MS = 3000
LAG_MS = 1500
TIMEOUT_S = 60
OVERRIDES = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": str(LAG_MS),
             "log.flush.interval.ms": "50", "auto.create.topics.enable": "false",
             "metrics.listener": "http://127.0.0.1:0"}
RECORDS = 200
COMMITTED = 150


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def cluster(request, zookeeper, tmp_path):
    cluster = Cluster(f"{zookeeper.connect_string}/metrics-{uuid.uuid4().hex}", tmp_path, brokers=3,
                      overrides=OVERRIDES)
    request.addfinalizer(cluster.stop)
    return cluster.start()


def _create(cluster: Cluster, replicas=(1, 2, 3)) -> str:
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    topic = f"metrics-{uuid.uuid4().hex[:6]}"
    zk = connect(cluster.zk_connect)
    try:
        topics.create_topic(zk, topic, 1, len(replicas), {"min.insync.replicas": "2"},
                            assignment={0: tuple(replicas)})
    finally:
        close(zk)
    wait_for_leaders(cluster.bootstrap, topic, 1)
    return topic


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    acked = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"v%05d" % i, partition=0,
                         on_delivery=lambda err, msg: acked.append(err is None))
    assert producer.flush(TIMEOUT_S) == 0
    assert acked == [True] * count


def _consume_and_commit(bootstrap: str, topic: str, group: str, count: int, commit: int) -> None:
    """Read `count` records as `group`, then commit offset `commit` of partition 0."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen, deadline = 0, time.monotonic() + TIMEOUT_S
        while seen < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen += 1
        assert seen == count
        consumer.commit(offsets=[TopicPartition(topic, 0, commit)], asynchronous=False)
    finally:
        consumer.close()


def _lags(cluster: Cluster, group: str, topic: str) -> list[float]:
    """The lag series of (group, topic, 0) over the running brokers (only the coordinator reports it)."""
    return [v for b in cluster.brokers.values() if b.running
            for v in [value(scrape(metrics_url(b)), "sparklog_consumer_group_lag", group=group, topic=topic,
                            partition="0")] if v is not None]


def test_series_move_as_records_are_produced_committed_and_a_follower_is_killed(cluster):
    topic = _create(cluster)
    leader, follower = cluster.brokers[1], cluster.brokers[3]
    before = scrape(metrics_url(leader))
    assert value(before, "sparklog_metrics_stale") == 0
    assert value(before, "sparklog_under_replicated_partitions") == 0
    assert value(before, "sparklog_leader_partitions") >= 1
    assert value(before, "sparklog_zookeeper_session_state", state="connected") == 1

    _produce(cluster.bootstrap, topic, RECORDS)
    after = scrape(metrics_url(leader))
    assert value(after, "sparklog_broker_topic_messages_in_total", topic=topic) == RECORDS
    assert value(after, "sparklog_broker_topic_bytes_in_total", topic=topic) > RECORDS * 6  # the values alone
    assert value(after, "sparklog_request_latency_seconds_count", api="Produce") > (
        value(before, "sparklog_request_latency_seconds_count", api="Produce") or 0)
    assert value(after, "sparklog_requests_total", api="Produce") >= 1
    assert value(after, "sparklog_log_size_bytes", topic=topic, partition="0") > RECORDS * 6
    assert value(after, "sparklog_log_segments", topic=topic, partition="0") == 1
    for other in (cluster.brokers[2], follower):  # followers replicate: no produce counted there
        assert value(scrape(metrics_url(other)), "sparklog_broker_topic_messages_in_total", topic=topic) is None

    group = f"g-{uuid.uuid4().hex[:6]}"
    _consume_and_commit(cluster.bootstrap, topic, group, RECORDS, COMMITTED)
    assert value(scrape(metrics_url(leader)), "sparklog_broker_topic_bytes_out_total", topic=topic) > RECORDS * 6
    # The coordinator may host a follower replica, whose high watermark trails the leader's by a fetch round:
    # the gauge converges to the lag, and a first sample can be the stale one.
    wait_until(lambda: _lags(cluster, group, topic) == [RECORDS - COMMITTED],
               f"the group's lag series to be [{RECORDS - COMMITTED}]", TIMEOUT_S)

    follower.kill()  # SIGKILL: out of the ISR (the leader's lag check, or the controller on its session's end)
    # >= 1: the leader may lead __consumer_offsets partitions with a replica there too
    wait_until(lambda: value(scrape(metrics_url(leader)), "sparklog_under_replicated_partitions") >= 1,
               "the partition under-replicated on its leader", TIMEOUT_S)
    killed = scrape(metrics_url(leader))
    assert value(killed, "sparklog_isr_shrinks_total") >= 1
    assert value(killed, "sparklog_under_min_isr_partitions") == 0  # two of three in sync, min 2
    follower.start()
    wait_until(lambda: value(scrape(metrics_url(leader)), "sparklog_under_replicated_partitions") == 0,
               "the partition fully replicated again", TIMEOUT_S)
    assert value(scrape(metrics_url(leader)), "sparklog_isr_expands_total") >= 1
    controllers = [value(scrape(metrics_url(b)), "sparklog_active_controller") for b in cluster.brokers.values()]
    assert sorted(controllers) == [0, 0, 1]

    controller = next(b for b in cluster.brokers.values() if value(scrape(metrics_url(b)), "sparklog_active_controller"))
    epoch = value(scrape(metrics_url(controller)), "sparklog_controller_epoch")
    controller.kill()  # a controller failover: every scrape of the survivors answers meanwhile
    survivors = [b for b in cluster.brokers.values() if b.running]

    def new_controller() -> list:
        found = [scrape(metrics_url(b)) for b in survivors]
        return [s for s in found if value(s, "sparklog_active_controller") == 1
                and value(s, "sparklog_controller_epoch") > epoch]
    assert len(wait_until(new_controller, "a new controller in the survivors' scrapes", TIMEOUT_S)) == 1


def test_a_scrape_during_a_zookeeper_outage_answers_marked_stale(tmp_path):
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper, free_port

    with LocalCluster(tmp_path, brokers=1, overrides=OVERRIDES, zookeeper_port=free_port()) as cluster:
        url = metrics_url(cluster.brokers[1])
        assert value(scrape(url), "sparklog_metrics_stale") == 0
        cluster.zk_server.stop()
        try:
            away = wait_until(lambda: (lambda s: s if value(s, "sparklog_metrics_stale") == 1 else None)(scrape(url)),
                              "a stale scrape while ZooKeeper is away", TIMEOUT_S)
            assert value(away, "sparklog_zookeeper_session_state", state="connected") == 0
            assert value(away, "sparklog_leader_partitions") is not None  # the rest is still served
        finally:  # the same port and data: the broker's session resumes
            cluster.zk_server = EmbeddedZooKeeper(port=cluster.zk_server.port,
                                                  data_dir=cluster.zk_server.data_dir).start()
        wait_until(lambda: value(scrape(url), "sparklog_metrics_stale") == 0, "a fresh scrape once it is back",
                   TIMEOUT_S)


def test_a_scrape_during_startup_with_zookeeper_away_answers_marked_stale(tmp_path):
    port, dead_zookeeper = _free_port(), _free_port()
    broker = BrokerProcess(7, f"127.0.0.1:{dead_zookeeper}", tmp_path / "logs",
                           {"metrics.listener": f"http://127.0.0.1:{port}", "zookeeper.connection.timeout.ms": "8000"})
    try:
        with pytest.raises(BrokerStartError):
            _start_in_background_and_scrape(broker, f"http://127.0.0.1:{port}/metrics")
        assert broker.proc.returncode == 1
    finally:
        broker.kill()


def _start_in_background_and_scrape(broker: BrokerProcess, url: str) -> None:
    import threading

    scraped: list = []

    def scrape_while_starting():
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not scraped:
            try:
                scraped.append(scrape(url))
            except OSError:
                time.sleep(0.05)
    scraper = threading.Thread(target=scrape_while_starting)
    scraper.start()
    try:
        broker.start(timeout=TIMEOUT_S)  # never ready: ZooKeeper cannot be reached
    finally:
        scraper.join()
        assert scraped, "no scrape answered while the broker was starting"
        assert value(scraped[0], "sparklog_metrics_stale") == 1
        assert value(scraped[0], "sparklog_zookeeper_session_state", state="connected") == 0


def test_a_metrics_listener_that_cannot_bind_stops_the_broker_with_one_line(zookeeper, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = BrokerProcess(8, f"{zookeeper.connect_string}/m-{uuid.uuid4().hex}", tmp_path / "logs",
                               {"metrics.listener": f"http://127.0.0.1:{port}"})
        try:
            with pytest.raises(BrokerStartError):
                broker.start(timeout=TIMEOUT_S)
        finally:
            broker.kill()
    assert broker.proc.returncode == 1
    errors = [line for line in broker.tail().splitlines() if line.startswith("error:")]
    assert errors == [f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use"]


# -- a real Prometheus server -------------------------------------------------------------------------------

PROMETHEUS = shutil.which("prometheus")


def _prometheus(tmp_path, targets: list[str]) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "sparklog", "static_configs": [{"targets": targets}]}]}))
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "prometheus.log", "wb"), stdin=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def _query(api: str, promql: str) -> list[dict]:
    """The vector of an instant query, [] while Prometheus is not answering yet."""
    try:
        with urllib.request.urlopen(f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": promql}),
                                    timeout=SCRAPE_TIMEOUT_S) as reply:
            body = json.loads(reply.read())
    except OSError:
        return []
    assert body["status"] == "success", body
    return body["data"]["result"]


def _scalar(api: str, promql: str) -> float | None:
    result = _query(api, promql)
    return float(result[0]["value"][1]) if result else None


def test_a_real_prometheus_server_scrapes_three_brokers(cluster, tmp_path):
    assert PROMETHEUS, "Debian's prometheus package is not installed (scripts/setup.sh installs it)"
    targets = [metrics_url(b).removeprefix("http://").removesuffix("/metrics") for b in cluster.brokers.values()]
    proc, api = _prometheus(tmp_path, targets)
    try:
        wait_until(lambda: _scalar(api, 'sum(up{job="sparklog"})') == 3, "Prometheus scraping 3 brokers", TIMEOUT_S)
        topic = _create(cluster)
        _produce(cluster.bootstrap, topic, RECORDS)
        wait_until(lambda: _scalar(api, f'sum(sparklog_broker_topic_messages_in_total{{topic="{topic}"}})')
                   == RECORDS, "the topic's messages in Prometheus", TIMEOUT_S)
        assert _scalar(api, 'sum(sparklog_request_latency_seconds_count{api="Produce"})') > 0
        group = f"g-{uuid.uuid4().hex[:6]}"
        _consume_and_commit(cluster.bootstrap, topic, group, RECORDS, COMMITTED)
        wait_until(lambda: _scalar(api, f'max(sparklog_consumer_group_lag{{group="{group}"}})') == RECORDS - COMMITTED,
                   "the group's lag in Prometheus", TIMEOUT_S)
        assert _scalar(api, "sum(sparklog_under_replicated_partitions)") == 0
        killed = cluster.brokers[3]
        killed_target = metrics_url(killed).removeprefix("http://").removesuffix("/metrics")
        killed.kill()
        wait_until(lambda: (_scalar(api, "sum(sparklog_under_replicated_partitions)") or 0) >= 1,
                   "under-replicated partitions in Prometheus", TIMEOUT_S)
        assert _scalar(api, f'up{{instance="{killed_target}"}}') == 0
        assert _scalar(api, "sum(sparklog_active_controller)") == 1
    finally:
        terminate(proc)
