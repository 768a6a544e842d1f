"""The source's and sink's TLS and SASL options (datasource/security.py): Kafka's Java client names and
librdkafka's reach the client as its settings, checked at load() (Rule 2), secrets hidden (Rule 3)."""

from __future__ import annotations

import pickle

import pytest

from sparklog.datasource.options import SparklogOptionError, parse_read_options, parse_write_options
from support.certs import make_pki

PASSWORD = "s3cret-pw"
JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="spark" password="{PASSWORD}";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def secured(pki, **extra) -> dict:
    return {"kafka.bootstrap.servers": "h:9093", "subscribe": "t", "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "scram-sha-256", "kafka.sasl.jaas.config": JAAS,
            "kafka.ssl.truststore.location": str(pki.ca), "kafka.ssl.truststore.type": "pem", **extra}


def settings_of(options: dict, streaming: bool = True) -> dict:
    return dict(parse_read_options(options, streaming=streaming).connection.settings)


def test_javas_names_become_the_clients_and_secrets_are_hidden(pki):
    o = parse_read_options(secured(pki, **{"kafka.ssl.keystore.location": str(pki.broker.keystore),
                                           "kafka.ssl.keystore.type": "PEM",
                                           "kafka.ssl.endpoint.identification.algorithm": ""}), streaming=True)
    settings = dict(o.connection.settings)
    assert settings == {"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": JAAS,
                        "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.broker.keystore),
                        "ssl.key.location": str(pki.broker.keystore), "ssl.endpoint.identification.algorithm": "none"}
    assert PASSWORD not in repr(o) and "[hidden]" in repr(o)
    shipped = pickle.loads(pickle.dumps(o))  # as Spark ships it to its Python workers
    assert dict(shipped.connection.settings)["sasl.jaas.config"] == JAAS and PASSWORD not in repr(shipped)


def test_librdkafkas_names_reach_producer_and_consumer_alike(pki):
    options = {"kafka.bootstrap.servers": "h:9093", "kafka.security.protocol": "SASL_PLAINTEXT",
               "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "u", "kafka.sasl.password": PASSWORD}
    assert settings_of({**options, "subscribe": "t"})["sasl.password"] == PASSWORD
    w = parse_write_options({**options, "topic": "t", "kafka.linger.ms": "3"})
    assert dict(w.producer_settings) == {"linger.ms": "3", "security.protocol": "sasl_plaintext",
                                         "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": PASSWORD}
    assert PASSWORD not in repr(w)


@pytest.mark.parametrize("change, words", [
    ({"kafka.security.protocol": "SASL_TLS"}, "Option 'kafka.security.protocol' is 'SASL_TLS': it must be one of"),
    ({"kafka.sasl.mechanism": "GSSAPI"}, "Option 'kafka.sasl.mechanism' cannot be used: sasl.mechanism=GSSAPI"),
    ({"kafka.sasl.mechanism": "PLAIN"}, "Option 'kafka.sasl.jaas.config' cannot be used: sasl.jaas.config must be one "
                                        "org.apache.kafka.common.security.plain.PlainLoginModule entry"),
    ({"kafka.sasl.jaas.config": f"ScramLoginModule username={PASSWORD}"}, "sasl.jaas.config does not parse"),
    ({"kafka.sasl.username": "u"}, "sasl.jaas.config and sasl.username/sasl.password are both set"),
    ({"kafka.ssl.truststore.type": "JKS"}, "Option 'kafka.ssl.truststore.type' is 'JKS': sparklog's client reads PEM"),
    ({"kafka.ssl.keystore.type": "PKCS12"}, "Option 'kafka.ssl.keystore.type' is 'PKCS12'"),
    ({"kafka.ssl.truststore.location": "/no/such.pem"}, "Option 'kafka.ssl.truststore.location': /no/such.pem does "
                                                        "not load"),
    ({"kafka.ssl.ca.location": "/x.pem"}, "Options 'kafka.ssl.truststore.location' and 'kafka.ssl.ca.location'"),
    ({"kafka.ssl.endpoint.identification.algorithm": "dns"}, "kafka.ssl.endpoint.identification.algorithm' must be"),
    ({"kafka.ssl.cipher.suites": "x"}, "Option 'kafka.ssl.cipher.suites' is not supported by sparklog's client"),
    ({"kafka.sasl.kerberos.service.name": "kafka"}, "Option 'kafka.sasl.kerberos.service.name' is not supported"),
    ({"kafka.security.protocol": "SSL"}, "Option 'kafka.sasl.jaas.config' is set but kafka.security.protocol is SSL"),
])
def test_what_the_client_cannot_honour_is_refused_at_load_in_one_line_naming_it(pki, change, words):
    with pytest.raises(SparklogOptionError) as refused:
        parse_read_options(secured(pki, **change), streaming=None)
    message = str(refused.value)
    assert words in message and "\n" not in message and PASSWORD not in message, message


def test_a_key_that_does_not_load_is_named_by_the_option_given(pki, tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    with pytest.raises(SparklogOptionError, match="Option 'kafka.ssl.keystore.location': the certificate and key"):
        parse_read_options(secured(pki, **{"kafka.ssl.keystore.location": str(bad)}), streaming=True)


def test_ssl_alone_needs_no_sasl_and_plaintext_needs_nothing(pki):
    settings = settings_of({"kafka.bootstrap.servers": "h:9093", "subscribe": "t", "kafka.security.protocol": "ssl",
                            "kafka.ssl.ca.location": str(pki.ca)})
    assert settings == {"security.protocol": "ssl", "ssl.ca.location": str(pki.ca)}
    assert settings_of({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                        "kafka.security.protocol": "PLAINTEXT"}) == {}
