"""sparklog's own clients over TLS (librdkafka's property names) and the CLI's --command-config."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

import pytest

from support.certs import make_pki
from support.cluster import REPO, Cluster

TIMEOUT_S = 60


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(request, zookeeper, pki, tmp_path_factory):
    """PLAINTEXT and SSL listeners; mutual TLS required on SSL."""
    cluster = Cluster(f"{zookeeper.connect_string}/ctls-{uuid.uuid4().hex}", tmp_path_factory.mktemp("ctls"),
                      overrides={"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **pki.broker_ssl(),
                                 "ssl.client.auth": "required"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster.brokers[1]


def _settings(pki, bundle, **extra) -> dict:
    return {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(bundle.cert),
            "ssl.key.location": str(bundle.key), **extra}


def test_producer_consumer_and_admin_speak_tls(broker, pki):
    from sparklog.client import Consumer, Producer
    from sparklog.client.admin import AdminClient

    alice = pki.client("CN=alice,O=acme")
    bootstrap = f"localhost:{broker.listeners()['SSL'][1]}"
    settings = _settings(pki, alice)
    topic = f"ctls-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap, **settings) as admin:
        admin.create_topic(topic, partitions=2)
        admin.wait_for_leaders(topic, partitions=2, timeout=TIMEOUT_S)
    values = [os.urandom(200) * (1 + i % 50) for i in range(500)]  # up to 10 KB: responses span TLS records
    with Producer(bootstrap, acks="all", **settings) as producer:
        futures = [producer.send(topic, v, partition=i % 2) for i, v in enumerate(values)]
        producer.flush()
        assert all(f.get(TIMEOUT_S) for f in futures)
    got = []
    with Consumer(bootstrap, **settings, **{"auto.offset.reset": "earliest", "consumer.timeout.ms": 20_000}) as c:
        c.assign([(topic, 0), (topic, 1)])
        for record in c:
            got.append(record.value)
            if len(got) == len(values):
                break
    assert sorted(got) == sorted(values)
    assert broker.statistics()["server"]["tls_principals"].get("User:CN=alice,O=acme", 0) >= 3


def test_the_client_refuses_an_untrusted_broker_and_a_wrong_host_name(broker, pki, tmp_path):
    from sparklog.client.admin import AdminClient

    alice = pki.client("CN=alice2,O=acme")
    port = broker.listeners()["SSL"][1]
    other = make_pki(tmp_path / "other")
    with pytest.raises(Exception, match="(?i)certificate verify failed|could not reach|timed out"):
        with AdminClient(f"localhost:{port}", **_settings(other, alice), **{"request.timeout.ms": 5000}) as admin:
            admin.describe_cluster()
    # the broker's certificate names localhost and 127.0.0.1, not this machine's name: refused unless the check
    # is off (ssl.endpoint.identification.algorithm=none)
    name = socket.gethostname()
    assert name != "localhost" and socket.gethostbyname(name).startswith("127."), name
    settings = _settings(pki, alice, **{"request.timeout.ms": 5000})
    with pytest.raises(Exception, match="(?i)certificate verify failed|could not reach|timed out"):
        with AdminClient(f"{name}:{port}", **settings) as admin:
            admin.describe_cluster()
    with AdminClient(f"{name}:{port}", **settings, **{"ssl.endpoint.identification.algorithm": "none"}) as admin:
        assert admin.describe_cluster()


def test_a_plaintext_client_config_on_the_tls_port_fails_and_an_unspoken_protocol_is_refused(broker, pki):
    from sparklog.client.admin import AdminClient

    with pytest.raises(Exception):
        with AdminClient(f"localhost:{broker.listeners()['SSL'][1]}", **{"request.timeout.ms": 3000}) as admin:
            admin.describe_cluster()
    with pytest.raises(ValueError, match="sasl.mechanism"):  # SASL_SSL is spoken; GSSAPI, its default, is not
        AdminClient(f"localhost:{broker.listeners()['SSL'][1]}", **{"security.protocol": "SASL_SSL"})


def test_every_cli_command_takes_command_config(broker, pki, tmp_path):
    alice = pki.client("CN=cli,O=acme")
    properties = tmp_path / "client.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in _settings(pki, alice).items()))
    bootstrap = f"localhost:{broker.listeners()['SSL'][1]}"
    topic = f"cli-{uuid.uuid4().hex[:8]}"

    def sparklog(*args):
        result = subprocess.run([sys.executable, "-m", "sparklog.cli", *args], capture_output=True, text=True,
                                timeout=120, cwd=str(REPO), input="")
        return result.returncode, result.stdout + result.stderr

    code, out = sparklog("topics", "--bootstrap-server", bootstrap, "--command-config", str(properties),
                         "create", topic, "--partitions", "1")
    assert code == 0, out
    code, out = sparklog("topics", "--bootstrap-server", bootstrap, "--command-config", str(properties), "list")
    assert code == 0 and topic in out, out
    code, out = sparklog("topics", "--bootstrap-server", bootstrap, "list")  # no TLS settings: refused
    assert code != 0, out
