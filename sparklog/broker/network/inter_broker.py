"""How this broker reaches the others: the inter-broker listener (Kafka's `inter.broker.listener.name`, else
`security.inter.broker.protocol`) and, when it speaks SSL, the TLS client context (broker/tls.py Rule 5).

Rule 1: every connection one broker opens to another (replica fetchers, the transaction coordinator's marker
channel) goes to the other broker's endpoint of the inter-broker listener, as registered in
`/brokers/ids/<id>`, never to another listener's; a broker registered without that listener is unreachable
(None), not reached some other way.
Rule 2: over TLS when the listener speaks SSL, verifying the other broker's certificate (and its host name
unless `ssl.endpoint.identification.algorithm` is empty), the handshake bounded by the caller's timeout.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InterBrokerListener:
    name: str = ""  # "": the registered host/port (tests and tools that start no listener of their own)
    ssl_context: Any = None  # an ssl.SSLContext when the listener speaks SSL

    def address(self, info) -> tuple[str, int] | None:
        """`info` (a coordination.brokers.BrokerInfo): where this listener reaches that broker (Rule 1)."""
        if info is None:
            return None
        return info.address(self.name) if self.name else (info.host, info.port)

    async def open_connection(self, host: str, port: int, timeout: float):
        """asyncio streams to host:port, over TLS when the listener speaks SSL (Rule 2)."""
        if self.ssl_context is None:
            return await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        return await asyncio.wait_for(asyncio.open_connection(
            host, port, ssl=self.ssl_context, server_hostname=host, ssl_handshake_timeout=timeout), timeout)


PLAINTEXT_REGISTERED = InterBrokerListener()
