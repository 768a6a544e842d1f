"""The requests `sparklog transactions` and its `find-hanging` send (cli/transactions.py, cli/find_hanging.py): the
admin client of the command's arguments, one request to one broker with its timeout named, and the partition leader,
the transactional id's coordinator and DescribeProducers they are sent to. Both commands import it, neither the
other's module (transactions.py registers find-hanging's parser).
"""

from __future__ import annotations

import argparse

LIST_TRANSACTIONS_VERSION = 0
DESCRIBE_TRANSACTIONS_VERSION = 0
DESCRIBE_PRODUCERS_VERSION = 0
WRITE_TXN_MARKERS_VERSION = 1


def _admin(args: argparse.Namespace):
    from sparklog.client.kafka_groups import KafkaGroupAdmin

    return KafkaGroupAdmin(bootstrap_servers=args.bootstrap_server,
                           zookeeper=None if args.bootstrap_server else args.zookeeper)



def describe_producers(admin, topic: str, partition: int) -> list:
    """DescribeProducers at the partition's leader (Rule 3); its error raised as its Kafka error class."""
    from sparklog.protocol import ApiKey, for_code
    from sparklog.protocol.describe_producers import DescribeProducersRequest, DescribeProducersTopicRequest

    leader = _leader(admin, topic, partition)
    request = DescribeProducersRequest(topics=[DescribeProducersTopicRequest(name=topic,
                                                                             partition_indexes=[partition])])
    response = _at(admin, leader, ApiKey.DESCRIBE_PRODUCERS, DESCRIBE_PRODUCERS_VERSION, request,
                   f"the leader of {topic}-{partition}, broker {leader}")
    (answer,) = response.topics[0].partitions
    if answer.error_code:
        raise for_code(answer.error_code)(f"{topic}-{partition} at broker {leader}: {answer.error_message or ''}")
    return list(answer.active_producers)



def _leader(admin, topic: str, partition: int) -> int:
    from sparklog.protocol import for_code

    leaders = admin.describe([topic]).get(topic) or {}
    if leaders.get(partition, -1) < 0:
        raise for_code(3 if partition not in leaders else 5)(f"{topic}-{partition}")  # UNKNOWN / LEADER_NOT_AVAILABLE
    return leaders[partition]


def _coordinator(admin, tid: str) -> int:
    from sparklog.client.kafka_groups import FIND_COORDINATOR_VERSION
    from sparklog.protocol import ApiKey, for_code
    from sparklog.protocol.find_coordinator import KEY_TYPE_TRANSACTION, FindCoordinatorRequest

    admin.brokers()
    response = admin._call(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                           FindCoordinatorRequest(key=tid, key_type=KEY_TYPE_TRANSACTION))
    if response.error_code:
        raise for_code(response.error_code)(f"coordinator of transactional id {tid!r}: "
                                            f"{response.error_message or ''}")
    return response.node_id


def _at(admin, node: int, api_key: int, version: int, request, where: str):
    """One request to broker `node`; a broker that does not answer within the admin's timeout raises
    TimeoutError naming `where` (cli.py Rule 2)."""
    try:
        return admin._client.submit(node, api_key, version, request).wait(admin.timeout)
    except (ConnectionError, TimeoutError) as exc:
        raise TimeoutError(f"{where} did not answer: {exc}") from None
