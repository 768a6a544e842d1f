"""Which operation on which resource each API needs (Kafka's KafkaApis checks), as data: the one authority.

An API's `Rule` lists `Whole` checks (one resource named by the request: the cluster, its group, its
transactional id) and at most one `Each` check (one per entry of a request array: a topic, a group, a config
resource). authorization.py enforces them (its Rules 1-3); this module decides nothing and does no IO.

A `Whole` check whose `name` function answers None does not apply to that request (an InitProducerId without a
transactional id needs IDEMPOTENT_WRITE on the cluster instead of WRITE on the id). `Each` names the request
array and the field of an entry holding the resource's name (None: the entries are the names), the response
array its denied entries are answered in, and, for per-partition answers, the partition arrays on both sides.
Differences from Kafka, kept on purpose: Fetch from a replica needs CLUSTER_ACTION (Kafka's too), answered
TOPIC_AUTHORIZATION_FAILED per partition as Kafka does; OffsetFetch needs DESCRIBE on the group and the topics
(Kafka's), which READ implies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sparklog.coordination.acl import CLUSTER_NAME, Operation, ResourceType
from sparklog.protocol import errors
from sparklog.protocol.api_keys import ApiKey

TOPIC_AUTHORIZATION_FAILED = errors.TopicAuthorizationFailedError.errno
GROUP_AUTHORIZATION_FAILED = errors.GroupAuthorizationFailedError.errno
CLUSTER_AUTHORIZATION_FAILED = errors.ClusterAuthorizationFailedError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = errors.TransactionalIdAuthorizationFailedError.errno

TOPIC, GROUP, CLUSTER, TXN = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                              ResourceType.TRANSACTIONAL_ID)
(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
 IDEMPOTENT_WRITE) = (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
                      Operation.DESCRIBE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                      Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE)
# The operations reported in *_authorized_operations, per resource type (Kafka's supported operations)
REPORTED_OPERATIONS = {
    TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE),
    CLUSTER: (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE),
}
CONFIG_RESOURCE_TOPIC, CONFIG_RESOURCE_BROKER = 2, 4  # DescribeConfigs' resource_type codes


def _cluster(_body: Any) -> str:
    return CLUSTER_NAME


def _field(name: str) -> Callable[[Any], str | None]:
    return lambda body: getattr(body, name) or None


def _idempotent_produce(body: Any) -> str | None:
    """The cluster, for a Produce without a transactional id whose batches carry a producer id."""
    if body.transactional_id:
        return None
    for topic in body.topic_data:
        for partition in topic.partition_data:
            records = partition.records
            if records is not None and len(records) >= 51 and int.from_bytes(records[43:51], "big", signed=True) >= 0:
                return CLUSTER_NAME
    return None


def _without_transactional_id(body: Any) -> str | None:
    return None if body.transactional_id else CLUSTER_NAME


def _from_replica(body: Any) -> str | None:
    return CLUSTER_NAME if body.replica_id >= 0 else None


def _coordinator_key(key_type: int) -> Callable[[Any], str | None]:
    """FindCoordinator v0-3's one key (v4's coordinator_keys are checked one by one: FIND_COORDINATOR_KEYS)."""
    return lambda body: body.key if body.key_type == key_type and not body.coordinator_keys else None


@dataclass(frozen=True)
class Whole:
    operation: Operation
    resource: ResourceType
    name: Callable[[Any], str | None]
    code: int


@dataclass(frozen=True)
class Each:
    operation: Operation
    resource: ResourceType
    request: str  # the request's array
    key: str | None  # field of an entry naming the resource; None: the entries are the names
    response: str  # the response's array the denied entries are answered in
    response_key: str
    code: int = TOPIC_AUTHORIZATION_FAILED
    # (request partitions, its index field or None for an int array, response partitions, its index field)
    partitions: tuple[str, str | None, str, str] | None = None
    error: str = "error_code"
    skip_replicas: bool = False  # a Fetch from a replica is checked by its Whole CLUSTER_ACTION alone


@dataclass(frozen=True)
class Rule:
    whole: tuple[Whole, ...] = ()
    each: Each | None = None
    special: str | None = None  # enforced by its own function in authorization.py (Metadata, lists, configs)


def _topics(op: Operation, request: str, key: str, response: str, response_key: str,
            partitions: tuple[str, str | None, str, str] | None, **kw: Any) -> Each:
    return Each(op, TOPIC, request, key, response, response_key, partitions=partitions, **kw)


_PER_PARTITION = ("partitions", "partition_index", "partitions", "partition_index")
_PARTITION_INDEXES = ("partition_indexes", None, "partitions", "partition_index")
_TXN_WRITE = Whole(WRITE, TXN, _field("transactional_id"), TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
_GROUP_READ = Whole(READ, GROUP, _field("group_id"), GROUP_AUTHORIZATION_FAILED)
_CLUSTER = {op: Whole(op, CLUSTER, _cluster, CLUSTER_AUTHORIZATION_FAILED)
            for op in (DESCRIBE, ALTER, CLUSTER_ACTION, CREATE, DESCRIBE_CONFIGS, ALTER_CONFIGS)}

TABLE: dict[int, Rule] = {
    ApiKey.PRODUCE: Rule(
        (_TXN_WRITE, Whole(IDEMPOTENT_WRITE, CLUSTER, _idempotent_produce, CLUSTER_AUTHORIZATION_FAILED)),
        _topics(WRITE, "topic_data", "name", "responses", "name",
                ("partition_data", "index", "partition_responses", "index"))),
    ApiKey.FETCH: Rule(
        (Whole(CLUSTER_ACTION, CLUSTER, _from_replica, TOPIC_AUTHORIZATION_FAILED),),
        _topics(READ, "topics", "topic", "responses", "topic", ("partitions", "partition", "partitions",
                                                                "partition_index"), skip_replicas=True)),
    ApiKey.LIST_OFFSETS: Rule((), _topics(DESCRIBE, "topics", "name", "topics", "name", _PER_PARTITION)),
    ApiKey.METADATA: Rule(special="metadata"),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: Rule((), _topics(DESCRIBE, "topics", "name", "topics", "name", None),
                                           special="describe_topic_partitions"),  # every topic: filtered, then paged
    ApiKey.OFFSET_COMMIT: Rule((_GROUP_READ,), _topics(READ, "topics", "name", "topics", "name", _PER_PARTITION)),
    ApiKey.OFFSET_FETCH: Rule((Whole(DESCRIBE, GROUP, _field("group_id"), GROUP_AUTHORIZATION_FAILED),),
                              _topics(DESCRIBE, "topics", "name", "topics", "name", _PARTITION_INDEXES),
                              special="offset_fetch"),  # v8+ batches groups, each with its topics
    ApiKey.FIND_COORDINATOR: Rule((Whole(DESCRIBE, GROUP, _coordinator_key(0), GROUP_AUTHORIZATION_FAILED),
                                   Whole(DESCRIBE, TXN, _coordinator_key(1), TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
                                  special="find_coordinator"),  # v4+ batches keys
    ApiKey.JOIN_GROUP: Rule((_GROUP_READ,)),
    ApiKey.HEARTBEAT: Rule((_GROUP_READ,)),
    ApiKey.LEAVE_GROUP: Rule((_GROUP_READ,)),
    ApiKey.SYNC_GROUP: Rule((_GROUP_READ,)),
    ApiKey.DESCRIBE_GROUPS: Rule((), Each(DESCRIBE, GROUP, "groups", None, "groups", "group_id",
                                          GROUP_AUTHORIZATION_FAILED), special="describe_groups"),
    ApiKey.LIST_GROUPS: Rule(special="list_groups"),
    ApiKey.API_VERSIONS: Rule(),
    ApiKey.CREATE_TOPICS: Rule((), _topics(CREATE, "topics", "name", "topics", "name", None),
                               special="create_topics"),
    ApiKey.DELETE_TOPICS: Rule((), _topics(DELETE, "topic_names", None, "responses", "name", None),
                               special="delete_topics"),  # v6 names topics by id too
    ApiKey.DELETE_RECORDS: Rule((), _topics(DELETE, "topics", "name", "topics", "name", _PER_PARTITION)),
    ApiKey.INIT_PRODUCER_ID: Rule((_TXN_WRITE, Whole(IDEMPOTENT_WRITE, CLUSTER, _without_transactional_id,
                                                     CLUSTER_AUTHORIZATION_FAILED))),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Rule((Whole(CLUSTER_ACTION, CLUSTER, _from_replica,
                                                CLUSTER_AUTHORIZATION_FAILED),),
                                         _topics(DESCRIBE, "topics", "topic", "topics", "topic",
                                                 ("partitions", "partition", "partitions", "partition"),
                                                 skip_replicas=True)),
    ApiKey.ADD_PARTITIONS_TO_TXN: Rule(special="add_partitions_to_txn"),
    ApiKey.ADD_OFFSETS_TO_TXN: Rule((_TXN_WRITE, _GROUP_READ)),
    ApiKey.END_TXN: Rule((_TXN_WRITE,)),
    ApiKey.WRITE_TXN_MARKERS: Rule((_CLUSTER[CLUSTER_ACTION],), special="write_txn_markers"),
    ApiKey.TXN_OFFSET_COMMIT: Rule((_TXN_WRITE, _GROUP_READ),
                                   _topics(READ, "topics", "name", "topics", "name", _PER_PARTITION)),
    ApiKey.DESCRIBE_CONFIGS: Rule(special="configs"),
    ApiKey.ALTER_CONFIGS: Rule(special="configs"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Rule(special="configs"),
    ApiKey.DESCRIBE_LOG_DIRS: Rule((_CLUSTER[DESCRIBE],)),
    ApiKey.CREATE_PARTITIONS: Rule((), _topics(ALTER, "topics", "name", "results", "name", None)),
    ApiKey.DELETE_GROUPS: Rule((), Each(DELETE, GROUP, "groups_names", None, "results", "group_id",
                                        GROUP_AUTHORIZATION_FAILED)),
    ApiKey.ELECT_LEADERS: Rule((_CLUSTER[ALTER],)),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Rule((_CLUSTER[DESCRIBE],)),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Rule((_CLUSTER[ALTER],)),
    ApiKey.OFFSET_DELETE: Rule((Whole(DELETE, GROUP, _field("group_id"), GROUP_AUTHORIZATION_FAILED),),
                               _topics(READ, "topics", "name", "topics", "name", _PER_PARTITION)),
    ApiKey.DESCRIBE_CLUSTER: Rule(special="describe_cluster"),
    ApiKey.DESCRIBE_PRODUCERS: Rule((), _topics(READ, "topics", "name", "topics", "name", _PARTITION_INDEXES)),
    ApiKey.DESCRIBE_TRANSACTIONS: Rule((), Each(DESCRIBE, TXN, "transactional_ids", None, "transaction_states",
                                                "transactional_id", TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
    ApiKey.LIST_TRANSACTIONS: Rule(special="list_transactions"),
    ApiKey.DESCRIBE_ACLS: Rule((_CLUSTER[DESCRIBE],)),
    ApiKey.CREATE_ACLS: Rule((_CLUSTER[ALTER],), special="create_acls"),
    ApiKey.DELETE_ACLS: Rule((_CLUSTER[ALTER],), special="delete_acls"),
    ApiKey.SASL_HANDSHAKE: Rule(),  # authentication itself: answered before any principal exists
    ApiKey.SASL_AUTHENTICATE: Rule(),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: Rule((_CLUSTER[DESCRIBE_CONFIGS],)),
    ApiKey.ALTER_CLIENT_QUOTAS: Rule((_CLUSTER[ALTER_CONFIGS],), special="alter_client_quotas"),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Rule((_CLUSTER[DESCRIBE],)),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Rule((_CLUSTER[ALTER],), special="alter_user_scram"),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Rule((_GROUP_READ,)),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Rule((), Each(DESCRIBE, GROUP, "group_ids", None, "groups", "group_id",
                                                  GROUP_AUTHORIZATION_FAILED)),
}
FIND_COORDINATOR_KEYS = {  # FindCoordinator v4+ key_type -> (the resource of each key, the code of a denied one)
    0: (GROUP, GROUP_AUTHORIZATION_FAILED), 1: (TXN, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}
CONFIG_CHECKS = {  # DescribeConfigs / AlterConfigs resource_type -> (resource, its name, error code)
    CONFIG_RESOURCE_TOPIC: (TOPIC, None, TOPIC_AUTHORIZATION_FAILED),
    CONFIG_RESOURCE_BROKER: (CLUSTER, CLUSTER_NAME, CLUSTER_AUTHORIZATION_FAILED),
}
CONFIG_OPERATIONS = {ApiKey.DESCRIBE_CONFIGS: DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS: ALTER_CONFIGS,
                     ApiKey.INCREMENTAL_ALTER_CONFIGS: ALTER_CONFIGS}
