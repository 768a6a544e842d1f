"""Size-prefixed framing of the Kafka wire protocol, sans-IO: bytes in, whole frames out.

Every request and response is ``size:int32`` (big-endian) followed by ``size`` bytes.
Rule 1: a size prefix is checked against the limit as soon as its 4 bytes are here, before one byte of
its body is buffered beyond the chunk that carried the prefix.
Rule 2: each byte received is copied into the buffer once and out of it at most once (a frame that is
alone in the buffer is handed out without a copy), so many small frames in one chunk and one large frame
in many chunks both cost linear time. A `bytes` chunk is not copied at all when nothing is buffered, nor
the part of it after the bytes that complete a buffered frame (the common case of a broker's reads of
pipelined requests: a read ends inside a frame, the next one completes it): only that frame is assembled,
and the rest of the chunk waits as it is until the frames before it have been taken.
Rule 3: ``take_run(scan, limit)`` hands the frames at the head of the buffer to ``scan`` in one call (the
broker's per-read Produce scan, produce_run.py) and drops the ones it took (a frame that a chunk completed
and the frames of the chunk behind it make one run); what it returns holds views of
the buffer, which is then left to them: the decoder goes on with a view of the bytes after the run (none
when the run ends the read, the common case), which is never written to.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from sparklog.protocol.errors import FrameTooLarge, LocalProtocolError, RemoteProtocolError

__all__ = ["FrameDecoder", "NEED_DATA", "CLOSED", "DEFAULT_MAX_FRAME_BYTES"]

# Kafka's socket.request.max.bytes default (100 MiB)
DEFAULT_MAX_FRAME_BYTES = 104_857_600

_SIZE = struct.Struct(">i")  # the frame size prefix


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_DATA = _Sentinel("NEED_DATA")
"""``next_frame()`` has no complete frame: call ``receive_data`` with more bytes."""

CLOSED = _Sentinel("CLOSED")
"""``next_frame()`` after ``receive_data(b"")`` once every complete frame has been returned."""


class FrameDecoder:
    """Splits a byte stream into frames.

    Usage (the loop of a connection)::

        decoder = FrameDecoder(max_frame_bytes=100 * 1024 * 1024)
        decoder.receive_data(sock.recv(65536))        # b"" when the peer closed
        while (frame := decoder.next_frame()) is not NEED_DATA and frame is not CLOSED:
            handle(frame)                             # bytes or memoryview: the bytes after the size

    ``receive_data(b"")`` means end of stream, as in h11: frames already complete are still returned,
    then ``next_frame()`` returns ``CLOSED``, or raises ``RemoteProtocolError`` if the stream ended in
    the middle of a frame. Data received after end of stream raises ``LocalProtocolError``.

    A size prefix that is negative or above ``max_frame_bytes`` raises ``FrameTooLarge`` from the call
    (``receive_data`` or ``next_frame``) that first sees its 4 bytes; the decoder is then unusable and
    every later call raises the same error again (the connection must be closed).
    """

    __slots__ = ("max_frame_bytes", "_buf", "_start", "_eof", "_error", "_checked", "_rest")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 0:
            raise LocalProtocolError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._buf: bytearray | bytes | memoryview = bytearray()  # or a received bytes chunk (or a view of one) kept as it is (Rule 2)
        self._start = 0  # where the next frame's size prefix begins in _buf
        self._rest: memoryview | None = None  # a view of the received bytes after those that completed the frame in _buf
        self._eof = False
        self._error: FrameTooLarge | None = None
        self._checked = -1  # the _start whose size prefix has been checked

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buf) - self._start + (0 if self._rest is None else len(self._rest))

    def receive_data(self, data: bytes) -> None:
        """Add bytes from the stream; ``b""`` marks its end. Raises ``FrameTooLarge`` (see class doc)."""
        if self._error is not None:
            raise self._error
        if not data:
            self._eof = True
            return
        if self._eof:
            raise LocalProtocolError("receive_data after end of stream")
        buf, start = self._buf, self._start
        if self._rest is None and data.__class__ is bytes:
            if start == len(buf):  # nothing buffered: keep the chunk
                self._buf, self._start, self._checked = data, 0, -1
                self._check_size()
                return
            size = self._check_size()
            needed = size + 4 - (len(buf) - start)
            if 0 <= size and 0 < needed < len(data):  # the chunk completes the buffered frame, and goes on
                # (needed <= 0: whole frames wait in the buffer; the chunk goes behind them, below)
                frame = bytearray(memoryview(buf)[start:])
                frame += memoryview(data)[:needed]
                self._buf, self._start, self._checked = frame, 0, 0
                self._rest = memoryview(data)[needed:]
                return
        owned = self._own()
        owned += data
        self._check_size()

    def _own(self) -> bytearray:
        """Make _buf a bytearray holding every buffered byte (it may have been a kept chunk, or _rest waiting),
        and return it."""
        buf, start, rest = self._buf, self._start, self._rest
        if isinstance(buf, bytearray) and rest is None:
            return buf
        owned = bytearray(memoryview(buf)[start:])
        if rest is not None:
            owned += rest
            self._rest = None
        self._checked = 0 if self._checked == start else -1
        self._buf, self._start = owned, 0
        return owned

    def _next_chunk(self) -> None:
        """_buf is used up: go on with the rest of the last chunk, if it waits (Rule 2)."""
        rest = self._rest
        self._buf = bytearray() if rest is None else rest
        self._rest = None
        self._start = 0
        self._checked = -1

    def _check_size(self) -> int:
        """The size of the frame at _start, or -1 while its prefix is incomplete; raises when over."""
        buf, start = self._buf, self._start
        if len(buf) - start < 4:
            return -1
        size: int = _SIZE.unpack_from(buf, start)[0]
        if self._checked != start:
            if size < 0 or size > self.max_frame_bytes:
                self._error = FrameTooLarge(size, self.max_frame_bytes)
                self._buf = bytearray()
                self._start = 0
                self._rest = None
                raise self._error
            self._checked = start
        return size

    def next_frame(self) -> bytes | memoryview | _Sentinel:
        """The next complete frame (``bytes`` or ``memoryview``), else ``NEED_DATA`` or ``CLOSED``."""
        if self._error is not None:
            raise self._error
        size = self._check_size()
        buf, start = self._buf, self._start
        if size < 0 or len(buf) - start - 4 < size:
            return self._incomplete()
        end = start + 4 + size
        if start == 0 and end == len(buf):
            # the frame is alone in the buffer: hand the buffer itself out, no copy
            self._next_chunk()
            return memoryview(buf)[4:]
        frame = bytes(memoryview(buf)[start + 4:end])
        self._start = end
        if end == len(buf) and self._rest is not None:
            self._next_chunk()
        return frame

    def take_run(self, scan: Callable[[memoryview, int, int, int], tuple[list[Any], int]], limit: int) -> list[Any]:
        """The items ``scan(view, start, limit, max_frame_bytes) -> (items, position after them)`` makes of
        the whole frames at the head (Rule 3); [] when it takes none. ``scan`` must stop before any frame
        that is not whole or whose size is outside 0..max_frame_bytes: ``next_frame`` raises for those."""
        if self._error is not None:
            raise self._error
        buf, start = self._buf, self._start
        if len(buf) - start < 4:
            return []
        view = memoryview(buf)
        items, end = scan(view, start, limit, self.max_frame_bytes)
        if not items:
            view.release()  # nothing of the buffer is held: it may grow again
            return items
        if end < len(buf):
            self._buf = view[end:]  # kept as it is: a later receive_data copies only what it must (Rule 2)
            self._start = 0
            self._checked = -1
            return items
        rest = self._rest
        self._next_chunk()
        if rest is not None and len(items) < limit:  # the frame a chunk completed, and the run behind it
            items += self.take_run(scan, limit - len(items))
        return items

    def _incomplete(self) -> _Sentinel:
        buf, start = self._buf, self._start
        if start and start * 2 >= len(buf) and buf.__class__ is bytearray:
            # compact: the consumed prefix is at least half the buffer, so moves stay linear overall
            del buf[:start]
            self._start = 0
            self._checked = 0 if self._checked == start else -1
        if self._eof:
            if self.buffered_bytes:
                raise RemoteProtocolError(f"stream ended inside a frame ({self.buffered_bytes} bytes buffered)")
            return CLOSED
        return NEED_DATA
