"""Why a TCP endpoint cannot be reached, in the words a user looks for: connection refused, name not
resolved, timed out. Shared by the ZooKeeper connect (connection.py) and the clients' broker connections.

Rule: a reason names the failure, never a traceback or an errno number alone; `probe()` answers None only
when a TCP connection was actually made.
"""

from __future__ import annotations

import socket

PROBE_TIMEOUT_S = 2.0  # one diagnostic connect; the caller's own timeout is what ends its retries


def failure_reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"name not resolved ({exc.strerror or exc})"
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None if a TCP connection to `host:port` opens, else why not."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        return failure_reason(exc)
    return None


def describe(hosts: str, timeout: float = PROBE_TIMEOUT_S) -> str:
    """Each `host:port` of a comma-separated list with why it cannot be reached, e.g. for a ZooKeeper
    connect string; an endpoint that accepts connections is said to give no answer."""
    reasons = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            reasons.append(f"{item}: not host:port")
            continue
        reason = probe(host.strip("[]"), int(port), timeout)
        reasons.append(f"{item}: {reason or 'accepts connections but does not answer'}")
    return "; ".join(reasons)
