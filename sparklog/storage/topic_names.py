"""Kafka's topic naming rule, and the `<topic>-<partition>` directory names built on it.

Rule: topic-name-chars: a topic name is 1 to 249 characters of [a-zA-Z0-9._-], and is neither "." nor "..".
Rule: partition-dir-name: a partition directory is named `<topic>-<partition>` with a valid topic and a decimal
partition >= 0; the topic part is everything before the last '-', so topics may themselves contain '-'.
"""

from __future__ import annotations

import re

from sparklog.storage.errors import InvalidTopicName

MAX_TOPIC_LENGTH = 249  # Kafka's Topic.MAX_NAME_LENGTH: 255 minus room for the partition suffix
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION = re.compile(r"0|[1-9][0-9]{0,9}")


def validate_topic(name: str) -> str:
    """Return `name` if it is a legal topic name, else raise InvalidTopicName saying why."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicName("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_LENGTH:
        raise InvalidTopicName(f"topic name is {len(name)} characters, more than the limit of {MAX_TOPIC_LENGTH}")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicName(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")
    return name


def partition_dir_name(topic: str, partition: int) -> str:
    validate_topic(topic)
    if partition < 0:
        raise InvalidTopicName(f"partition {partition} is negative")
    return f"{topic}-{partition}"


def parse_partition_dir(dirname: str) -> tuple[str, int]:
    """Split `<topic>-<partition>` into (topic, partition); raise InvalidTopicName for anything else."""
    topic, sep, partition = dirname.rpartition("-")
    if not sep or not _PARTITION.fullmatch(partition):
        raise InvalidTopicName(f"directory name {dirname!r} is not <topic>-<partition>")
    return validate_topic(topic), int(partition)
