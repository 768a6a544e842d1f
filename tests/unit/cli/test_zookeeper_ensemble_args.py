"""`sparklog zookeeper start --id N --servers ...`: the member it makes, and each bad combination in one line."""

from __future__ import annotations

import argparse

import pytest

from sparklog.cli.zookeeper import _server
from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

SERVERS = "1=127.0.0.1:2888:3888:2181,2=127.0.0.1:2889:3889:2182,3=127.0.0.1:2890:3890:2183"


def args(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"port": 2181, "host": "127.0.0.1", "data_dir": None, "id": None, "servers": None,
                                 "jaas": None, "require_sasl": False,
                                 "ssl_keystore": None, "ssl_truststore": None,
                                 **given})


def test_a_member_takes_its_client_port_and_address_from_servers(tmp_path):
    member = _server(args(id=2, servers=SERVERS, data_dir=str(tmp_path)), EmbeddedZooKeeper)
    assert (member.server_id, member.port, sorted(member.peers)) == (2, 2182, [1, 2, 3])
    assert _server(args(), EmbeddedZooKeeper).peers is None  # standalone without --servers


@pytest.mark.parametrize("given, words", [
    ({"id": 1}, "--id names a member of --servers"),
    ({"id": 4, "servers": SERVERS, "data_dir": "/tmp/x"}, "--id must be one of the ids in --servers (1, 2, 3), not 4"),
    ({"id": 1, "servers": SERVERS}, "needs --data-dir"),
    ({"id": 1, "servers": "1=h:1:2:3", "data_dir": "/tmp/x"}, "odd number of servers"),
])
def test_bad_ensemble_arguments_are_one_line(given, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        _server(args(**given), EmbeddedZooKeeper)
