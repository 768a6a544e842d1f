"""Every znode path sparklog uses, built in one place from validated names (design notes 5.5, Kafka's ZK layout).

Rule 1: no path is built from a name that could escape its directory: topics pass Kafka's naming rule
(`sparklog.storage.topic_names.validate_topic`: `[a-zA-Z0-9._-]{1,249}`, not `.` or `..`), groups and
consumer ids must be non-empty, free of `/` and control characters and not `.` or `..`.
Rule 2: the paths are relative to the client's chroot, so several clusters can share one ensemble.

    /cluster/id                                          {"version":"1","id":"<22 chars>"}
    /brokers/ids/<broker id>                             ephemeral broker registration
    /brokers/topics/<topic>                              {"version":2,"partitions":{"0":[1,2]},...}
    /brokers/topics/<topic>/partitions/<p>/state         {"controller_epoch":..,"leader":..,"isr":[..],..}
    /config/topics/<topic>                               {"version":1,"config":{...}}
    /consumers/<group>/ids/<consumer id>                 ephemeral consumer registration (paper 3.2)
    /consumers/<group>/owners/<topic>/<p>                ephemeral owner of a partition (paper 3.2)
    /consumers/<group>/offsets/<topic>/<p>               committed offset (paper 3.2), persistent
    /latest_producer_id_block                            {"version":1,"broker":..,"block_start":..,...}
    /log_faults/<broker id>                              fenced log ranges the broker reports (log_faults.py)
    /controller                                          ephemeral {"version":1,"brokerid":..,"timestamp":..}
    /controller_epoch                                    "<epoch>", bumped by each newly elected controller
    /controlled_shutdown/<broker id>                     ephemeral: this broker asks to shed its leadership
    /admin/preferred_replica_election                    {"version":1,"partitions":[{"topic":..,"partition":..}]}
    /admin/reassign_partitions                           {"version":1,"partitions":[{"topic":..,"partition":..,
                                                          "replicas":[..]}]}
"""

from __future__ import annotations

from sparklog.storage.errors import InvalidTopicName
from sparklog.storage.topic_names import validate_topic

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_USERS = "/config/users"  # per user: SCRAM credentials (and quotas), Kafka's layout
CONFIG_CHANGES = "/config/changes"  # Kafka's config change notifications (config_change_<seq>)
CONSUMERS = "/consumers"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
LOG_FAULTS = "/log_faults"
LOG_CLEANER = "/log_cleaner"  # each broker's compacted logs: dirty ratio and the cleaner's last run
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
# sparklog's own: Kafka's brokers send a ControlledShutdown request to the controller instead.
CONTROLLED_SHUTDOWN = "/controlled_shutdown"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"

# Longest group/consumer id we put in a path; ZooKeeper itself refuses znodes over jute.maxbuffer (1 MiB).
MAX_NAME_LENGTH = 255


class InvalidName(ValueError):
    """A group or consumer id cannot be a znode name."""


def topic_name(name: str) -> str:
    """Return `name` if it is a legal topic name, else raise storage's `InvalidTopicName` (a ValueError)."""
    validate_topic(name)
    # Belt and braces: whatever the naming rule says, nothing may leave its directory.
    if "/" in name or name in (".", ".."):
        raise InvalidTopicName(f"illegal topic name {name!r}")
    return name


def plain_name(name: str, what: str = "name") -> str:
    """Return `name` if it is safe as one znode name (groups, consumer ids), else raise `InvalidName`."""
    if not isinstance(name, str) or not name:
        raise InvalidName(f"{what} must be a non-empty str")
    if len(name) > MAX_NAME_LENGTH or "/" in name or name in (".", "..") or not name.isprintable():
        raise InvalidName(f"illegal {what} {name!r}")
    return name


def partition_number(partition: int) -> int:
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ValueError(f"partition must be a non-negative int, not {partition!r}")
    return partition


def broker(broker_id: int) -> str:
    if not isinstance(broker_id, int) or isinstance(broker_id, bool) or broker_id < 0:
        raise ValueError(f"broker id must be a non-negative int, not {broker_id!r}")
    return f"{BROKER_IDS}/{broker_id}"


def controlled_shutdown(broker_id: int) -> str:
    broker(broker_id)  # validates the id
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def topic(name: str) -> str:
    return f"{BROKER_TOPICS}/{topic_name(name)}"


def topic_partitions(name: str) -> str:
    return f"{topic(name)}/partitions"


def topic_partition(name: str, partition: int) -> str:
    return f"{topic_partitions(name)}/{partition_number(partition)}"


def partition_state(name: str, partition: int) -> str:
    return f"{topic_partition(name, partition)}/state"


def topic_config(name: str) -> str:
    return f"{CONFIG_TOPICS}/{topic_name(name)}"


def group(name: str) -> str:
    return f"{CONSUMERS}/{plain_name(name, 'group')}"


def group_ids(name: str) -> str:
    return f"{group(name)}/ids"


def consumer(group_name: str, consumer_id: str) -> str:
    return f"{group_ids(group_name)}/{plain_name(consumer_id, 'consumer id')}"


def group_owners(name: str) -> str:
    return f"{group(name)}/owners"


def owner(group_name: str, topic_: str, partition: int) -> str:
    return f"{group_owners(group_name)}/{topic_name(topic_)}/{partition_number(partition)}"


def group_offsets(name: str) -> str:
    return f"{group(name)}/offsets"


def offsets_topic(group_name: str, topic_: str) -> str:
    return f"{group_offsets(group_name)}/{topic_name(topic_)}"


def offset(group_name: str, topic_: str, partition: int) -> str:
    return f"{offsets_topic(group_name, topic_)}/{partition_number(partition)}"
