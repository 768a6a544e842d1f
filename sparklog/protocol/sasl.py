"""SaslHandshake (key 17), versions 0-1, and SaslAuthenticate (key 36), versions 0-2 (v2+ flexible).
Transcribed from Kafka's SaslHandshakeRequest.json / SaslHandshakeResponse.json and
SaslAuthenticateRequest.json / SaslAuthenticateResponse.json (KIP-43, KIP-152, KIP-368).

By version: a SaslHandshake v0 is followed by the mechanism's tokens sent raw, each behind a 4-byte size
prefix and no Kafka header (the broker's `sasl_authenticator` reads them as frames); after a v1 handshake they
travel in SaslAuthenticate requests. SaslAuthenticate v1 adds ``session_lifetime_ms`` (KIP-368: 0 = no limit;
the client must re-authenticate before it runs out).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["SaslHandshakeRequest", "SaslHandshakeResponse", "SaslAuthenticateRequest", "SaslAuthenticateResponse",
           "HANDSHAKE_RAW_TOKENS_VERSION"]

HANDSHAKE_RAW_TOKENS_VERSION = 0  # a handshake of this version is followed by raw tokens, not SaslAuthenticate

SaslHandshakeRequest = message("SaslHandshakeRequest", api_key=ApiKey.SASL_HANDSHAKE, versions="0-1",
                               module=__name__, fields=[
    F("mechanism", "string", "0+"),
])

SaslHandshakeResponse = message("SaslHandshakeResponse", api_key=ApiKey.SASL_HANDSHAKE, versions="0-1",
                                module=__name__, fields=[
    F("error_code", "int16", "0+"),
    F("mechanisms", "[]string", "0+"),
])

SaslAuthenticateRequest = message("SaslAuthenticateRequest", api_key=ApiKey.SASL_AUTHENTICATE, versions="0-2",
                                  flexible="2+", module=__name__, fields=[
    F("auth_bytes", "bytes", "0+"),
])

SaslAuthenticateResponse = message("SaslAuthenticateResponse", api_key=ApiKey.SASL_AUTHENTICATE, versions="0-2",
                                   flexible="2+", module=__name__, fields=[
    F("error_code", "int16", "0+"),
    F("error_message", "string", "0+", nullable="0+", default=None),
    F("auth_bytes", "bytes", "0+"),
    F("session_lifetime_ms", "int64", "1+", default=0),
])
