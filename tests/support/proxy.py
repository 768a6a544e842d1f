"""A TCP proxy whose link can be cut and healed: a network partition between two processes on one machine.

    with TcpProxy(("127.0.0.1", broker_port)) as proxy:   # listens on proxy.port
        ...                                                 # peers connect to 127.0.0.1:proxy.port
        proxy.cut()            # every connection is reset; new ones are accepted and closed at once
        proxy.cut(blackhole=True)  # connections stay open but nothing passes (a silent partition: peers
                                   # see timeouts, not resets)
        proxy.cut(client_ids={"replica-2"})  # only the connections whose first Kafka request names one of
                                             # these client ids (broker 2's replica fetcher): a broker cut
                                             # off from its peers while clients still get through
        proxy.heal()           # new connections pass again (cut connections stay dead, as after a real one)
        proxy.drop_responses(api_key=0, count=3)  # the next 3 Kafka requests with that api key (Produce) reach
                                   # the broker, but their connection is reset before the broker's next
                                   # bytes reach the client: the client cannot know whether the write landed

Rule 1: one thread accepts, two threads per connection pump bytes; `close()` stops them all and closes every
socket. Rule 2: bounded memory: each pump moves at most BUFFER_BYTES at a time and never queues.
Rule 3: a connection's client id is read from the request header of its first chunk (Kafka's framing: size,
api key, version, correlation id, client id); a connection whose first chunk is not a Kafka request has
none and is cut only by a cut of everything.
Rule 4: drop_responses follows Kafka's framing of the client's stream (`RequestFrames`), not its chunks: a
client writes several requests at once (librdkafka after a reconnect: Metadata, then the retried Produce)
and a request may come in pieces. Looking only where a chunk starts let such a Produce through, so an
armed drop was never spent and a test counting its drops failed (a fresh-clone run, test_idempotence).
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from dataclasses import dataclass

BUFFER_BYTES = 65536
POLL_S = 0.05  # how often pumps and the acceptor look at the cut flag
_REQUEST_API_KEY = struct.Struct(">ih")  # a Kafka request frame starts with its size and api key
_REQUEST_HEADER = struct.Struct(">ihhih")  # size, api key, api version, correlation id, client id length


@dataclass(frozen=True)
class ProxyStatistics:
    accepted: int
    refused: int  # accepted while cut and closed at once
    open_connections: int
    bytes_forwarded: int
    cut: bool
    dropped_responses: int = 0  # connections reset after a request armed by drop_responses()


class TcpProxy:
    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = target
        self._listener = socket.create_server((host, port))
        self._listener.settimeout(POLL_S)
        self.host, self.port = self._listener.getsockname()[:2]
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._threads: list[threading.Thread] = []
        self._cut = False
        self._blackhole = False
        self._cut_ids: frozenset[str] | None = None  # None: a cut cuts every connection
        self._client_ids: dict[tuple, str | None] = {}  # pair -> client id of its first request (Rule 3)
        self._closed = False
        self._accepted = self._refused = self._forwarded = 0
        self._drop_api_key, self._drops_left, self._dropped, self._cut_on_drop = None, 0, 0, False
        self._doomed: set = set()  # pairs whose next answer is dropped (and the connection reset)
        self._frames: dict[tuple, RequestFrames] = {}  # pair -> its client stream's framing (Rule 4)
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"proxy-{self.port}", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def statistics(self) -> ProxyStatistics:
        with self._lock:
            return ProxyStatistics(self._accepted, self._refused, len(self._pairs), self._forwarded, self._cut,
                                   self._dropped)

    def drop_responses(self, api_key: int, count: int = 1, then_cut: bool = False) -> None:
        """The next `count` requests of `api_key`, on as many connections, pass to the target; the target's
        next bytes on each such connection are dropped and the connection is reset (module docstring).
        With `then_cut`, the link is cut at that moment too, until heal(): the client's retry waits.
        Requests are found by Kafka's framing wherever they start in the client's chunks (Rule 4)."""
        with self._lock:
            self._drop_api_key, self._drops_left, self._cut_on_drop = api_key, count, then_cut

    def cut(self, blackhole: bool = False, client_ids=None) -> None:
        """Partition the link: reset every connection (or, with `blackhole`, stop passing bytes); with
        `client_ids`, only the connections of those Kafka clients (Rule 3), reset now and at their first
        request afterwards."""
        with self._lock:
            self._cut, self._blackhole = True, blackhole and client_ids is None
            self._cut_ids = None if client_ids is None else frozenset(client_ids)
            pairs = [p for p in self._pairs if self._is_cut(p)] if not self._blackhole else []
        for pair in pairs:
            self._close_pair(pair)

    def heal(self) -> None:
        with self._lock:
            self._cut = self._blackhole = False
            self._cut_ids = None

    def _is_cut(self, pair) -> bool:
        """Under the lock."""
        return self._cut and (self._cut_ids is None or self._client_ids.get(pair) in self._cut_ids)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pairs = list(self._pairs)
        self._listener.close()
        for pair in pairs:
            self._close_pair(pair)
        self._acceptor.join(timeout=5)
        for thread in list(self._threads):
            thread.join(timeout=5)

    def __enter__(self) -> "TcpProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with self._lock:
                self._accepted += 1
                refuse = self._cut and not self._blackhole and self._cut_ids is None
                if refuse:
                    self._refused += 1
            if refuse:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
            for src, dst in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._pump, args=(pair, src, dst, src is client), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _pump(self, pair, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        poller = select.poll()  # not select(): it cannot watch descriptors >= 1024
        try:
            poller.register(src, select.POLLIN)
            while not self._closed:
                if self._blackhole:
                    threading.Event().wait(POLL_S)
                    continue
                if not poller.poll(POLL_S * 1000) or self._blackhole:  # a blackhole may have begun meanwhile
                    continue
                data = src.recv(BUFFER_BYTES)
                if not data:
                    break
                if from_client:
                    if self._identify(pair, data):
                        break
                    self._maybe_doom(pair, data)
                elif pair in self._doomed:
                    with self._lock:
                        self._dropped += 1
                    if self._cut_on_drop:
                        self.cut()
                    break  # the answer is lost with the connection
                dst.sendall(data)
                with self._lock:
                    self._forwarded += len(data)
        except (OSError, ValueError):
            pass
        finally:
            self._close_pair(pair)

    def _maybe_doom(self, pair, data: bytes) -> None:
        with self._lock:
            api_keys = self._frames.setdefault(pair, RequestFrames()).api_keys(data)
            if self._drops_left and pair not in self._doomed and self._drop_api_key in api_keys:
                self._drops_left -= 1
                self._doomed.add(pair)

    def _identify(self, pair, data: bytes) -> bool:
        """Record the client id of the pair's first chunk (Rule 3); whether the pair is cut."""
        with self._lock:
            if pair not in self._client_ids:
                self._client_ids[pair] = _client_id(data)
            return self._is_cut(pair)

    def _close_pair(self, pair) -> None:
        with self._lock:
            self._pairs.discard(pair)
            self._doomed.discard(pair)
            self._client_ids.pop(pair, None)
            self._frames.pop(pair, None)
        for sock in pair:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class RequestFrames:
    """One connection's client-to-broker bytes cut into Kafka request frames (size, then that many bytes, the
    api key first): the api key of every frame whose header completes in a chunk (Rule 4)."""

    def __init__(self) -> None:
        self._head = b""  # the part of the next frame's size and api key read so far
        self._left = 0  # bytes of the current frame not yet seen

    def api_keys(self, data: bytes) -> list[int]:
        keys, pos = [], 0
        while pos < len(data):
            if self._left:
                step = min(self._left, len(data) - pos)
                self._left -= step
                pos += step
                continue
            take = _REQUEST_API_KEY.size - len(self._head)
            self._head += data[pos:pos + take]
            pos += take
            if len(self._head) < _REQUEST_API_KEY.size:
                break
            size, api_key = _REQUEST_API_KEY.unpack(self._head)
            self._head = b""
            keys.append(api_key)
            self._left = max(0, size - 2)  # the api key was the frame's first 2 bytes
        return keys


def _client_id(data: bytes) -> str | None:
    """The client id of a Kafka request starting `data`, or None if `data` does not start with one."""
    if len(data) < _REQUEST_HEADER.size:
        return None
    size, _api, _version, _correlation, length = _REQUEST_HEADER.unpack_from(data)
    end = _REQUEST_HEADER.size + length
    if size < end - 4 or length < 0 or len(data) < end:
        return None
    return data[_REQUEST_HEADER.size:end].decode("utf-8", "replace")
