"""Request and response headers (Kafka's RequestHeader.json and ResponseHeader.json).

    request header v1   api_key int16, api_version int16, correlation_id int32, client_id nullable string
    request header v2   v1 + tagged fields; client_id keeps its int16 length (never compact)
    response header v0  correlation_id int32
    response header v1  v0 + tagged fields

v2/v1 apply when the (api, version) is flexible -- except ApiVersions responses, always header v0.
Written by hand rather than through schema.py: they are decoded before we know which schema applies.
"""

from __future__ import annotations

import struct

from sparklog.protocol.types import read_uvarint
from sparklog.records import BytesLike

__all__ = ["RequestHeader", "REQUEST_HEADER_PREFIX", "decode_client_id", "skip_tagged_fields",
           "encode_request_header", "NO_TAGGED_FIELDS"]

REQUEST_HEADER_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_I16 = struct.Struct(">h")
NO_TAGGED_FIELDS = b"\x00"  # an empty tagged-field section


class RequestHeader:
    """The header of a request. ``flexible`` says whether it was (or will be) header v2."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "flexible")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None = None,
                 flexible: bool = False):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.flexible = flexible

    def __eq__(self, other: object) -> bool:
        if type(other) is not RequestHeader:
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, so unhashable: as the generated structs

    def __repr__(self) -> str:
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r})")


def decode_client_id(buf: BytesLike, pos: int, end: int) -> tuple[str | None, int]:
    """The nullable int16-length client_id at ``pos``."""
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        return None, pos
    if pos + n > end:
        raise ValueError("client_id past the end")
    return str(buf[pos:pos + n], "utf-8"), pos + n


def skip_tagged_fields(buf: BytesLike, pos: int, end: int) -> int:
    """Skip a tagged-field section (headers define no tags we use); returns the position after it."""
    count, pos = read_uvarint(buf, pos)
    if count * 2 > end - pos:  # each tagged field takes at least two bytes (its tag and its size)
        raise ValueError("tagged field count past the end")
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > end:
            raise ValueError("tagged field past the end")
    return pos


def encode_request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                          flexible: bool) -> bytes:
    """Request header v1, or v2 when ``flexible``."""
    out = REQUEST_HEADER_PREFIX.pack(api_key, api_version, correlation_id)
    if client_id is None:
        out += b"\xff\xff"
    else:
        raw = client_id.encode("utf-8")
        out += _I16.pack(len(raw)) + raw
    return out + NO_TAGGED_FIELDS if flexible else out
