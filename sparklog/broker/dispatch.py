"""Frames to handlers and back: the `App` the server runs (see server.py for the contract).

Rule 1: a frame that decodes goes to `handlers.HANDLERS[api_key]`; its response body is encoded against the
request's header, so the correlation id and the response header version always match the request.
Rule 2: an ApiVersions request of a version we do not serve gets the v0 fallback (error 35 and our range);
any other unknown api or version, and any frame that does not parse, closes the connection (Kafka's
behaviour: there is no version in which an answer could be encoded).
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass

from sparklog.broker.handlers import HANDLERS
from sparklog.broker.server import CloseConnection
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.errors import RemoteProtocolError, UnsupportedVersion
from sparklog.protocol.frame import NEED_DATA, FrameDecoder
from sparklog.protocol.registry import decode_request, encode_api_versions_fallback, encode_response

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DispatcherStatistics:
    requests_by_api: dict
    unsupported_versions: int
    malformed: int


class Dispatcher:
    """Decodes a frame, runs its handler, encodes the reply (server.App)."""

    NEED_DATA = NEED_DATA
    FRAME_ERRORS = (RemoteProtocolError,)

    def __init__(self, state) -> None:
        self.state = state
        self.max_frame_bytes = state.config.socket_request_max_bytes
        self._by_api: dict[int, int] = {}
        self._unsupported = 0
        self._malformed = 0

    def new_decoder(self) -> FrameDecoder:
        return FrameDecoder(self.max_frame_bytes)

    def handle_frame(self, frame):
        try:
            request = decode_request(frame)
        except UnsupportedVersion as exc:
            self._unsupported += 1
            if exc.api_key == ApiKey.API_VERSIONS:
                return [encode_api_versions_fallback(exc.correlation_id)]
            raise CloseConnection(str(exc)) from None
        except RemoteProtocolError as exc:
            self._malformed += 1
            raise CloseConnection(str(exc)) from None
        header = request.header
        by_api = self._by_api
        by_api[header.api_key] = by_api.get(header.api_key, 0) + 1
        body = HANDLERS[header.api_key](request, self.state)
        if body is None:
            return None
        if inspect.iscoroutine(body):
            return self._encode_later(header, body)
        return encode_response(header, body)

    async def _encode_later(self, header, pending):
        body = await pending
        return None if body is None else encode_response(header, body)

    def statistics(self) -> DispatcherStatistics:
        names = {}
        for key, count in self._by_api.items():
            try:
                names[ApiKey(key).name] = count
            except ValueError:
                names[str(key)] = count
        return DispatcherStatistics(names, self._unsupported, self._malformed)

    def close(self) -> None:
        pass
