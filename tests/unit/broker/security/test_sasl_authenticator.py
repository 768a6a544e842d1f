"""The SASL state machine at the dispatcher (broker/security/sasl_authenticator.py; dispatch.py Rule 7): what a
connection on a SASL_PLAINTEXT listener may send before, during and after authentication."""

from __future__ import annotations

import asyncio
import struct

import pytest

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.network.dispatch import Dispatcher
from sparklog.broker.network.server import CloseConnection
from sparklog.broker.replication.partitions import MetadataSnapshot
from sparklog.coordination.brokers import BrokerInfo
from sparklog.coordination.scram_credentials import credential_from_salted, salted_password
from sparklog.protocol import ApiKey, ApiVersionsRequest, MetadataRequest
from sparklog.protocol.frame import FrameDecoder, FrameTooLarge
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from sparklog.protocol.sasl_client import PlainClient, ScramClient
from sparklog.records.batch import build_batch

from unit.broker.handlers.test_handlers import FakePartitions

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
        'user_admin="admin-pw" user_alice="alice-pw";')
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-pw";'
PROPS = {"broker.id": "1", "log.dirs": "/unused", "zookeeper.connect": "unused:1",
         "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
         "sasl.mechanism.inter.broker.protocol": "PLAIN",
         "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
         "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
         "connection.failed.authentication.delay.ms": "10", "sasl.server.max.receive.size": "4096",
         "socket.request.max.bytes": "65536"}
SALT = b"0123456789abcdef"


def _dispatcher(**overrides) -> Dispatcher:
    config = BrokerConfig.from_properties({**PROPS, **overrides})
    state = handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None,
                                       partitions=FakePartitions(MetadataSnapshot(
                                           {}, {1: BrokerInfo(1, "h", 1, endpoints=("SASL_PLAINTEXT://h:1",))}, {})))
    dispatcher = Dispatcher(state)
    cred = credential_from_salted("SCRAM-SHA-512", SALT, salted_password("SCRAM-SHA-512", "bob-pw", SALT, 4096), 4096)
    for listener in dispatcher._sasl.values():
        listener.lookup = lambda user, mech: ((cred.salt, cred.stored_key, cred.server_key, 4096)
                                              if (user, mech) == ("bob", "SCRAM-SHA-512") else None)
    return dispatcher


class Conn:
    """A connection as server.py makes it: the decoder first, then the session."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.decoder = dispatcher.new_decoder()
        self.session = dispatcher.new_session("10.0.0.1")
        self.correlation = 0

    def call(self, api_key, version, body):
        self.correlation += 1
        frame = encode_request(api_key, version, self.correlation, "test", body)[4:]
        reply = self.dispatcher.handle_frame(frame, self.session)
        if not isinstance(reply, list):
            reply = asyncio.run(_await(reply))
        data = b"".join(bytes(c) for c in reply)
        correlation, body = decode_response(api_key, version, data[4:])
        assert correlation == self.correlation
        return body

    def authenticate(self, mechanism, client, version=1):
        assert self.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        reply = self.call(ApiKey.SASL_AUTHENTICATE, version, SaslAuthenticateRequest(auth_bytes=client.first()))
        while reply.error_code == 0:
            token = client.step(bytes(reply.auth_bytes))
            if token is None:
                return reply
            reply = self.call(ApiKey.SASL_AUTHENTICATE, version, SaslAuthenticateRequest(auth_bytes=token))
        return reply


async def _await(awaitable):
    return await awaitable


@pytest.fixture
def conn():
    return Conn(_dispatcher())


def test_api_versions_is_served_before_authentication(conn):
    assert conn.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1")).error_code == 0
    assert conn.session.principal == "User:ANONYMOUS"


@pytest.mark.parametrize("api_key, version, body", [
    (ApiKey.METADATA, 8, MetadataRequest(topics=None)),
    (ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-pw")),
])
def test_anything_else_before_authentication_closes_the_connection(conn, api_key, version, body):
    with pytest.raises(CloseConnection):
        conn.call(api_key, version, body)


def test_a_produce_before_authentication_does_not_reach_the_fast_path(tmp_path):
    """After ApiVersions the session is identified (the fast paths' condition) and the broker leads `t`: the gate
    must still hold, for one frame and for a run of them, and nothing is appended."""
    from sparklog.broker.replication.partitions import PartitionMeta, TopicMeta
    from sparklog.protocol import PartitionProduceData, ProduceRequest, TopicProduceData
    from sparklog.storage import LogManager

    logs = LogManager([str(tmp_path)], {"flush.visibility": "appended"})
    led = logs.get_or_create("t", 0)
    topics = {"t": TopicMeta("t", {0: PartitionMeta(0, 1, 0, (1,), (1,))})}
    state = handlers.BrokerState.build(config=BrokerConfig.from_properties(PROPS), cluster_id="c" * 22, zk=None,
                                       logs=logs, partitions=FakePartitions(MetadataSnapshot(
                                           topics, {1: BrokerInfo(1, "h", 1)}, {("t", 0): led})))
    conn = Conn(Dispatcher(state))
    conn.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    body = ProduceRequest(acks=1, timeout_ms=100, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=build_batch([(b"k", b"v", None, None)]))])])
    frame = encode_request(ApiKey.PRODUCE, 8, 9, "t", body)[4:]
    try:
        with pytest.raises(CloseConnection):
            conn.dispatcher.handle_frame(frame, conn.session)
        replies: list = []
        with pytest.raises(CloseConnection):
            conn.dispatcher.handle_frames([frame, frame], conn.session, replies)
        assert replies == [] and led.log_end_offset == 0
    finally:
        logs.close()


def test_plain_with_the_right_password_authenticates_the_principal(conn):
    reply = conn.authenticate("PLAIN", PlainClient("alice", "alice-pw"))
    assert reply.error_code == 0 and reply.session_lifetime_ms == 0
    assert conn.session.principal == "User:alice" and conn.session.gate is None and conn.session.close_at is None
    assert conn.call(ApiKey.METADATA, 8, MetadataRequest(topics=None)).brokers


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("mallory", "alice-pw")])
def test_plain_with_a_wrong_password_or_unknown_user_fails_and_then_closes(conn, user, password):
    reply = conn.authenticate("PLAIN", PlainClient(user, password))
    assert reply.error_code == 58 and conn.session.principal == "User:ANONYMOUS"
    with pytest.raises(CloseConnection):
        conn.call(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
    assert conn.dispatcher._sasl["SASL_PLAINTEXT"].failures == 1


def test_scram_sha_512_authenticates(conn):
    reply = conn.authenticate("SCRAM-SHA-512", ScramClient("SCRAM-SHA-512", "bob", "bob-pw"))
    assert reply.error_code == 0 and conn.session.principal == "User:bob"


def test_scram_with_a_wrong_password_fails(conn):
    assert conn.authenticate("SCRAM-SHA-512", ScramClient("SCRAM-SHA-512", "bob", "nope")).error_code == 58
    assert conn.session.principal == "User:ANONYMOUS"


def test_a_mechanism_not_enabled_is_refused_with_the_enabled_list(conn):
    reply = conn.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    assert reply.error_code == 33 and reply.mechanisms == ["PLAIN", "SCRAM-SHA-512"]


def test_before_authentication_the_largest_frame_is_sasl_server_max_receive_size(conn):
    decoder: FrameDecoder = conn.decoder
    with pytest.raises(FrameTooLarge):
        decoder.receive_data(struct.pack(">i", 4097) + b"x")
    ok = Conn(conn.dispatcher)
    ok.authenticate("PLAIN", PlainClient("alice", "alice-pw"))
    assert ok.decoder.max_frame_bytes == 65536


def test_handshake_v0_takes_raw_tokens(conn):
    assert conn.call(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    reply = conn.dispatcher.handle_frame(PlainClient("alice", "alice-pw").first(), conn.session)
    assert reply == [b"\x00\x00\x00\x00"] and conn.session.principal == "User:alice"


def test_handshake_v0_with_a_wrong_password_closes():
    conn = Conn(_dispatcher())
    conn.call(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
    with pytest.raises(CloseConnection):
        conn.dispatcher.handle_frame(PlainClient("alice", "x").first(), conn.session)


def test_a_connection_that_does_not_authenticate_has_a_deadline(conn):
    assert conn.session.close_at is not None


def test_connections_max_reauth_ms_is_the_session_lifetime_and_reauthentication_extends_it():
    conn = Conn(_dispatcher(**{"connections.max.reauth.ms": "60000"}))
    reply = conn.authenticate("PLAIN", PlainClient("alice", "alice-pw"))
    assert reply.session_lifetime_ms == 60000 and conn.session.close_at is not None
    first = conn.session.close_at
    assert conn.authenticate("PLAIN", PlainClient("alice", "alice-pw")).error_code == 0
    assert conn.session.close_at >= first


def test_reauthentication_as_another_user_fails():
    conn = Conn(_dispatcher(**{"connections.max.reauth.ms": "60000"}))
    conn.authenticate("PLAIN", PlainClient("alice", "alice-pw"))
    assert conn.authenticate("PLAIN", PlainClient("admin", "admin-pw")).error_code == 58
    with pytest.raises(CloseConnection):
        conn.call(ApiKey.METADATA, 8, MetadataRequest(topics=None))


def test_sasl_apis_on_a_plaintext_listener_are_illegal_state():
    conn = Conn(_dispatcher(listeners="PLAINTEXT://127.0.0.1:0"))
    assert conn.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 34
    assert conn.session.gate is None


def _drive(conn, steps):
    request = next(steps)
    try:
        while True:
            request = steps.send(conn.call(*request))
    except StopIteration:
        return


@pytest.mark.parametrize("mechanism, user, password", [("PLAIN", "alice", "alice-pw"),
                                                       ("SCRAM-SHA-512", "bob", "bob-pw")])
def test_the_clients_login_exchange_logs_in(conn, mechanism, user, password):
    from sparklog.protocol.sasl_client import login_exchange

    _drive(conn, login_exchange(mechanism, user, password))
    assert conn.session.principal == f"User:{user}"


@pytest.mark.parametrize("mechanism, words", [("PLAIN", "SASL PLAIN authentication of 'alice' failed"),
                                              ("SCRAM-SHA-256", "SASL mechanism SCRAM-SHA-256 refused")])
def test_the_clients_login_exchange_raises_a_refusal(conn, mechanism, words):
    from sparklog.protocol.sasl_client import SaslLoginRefused, login_exchange

    with pytest.raises(SaslLoginRefused, match=words):
        _drive(conn, login_exchange(mechanism, "alice", "wrong"))
