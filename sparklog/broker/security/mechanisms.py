"""The server side of the SASL mechanisms sparklog serves: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
RFC 7677; the exchange is `scramp`'s, the credentials sparklog's, from ZooKeeper).

Contract: `step(token) -> (reply_token, user)`; `user` is None while more tokens are expected, the authenticated
name once the exchange is complete. Any refusal raises `AuthenticationFailed` with the reason for the broker's
log (the client is told only that authentication failed). A mechanism takes no token after it completed.
Rule (SCRAM nonce): the client-final's nonce must be the server's combined nonce (client's + server's, RFC 5802),
or, in exactly one other form, the client's nonce followed by that combined nonce: librdkafka before 2.6.1
(Debian's kcat, librdkafka 2.0) sends that (confluentinc/librdkafka#4895) and Kafka 3.8.1-3.9 accept it. Both
hold the server's nonce whole, so a replayed exchange is refused either way; the proof is checked over the
message as sent.
"""

from __future__ import annotations

import hmac
from typing import Callable

from scramp import ScramException, ScramMechanism
from scramp.core import Nonce

__all__ = ["AuthenticationFailed", "PlainServer", "ScramServer", "new_mechanism"]


class AuthenticationFailed(Exception):
    """The client's token was refused; str() is the reason (for the log, not the client)."""


class PlainServer:
    """PLAIN: one token `authzid NUL authcid NUL passwd`, checked against the JAAS users (Kafka's PlainServer)."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self._done = False

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        if self._done:
            raise AuthenticationFailed("PLAIN takes one token")
        self._done = True
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("PLAIN token is not authzid NUL username NUL password")
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN token is not UTF-8") from None
        if not user or (authzid and authzid != user):
            raise AuthenticationFailed(f"PLAIN username {user!r} empty or not the authorization id {authzid!r}")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed(f"invalid username or password for {user!r}")
        return b"", user


Lookup = Callable[[str, str], "tuple[bytes, bytes, bytes, int] | None"]


class ScramServer:
    """SCRAM: client-first -> server-first, client-final -> server-final (the proof and nonce checked)."""

    def __init__(self, mechanism: str, lookup: Lookup, s_nonce: str | None = None) -> None:
        self._mechanism = mechanism
        self._lookup = lookup
        self._server = ScramMechanism(mechanism).make_server(self._auth_info, s_nonce=s_nonce)
        self._user: str | None = None
        self._step = 0

    def _auth_info(self, user: str):
        found = self._lookup(user, self._mechanism)
        if found is None:
            raise ScramException(f"no {self._mechanism} credential for {user!r}")
        self._user = user
        return found

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        self._step += 1
        try:
            text = token.decode("utf-8")
            if self._step == 1:
                self._server.set_client_first(text)
                return self._server.get_server_first().encode(), None
            if self._step == 2:
                self._accept_librdkafka_nonce(text)
                self._server.set_client_final(text)
                return self._server.get_server_final().encode(), self._user
        except (ScramException, UnicodeDecodeError, ValueError) as exc:
            raise AuthenticationFailed(f"{self._mechanism}: {exc}") from None
        raise AuthenticationFailed(f"{self._mechanism} takes two tokens")

    def _accept_librdkafka_nonce(self, client_final: str) -> None:
        """The old librdkafka form (Rule (SCRAM nonce)) becomes the nonce scramp expects; nothing else does."""
        echoed = next((part[2:] for part in client_final.split(",") if part.startswith("r=")), None)
        combined = str(self._server.nonce)
        client_nonce = combined[:len(combined) - len(str(self._server.s_nonce))]
        if echoed == client_nonce + combined:
            self._server.nonce = Nonce(echoed)


def new_mechanism(mechanism: str, plain_users: dict[str, str], lookup: Lookup):
    return PlainServer(plain_users) if mechanism == "PLAIN" else ScramServer(mechanism, lookup)
