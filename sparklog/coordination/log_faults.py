"""Fenced log ranges as each broker reports them, for `sparklog topics describe` and operators.

    /log_faults/<broker id>   {"version":1,"partitions":{"<topic>":{"<partition>":[[start,end],...]}}}

A broker's storage fences the offset ranges it finds damaged by bit rot (sparklog.storage.fences); the
broker publishes its whole current map here whenever it changes, and an empty map deletes nothing but
says "none". The node is persistent: a broker that is down still shows what it last reported.

Rule 1: `publish` is one idempotent write (create, or set after NodeExistsError), retried on connection
loss; the last writer wins, and only the broker itself writes its node.
Rule 2: `read_all` never fails on a node it cannot parse: it names it in the result's `unreadable`.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying

LOG_FAULTS_JSON_VERSION = 1

Ranges = tuple[tuple[int, int], ...]


class LogFaults(NamedTuple):
    by_partition: dict[tuple[str, int], dict[int, Ranges]]  # (topic, partition) -> {broker id: ranges}
    unreadable: tuple[str, ...]  # broker nodes that could not be parsed


def _path(broker_id: int) -> str:
    return f"{paths.LOG_FAULTS}/{paths.partition_number(broker_id)}"


def publish(zk: KazooClient, broker_id: int, faults: Mapping[tuple[str, int], Ranges]) -> None:
    """Replace this broker's report with `faults` ({(topic, partition): ranges}; empty ranges are left out)."""
    partitions: dict[str, dict[str, list]] = {}
    for (topic, partition), ranges in sorted(faults.items()):
        if ranges:
            partitions.setdefault(paths.topic_name(topic), {})[str(partition)] = [list(r) for r in ranges]
    write_node(zk, _path(broker_id), encode({"version": LOG_FAULTS_JSON_VERSION, "partitions": partitions}))


def write_node(zk: KazooClient, path: str, value: bytes) -> None:
    """Rule 1: create `path` with `value`, or set it when it exists; retried on connection loss."""
    def inner() -> None:
        try:
            zk.create(path, value, makepath=True)
        except NodeExistsError:
            zk.set(path, value)

    retrying(zk, inner)


def read_all(zk: KazooClient) -> LogFaults:
    """Every broker's report."""
    def inner() -> LogFaults:
        try:
            children = zk.get_children(paths.LOG_FAULTS)
        except NoNodeError:
            return LogFaults({}, ())
        found: dict[tuple[str, int], dict[int, Ranges]] = {}
        unreadable = []
        for child in sorted(children):
            try:
                data, _ = zk.get(f"{paths.LOG_FAULTS}/{child}")
                for topic, parts in decode(data)["partitions"].items():
                    for partition, ranges in parts.items():
                        found.setdefault((topic, int(partition)), {})[int(child)] = tuple(
                            (int(a), int(b)) for a, b in ranges)
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError, AttributeError):
                unreadable.append(child)
        return LogFaults(found, tuple(unreadable))

    return retrying(zk, inner)
