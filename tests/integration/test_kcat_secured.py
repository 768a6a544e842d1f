"""kcat (Debian's, librdkafka 2.0 built with SSL and SASL/SCRAM) against a broker whose only listener is SASL_SSL
(SCRAM-SHA-256, PEM stores, the ACL authorizer): a granted user produces and consumes every byte with kcat's
`-X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-256 ...`; a wrong password gets kcat's
authentication error and no data."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from support.certs import make_pki
from support.cluster import Cluster
from support.secured import ADMIN, MECHANISM, confluent_config, sasl_ssl_overrides, store_users

pytestmark = pytest.mark.slow

ALICE = ("alice", "alice-pw")
TIMEOUT_S = 60
MESSAGES = 200


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def cluster(request, zookeeper, pki, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/kcat-sasl-ssl-{uuid.uuid4().hex}"
    store_users(zk_connect, dict([ADMIN, ALICE]))
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("kcat-secured"),
                      overrides={**sasl_ssl_overrides(pki, authorizer=True), "auto.create.topics.enable": "false"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


def _granted_topic(cluster, pki) -> str:
    """A two-partition topic alice may write and read (created and granted by the super user)."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                       ResourcePatternType, ResourceType)

    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(confluent_config(cluster.bootstrap, pki, *ADMIN))
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT_S)
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{ALICE[0]}", "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
    for future in admin.create_acls(bindings).values():
        future.result(TIMEOUT_S)
    return topic


def kcat(cluster, pki, user: str, password: str, *args: str, stdin: bytes | None = None):
    path = shutil.which("kcat")
    assert path, "kcat is not installed: run scripts/setup.sh (apt-get install -y kcat)"
    secured = ["-X", "security.protocol=SASL_SSL", "-X", f"sasl.mechanisms={MECHANISM}", "-X",
               f"sasl.username={user}", "-X", f"sasl.password={password}", "-X", f"ssl.ca.location={pki.ca}"]
    return subprocess.run([path, "-b", cluster.bootstrap, *secured, *args], input=stdin, capture_output=True,
                          timeout=TIMEOUT_S)


def test_kcat_produces_and_consumes_over_sasl_ssl_with_scram(cluster, pki):
    topic = _granted_topic(cluster, pki)
    sent = [(b"k%d" % (i % 5), bytes(range(11, 256))[: i % 200] + b"-%d" % i) for i in range(MESSAGES)]
    produced = kcat(cluster, pki, *ALICE, "-P", "-t", topic, "-K", "\t", "-X", "acks=all",
                    stdin=b"".join(k + b"\t" + v + b"\n" for k, v in sent))
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    consumed = kcat(cluster, pki, *ALICE, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k\t%s\n")
    assert consumed.returncode == 0, consumed.stderr.decode(errors="replace")
    got = [tuple(line.split(b"\t", 1)) for line in consumed.stdout.split(b"\n")[:-1]]
    assert sorted(got) == sorted(sent)


def test_kcat_with_a_wrong_password_is_refused_and_reads_nothing(cluster, pki):
    topic = _granted_topic(cluster, pki)
    refused = kcat(cluster, pki, ALICE[0], "not-alice-pw", "-C", "-t", topic, "-o", "beginning", "-e", "-m", "10")
    assert refused.returncode != 0 and refused.stdout == b""
    assert b"uthentication" in refused.stderr, refused.stderr.decode(errors="replace")
