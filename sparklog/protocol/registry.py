"""Which (api key, version) pairs this codec serves, and the four entry points over whole frames.

Broker side: ``decode_request(frame) -> Request``; ``encode_response(header, body) -> chunks``;
``encode_api_versions_fallback(correlation_id)``. Client side: ``encode_request(...) -> bytes``;
``decode_response(api_key, api_version, frame) -> (correlation_id, body)``.

Rule 1: ``decode_request`` raises only ``RemoteProtocolError`` subclasses -- ``UnsupportedVersion`` for
an api key or version outside ``ALL_VERSIONS``, ``MalformedRequest`` for anything that does not parse
(bytes after a well-formed body are ignored, as Kafka does). ``decode_response`` likewise raises only
``MalformedResponse`` for bad bytes.
Rule 2: the encoders raise ``LocalProtocolError`` when the caller passes a body of the wrong class or a
value that does not fit its field (a None where not nullable, an int out of range).
Rule 3: ApiVersions responses always use response header v0, and one whose error_code is not 0 is
encoded (and decoded) in the v0 body format, as Kafka's brokers and clients do.
"""

from __future__ import annotations

import struct
from typing import Any

from sparklog.protocol import (acls, add_offsets_to_txn, add_partitions_to_txn, alter_configs,
                               alter_partition_reassignments, api_versions,
                               client_quotas,
                               create_partitions, create_topics, delete_records, delete_topics, describe_cluster,
                               describe_topic_partitions,
                               describe_configs, describe_log_dirs, describe_producers, describe_transactions,
                               elect_leaders, end_txn, fetch, find_coordinator, group_admin, groups, list_transactions,
                               txn_offset_commit, write_txn_markers,
                               incremental_alter_configs, init_producer_id, list_offsets, list_partition_reassignments,
                               metadata, offset_commit,
                               offset_delete, offset_fetch, consumer_group, offset_for_leader_epoch, produce, sasl,
                               scram_credentials)
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.errors import (LocalProtocolError, MalformedRequest, MalformedResponse,
                                      UnsupportedVersion)
from sparklog.protocol.headers import (REQUEST_HEADER_PREFIX, RequestHeader, decode_client_id,
                                       encode_request_header, skip_tagged_fields)
from sparklog.protocol.schema import Decoder, Encoder, Message
from sparklog.records import BytesLike

__all__ = ["API_VERSIONS", "ALL_VERSIONS", "REQUESTS", "RESPONSES", "Request", "decode_request",
           "encode_response", "encode_api_versions_fallback", "encode_request", "decode_response",
           "advertised_api_versions", "UNSUPPORTED_VERSION"]

UNSUPPORTED_VERSION = 35  # Kafka error code of the ApiVersions fallback

_PAIRS: list[tuple[type[Message], type[Message]]] = [
    (produce.ProduceRequest, produce.ProduceResponse),
    (fetch.FetchRequest, fetch.FetchResponse),
    (list_offsets.ListOffsetsRequest, list_offsets.ListOffsetsResponse),
    (metadata.MetadataRequest, metadata.MetadataResponse),
    (offset_commit.OffsetCommitRequest, offset_commit.OffsetCommitResponse),
    (offset_fetch.OffsetFetchRequest, offset_fetch.OffsetFetchResponse),
    (find_coordinator.FindCoordinatorRequest, find_coordinator.FindCoordinatorResponse),
    (groups.JoinGroupRequest, groups.JoinGroupResponse),
    (groups.HeartbeatRequest, groups.HeartbeatResponse),
    (groups.LeaveGroupRequest, groups.LeaveGroupResponse),
    (groups.SyncGroupRequest, groups.SyncGroupResponse),
    (group_admin.DescribeGroupsRequest, group_admin.DescribeGroupsResponse),
    (group_admin.ListGroupsRequest, group_admin.ListGroupsResponse),
    (group_admin.DeleteGroupsRequest, group_admin.DeleteGroupsResponse),
    (api_versions.ApiVersionsRequest, api_versions.ApiVersionsResponse),
    (create_topics.CreateTopicsRequest, create_topics.CreateTopicsResponse),
    (delete_topics.DeleteTopicsRequest, delete_topics.DeleteTopicsResponse),
    (init_producer_id.InitProducerIdRequest, init_producer_id.InitProducerIdResponse),
    (offset_for_leader_epoch.OffsetForLeaderEpochRequest, offset_for_leader_epoch.OffsetForLeaderEpochResponse),
    (delete_records.DeleteRecordsRequest, delete_records.DeleteRecordsResponse),
    (describe_configs.DescribeConfigsRequest, describe_configs.DescribeConfigsResponse),
    (alter_configs.AlterConfigsRequest, alter_configs.AlterConfigsResponse),
    (create_partitions.CreatePartitionsRequest, create_partitions.CreatePartitionsResponse),
    (incremental_alter_configs.IncrementalAlterConfigsRequest,
     incremental_alter_configs.IncrementalAlterConfigsResponse),
    (describe_cluster.DescribeClusterRequest, describe_cluster.DescribeClusterResponse),
    (describe_topic_partitions.DescribeTopicPartitionsRequest,
     describe_topic_partitions.DescribeTopicPartitionsResponse),
    (offset_delete.OffsetDeleteRequest, offset_delete.OffsetDeleteResponse),
    (consumer_group.ConsumerGroupHeartbeatRequest, consumer_group.ConsumerGroupHeartbeatResponse),
    (consumer_group.ConsumerGroupDescribeRequest, consumer_group.ConsumerGroupDescribeResponse),
    (describe_log_dirs.DescribeLogDirsRequest, describe_log_dirs.DescribeLogDirsResponse),
    (describe_producers.DescribeProducersRequest, describe_producers.DescribeProducersResponse),
    (elect_leaders.ElectLeadersRequest, elect_leaders.ElectLeadersResponse),
    (list_partition_reassignments.ListPartitionReassignmentsRequest,
     list_partition_reassignments.ListPartitionReassignmentsResponse),
    (alter_partition_reassignments.AlterPartitionReassignmentsRequest,
     alter_partition_reassignments.AlterPartitionReassignmentsResponse),
    (add_partitions_to_txn.AddPartitionsToTxnRequest, add_partitions_to_txn.AddPartitionsToTxnResponse),
    (add_offsets_to_txn.AddOffsetsToTxnRequest, add_offsets_to_txn.AddOffsetsToTxnResponse),
    (end_txn.EndTxnRequest, end_txn.EndTxnResponse),
    (write_txn_markers.WriteTxnMarkersRequest, write_txn_markers.WriteTxnMarkersResponse),
    (txn_offset_commit.TxnOffsetCommitRequest, txn_offset_commit.TxnOffsetCommitResponse),
    (describe_transactions.DescribeTransactionsRequest, describe_transactions.DescribeTransactionsResponse),
    (list_transactions.ListTransactionsRequest, list_transactions.ListTransactionsResponse),
    (acls.DescribeAclsRequest, acls.DescribeAclsResponse),
    (acls.CreateAclsRequest, acls.CreateAclsResponse),
    (acls.DeleteAclsRequest, acls.DeleteAclsResponse),
    (client_quotas.DescribeClientQuotasRequest, client_quotas.DescribeClientQuotasResponse),
    (client_quotas.AlterClientQuotasRequest, client_quotas.AlterClientQuotasResponse),
    (sasl.SaslHandshakeRequest, sasl.SaslHandshakeResponse),
    (sasl.SaslAuthenticateRequest, sasl.SaslAuthenticateResponse),
    (scram_credentials.DescribeUserScramCredentialsRequest, scram_credentials.DescribeUserScramCredentialsResponse),
    (scram_credentials.AlterUserScramCredentialsRequest, scram_credentials.AlterUserScramCredentialsResponse),
]

REQUESTS: dict[int, type[Message]] = {ApiKey(req.api_key): req for req, _ in _PAIRS}
RESPONSES: dict[int, type[Message]] = {ApiKey(resp.api_key): resp for _, resp in _PAIRS}

# Every (api, version range) the codec decodes.
ALL_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey(key): (cls.min_version, cls.max_version) for key, cls in sorted(REQUESTS.items())
}

# What the broker advertises in ApiVersions: everything it decodes, but ListOffsets above v9. kafka-python
# names a broker's Kafka release by its highest versions (ListOffsets v10: 4.0) and, when its user pinned an
# older `api_version`, sends that release's version of every API: every version a pin up to the release named
# must be served (test_registry's release-inference test). Up to v9 (max timestamp, v7; the tiered-storage
# timestamps, v8-v9, answered as a log without remote storage answers them) the release named stays Fetch v16's,
# 3.7; v10 would name 4.0, whose Metadata v13, Fetch v17, ... are not served. v10 is still decoded and answered.
# AddPartitionsToTxn likewise up to v3, the clients' versions: v4 (the brokers' batched form, KIP-890) names Kafka
# 3.6 to kafka-python. v4-v5 are still decoded and answered.
# DescribeClientQuotas and AlterClientQuotas are not advertised at all: kafka-python takes DescribeClientQuotas v0
# for Kafka 2.6 (and would send that release's Metadata v9). Both are decoded and answered (sparklog's admin client
# and `sparklog configs` send them unasked).
LIST_OFFSETS_ADVERTISED_MAX = 9  # v10 names Kafka 4.0 to kafka-python (above)
# ListOffsets v0 (the legacy answer at segment boundaries) is decoded and answered, not advertised: sarama sends it
# to any broker for an OffsetRequest built without a version (Burrow 1.2's end offsets), and Kafka 4.0 (KIP-896)
# no longer advertises it, so a client that reads ApiVersions never picks it.
LIST_OFFSETS_ADVERTISED_MIN = 1
ADD_PARTITIONS_TO_TXN_ADVERTISED_MAX = add_partitions_to_txn.FIRST_BROKER_VERSION - 1
# The ACL APIs likewise up to v1 (Kafka 2.0's, what librdkafka and kafka-python send): their v2-v3 name Kafka 2.5+
# to kafka-python. v2-v3 are still decoded and answered.
ACLS_ADVERTISED_MAX = 1
# AlterPartitionReassignments up to v0 (Kafka 2.4's, with ListPartitionReassignments v0): v1 (KIP-860) names Kafka 4.0
# to kafka-python. v1 is still decoded and answered.
ALTER_PARTITION_REASSIGNMENTS_ADVERTISED_MAX = 0
# Fetch v12-v16 (the flexible versions: topic ids, diverging epochs, leader hints) and Produce v9-v11 name Kafka 3.8
# to kafka-python, and a client pinned to any release up to 3.8 sends that release's group APIs (JoinGroup v9,
# SyncGroup v5, Heartbeat v4, LeaveGroup v5, OffsetCommit v9, OffsetFetch v9, FindCoordinator v5, DescribeGroups
# v5, ListGroups v5, DeleteGroups v2), its transaction APIs (InitProducerId v5, TxnOffsetCommit v4) and Produce
# v11: all served (test_registry's release-inference test holds this line).
# Produce is advertised as far as its one-partition fast path and grouped appends read (dispatch.py Rules 4 and 5;
# produce.decode_single_partition and its compiled twin): a version past it would send every one-partition
# produce of its clients to the general path (test_broker_interop's grouped-produce test: 0 grouped).
PRODUCE_ADVERTISED_MAX = produce.FAST_PATH_VERSIONS[1]  # follows the fast path: v11
UNADVERTISED = (ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS)
API_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    **{key: versions for key, versions in ALL_VERSIONS.items() if key not in UNADVERTISED},
    ApiKey.LIST_OFFSETS: (LIST_OFFSETS_ADVERTISED_MIN, LIST_OFFSETS_ADVERTISED_MAX),
    ApiKey.PRODUCE: (ALL_VERSIONS[ApiKey.PRODUCE][0], PRODUCE_ADVERTISED_MAX),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, ADD_PARTITIONS_TO_TXN_ADVERTISED_MAX),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, ALTER_PARTITION_REASSIGNMENTS_ADVERTISED_MAX),
    **{key: (0, ACLS_ADVERTISED_MAX) for key in (ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS)}}

_SIZE = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
_I16 = struct.Struct(">h")
_DECODE_ERRORS = (struct.error, ValueError, IndexError, OverflowError, MemoryError)
_ENCODE_ERRORS = (struct.error, ValueError, TypeError, AttributeError, OverflowError)


ANONYMOUS = "User:ANONYMOUS"  # Kafka's KafkaPrincipal.ANONYMOUS: a connection that has not authenticated


class Request:
    """A decoded request: ``header`` (a RequestHeader) and ``body`` (an instance of REQUESTS[api_key]).
    ``client_host`` is the sender's address as Kafka writes it ("/127.0.0.1"), when the caller knows it: the
    group coordinator reports it for each member. ``principal`` is who the connection authenticated as, in
    Kafka's `KafkaPrincipal` form ("User:alice"; "User:ANONYMOUS" before or without authentication), and
    ``listener`` the name of the listener the connection came in on ("" when the caller has none): the
    authorizer and the quota manager read them."""

    __slots__ = ("header", "body", "client_host", "principal", "listener")

    def __init__(self, header: RequestHeader, body: Message, client_host: str = "",
                 principal: str = ANONYMOUS, listener: str = ""):
        self.header = header
        self.body = body
        self.client_host = client_host
        self.principal = principal
        self.listener = listener

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    def __repr__(self) -> str:
        return f"Request({self.header!r}, {self.body!r})"


# (api_key, version) -> (flexible, decoder) / (header is v1, class, encoder), filled on first use
_EncoderEntry = tuple[bool, type[Message], Encoder]
_REQUEST_DECODERS: dict[tuple[int, int], tuple[bool, Decoder]] = {}
_RESPONSE_ENCODERS: dict[tuple[int, int], _EncoderEntry] = {}
_REQUEST_ENCODERS: dict[tuple[int, int], _EncoderEntry] = {}
_RESPONSE_DECODERS: dict[tuple[int, int], tuple[bool, Decoder]] = {}


def _message(table: dict[int, type[Message]], api_key: int, api_version: int) -> type[Message] | None:
    cls = table.get(api_key) if isinstance(api_key, int) else None
    if cls is None or not cls.min_version <= api_version <= cls.max_version:
        return None
    return cls


def _response_header_flexible(cls: type[Message], version: int) -> bool:
    return cls.is_flexible(version) and cls.api_key != ApiKey.API_VERSIONS


# ---- broker side


def decode_request(frame: BytesLike) -> Request:
    """Decode a request frame (the bytes after the size prefix; bytes or memoryview).

    ``records`` fields of the body are memoryview slices of ``frame``: keep the frame alive (it is,
    through them) and do not mutate it while they are in use."""
    buf = frame if type(frame) is memoryview else memoryview(frame)
    if buf.format != "B":
        buf = buf.cast("B")
    end = len(buf)
    if end < REQUEST_HEADER_PREFIX.size:
        raise MalformedRequest(f"request of {end} bytes is shorter than a request header")
    api_key, api_version, correlation_id = REQUEST_HEADER_PREFIX.unpack_from(buf, 0)
    entry = _REQUEST_DECODERS.get((api_key, api_version))
    if entry is None:
        cls = _message(REQUESTS, api_key, api_version)
        if cls is None:
            raise UnsupportedVersion(api_key, api_version, correlation_id)
        entry = _REQUEST_DECODERS[(api_key, api_version)] = (cls.is_flexible(api_version),
                                                             cls.decoder(api_version))
    flexible, decode = entry
    header = None
    try:
        client_id, pos = decode_client_id(buf, REQUEST_HEADER_PREFIX.size, end)
        header = RequestHeader(api_key, api_version, correlation_id, client_id, flexible)
        if flexible:
            pos = skip_tagged_fields(buf, pos, end)
        body, _ = decode(buf, pos, end)
    except _DECODE_ERRORS as exc:
        raise MalformedRequest(f"malformed request api_key={api_key} api_version={api_version}: {exc}",
                               header) from exc
    return Request(header, body)


def encode_response(request_header: RequestHeader, body: Message) -> list[Any]:
    """Encode the response to a request: a list of chunks to write in order, the first starting with the
    4-byte size prefix, which counts every chunk.

    A chunk is a ``bytearray``, or a ``records`` value given in ``body`` and passed through uncopied:
    bytes or memoryview over INLINE_RECORDS_MAX, or any object with ``__len__`` (a storage FileSlice),
    which the caller writes itself (``os.sendfile``)."""
    key = (request_header.api_key, request_header.api_version)
    entry = _RESPONSE_ENCODERS.get(key)
    if entry is None:
        entry = _RESPONSE_ENCODERS[key] = _encoder_entry(RESPONSES, *key)
    flexible_header, cls, encode = entry
    if type(body) is not cls:
        raise LocalProtocolError(f"response body must be {cls.__name__}, not {type(body).__name__}")
    if cls.api_key == ApiKey.API_VERSIONS and body.error_code and request_header.api_version:
        encode = cls.encoder(0)  # Rule 3
    b = bytearray(_SIZE_AND_CORRELATION.pack(0, request_header.correlation_id))
    if flexible_header:
        b += b"\x00"
    chunks: list[Any] = []
    try:
        b = encode(body, b, chunks)
        chunks.append(b)
        _SIZE.pack_into(chunks[0], 0, sum(map(len, chunks)) - 4)
    except _ENCODE_ERRORS as exc:
        raise LocalProtocolError(f"cannot encode {cls.__name__} v{key[1]}: {exc}") from exc
    return chunks


def _encoder_entry(table: dict[int, type[Message]], api_key: int, api_version: int) -> _EncoderEntry:
    cls = _message(table, api_key, api_version)
    if cls is None:
        raise LocalProtocolError(f"no such api_key={api_key} api_version={api_version}")
    return _response_header_flexible(cls, api_version), cls, cls.encoder(api_version)


def advertised_api_versions() -> list[Any]:
    """``API_VERSIONS`` as the ``api_keys`` of an ApiVersionsResponse."""
    return [api_versions.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
            for k, (lo, hi) in API_VERSIONS.items()]


def encode_api_versions_fallback(correlation_id: int, error_code: int = UNSUPPORTED_VERSION) -> bytes:
    """The answer to an ApiVersions request of a version we do not serve (Kafka's broker does the same):
    response header v0, then a v0 body with ``error_code`` (35, UNSUPPORTED_VERSION) and one api key,
    ApiVersions itself with our version range, from which the client picks a version and retries.
    Never close the connection instead: that is how clients newer than the broker find its versions."""
    lo, hi = API_VERSIONS[ApiKey.API_VERSIONS]
    body = api_versions.ApiVersionsResponse(
        error_code=error_code,
        api_keys=[api_versions.ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=lo, max_version=hi)])
    b = bytearray(_SIZE_AND_CORRELATION.pack(0, correlation_id))
    b = api_versions.ApiVersionsResponse.encoder(0)(body, b, [])
    _SIZE.pack_into(b, 0, len(b) - 4)
    return bytes(b)


# ---- client side


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Message) -> bytes:
    """A whole request frame, size prefix included. ``records`` must be bytes-like here."""
    key = (api_key, api_version)
    entry = _REQUEST_ENCODERS.get(key)
    if entry is None:
        cls = _message(REQUESTS, api_key, api_version)
        if cls is None:
            raise LocalProtocolError(f"no such api_key={api_key} api_version={api_version}")
        entry = _REQUEST_ENCODERS[key] = (cls.is_flexible(api_version), cls, cls.encoder(api_version))
    flexible, cls, encode = entry
    if type(body) is not cls:
        raise LocalProtocolError(f"request body must be {cls.__name__}, not {type(body).__name__}")
    chunks: list[Any] = []
    try:
        b = bytearray(4)
        b += encode_request_header(api_key, api_version, correlation_id, client_id, flexible)
        b = encode(body, b, chunks)
        chunks.append(b)
        _SIZE.pack_into(chunks[0], 0, sum(map(len, chunks)) - 4)
        return b"".join(chunks)
    except _ENCODE_ERRORS as exc:
        raise LocalProtocolError(f"cannot encode {cls.__name__} v{api_version}: {exc}") from exc


def decode_response(api_key: int, api_version: int, frame: BytesLike) -> tuple[int, Message]:
    """Decode a response frame (after the size prefix) to the request we sent as (api_key, api_version):
    returns (correlation_id, body). The caller matches the correlation id to its in-flight request."""
    key = (api_key, api_version)
    entry = _RESPONSE_DECODERS.get(key)
    if entry is None:
        cls = _message(RESPONSES, api_key, api_version)
        if cls is None:
            raise LocalProtocolError(f"no such api_key={api_key} api_version={api_version}")
        entry = _RESPONSE_DECODERS[key] = (_response_header_flexible(cls, api_version), cls.decoder(api_version))
    flexible_header, decode = entry
    buf = frame if type(frame) is memoryview else memoryview(frame)
    if buf.format != "B":
        buf = buf.cast("B")
    end = len(buf)
    try:
        (correlation_id,) = _SIZE.unpack_from(buf, 0)
        pos = skip_tagged_fields(buf, 4, end) if flexible_header else 4
        if api_key == ApiKey.API_VERSIONS and api_version and _I16.unpack_from(buf, pos)[0]:
            decode = RESPONSES[ApiKey.API_VERSIONS].decoder(0)  # Rule 3
        body, _ = decode(buf, pos, end)
    except _DECODE_ERRORS as exc:
        raise MalformedResponse(f"malformed response api_key={api_key} api_version={api_version}: {exc}") from exc
    return correlation_id, body
