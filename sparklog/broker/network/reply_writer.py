"""ReplyWriter: how one reply's chunks leave on a connection's socket (server.py's Connection writes through it).

A reply is a list of chunks: `bytes`-like ones, and record sets (a storage FileSlice: `position`, `__len__`,
`send_to(fd, start, count)` = os.sendfile under its pin, and `pinned()`).
Rule: records-zero-copy: on a plaintext connection a record set is sent with `os.sendfile` straight from the
segment file when the transport's buffer is empty, the bytes before it (the response head) sent with
MSG_MORE just before, so head and records leave in one packet instead of a small one of their own (on
loopback the sender pays for the receiver's TCP work per packet); whatever the socket did not take at once
is sent by a task that waits for writability on a dup of the socket's descriptor (asyncio's own
`loop.sendfile` would `lseek` the segment's shared descriptor, which the storage may rely on).
Rule: tls-copies-records: a TLS connection's record sets are read from their segments into the buffer the
transport encrypts (`_write_copied`): `os.sendfile` cannot carry TLS. `Connection.tls` is the one branch, in
`_write`.
Rule: slice-pinned-while-sent: a record set sends under its pin (FileSlice's descriptor rule) until its last
byte has left: retention or a topic deletion may close its segment while a slow client drains, and the
descriptor number must not go to another file meanwhile. A segment closed before the pin is taken, a
sendfile that fails or a file shorter than its slice ends the connection (the response cannot be completed).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any, Awaitable, Iterable

from sparklog.storage.errors import StorageError

log = logging.getLogger(__name__)

BUFFERS = (bytes, bytearray, memoryview)  # the chunk classes written as they are; any other is a record set


class ReplyWriter:
    """The writing half of a connection: a base of server.Connection, whose state it uses (the transport,
    the socket's descriptor and its dup, the counters, `closed`, `tls`); it keeps none of its own."""

    __slots__ = ()
    closed: bool
    tls: Any
    transport: Any
    counters: dict[str, int]
    _fd: int
    _dup_fd: int
    _dup_sock: socket.socket | None

    def _write(self, chunks: Iterable) -> Awaitable[None] | None:
        """Write a reply; returns a coroutine to await if a record set could not be sent at once."""
        if self.closed:
            return None
        if self.tls is not None:
            return self._write_copied(chunks)
        if chunks.__class__ is list and len(chunks) == 2 and chunks[0].__class__ is bytes:
            records = chunks[1]
            if records.__class__ not in BUFFERS:
                return self._write_head_and_records(chunks[0], records)
        transport = self.transport
        pending: list = []
        chunks = list(chunks)
        for index, chunk in enumerate(chunks):
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                pending.append(chunk)
                continue
            length = len(chunk)
            if not length:
                continue
            if pending:
                self._write_head(pending[0] if len(pending) == 1 else b"".join(pending))
                pending = []
            sent = self._sendfile_now(chunk, length)
            if sent < 0:
                return None  # connection broken and closed
            if sent < length:
                return self._write_rest(chunk, sent, length, chunks[index + 1:])
        if pending:
            transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
        return None

    def _write_copied(self, chunks: Iterable) -> None:
        """A reply on a TLS connection: record sets read from their segments into the buffer the transport
        encrypts (the copy path; sendfile would send them unencrypted)."""
        try:
            data = [chunk if chunk.__class__ in BUFFERS else self._copied(chunk) for chunk in chunks]
        except StorageError as exc:  # LogClosedError: the segment was closed before the read
            log.warning("record set is gone (%s); closing the connection", exc)
            self.transport.abort()
            self.closed = True
            return None
        self.transport.write(b"".join(data))
        return None

    def _copied(self, file_slice) -> bytes:
        data = file_slice.read_bytes()
        self.counters["bytes_copied"] += len(data)
        return data

    def _write_head_and_records(self, head: bytes, records) -> Awaitable[None] | None:
        """`_write` of a one-partition Fetch reply ([head, record set], the common shape), in one call: the head
        with MSG_MORE, then one sendfile, when nothing is buffered before them; else as `_write` does."""
        length = len(records)
        if not length or self.transport.get_write_buffer_size():
            return self._write_buffered_head(head, records, length)
        sock = self._dup_sock if self._dup_sock is not None else self._dup()
        try:
            sent = sock.send(head, socket.MSG_MORE)
        except OSError:  # BlockingIOError and the rest: the transport's write meets it again (and closes)
            sent = 0
        if sent != len(head):
            return self._write_buffered_head(memoryview(head)[sent:], records, length)
        sent = self._sendfile_now(records, length, 0)
        if sent < 0:
            return None  # connection broken and closed
        if sent < length:
            return self._write_rest(records, sent, length, [])
        return None

    def _write_buffered_head(self, head, records, length: int) -> Awaitable[None] | None:
        """The head through the transport; the records after it, by the task that waits for the buffer."""
        self.transport.write(head)
        return self._write_rest(records, 0, length, []) if length else None

    def _write_head(self, head) -> None:
        """The bytes before a record set: sent with MSG_MORE when nothing is buffered before them, so the kernel
        puts them in one segment with the sendfile's first bytes (one packet, not a small one of its own),
        else (or for what the socket did not take) through the transport as any write."""
        transport = self.transport
        if not transport.get_write_buffer_size():
            try:
                sent = self._dup().send(head, socket.MSG_MORE)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = 0  # the transport's write below meets the same error and closes as usual
            if sent == len(head):
                return
            head = memoryview(head)[sent:]
        transport.write(head)

    def _dup(self) -> socket.socket:
        """A socket object over a dup of the connection's descriptor (asyncio refuses add_writer on a
        transport's own descriptor, and its transport socket has no send with flags)."""
        if self._dup_sock is None:
            self._dup_sock = socket.socket(fileno=os.dup(self._fd))
            self._dup_fd = self._dup_sock.fileno()
        return self._dup_sock

    def _sendfile_now(self, file_slice, length: int, buffered: int | None = None) -> int:
        """Send what the socket takes right now, without blocking; -1 if the connection broke. `buffered`:
        the transport's buffered bytes, if the caller knows them (else asked here): nothing is sent past them.

        The slice sends under its pin (`send_to`), as `_write_rest` pins it: a bare `fileno()` could be a
        number that a concurrent close (retention, topic deletion) released and another open() reused."""
        if buffered is None:
            buffered = self.transport.get_write_buffer_size()
        if buffered:
            return 0
        try:
            sent = file_slice.send_to(self._fd, 0, length)
        except (BlockingIOError, InterruptedError):
            return 0
        except StorageError as exc:  # LogClosedError: the segment was closed before the pin
            log.warning("record set of %s is gone (%s); closing the connection", file_slice, exc)
            self.transport.abort()
            self.closed = True
            return -1
        except OSError as exc:
            log.debug("sendfile failed: %s", exc)
            self.transport.abort()
            self.closed = True
            return -1
        self.counters["sendfile"] += sent
        return sent

    async def _write_rest(self, file_slice, sent: int, length: int, rest: list) -> None:
        """Finish a record set the socket did not take at once, then the chunks after it.

        The slice stays pinned until its last byte is sent (FileSlice's descriptor rule): retention or a
        topic deletion may close its segment while a slow client drains, and the descriptor number must not
        go to another file meanwhile. A segment closed before the pin is taken ends the connection.
        """
        self.counters["sendfile_slow"] += 1
        loop = asyncio.get_running_loop()
        try:
            with file_slice.pinned() as in_fd:
                await self._sendfile_rest(loop, file_slice, in_fd, file_slice.position + sent, length - sent)
        except StorageError as exc:  # LogClosedError: the response cannot be completed
            log.warning("record set of %s is gone (%s); closing the connection", file_slice, exc)
            self.transport.abort()
            self.closed = True
            return
        if rest and not self.closed:
            more = self._write(rest)
            if more is not None:
                await more

    async def _sendfile_rest(self, loop, file_slice, in_fd: int, position: int, remaining: int) -> None:
        await self._drain(loop)
        self._dup()
        while remaining and not self.closed:
            try:
                n = os.sendfile(self._dup_fd, in_fd, position, remaining)
            except (BlockingIOError, InterruptedError):
                await self._writable(loop)
                continue
            except OSError as exc:
                log.debug("sendfile failed: %s", exc)
                self.transport.abort()
                self.closed = True
                return
            if n == 0:  # the file is shorter than the slice said: the response cannot be completed
                log.warning("record set of %s ended early; closing the connection", file_slice)
                self.transport.abort()
                self.closed = True
                return
            self.counters["sendfile"] += n
            position += n
            remaining -= n

    async def _writable(self, loop) -> None:
        self._dup()
        fut = loop.create_future()
        fd = self._dup_fd
        loop.add_writer(fd, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            loop.remove_writer(fd)

    async def _drain(self, loop) -> None:
        """Wait until the transport has written everything it buffered (its writer runs in the same
        loop iteration as ours when the socket becomes writable; sleep(0) lets it go first)."""
        while self.transport.get_write_buffer_size() and not self.closed:
            await self._writable(loop)
            await asyncio.sleep(0)
