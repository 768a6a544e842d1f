"""broker/tls.py: ssl.principal.mapping.rules (Kafka's RULE syntax), the stores' refusals, the contexts' limits."""

from __future__ import annotations

import ssl

import pytest
from hypothesis import given, strategies as st

from sparklog.broker.config import BrokerConfig, ConfigError
from sparklog.broker.tls import NoMatchingRule, PrincipalMapper, TlsConfigError, TlsSettings
from support.certs import make_pki


@pytest.mark.parametrize("rules, name, expected", [
    ("DEFAULT", "CN=alice,OU=eng,O=acme", "CN=alice,OU=eng,O=acme"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=kafka1,OU=ServiceUsers,O=Unknown", "kafka1"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=adminUser,OU=Admin,O=Unknown", "CN=adminUser,OU=Admin,O=Unknown"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L", "CN=Alice,OU=ENG,O=acme", "alice@eng"),
    ("RULE:^CN=(.*?),OU=(.*?)$/$1/U", "CN=bob,OU=x", "BOB"),
    ("RULE:^cn=(.*?),ou=(.*?)$/$1/, RULE:^CN=([^,]*).*$/$1/", "CN=carol,OU=y,O=z", "carol"),
    (r"RULE:^CN=(.*?)\/x,O=.*$/$1/", "CN=dave/x,O=z", "dave"),
])
def test_kafka_mapping_rules(rules, name, expected):
    assert PrincipalMapper.parse(rules).name(name) == expected


def test_a_name_no_rule_matches_is_refused():
    with pytest.raises(NoMatchingRule):
        PrincipalMapper.parse("RULE:^CN=(.*?),OU=eng$/$1/").name("CN=eve,OU=ops")


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "RULE:abc", "NONSENSE", "DEFAULT,RULE:x/y"])
def test_unreadable_rules_are_refused(rules):
    with pytest.raises(TlsConfigError, match="ssl.principal.mapping.rules"):
        PrincipalMapper.parse(rules)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_default_is_the_name_itself(name):
    assert PrincipalMapper.parse("DEFAULT").name(name) == name


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _config(**props) -> BrokerConfig:
    return BrokerConfig.from_properties({"broker.id": "1", "log.dirs": "/nonexistent", "zookeeper.connect": "h:1",
                                         **props})


def test_an_ssl_listener_gets_a_server_context_that_requires_what_client_auth_says(pki):
    cfg = _config(**{"listeners": "PLAINTEXT://:0,SSL://:0", **pki.broker_ssl(), "ssl.client.auth": "required"})
    assert cfg.ssl_server_context.verify_mode == ssl.CERT_REQUIRED
    assert cfg.ssl_server_context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert cfg.ssl_client_context is None  # inter-broker PLAINTEXT
    assert cfg.listener_security_protocol_map == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}


def test_inter_broker_ssl_verifies_the_other_brokers_and_their_host_names(pki):
    cfg = _config(**{"listeners": "SSL://:0", "security.inter.broker.protocol": "SSL", **pki.broker_ssl()})
    assert cfg.ssl_client_context.verify_mode == ssl.CERT_REQUIRED and cfg.ssl_client_context.check_hostname
    off = _config(**{"listeners": "SSL://:0", "security.inter.broker.protocol": "SSL", **pki.broker_ssl(),
                     "ssl.endpoint.identification.algorithm": ""})
    assert not off.ssl_client_context.check_hostname and off.ssl_client_context.verify_mode == ssl.CERT_REQUIRED


def test_inline_pem_stores_load(pki):
    tls = TlsSettings.from_properties({
        "ssl.keystore.type": "PEM", "ssl.keystore.key": pki.broker.key.read_text(),
        "ssl.keystore.certificate.chain": pki.broker.cert.read_text(), "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pki.ca.read_text(), "ssl.client.auth": "required"})
    assert tls.server_context().verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize("props, words", [
    ({"ssl.cipher.suites": "NOT-A-CIPHER"}, ["ssl.cipher.suites", "NOT-A-CIPHER"]),
    ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, ["TLS 1.3 suites"]),
    ({"ssl.protocol": "TLSv1.2", "ssl.enabled.protocols": "TLSv1.3"}, ["ssl.protocol=TLSv1.2"]),
    ({"ssl.keystore.password": "wrong", "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "P12"},
     ["PKCS12 key store"]),
])
def test_settings_that_cannot_be_served_are_refused(pki, props, words):
    p12 = str(pki.pkcs12(pki.broker, "right"))
    props = {k: p12 if v == "P12" else v for k, v in props.items()}
    with pytest.raises(ConfigError) as refused:
        _config(**{"listeners": "SSL://:0", "security.inter.broker.protocol": "SSL", **pki.broker_ssl(), **props})
    assert all(w in str(refused.value) for w in words), refused.value


def test_ciphers_naming_no_tls13_suite_cap_the_version_at_tls12(pki):
    cfg = _config(**{"listeners": "SSL://:0", "security.inter.broker.protocol": "SSL", **pki.broker_ssl(),
                     "ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256"})
    assert cfg.ssl_server_context.maximum_version == ssl.TLSVersion.TLSv1_2


def _two_tls_listeners(pki, **props) -> BrokerConfig:
    internal = pki.server("CN=localhost,OU=internal", stem="internal")
    return _config(**{"listeners": "INTERNAL://:0,EXTERNAL://:0", "inter.broker.listener.name": "INTERNAL",
                      "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SASL_SSL", **pki.broker_ssl(),
                      "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                          'username="a" password="b" user_a="b";',
                      "listener.name.internal.ssl.keystore.location": str(internal.keystore),
                      "listener.name.internal.ssl.client.auth": "required",
                      "listener.name.INTERNAL.ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/", **props})


def test_listener_prefixed_ssl_settings_override_the_unprefixed_for_that_listener_alone(pki):
    cfg = _two_tls_listeners(pki)
    internal, external = cfg.listener_tls["INTERNAL"].values, cfg.listener_tls["EXTERNAL"].values
    assert internal["ssl.keystore.location"].endswith("internal.keystore.pem")
    assert external["ssl.keystore.location"] == str(pki.broker.keystore)
    assert (internal["ssl.client.auth"], external["ssl.client.auth"]) == ("required", "none")
    assert cfg.ssl_server_contexts["INTERNAL"].verify_mode == ssl.CERT_REQUIRED
    assert cfg.ssl_server_contexts["EXTERNAL"].verify_mode == ssl.CERT_NONE
    assert cfg.listener_tls["INTERNAL"].mapping.name("CN=b1,O=x") == "b1"
    assert cfg.listener_tls["EXTERNAL"].mapping.name("CN=b1,O=x") == "CN=b1,O=x"
    # the inter-broker client presents the INTERNAL listener's key store
    assert cfg.ssl_client_context is not None and cfg.tls.values["ssl.client.auth"] == "none"


@pytest.mark.parametrize("key, value, words", [
    ("listener.name.internal.ssl.keystore.locaton", "x", ["listener.name.internal.ssl.keystore.locaton",
                                                          "did you mean 'ssl.keystore.location'"]),
    ("listener.name.intrenal.ssl.client.auth", "required", ["listener.name.intrenal.ssl.client.auth",
                                                             "no listener INTRENAL"]),
    ("listener.name.internal.ssl.client.auth", "always", ["listener.name.internal.ssl.client.auth", "always"]),
    ("listener.name.external.ssl.keystore.type", "JKS", ["EXTERNAL", "ssl.keystore.type=JKS"]),
])
def test_a_listener_prefixed_ssl_key_that_cannot_be_served_is_refused_in_one_line(pki, key, value, words):
    with pytest.raises(ConfigError) as refused:
        _two_tls_listeners(pki, **{key: value})
    assert all(w in str(refused.value) for w in words) and "\n" not in str(refused.value), refused.value


def test_a_listener_prefixed_ssl_key_of_a_plaintext_listener_is_refused(pki):
    with pytest.raises(ConfigError, match="listener.name.plaintext.ssl.client.auth: listener PLAINTEXT speaks "
                                          "PLAINTEXT"):
        _config(**{"listeners": "PLAINTEXT://:0,SSL://:0", **pki.broker_ssl(),
                   "listener.name.plaintext.ssl.client.auth": "required"})
