"""`partition.metadata`: which life of a topic a partition's log directory belongs to (Kafka 2.8+'s file).

A topic deleted and re-created under the same name (while this broker was down, or faster than its watch
fired) must not inherit the old log. Kafka gives each topic a UUID (`topic_id` in the `/brokers/topics/<t>`
JSON) and writes it into every log directory; a log whose id differs from the registry's is deleted.

Our topic registry (sparklog.coordination.topics) does not write a topic id, and the broker cannot add one
safely (`add_partitions` rewrites that JSON and a retried create compares it byte for byte). So the id is
derived from what ZooKeeper itself gives each creation: the czxid of the `/brokers/topics/<t>` znode, the
transaction id that created it, unique within the ensemble and new on every re-creation. It is written in
Kafka's format and Kafka's 22-character URL-safe base64 form of a 16-byte UUID (the czxid in the low 8).

File format (Kafka's PartitionMetadataFile, version 0):

    version: 0
    topic_id: AAAAAAAAAAAAAAAAAAAAAw

Written tmp -> fsync -> rename, so a crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import base64
import os
import uuid

FILE_NAME = "partition.metadata"
TMP_SUFFIX = ".tmp"
VERSION = 0


def topic_id_from_czxid(czxid: int) -> str:
    """The topic id of the topic whose assignment znode was created by transaction `czxid`."""
    raw = uuid.UUID(int=czxid & ((1 << 128) - 1)).bytes
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


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
