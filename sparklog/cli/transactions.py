"""`sparklog transactions`: list, describe and abort transactions, shaped like Kafka's `kafka-transactions.sh`
(KIP-664).

    sparklog transactions [--bootstrap-server B | --zookeeper Z] list
    sparklog transactions ... describe --transactional-id ID
    sparklog transactions ... describe-producers --topic T --partition P
    sparklog transactions ... abort --topic T --partition P --start-offset N
    sparklog transactions ... find-hanging (--broker-id N | --topic T [--partition P])   (cli/find_hanging.py)

Rule 1: `list` asks ListTransactions of every live broker (each coordinates the ids of its partitions of
`__transaction_state`) and prints TransactionalId, Coordinator, ProducerId, TransactionState; a broker that does
not answer ends the command (cli.py Rule 2): a partial list is never shown as the whole.
Rule 2: `describe` asks the id's coordinator (FindCoordinator key type 1) with DescribeTransactions and prints
Kafka's columns; an id the coordinator does not know is its Kafka error (TRANSACTIONAL_ID_NOT_FOUND), exit 1.
Rule 3: `describe-producers` asks the partition's leader with DescribeProducers: each producer's id, epoch,
coordinator epoch, last sequence, last timestamp and the first offset of its open transaction (-1: none).
Rule 4: `abort` ends a hanging transaction (one its coordinator no longer knows, holding the partition's last
stable offset back): DescribeProducers at the leader finds the producer whose open transaction starts at
`--start-offset`, and an ABORT marker with that producer's id, epoch and coordinator epoch is written by
WriteTxnMarkers to the leader. No producer with an open transaction at that offset: one line naming the ones
there are, exit 1, nothing written.
"""

from __future__ import annotations

import argparse
import time

from sparklog.cli.console import DEFAULT_ZOOKEEPER
from sparklog.cli.find_hanging import add_parser as add_find_hanging
from sparklog.cli.transaction_requests import (DESCRIBE_TRANSACTIONS_VERSION, LIST_TRANSACTIONS_VERSION,
                                               WRITE_TXN_MARKERS_VERSION, _admin, _at, _coordinator, _leader,
                                               describe_producers)
from sparklog.cli.columns import print_columns


def add_parser(subparsers) -> None:
    txn = subparsers.add_parser("transactions", help="list, describe and abort transactions (kafka-transactions)")
    txn.add_argument("--bootstrap-server", help="host:port[,host:port] (default: from ZooKeeper)")
    txn.add_argument("--zookeeper", default=DEFAULT_ZOOKEEPER, help="host:port[/chroot] (default %(default)s)")
    sub = txn.add_subparsers(dest="transactions_command", metavar="SUBCOMMAND")
    sub.add_parser("list", help="every transactional id the coordinators know").set_defaults(func=run_list)
    describe = sub.add_parser("describe", help="one transactional id's state at its coordinator")
    describe.add_argument("--transactional-id", required=True)
    describe.set_defaults(func=run_describe)
    for name, func, text in (("describe-producers", run_describe_producers, "a partition's active producers"),
                             ("abort", run_abort, "abort a hanging transaction (KIP-664)")):
        command = sub.add_parser(name, help=text)
        command.add_argument("--topic", required=True)
        command.add_argument("--partition", type=int, required=True)
        if name == "abort":
            command.add_argument("--start-offset", type=int, required=True,
                                 help="the first offset of the transaction (describe-producers shows it)")
        command.set_defaults(func=func)
    add_find_hanging(sub)


def run_list(args: argparse.Namespace) -> int:
    """Rule 1."""
    from sparklog.protocol import ApiKey, for_code
    from sparklog.protocol.list_transactions import ListTransactionsRequest

    rows = []
    with _admin(args) as admin:
        for node, (host, port) in sorted(admin.brokers().items()):
            response = _at(admin, node, ApiKey.LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSION,
                           ListTransactionsRequest(state_filters=[], producer_id_filters=[]), f"{host}:{port}")
            if response.error_code:
                raise for_code(response.error_code)(f"ListTransactions at broker {node}")
            rows += [(t.transactional_id, node, t.producer_id, t.transaction_state)
                     for t in response.transaction_states]
    print_columns(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), sorted(rows))
    return 0


def run_describe(args: argparse.Namespace) -> int:
    """Rule 2."""
    from sparklog.protocol import ApiKey, for_code
    from sparklog.protocol.describe_transactions import DescribeTransactionsRequest

    tid = args.transactional_id
    with _admin(args) as admin:
        node = _coordinator(admin, tid)
        (state,) = _at(admin, node, ApiKey.DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION,
                       DescribeTransactionsRequest(transactional_ids=[tid]), f"broker {node}").transaction_states
    if state.error_code:
        raise for_code(state.error_code)(f"transactional id {tid!r} at its coordinator, broker {node}")
    now = int(time.time() * 1000)
    started = state.transaction_start_time_ms
    partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
    print_columns(("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                   "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                   "TopicPartitions"),
                  [(node, tid, state.producer_id, state.producer_epoch, state.transaction_state,
                    state.transaction_timeout_ms, started if started >= 0 else None,
                    now - started if started >= 0 else None, partitions)])
    return 0


def run_describe_producers(args: argparse.Namespace) -> int:
    """Rule 3."""
    with _admin(args) as admin:
        producers = describe_producers(admin, args.topic, args.partition)
    print_columns(("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                   "CurrentTransactionStartOffset"),
                  [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
                    p.current_txn_start_offset) for p in producers])
    return 0


def run_abort(args: argparse.Namespace) -> int:
    """Rule 4."""
    with _admin(args) as admin:
        producers = describe_producers(admin, args.topic, args.partition)
        hanging = [p for p in producers if p.current_txn_start_offset == args.start_offset]
        if not hanging:
            open_at = sorted(p.current_txn_start_offset for p in producers if p.current_txn_start_offset >= 0)
            raise ValueError(f"no open transaction starts at offset {args.start_offset} of {args.topic}-"
                             f"{args.partition} (open transactions start at {open_at or 'no offset'})")
        code = abort_marker(admin, args.topic, args.partition, hanging[0])
    if code:
        from sparklog.protocol import for_code

        raise for_code(code)(f"the abort marker of producer {hanging[0].producer_id} on {args.topic}-{args.partition}")
    print(f"Aborted the transaction of producer {hanging[0].producer_id} (epoch {hanging[0].producer_epoch}) "
          f"starting at offset {args.start_offset} of {args.topic}-{args.partition}")
    return 0


def abort_marker(admin, topic: str, partition: int, producer) -> int:
    """WriteTxnMarkers (ABORT) for `producer`'s open transaction at the partition's leader (Rule 4): its code."""
    from sparklog.protocol import ApiKey
    from sparklog.protocol.write_txn_markers import (WritableTxnMarker, WritableTxnMarkerTopic,
                                                     WriteTxnMarkersRequest)

    leader = _leader(admin, topic, partition)
    marker = WritableTxnMarker(producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                               transaction_result=False, coordinator_epoch=producer.coordinator_epoch,
                               topics=[WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])])
    response = _at(admin, leader, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION,
                   WriteTxnMarkersRequest(markers=[marker]), f"the leader of {topic}-{partition}, broker {leader}")
    return response.markers[0].topics[0].partitions[0].error_code
