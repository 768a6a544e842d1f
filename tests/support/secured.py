"""Secured brokers for integration tests, as issue 24 shows them: only SASL_SSL listeners, SCRAM-SHA-256, PEM key
and trust stores (certs.py), the inter-broker traffic over the same SASL_SSL listener as the SCRAM user `admin`,
optionally the ACL authorizer with `admin` the only super user.

    pki = make_pki(tmp)
    store_users(zk_connect, {"admin": "admin-pw", "alice": "alice-pw"})   # before any broker runs
    cluster = Cluster(zk_connect, base, brokers=3, overrides=sasl_ssl_overrides(pki, authorizer=True))
    confluent_config(cluster.bootstrap, pki, "alice", "alice-pw")          # librdkafka's settings
"""

from __future__ import annotations

from sparklog.coordination.connection import close, connect
from sparklog.coordination.scram_credentials import store_credential

MECHANISM = "SCRAM-SHA-256"
ADMIN = ("admin", "admin-pw")  # the brokers' own identity, and the super user
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
SCRAM_ITERATIONS = 4096
_SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'


def scram_jaas(user: str, password: str) -> str:
    """Kafka's `sasl.jaas.config` of a SCRAM login, as brokers and Java (and Spark) clients take it."""
    return _SCRAM_JAAS.format(user, password)


def store_users(zk_connect: str, users: dict[str, str]) -> None:
    """SCRAM-SHA-256 credentials of `users` in ZooKeeper (`/config/users/<user>`), as Kafka bootstraps them."""
    zk = connect(zk_connect)
    try:
        for user, password in users.items():
            store_credential(zk, user, MECHANISM, password, SCRAM_ITERATIONS)
    finally:
        close(zk)


def sasl_ssl_overrides(pki, authorizer: bool = False) -> dict:
    """Broker settings: one SASL_SSL listener (clients and brokers alike), SCRAM-SHA-256 as `admin`."""
    overrides = {"listeners": "SASL_SSL://127.0.0.1:0", **pki.broker_ssl(), "sasl.enabled.mechanisms": MECHANISM,
                 "sasl.mechanism.inter.broker.protocol": MECHANISM,
                 "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram_jaas(*ADMIN),
                 "connection.failed.authentication.delay.ms": "100"}
    if authorizer:
        overrides.update({"authorizer.class.name": AUTHORIZER, "super.users": f"User:{ADMIN[0]}"})
    return overrides


def confluent_config(bootstrap: str, pki, user: str, password: str, **extra) -> dict:
    """confluent-kafka's (librdkafka's) settings of a SASL_SSL login trusting the test CA."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": str(pki.ca), **extra}
