"""The Kafka wire protocol, sans-IO: bytes in, typed requests and responses out.

No sockets, threads or clocks. The main API, re-exported here:

* framing: ``FrameDecoder``, ``NEED_DATA``, ``CLOSED`` (frame.py);
* broker side: ``decode_request``, ``encode_response``, ``encode_api_versions_fallback``;
* client side: ``encode_request``, ``decode_response`` (registry.py);
* ``ApiKey``, ``API_VERSIONS`` (advertised), ``ALL_VERSIONS`` (decoded), ``REQUESTS``/``RESPONSES``;
* message classes, one module per api (produce.py, fetch.py, ...);
* errors: ``RemoteProtocolError``/``LocalProtocolError`` and one class per Kafka error code (errors.py).

Broker::

    request = decode_request(frame)                  # Request(header, body)
    if request.api_key == ApiKey.PRODUCE:
        for topic in request.body.topic_data:
            for part in topic.partition_data:
                log.append(part.records)             # memoryview of the frame
    chunks = encode_response(request.header, ProduceResponse(responses=[...]))

Client::

    sock.sendall(encode_request(ApiKey.METADATA, 8, 1, "me", MetadataRequest(topics=None)))
    correlation_id, body = decode_response(ApiKey.METADATA, 8, frame)
"""

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse
from sparklog.protocol.create_topics import (CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
                                            CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse)
from sparklog.protocol.delete_topics import DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse
from sparklog.protocol.errors import (FrameTooLarge, KafkaError, LocalProtocolError, MalformedRequest,
                                     MalformedResponse, ProtocolError, RemoteProtocolError, UnsupportedVersion,
                                     for_code)
from sparklog.protocol.fetch import (AbortedTransaction, FetchableTopicResponse, FetchPartition, FetchRequest,
                                    FetchResponse, FetchTopic, ForgottenTopic, PartitionData)
from sparklog.protocol.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from sparklog.protocol.frame import CLOSED, DEFAULT_MAX_FRAME_BYTES, NEED_DATA, FrameDecoder
from sparklog.protocol.groups import (HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
                                     LeaveGroupRequest, LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse)
from sparklog.protocol.headers import RequestHeader
from sparklog.protocol.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from sparklog.protocol.list_offsets import (ListOffsetsPartition, ListOffsetsPartitionResponse,
                                           ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopic,
                                           ListOffsetsTopicResponse)
from sparklog.protocol.metadata import (MetadataRequest, MetadataRequestTopic, MetadataResponse,
                                       MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic)
from sparklog.protocol.offset_commit import (OffsetCommitRequest, OffsetCommitRequestPartition,
                                            OffsetCommitRequestTopic, OffsetCommitResponse,
                                            OffsetCommitResponsePartition, OffsetCommitResponseTopic)
from sparklog.protocol.offset_fetch import (OffsetFetchRequest, OffsetFetchRequestTopic, OffsetFetchResponse,
                                           OffsetFetchResponsePartition, OffsetFetchResponseTopic)
from sparklog.protocol.produce import (BatchIndexAndErrorMessage, PartitionProduceData, PartitionProduceResponse,
                                      ProduceRequest, ProduceResponse, TopicProduceData, TopicProduceResponse)
from sparklog.protocol.registry import (ALL_VERSIONS, API_VERSIONS, REQUESTS, RESPONSES, Request,
                                       advertised_api_versions, decode_request, decode_response,
                                       encode_api_versions_fallback, encode_request, encode_response)

__all__ = [name for name in dir() if not name.startswith("_")]
