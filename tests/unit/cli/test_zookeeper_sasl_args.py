"""`sparklog zookeeper start --jaas FILE [--require-sasl]`: the users of the JAAS Server section, each bad form in
one line."""

from __future__ import annotations

import argparse

import pytest

from sparklog.cli.zookeeper import _server
from sparklog.coordination.zookeeper_server import DIGEST_LOGIN_MODULE, EmbeddedZooKeeper

SERVER = f'Server {{\n  {DIGEST_LOGIN_MODULE} required\n  user_kafka="k-pw"\n  user_tool="t\\"pw";\n}};\n'


def args(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"port": 2181, "host": "127.0.0.1", "data_dir": None, "id": None, "servers": None,
                                 "jaas": None, "require_sasl": False,
                                 "ssl_keystore": None, "ssl_truststore": None, **given})


def test_the_server_section_users_log_in(tmp_path):
    (tmp_path / "jaas.conf").write_text("Client { a.B required; };\n" + SERVER)
    server = _server(args(jaas=str(tmp_path / "jaas.conf"), require_sasl=True), EmbeddedZooKeeper)
    assert server.sasl_users == {"kafka": "k-pw", "tool": 't"pw'} and server.require_sasl


@pytest.mark.parametrize("text, message", [
    (None, "No such file"),
    ("Server { broken", "does not parse"),
    ("Client { a.B required; };", "Server section must be one"),
    (f"Server {{ {DIGEST_LOGIN_MODULE} required; }};", "Server section must be one"),
    ("Server { x.Krb5LoginModule required user_a=\"b\"; };", "Server section must be one"),
])
def test_a_jaas_file_that_names_no_users_is_one_line(tmp_path, text, message):
    path = tmp_path / "jaas.conf"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=message) as raised:
        _server(args(jaas=str(path)), EmbeddedZooKeeper)
    assert "\n" not in str(raised.value)


def test_require_sasl_needs_users():
    with pytest.raises(ValueError, match="--require-sasl needs --jaas"):
        _server(args(require_sasl=True), EmbeddedZooKeeper)


def test_a_tls_port_takes_both_stores(tmp_path):
    (tmp_path / "k.pem").write_text("x")
    (tmp_path / "ca.pem").write_text("x")
    server = _server(args(ssl_keystore=str(tmp_path / "k.pem"), ssl_truststore=str(tmp_path / "ca.pem")),
                     EmbeddedZooKeeper)
    assert server.tls is not None and server.tls.truststore == str(tmp_path / "ca.pem")
    with pytest.raises(ValueError, match="--ssl-keystore and --ssl-truststore go together"):
        _server(args(ssl_keystore=str(tmp_path / "k.pem")), EmbeddedZooKeeper)
    with pytest.raises(ValueError, match="missing.pem: no such file"):
        _server(args(ssl_keystore=str(tmp_path / "missing.pem"), ssl_truststore=str(tmp_path / "ca.pem")),
                EmbeddedZooKeeper)
