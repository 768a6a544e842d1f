"""The cuttable TCP proxy against a local echo server: bytes pass, cut resets or silences, heal restores."""

import socket
import struct
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.proxy import RequestFrames, TcpProxy


@pytest.fixture
def echo(request):
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_one(conn):
        conn.settimeout(None)  # blocking whatever the listener's timeout or a library's default timeout
        with conn:
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)

    def serve():
        server.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                if stop.is_set():
                    return
                continue  # e.g. a connection aborted before it was accepted: keep serving
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def finish():
        stop.set()
        thread.join()
        server.close()

    request.addfinalizer(finish)
    return server.getsockname()


def roundtrip(proxy, payload=b"ping", timeout=10.0):
    with socket.create_connection((proxy.host, proxy.port), timeout=timeout) as conn:
        conn.sendall(payload)
        return conn.recv(4096)


def test_bytes_pass_both_ways(echo):
    with TcpProxy(echo) as proxy:
        assert roundtrip(proxy, b"x" * 1000)[:4] == b"xxxx"
        deadline = time.monotonic() + 10  # the pump counts after it has passed the bytes on
        while proxy.statistics().bytes_forwarded < 1000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.statistics().bytes_forwarded >= 1000


def test_cut_resets_open_and_new_connections_and_heal_restores(echo):
    with TcpProxy(echo) as proxy:
        conn = socket.create_connection((proxy.host, proxy.port), timeout=2)
        conn.sendall(b"a")
        assert conn.recv(10) == b"a"
        proxy.cut()
        try:
            conn.sendall(b"b")
            assert conn.recv(10) == b""  # closed by the proxy
        except OSError:
            pass  # or reset
        conn.close()
        with pytest.raises(OSError):
            data = roundtrip(proxy)
            if data == b"":
                raise ConnectionResetError("closed at once")
        assert proxy.statistics().refused >= 1
        proxy.heal()
        assert roundtrip(proxy) == b"ping"


def test_blackhole_keeps_connections_open_but_silent(echo):
    with TcpProxy(echo) as proxy:
        conn = socket.create_connection((proxy.host, proxy.port), timeout=0.5)
        proxy.cut(blackhole=True)
        conn.sendall(b"lost")
        with pytest.raises((TimeoutError, socket.timeout)):
            conn.recv(10)
        proxy.heal()
        assert conn.recv(10) == b"lost"  # held in the kernel's buffers, delivered once healed
        conn.close()


def test_drop_responses_passes_the_request_and_loses_the_answer_with_the_connection(echo):
    produce, metadata = struct.pack(">ihh", 8, 0, 9) + b"body", struct.pack(">ihh", 8, 3, 9) + b"body"
    with TcpProxy(echo) as proxy:
        proxy.drop_responses(api_key=0, count=1)
        assert roundtrip(proxy, metadata) == metadata  # another api key passes
        try:
            assert roundtrip(proxy, produce) == b""  # the echo (the answer) is dropped, the connection closed
        except OSError:
            pass  # or reset
        assert roundtrip(proxy, produce) == produce  # only `count` of them
        assert proxy.statistics().dropped_responses == 1


def test_drop_responses_finds_the_request_inside_a_chunk_and_across_chunks(echo):
    """A client may write several requests at once (librdkafka after a reconnect: Metadata, then the retried
    Produce), and a request may come in pieces: the proxy follows Kafka's framing, not the chunks."""
    produce, metadata = struct.pack(">ihh", 8, 0, 9) + b"body", struct.pack(">ihh", 8, 3, 9) + b"body"
    with TcpProxy(echo) as proxy:
        proxy.drop_responses(api_key=0, count=2)
        try:
            assert roundtrip(proxy, metadata + produce) == b""  # the Produce behind the Metadata is found
        except OSError:
            pass
        with socket.create_connection((proxy.host, proxy.port), timeout=10) as conn:
            for piece in (metadata[:3], metadata[3:] + produce[:5], produce[5:]):  # headers split: frame by frame
                conn.sendall(piece)
                time.sleep(0.1)
            try:
                while conn.recv(4096):  # echoes until the Produce's answer is dropped and the connection reset
                    pass
            except OSError:
                pass
        deadline = time.monotonic() + 10
        while proxy.statistics().dropped_responses < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.statistics().dropped_responses == 2


@given(frames=st.lists(st.tuples(st.integers(0, 70), st.binary(max_size=40)), max_size=8), data=st.data())
def test_request_frames_finds_every_api_key_however_the_stream_is_cut(frames, data):
    stream = b"".join(struct.pack(">ih", 2 + len(body), key) + body for key, body in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    parser, found = RequestFrames(), []
    for start, end in zip([0] + cuts, cuts + [len(stream)]):
        found += parser.api_keys(stream[start:end])
    assert found == [key for key, _ in frames]


def kafka_request(client_id: str) -> bytes:
    name = client_id.encode()
    body = struct.pack(">hhih", 18, 3, 1, len(name)) + name
    return struct.pack(">i", len(body)) + body


def test_a_cut_by_client_id_cuts_only_those_clients(echo):
    with TcpProxy(echo) as proxy:
        replica = socket.create_connection((proxy.host, proxy.port), timeout=2)
        replica.sendall(kafka_request("replica-2"))
        assert replica.recv(100).endswith(b"replica-2")
        proxy.cut(client_ids={"replica-2"})
        assert replica.recv(100) == b""  # reset now
        replica.close()
        assert roundtrip(proxy, kafka_request("consumer")).endswith(b"consumer")  # others pass
        assert roundtrip(proxy, kafka_request("replica-2")) == b""  # cut again at its first request
        proxy.heal()
        assert roundtrip(proxy, kafka_request("replica-2")).endswith(b"replica-2")


def test_bytes_pass_when_the_process_holds_over_a_thousand_descriptors(echo, tmp_path):
    """select() cannot watch a descriptor >= 1024: the pumps must not depend on it (a long test session holds
    that many, and every connection through the proxy then closed at once)."""
    import os

    held = [os.open(tmp_path, os.O_RDONLY) for _ in range(1100)]
    try:
        with TcpProxy(echo) as proxy:
            assert roundtrip(proxy, b"through") == b"through"
    finally:
        for fd in held:
            os.close(fd)
