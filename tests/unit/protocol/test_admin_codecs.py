"""The admin apis' codecs against bytes written out by hand from Kafka's message specs: decoded whole, with
trailing bytes (ignored, registry Rule 1) and cut at every byte (always MalformedRequest/Response)."""

from __future__ import annotations

import pytest

from sparklog.protocol import ApiKey, RequestHeader, decode_request, decode_response, encode_request, encode_response
from sparklog.protocol.create_partitions import CreatePartitionsRequest, CreatePartitionsTopic
from sparklog.protocol.delete_records import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from sparklog.protocol.describe_cluster import DescribeClusterBroker, DescribeClusterResponse
from sparklog.protocol.describe_configs import (DescribeConfigsResource, DescribeConfigsResourceResult,
                                               DescribeConfigsResponse, DescribeConfigsResult, DescribeConfigsRequest)
from sparklog.protocol.errors import MalformedRequest, MalformedResponse
from sparklog.protocol.incremental_alter_configs import (IncrementalAlterableConfig, IncrementalAlterConfigsRequest,
                                                         IncrementalAlterConfigsResource)
from sparklog.protocol.list_offsets import (ListOffsetsPartition, ListOffsetsPartitionResponse, ListOffsetsRequest,
                                           ListOffsetsResponse, ListOffsetsTopic, ListOffsetsTopicResponse)
from sparklog.protocol.offset_delete import (OffsetDeleteRequest, OffsetDeleteRequestPartition,
                                             OffsetDeleteRequestTopic, OffsetDeleteResponse,
                                             OffsetDeleteResponsePartition, OffsetDeleteResponseTopic)

HEADER_V1 = b"\x00\x07\x00\x01c"  # correlation id 7, client id "c"
HEADER_V2 = HEADER_V1 + b"\x00"  # + tagged fields


def request_bytes(api_key: int, version: int, flexible: bool, body: bytes) -> bytes:
    return api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\x00\x00" + \
        (HEADER_V2 if flexible else HEADER_V1) + body


REQUESTS = [
    pytest.param(ApiKey.DESCRIBE_CONFIGS, 1, False, DescribeConfigsRequest(resources=[DescribeConfigsResource(
        resource_type=2, resource_name="t", configuration_keys=None)], include_synonyms=True),
        b"\x00\x00\x00\x01" b"\x02" b"\x00\x01t" b"\xff\xff\xff\xff" b"\x01", id="DescribeConfigs-v1"),
    pytest.param(ApiKey.DESCRIBE_CONFIGS, 4, True, DescribeConfigsRequest(resources=[DescribeConfigsResource(
        resource_type=4, resource_name="1", configuration_keys=["a"])], include_synonyms=False,
        include_documentation=True),
        b"\x02" b"\x04" b"\x021" b"\x02\x02a" b"\x00" b"\x00" b"\x01" b"\x00", id="DescribeConfigs-v4"),
    pytest.param(ApiKey.DELETE_RECORDS, 2, True, DeleteRecordsRequest(topics=[DeleteRecordsTopic(name="t", partitions=[
        DeleteRecordsPartition(partition_index=0, offset=5)])], timeout_ms=1000),
        b"\x02" b"\x02t" b"\x02" b"\x00\x00\x00\x00" b"\x00\x00\x00\x00\x00\x00\x00\x05" b"\x00" b"\x00"
        b"\x00\x00\x03\xe8" b"\x00", id="DeleteRecords-v2"),
    pytest.param(ApiKey.CREATE_PARTITIONS, 1, False, CreatePartitionsRequest(topics=[CreatePartitionsTopic(
        name="t", count=3, assignments=None)], timeout_ms=1000, validate_only=True),
        b"\x00\x00\x00\x01" b"\x00\x01t" b"\x00\x00\x00\x03" b"\xff\xff\xff\xff" b"\x00\x00\x03\xe8" b"\x01",
        id="CreatePartitions-v1"),
    pytest.param(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, False, IncrementalAlterConfigsRequest(resources=[
        IncrementalAlterConfigsResource(resource_type=2, resource_name="t", configs=[
            IncrementalAlterableConfig(name="k", config_operation=1, value=None)])], validate_only=False),
        b"\x00\x00\x00\x01" b"\x02" b"\x00\x01t" b"\x00\x00\x00\x01" b"\x00\x01k" b"\x01" b"\xff\xff" b"\x00",
        id="IncrementalAlterConfigs-v0"),
    pytest.param(ApiKey.OFFSET_DELETE, 0, False, OffsetDeleteRequest(group_id="g", topics=[OffsetDeleteRequestTopic(
        name="t", partitions=[OffsetDeleteRequestPartition(partition_index=3)])]),
        b"\x00\x01g" b"\x00\x00\x00\x01" b"\x00\x01t" b"\x00\x00\x00\x01" b"\x00\x00\x00\x03", id="OffsetDelete-v0"),
    pytest.param(ApiKey.LIST_OFFSETS, 10, True, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsTopic(name="t", partitions=[ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                    timestamp=-4)])], timeout_ms=1000),
        b"\xff\xff\xff\xff" b"\x00" b"\x02" b"\x02t" b"\x02" b"\x00\x00\x00\x00" b"\xff\xff\xff\xff"  # replica, iso, topics
        b"\xff\xff\xff\xff\xff\xff\xff\xfc" b"\x00" b"\x00" b"\x00\x00\x03\xe8" b"\x00",  # -4, tags, timeout_ms, tags
        id="ListOffsets-v10"),
]


@pytest.mark.parametrize("key, version, flexible, body, raw", REQUESTS)
def test_admin_requests_match_the_spec_bytes(key, version, flexible, body, raw):
    frame = request_bytes(key, version, flexible, raw)
    assert encode_request(key, version, 7, "c", body)[4:] == frame
    assert decode_request(frame).body == body
    assert decode_request(frame + b"\x00\x01trailing").body == body
    for cut in range(len(frame)):
        with pytest.raises(MalformedRequest):
            decode_request(frame[:cut])


DESCRIBE_CLUSTER_V0 = (
    b"\x00\x00\x00\x07" b"\x00"  # correlation id, response header v1 tags
    b"\x00\x00\x00\x00" b"\x00\x00" b"\x00" b"\x02c" b"\x00\x00\x00\x01"  # throttle, error, null message, id, ctrl
    b"\x02" b"\x00\x00\x00\x01" b"\x02h" b"\x00\x00\x23\x84" b"\x00" b"\x00"  # one broker: id, host, port, rack
    b"\x80\x00\x00\x00" b"\x00"  # cluster_authorized_operations omitted, tags
)
DESCRIBE_CONFIGS_V1 = (
    b"\x00\x00\x00\x07" b"\x00\x00\x00\x00" b"\x00\x00\x00\x01"  # correlation id, throttle, one result
    b"\x00\x00" b"\xff\xff" b"\x02" b"\x00\x01t" b"\x00\x00\x00\x01"  # error, null message, type, name, 1 config
    b"\x00\x01k" b"\x00\x01v" b"\x00" b"\x05" b"\x00" b"\x00\x00\x00\x00"  # name, value, ro, source, sensitive, syn
)
OFFSET_DELETE_V0 = (
    b"\x00\x00\x00\x07" b"\x00\x00" b"\x00\x00\x00\x00"  # correlation id, error, throttle
    b"\x00\x00\x00\x01" b"\x00\x01t" b"\x00\x00\x00\x01" b"\x00\x00\x00\x03" b"\x00\x56"  # t-3: GROUP_SUBSCRIBED_TO_TOPIC
)
LIST_OFFSETS_V8 = (
    b"\x00\x00\x00\x07" b"\x00" b"\x00\x00\x00\x00" b"\x02" b"\x02t" b"\x02"  # header v1, throttle, topics
    b"\x00\x00\x00\x00" b"\x00\x00" b"\xff\xff\xff\xff\xff\xff\xff\xff"  # partition, error, timestamp -1
    b"\x00\x00\x00\x00\x00\x00\x00\x05" b"\x00\x00\x00\x02" b"\x00" b"\x00" b"\x00"  # offset, epoch, tags x3
)
RESPONSES = [
    pytest.param(ApiKey.OFFSET_DELETE, 0, OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=[
        OffsetDeleteResponseTopic(name="t", partitions=[OffsetDeleteResponsePartition(partition_index=3,
                                                                                      error_code=86)])]),
        OFFSET_DELETE_V0, id="OffsetDelete-v0"),
    pytest.param(ApiKey.LIST_OFFSETS, 8, ListOffsetsResponse(throttle_time_ms=0, topics=[ListOffsetsTopicResponse(
        name="t", partitions=[ListOffsetsPartitionResponse(partition_index=0, error_code=0, timestamp=-1, offset=5,
                                                           leader_epoch=2)])]), LIST_OFFSETS_V8, id="ListOffsets-v8"),
    pytest.param(ApiKey.DESCRIBE_CLUSTER, 0, DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, cluster_id="c", controller_id=1,
        brokers=[DescribeClusterBroker(broker_id=1, host="h", port=9092)]), DESCRIBE_CLUSTER_V0,
        id="DescribeCluster-v0"),
    pytest.param(ApiKey.DESCRIBE_CONFIGS, 1, DescribeConfigsResponse(throttle_time_ms=0, results=[
        DescribeConfigsResult(error_code=0, resource_type=2, resource_name="t", configs=[
            DescribeConfigsResourceResult(name="k", value="v", read_only=False, config_source=5,
                                          is_sensitive=False)])]), DESCRIBE_CONFIGS_V1, id="DescribeConfigs-v1"),
]


@pytest.mark.parametrize("key, version, body, raw", RESPONSES)
def test_admin_responses_match_the_spec_bytes(key, version, body, raw):
    chunks = encode_response(RequestHeader(key, version, 7, "c"), body)
    assert b"".join(bytes(c) for c in chunks)[4:] == raw
    assert decode_response(key, version, raw) == (7, body)
    assert decode_response(key, version, raw + b"\x00\x00") == (7, body)
    for cut in range(len(raw)):
        with pytest.raises(MalformedResponse):
            decode_response(key, version, raw[:cut])
