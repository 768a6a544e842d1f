"""The command line with one broker of three SIGKILLed, as the README's "A cluster by hand" leaves it (issue 26):
`consume` prints the partitions that have a leader at once and waits for the rest, and `topics describe`
answers within seconds, asking the live brokers, with the dead leader marked and its offsets unknown."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
VICTIM = 1
ASSIGNMENT = "2,3,1,2,3,1"  # RF 1: partitions 2 and 5 live on broker 1 alone
PER_PARTITION = 10
TIMEOUT_S = 60.0


def sparklog(*args: str, input: bytes | None = None, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="80")  # a narrow terminal: nothing may wrap
    return subprocess.run([sys.executable, "-m", "sparklog.cli", *args], input=input, capture_output=True,
                          timeout=timeout, cwd=str(REPO), env=env)


def cluster_with_events(request, zookeeper, tmp_path, session_timeout_ms: int):
    """Three brokers and topic `events` (6 partitions, RF 1, 2 and 5 on broker 1), 10 records a partition."""
    from support.cluster import started_cluster

    cluster = started_cluster(request, f"{zookeeper.connect_string}/down-{uuid.uuid4().hex}", tmp_path, 3,
                              session_timeout_ms)
    zk = cluster.zk_connect
    created = sparklog("topics", "--zookeeper", zk, "create", "events", "--partitions", "6",
                       "--replica-assignment", ASSIGNMENT)
    assert created.returncode == 0, created.stderr.decode()
    for p in range(6):
        lines = b"".join(b"p%d-%d\n" % (p, i) for i in range(PER_PARTITION))
        sent = sparklog("produce", "--zookeeper", zk, "--topic", "events", "--partition", str(p), input=lines)
        assert sent.returncode == 0, sent.stderr.decode()
    return cluster


def offline_in_zookeeper(zk_connect: str, partitions: tuple[int, ...]) -> bool:
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    client = connect(zk_connect)
    try:
        states = topics.get_topic(client, "events").states
        return all(states[p].leader == -1 for p in partitions)
    finally:
        close(client)


def test_consume_prints_the_partitions_with_a_leader_while_others_are_offline(request, zookeeper, tmp_path):
    from support.cluster import wait_until

    cluster = cluster_with_events(request, zookeeper, tmp_path, session_timeout_ms=6000)
    cluster.brokers[VICTIM].kill()
    wait_until(lambda: offline_in_zookeeper(cluster.zk_connect, (2, 5)), "partitions 2 and 5 offline", TIMEOUT_S)
    started = time.monotonic()
    done = sparklog("consume", "--zookeeper", cluster.zk_connect, "--topic", "events", "--from-beginning",
                    "--max-messages", str(4 * PER_PARTITION))
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr.decode()
    got = sorted(done.stdout.decode().split())
    assert got == sorted(f"p{p}-{i}" for p in (0, 1, 3, 4) for i in range(PER_PARTITION))
    assert took < 20, took  # at once: not after request.timeout.ms (30 s) of waiting for every leader


def test_consume_waits_for_offline_partitions_and_names_them_kafka_s_way(request, zookeeper, tmp_path):
    """With --timeout-ms the live partitions' records come, then the summary; nothing says "('events', 2)"."""
    from support.cluster import wait_until

    cluster = cluster_with_events(request, zookeeper, tmp_path, session_timeout_ms=6000)
    cluster.brokers[VICTIM].kill()
    wait_until(lambda: offline_in_zookeeper(cluster.zk_connect, (2, 5)), "partitions 2 and 5 offline", TIMEOUT_S)
    done = sparklog("consume", "--zookeeper", cluster.zk_connect, "--topic", "events", "--from-beginning",
                    "--timeout-ms", "3000")
    assert done.returncode == 0, done.stderr.decode()
    assert len(done.stdout.decode().split()) == 4 * PER_PARTITION
    assert "('events'" not in done.stderr.decode()
    one = sparklog("consume", "--zookeeper", cluster.zk_connect, "--topic", "events", "--partition", "2",
                   "--offset", "0", "--timeout-ms", "2000")
    assert one.returncode == 0 and one.stdout == b"", one.stderr.decode()
    assert "Processed a total of 0 messages" in one.stderr.decode()


def describe_rows(out: str) -> dict[int, dict[str, str]]:
    """Kafka's plain columns: a header line of names, then one line a partition, cells two spaces or more apart."""
    lines = [line for line in out.splitlines() if line.strip()]
    header_at = next(i for i, line in enumerate(lines) if line.split()[:2] == ["partition", "leader"])
    header = re.split(r"\s{2,}", lines[header_at].strip())
    rows = {}
    for line in lines[header_at + 1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if not cells[0].isdigit():
            break
        rows[int(cells[0])] = dict(zip(header, cells))
    return rows


def test_topics_describe_asks_the_live_brokers_and_marks_the_dead_leader(request, zookeeper, tmp_path):
    cluster = cluster_with_events(request, zookeeper, tmp_path, session_timeout_ms=30000)
    cluster.brokers[VICTIM].kill()  # its ZooKeeper session lives on for up to 30 s: it is still "registered"
    started = time.monotonic()
    done = sparklog("topics", "--zookeeper", cluster.zk_connect, "describe", "events")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    rows = describe_rows(out)
    assert sorted(rows) == list(range(6)), out
    for p in (0, 1, 3, 4):
        assert rows[p]["status"] == "ok" and rows[p]["log end"] == str(PER_PARTITION), out
    for p in (2, 5):
        assert rows[p]["leader"] == "1 (unreachable)" and rows[p]["status"] == "unreachable", out
        assert rows[p]["log end"] == "?", out
    assert "retrying" not in done.stderr.decode()
    assert took < 15, took  # about 2 s on an idle machine; it was request.timeout.ms and more
    under = sparklog("topics", "--zookeeper", cluster.zk_connect, "describe", "--under-replicated-partitions")
    assert under.returncode == 0 and "events" not in under.stdout.decode(), under.stdout.decode()  # RF 1: none
