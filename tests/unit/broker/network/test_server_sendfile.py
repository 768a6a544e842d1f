"""The slow sendfile path against segment deletion: a record set being drained by a slow client keeps
its file open (reply_writer.py `_write_rest` pins the FileSlice), so no other file's bytes can go out."""

from __future__ import annotations

import os
import socket
import tempfile
import time

import pytest

from sparklog.protocol import ApiKey, FetchPartition, FetchRequest, FetchTopic
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.records.batch import build_batch, iter_records

from unit.broker.handlers.test_handlers import logs, state  # noqa: F401 - fixtures
from unit.broker.network.test_server import recv_frame, served  # noqa: F401 - fixtures


def test_a_segment_deleted_while_a_slow_client_drains_it_still_sends_its_own_bytes(served, state):  # noqa: F811
    plog = state.partitions.snapshot.leading[("t", 0)]
    payload = [os.urandom(1500) for _ in range(2000)]  # ~3 MB in one segment
    for value in payload:
        plog.append(build_batch([(None, value, None, None)]))
    body = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=64 * 1024 * 1024, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=64 * 1024 * 1024)])])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slow reader: the send must wait
    sock.settimeout(20)
    sock.connect((served.host, served.port))
    decoys = []
    try:
        sock.sendall(encode_request(ApiKey.FETCH, 11, 7, "t", body))
        deadline = time.monotonic() + 10
        while served.statistics().sendfile_slow_paths < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert served.statistics().sendfile_slow_paths == 1  # the async path holds the slice now
        plog.config = plog.config.with_overrides({"retention.bytes": "1", "file.delete.delay.ms": "0"})
        plog.roll()
        plog.append(build_batch([(None, b"after", None, None)]))
        assert plog.enforce_retention() == 1  # deletes the segment being sent, at once
        for _ in range(20):  # take the freed descriptor numbers with files of other bytes
            decoy = tempfile.TemporaryFile()
            decoy.write(b"\xee" * 4_000_000)
            decoy.flush()
            decoys.append(decoy)
        correlation_id, response = decode_response(ApiKey.FETCH, 11, recv_frame(sock))
    finally:
        sock.close()
        for decoy in decoys:
            decoy.close()
    assert correlation_id == 7
    records = response.responses[0].partitions[0].records
    assert [r.value for r in iter_records(bytes(records))] == payload


class _BareDescriptorForbidden:
    """A real FileSlice whose bare `fileno()` is off limits: the immediate sendfile path must pin."""

    def __init__(self, file_slice):
        self.slice = file_slice
        self.position = file_slice.position
        self.pins = 0

    def fileno(self):
        raise AssertionError("the descriptor was used without pinning the slice")

    def pinned(self):
        self.pins += 1
        return self.slice.pinned()

    def send_to(self, out_fd, start, count):
        self.pins += 1  # FileSlice.send_to sends under the pin
        return self.slice.send_to(out_fd, start, count)

    def __len__(self):
        return len(self.slice)


class _Transport:
    """The two calls `_sendfile_now` makes on its transport, over a real socket."""

    def __init__(self):
        self.aborted = False

    def get_write_buffer_size(self):
        return 0

    def abort(self):
        self.aborted = True


def _connection(served, sock):  # noqa: F811
    from sparklog.broker.network.server import Connection

    conn = Connection(served.server)
    conn.transport = _Transport()
    conn._fd = sock.fileno()
    return conn


def test_the_immediate_sendfile_pins_the_slice_it_sends(served, state):  # noqa: F811
    plog = state.partitions.snapshot.leading[("t", 0)]
    plog.append(build_batch([(None, b"pinned bytes", None, None)]))
    piece = plog.read(0, 1 << 20)
    out, peer = socket.socketpair()
    try:
        guarded = _BareDescriptorForbidden(piece)
        assert _connection(served, out)._sendfile_now(guarded, len(piece)) == len(piece)
        assert guarded.pins == 1
        assert peer.recv(len(piece), socket.MSG_WAITALL) == piece.read_bytes()
    finally:
        out.close()
        peer.close()


def test_the_immediate_sendfile_of_a_closed_segment_ends_the_connection_not_the_server(served, state):  # noqa: F811
    plog = state.partitions.snapshot.leading[("t", 0)]
    plog.append(build_batch([(None, b"gone", None, None)]))
    piece = plog.read(0, 1 << 20)
    plog.close()
    out, peer = socket.socketpair()
    try:
        conn = _connection(served, out)
        assert conn._sendfile_now(piece, len(piece)) == -1
        assert conn.transport.aborted and conn.closed
    finally:
        out.close()
        peer.close()


class _BufferingTransport(_Transport):
    """A transport that says it holds `buffered` bytes and records what is written through it."""

    def __init__(self, buffered):
        super().__init__()
        self.buffered = buffered
        self.written = []

    def get_write_buffer_size(self):
        return self.buffered

    def write(self, data):
        self.written.append(bytes(data))


def test_a_one_partition_reply_goes_out_whole_as_head_then_records(served, state):  # noqa: F811
    plog = state.partitions.snapshot.leading[("t", 0)]
    for value in (b"first", b"second", b"third"):
        plog.append(build_batch([(None, value, None, None)]))
    piece = plog.read(1, 1 << 20)  # starts at the second batch, inside the file
    head = b"\x00\x00\x00\x2a" + bytes(range(40))
    out, peer = socket.socketpair()
    try:
        conn = _connection(served, out)
        assert conn._write([head, piece]) is None  # all of it sent at once
        want = head + piece.read_bytes()
        assert peer.recv(len(want), socket.MSG_WAITALL) == want
        peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            peer.recv(1)  # and nothing more
        assert not conn.transport.aborted
    finally:
        out.close()
        peer.close()


def test_a_one_partition_reply_behind_buffered_bytes_waits_for_them(served, state):  # noqa: F811
    """Bytes still in the transport's buffer go first: the head joins them there, and the records are left to
    the task that drains the buffer (nothing is sendfile'd past them)."""
    plog = state.partitions.snapshot.leading[("t", 0)]
    plog.append(build_batch([(None, b"records", None, None)]))
    piece = plog.read(0, 1 << 20)
    out, peer = socket.socketpair()
    try:
        conn = _connection(served, out)
        conn.transport = _BufferingTransport(100)
        pending = conn._write([b"head", piece])
        assert pending is not None and conn.transport.written == [b"head"]
        pending.close()  # not run here: the records would go out after the buffer drains
        peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            peer.recv(1)  # nothing went to the socket directly
    finally:
        out.close()
        peer.close()
