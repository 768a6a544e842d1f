"""One blocking request over a fresh socket, for tests that must send exactly the bytes they mean to."""

from __future__ import annotations

import socket
import struct

from sparklog.protocol.registry import decode_response, encode_request

TIMEOUT_S = 5.0
_SIZE = struct.Struct(">i")


def request(host: str, port: int, api_key: int, version: int, body, timeout: float = TIMEOUT_S):
    """Send one request and return the decoded response body."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        return exchange(sock, api_key, version, body)


def exchange(sock: socket.socket, api_key: int, version: int, body):
    """Send one request on a connected socket (its timeout applies) and return the decoded response body."""
    sock.sendall(encode_request(api_key, version, 1, "sparklog-test", body))
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
