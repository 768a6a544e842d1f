"""zookeeper_security.py: the ZooKeeper login from KAFKA_OPTS' JAAS file (Rule 1), the ACL of each path (Rule 2),
set.acl without a login (Rule 3); and the JAAS file grammar it reads (protocol/jaas.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from sparklog.coordination.zookeeper_security import (
    DIGEST_LOGIN_MODULE,
    ZooKeeperSecurity,
    ZooKeeperSecurityError,
    acls_for,
    java_properties,
)
from sparklog.protocol.jaas import JaasError, parse_jaas_file

CLIENT = f'Client {{\n  {DIGEST_LOGIN_MODULE} required\n  username="kafka"\n  password="s3cr\\"et";\n}};\n'


def opts(path, *extra: str) -> dict:
    return {"KAFKA_OPTS": " ".join([f"-Xmx1g -Djava.security.auth.login.config={path}", *extra])}


def test_no_kafka_opts_is_no_login_and_no_acls():
    security = ZooKeeperSecurity.from_environment({})
    assert not security.authenticated and not security.set_acl and security.kazoo_options() == {}
    assert security.acls("/brokers/ids") is None


def test_the_client_section_is_the_login_and_a_logged_in_tool_sets_acls(tmp_path):
    (tmp_path / "jaas.conf").write_text("KafkaServer { x.Y required a=b; };\n" + CLIENT)
    security = ZooKeeperSecurity.from_environment(opts(tmp_path / "jaas.conf"))
    assert (security.username, security.password, security.set_acl) == ("kafka", 's3cr"et', True)
    assert security.kazoo_options() == {"sasl_options": {"mechanism": "DIGEST-MD5", "username": "kafka",
                                                         "password": 's3cr"et'}}
    assert "s3cr" not in repr(security)
    assert not ZooKeeperSecurity.from_environment(opts(tmp_path / "jaas.conf"), set_acl=False).set_acl


def test_the_section_name_is_zookeeper_sasl_clientconfig(tmp_path):
    (tmp_path / "jaas.conf").write_text(CLIENT.replace("Client", "ZkLogin"))
    assert not ZooKeeperSecurity.from_environment(opts(tmp_path / "jaas.conf")).authenticated
    named = ZooKeeperSecurity.from_environment(opts(tmp_path / "jaas.conf", "-Dzookeeper.sasl.clientconfig=ZkLogin"))
    assert named.username == "kafka"


@pytest.mark.parametrize("text, message", [
    (None, "cannot read it"),
    ("Client { broken", "does not parse"),
    ("Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };", "Krb5LoginModule"),
    (f'Client {{ {DIGEST_LOGIN_MODULE} required username="kafka"; }};', "needs username and password"),
    ("Client { };", "not none"),
])
def test_an_unusable_login_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "jaas.conf"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ZooKeeperSecurityError, match=message) as raised:
        ZooKeeperSecurity.from_environment(opts(path))
    assert "\n" not in str(raised.value)


def test_kafka_opts_that_do_not_parse_are_refused():
    with pytest.raises(ZooKeeperSecurityError, match="KAFKA_OPTS"):
        ZooKeeperSecurity.from_environment({"KAFKA_OPTS": '-Dx="unterminated'})


def test_java_properties_reads_quoted_values():
    assert java_properties("-Da=1 -Xmx1g '-Db=two words' -Dc") == {"a": "1", "b": "two words", "c": ""}


def test_set_acl_without_a_login_is_refused_naming_the_setting():
    with pytest.raises(ZooKeeperSecurityError, match="^zookeeper.set.acl is true, but no authentication"):
        ZooKeeperSecurity(set_acl=True).require_login()
    ZooKeeperSecurity("kafka", "pw", True).require_login()
    ZooKeeperSecurity().require_login()


@pytest.mark.parametrize("path, acl", [
    ("/brokers/ids", CREATOR_ALL_ACL + READ_ACL_UNSAFE),
    ("/kafka-acl/Topic/t", CREATOR_ALL_ACL + READ_ACL_UNSAFE),
    ("/config", CREATOR_ALL_ACL + READ_ACL_UNSAFE),
    ("/config/usersX", CREATOR_ALL_ACL + READ_ACL_UNSAFE),
    ("/config/users", CREATOR_ALL_ACL),
    ("/config/users/alice", CREATOR_ALL_ACL),
    ("/config/brokers/1", CREATOR_ALL_ACL),
    ("/consumers", OPEN_ACL_UNSAFE),
    ("/consumers/g/ids/c", OPEN_ACL_UNSAFE),
])
def test_each_path_gets_kafkas_acl(path, acl):
    assert acls_for(path) == list(acl)
    assert ZooKeeperSecurity("kafka", "pw", True).acls(path) == list(acl)


def test_a_jaas_file_has_named_sections_and_comments():
    text = '// a comment\nKafkaServer { a.B required x="y}; // not a comment"; };\n/* block\n */ ' + CLIENT
    sections = parse_jaas_file(text)
    assert list(sections) == ["KafkaServer", "Client"]
    assert sections["KafkaServer"][0].options == {"x": "y}; // not a comment"}


@pytest.mark.parametrize("text", ["Client { a.B required; }; Client { a.B required; };", "Client { a.B required; }",
                                  "{ a.B required; };", "Client { a.B required; }; trailing"])
def test_a_jaas_file_that_does_not_parse_is_refused(text):
    with pytest.raises(JaasError):
        parse_jaas_file(text)


_NAME = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,10}", fullmatch=True)
_VALUE = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20)


@given(st.dictionaries(_NAME, st.tuples(_NAME, _VALUE), min_size=1, max_size=4))
def test_any_client_section_round_trips(sections):
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    text = "".join(f"{name} {{ {DIGEST_LOGIN_MODULE} required username={quoted(user)} password={quoted(pw)}; }};\n"
                   for name, (user, pw) in sections.items())
    parsed = parse_jaas_file(text)
    assert {name: (e[0].options["username"], e[0].options["password"]) for name, e in parsed.items()} == sections


TLS = {"zookeeper.ssl.client.enable": "true", "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty"}


def test_tls_from_the_brokers_settings_over_kafka_opts(tmp_path):
    ca, store = tmp_path / "ca.pem", tmp_path / "me.pem"
    ca.write_text("x")
    store.write_text("x")
    environ = {"KAFKA_OPTS": f"-Dzookeeper.client.secure=true -Dzookeeper.clientCnxnSocket={TLS['zookeeper.clientCnxnSocket']}"
                             f" -Dzookeeper.ssl.trustStore.location={ca} -Dzookeeper.ssl.hostnameVerification=false"}
    from_opts = ZooKeeperSecurity.from_environment(environ)
    assert from_opts.tls is not None and from_opts.tls.truststore == str(ca) and not from_opts.tls.check_hostname
    assert not from_opts.authenticated and not from_opts.set_acl  # no certificate: no login
    given = ZooKeeperSecurity.from_environment(environ, settings={"zookeeper.ssl.keystore.location": str(store),
                                                                  "unrelated.key": "x"})
    assert given.authenticated and given.set_acl and given.tls.keystore == str(store)
    assert given.kazoo_options()["certfile"] == given.kazoo_options()["keyfile"] == str(store)
    assert ZooKeeperSecurity.from_environment({}, settings={"zookeeper.ssl.client.enable": "false"}).tls is None


@pytest.mark.parametrize("settings, message", [
    ({"zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNIO"}, "needs zookeeper.clientCnxnSocket="),
    ({}, "needs zookeeper.ssl.truststore.location"),
    ({"zookeeper.ssl.truststore.location": "/nonexistent/ca.pem"}, "truststore.location /nonexistent/ca.pem: no such"),
    ({"zookeeper.ssl.keystore.type": "JKS"}, "^zookeeper.ssl.keystore.type=JKS: only PEM stores are read$"),
    ({"zookeeper.ssl.truststore.type": "PKCS12"}, "^zookeeper.ssl.truststore.type=PKCS12: only PEM"),
])
def test_tls_that_cannot_be_served_as_given_is_one_line(settings, message):
    with pytest.raises(ZooKeeperSecurityError, match=message):
        ZooKeeperSecurity.from_environment({}, settings={**TLS, **settings})
