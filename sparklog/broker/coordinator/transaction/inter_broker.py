"""The transaction machinery's inter-broker client: one connection to each other broker (or this one), one request
at a time on it (Kafka's InterBrokerSendThread, per destination). The marker channel (markers.py: WriteTxnMarkers
to partition leaders) and the leaders' verification (verifier.py: AddPartitionsToTxn verify_only to transaction
coordinators) send through it.

Rule: a request either gets its response (its correlation id checked) or raises (OSError, asyncio.TimeoutError
after REQUEST_TIMEOUT_S, asyncio.IncompleteReadError, MalformedResponse); the caller then drops the connection
(`close`) and a new one is made for its retry.
"""

from __future__ import annotations

import asyncio
import itertools
import struct

from sparklog.broker.network.inter_broker import PLAINTEXT_REGISTERED, InterBrokerListener
from sparklog.protocol.errors import MalformedResponse
from sparklog.protocol.registry import decode_response, encode_request

REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for inter-broker requests
MAX_RESPONSE_BYTES = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")


class BrokerConnection:
    """One connection to a broker's `address`, opened at the first call; one request at a time."""

    def __init__(self, address: tuple[str, int], connect=None,
                 inter_broker: InterBrokerListener = PLAINTEXT_REGISTERED) -> None:
        self.address = address
        # security/inter_broker.py's connector (TLS and the SASL login as the inter-broker listener speaks them)
        self._open = connect or (lambda host, port, _client_id, timeout:
                                 inter_broker.open_connection(host, port, timeout))
        self._streams = None
        self._lock = asyncio.Lock()
        self._correlation = itertools.count(1)

    async def call(self, api_key: int, version: int, request, client_id: str):
        """The decoded response to `request` (api `api_key`, `version`); raises as the Rule says."""
        async with self._lock:
            if self._streams is None:
                self._streams = await self._open(*self.address, client_id, REQUEST_TIMEOUT_S)
            reader, writer = self._streams
            correlation_id = next(self._correlation) & 0x7FFFFFFF
            writer.write(encode_request(api_key, version, correlation_id, client_id, request))
            await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)
            (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(_SIZE.size), REQUEST_TIMEOUT_S))
            if not 0 < size <= MAX_RESPONSE_BYTES:
                raise MalformedResponse(f"response of {size} bytes to api {api_key}")
            frame = await asyncio.wait_for(reader.readexactly(size), REQUEST_TIMEOUT_S)
            got, response = decode_response(api_key, version, frame)
            if got != correlation_id:
                raise MalformedResponse(f"correlation id {got}, expected {correlation_id}")
            return response

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


class BrokerConnections:
    """One BrokerConnection per broker id, at the address the newest snapshot (`partitions.snapshot`) gives it:
    a broker that moved gets a new connection."""

    def __init__(self, partitions) -> None:
        self.partitions = partitions
        self.inter_broker = PLAINTEXT_REGISTERED  # the listener the other brokers are reached on (app.py sets it)
        self.connect = None  # security/inter_broker.py's connector (TLS, SASL login) for that listener
        self._connections: dict[int, BrokerConnection] = {}

    def get(self, broker_id: int) -> BrokerConnection:
        """KeyError when the snapshot has no such broker (gone since it was chosen); OSError when it has no
        endpoint of the inter-broker listener (network/inter_broker.py Rule 1: not reached some other way)."""
        address = self.inter_broker.address(self.partitions.snapshot.brokers[broker_id])
        if address is None:
            raise OSError(f"broker {broker_id} has no {self.inter_broker.name} listener")
        conn = self._connections.get(broker_id)
        if conn is None or conn.address != address:
            self.drop(broker_id)
            conn = self._connections[broker_id] = BrokerConnection(address, self.connect, self.inter_broker)
        return conn

    def drop(self, broker_id: int) -> None:
        """Close the broker's connection (after a failed call): the next `get` opens a new one."""
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for broker_id in list(self._connections):
            self.drop(broker_id)
