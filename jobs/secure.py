"""`sparklog demo --secure`: the demo's clusters served as issue 24's secured cluster, and what every client of
the demo needs to reach them.

Rule 1 (brokers): each broker's only listener is SASL_SSL (SCRAM-SHA-256 over TLS, PEM key and trust stores of a
certificate authority made into the demo's own directory, `sparklog/broker/local_pki.py`); the brokers reach
each other over that same listener as the demo's user, and the ACL authorizer runs with that user the one
super user. No PLAINTEXT listener is bound.
Rule 2 (user): one SCRAM user, `demo`, with a random password, stored in each cluster's ZooKeeper before its
brokers start (as Kafka bootstraps credentials).
Rule 3 (clients): the demo's producers, consumers, group members and Spark jobs take `client_settings()`
(librdkafka's names; the Spark jobs as `kafka.` options): security.protocol=SASL_SSL, SCRAM-SHA-256 as `demo`,
the CA to verify the brokers with.
Rule 4 (check): `plaintext_endpoints(zookeeper)` lists any broker endpoint registered in ZooKeeper that is not
SASL_SSL; the demo reports a failure unless it is empty.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

USER = "demo"
MECHANISM = "SCRAM-SHA-256"
PROTOCOL = "SASL_SSL"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
_SCRAM_LOGIN = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'


@dataclass(frozen=True)
class SecureDemo:
    ca: Path  # PEM of the certificate authority that signed the brokers' certificate
    keystore: Path  # the brokers' key and certificate chain, PEM
    password: str

    @classmethod
    def make(cls, directory: Path) -> "SecureDemo":
        """A fresh certificate authority and broker certificate under `directory`, and a random password."""
        from sparklog.broker.local_pki import make_pki

        pki = make_pki(directory)
        return cls(pki.ca, pki.broker.keystore, secrets.token_urlsafe(18))

    def broker_overrides(self) -> dict[str, str]:
        """Rule 1's broker settings."""
        return {"listeners": f"{PROTOCOL}://127.0.0.1:0", "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.keystore), "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.ca), "sasl.enabled.mechanisms": MECHANISM,
                "sasl.mechanism.inter.broker.protocol": MECHANISM,
                f"listener.name.{PROTOCOL.lower()}.{MECHANISM.lower()}.sasl.jaas.config":
                    _SCRAM_LOGIN.format(USER, self.password),
                "authorizer.class.name": AUTHORIZER, "super.users": f"User:{USER}"}

    def store_user(self, zookeeper: str) -> None:
        """Rule 2: the demo user's SCRAM credential in the cluster at `zookeeper`."""
        from sparklog.coordination.connection import close, connect
        from sparklog.coordination.scram_credentials import store_credential

        zk = connect(zookeeper)
        try:
            store_credential(zk, USER, MECHANISM, self.password)
        finally:
            close(zk)

    def client_settings(self) -> dict[str, str]:
        """Rule 3: librdkafka's names."""
        return {"security.protocol": PROTOCOL.lower(), "sasl.mechanism": MECHANISM, "sasl.username": USER,
                "sasl.password": self.password, "ssl.ca.location": str(self.ca)}


def plaintext_endpoints(zookeeper: str) -> list[str]:
    """Rule 4: every endpoint registered under /brokers/ids whose listener's protocol is not SASL_SSL."""
    from sparklog.coordination.connection import close, connect

    zk = connect(zookeeper)
    try:
        found = []
        for broker in zk.get_children("/brokers/ids"):
            info = json.loads(zk.get(f"/brokers/ids/{broker}")[0])
            protocols = info.get("listener_security_protocol_map", {})
            found += [f"{broker}: {e} ({protocols.get(e.split('://')[0])})" for e in info["endpoints"]
                      if protocols.get(e.split("://")[0]) != PROTOCOL]
        return found
    finally:
        close(zk)
