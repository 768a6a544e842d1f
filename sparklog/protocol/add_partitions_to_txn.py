"""AddPartitionsToTxn (key 24), versions 0-5, flexible from 3. Transcribed from Kafka's
AddPartitionsToTxnRequest.json and AddPartitionsToTxnResponse.json (KIP-98, KIP-890).

A producer names the partitions it is about to write in its transaction before it writes them, so the
coordinator knows where its markers go. By version: v1 is v0 (throttling on quota violation); v2 allows
PRODUCER_FENCED; v3 is flexible; v4 is the brokers' batched form (KIP-890 part 1: a partition leader asks the
coordinator, with ``verify_only``, whether a partition is in a transaction; the v3-and-below fields are gone and
the response has a top-level error code); v5 allows TRANSACTION_ABORTABLE. Clients send v0-v3.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["AddPartitionsToTxnRequest", "AddPartitionsToTxnResponse", "AddPartitionsToTxnTransaction",
           "AddPartitionsToTxnTopic", "AddPartitionsToTxnResult", "AddPartitionsToTxnTopicResult",
           "AddPartitionsToTxnPartitionResult", "TransactionTopic", "TransactionTopicResult",
           "TransactionPartitionResult", "FIRST_BROKER_VERSION"]

FIRST_BROKER_VERSION = 4  # v4+: the batched, broker-to-broker form


def _topic(versions: str) -> F:
    return F("topics" if versions == "4+" else "v3_and_below_topics", "[]AddPartitionsToTxnTopic", versions,
             fields=[F("name", "string", "0+"), F("partitions", "[]int32", "0+")])


AddPartitionsToTxnRequest = message("AddPartitionsToTxnRequest", api_key=ApiKey.ADD_PARTITIONS_TO_TXN,
                                    versions="0-5", flexible="3+", module=__name__, fields=[
    F("transactions", "[]AddPartitionsToTxnTransaction", "4+", fields=[
        F("transactional_id", "string", "4+"),
        F("producer_id", "int64", "4+"),
        F("producer_epoch", "int16", "4+"),
        F("verify_only", "bool", "4+", default=False),
        _topic("4+"),
    ]),
    F("v3_and_below_transactional_id", "string", "0-3", default=""),
    F("v3_and_below_producer_id", "int64", "0-3", default=-1),
    F("v3_and_below_producer_epoch", "int16", "0-3", default=-1),
    _topic("0-3"),
])


def _topic_results(name: str, versions: str) -> F:
    return F(name, "[]AddPartitionsToTxnTopicResult", versions, fields=[
        F("name", "string", "0+"),
        F("results_by_partition", "[]AddPartitionsToTxnPartitionResult", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("partition_error_code", "int16", "0+"),
        ]),
    ])


AddPartitionsToTxnResponse = message("AddPartitionsToTxnResponse", api_key=ApiKey.ADD_PARTITIONS_TO_TXN,
                                     versions="0-5", flexible="3+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "4+", default=0),
    F("results_by_transaction", "[]AddPartitionsToTxnResult", "4+", fields=[
        F("transactional_id", "string", "4+"),
        _topic_results("topic_results", "4+"),
    ]),
    _topic_results("results_by_topic_v3_and_below", "0-3"),
])

AddPartitionsToTxnTransaction = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
AddPartitionsToTxnTopic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic  # of v0-3
# The spec's common struct, declared twice (here one class per declaration): this one is of v4+.
TransactionTopic = AddPartitionsToTxnTransaction.AddPartitionsToTxnTopic
AddPartitionsToTxnResult = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
AddPartitionsToTxnTopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult  # of v0-3
AddPartitionsToTxnPartitionResult = AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult  # of v0-3
TransactionTopicResult = AddPartitionsToTxnResult.AddPartitionsToTxnTopicResult  # of v4+
TransactionPartitionResult = TransactionTopicResult.AddPartitionsToTxnPartitionResult  # of v4+
