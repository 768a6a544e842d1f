"""ListTransactions (key 66), versions 0-1, flexible (KIP-664, KIP-994). Transcribed from Kafka's
ListTransactionsRequest.json and ListTransactionsResponse.json.

Sent to every broker: the transactional ids whose coordinator it is, filtered by state names (empty: all),
producer ids (empty: all) and, from v1, ``duration_filter`` (ms; transactions running longer; -1: all). The
response names the state filters the broker does not know.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["ListTransactionsRequest", "ListTransactionsResponse", "ListedTransaction"]

ListTransactionsRequest = message("ListTransactionsRequest", api_key=ApiKey.LIST_TRANSACTIONS, versions="0-1",
                                  flexible="0+", module=__name__, fields=[
    F("state_filters", "[]string", "0+"),
    F("producer_id_filters", "[]int64", "0+"),
    F("duration_filter", "int64", "1+", default=-1),
])

ListTransactionsResponse = message("ListTransactionsResponse", api_key=ApiKey.LIST_TRANSACTIONS, versions="0-1",
                                   flexible="0+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "0+"),
    F("unknown_state_filters", "[]string", "0+"),
    F("transaction_states", "[]TransactionState", "0+", fields=[
        F("transactional_id", "string", "0+"),
        F("producer_id", "int64", "0+"),
        F("transaction_state", "string", "0+"),
    ]),
])

ListedTransaction = ListTransactionsResponse.TransactionState
