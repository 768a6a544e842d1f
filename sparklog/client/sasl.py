"""A client connection's SASL login (librdkafka's property names: `security.protocol=SASL_PLAINTEXT`,
`sasl.mechanism`, `sasl.username`, `sasl.password`), done on the freshly connected, still blocking socket before
the connection carries any request: SaslHandshake v1, then SaslAuthenticate v1 with each token of the mechanism
(protocol/sasl_client.py) until the exchange completes.

Rule: a refusal (UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED, a server that cannot prove it knows the
SCRAM credential) raises `SaslAuthenticationError` naming the broker and the reason: not retriable, a wrong
password does not become a timeout.
Rule (JAAS): `sasl.jaas.config`, Kafka's Java client form, gives the user and password instead of
`sasl.username`/`sasl.password` (never both): one entry, the login module of `sasl.mechanism`
(`ScramLoginModule` for SCRAM-*, `PlainLoginModule` for PLAIN), with `username` and `password`. A refusal names
the setting, never its text (it holds the password).
"""

from __future__ import annotations

import itertools
import socket
import struct
from dataclasses import dataclass, field

from sparklog.client.errors import KafkaConnectionError
from sparklog.protocol.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasError, parse_jaas
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.protocol.sasl_client import CLIENT_MECHANISMS, SaslLoginRefused, login_exchange

__all__ = ["SaslLogin", "SaslAuthenticationError", "login_of", "SECURITY_PROTOCOLS"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")  # Kafka's, all spoken
MAX_REPLY_BYTES = 1 << 20
_SIZE = struct.Struct(">i")


class SaslAuthenticationError(KafkaConnectionError):
    """The broker refused this client's SASL login (or could not prove its own knowledge of the credential)."""

    retriable = False


@dataclass(frozen=True)
class SaslLogin:
    mechanism: str
    username: str
    password: str = field(repr=False)  # never shown in a log line or an error


def login_of(config: dict) -> SaslLogin | None:
    """The SASL login a resolved client config asks for, None for PLAINTEXT; ValueError naming a setting the
    client cannot honour (no silent downgrade)."""
    protocol = str(config.get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"security.protocol={protocol} is not supported by sparklog's client (one of "
                         f"{', '.join(SECURITY_PROTOCOLS)})")
    if protocol in ("PLAINTEXT", "SSL"):
        return None
    mechanism = str(config.get("sasl.mechanism") or "").upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ValueError(f"sasl.mechanism={mechanism or '(unset)'} is not supported by sparklog's client (one of "
                         f"{', '.join(CLIENT_MECHANISMS)})")
    if config.get("sasl.jaas.config") is not None:
        return _jaas_login(mechanism, config)
    if config.get("sasl.username") is None or config.get("sasl.password") is None:
        raise ValueError(f"security.protocol={protocol} needs sasl.username and sasl.password (or sasl.jaas.config)")
    return SaslLogin(mechanism, config["sasl.username"], config["sasl.password"])


def _jaas_login(mechanism: str, config: dict) -> SaslLogin:
    """The Rule (JAAS): the login of `sasl.jaas.config`; ValueError naming the setting, not its text."""
    if config.get("sasl.username") is not None or config.get("sasl.password") is not None:
        raise ValueError("sasl.jaas.config and sasl.username/sasl.password are both set: give one of them")
    module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    try:
        entries = parse_jaas(str(config["sasl.jaas.config"]))
    except JaasError:
        raise ValueError(f"sasl.jaas.config does not parse: expected '{module} required username=\"..\" "
                         "password=\"..\";'") from None
    if len(entries) != 1 or entries[0].login_module != module:
        found = ", ".join(e.login_module for e in entries) or "no entry"
        raise ValueError(f"sasl.jaas.config must be one {module} entry for sasl.mechanism={mechanism}, not {found}")
    options = entries[0].options
    if "username" not in options or "password" not in options:
        raise ValueError(f"sasl.jaas.config's {module} entry needs username and password")
    return SaslLogin(mechanism, options["username"], options["password"])


def authenticate(sock: socket.socket, login: SaslLogin, client_id: str, where: str) -> None:
    """Log in on the blocking `sock` (its timeout bounds each read); raises SaslAuthenticationError."""
    steps = login_exchange(login.mechanism, login.username, login.password)
    try:
        request = next(steps)
        for correlation in itertools.count(1):
            request = steps.send(_call(sock, *request, client_id, correlation))
    except StopIteration:
        return
    except SaslLoginRefused as exc:
        raise SaslAuthenticationError(f"{where}: {exc}") from None


def _call(sock: socket.socket, api_key: int, version: int, body, client_id: str, correlation: int):
    sock.sendall(encode_request(api_key, version, correlation, client_id, body))
    (size,) = _SIZE.unpack(_read(sock, _SIZE.size))
    if not 0 < size <= MAX_REPLY_BYTES:
        raise KafkaConnectionError(f"SASL reply of {size} bytes")
    got, reply = decode_response(api_key, version, _read(sock, size))
    if got != correlation:
        raise KafkaConnectionError(f"SASL reply with correlation id {got}, expected {correlation}")
    return reply


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise KafkaConnectionError("connection closed during SASL authentication")
        data += chunk
    return bytes(data)
