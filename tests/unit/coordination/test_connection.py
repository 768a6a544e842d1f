import pytest

from sparklog.coordination.connection import (
    ZooKeeperUnavailable,
    close,
    connect,
    split_connect_string,
)
from sparklog.coordination.zookeeper_server import free_port


def test_split_connect_string():
    assert split_connect_string("h1:1,h2:2/a/b/") == ("h1:1,h2:2", "/a/b")
    assert split_connect_string("h:1") == ("h:1", "")
    with pytest.raises(ValueError):
        split_connect_string("/only-chroot")


def test_chroot_is_created_and_isolates(zookeeper):
    chrooted = connect(zookeeper.connect_string + "/deep/chroot")
    root = connect(zookeeper.connect_string)
    try:
        chrooted.create("/x", b"1")
        assert root.get("/deep/chroot/x")[0] == b"1"
        assert not chrooted.exists("/deep")
    finally:
        close(chrooted)
        close(root)


def test_fixture_clients_see_only_their_own_chroot(zk, zk_connect):
    zk.create("/mine", b"")
    other = connect(zk_connect)
    try:
        assert other.exists("/mine")
    finally:
        close(other)
    assert zk_connect.split("/", 1)[1].startswith("t-")


def test_unavailable_server_is_a_clear_error_that_says_why(caplog):
    port = free_port()
    with pytest.raises(ZooKeeperUnavailable, match=f"could not reach ZooKeeper within 1s: 127.0.0.1:{port}: "
                                                   "connection refused"):
        connect(f"127.0.0.1:{port}", timeout=1.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    # every 3 s, or once halfway through a timeout under 6 s
    assert warnings == [f"cannot reach ZooKeeper at 127.0.0.1:{port}: connection refused; retrying"]


def test_a_name_that_does_not_resolve_is_said_so():
    with pytest.raises(ZooKeeperUnavailable, match="no-such-host.invalid:2181: name not resolved"):
        connect("no-such-host.invalid:2181", timeout=1.0)
