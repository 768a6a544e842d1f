"""The log cleaner's state as each broker reports it, for `sparklog topics describe` (Kafka shows it through
its log-cleaner metrics; here the broker writes it down):

    /log_cleaner/<broker id>   {"version":1,"partitions":{"<topic>":{"<partition>":
                                 {"dirty_ratio":0.42,"last_run":{"ended_ms":..,"duration_ms":..,"first_dirty":..,
                                  "end":..,"records_removed":..,"bytes_read":..,"bytes_written":..}|null}}}}

Rule 1: only the broker itself writes its node, each time replacing the whole report (one idempotent write,
as log_faults.publish); a broker that is down still shows what it last reported.
Rule 2: `read_all` never fails on a node it cannot parse: that broker is left out.
"""

from __future__ import annotations

from typing import Any, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying
from sparklog.coordination.log_faults import write_node

LOG_CLEANER_JSON_VERSION = 1

Report = Mapping[str, Any]  # {"dirty_ratio": float, "last_run": {...} | None}


def _path(broker_id: int) -> str:
    return f"{paths.LOG_CLEANER}/{paths.partition_number(broker_id)}"


def publish(zk: KazooClient, broker_id: int, reports: Mapping[tuple[str, int], Report]) -> None:
    """Replace this broker's report with `reports` ({(topic, partition): report})."""
    partitions: dict[str, dict[str, Report]] = {}
    for (topic, partition), report in sorted(reports.items()):
        partitions.setdefault(paths.topic_name(topic), {})[str(partition)] = dict(report)
    write_node(zk, _path(broker_id), encode({"version": LOG_CLEANER_JSON_VERSION, "partitions": partitions}))


def read_all(zk: KazooClient) -> dict[tuple[str, int], dict[int, Report]]:
    """{(topic, partition): {broker id: report}} over every broker's node."""
    def inner() -> dict:
        try:
            children = zk.get_children(paths.LOG_CLEANER)
        except NoNodeError:
            return {}
        found: dict[tuple[str, int], dict[int, Report]] = {}
        for child in sorted(children):
            try:
                data, _ = zk.get(f"{paths.LOG_CLEANER}/{child}")
                for topic, parts in decode(data)["partitions"].items():
                    for partition, report in parts.items():
                        found.setdefault((topic, int(partition)), {})[int(child)] = dict(report)
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # Rule 2
        return found

    return retrying(zk, inner)
