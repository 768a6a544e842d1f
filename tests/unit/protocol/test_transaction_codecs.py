"""The transaction apis' codecs against bytes written out by hand from Kafka's message specs: decoded whole, with
trailing bytes (ignored, registry Rule 1) and cut at every byte (always MalformedRequest/Response)."""

from __future__ import annotations

import pytest

from sparklog.protocol import ApiKey, RequestHeader, decode_request, decode_response, encode_request, encode_response
from sparklog.protocol.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from sparklog.protocol.add_partitions_to_txn import (AddPartitionsToTxnPartitionResult, AddPartitionsToTxnRequest,
                                                     AddPartitionsToTxnResponse, AddPartitionsToTxnTopic,
                                                     AddPartitionsToTxnTopicResult, AddPartitionsToTxnTransaction,
                                                     TransactionTopic)
from sparklog.protocol.describe_transactions import (DescribedTransaction, DescribedTransactionTopic,
                                                     DescribeTransactionsRequest, DescribeTransactionsResponse)
from sparklog.protocol.end_txn import EndTxnRequest, EndTxnResponse
from sparklog.protocol.errors import MalformedRequest, MalformedResponse
from sparklog.protocol.list_transactions import ListedTransaction, ListTransactionsRequest, ListTransactionsResponse
from sparklog.protocol.txn_offset_commit import (TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition,
                                                 TxnOffsetCommitRequestTopic)
from sparklog.protocol.write_txn_markers import (WritableTxnMarker, WritableTxnMarkerPartitionResult,
                                                 WritableTxnMarkerResult, WritableTxnMarkerTopic,
                                                 WritableTxnMarkerTopicResult, WriteTxnMarkersRequest,
                                                 WriteTxnMarkersResponse)
from unit.protocol.test_admin_codecs import request_bytes

PID = b"\x00\x00\x00\x00\x00\x00\x03\xe8"  # producer id 1000
EPOCH = b"\x00\x02"  # producer epoch 2


REQUESTS = [
    pytest.param(ApiKey.ADD_PARTITIONS_TO_TXN, 0, False, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=1000, v3_and_below_producer_epoch=2,
        v3_and_below_topics=[AddPartitionsToTxnTopic(name="t", partitions=[0, 2])]),
        b"\x00\x02tx" + PID + EPOCH + b"\x00\x00\x00\x01" b"\x00\x01t" b"\x00\x00\x00\x02"
        b"\x00\x00\x00\x00" b"\x00\x00\x00\x02", id="AddPartitionsToTxn-v0"),
    pytest.param(ApiKey.ADD_PARTITIONS_TO_TXN, 3, True, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=1000, v3_and_below_producer_epoch=2,
        v3_and_below_topics=[AddPartitionsToTxnTopic(name="t", partitions=[1])]),
        b"\x03tx" + PID + EPOCH + b"\x02" b"\x02t" b"\x02\x00\x00\x00\x01" b"\x00" b"\x00",
        id="AddPartitionsToTxn-v3"),
    pytest.param(ApiKey.ADD_PARTITIONS_TO_TXN, 4, True, AddPartitionsToTxnRequest(transactions=[
        AddPartitionsToTxnTransaction(transactional_id="tx", producer_id=1000, producer_epoch=2, verify_only=True,
                                      topics=[TransactionTopic(name="t", partitions=[1])])]),
        b"\x02" b"\x03tx" + PID + EPOCH + b"\x01" b"\x02" b"\x02t" b"\x02\x00\x00\x00\x01" b"\x00" b"\x00" b"\x00",
        id="AddPartitionsToTxn-v4"),
    pytest.param(ApiKey.ADD_OFFSETS_TO_TXN, 0, False, AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=1000, producer_epoch=2, group_id="g"),
        b"\x00\x02tx" + PID + EPOCH + b"\x00\x01g", id="AddOffsetsToTxn-v0"),
    pytest.param(ApiKey.END_TXN, 3, True, EndTxnRequest(
        transactional_id="tx", producer_id=1000, producer_epoch=2, committed=True),
        b"\x03tx" + PID + EPOCH + b"\x01" b"\x00", id="EndTxn-v3"),
    pytest.param(ApiKey.WRITE_TXN_MARKERS, 1, True, WriteTxnMarkersRequest(markers=[WritableTxnMarker(
        producer_id=1000, producer_epoch=2, transaction_result=False, coordinator_epoch=5,
        topics=[WritableTxnMarkerTopic(name="t", partition_indexes=[0])])]),
        b"\x02" + PID + EPOCH + b"\x00" b"\x02" b"\x02t" b"\x02\x00\x00\x00\x00" b"\x00"  # marker, its topic
        b"\x00\x00\x00\x05" b"\x00" b"\x00", id="WriteTxnMarkers-v1"),  # coordinator epoch, tags x2
    pytest.param(ApiKey.TXN_OFFSET_COMMIT, 3, True, TxnOffsetCommitRequest(
        transactional_id="tx", group_id="g", producer_id=1000, producer_epoch=2, generation_id=4, member_id="m",
        group_instance_id=None, topics=[TxnOffsetCommitRequestTopic(name="t", partitions=[
            TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=9, committed_leader_epoch=-1,
                                            committed_metadata=None)])]),
        b"\x03tx" b"\x02g" + PID + EPOCH + b"\x00\x00\x00\x04" b"\x02m" b"\x00"  # generation, member, null id
        b"\x02" b"\x02t" b"\x02" b"\x00\x00\x00\x00" b"\x00\x00\x00\x00\x00\x00\x00\x09" b"\xff\xff\xff\xff"
        b"\x00" b"\x00" b"\x00" b"\x00", id="TxnOffsetCommit-v3"),  # null metadata, tags: partition, topic, body
    pytest.param(ApiKey.TXN_OFFSET_COMMIT, 0, False, TxnOffsetCommitRequest(
        transactional_id="tx", group_id="g", producer_id=1000, producer_epoch=2, topics=[
            TxnOffsetCommitRequestTopic(name="t", partitions=[TxnOffsetCommitRequestPartition(
                partition_index=1, committed_offset=9, committed_metadata="md")])]),
        b"\x00\x02tx" b"\x00\x01g" + PID + EPOCH + b"\x00\x00\x00\x01" b"\x00\x01t" b"\x00\x00\x00\x01"
        b"\x00\x00\x00\x01" b"\x00\x00\x00\x00\x00\x00\x00\x09" b"\x00\x02md", id="TxnOffsetCommit-v0"),
    pytest.param(ApiKey.DESCRIBE_TRANSACTIONS, 0, True, DescribeTransactionsRequest(transactional_ids=["a", "b"]),
                 b"\x03" b"\x02a" b"\x02b" b"\x00", id="DescribeTransactions-v0"),
    pytest.param(ApiKey.LIST_TRANSACTIONS, 1, True, ListTransactionsRequest(
        state_filters=["Ongoing"], producer_id_filters=[1000], duration_filter=60000),
        b"\x02" b"\x08Ongoing" b"\x02" + PID + b"\x00\x00\x00\x00\x00\x00\xea\x60" b"\x00",
        id="ListTransactions-v1"),
]


@pytest.mark.parametrize("key, version, flexible, body, raw", REQUESTS)
def test_transaction_requests_match_the_spec_bytes(key, version, flexible, body, raw):
    frame = request_bytes(key, version, flexible, raw)
    assert encode_request(key, version, 7, "c", body)[4:] == frame
    assert decode_request(frame).body == body
    assert decode_request(frame + b"\x00\x01trailing").body == body
    for cut in range(len(frame)):
        with pytest.raises(MalformedRequest):
            decode_request(frame[:cut])


CORRELATION = b"\x00\x00\x00\x07"
RESPONSES = [
    pytest.param(ApiKey.ADD_PARTITIONS_TO_TXN, 2, AddPartitionsToTxnResponse(
        throttle_time_ms=0, results_by_topic_v3_and_below=[AddPartitionsToTxnTopicResult(
            name="t", results_by_partition=[AddPartitionsToTxnPartitionResult(partition_index=0,
                                                                              partition_error_code=51)])]),
        CORRELATION + b"\x00\x00\x00\x00" b"\x00\x00\x00\x01" b"\x00\x01t" b"\x00\x00\x00\x01"
        b"\x00\x00\x00\x00" b"\x00\x33", id="AddPartitionsToTxn-v2"),  # CONCURRENT_TRANSACTIONS
    pytest.param(ApiKey.ADD_OFFSETS_TO_TXN, 3, AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=90),
                 CORRELATION + b"\x00" b"\x00\x00\x00\x00" b"\x00\x5a" b"\x00", id="AddOffsetsToTxn-v3"),
    pytest.param(ApiKey.END_TXN, 1, EndTxnResponse(throttle_time_ms=0, error_code=47),
                 CORRELATION + b"\x00\x00\x00\x00" b"\x00\x2f", id="EndTxn-v1"),
    pytest.param(ApiKey.WRITE_TXN_MARKERS, 1, WriteTxnMarkersResponse(markers=[WritableTxnMarkerResult(
        producer_id=1000, topics=[WritableTxnMarkerTopicResult(name="t", partitions=[
            WritableTxnMarkerPartitionResult(partition_index=0, error_code=0)])])]),
        CORRELATION + b"\x00" b"\x02" + PID + b"\x02" b"\x02t" b"\x02" b"\x00\x00\x00\x00" b"\x00\x00"
        b"\x00" b"\x00" b"\x00" b"\x00", id="WriteTxnMarkers-v1"),
    pytest.param(ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=[
        DescribedTransaction(error_code=0, transactional_id="tx", transaction_state="Ongoing",
                             transaction_timeout_ms=60000, transaction_start_time_ms=5, producer_id=1000,
                             producer_epoch=2, topics=[DescribedTransactionTopic(topic="t", partitions=[3])])]),
        CORRELATION + b"\x00" b"\x00\x00\x00\x00" b"\x02" b"\x00\x00" b"\x03tx" b"\x08Ongoing" b"\x00\x00\xea\x60"
        b"\x00\x00\x00\x00\x00\x00\x00\x05" + PID + EPOCH + b"\x02" b"\x02t" b"\x02\x00\x00\x00\x03"
        b"\x00" b"\x00" b"\x00", id="DescribeTransactions-v0"),
    pytest.param(ApiKey.LIST_TRANSACTIONS, 0, ListTransactionsResponse(
        throttle_time_ms=0, error_code=0, unknown_state_filters=["Bogus"], transaction_states=[
            ListedTransaction(transactional_id="tx", producer_id=1000, transaction_state="Empty")]),
        CORRELATION + b"\x00" b"\x00\x00\x00\x00" b"\x00\x00" b"\x02\x06Bogus" b"\x02" b"\x03tx" + PID +
        b"\x06Empty" b"\x00" b"\x00", id="ListTransactions-v0"),
]


@pytest.mark.parametrize("key, version, body, raw", RESPONSES)
def test_transaction_responses_match_the_spec_bytes(key, version, body, raw):
    chunks = encode_response(RequestHeader(key, version, 7, "c"), body)
    assert b"".join(bytes(c) for c in chunks)[4:] == raw
    assert decode_response(key, version, raw) == (7, body)
    assert decode_response(key, version, raw + b"\x00\x00") == (7, body)
    for cut in range(len(raw)):
        with pytest.raises(MalformedResponse):
            decode_response(key, version, raw[:cut])


def test_add_partitions_v4_has_no_v3_fields_and_v3_has_no_transactions():
    """The two halves of the spec are exclusive by version: v3 ignores `transactions`, v4 the v3 fields."""
    body = AddPartitionsToTxnRequest(
        transactions=[AddPartitionsToTxnTransaction(transactional_id="x", producer_id=1, producer_epoch=0)],
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=1000, v3_and_below_producer_epoch=2)
    v3 = decode_request(encode_request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, 1, "c", body)[4:]).body
    v4 = decode_request(encode_request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, 1, "c", body)[4:]).body
    assert (v3.transactions, v3.v3_and_below_transactional_id) == ([], "tx")
    assert (len(v4.transactions), v4.v3_and_below_transactional_id) == (1, "")
