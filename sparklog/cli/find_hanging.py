"""`sparklog transactions find-hanging`: the open transactions that no coordinator will end, as Kafka's
`kafka-transactions.sh find-hanging` finds them (KIP-664).

    sparklog transactions ... find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout M]

Rule 1 (where): the partitions searched are `--topic`'s (or its `--partition` alone), or every partition of
every topic (internal ones too) with a replica on `--broker-id`, or both limits together; neither is one line
and exit 1.
Rule 2 (candidates): DescribeProducers at each partition's leader; a producer with an open transaction there
(CurrentTransactionStartOffset >= 0) whose last write is older than `--max-transaction-timeout` minutes
(default 15, Kafka's transaction.max.timeout.ms) is a candidate: no transaction may legitimately stay open
longer.
Rule 3 (hanging): ListTransactions (filtered by the candidates' producer ids) at every live broker maps each
producer id to its transactional id; a candidate is hanging when no coordinator knows its producer id, when its
id's coordinator does not know the id (TRANSACTIONAL_ID_NOT_FOUND), or when DescribeTransactions does not list
the partition among the transaction's (so no marker will come for it). Printed with Kafka's columns: Topic,
Partition, ProducerId, ProducerEpoch, CoordinatorEpoch, StartOffset, LastTimestamp, Duration(min); `abort`
ends each. A broker that does not answer ends the command (cli.py Rule 2).
"""

from __future__ import annotations

import argparse
import time

from sparklog.cli.columns import print_columns

DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
           "Duration(min)")
TRANSACTIONAL_ID_NOT_FOUND = 105


def add_parser(sub) -> None:
    command = sub.add_parser("find-hanging", help="open transactions no coordinator will end (kafka-transactions)")
    command.add_argument("--broker-id", type=int, help="search the partitions with a replica on this broker")
    command.add_argument("--topic", help="search this topic's partitions")
    command.add_argument("--partition", type=int, help="only this partition of --topic")
    command.add_argument("--max-transaction-timeout", type=int, default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
                         help="minutes a transaction may stay open (default %(default)s)")
    command.set_defaults(func=run_find_hanging)


def run_find_hanging(args: argparse.Namespace) -> int:
    from sparklog.cli.transaction_requests import _admin

    if args.topic is None and args.broker_id is None:
        raise ValueError("find-hanging requires either --topic or --broker-id to limit the scope of the search")
    if args.partition is not None and args.topic is None:
        raise ValueError("--partition requires --topic")
    now = int(time.time() * 1000)
    with _admin(args) as admin:
        candidates = _candidates(admin, _partitions(admin, args), now - args.max_transaction_timeout * 60_000)
        hanging = _hanging(admin, candidates) if candidates else []
    print_columns(HEADERS, [(t, p, s.producer_id, s.producer_epoch, s.coordinator_epoch, s.current_txn_start_offset,
                             s.last_timestamp, (now - s.last_timestamp) // 60_000) for (t, p), s in hanging])
    return 0


def _partitions(admin, args) -> list[tuple[str, int]]:
    """Rule 1."""
    from sparklog.protocol import for_code

    if args.topic is not None and args.partition is not None:
        return [(args.topic, args.partition)]
    response = admin.metadata(None if args.topic is None else [args.topic])
    found = []
    for topic in response.topics:
        if topic.error_code:
            raise for_code(topic.error_code)(f"topic {topic.name}")
        found += [(topic.name, p.partition_index) for p in topic.partitions
                  if args.broker_id is None or args.broker_id in p.replica_nodes]
    return sorted(found)


def _candidates(admin, partitions, older_than_ms: int) -> list:
    """Rule 2: ((topic, partition), producer state) of each open transaction last written before the limit."""
    from sparklog.cli.transaction_requests import describe_producers

    return [((topic, partition), producer) for topic, partition in partitions
            for producer in describe_producers(admin, topic, partition)
            if producer.current_txn_start_offset >= 0 and producer.last_timestamp < older_than_ms]


def _hanging(admin, candidates: list) -> list:
    """Rule 3."""
    ids = _transactional_ids(admin, sorted({producer.producer_id for _, producer in candidates}))
    described = {tid: _describe(admin, tid) for tid in set(ids.values())}
    hanging = []
    for tp, producer in candidates:
        state = described.get(ids.get(producer.producer_id))
        if state is None or tp not in {(t.topic, p) for t in state.topics for p in t.partitions}:
            hanging.append((tp, producer))
    return hanging


def _transactional_ids(admin, producer_ids: list[int]) -> dict[int, str]:
    from sparklog.cli.transaction_requests import LIST_TRANSACTIONS_VERSION, _at
    from sparklog.protocol import ApiKey, for_code
    from sparklog.protocol.list_transactions import ListTransactionsRequest

    found = {}
    for node, (host, port) in sorted(admin.brokers().items()):
        response = _at(admin, node, ApiKey.LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSION,
                       ListTransactionsRequest(state_filters=[], producer_id_filters=producer_ids), f"{host}:{port}")
        if response.error_code:
            raise for_code(response.error_code)(f"ListTransactions at broker {node}")
        found.update({t.producer_id: t.transactional_id for t in response.transaction_states
                      if t.producer_id in producer_ids})
    return found


def _describe(admin, tid: str):
    """The id's DescribeTransactions entry, None when its coordinator does not know it."""
    from sparklog.cli.transaction_requests import DESCRIBE_TRANSACTIONS_VERSION, _at, _coordinator
    from sparklog.protocol import ApiKey, for_code
    from sparklog.protocol.describe_transactions import DescribeTransactionsRequest

    node = _coordinator(admin, tid)
    (state,) = _at(admin, node, ApiKey.DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION,
                   DescribeTransactionsRequest(transactional_ids=[tid]), f"broker {node}").transaction_states
    if state.error_code == TRANSACTIONAL_ID_NOT_FOUND:
        return None
    if state.error_code:
        raise for_code(state.error_code)(f"transactional id {tid!r} at its coordinator, broker {node}")
    return state
