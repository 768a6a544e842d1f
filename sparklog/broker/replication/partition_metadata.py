"""`partition.metadata`: which life of a topic a partition's log directory belongs to (Kafka 2.8+'s file).

A topic deleted and re-created under the same name (while this broker was down, or faster than its watch
fired) must not inherit the old log. Kafka gives each topic a UUID (`topic_id` in the `/brokers/topics/<t>`
JSON) and writes it into every log directory; a log whose id differs from the registry's is deleted.

The id is the topic registry's (sparklog.coordination.topics, the `"topic_id"` of the topic's JSON; the
czxid-derived id of coordination/topic_ids.py for a topic created before topic ids, which earlier releases
wrote here), in Kafka's 22-character URL-safe base64 form of a 16-byte UUID.

File format (Kafka's PartitionMetadataFile, version 0):

    version: 0
    topic_id: AAAAAAAAAAAAAAAAAAAAAw

Written tmp -> fsync -> rename, so a crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import os

from sparklog.coordination.topic_ids import from_czxid as topic_id_from_czxid

FILE_NAME = "partition.metadata"
TMP_SUFFIX = ".tmp"
VERSION = 0

__all__ = ["FILE_NAME", "VERSION", "read", "write", "topic_id_from_czxid"]


def read(directory: str) -> str | None:
    """The topic id recorded in `directory`, or None when there is no (readable) file."""
    try:
        with open(os.path.join(directory, FILE_NAME), encoding="utf-8") as f:
            text = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    if fields.get("version") != str(VERSION):
        return None
    return fields.get("topic_id") or None


def write(directory: str, topic_id: str) -> None:
    path = os.path.join(directory, FILE_NAME)
    tmp = path + TMP_SUFFIX
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"version: {VERSION}\ntopic_id: {topic_id}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
