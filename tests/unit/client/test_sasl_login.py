"""The client's SASL login settings (client/sasl.py): librdkafka's sasl.username/sasl.password or Kafka's Java
sasl.jaas.config, never both; a refused login is not retried; the password is never in a repr or an error."""

from __future__ import annotations

import pytest

from sparklog.client.config import PRODUCER_DEFAULTS, resolve
from sparklog.client.errors import is_retriable
from sparklog.client.sasl import SaslAuthenticationError, SaslLogin, login_of

PASSWORD = "pw-of-sam"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def config(**settings) -> dict:
    return resolve(PRODUCER_DEFAULTS, {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                                       **settings})


def test_the_jaas_form_gives_the_user_and_password():
    jaas = f'{SCRAM} required username="sam" password="{PASSWORD}";'
    assert login_of(config(**{"sasl.jaas.config": jaas})) == SaslLogin("SCRAM-SHA-256", "sam", PASSWORD)
    assert PASSWORD not in repr(login_of(config(**{"sasl.jaas.config": jaas})))


@pytest.mark.parametrize("settings, words", [
    ({"sasl.jaas.config": f'{SCRAM} required username="sam" password="{PASSWORD}";', "sasl.username": "sam"},
     "both set"),
    ({"sasl.jaas.config": f'{SCRAM} required username="sam" password="{PASSWORD}"'}, "does not parse"),
    ({"sasl.jaas.config": f'{SCRAM} required password="{PASSWORD}";'}, "needs username and password"),
    ({"sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required username="sam" '
                          f'password="{PASSWORD}";'}, f"must be one {SCRAM} entry for sasl.mechanism=SCRAM-SHA-256"),
    ({"sasl.username": "sam"}, "needs sasl.username and sasl.password (or sasl.jaas.config)"),
])
def test_a_login_the_client_cannot_use_is_refused_without_its_password(settings, words):
    with pytest.raises(ValueError) as refused:
        login_of(config(**settings))
    assert words in str(refused.value) and PASSWORD not in str(refused.value)


def test_a_refused_login_is_not_retriable_though_it_is_a_failed_connection():
    refused = SaslAuthenticationError("broker 1 at h:9093: SASL SCRAM-SHA-256 authentication of 'sam' failed")
    assert isinstance(refused, ConnectionError) and not is_retriable(refused)
