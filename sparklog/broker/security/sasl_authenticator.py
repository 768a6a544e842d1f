"""One connection's SASL authentication on a SASL listener (Kafka's SaslServerAuthenticator), as a state machine.

States and transitions (anything not listed closes the connection unanswered, as Kafka does):

    HANDSHAKE     ApiVersions                          -> HANDSHAKE (answered as on any listener)
                  SaslHandshake, mechanism enabled     -> AUTHENTICATE (v1) or RAW_TOKENS (v0)
                  SaslHandshake, mechanism not enabled -> FAILED (UNSUPPORTED_SASL_MECHANISM, the enabled list)
    AUTHENTICATE  SaslAuthenticate, token accepted     -> AUTHENTICATE (more to come) or COMPLETE
                  SaslAuthenticate, token refused      -> FAILED (SASL_AUTHENTICATION_FAILED)
    RAW_TOKENS    a token (size-prefixed, no header)   -> RAW_TOKENS (more to come) or COMPLETE; refused: closed
    COMPLETE      every request is served; SaslHandshake v1 starts a re-authentication (KIP-368) -> AUTHENTICATE,
                  which must end in the same principal (else FAILED)
    FAILED        anything                             -> closed

Rule 1: the session's `gate` is this object until COMPLETE, None from then on: the dispatcher hands every frame
of a gated session here, so nothing else (not the Produce and Fetch fast paths either) serves it.
Rule 2: at COMPLETE `session.principal = "User:<name>"`, and with connections.max.reauth.ms > 0 the reply carries
session_lifetime_ms (SaslAuthenticate v1+) and the connection is closed at its end unless re-authenticated.
Rule 3 (bounded): before COMPLETE a frame over sasl.server.max.receive.size is refused from its size prefix (the
decoder's limit, raised to socket.request.max.bytes at COMPLETE); a connection not COMPLETE within
AUTHENTICATION_TIMEOUT_S of opening is closed (`session.close_at`, which server.py's reaper enforces).
Rule 4: a refusal is answered after connection.failed.authentication.delay.ms, then the connection is closed; each
refusal is one log line (host, mechanism, reason); the client learns only that authentication failed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time

from sparklog.broker.network.server import CloseConnection
from sparklog.broker.security.credential_cache import CredentialCache
from sparklog.broker.security.mechanisms import AuthenticationFailed, new_mechanism
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.errors import RemoteProtocolError
from sparklog.protocol.registry import decode_request, encode_response
from sparklog.protocol.sasl import HANDSHAKE_RAW_TOKENS_VERSION, SaslAuthenticateResponse, SaslHandshakeResponse

__all__ = ["SaslState", "SaslAuthenticator", "SaslListener", "AUTHENTICATION_TIMEOUT_S"]

log = logging.getLogger(__name__)

AUTHENTICATION_TIMEOUT_S = 10.0  # ours: Kafka leaves it to connections.max.idle.ms, which a slow sender evades
_CLOSE_AFTER_FAILURE_S = 1.0  # the failure reply leaves first, then server.py's reaper closes
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
FAILED_MESSAGE = "Authentication failed: Invalid username or password"
_API_VERSIONS = int(ApiKey.API_VERSIONS)
_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)
_SIZE_BYTES = 4


class SaslState(enum.Enum):
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    RAW_TOKENS = "RAW_TOKENS"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class SaslListener:
    """What authenticating on one SASL listener needs: its mechanisms, PLAIN's users, the SCRAM credentials."""

    def __init__(self, name: str, sasl_config, lookup, max_frame_bytes: int) -> None:
        self.name = name
        self.mechanisms = sasl_config.mechanisms(name)
        self.plain_users = sasl_config.plain_users(name)
        self.lookup = lookup  # (user, mechanism) -> scramp auth info or None (CredentialCache.lookup)
        self.failed_delay_s = sasl_config.failed_authentication_delay_ms / 1000
        self.reauth_ms = sasl_config.reauth_ms
        self.max_receive_size = sasl_config.max_receive_size
        self.max_frame_bytes = max_frame_bytes
        self.failures = 0

    def new_exchange(self, mechanism: str):
        return new_mechanism(mechanism, self.plain_users, self.lookup)


class SaslAuthenticator:
    """The state machine of one connection (module docstring); `serve` answers a decoded request as usual."""

    def __init__(self, listener_sasl, session, decoder) -> None:
        self.listener = listener_sasl  # SaslListener: mechanisms, users, credential lookup, delays
        self.session = session
        self.decoder = decoder
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self._exchange = None
        self._user: str | None = None
        session.gate = self
        session.close_at = time.monotonic() + AUTHENTICATION_TIMEOUT_S
        if decoder is not None:
            decoder.max_frame_bytes = min(decoder.max_frame_bytes, listener_sasl.max_receive_size)

    def handle_frame(self, frame, serve):
        """A frame of a gated session (Rule 1); `serve(request)` answers an allowed request as any other."""
        if self.state is SaslState.RAW_TOKENS:
            return self._raw_token(bytes(frame))
        if self.state is SaslState.FAILED:
            raise CloseConnection("request after failed SASL authentication")
        try:
            request = decode_request(frame)
        except RemoteProtocolError as exc:
            raise CloseConnection(f"before SASL authentication: {exc}") from None
        api_key = request.header.api_key
        if api_key == _API_VERSIONS and self.state is SaslState.HANDSHAKE:
            return serve(request)
        return self.handle_request(request)

    def handle_request(self, request):
        """SaslHandshake or SaslAuthenticate, in HANDSHAKE, AUTHENTICATE or COMPLETE (re-authentication)."""
        api_key = request.header.api_key
        if api_key == _HANDSHAKE and self.state in (SaslState.HANDSHAKE, SaslState.COMPLETE):
            return self._handshake(request)
        if api_key == _AUTHENTICATE and self.state is SaslState.AUTHENTICATE:
            return self._authenticate(request)
        raise CloseConnection(f"{ApiKey(api_key).name} not allowed in SASL state {self.state.value}")

    def _handshake(self, request):
        mechanism = request.body.mechanism
        enabled = list(self.listener.mechanisms)
        reauth = self.state is SaslState.COMPLETE
        if mechanism not in enabled or (reauth and (request.header.api_version == HANDSHAKE_RAW_TOKENS_VERSION
                                                    or mechanism != self.mechanism)):
            self._fail(mechanism, f"mechanism {mechanism!r} not enabled ({', '.join(enabled)})")
            return encode_response(request.header, SaslHandshakeResponse(error_code=UNSUPPORTED_SASL_MECHANISM,
                                                                         mechanisms=enabled))
        self.mechanism = mechanism
        self._exchange = self.listener.new_exchange(mechanism)
        raw = request.header.api_version == HANDSHAKE_RAW_TOKENS_VERSION
        self.state = SaslState.RAW_TOKENS if raw else SaslState.AUTHENTICATE
        self.session.gate = self
        return encode_response(request.header, SaslHandshakeResponse(error_code=0, mechanisms=enabled))

    def _authenticate(self, request):
        try:
            token, user = self._exchange.step(bytes(request.body.auth_bytes))
            self._check_same_principal(user)
        except AuthenticationFailed as exc:
            self._fail(self.mechanism, str(exc))
            body = SaslAuthenticateResponse(error_code=SASL_AUTHENTICATION_FAILED, error_message=FAILED_MESSAGE,
                                            auth_bytes=b"")
            return self._delayed(encode_response(request.header, body))
        lifetime_ms = 0 if user is None else self._complete(user)
        return encode_response(request.header, SaslAuthenticateResponse(
            error_code=0, error_message=None, auth_bytes=token, session_lifetime_ms=lifetime_ms))

    def _raw_token(self, token: bytes):
        try:
            reply, user = self._exchange.step(token)
        except AuthenticationFailed as exc:
            self._fail(self.mechanism, str(exc))
            raise CloseConnection("SASL authentication failed (raw tokens)") from None
        if user is not None:
            self._complete(user)
        return [len(reply).to_bytes(_SIZE_BYTES, "big") + reply]

    def _check_same_principal(self, user: str | None) -> None:
        if user is not None and self._user is not None and user != self._user:
            raise AuthenticationFailed(f"re-authentication as {user!r} on a connection of {self._user!r}")

    def _complete(self, user: str) -> int:
        """COMPLETE (Rule 2); the session lifetime to tell the client (0: none)."""
        self.state = SaslState.COMPLETE
        self._user = user
        self._exchange = None
        self.session.principal = f"User:{user}"
        self.session.gate = None
        if self.decoder is not None:
            self.decoder.max_frame_bytes = self.listener.max_frame_bytes
        lifetime_ms = self.listener.reauth_ms
        self.session.close_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else None
        return lifetime_ms

    def _fail(self, mechanism: str | None, reason: str) -> None:
        log.info("SASL authentication failed from %s on %s (%s): %s", self.session.host or "?",
                 self.listener.name, mechanism, reason)
        self.listener.failures += 1
        self.state = SaslState.FAILED
        self.session.gate = self
        self.session.close_at = time.monotonic() + self.listener.failed_delay_s + _CLOSE_AFTER_FAILURE_S

    def _delayed(self, reply):
        delay = self.listener.failed_delay_s

        async def later():
            await asyncio.sleep(delay)
            return reply

        return later()


def sasl_listeners(state) -> dict[str, SaslListener]:
    """{listener name: its SaslListener} for each of the broker's listeners whose security protocol is SASL_*
    (SASL_PLAINTEXT, SASL_SSL); SCRAM credentials come from one CredentialCache over the broker's ZooKeeper
    (none without one)."""
    config = state.config
    names = [e.name for e in config.listeners if config.listener_protocols.get(e.name, "").startswith("SASL_")]
    if not names:
        return {}
    lookup = CredentialCache(state.zk).lookup if state.zk is not None else (lambda user, mechanism: None)
    return {name: SaslListener(name, config.sasl, lookup, config.socket_request_max_bytes) for name in names}
