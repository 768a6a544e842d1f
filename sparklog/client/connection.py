"""One socket per broker and one selector loop per client, over the shared sans-IO codec.

Rule 1: every method of `BrokerConnection` and `NetworkClient.poll` runs on the client's one I/O thread;
other threads only `submit()` (a deque append plus a wake-up byte) and wait on the returned future.
Rule 2: requests are pipelined up to `max.in.flight.requests.per.connection`; responses come back in
request order, so each frame's correlation id must equal the oldest in-flight request's, as kafka-python's
`KafkaProtocol` checks. A mismatch means the stream is out of sync: the connection closes and every
request in flight fails (retriable).
Rule 3: a request that needs no response (Produce with acks=0) completes as soon as it is written.

Rule 5 (throttles, KIP-219): a response carrying throttle_time_ms > 0 holds that connection: nothing more is
sent to that broker until the delay has passed (requests wait in its backlog), as the broker itself stops
reading the connection for as long. `throttle_statistics()` counts the throttled responses and their time.

Rule 4 (unreachable brokers): a failed connect names the address and why (`reachability.failure_reason`:
connection refused, name not resolved, timed out); the broker is not tried again before its reconnect
backoff (exponential from `reconnect.backoff.ms` to `reconnect.backoff.max.ms`, see backoff.py), and a
warning is logged at the first failure and then at most every `UNREACHABLE_WARNING_INTERVAL_S` while the
failures go on. `unreachable()` is what a caller that gives up puts in its error.

Rule 6 (TLS): with `security.protocol=ssl` or `sasl_ssl` (librdkafka's names: `ssl.ca.location`,
`ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`, `ssl.endpoint.identification.algorithm` https|none), every connection
is TLS, its handshake done in `connect()` within the connection timeout, the broker's certificate verified
against the CA (the system's when `ssl.ca.location` is unset) and its host name checked unless the algorithm
is none; a failed handshake is a failed connect (Rule 4). No connection falls back to plaintext. Over TLS,
writes go whole through `SSLSocket.send` (a write OpenSSL asked to repeat is repeated with the same bytes),
and a read takes the bytes OpenSSL has already decrypted too (the selector does not see them).
With sasl_ssl the SASL login (client/sasl.py) runs inside the TLS connection, before any request.

Connection states:  NEW --connect ok--> CONNECTED --error / timeout / close--> CLOSED (never reused; the
next request to that broker opens a new connection, after the reconnect backoff if the last one failed).
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import deque
from typing import Any, Callable

from sparklog.client.backoff import ExponentialBackoff
from sparklog.client.errors import CorrelationIdMismatch, KafkaConnectionError, RequestTimedOut
from sparklog.client.sasl import SaslAuthenticationError, SaslLogin, authenticate, login_of
from sparklog.coordination.reachability import failure_reason
from sparklog.protocol.frame import NEED_DATA, CLOSED, FrameDecoder

logger = logging.getLogger(__name__)

RECV_BYTES = 1 << 20  # one recv() reads up to 1 MiB: a fetch response arrives in few calls
RECONNECT_BACKOFF = ExponentialBackoff(50, 1_000)  # Kafka's reconnect.backoff.ms and reconnect.backoff.max.ms
_UNEXPECTED_ERROR_BACKOFF = ExponentialBackoff(100, 1_000)  # retry.backoff.ms and retry.backoff.max.ms defaults
UNREACHABLE_WARNING_INTERVAL_S = 10.0  # librdkafka also repeats a broker's connect failure only now and then
_CORRELATION = struct.Struct(">i")
_CORRELATION_LIMIT = 1 << 31
_MAX_IOV = 64  # buffers per sendmsg (Linux allows 1024)


def _codec():
    # Imported on first use so that the client's pure parts (partitioner, accumulator, registries) load
    # without the protocol package's API modules.
    from sparklog import protocol

    return protocol


class ResponseFuture:
    """The outcome of one request: `wait()` returns the decoded response body or raises its error.

    `callback(future)`, if given, runs on the I/O thread when the future completes.
    """

    __slots__ = ("value", "error", "_event", "callback", "node_id")

    def __init__(self, callback: Callable[["ResponseFuture"], Any] | None = None) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self._event = threading.Event()
        self.callback = callback
        self.node_id: int | None = None

    def done(self) -> bool:
        return self._event.is_set()

    def set_result(self, value: Any) -> None:
        self.value = value
        self._finish()

    def set_error(self, error: BaseException) -> None:
        self.error = error
        self._finish()

    def _finish(self) -> None:
        self._event.set()
        if self.callback is not None:
            try:
                self.callback(self)
            except Exception:
                logger.exception("response callback raised")

    def wait(self, timeout: float | None = None) -> Any:
        if not self._event.wait(timeout):
            raise RequestTimedOut(f"no response within {timeout}s")
        if self.error is not None:
            raise self.error
        return self.value


class _Request:
    __slots__ = ("node_id", "api_key", "api_version", "body", "future", "expect_response", "timeout")

    def __init__(self, node_id, api_key, api_version, body, future, expect_response, timeout):
        self.node_id = node_id
        self.api_key = api_key
        self.api_version = api_version
        self.body = body
        self.future = future
        self.expect_response = expect_response
        self.timeout = timeout


class _InFlight:
    __slots__ = ("correlation_id", "api_key", "api_version", "future", "deadline")

    def __init__(self, correlation_id, api_key, api_version, future, deadline):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.future = future
        self.deadline = deadline


# The client's protocols not spoken yet, refused by tls_context in this one place (SASL lifts its entries).
UNSPOKEN_PROTOCOLS: dict[str, str] = {}  # every Kafka security protocol is spoken
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def tls_context(config) -> ssl.SSLContext | None:
    """The TLS context of a client config's security.protocol and ssl.* settings (Rule 6); None for plaintext.
    Raises ValueError naming the setting that cannot be used (a file that does not load, an unspoken protocol)."""
    protocol = config["security.protocol"]
    if protocol in UNSPOKEN_PROTOCOLS:
        raise ValueError(f"security.protocol={protocol} is not supported ({UNSPOKEN_PROTOCOLS[protocol]})")
    if protocol not in ("ssl", "sasl_ssl"):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca, cert, key = config["ssl.ca.location"], config["ssl.certificate.location"], config["ssl.key.location"]
    try:
        if ca:
            ctx.load_verify_locations(cafile=ca)
        if cert or key:
            ctx.load_cert_chain(cert or key, key, password=config["ssl.key.password"] or None)
    except (OSError, ssl.SSLError) as exc:
        which = "ssl.ca.location" if ca and not ctx.get_ca_certs() else "ssl.certificate.location/ssl.key.location"
        raise ValueError(f"{which}: cannot load {exc.strerror or exc}") from None
    ctx.check_hostname = config["ssl.endpoint.identification.algorithm"] == "https"
    return ctx


class BrokerConnection:
    """One TCP connection to one broker; pipelined requests checked by correlation id."""

    def __init__(self, node_id: int, host: str, port: int, client_id: str, max_in_flight: int,
                 max_frame_bytes: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_in_flight = max_in_flight
        self.sock: socket.socket | None = None
        self.decoder = FrameDecoder(max_frame_bytes)
        self.in_flight: deque[_InFlight] = deque()
        self.backlog: deque[_Request] = deque()  # accepted but waiting for an in-flight slot
        self.out: deque = deque()  # encoded bytes not yet written
        self.unwritten_acks0: deque = deque()  # futures of acks=0 requests, completed once written
        self.closed = False
        self._next_correlation = 0
        self.throttled_until = 0.0  # Rule 5: nothing is sent before this (monotonic seconds)
        self.ssl_context = ssl_context
        self._tls_write: bytes | None = None  # a TLS write OpenSSL asked to repeat (Rule 6)

    def connect(self, timeout: float, login: SaslLogin | None = None) -> None:
        """Connect, and log in when `login` is given (client/sasl.py) before any request is sent."""
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.ssl_context is not None:  # the handshake, within the same timeout (the socket still blocks)
                sock = self.ssl_context.wrap_socket(sock, server_hostname=self.host)
            if login is not None:  # SASL_SSL: the login runs inside TLS
                authenticate(sock, login, self.client_id, f"broker {self.node_id} at {self.host}:{self.port}")
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        self.sock = sock

    def _send(self, out: deque) -> int:
        """Bytes of `out`'s head written now: gathered with sendmsg, or joined for TLS (Rule 6)."""
        if self.ssl_context is None:
            return self.sock.sendmsg(list(out)[:_MAX_IOV])
        if self._tls_write is None:
            self._tls_write = b"".join(list(out)[:_MAX_IOV])
        sent = self.sock.send(self._tls_write)  # SSLWantWriteError: the same bytes are sent again next time
        self._tls_write = None
        return sent

    def can_send(self) -> bool:
        return not self.closed and len(self.in_flight) < self.max_in_flight

    def send(self, request: _Request, now: float) -> None:
        """Encode `request` and queue its bytes; the caller checked `can_send()`."""
        correlation_id = self._next_correlation
        self._next_correlation = (correlation_id + 1) % _CORRELATION_LIMIT
        data = _codec().encode_request(request.api_key, request.api_version, correlation_id, self.client_id,
                                       request.body)
        self.out.append(data)
        if request.expect_response:
            deadline = now + request.timeout
            self.in_flight.append(_InFlight(correlation_id, request.api_key, request.api_version, request.future,
                                            deadline))
        else:
            self.unwritten_acks0.append((len(self.out), request.future))

    def flush(self) -> bool:
        """Write what the socket takes now (gathered with sendmsg: queued requests are never joined or
        re-copied after a partial write); True when everything queued has been written."""
        out = self.out
        while out:
            try:
                sent = self._send(out)
            except _WOULD_BLOCK:
                self._complete_acks0(written_all=False)
                return False
            while sent:
                head = out[0]
                if sent >= len(head):
                    sent -= len(head)
                    out.popleft()
                else:
                    out[0] = memoryview(head)[sent:]
                    sent = 0
            if out:
                self._complete_acks0(written_all=False)
                return False
        self._complete_acks0(written_all=True)
        return True

    def _complete_acks0(self, written_all: bool) -> None:
        if self.unwritten_acks0 and written_all:
            futures = [future for _, future in self.unwritten_acks0]
            self.unwritten_acks0.clear()
            for future in futures:
                future.set_result(None)

    def _decrypted(self) -> bytes:
        """What OpenSSL has decrypted beyond the last recv: the selector cannot see it (Rule 6)."""
        more = b""
        while self.sock.pending():
            more += self.sock.recv(self.sock.pending())
        return more

    def receive(self) -> list[tuple[_InFlight, Any]]:
        """Read what is available; return (request, decoded body or exception) per complete response.

        Raises `KafkaConnectionError` when the broker closed the connection, and `CorrelationIdMismatch`
        when a response does not answer the oldest request in flight.
        """
        try:
            data = self.sock.recv(RECV_BYTES)
            if self.ssl_context is not None:
                data += self._decrypted()
        except _WOULD_BLOCK:
            return []
        if not data:
            raise KafkaConnectionError(f"broker {self.node_id} at {self.host}:{self.port} closed the connection")
        self.decoder.receive_data(data)
        results = []
        codec = _codec()
        while True:
            frame = self.decoder.next_frame()
            if frame is NEED_DATA or frame is CLOSED:
                return results
            if not self.in_flight:
                raise CorrelationIdMismatch(f"broker {self.node_id} sent a response nobody asked for")
            request = self.in_flight[0]
            (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
            if correlation_id != request.correlation_id:
                raise CorrelationIdMismatch(
                    f"broker {self.node_id}: correlation id {correlation_id}, expected {request.correlation_id}")
            self.in_flight.popleft()
            try:
                _, body = codec.decode_response(request.api_key, request.api_version, frame)
            except Exception as exc:  # a malformed body fails that request; the framing is still intact
                results.append((request, exc))
            else:
                throttle_ms = getattr(body, "throttle_time_ms", 0)
                if throttle_ms and throttle_ms > 0:
                    self.throttled_until = max(self.throttled_until, time.monotonic() + throttle_ms / 1000.0)
                results.append((request, body))

    def close(self, error: BaseException) -> list:
        """Close the socket; return every future still waiting (in flight or backlogged) to fail."""
        self.closed = True
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        waiting = [r.future for r in self.in_flight] + [r.future for r in self.backlog]
        waiting += [future for _, future in self.unwritten_acks0]
        self.in_flight.clear()
        self.backlog.clear()
        self.unwritten_acks0.clear()
        return waiting


class NetworkClient:
    """The broker connections of one client, driven by `poll()` on the client's I/O thread."""

    def __init__(self, bootstrap: list[tuple[str, int]], client_id: str, max_in_flight: int = 5,
                 request_timeout_ms: float = 30_000, connect_timeout_ms: float = 10_000,
                 max_frame_bytes: int = 100 * 1024 * 1024 + 512,
                 reconnect_backoff: ExponentialBackoff = RECONNECT_BACKOFF, login: SaslLogin | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        # Bootstrap servers get ids -1, -2, ... until metadata names the real brokers (as kafka-python does).
        self.nodes: dict[int, tuple[str, int]] = {-(i + 1): hp for i, hp in enumerate(bootstrap)}
        self.bootstrap_ids = list(self.nodes)
        self.client_id = client_id
        self.max_in_flight = max_in_flight
        self.request_timeout = request_timeout_ms / 1000.0
        self.connect_timeout = connect_timeout_ms / 1000.0
        self.max_frame_bytes = max_frame_bytes
        self.reconnect_backoff = reconnect_backoff
        self.login = login  # SASL login of every connection (security.protocol=SASL_PLAINTEXT), else None
        self.ssl_context = ssl_context  # every connection is TLS when set (Rule 6)
        self._conns: dict[int, BrokerConnection] = {}
        self._retry_at: dict[int, float] = {}  # node -> no new connection before this (reconnect backoff)
        self._connect_failures: dict[int, int] = {}  # node -> failed connects in a row
        self._connect_errors: dict[int, str] = {}  # node -> "host:port: why" of its last failed connect
        self.refused_login: SaslAuthenticationError | None = None  # the last connect's, until one logs in
        self._warned_at = -1e9
        self.ever_connected = False
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._submitted: deque[_Request] = deque()
        self._closed = False
        self._wake_pending = False  # a wake-up byte was sent and the I/O thread has not drained it yet
        self.throttled_responses = 0  # Rule 5
        self.throttle_time_ms_total = 0
        self.throttle_time_ms_max = 0

    @classmethod
    def from_config(cls, bootstrap: list[tuple[str, int]], config: dict,
                    request_timeout_ms: float | None = None) -> "NetworkClient":
        """A client with the connection settings of a resolved client config (see config.py)."""
        return cls(bootstrap, config["client.id"], config["max.in.flight.requests.per.connection"],
                   config["request.timeout.ms"] if request_timeout_ms is None else request_timeout_ms,
                   config["socket.connection.setup.timeout.ms"], config["receive.message.max.bytes"],
                   ExponentialBackoff.reconnect(config), login_of(config), tls_context(config))

    # -- any thread ---------------------------------------------------------------------------------

    def unreachable(self) -> str:
        """Which brokers could not be reached and why, for the error of a caller that gives up (Rule 4)."""
        errors = dict(self._connect_errors)
        if not errors:
            return "no broker answered"
        return "could not reach " + ("any broker: " if len(errors) == len(self.nodes) else "broker ") + "; ".join(
            errors[n] for n in sorted(errors, key=lambda n: (n < 0, n)))

    def submit(self, node_id: int, api_key: int, api_version: int, body: Any, *, expect_response: bool = True,
               callback: Callable | None = None, timeout: float | None = None,
               wake: bool = True) -> ResponseFuture:
        future = ResponseFuture(callback)
        future.node_id = node_id
        self._submitted.append(_Request(node_id, api_key, api_version, body, future, expect_response,
                                        self.request_timeout if timeout is None else timeout))
        if wake:
            self.wakeup()
        return future

    def wakeup(self) -> None:
        """Make the I/O thread run its step again soon: one byte (a syscall) per wake-up, coalesced: while a
        byte waits undrained, the thread is bound to wake and run its step, which sees what the caller
        changed before calling (`_drain_wakeups` clears the flag only after draining)."""
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            self._wake_w.send(b"\x00")
        except (BlockingIOError, OSError):  # already bytes waiting, or closed
            pass

    def set_nodes(self, brokers: dict[int, tuple[str, int]]) -> None:
        """Learn the brokers from metadata; connections to brokers that moved are closed on next use."""
        for node_id, address in brokers.items():
            self.nodes[node_id] = address

    # -- I/O thread ---------------------------------------------------------------------------------

    def in_flight(self, node_id: int) -> int:
        conn = self._conns.get(node_id)
        return len(conn.in_flight) + len(conn.backlog) if conn is not None and not conn.closed else 0

    def is_ready(self, node_id: int) -> bool:
        """True when a request to `node_id` would go out now (connected or connectable, a slot free)."""
        conn = self._conns.get(node_id)
        if conn is None or conn.closed:
            return time.monotonic() >= self._retry_at.get(node_id, 0.0)
        return len(conn.in_flight) + len(conn.backlog) < conn.max_in_flight

    def least_loaded_node(self) -> int | None:
        """A connected node with the fewest requests in flight, else any node not backing off."""
        best, best_load = None, None
        now = time.monotonic()
        for node_id in self.nodes:
            conn = self._conns.get(node_id)
            if conn is not None and not conn.closed:
                load = len(conn.in_flight) + len(conn.backlog)
            elif now >= self._retry_at.get(node_id, 0.0):
                load = self.max_in_flight  # unconnected: acceptable, but prefer a live connection
            else:
                continue
            if best_load is None or load < best_load or (load == best_load and node_id >= 0 > best):
                best, best_load = node_id, load
        return best

    def poll(self, timeout: float | None) -> None:
        """Send what was submitted, wait up to `timeout` for I/O, and complete futures."""
        now = time.monotonic()
        if self._take_submitted(now) or self._submitted:
            timeout = 0  # a request failed at once: its callback may have left the step work to do
        deadline = self._next_deadline()
        if deadline is not None:
            timeout = max(0.0, deadline - now) if timeout is None else max(0.0, min(timeout, deadline - now))
        events = self._selector.select(timeout)
        for key, mask in events:
            conn = key.data
            if conn is None:
                self._drain_wakeups()
                continue
            try:
                if mask & selectors.EVENT_READ:
                    self._read(conn)
                if mask & selectors.EVENT_WRITE and not conn.closed:
                    self._write(conn)
            except Exception as exc:  # protocol errors and socket errors alike end this connection
                self._close(conn, exc if isinstance(exc, ConnectionError) else KafkaConnectionError(str(exc)))
        now = time.monotonic()
        self._send_throttled(now)
        self._expire(now)

    def _take_submitted(self, now: float) -> bool:
        """Hand submitted requests to their connections; True if one failed at once (no connection)."""
        touched = set()
        failed = False
        submitted = self._submitted
        while submitted:
            request = submitted.popleft()
            conn = self._connection(request.node_id, request.future)
            if conn is None:
                failed = True
                continue
            conn.backlog.append(request)
            touched.add(conn)
        for conn in touched:
            self._send_backlog(conn, now)
        return failed

    def _send_backlog(self, conn: BrokerConnection, now: float) -> None:
        if now < conn.throttled_until:  # Rule 5: the backlog goes out once the throttle has passed (poll)
            return
        while conn.backlog and conn.can_send():
            request = conn.backlog.popleft()
            try:
                conn.send(request, now)
            except Exception as exc:  # an unencodable body fails that request only
                request.future.set_error(exc)
        if conn.out and not conn.closed:
            try:
                done = conn.flush()
            except OSError as exc:
                self._close(conn, KafkaConnectionError(f"write to broker {conn.node_id}: {exc}"))
                return
            self._want_write(conn, not done)

    def _connection(self, node_id: int, future: ResponseFuture) -> BrokerConnection | None:
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        address = self.nodes.get(node_id)
        if address is None:
            future.set_error(KafkaConnectionError(f"unknown broker {node_id}"))
            return None
        if time.monotonic() < self._retry_at.get(node_id, 0.0):
            reason = self._connect_errors.get(node_id, "backing off")
            future.set_error(KafkaConnectionError(f"broker {node_id} is backing off after: {reason}"))
            return None
        conn = BrokerConnection(node_id, address[0], address[1], self.client_id, self.max_in_flight,
                                self.max_frame_bytes, self.ssl_context)
        try:
            conn.connect(self.connect_timeout, self.login)
        except SaslAuthenticationError as exc:
            self._connect_failed(node_id, address, exc)
            self.refused_login = exc
            future.set_error(exc)
            return None
        except OSError as exc:
            future.set_error(KafkaConnectionError(f"connect to {self._connect_failed(node_id, address, exc)}"))
            return None
        if self._connect_failures.pop(node_id, None):
            logger.info("connected to broker %s at %s:%s", node_id, *address)
        self._connect_errors.pop(node_id, None)
        self.ever_connected = True
        self.refused_login = None
        self._conns[node_id] = conn
        self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        return conn

    def _connect_failed(self, node_id: int, address: tuple[str, int], exc: OSError) -> str:
        """Back off from `node_id` and warn now and then (Rule 4); returns "host:port: why"."""
        failures = self._connect_failures.get(node_id, 0)
        now = time.monotonic()
        self._retry_at[node_id] = now + self.reconnect_backoff.delay(failures)
        self._connect_failures[node_id] = failures + 1
        where = f"{'bootstrap server' if node_id < 0 else f'broker {node_id} at'} {address[0]}:{address[1]}"
        described = self._connect_errors[node_id] = f"{where}: {failure_reason(exc)}"
        if failures == 0 or now - self._warned_at >= UNREACHABLE_WARNING_INTERVAL_S:
            self._warned_at = now
            logger.warning("cannot reach %s; retrying", described)
        return described

    def _want_write(self, conn: BrokerConnection, want: bool) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
        if self._selector.get_key(conn.sock).events != events:
            self._selector.modify(conn.sock, events, conn)

    def _read(self, conn: BrokerConnection) -> None:
        for request, result in conn.receive():
            if isinstance(result, BaseException):
                request.future.set_error(result)
            else:
                throttle_ms = getattr(result, "throttle_time_ms", 0)
                if throttle_ms and throttle_ms > 0:
                    self.throttled_responses += 1
                    self.throttle_time_ms_total += throttle_ms
                    self.throttle_time_ms_max = max(self.throttle_time_ms_max, throttle_ms)
                request.future.set_result(result)
        if conn.backlog and not conn.closed:
            self._send_backlog(conn, time.monotonic())

    def _write(self, conn: BrokerConnection) -> None:
        self._want_write(conn, not conn.flush())

    def _close(self, conn: BrokerConnection, error: BaseException) -> None:
        if conn.closed:
            return
        logger.debug("closing connection to broker %s: %s", conn.node_id, error)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        self._retry_at[conn.node_id] = time.monotonic() + self.reconnect_backoff.delay(0)
        for future in conn.close(error):
            future.set_error(error)
        if self._conns.get(conn.node_id) is conn:
            del self._conns[conn.node_id]

    def _next_deadline(self) -> float | None:
        deadlines = [conn.in_flight[0].deadline for conn in self._conns.values() if conn.in_flight]
        deadlines += [conn.throttled_until for conn in self._conns.values() if conn.backlog and conn.throttled_until]
        return min(deadlines) if deadlines else None

    def _send_throttled(self, now: float) -> None:
        """Rule 5: send the backlogs whose throttle has passed."""
        for conn in list(self._conns.values()):
            if conn.backlog and conn.throttled_until and now >= conn.throttled_until and not conn.closed:
                self._send_backlog(conn, now)

    def throttle_statistics(self) -> dict:
        """Rule 5's counts: responses that carried a throttle, their total and largest throttle_time_ms."""
        return {"throttled_responses": self.throttled_responses, "throttle_time_ms_total": self.throttle_time_ms_total,
                "throttle_time_ms_max": self.throttle_time_ms_max}

    def _expire(self, now: float) -> None:
        for conn in list(self._conns.values()):
            if conn.in_flight and conn.in_flight[0].deadline < now:
                self._close(conn, RequestTimedOut(f"broker {conn.node_id}: no response within the request timeout"))

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._wake_pending = False  # after draining: a wake-up skipped before this point precedes our next step

    def close(self) -> None:
        """Close every connection (I/O thread stopped, or called from it)."""
        if self._closed:
            return
        self._closed = True
        for conn in list(self._conns.values()):
            self._close(conn, KafkaConnectionError("client closed"))
        while self._submitted:
            self._submitted.popleft().future.set_error(KafkaConnectionError("client closed"))
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


class IOThread(threading.Thread):
    """Runs `step()` (the producer's sender or the consumer's fetcher) and `client.poll()` in a loop.

    `step()` returns how long the loop may sleep in `poll` (None: until woken). `stop()` ends the loop
    after the current iteration; the thread then closes the client's connections.
    """

    def __init__(self, name: str, client: NetworkClient, step: Callable[[], float | None]) -> None:
        super().__init__(name=name, daemon=True)
        self.client = client
        self.step = step
        self._stopping = False

    def run(self) -> None:
        failures = 0  # unexpected errors in a row: a bug, logged, and not allowed to spin the CPU
        try:
            while not self._stopping:
                try:
                    timeout = self.step()
                    self.client.poll(timeout)
                    failures = 0
                except Exception:
                    logger.exception("%s: unexpected error; continuing", self.name)
                    time.sleep(_UNEXPECTED_ERROR_BACKOFF.delay(failures))
                    failures += 1
        finally:
            self.client.close()

    def stop(self, join: bool = True, timeout: float | None = None) -> None:
        self._stopping = True
        self.client.wakeup()
        if join and self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
