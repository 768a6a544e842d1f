"""`sparklog produce`, `sparklog consume` and `sparklog groups` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cli_cluster(request, zookeeper, tmp_path_factory):
    from support.cluster import Cluster

    cluster = Cluster(f"{zookeeper.connect_string}/cli-{uuid.uuid4().hex}", tmp_path_factory.mktemp("b"), brokers=1)
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


def sparklog(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "sparklog.cli", *args], input=input, capture_output=True,
                          timeout=timeout, cwd=str(REPO), env=env)


def test_produce_consume_and_groups(cli_cluster):
    from sparklog.client.admin import AdminClient

    zk = cli_cluster.zk_connect
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    with AdminClient(cli_cluster.bootstrap) as admin:
        admin.create_topic(topic, 3)
    lines = b"".join(b"k%d:value %d\n" % (i % 5, i) for i in range(30))
    done = sparklog("produce", topic, "--zookeeper", zk, "--key-separator", ":", input=lines)
    assert done.returncode == 0, done.stderr.decode()

    plain = sparklog("consume", topic, "--bootstrap-server", cli_cluster.bootstrap, "--from-beginning",
                     "--max-messages", "30", "--print-key")
    assert plain.returncode == 0, plain.stderr.decode()
    got = sorted(plain.stdout.splitlines())
    assert got == sorted(b"k%d\tvalue %d" % (i % 5, i) for i in range(30))

    grouped = sparklog("consume", topic, "--zookeeper", zk, "--group", "cli-group", "--from-beginning",
                       "--max-messages", "30")
    assert grouped.returncode == 0, grouped.stderr.decode()
    assert sorted(grouped.stdout.splitlines()) == sorted(b"value %d" % i for i in range(30))
    assert b"Processed a total of 30 messages" in grouped.stderr

    listed = sparklog("groups", "--zookeeper", zk, "list")
    assert listed.returncode == 0 and b"cli-group" in listed.stdout

    described = sparklog("groups", "--zookeeper", zk, "describe", "cli-group")
    assert described.returncode == 0, described.stderr.decode()
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in described.stdout.decode().splitlines()
             if topic in line]
    assert [c[1] for c in cells] == ["0", "1", "2"]
    assert all(c[2] == "-" for c in cells)  # nobody owns them now
    assert sum(int(c[3]) for c in cells) == 30 and all(c[5] == "0" for c in cells)  # committed all, lag 0

    reset = sparklog("groups", "--zookeeper", zk, "reset-offsets", "cli-group", "--to", "earliest")
    assert reset.returncode == 0, reset.stderr.decode()
    again = sparklog("consume", topic, "--zookeeper", zk, "--group", "cli-group", "--max-messages", "30")
    assert sorted(again.stdout.splitlines()) == sorted(b"value %d" % i for i in range(30))

    reset = sparklog("groups", "--zookeeper", zk, "reset-offsets", "cli-group", "--to", "25")
    assert reset.returncode == 0
    assert reset.stdout.decode().split() == [topic, "0", "25", topic, "1", "25", topic, "2", "25"]
    unknown = sparklog("groups", "--zookeeper", zk, "describe", "no-such-group")
    assert unknown.returncode == 1
