"""The broker's network edge: listeners, connections, in-order request/response, sendfile for record sets.

Like trio's `serve_listeners`: one asyncio event loop owns every task, in one task group; `serve()` returns
only when all of them have finished, so no task outlives the server. The server knows nothing of the Kafka
protocol beyond the 4-byte size prefix: it hands each frame to an `App` and writes back what the app returns.

The `App` contract (`Dispatcher` in `dispatch.py` is the real one):

    app.new_decoder() -> decoder        one per connection (the sans-IO FrameDecoder)
    app.new_session(peer_ip[, listener]) -> session  one per connection (on the named listener when the server
                                        has several), passed back with each of its frames
    app.handle_frame(frame, session) -> None | Reply | Parked | Awaitable[None | Reply]

    None            nothing is sent (a Produce with acks=0)
    Reply           a list of chunks: `bytes`-like, or a record-set object (a storage FileSlice: `position`,
                    `__len__`, `send_to(fd, start, count)` = os.sendfile under its pin, and `pinned()`) that
                    is written with `os.sendfile`; the chunks include the response's 4-byte size prefix
    Parked(aw)      the request has taken effect and only its answer waits (an acks=all Produce in the
                    purgatory, a long-polling Fetch): the awaitable gives None or a Reply
    awaitable       the request takes effect while it runs (a ZooKeeper write): gives None or a Reply
    raises CloseConnection   the peer sent something we cannot answer (a malformed frame): close it

    Optional, to work per read rather than per request: `app.RUN_KEY` (bytes) and
    `app.handle_frames(frames, session, replies)`. Frames opening with RUN_KEY that are buffered one behind
    the other (a client pipelining Produce requests) are handed over together; the app appends to
    `replies` exactly what handle_frame would return for each, in order, and may raise CloseConnection
    after any of them (the replies already appended are answered). No reply of such a run may be a barrier
    (an awaitable that is not Parked): the frames behind it have been handled.
    Optional too, to take a read's run in one call: `app.SCAN_RUN` (a scan for the decoder's `take_run`,
    frame.py Rule 3) and `app.handle_run(items, session, replies)`: the items the scan made of the frames at
    the head (each with a `frame` attribute, its bytes) are handled as `handle_frames` handles frames, with
    the same rules for `replies`, except that a reply may carry the bytes of the replies after it, which are
    then None (the bytes that leave are the same).

Rule 1: requests on one connection take effect in the order they arrive and are answered in that order
(clients drop a connection whose correlation ids arrive out of order), but a client may have several in
flight (pipelining, pipeline.py): each frame is handled as soon as it is read, so a Parked request does not
hold back the ones behind it, and the replies leave in request order whatever order they complete in. An
awaitable that is not Parked is a barrier: nothing more is read from its connection until it is answered,
so what it changes is seen by every later request. A connection holds at most `max_in_flight` requests
(reading pauses at that many); appends happen in the handler call, so a partition's appends from one
connection keep the request order (producers rely on it, as Kafka guarantees it).
Rule 2: the broker never crashes on what a client sends: a bad frame costs that connection, nothing else.
Rule 3 (muting, KIP-219): a session with a `mute_s` attribute may have it set by the app while it handles a
frame (a quota's throttle): the reply leaves as usual, then the connection is muted: nothing more is read from
it, and no frame already buffered is handled, for that many seconds; `mute_s` is cleared when the mute
starts. A client that ignores the throttle it was told is held all the same: its requests wait in the socket.

Resource handling:
    - `bind()` only binds: the socket listens (and the kernel starts completing handshakes) at `listen()`,
      or when `serve()` starts, so a broker that cannot answer yet (still waiting for its ZooKeeper
      registration) refuses connections instead of accepting them and staying silent; clients retry a
      refused connection.
    - A frame larger than `socket.request.max.bytes` is refused from its size prefix, before any of it is
      buffered, and the connection is closed (the FrameDecoder raises FrameTooLarge).
    - At most `max.connections` connections are open, and `max.connections.per.ip` from one address; one
      over either is closed at once (and counted as refused).
    - Bytes of partly received frames, over all connections, are bounded by `queued.max.request.bytes`
      (Kafka's name; the budget is `queued_bytes.QueuedBytes`): a read that takes the total over it pauses
      reading on that connection, which waits in a FIFO queue until frames complete or connections close
      and bring the total back within the limit. Complete frames are answered at once and never count, so
      clients sending small requests are not slowed by others holding half a large one. The oldest partial
      frame always reads on (its Rule 4), so waiting connections cannot all wait on each other; memory held
      is at most the limit plus one read per connection plus the rest of that one frame. A connection that
      waits sends nothing, so after `connections.max.idle.ms` the idle reaper closes it like any other
      silent one.
    - Requests in flight (read, not yet answered) are bounded per connection by `max_in_flight`
      (`queued.max.requests`), not by the shared budget above: a parked request holds its task and reply
      (a few KiB), not its frame, and counting it there would let one client's parked flood pause every
      well-behaved connection until its waits expire (Kafka's memory pool likewise releases a request's
      bytes once it is handled). When a connection closes, its Parked requests stop waiting (their tasks
      are cancelled), so a client cannot leave parked requests behind by hanging up; barrier requests (a
      ZooKeeper write in progress) run to their end.
    - Reading pauses while the transport's write buffer is over its high-water mark (asyncio's
      `pause_writing`), so a client that does not read its responses cannot make the broker buffer them:
      past that mark only the replies of requests already in flight are added.
    - Connections idle for `connections.max.idle.ms` are closed, and so is one whose session has a `close_at`
      (time.monotonic() seconds) that has passed (SASL: authentication or session lifetime over), by the same
      reaper.
    - TLS listeners (`bind(..., tls=TlsListener)`): the handshake runs in a task of its own (the accept loop
      goes on), bounded by the listener's handshake timeout (a client that never finishes it is dropped) and
      counted against `max.connections` while it runs; a failed one is logged at debug level and costs
      nothing more. A TLS connection's record sets take the copy path (reply_writer.py, Rule:
      tls-copies-records); plaintext connections keep the zero-copy path.
    - Replies leave through reply_writer.py (a base of `Connection`): record sets with `os.sendfile` from
      the segment file, the response head with MSG_MORE before them (Rule: records-zero-copy), each slice
      pinned until its last byte is sent (Rule: slice-pinned-while-sent).
    - Shutdown (`stop()`): listeners close first, then every connection, then every task is cancelled and
      awaited.

Error handling:
    - accept() failing with an overload errno (EMFILE, ENFILE, ENOBUFS, ENOMEM) is counted, logged and
      retried after ACCEPT_RETRY_DELAY_S (trio's policy); any other accept() error propagates and stops the
      server, because it means the listener itself is broken.
    - A peer that resets or half-closes the connection: the connection is dropped, its task cancelled.
    - A handler that raises anything but CloseConnection is a broker bug: logged with the traceback, the
      connection (only) is closed, and `handler_errors` counts it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from sparklog.broker.network.pipeline import InFlight
from sparklog.broker.network.queued_bytes import QueuedBytes
from sparklog.broker.network.reply_writer import BUFFERS, ReplyWriter

log = logging.getLogger(__name__)

# errnos that mean "out of resources right now", not "the listener is broken" (trio's list).
ACCEPT_OVERLOAD_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_DELAY_S = 0.1
LISTEN_BACKLOG = 511
IDLE_CHECK_INTERVAL_S = 5.0
# A transport's write buffer above this pauses reading (asyncio's default high-water mark is 64 KiB).
WRITE_BUFFER_HIGH_WATER = 4 * 1024 * 1024
WRITE_BUFFER_LOW_WATER = 1024 * 1024
# Requests read and not yet answered, per connection, before reading pauses (Kafka's queued.max.requests,
# 500, is over all connections; here it bounds one connection, and their bytes are bounded together).
DEFAULT_MAX_IN_FLIGHT = 500


def _peer_ip(sock: socket.socket) -> str:
    try:
        return str(sock.getpeername()[0])
    except OSError:  # already reset by the peer
        return ""


@dataclass(frozen=True)
class TlsListener:
    """How a TLS listener serves: its server context, how long a handshake may take, and the principal of a
    handshaken connection (`principal(ssl_object)` -> "User:..." or None for none; it raises ValueError to
    refuse the client, as a certificate no mapping rule matches)."""

    context: Any
    handshake_timeout_s: float
    principal: Callable[[Any], str | None]


class CloseConnection(Exception):
    """Raised by an App: the peer sent something unanswerable; close this connection only."""


class Parked:
    """A reply still to come for a request that has already taken effect (an acks=all Produce waiting in
    the purgatory, a long-polling Fetch): the requests behind it may be handled meanwhile (Rule 1)."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Awaitable) -> None:
        self.awaitable = awaitable


Reply = list


class App(Protocol):
    NEED_DATA: Any  # what decoder.next_frame() returns when no whole frame is buffered
    FRAME_ERRORS: tuple[type[Exception], ...]  # decoder exceptions that close the connection

    def new_decoder(self) -> Any: ...

    def new_session(self, peer_ip: str, listener: str = ...) -> Any: ...

    def handle_frame(self, frame, session) -> None | Reply | Parked | Awaitable[None | Reply]: ...


@dataclass(frozen=True)
class ServerStatistics:
    listening: tuple[tuple[str, int], ...]
    connections_open: int
    connections_accepted: int
    connections_refused: int
    accept_overload_errors: int
    requests: int
    async_requests: int
    tasks_running: int
    bytes_received: int
    bytes_sendfile: int
    sendfile_slow_paths: int
    closed_protocol_errors: int
    handler_errors: int
    idle_closed: int
    queued_request_bytes: int  # bytes of partly received frames, all connections
    queue_paused: int  # connections waiting for queued_request_bytes to fall under the limit
    in_flight_requests: int  # read and not yet answered, all connections
    in_flight_bytes: int  # their frame sizes (pipeline.py Rule 3)
    tls_handshakes_running: int = 0
    tls_handshake_failures: int = 0  # refused: not TLS, untrusted or no certificate, timed out, unmapped name
    bytes_copied: int = 0  # record-set bytes sent through the copy path (TLS connections)
    tls_principals: dict | None = None  # TLS connections authenticated by a certificate, per principal


class BrokerServer:
    """Listeners and connections of one broker; see the module docstring."""

    def __init__(self, app: App, *, max_connections: int = 2**31 - 1, max_connections_per_ip: int = 2**31 - 1,
                 max_queued_bytes: int = -1, idle_timeout_s: float | None = None,
                 send_buffer_bytes: int = -1, receive_buffer_bytes: int = -1,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.queued = QueuedBytes(max_queued_bytes if max_queued_bytes >= 0 else None)
        self._per_ip: dict[str, int] = {}
        self.idle_timeout_s = idle_timeout_s
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.connections: set[Connection] = set()
        self._listeners: list[socket.socket] = []
        self._listener_of: dict[socket.socket, tuple[str, TlsListener | None]] = {}  # name, TLS settings
        self._handshaking = 0  # TLS connections accepted whose handshake is still running
        self.tls_principals: dict[str, int] = {}  # connections authenticated by a certificate, per principal
        self._tasks: set[asyncio.Task] = set()
        self._group: asyncio.TaskGroup | None = None
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started = asyncio.Event()
        self._counters = dict.fromkeys(
            ("accepted", "refused", "overload", "requests", "async_requests", "received", "sendfile",
             "sendfile_slow", "protocol_errors", "handler_errors", "idle_closed", "deadline_closed",
             "tls_handshake_failures", "bytes_copied"), 0)

    # -- lifecycle -------------------------------------------------------------------------------------

    def bind(self, host: str, port: int, listener: str = "", tls: TlsListener | None = None) -> tuple[str, int]:
        """Open one listening socket (port 0 picks a free one); returns the bound address. Its connections'
        sessions get `listener` as their listener name; with `tls`, they are served over TLS only."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._listeners.append(sock)
        self._listener_of[sock] = (listener, tls)
        return sock.getsockname()[:2]

    def listen(self) -> None:
        """Let the kernel accept connections on every bound socket (`serve()` does it too; idempotent).
        Call it once requests can be answered: a connection accepted earlier would wait unanswered."""
        for sock in self._listeners:
            sock.listen(LISTEN_BACKLOG)

    async def serve(self) -> None:
        """Accept and serve until `stop()`; every task started here has ended when this returns."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                self.listen()
                for sock in self._listeners:
                    self.spawn(self._accept_loop(sock))
                if self.idle_timeout_s:
                    self.spawn(self._idle_reaper())
                self.started.set()
                await self._stopping.wait()
                self._close_everything()
        finally:
            self._group = None
            self._close_everything()

    def stop(self) -> None:
        """Ask `serve()` to finish; safe to call more than once, from the loop's thread."""
        if self._stopping is not None:
            self._stopping.set()

    def _close_everything(self) -> None:
        for sock in self._listeners:
            sock.close()
        for conn in list(self.connections):
            conn.close()
        for task in list(self._tasks):
            task.cancel()

    def spawn(self, coro) -> asyncio.Task:
        """Start a task owned by the server's task group (cancelled and awaited at shutdown)."""
        if self._group is None:
            coro.close()
            raise RuntimeError("the server is not running")
        task = self._group.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def statistics(self) -> ServerStatistics:
        c = self._counters
        listening = []
        for sock in self._listeners:
            try:
                listening.append(tuple(sock.getsockname()[:2]))
            except OSError:
                pass
        return ServerStatistics(
            listening=tuple(listening),
            connections_open=len(self.connections),
            connections_accepted=c["accepted"],
            connections_refused=c["refused"],
            accept_overload_errors=c["overload"],
            requests=c["requests"],
            async_requests=c["async_requests"],
            tasks_running=len(self._tasks),
            bytes_received=c["received"],
            bytes_sendfile=c["sendfile"],
            sendfile_slow_paths=c["sendfile_slow"],
            closed_protocol_errors=c["protocol_errors"],
            handler_errors=c["handler_errors"],
            idle_closed=c["idle_closed"],
            queued_request_bytes=self.queued.total,
            queue_paused=self.queued.waiting,
            in_flight_requests=sum(len(conn.inflight) for conn in self.connections),
            in_flight_bytes=sum(conn.inflight.bytes for conn in self.connections),
            tls_handshakes_running=self._handshaking,
            tls_handshake_failures=c["tls_handshake_failures"],
            bytes_copied=c["bytes_copied"],
            tls_principals=dict(self.tls_principals),
        )

    # -- accepting --------------------------------------------------------------------------------------

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        name, tls = self._listener_of.get(listener, ("", None))
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno not in ACCEPT_OVERLOAD_ERRNOS:
                    raise
                self._counters["overload"] += 1
                log.warning("accept() failed with %s; retrying in %.1fs", errno.errorcode.get(exc.errno), ACCEPT_RETRY_DELAY_S)
                await asyncio.sleep(ACCEPT_RETRY_DELAY_S)
                continue
            ip = _peer_ip(sock)
            if (len(self.connections) + self._handshaking >= self.max_connections
                    or self._per_ip.get(ip, 0) >= self.max_connections_per_ip):
                self._counters["refused"] += 1
                sock.close()
                continue
            self._counters["accepted"] += 1
            self._tune(sock)
            if tls is not None:
                self._handshaking += 1
                self.spawn(self._serve_tls(loop, sock, ip, name, tls))
                continue
            try:
                await loop.connect_accepted_socket(lambda: Connection(self, ip, name), sock)
            except OSError as exc:  # the peer left between accept() and now
                log.debug("connection setup failed: %s", exc)
                sock.close()

    async def _serve_tls(self, loop, sock: socket.socket, ip: str, name: str, tls: TlsListener) -> None:
        """The TLS handshake of one accepted connection, bounded by the listener's timeout; the connection is
        served (connection_made) only once it succeeded. A failure costs this task and the socket only."""
        try:
            await loop.connect_accepted_socket(lambda: Connection(self, ip, name, tls), sock, ssl=tls.context,
                                               ssl_handshake_timeout=tls.handshake_timeout_s)
        except (OSError, ConnectionError, TimeoutError, asyncio.TimeoutError) as exc:  # ssl.SSLError is an OSError
            self._counters["tls_handshake_failures"] += 1
            log.debug("TLS handshake with %s on %s failed: %s", ip, name, exc)
            sock.close()
        finally:
            self._handshaking -= 1

    def _tune(self, sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if self.receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
        except OSError:
            pass

    def _add(self, conn: Connection) -> None:
        self.connections.add(conn)
        self._per_ip[conn.ip] = self._per_ip.get(conn.ip, 0) + 1

    def _remove(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            left = self._per_ip[conn.ip] - 1
            if left:
                self._per_ip[conn.ip] = left
            else:
                del self._per_ip[conn.ip]

    async def _idle_reaper(self) -> None:
        while True:
            await asyncio.sleep(min(IDLE_CHECK_INTERVAL_S, self.idle_timeout_s))
            now = time.monotonic()
            deadline = now - self.idle_timeout_s
            for conn in list(self.connections):
                if conn.last_active < deadline and conn.idle():
                    self._counters["idle_closed"] += 1
                    conn.close()
                elif (getattr(conn.session, "close_at", None) or now) < now:  # a session's own deadline
                    self._counters["deadline_closed"] += 1
                    conn.close()


class Connection(ReplyWriter, asyncio.Protocol):
    """One client connection: frames in through the App's decoder, replies out in request order."""

    __slots__ = ("server", "app", "counters", "transport", "decoder", "session", "busy", "write_paused", "closed",
                 "queue_paused", "ip", "last_active", "inflight", "writing", "_parked", "_fd", "_dup_fd", "_dup_sock",
                 "_need_data", "_frame_errors", "_run_key", "_scan", "muted", "_mutable", "_unmute_timer", "tls")

    def __init__(self, server: BrokerServer, ip: str = "", listener: str = "", tls: TlsListener | None = None) -> None:
        self.server = server
        self.ip = ip
        self.queue_paused = False  # waiting in server.queued for queued.max.request.bytes
        self.app = server.app
        self.counters = server._counters
        self.transport: asyncio.Transport | None = None
        self.decoder = self.app.new_decoder()
        self.session = self.app.new_session(ip, listener) if listener else self.app.new_session(ip)
        self.tls = tls  # served over TLS: record sets take the copy path (`_write`)
        self.busy = False  # a request that is not Parked is being answered: read nothing more until it is
        self.inflight = InFlight(server.max_in_flight)  # requests read and not yet answered (pipeline.py)
        self.writing = False  # a record set is being sent by a task: later replies wait for it
        self._parked: set[asyncio.Task] = set()  # tasks answering Parked requests: cancelled at close
        self.write_paused = False
        self.closed = False
        self.last_active = time.monotonic()
        self._fd = -1
        self._dup_fd = -1
        self._dup_sock: socket.socket | None = None  # owns _dup_fd: sends a reply's head with MSG_MORE
        self._need_data = self.app.NEED_DATA
        self._run_key = getattr(self.app, "RUN_KEY", None)
        self._scan = getattr(self.app, "SCAN_RUN", None)
        self._frame_errors = (CloseConnection,) + tuple(self.app.FRAME_ERRORS)
        self.muted = False  # Rule 3: reading and handling stop until the timer unmutes
        self._mutable = hasattr(self.session, "mute_s")
        self._unmute_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH_WATER, WRITE_BUFFER_LOW_WATER)
        self._fd = transport.get_extra_info("socket").fileno()
        self.server._add(self)
        if self.tls is not None:
            self._authenticate(transport.get_extra_info("ssl_object"))

    def _authenticate(self, ssl_object) -> None:
        """The principal of a TLS client's certificate (TlsListener.principal); a refused one closes."""
        try:
            principal = self.tls.principal(ssl_object)
        except ValueError as exc:
            self.counters["tls_handshake_failures"] += 1
            log.info("refusing the TLS client %s: %s", self.ip, exc)
            self.close()
            return
        if principal is not None:
            self.session.principal = principal
            principals = self.server.tls_principals
            principals[principal] = principals.get(principal, 0) + 1

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server._remove(self)
        for task in list(self._parked):  # their answers have nowhere to go: stop waiting in the purgatory
            task.cancel()
        self.inflight.clear()
        self.server.queued.hold(self, 0)
        if self._unmute_timer is not None:
            self._unmute_timer.cancel()
        if self._dup_sock is not None:
            self._dup_sock.close()
            self._dup_sock, self._dup_fd = None, -1

    def data_received(self, data: bytes) -> None:
        self.counters["received"] += len(data)
        self.last_active = time.monotonic()
        try:
            self.decoder.receive_data(data)
        except self._frame_errors as exc:
            self._protocol_error(exc)
            return
        self._pump()
        self._account()

    def _account(self) -> None:
        """Count partly received frames against queued.max.request.bytes; pause reading if over, and
        resume it when nothing else holds it paused."""
        if self.closed:
            self.server.queued.hold(self, 0)
            return
        if self.server.queued.hold(self, self.decoder.buffered_bytes):
            self.queue_paused = False
        else:
            self.queue_paused = True
        self._update_reading()

    def queue_ready(self) -> None:
        """Called by server.queued: the queued bytes are within the limit again; read again."""
        self.queue_paused = False
        self._update_reading()

    def _update_reading(self) -> None:
        if self.closed:
            return
        if self.busy or self.write_paused or self.queue_paused or self.inflight.full or self.muted:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def _mute(self) -> None:
        """Rule 3: stop reading and handling for the session's mute_s seconds."""
        delay, self.session.mute_s = self.session.mute_s, 0.0
        self.muted = True
        if not self.closed:
            self.transport.pause_reading()
        self._unmute_timer = asyncio.get_running_loop().call_later(delay, self._unmute)

    def _unmute(self) -> None:
        self.muted = False
        self._unmute_timer = None
        if not self.closed:
            self._pump()
            self._account()

    def idle(self) -> bool:
        """Nothing being answered: what the idle reaper may close."""
        return not (self.busy or self.writing or self.inflight)

    def eof_received(self) -> bool:
        return False  # close our side too

    def pause_writing(self) -> None:
        self.write_paused = True
        if not self.closed:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if not self.closed:
            self._pump()
            self._account()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.close()

    # -- requests ---------------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Handle every complete frame, in order, until the connection must wait (module docstring, Rule 1).

        With nothing in flight, replies made only of buffers (Produce, Metadata ...) are gathered and
        written with one transport.write after the last buffered frame: a client pipelining small requests
        costs one send() per read, not one per request. Behind a reply still to come, replies queue in
        `inflight` and leave in order (`_write_ready`)."""
        decoder, handle, need_data, session = self.decoder, self.app.handle_frame, self._need_data, self.session
        inflight = self.inflight
        run_key, scan = self._run_key, self._scan
        out: list = []
        try:
            while not (self.busy or self.write_paused or self.closed or inflight.full or self.muted):
                if scan is not None:
                    items = decoder.take_run(scan, inflight.max_requests - len(inflight))
                    if items:
                        self._handle_run(items, out)
                        if self._mutable and session.mute_s:
                            self._flush(out)
                            self._mute()
                        continue
                frame = decoder.next_frame()
                if frame is need_data:
                    return
                if run_key is not None and frame[:2] == run_key:
                    frame = self._run(frame, out)
                    if frame is None or self.closed:  # (a frame read behind the run is handled before a mute)
                        if self._mutable and session.mute_s:
                            self._flush(out)
                            self._mute()
                        continue
                self.counters["requests"] += 1
                reply = handle(frame, session)
                if self._mutable and session.mute_s:
                    self._take(reply, len(frame), out)
                    self._flush(out)
                    self._mute()
                    continue
                if reply is None:
                    continue
                if reply.__class__ is list and not inflight and not self.writing:
                    if len(reply) == 1 and reply[0].__class__ in BUFFERS:  # most replies: one encoded buffer
                        out.append(reply[0])
                        continue
                    if all(chunk.__class__ in BUFFERS for chunk in reply):
                        out.extend(reply)
                        continue
                    self._flush(out)
                    self._write_reply(reply)
                    continue
                self._flush(out)
                self._queue_reply(reply, len(frame))
        except self._frame_errors as exc:
            self._flush(out)
            self._protocol_error(exc)
            out = []
        except Exception:
            self.counters["handler_errors"] += 1
            log.exception("error answering a request; closing the connection")
            self._flush(out)
            self.close()
            out = []
        finally:
            self._flush(out)

    def _run(self, frame, out: list):
        """Hand `frame` and the run-key frames buffered behind it, as many as in-flight room allows, to
        app.handle_frames (the App contract); the replies are taken as _pump takes each. Returns the first
        frame read that does not belong to the run (for _pump to handle), else None."""
        decoder, run_key, need_data = self.decoder, self._run_key, self._need_data
        frames = [frame]
        room = self.inflight.max_requests - len(self.inflight) - 1
        after = None
        while room > 0:
            nxt = decoder.next_frame()
            if nxt is need_data:
                break
            if nxt[:2] != run_key:
                after = nxt
                break
            frames.append(nxt)
            room -= 1
        if len(frames) == 1:
            if after is None:
                return frame  # alone: the common path
            self._take(self.app.handle_frame(frame, self.session), len(frame), out)
            self.counters["requests"] += 1
            return after
        self._answer_all(self.app.handle_frames, frames, frames, out)
        return after

    def _handle_run(self, items: list, out: list) -> None:
        """app.handle_run of the items the decoder's take_run made (the App contract); replies taken as _run's."""
        self._answer_all(self.app.handle_run, items, [item.frame for item in items], out)

    def _answer_all(self, handle, items: list, frames: list, out: list) -> None:
        """`handle(items, session, replies)`, each reply taken with its frame's size; the replies of the items
        handled before an exception are still answered."""
        replies: list = []
        try:
            handle(items, self.session, replies)
        finally:
            self.counters["requests"] += len(replies)
            for index, reply in enumerate(replies):
                self._take(reply, len(frames[index]), out)

    def _take(self, reply, size: int, out: list) -> None:
        """_pump's handling of one reply: gathered in `out`, written, or queued behind those in flight."""
        if reply is None:
            return
        if reply.__class__ is list and not self.inflight and not self.writing:
            if all(chunk.__class__ in BUFFERS for chunk in reply):
                out.extend(reply)
                return
            self._flush(out)
            self._write_reply(reply)
            return
        self._flush(out)
        self._queue_reply(reply, size)

    def _flush(self, out: list) -> None:
        if out and not self.closed:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def _queue_reply(self, reply, size: int) -> None:
        """Hold a reply behind the ones in flight: a list is ready; an awaitable is answered by a task."""
        if reply.__class__ is list:
            self.inflight.add_ready(size, reply)
            return
        parked = reply.__class__ is Parked
        if not parked:
            self.busy = True  # it may change what later requests see: they wait (Rule 1)
            self.transport.pause_reading()
        self.counters["async_requests"] += 1
        slot = self.inflight.add(size)
        try:
            task = self.server.spawn(self._answer(reply.awaitable if parked else reply, slot, parked))
        except RuntimeError:  # shutting down
            self.close()
            return
        if parked:
            self._parked.add(task)
            task.add_done_callback(self._parked.discard)

    async def _answer(self, reply_awaitable, slot, parked: bool) -> None:
        reply = None
        try:
            reply = await reply_awaitable
        except self._frame_errors as exc:
            self._protocol_error(exc)
        except asyncio.CancelledError:
            self.close()
            raise
        except Exception:
            self.counters["handler_errors"] += 1
            log.exception("error answering a request; closing the connection")
            self.close()
        finally:
            if not parked:
                self.busy = False
        self.inflight.complete(slot, reply)
        self._after_reply()

    def _after_reply(self) -> None:
        """A reply completed or a record set finished sending: write what is now at the head, read on."""
        if not self.closed:
            self.last_active = time.monotonic()
            self._write_ready()
            self._pump()
        self._account()

    def _write_ready(self) -> None:
        """Write the completed replies at the head of `inflight`, in order, until one is still to come."""
        inflight = self.inflight
        while not (self.writing or self.closed):
            slot = inflight.pop_ready()
            if slot is None:
                return
            if slot.reply is not None:
                self._write_reply(slot.reply)

    def _write_reply(self, reply) -> None:
        pending = self._write(reply)
        if pending is not None:  # the rest of a record set: later replies wait until it is sent
            self.writing = True
            try:
                self.server.spawn(self._finish_write(pending))
            except RuntimeError:  # shutting down
                pending.close()
                self.close()

    async def _finish_write(self, pending) -> None:
        try:
            await pending
        except asyncio.CancelledError:
            self.close()
            raise
        except OSError as exc:  # the peer went away mid-reply
            log.debug("connection lost while replying: %s", exc)
            self.close()
        finally:
            self.writing = False
        self._after_reply()

    def _protocol_error(self, exc: Exception) -> None:
        self.counters["protocol_errors"] += 1
        peer = self.transport.get_extra_info("peername") if self.transport else None
        log.info("closing connection from %s: %s", peer, exc)
        self.close()
