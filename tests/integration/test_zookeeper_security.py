"""ZooKeeper secured as Kafka operators secure it (issue 24): a ZooKeeper serving SASL DIGEST-MD5, a broker with
`zookeeper.set.acl=true` logged in through the JAAS `Client` section named in KAFKA_OPTS, SCRAM credentials
bootstrapped by `sparklog configs --zookeeper` with the same login. A client that reaches ZooKeeper's port without
logging in reads what Kafka leaves world-readable, and cannot write the brokers' znodes, the ACLs or the
credentials, nor read the credentials; the broker serves produce and consume; a broker with a wrong ZooKeeper
password, or set.acl without a login, refuses to start with one line."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE

from sparklog.coordination.connection import close, connect
from sparklog.coordination.zookeeper_security import ZooKeeperSecurity
from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
from integration.test_broker_sasl import confluent_round_trip
from support.cluster import Cluster, wait_until

ZK_USER, ZK_PASSWORD = "kafka", "zk-secret"
ADMIN = ("admin", "admin-pw")
ALICE = ("alice", "alice-pw")
START_TIMEOUT_S = 120


def client_jaas(password: str) -> str:
    return ("Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="{ZK_USER}" password="{password}";\n}};\n')


def broker_overrides() -> dict:
    plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{ADMIN[0]}" '
             f'password="{ADMIN[1]}" user_{ADMIN[0]}="{ADMIN[1]}";')
    scram = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="x" password="x";'
    return {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": f"User:{ADMIN[0]};User:{ALICE[0]}",
            "offsets.topic.replication.factor": "1", "zookeeper.set.acl": "true"}


def sparklog_cli(*args: str, env: dict | None = None, timeout: float = START_TIMEOUT_S):
    return subprocess.run([sys.executable, "-m", "sparklog.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def secured(request, tmp_path_factory):
    """(ZooKeeper with SASL, the chrooted connect string, a started broker) with KAFKA_OPTS set for the module."""
    base = tmp_path_factory.mktemp("zksec")
    server = EmbeddedZooKeeper(sasl_users={ZK_USER: ZK_PASSWORD, "other": "other-pw"})
    request.addfinalizer(server.stop)
    server.start()
    jaas = base / "jaas.conf"
    jaas.write_text(client_jaas(ZK_PASSWORD))
    env = pytest.MonkeyPatch()
    request.addfinalizer(env.undo)
    env.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    zk_connect = f"{server.connect_string}/zksec-{uuid.uuid4().hex[:8]}"
    done = sparklog_cli("configs", "--zookeeper", zk_connect, "--alter", "--entity-type", "users",
                        "--entity-name", ALICE[0], "--add-config", f"SCRAM-SHA-256=[password={ALICE[1]}]")
    assert done.returncode == 0, done.stderr
    cluster = Cluster(zk_connect, base / "cluster", brokers=1, overrides=broker_overrides())
    request.addfinalizer(cluster.stop)
    cluster.start()
    return server, zk_connect, cluster


@pytest.fixture
def anonymous(request, secured):
    client = connect(secured[1], security=ZooKeeperSecurity())
    request.addfinalizer(lambda: close(client))
    return client


def alice_config(cluster, **extra) -> dict:
    return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": ALICE[0], "sasl.password": ALICE[1], **extra}


def test_the_broker_serves_produce_and_consume_with_credentials_only_it_can_read(secured):
    assert confluent_round_trip(secured[2], "SCRAM-SHA-256", *ALICE) == [f"v{i}".encode() for i in range(5)]


def test_an_anonymous_client_reads_what_is_world_readable(secured, anonymous):
    assert anonymous.get_children("/brokers/ids") == ["1"]
    assert b"endpoints" in anonymous.get("/brokers/ids/1")[0]
    assert anonymous.exists("/kafka-acl") is not None


def test_an_anonymous_client_cannot_write_the_brokers_znodes(secured, anonymous):
    for write in (lambda: anonymous.create("/brokers/ids/99", b"{}"),
                  lambda: anonymous.set("/brokers/ids/1", b"{}"),
                  lambda: anonymous.delete("/brokers/ids/1"),
                  lambda: anonymous.create("/controller_spoof", b"{}"),
                  lambda: anonymous.create("/brokers/topics/evil", b"{}")):
        with pytest.raises(NoAuthError):
            write()
    assert anonymous.get_children("/brokers/ids") == ["1"]


def test_an_anonymous_client_cannot_write_the_acls(secured, anonymous):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient
    from confluent_kafka.admin import ResourcePatternType, ResourceType

    admin = AdminClient(alice_config(secured[2]))
    binding = AclBinding(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        future.result(60)
    wait_until(lambda: anonymous.exists("/kafka-acl/Topic/guarded"), "the ACL's znode", 30)
    for write in (lambda: anonymous.set("/kafka-acl/Topic/guarded", b'{"version":1,"acls":[]}'),
                  lambda: anonymous.delete("/kafka-acl/Topic/guarded"),
                  lambda: anonymous.create("/kafka-acl/Topic/everything", b"{}"),
                  lambda: anonymous.create("/kafka-acl-changes/acl_changes_9999999999", b"Topic:guarded")):
        with pytest.raises(NoAuthError):
            write()


def test_an_anonymous_client_can_neither_read_nor_write_scram_credentials(secured, anonymous):
    for act in (lambda: anonymous.get("/config/users/alice"), lambda: anonymous.get_children("/config/users"),
                lambda: anonymous.set("/config/users/alice", b"{}"),
                lambda: anonymous.create("/config/users/mallory", b"{}")):
        with pytest.raises(NoAuthError):
            act()


def test_another_zookeeper_identity_cannot_write_either(secured, tmp_path):
    """CREATOR_ALL is the brokers' identity's, not any logged-in user's."""
    other = connect(secured[1], security=ZooKeeperSecurity("other", "other-pw", True, "test"))
    try:
        with pytest.raises(NoAuthError):
            other.get("/config/users/alice")
        with pytest.raises(NoAuthError):
            other.create("/brokers/ids/98", b"{}")
    finally:
        close(other)


def _broker_start(secured, tmp_path, env: dict) -> subprocess.CompletedProcess:
    return sparklog_cli("broker", "start", "--id", "2", "--host", "127.0.0.1", "--port", "0",
                        "--log-dir", str(tmp_path / "logs"), "--zookeeper", secured[1],
                        *sum((["--override", f"{k}={v}"] for k, v in broker_overrides().items()), []), env=env)


def _error_lines(done: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def test_a_broker_with_a_wrong_zookeeper_password_refuses_to_start_with_one_line(secured, tmp_path):
    import os

    jaas = tmp_path / "wrong.conf"
    jaas.write_text(client_jaas("not-the-password"))
    done = _broker_start(secured, tmp_path, dict(os.environ, KAFKA_OPTS=f"-Djava.security.auth.login.config={jaas}"))
    assert done.returncode == 1
    [line] = _error_lines(done)
    assert "refused the login" in line and f"'{ZK_USER}'" in line


def test_set_acl_without_a_zookeeper_login_refuses_to_start_with_one_line(secured, tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if k != "KAFKA_OPTS"}
    done = _broker_start(secured, tmp_path, env)
    assert done.returncode == 2
    [line] = _error_lines(done)
    assert "zookeeper.set.acl is true" in line and "java.security.auth.login.config" in line


def _without_login() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "KAFKA_OPTS"}


def test_the_cli_with_the_brokers_login_writes_and_reads_users_and_without_it_is_refused_in_one_line(secured):
    user = ("configs", "--zookeeper", secured[1], "--entity-type", "users", "--entity-name", ALICE[0])
    altered = sparklog_cli(*user, "--alter", "--add-config", "producer_byte_rate=1048576")
    assert altered.returncode == 0, altered.stderr
    args = (*user, "--describe")
    described = sparklog_cli(*args)
    assert described.returncode == 0 and "producer_byte_rate" in described.stdout, described.stderr
    for command in (args, ("configs", "--zookeeper", secured[1], "--alter", "--entity-type", "users",
                           "--entity-name", "mallory", "--add-config", "SCRAM-SHA-256=[password=m]")):
        refused = sparklog_cli(*command, env=_without_login())
        assert refused.returncode == 1
        assert _error_lines(refused) == ["error: ZooKeeper refused access to a znode: log in as the brokers' "
                                         "ZooKeeper identity (a JAAS 'Client' section named by "
                                         "KAFKA_OPTS=-Djava.security.auth.login.config=FILE)"], refused.stderr


def test_a_zookeeper_group_consumer_logs_in_and_its_registry_stays_open_to_any_member(secured, anonymous):
    """The Spark source's ZooKeeper group mode: its members register under /consumers (Kafka leaves it open)."""
    from confluent_kafka import Producer

    from sparklog.client.group import GroupConsumer

    topic = f"g-{uuid.uuid4().hex[:8]}"
    producer = Producer(alice_config(secured[2], acks="all"))
    for i in range(3):
        producer.produce(topic, f"r{i}".encode())
    assert producer.flush(60) == 0
    security = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": ALICE[0], "sasl.password": ALICE[1]}
    with GroupConsumer([topic], "zkgroup", secured[1], **{"bootstrap.servers": secured[2].bootstrap},
                       **security) as consumer:
        got = []
        for record in consumer:
            got.append(record.value)
            if len(got) == 3:
                break
    assert got == [f"r{i}".encode() for i in range(3)]
    assert anonymous.get_acls("/consumers/zkgroup")[0] == list(OPEN_ACL_UNSAFE)


def test_a_zookeeper_requiring_sasl_serves_the_login_and_refuses_an_anonymous_client_everything():
    from kazoo.exceptions import SessionClosedRequireSaslError

    with EmbeddedZooKeeper(sasl_users={ZK_USER: ZK_PASSWORD}, require_sasl=True) as server:
        broker = connect(server.connect_string + "/required", security=ZooKeeperSecurity(ZK_USER, ZK_PASSWORD, True))
        anonymous = connect(server.connect_string, security=ZooKeeperSecurity())
        try:
            broker.ensure_path("/brokers/ids")
            assert broker.get_children("/") == ["brokers"]
            with pytest.raises(SessionClosedRequireSaslError):
                anonymous.get_children("/")
        finally:
            close(anonymous)
            close(broker)
