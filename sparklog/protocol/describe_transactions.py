"""DescribeTransactions (key 65), version 0, flexible (KIP-664). Transcribed from Kafka's
DescribeTransactionsRequest.json and DescribeTransactionsResponse.json.

Sent to each transactional id's coordinator: its state (Kafka's names: "Empty", "Ongoing", "PrepareCommit",
...), timeout, start time, producer id and epoch, and the partitions of its transaction (while one is open;
while it completes, those still without a marker).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeTransactionsRequest", "DescribeTransactionsResponse", "DescribedTransaction",
           "DescribedTransactionTopic"]

DescribeTransactionsRequest = message("DescribeTransactionsRequest", api_key=ApiKey.DESCRIBE_TRANSACTIONS,
                                      versions="0", flexible="0+", module=__name__, fields=[
    F("transactional_ids", "[]string", "0+"),
])

DescribeTransactionsResponse = message("DescribeTransactionsResponse", api_key=ApiKey.DESCRIBE_TRANSACTIONS,
                                       versions="0", flexible="0+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("transaction_states", "[]TransactionState", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("transactional_id", "string", "0+"),
        F("transaction_state", "string", "0+"),
        F("transaction_timeout_ms", "int32", "0+"),
        F("transaction_start_time_ms", "int64", "0+"),
        F("producer_id", "int64", "0+"),
        F("producer_epoch", "int16", "0+"),
        F("topics", "[]TopicData", "0+", fields=[
            F("topic", "string", "0+"),
            F("partitions", "[]int32", "0+"),
        ]),
    ]),
])

DescribedTransaction = DescribeTransactionsResponse.TransactionState
DescribedTransactionTopic = DescribedTransaction.TopicData
