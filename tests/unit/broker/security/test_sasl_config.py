"""The broker's SASL settings (security/sasl_config.py Rule 1) and the JAAS entries Kafka reads (protocol/jaas.py):
what cannot be served is refused at start in one line naming it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.broker.config import BrokerConfig, ConfigError
from sparklog.protocol.jaas import JaasError, parse_jaas

PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a" '
         'user_admin="a" user_alice="alice-pw";')
SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="a";'
BASE = {"broker.id": "1", "log.dirs": "/unused", "zookeeper.connect": "unused:1",
        "listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN}


def test_a_sasl_plaintext_listener_is_served_with_its_jaas_users():
    config = BrokerConfig.from_properties(BASE)
    assert config.listener_protocols == {"SASL_PLAINTEXT": "SASL_PLAINTEXT"}
    assert config.sasl.plain_users("SASL_PLAINTEXT") == {"admin": "a", "alice": "alice-pw"}
    assert config.sasl.login("SASL_PLAINTEXT") == ("PLAIN", "admin", "a")


def test_the_unprefixed_sasl_jaas_config_serves_every_listener():
    props = {k: v for k, v in BASE.items() if not k.startswith("listener.name")}
    config = BrokerConfig.from_properties({**props, "sasl.jaas.config": PLAIN + " " + SCRAM,
                                           "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"})
    assert config.sasl.mechanisms("SASL_PLAINTEXT") == ("PLAIN", "SCRAM-SHA-256")


@pytest.mark.parametrize("overrides, words", [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, ["GSSAPI", "sasl.enabled.mechanisms"]),
    ({"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}, ["OAUTHBEARER"]),
    ({"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"}, ["scram-sha-256.sasl.jaas.config", "ScramLoginModule"]),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": SCRAM}, ["PlainLoginModule"]),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"}, ["sasl.mechanism.inter.broker.protocol",
                                                                  "SCRAM-SHA-512"]),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN.replace('username="admin" ', "")},
     ["username and password"]),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "PlainLoginModule required user_a=\"x\""}, ["';'"]),
    ({"listeners": "SASL_SSL://:9093"}, ["SASL_SSL", "key store"]),  # served, over TLS: a store is needed
])
def test_what_cannot_be_served_is_refused_in_one_line(overrides, words):
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties({**BASE, **overrides})
    message = str(refused.value)
    assert "\n" not in message and all(word in message for word in words), message


def test_without_a_sasl_listener_kafkas_defaults_are_accepted():
    config = BrokerConfig.from_properties({"broker.id": "1", "log.dirs": "/x", "zookeeper.connect": "h:1"})
    assert config.sasl.enabled_mechanisms == ("GSSAPI",)


def test_jaas_quoted_values_keep_escapes_and_spaces():
    [entry] = parse_jaas('a.B required k="v w" e="q\\"x" bare=y;')
    assert (entry.login_module, entry.flag, entry.options) == ("a.B", "required", {"k": "v w", "e": 'q"x', "bare": "y"})


@given(st.text(max_size=80))
def test_jaas_parsing_of_any_text_gives_entries_or_one_jaas_error(text):
    try:
        entries = parse_jaas(text)
    except JaasError as exc:
        assert "\n" not in str(exc).replace(repr(text), "")
    else:
        assert all(entry.flag in ("required", "requisite", "sufficient", "optional") for entry in entries)


_BROKEN_JAAS = (
    'org.a.ScramLoginModule required username="u" password="{}"',  # no ';'
    'org.a.ScramLoginModule required username="u" password="{}" bare;',  # an option not key=value
    'org.a.ScramLoginModule required password="{}" username=;',
    'password="{}";',  # no login module
    'org.a.ScramLoginModule required password="{}" @;',  # does not tokenize
    'org.a.ScramLoginModule required password="{}',  # unterminated quote
    'org.a.ScramLoginModule required password={} x;',  # a bare-word password
    '"{}" required;',
)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=8, max_size=24),
       st.sampled_from(_BROKEN_JAAS))
def test_a_jaas_error_never_quotes_a_secret(secret, template):
    with pytest.raises(JaasError) as refused:
        parse_jaas(template.format(secret))
    assert secret not in str(refused.value), refused.value


def test_a_broker_refusing_a_jaas_config_names_the_key_and_prints_no_password():
    broken = PLAIN.replace('user_alice="alice-pw";', 'user_alice="alice-pw" oops;')
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties({**BASE, "listener.name.sasl_plaintext.plain.sasl.jaas.config": broken})
    message = str(refused.value)
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in message and "alice-pw" not in message, message
