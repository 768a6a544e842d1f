"""The client side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), sans-IO: tokens in,
tokens out. sparklog's clients and the broker's own inter-broker connections both log in with it; the SCRAM
exchange is `scramp`'s.

Contract: `first()` is the first token to send; then `step(server_token)` returns the next token, or None when
the exchange is complete. A server reply that does not verify (a SCRAM server-final whose signature is wrong:
the server does not know the password) raises `SaslClientError`.
`login_exchange` is the whole login as Kafka frames it (SaslHandshake v1, then SaslAuthenticate v1 per token): a
generator that yields each request `(api_key, version, body)` and is sent each response body; it returns once
the login completed and raises `SaslLoginRefused` (one line: what was refused and why) otherwise. The caller
does the I/O (blocking in client/sasl.py, asyncio in broker/security/inter_broker.py).
"""

from __future__ import annotations

from typing import Any, Generator

from scramp import ScramClient as _ScrampClient
from scramp import ScramException

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

__all__ = ["SaslClientError", "SaslLoginRefused", "PlainClient", "ScramClient", "new_client", "login_exchange",
           "CLIENT_MECHANISMS"]

CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslClientError(Exception):
    """The server's SASL reply is malformed or does not prove the server knows the credential."""


class SaslLoginRefused(Exception):
    """The broker refused the login, or could not prove it knows the SCRAM credential; str() says which."""


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self._token = b"\x00" + username.encode("utf-8") + b"\x00" + password.encode("utf-8")

    def first(self) -> bytes:
        return self._token

    def step(self, server_token: bytes) -> bytes | None:
        return None


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str, c_nonce: str | None = None) -> None:
        self._client = _ScrampClient([mechanism], username, password, c_nonce=c_nonce)
        self._step = 0

    def first(self) -> bytes:
        first: str = self._client.get_client_first()
        return first.encode("utf-8")

    def step(self, server_token: bytes) -> bytes | None:
        self._step += 1
        try:
            if self._step == 1:
                self._client.set_server_first(server_token.decode("utf-8"))
                final: str = self._client.get_client_final()
                return final.encode("utf-8")
            if self._step == 2:
                self._client.set_server_final(server_token.decode("utf-8"))
                return None
        except (ScramException, UnicodeDecodeError) as exc:
            raise SaslClientError(f"SCRAM server reply refused: {exc}") from None
        raise SaslClientError("SCRAM exchange already complete")


def new_client(mechanism: str, username: str, password: str) -> PlainClient | ScramClient:
    """The client of `mechanism` (one of CLIENT_MECHANISMS); ValueError naming it otherwise."""
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        return ScramClient(mechanism, username, password)
    raise ValueError(f"sasl.mechanism {mechanism!r} is not supported (one of {', '.join(CLIENT_MECHANISMS)})")


Request = tuple[int, int, Any]


def login_exchange(mechanism: str, username: str, password: str) -> Generator[Request, Any, None]:
    """The SASL login's requests (module docstring)."""
    handshake = yield ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism)
    if handshake.error_code:
        raise SaslLoginRefused(f"SASL mechanism {mechanism} refused (error {handshake.error_code}; the broker "
                               f"enables {', '.join(handshake.mechanisms)})")
    client = new_client(mechanism, username, password)
    token: bytes | None = client.first()
    while token is not None:
        reply = yield ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=token)
        if reply.error_code:
            raise SaslLoginRefused(f"SASL {mechanism} authentication of {username!r} failed: "
                                   f"{reply.error_message or reply.error_code}")
        try:
            token = client.step(bytes(reply.auth_bytes))
        except SaslClientError as exc:
            raise SaslLoginRefused(str(exc)) from None
