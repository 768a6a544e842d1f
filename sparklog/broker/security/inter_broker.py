"""How this broker opens its own connections to other brokers (replica fetchers, transaction markers): over the
inter-broker listener, logged in with `sasl.mechanism.inter.broker.protocol` and the username/password of that
mechanism's JAAS entry when the listener is SASL_*, as Kafka's brokers do.

Rule: a refused login raises `InterBrokerAuthenticationFailed` (a ConnectionError: the caller's connection-error
path logs it and retries after its backoff), and the socket is closed.
"""

from __future__ import annotations

import asyncio
import itertools
import struct

from sparklog.protocol.registry import decode_response, encode_request
from sparklog.protocol.sasl_client import SaslLoginRefused, login_exchange

__all__ = ["InterBrokerAuthenticationFailed", "inter_broker_connector", "open_plain"]

_SIZE = struct.Struct(">i")
MAX_REPLY_BYTES = 1 << 20


class InterBrokerAuthenticationFailed(ConnectionError):
    """Another broker refused this broker's SASL login."""


async def open_plain(host: str, port: int, client_id: str, timeout: float):
    return await asyncio.wait_for(asyncio.open_connection(host, port), timeout)


def inter_broker_connector(config, listener=None):
    """`async connect(host, port, client_id, timeout) -> (reader, writer)` for this broker's configuration:
    opened as the inter-broker `listener` (network/inter_broker.py's InterBrokerListener: TLS when it speaks
    SSL) and logged in when that listener is SASL_*."""
    name = config.inter_broker_listener_name or (config.listeners[0].name if config.listeners else "")

    async def open_(host: str, port: int, client_id: str, timeout: float):
        if listener is None:
            return await open_plain(host, port, client_id, timeout)
        return await listener.open_connection(host, port, timeout)

    if not config.listener_protocols.get(name, "").startswith("SASL_"):
        return open_

    mechanism, username, password = config.sasl.login(name)

    async def connect(host: str, port: int, client_id: str, timeout: float):
        reader, writer = await open_(host, port, client_id, timeout)
        try:
            await asyncio.wait_for(_login(reader, writer, mechanism, username, password, client_id), timeout)
        except BaseException:
            writer.close()
            raise
        return reader, writer

    return connect


async def _login(reader, writer, mechanism: str, username: str, password: str, client_id: str) -> None:
    steps = login_exchange(mechanism, username, password)
    try:
        request = next(steps)
        for correlation in itertools.count(1):
            request = steps.send(await _call(reader, writer, *request, client_id, correlation))
    except StopIteration:
        return
    except SaslLoginRefused as exc:
        raise InterBrokerAuthenticationFailed(str(exc)) from None


async def _call(reader, writer, api_key: int, version: int, body, client_id: str, correlation: int):
    writer.write(encode_request(api_key, version, correlation, client_id, body))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
    if not 0 < size <= MAX_REPLY_BYTES:
        raise InterBrokerAuthenticationFailed(f"SASL reply of {size} bytes")
    got, reply = decode_response(api_key, version, await reader.readexactly(size))
    if got != correlation:
        raise InterBrokerAuthenticationFailed(f"SASL reply with correlation id {got}, expected {correlation}")
    return reply
