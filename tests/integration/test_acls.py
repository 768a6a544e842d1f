"""The ACL authorizer with real brokers, a real ZooKeeper and real clients (confluent-kafka, kafka-python, the
`sparklog acls` command): refusal without ACLs, access with them, DENY over ALLOW, prefixed patterns, host
matching, super.users, every API refused without its ACL, and an ACL written through one broker applying on
another without a restart.

The principal is a parameter: `IDENTITIES` lists (principal, client settings) pairs; today the one principal a
connection can have is User:ANONYMOUS (no authentication yet). Add e.g. ("User:alice", {"security.protocol":
"SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", ...}) once the brokers authenticate, and every test runs as it too.
The tests' own bootstrap ACL (ALTER on the cluster, so the principal may manage ACLs but nothing else) is written
to ZooKeeper directly, as `kafka-acls --authorizer-properties zookeeper.connect=...` does."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid

import pytest

from sparklog.client.admin import AdminClient
from sparklog.coordination.acl import (CLUSTER_NAME, AccessControlEntry, AclBinding, AclBindingFilter, Operation,
                                       PatternType, Permission, ResourcePattern, ResourceType)
from sparklog.coordination.acl_store import AclStore
from sparklog.coordination.connection import close, connect
from sparklog.coordination.topics import create_topic
from sparklog.protocol.errors import ClusterAuthorizationFailedError
from sparklog.protocol.registry import ALL_VERSIONS, REQUESTS, decode_response, encode_request
from support.acl_requests import AUTHORIZATION_CODES as AUTH_CODES
from support.acl_requests import codes, filled
from support.cluster import Cluster, wait_until

IDENTITIES = [("User:ANONYMOUS", {})]
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
TIMEOUT_S = 30
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30


@pytest.fixture(scope="module", params=IDENTITIES, ids=[p for p, _ in IDENTITIES])
def identity(request):
    return request.param


@pytest.fixture(scope="module")
def secured(request, zookeeper, tmp_path_factory, identity):
    """Two brokers with the authorizer, no super user but a principal nobody uses, and a ZooKeeper client."""
    principal, _ = identity
    zk_connect = f"{zookeeper.connect_string}/acls-{uuid.uuid4().hex}"
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("acls"), brokers=2, overrides={
        "authorizer.class.name": AUTHORIZER, "super.users": "User:nobody-here", "auto.create.topics.enable": "false",
        "log.flush.interval.ms": "20"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    zk = connect(zk_connect)
    request.addfinalizer(lambda: close(zk))
    bootstrap = acl(principal, ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER)
    AclStore(zk).add([bootstrap])
    settled(cluster, identity, lambda found: bootstrap in found)
    return cluster, zk


def acl(principal, rtype, name, operation, permission=Permission.ALLOW, host="*", pattern=PatternType.LITERAL):
    return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, operation, permission))


@pytest.fixture
def topic(secured):
    cluster, zk = secured
    name = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(zk, name, 1, 1, assignment={0: (1,)})
    return name


def confluent_settings(cluster, identity, **more):
    return {"bootstrap.servers": cluster.bootstrap, **identity[1], **more}


def produce(cluster, identity, topic, count=3):
    """Errors of each message (None: delivered): its delivery report's, or the one produce() raised. librdkafka
    refuses a message at produce() once a Metadata answer has told it the topic is not authorized, so on a slow
    machine the first message's refusal comes by report and the later ones' from produce() (a fresh-clone run
    saw KafkaException(TOPIC_AUTHORIZATION_FAILED) raised from the second produce())."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(confluent_settings(cluster, identity, **{"message.timeout.ms": 15000}))
    errors = []
    for i in range(count):
        try:
            producer.produce(topic, b"v%d" % i, on_delivery=lambda err, msg: errors.append(err))
        except KafkaException as exc:
            errors.append(exc.args[0])
    producer.flush(TIMEOUT_S)
    return [None if e is None else e.code() for e in errors]


def consume(cluster, identity, topic, group, count=3):
    """(values read, error codes seen) of a subscribe() consumer reading from the start."""
    from confluent_kafka import Consumer

    consumer = Consumer(confluent_settings(cluster, identity, **{"group.id": group, "auto.offset.reset": "earliest",
                                                                 "enable.auto.commit": False}))
    consumer.subscribe([topic])
    values, codes = [], set()
    try:
        wait_until(lambda: _poll(consumer, values, codes) and (len(values) >= count or codes), "records or errors",
                   TIMEOUT_S)
    finally:
        consumer.close()
    return values, codes


def _poll(consumer, values, codes) -> bool:
    msg = consumer.poll(0.5)
    if msg is not None and msg.error() is None:
        values.append(msg.value())
    elif msg is not None and not msg.error().code() < 0:  # librdkafka's own events (partition EOF) are not refusals
        codes.add(msg.error().code())
    return True


def grant(cluster, identity, *bindings):
    """Create the ACLs through any broker, and wait until every broker's cache has them (the notifications)."""
    with AdminClient(cluster.bootstrap, **identity[1]) as admin:
        admin.create_acls(list(bindings))
    settled(cluster, identity, lambda found: set(bindings) <= found)


def settled(cluster, identity, holds):
    """Wait until `holds(the set of ACLs)` is true on every broker (each learns of a change by notification)."""
    for broker in cluster.brokers.values():
        with AdminClient(broker.address, **identity[1]) as admin:
            wait_until(lambda: holds(_acls_of(admin)), f"broker {broker.broker_id} seeing the ACL change", TIMEOUT_S)


def _acls_of(admin) -> set:
    """Every ACL a broker has, or none while it does not yet let the principal describe them."""
    try:
        return set(admin.describe_acls(AclBindingFilter()))
    except ClusterAuthorizationFailedError:
        return set()


def test_without_acls_produce_and_consume_are_refused(secured, identity, topic):
    cluster, _ = secured
    assert produce(cluster, identity, topic) == [TOPIC_AUTHORIZATION_FAILED] * 3
    group = f"g-{topic}"
    values, codes = consume(cluster, identity, topic, group)
    assert values == [] and GROUP_AUTHORIZATION_FAILED in codes  # the group is checked first, as in Kafka
    grant(cluster, identity, acl(identity[0], ResourceType.GROUP, group, Operation.READ))
    values, codes = consume(cluster, identity, topic, group)
    assert values == [] and TOPIC_AUTHORIZATION_FAILED in codes


def test_an_allowing_acl_lets_the_principal_produce_and_consume(secured, identity, topic):
    from confluent_kafka.admin import AclBinding as CkBinding
    from confluent_kafka.admin import AclOperation, AclPermissionType, AdminClient as CkAdmin
    from confluent_kafka.admin import ResourcePatternType as CkPattern
    from confluent_kafka.admin import ResourceType as CkType

    cluster, _ = secured
    principal = identity[0]
    group = f"g-{topic}"
    admin = CkAdmin(confluent_settings(cluster, identity))
    wanted = [CkBinding(CkType.TOPIC, topic, CkPattern.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
              for op in (AclOperation.WRITE, AclOperation.READ)]
    wanted.append(CkBinding(CkType.GROUP, group, CkPattern.LITERAL, principal, "*", AclOperation.READ,
                            AclPermissionType.ALLOW))
    for future in admin.create_acls(wanted).values():
        assert future.result(TIMEOUT_S) is None
    settled(cluster, identity, lambda found: len({b for b in found if b.pattern.name in (topic, group)}) == 3)
    assert produce(cluster, identity, topic) == [None] * 3
    values, codes = consume(cluster, identity, topic, group)
    assert values == [b"v0", b"v1", b"v2"] and not codes
    from confluent_kafka.admin import AclBindingFilter as CkFilter

    described = admin.describe_acls(CkFilter(CkType.TOPIC, topic, CkPattern.ANY, None, None, AclOperation.ANY,
                                             AclPermissionType.ANY)).result(TIMEOUT_S)
    assert sorted(b.operation.name for b in described) == ["READ", "WRITE"]


def test_deny_beats_allow(secured, identity, topic):
    cluster, _ = secured
    principal = identity[0]
    grant(cluster, identity, acl(principal, ResourceType.TOPIC, topic, Operation.ALL),
          acl(principal, ResourceType.TOPIC, topic, Operation.WRITE, Permission.DENY))
    assert produce(cluster, identity, topic) == [TOPIC_AUTHORIZATION_FAILED] * 3


def test_prefixed_acls_cover_the_names_they_start(secured, identity):
    cluster, zk = secured
    prefix = f"pay-{uuid.uuid4().hex[:6]}-"
    covered, other = prefix + "orders", f"other-{uuid.uuid4().hex[:6]}"
    for name in (covered, other):
        create_topic(zk, name, 1, 1, assignment={0: (2,)})
    grant(cluster, identity, acl(identity[0], ResourceType.TOPIC, prefix, Operation.WRITE,
                                 pattern=PatternType.PREFIXED))
    assert produce(cluster, identity, covered) == [None] * 3
    assert produce(cluster, identity, other) == [TOPIC_AUTHORIZATION_FAILED] * 3


def test_host_matching(secured, identity, topic):
    cluster, _ = secured
    grant(cluster, identity, acl(identity[0], ResourceType.TOPIC, topic, Operation.WRITE, host="10.254.254.254"))
    assert produce(cluster, identity, topic) == [TOPIC_AUTHORIZATION_FAILED] * 3
    grant(cluster, identity, acl(identity[0], ResourceType.TOPIC, topic, Operation.WRITE, host="127.0.0.1"))
    assert produce(cluster, identity, topic) == [None] * 3


def test_a_change_made_through_one_broker_applies_on_the_other(secured, identity):
    """Written through broker 1 only, the ACL lets the principal write to a partition broker 2 leads, and its
    removal through broker 2 only shuts it out of one broker 1 leads: the change notifications, no restart."""
    cluster, zk = secured
    on_two, on_one = (f"t2-{uuid.uuid4().hex[:6]}", f"t1-{uuid.uuid4().hex[:6]}")
    create_topic(zk, on_two, 1, 1, assignment={0: (2,)})
    create_topic(zk, on_one, 1, 1, assignment={0: (1,)})
    one, two = cluster.brokers[1].address, cluster.brokers[2].address
    binding = acl(identity[0], ResourceType.TOPIC, "t", Operation.WRITE, pattern=PatternType.PREFIXED)
    with AdminClient(one, **identity[1]) as admin:
        admin.create_acls([binding])
    wait_until(lambda: produce(cluster, identity, on_two, 1) == [None], "broker 2 applying the ACL", TIMEOUT_S)
    with AdminClient(two, **identity[1]) as admin:
        [removed] = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "t", PatternType.PREFIXED)])
    assert removed == [binding]
    wait_until(lambda: produce(cluster, identity, on_one, 1) == [TOPIC_AUTHORIZATION_FAILED],
               "broker 1 applying the removal", TIMEOUT_S)


def test_kafka_python_admin_creates_describes_and_deletes_acls(secured, identity, topic):
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient)
    from kafka.admin import ResourcePattern as KpPattern
    from kafka.admin import ResourcePatternFilter
    from kafka.admin import ResourceType as KpType

    cluster, _ = secured
    principal = identity[0]
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        pattern = KpPattern(KpType.TOPIC, topic, ACLResourcePatternType.LITERAL)
        created = admin.create_acls([ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        every = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                          ResourcePatternFilter(KpType.TOPIC, topic, ACLResourcePatternType.ANY))
        found, error = admin.describe_acls(every)
        assert error.errno == 0 and [(a.principal, a.operation) for a in found] == [(principal, ACLOperation.READ)]
        [(_, deleted, error)] = admin.delete_acls([every])
        assert error.errno == 0 and len(deleted) == 1
        assert admin.describe_acls(every)[0] == []
    finally:
        admin.close()


def test_the_sparklog_acls_command(secured, identity, topic, tmp_path):
    cluster, _ = secured
    config = tmp_path / "client.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in identity[1].items()))

    def acls(*args, stdin=""):
        done = subprocess.run([sys.executable, "-m", "sparklog.cli", "acls", "--bootstrap-server", cluster.bootstrap,
                               "--command-config", str(config), *args], input=stdin, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    group = f"g-{topic}"
    acls("--add", "--allow-principal", identity[0], "--consumer", "--topic", topic, "--group", group)
    acls("--add", "--allow-principal", identity[0], "--producer", "--topic", topic)
    settled(cluster, identity, lambda found: len({b for b in found if b.pattern.name in (topic, group)}) == 5)  # DESCRIBE twice
    listed = acls("--list", "--topic", topic)
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in listed
    assert {op for op in ("READ", "WRITE", "DESCRIBE", "CREATE") if f"operation={op}," in listed} == {
        "READ", "WRITE", "DESCRIBE", "CREATE"}
    assert produce(cluster, identity, topic) == [None] * 3
    assert consume(cluster, identity, topic, group)[0] == [b"v0", b"v1", b"v2"]
    acls("--remove", "--topic", topic, "--operation", "Write", stdin="n\n")  # asked, answered no: nothing removed
    assert produce(cluster, identity, topic, 1) == [None]
    acls("--remove", "--topic", topic, "--operation", "Write", "--force")
    settled(cluster, identity, lambda found: len({b for b in found if b.pattern.name in (topic, group)}) == 4)
    assert produce(cluster, identity, topic, 1) == [TOPIC_AUTHORIZATION_FAILED]


# ---- every API refused without its ACL, over a socket to a real broker

FILTERING = {18, 16, 60, 66,  # ApiVersions, ListGroups, DescribeCluster, ListTransactions: answer by leaving out
             17, 36}  # SaslHandshake, SaslAuthenticate: authentication itself (ILLEGAL_SASL_STATE on this listener)


def ask(address: str, api_key: int, version: int, body):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as conn:
        conn.sendall(encode_request(api_key, version, 1, "acl-table", body))
        size = int.from_bytes(_read(conn, 4), "big")
        return decode_response(api_key, version, memoryview(_read(conn, size)))[1]


def _read(conn, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


def test_every_api_is_refused_without_its_acl(secured, identity):
    """Only with no authentication (the raw socket speaks as User:ANONYMOUS): the ALTER on the cluster the
    fixture granted is taken back for this test and given back after it."""
    if identity[0] != "User:ANONYMOUS":
        pytest.fail("the raw-socket table speaks without authentication: run it for User:ANONYMOUS only")
    cluster, zk = secured
    store = AclStore(zk)
    alter = acl(identity[0], ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER)
    store.remove([AclBindingFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, identity[0])])
    address = cluster.brokers[1].address
    try:
        wait_until(lambda: codes(ask(address, 29, 1, filled(REQUESTS[29], 1))) & AUTH_CODES, "the removal applied",
                   TIMEOUT_S)
        refused = {}
        for api_key in sorted(set(REQUESTS) - FILTERING):
            version = 3 if api_key == 24 else ALL_VERSIONS[api_key][1]
            refused[api_key] = bool(codes(ask(address, api_key, version, filled(REQUESTS[api_key], version)))
                                    & AUTH_CODES)
        assert [k for k, ok in refused.items() if not ok] == []
    finally:
        store.add([alter])


def test_super_users_need_no_acl(request, zookeeper, tmp_path_factory, identity):
    cluster = Cluster(f"{zookeeper.connect_string}/acls-super-{uuid.uuid4().hex}", tmp_path_factory.mktemp("super"),
                      brokers=1, overrides={"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
                                            "super.users": f"User:admin;{identity[0]}",
                                            "auto.create.topics.enable": "false"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    with AdminClient(cluster.bootstrap, **identity[1]) as admin:
        admin.create_topic("open", 1, 1)
    assert produce(cluster, identity, "open") == [None] * 3
