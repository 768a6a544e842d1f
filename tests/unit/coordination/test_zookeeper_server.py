import os
import socket

import pytest

from sparklog.coordination import zookeeper_server
from sparklog.coordination.connection import close, connect
from sparklog.coordination.zookeeper_server import (
    EmbeddedZooKeeper,
    JavaNotFound,
    ZooKeeperStartError,
    four_letter_word,
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_serves_stop_leaves_no_jvm_and_a_restart_on_the_same_dir_keeps_the_data(tmp_path):
    """One JVM start fewer than a test each: the stopped server's data dir is the restarted one's."""
    server = EmbeddedZooKeeper(data_dir=tmp_path / "zk")
    with server:
        assert server.running
        assert four_letter_word(server.host, server.port, "ruok") == "imok"
        client = connect(server.connect_string)
        client.create("/kept", b"1")
        close(client)
        pid = server.pid
    assert not _alive(pid), "the JVM outlived stop()"  # terminated and reaped: not even a zombie
    assert not server.running
    assert (tmp_path / "zk" / "zookeeper.log").stat().st_size > 0, "a given data dir is kept"
    server.stop()  # idempotent
    with EmbeddedZooKeeper(data_dir=tmp_path / "zk") as second:
        client = connect(second.connect_string)
        assert client.get("/kept")[0] == b"1", "the data did not survive a restart on the same dir"
        close(client)


def test_a_temporary_data_dir_is_removed():
    with EmbeddedZooKeeper() as server:
        data_dir = server.data_dir
        assert data_dir.is_dir()
    assert not data_dir.exists()


def test_port_in_use_fails_with_the_jvm_output(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = EmbeddedZooKeeper(port=taken.getsockname()[1], data_dir=tmp_path)
        with pytest.raises(ZooKeeperStartError, match="Address already in use"):
            server.start(timeout=20)
    assert not server.running


def test_missing_java_says_how_to_install_it(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JavaNotFound, match="openjdk"):
        EmbeddedZooKeeper().start()


def test_started_once_only(zookeeper):
    with pytest.raises(RuntimeError):
        zookeeper.start()


def test_finds_the_zookeeper_jar_in_pyspark():
    assert any(zookeeper_server.pyspark_jars_dir().glob("zookeeper-3.*.jar"))
