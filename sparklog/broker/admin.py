"""Small blocking requests to brokers for the command-line tools (`sparklog topics describe`).

The broker package may not import the client package, so this speaks the wire protocol itself through the
sans-IO codec: one short-lived socket per broker, one request at a time.
"""

from __future__ import annotations

import socket
import struct

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.list_offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from sparklog.protocol.registry import decode_response, encode_request

TIMEOUT_S = 5.0
LIST_OFFSETS_VERSION = 1
_SIZE = struct.Struct(">i")


def request(host: str, port: int, api_key: int, version: int, body, timeout: float = TIMEOUT_S):
    """Send one request and return the decoded response body."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(encode_request(api_key, version, 1, "sparklog-admin", body))
        (size,) = _SIZE.unpack(_recv_exactly(sock, 4))
        _, response = decode_response(api_key, version, _recv_exactly(sock, size))
        return response


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, remaining = [], n
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def log_offsets(topic, live_brokers) -> dict[int, tuple[int, int]]:
    """{partition: (log start, high watermark)} asked of each partition's leader; unreachable ones are left out."""
    by_leader: dict[int, list[int]] = {}
    for p, state in topic.states.items():
        by_leader.setdefault(state.leader, []).append(p)
    found = {}
    for leader, partitions in by_leader.items():
        broker = live_brokers.get(leader)
        if broker is None:
            continue
        try:
            earliest = _list(broker, topic.name, partitions, EARLIEST_TIMESTAMP)
            latest = _list(broker, topic.name, partitions, LATEST_TIMESTAMP)
        except (OSError, ValueError):
            continue
        for p in partitions:
            if p in earliest and p in latest:
                found[p] = (earliest[p], latest[p])
    return found


def _list(broker, topic: str, partitions: list[int], timestamp: int) -> dict[int, int]:
    body = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name=topic, partitions=[
        ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in partitions])])
    response = request(broker.host, broker.port, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
    return {p.partition_index: p.offset for t in response.topics for p in t.partitions if p.error_code == 0}
