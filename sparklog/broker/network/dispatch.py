"""Frames to handlers and back: the `App` the server runs (see server.py for the contract).

Rule 1: a frame that decodes goes to its handler (`handlers.HANDLERS`, `admin_handlers.ADMIN_HANDLERS`,
`coordinator/transaction/handlers.TRANSACTION_HANDLERS`, `handlers/client_quotas.QUOTA_HANDLERS`); its response body is encoded against the
request's header, so the correlation id and the response header version always match the request.
Rule 2: an ApiVersions request of a version we do not serve gets the v0 fallback (error 35 and our range);
any other unknown api or version, and any frame that does not parse, closes the connection (Kafka's
behaviour: there is no version in which an answer could be encoded).
Rule 3: nothing but `CloseConnection` or a reply leaves `handle_frame` for what a client sends (the fuzz
tests in tests/unit/broker/network/test_dispatch_fuzz.py hold it to that).
Rule 4: a Produce of one topic and one partition from an identified session is first offered to the fast
path (handlers.produce.handle_single_partition_produce); what it leaves (NOT_SERVED_FAST) goes through Rule 1, and
the client sees the same bytes either way. An acks=all write it leaves waiting is Parked, as the general
path's is. A transactional record set the leader must verify first is left to the general path (produce.py
Rule 6), whose verification is Parked too (its appends keep their order: verifier.py Rule 3).
Rule 5: a run of Produce frames read together (server.py's `handle_frames`) is answered as Rules 1 and 4
answer each frame alone, in order, except that consecutive requests Rule 4 would serve for the same led
partition (each with a non-empty record set) are appended in one group (handlers.produce.handle_produce_group):
one lock, one write, the high watermark and flush.messages once, each batch still checked, offset and
answered on its own; the replies of a group's successes answered at once are encoded in one call and
carried by the first of them (the others None, as server.py's contract allows: the same bytes leave). The
property test in tests/unit/broker/handlers/test_produce_group.py holds it to the log bytes and the replies of
one-at-a-time handling. Such runs are usually not framed one by one at all: `SCAN_RUN`
(protocol/produce_run.py, compiled) decodes the one-partition Produce requests at the head of a read in
one call, and `handle_run` answers them as Rule 5 answers their frames.
Rule 6: a Fetch of one topic and one partition from an identified session is first offered to the Fetch
fast path (handlers.fetch.handle_single_partition_fetch: a consumer's read with records ready); what it leaves
goes through Rule 1, and the client sees the same bytes either way
(tests/unit/broker/handlers/test_fetch_fast_path.py).
Rules 4-6 hold only without an authorizer: with `authorizer.class.name` set, every Produce and Fetch takes
Rule 1's path, through the checks of broker/authorization.py.
Rule 7: while any client quota is configured (broker/quota/manager.py), every frame is metered before Rules
1-6 answer it, and with none configured nothing is (handle_frame is then the unmetered method itself, and runs
take Rule 5's path unchanged). A request whose (principal, client-id) resolves to a quota: a Produce records
its frame's bytes (per request, so per batch on the fast path), a consumer's Fetch is answered only if its
group owes no throttle and then within one window's worth of bytes (the response's bytes recorded once
known), and every request's handling time is recorded against request_percentage. A run (Rule 5) whose
frames all name one client-id that no quota applies to is answered as Rule 5 answers it; any other run's
frames are metered one by one. A throttle owed (the
largest of the kinds) is answered at once in the response's throttle_time_ms (through Rule 1's general
path, which stamps it; a throttled Fetch gets an empty response) and the connection's `mute_s` set, for
server.py to stop reading it that long (KIP-219). Follower fetches (replica_id >= 0) are exempt.
Rule 8: on a SASL listener (SASL_PLAINTEXT) a session is gated by its SaslAuthenticator until authentication
completes: every frame goes to it, before the fast paths of Rules 4-6 and the runs of Rule 5, and it serves only
ApiVersions, SaslHandshake and SaslAuthenticate (broker/security/sasl_authenticator.py). After that the session's
SaslHandshake/SaslAuthenticate requests (a re-authentication) go to it too; on other listeners they are answered
ILLEGAL_SASL_STATE (handlers/security.py).

Each connection has a `ClientSession` that names the client (the software name and version it sent in
ApiVersions v3+, else its header's client_id) and collects the (api, version) pairs it used; `statistics()`
merges them per client name: the API x version x client matrix of issue 3.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from types import CoroutineType

from sparklog.broker.authorization import guarded
from sparklog.broker.handlers.acls import ACL_HANDLERS
from sparklog.broker.handlers.admin import ADMIN_HANDLERS
from sparklog.broker.handlers.reassignments import REASSIGNMENT_HANDLERS
from sparklog.broker.handlers.client_quotas import QUOTA_HANDLERS
from sparklog.broker.coordinator.transaction.handlers import TRANSACTION_HANDLERS
from sparklog.broker.handlers import HANDLERS as _HANDLERS
from sparklog.broker.handlers.error_codes import NOT_SERVED_FAST
from sparklog.broker.handlers import fetch_topic_ids
from sparklog.broker.handlers.fetch import handle_single_partition_fetch
from sparklog.broker.handlers.produce import (fast_produce_partition, handle_produce_group,
                                              handle_single_partition_produce, is_transactional)
from sparklog.broker.handlers.security import SECURITY_HANDLERS
from sparklog.broker.network.server import CloseConnection, Parked
from sparklog.broker.security.sasl_authenticator import SaslAuthenticator, sasl_listeners
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.errors import RemoteProtocolError, UnsupportedVersion
from sparklog.protocol.frame import NEED_DATA, FrameDecoder
from sparklog.protocol.fetch import FIRST_FLEXIBLE_VERSION as FIRST_FLEXIBLE_FETCH_VERSION
from sparklog.protocol.fetch import FetchResponse, decode_single_partition as decode_single_partition_fetch
from sparklog.protocol.produce import SinglePartitionProduce, decode_single_partition
from sparklog.protocol.produce_run import scan_produce_run
from sparklog.protocol.registry import ANONYMOUS, decode_request, encode_api_versions_fallback, encode_response

log = logging.getLogger(__name__)

# A client names itself; hostile ones could name themselves a million ways. Past this many distinct names
# (per broker lifetime) the rest are counted under OTHER_CLIENTS, so the matrix stays bounded.
MAX_TRACKED_CLIENTS = 256
MAX_CLIENT_NAME_CHARS = 100
OTHER_CLIENTS = "(other clients)"
UNNAMED_CLIENT = "(no client_id)"
_API_VERSIONS = int(ApiKey.API_VERSIONS)
_PRODUCE = int(ApiKey.PRODUCE)
_PRODUCE_KEY = _PRODUCE.to_bytes(2, "big")  # the int16 api_key a request frame opens with
_FETCH = int(ApiKey.FETCH)
_FETCH_KEY = _FETCH.to_bytes(2, "big")
HANDLERS = {**_HANDLERS, **ADMIN_HANDLERS, **TRANSACTION_HANDLERS, **ACL_HANDLERS, **QUOTA_HANDLERS, **SECURITY_HANDLERS,
            **REASSIGNMENT_HANDLERS}
_SASL_APIS = frozenset({int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)})
_VERSION_BITS = 16  # (api_key, version) is recorded as one int: api_key << 16 | version
# Apis whose coroutines only wait in the purgatory, the request having taken effect (handlers Rule 1):
# the server goes on with the requests behind them (server.py Rule 1). Any other coroutine is a barrier.
PARKED_APIS = frozenset({int(ApiKey.PRODUCE), int(ApiKey.FETCH)})


@dataclass(frozen=True)
class DispatcherStatistics:
    requests_by_api: dict
    unsupported_versions: int
    malformed: int
    fast_produces: int  # Produce requests the fast path answered (Rule 4)
    grouped_produces: int  # those of them appended in a group of two or more (Rule 5)
    # client name -> api name -> sorted versions served; and the versions refused (ApiVersions fallback)
    versions_by_client: dict
    refused_by_client: dict


class ClientSession:
    """One connection as the dispatcher sees it: who the client is, and the sets its requests go into."""

    __slots__ = ("client", "host", "served", "refused", "principal", "listener", "mute_s", "quota", "quota_key",
                 "sasl", "gate", "close_at")

    def __init__(self, peer_ip: str = "", listener: str = "") -> None:
        self.client: str | None = None
        self.host = f"/{peer_ip}" if peer_ip else ""  # as Kafka writes a client's address
        self.principal = ANONYMOUS  # who the connection authenticated as (KafkaPrincipal form)
        self.listener = listener  # the listener's name (PLAINTEXT, SASL_SSL, ...), "" for callers without one
        self.served: dict[int, int] | None = None  # (api_key << 16 | version) -> requests, shared per client
        self.refused: dict[int, int] | None = None
        self.mute_s = 0.0  # set by Rule 7: the server stops reading this connection for so long, then clears it
        self.quota = None  # the ClientQuota of (principal, client-id), cached under quota_key (Rule 7)
        self.quota_key: tuple | None = None
        self.sasl = None  # on a SASL listener: its SaslAuthenticator (broker/security/sasl_authenticator.py)
        self.gate = None  # the authenticator until authentication completes: it gets every frame (Rule 8)
        self.close_at: float | None = None  # time.monotonic() past which server.py closes the connection


class Dispatcher:
    """Decodes a frame, runs its handler, encodes the reply (server.App)."""

    NEED_DATA = NEED_DATA
    FRAME_ERRORS = (RemoteProtocolError,)

    def __init__(self, state) -> None:
        self.state = state
        self.max_frame_bytes = state.config.socket_request_max_bytes
        self._unsupported = 0
        self._malformed = 0
        self._fast_produces = 0
        self._grouped_produces = 0
        # client name -> {(api_key << 16 | version): requests}; one dict update per request is the whole
        # bookkeeping of the hot path (requests_by_api is summed from it on demand)
        self._served: dict[str, dict[int, int]] = {}
        self._refused: dict[str, dict[int, int]] = {}
        self.fast_fetches = 0  # Fetch requests the fast path answered (Rule 6)
        self._default_session = ClientSession()  # for callers without a connection (tests, tools)
        # With an authorizer every request is checked, and the fast paths are declined (authorization Rule 4)
        self.handlers = HANDLERS if state.authorization is None else guarded(HANDLERS)
        if state.authorization is not None:  # Fetch v13+ names topics by id: named for the ACLs first
            self.handlers[ApiKey.FETCH] = fetch_topic_ids.named_first(self.handlers[ApiKey.FETCH])
        self.fast = state.authorization is None
        self.metering = False  # Rule 7: some quota is configured; handle_frame is then _metered
        self.throttled = 0  # responses that carried a throttle (Rule 7)
        quotas = getattr(state, "quotas", None)
        if quotas is not None:
            quotas.on_active = self.set_metering
            self.set_metering(quotas.active)
        self._sasl = sasl_listeners(state)  # {listener name: its SASL settings} of the SASL_* listeners
        listeners = getattr(state.config, "listeners", ())
        self._default_listener = listeners[0].name if listeners else ""  # for callers that name none
        self._new_decoder: FrameDecoder | None = None
        self.meters = state.request_meters  # latency and error codes per api, for the metrics endpoint

    def new_decoder(self) -> FrameDecoder:
        self._new_decoder = FrameDecoder(self.max_frame_bytes)
        return self._new_decoder

    def new_session(self, peer_ip: str = "", listener: str | None = None) -> ClientSession:
        """A connection's session on `listener` (the broker's first when None); on a SASL listener gated by its
        authenticator, which bounds the decoder server.py made for the same connection just before (Rule 8)."""
        name = self._default_listener if listener is None else listener
        sasl = self._sasl.get(name)
        session = ClientSession(peer_ip, name)
        if sasl is not None:
            session.sasl = SaslAuthenticator(sasl, session, self._new_decoder)
        self._new_decoder = None
        return session

    def handle_frame(self, frame, session: ClientSession | None = None):
        if session is None:
            session = self._default_session
        if session.gate is not None:
            return session.gate.handle_frame(frame, lambda request: self._serve(request, session))
        if session.served is not None and self.fast:
            opening = frame[:2]
            if opening == _PRODUCE_KEY:
                reply = self._single_partition_produce(frame, session.served)
                if reply is not NOT_SERVED_FAST:
                    return reply
            elif opening == _FETCH_KEY:
                reply = self._single_partition_fetch(frame, session.served)
                if reply is not NOT_SERVED_FAST:
                    return reply
        return self._general(frame, session, started=time.perf_counter())  # the fast paths time their own

    def _general(self, frame, session: ClientSession, throttle_ms: int = 0, fetch_cap: int | None = None,
                 started: float | None = None):
        """Rule 1 for `frame`; with a throttle (Rule 7) stamped in the response's throttle_time_ms, and a Fetch's
        byte limits lowered to `fetch_cap`."""
        try:
            request = decode_request(frame)
        except UnsupportedVersion as exc:
            return self._unsupported_version(exc, session)
        except RemoteProtocolError as exc:
            self._malformed += 1
            raise CloseConnection(str(exc)) from None
        if session.sasl is not None and request.header.api_key in _SASL_APIS:
            return session.sasl.handle_request(request)  # a re-authentication (KIP-368)
        return self._serve(request, session, throttle_ms, fetch_cap, started)

    def _serve(self, request, session: ClientSession, throttle_ms: int = 0, fetch_cap: int | None = None,
               started: float | None = None):
        """Rule 1 for a decoded request; its latency (for the metrics endpoint) counted from `started`, the
        frame's arrival at the dispatcher, or from now."""
        if started is None:
            started = time.perf_counter()
        request.client_host = session.host
        request.principal = session.principal
        request.listener = session.listener
        header = request.header
        api_key = header.api_key
        if api_key == _API_VERSIONS or session.served is None:
            self._identify(session, request)
        served = session.served
        key = api_key << _VERSION_BITS | header.api_version
        served[key] = served.get(key, 0) + 1
        if fetch_cap is not None and api_key == _FETCH:
            cap_fetch(request.body, fetch_cap)
        body = self.handlers[api_key](request, self.state)
        if body is None:
            self.meters.observe(api_key, time.perf_counter() - started)
            return None
        if body.__class__ is CoroutineType:
            later = self._encode_later(header, body, throttle_ms, started)
            return Parked(later) if api_key in PARKED_APIS else later
        if throttle_ms and hasattr(body, "throttle_time_ms"):
            body.throttle_time_ms = throttle_ms
        return self._answered(header, body, started)

    def set_metering(self, active: bool) -> None:
        """Rule 7 on or off: with no quota configured, handle_frame is the unmetered method itself."""
        self.metering = active
        if active:
            self.handle_frame = self._metered
        else:
            self.__dict__.pop("handle_frame", None)

    def _metered(self, frame, session: ClientSession | None = None):
        """handle_frame while quotas are configured (Rule 7); a session still authenticating (Rule 8) is
        neither metered nor served here."""
        if session is None:
            session = self._default_session
        if session.gate is not None:
            return Dispatcher.handle_frame(self, frame, session)
        quotas = self.state.quotas
        now = time.monotonic()
        quotas.sweep(now)
        quota = self._quota_of(frame, session, quotas)
        opening = frame[:2]
        if quota is None or (opening == _FETCH_KEY and fetch_replica_id(frame) >= 0):
            return Dispatcher.handle_frame(self, frame, session)  # unquoted, or replication: exempt
        started = time.perf_counter()
        throttle = quota.request_throttle(now)
        if opening == _FETCH_KEY:
            throttle = max(throttle, quota.fetch_throttle(now))
            reply = self._metered_fetch(frame, session, quota, throttle)
        else:
            if opening == _PRODUCE_KEY:
                throttle = max(throttle, quota.record_produce(len(frame), now))
            reply = self._general(frame, session, throttle) if throttle else Dispatcher.handle_frame(self, frame, session)
        quota.record_request_time(time.perf_counter() - started, now)
        if throttle:
            session.mute_s = throttle / 1000.0
            self.throttled += 1
        return reply

    def _unquoted_run(self, frames: list, session: ClientSession) -> bool:
        """Rule 7 for a run: True when no quota applies to any of its frames (one client-id, resolving to none),
        so that Rule 5 answers it as it would with no quota configured; else its frames are metered one by one."""
        quotas = self.state.quotas
        if self._quota_of(frames[0], session, quotas) is not None:
            return False
        client_id = session.quota_key[0]
        return all(header_client_id(frame) == client_id for frame in frames)

    def _quota_of(self, frame, session: ClientSession, quotas):
        key = (header_client_id(frame), session.principal, quotas.generation)
        if key != session.quota_key:
            session.quota = quotas.client_quota(session.principal, key[0])
            session.quota_key = key
        return session.quota

    def _metered_fetch(self, frame, session: ClientSession, quota, throttle: int):
        """A consumer's Fetch under a consumer_byte_rate (Rule 7): owing a throttle, an empty response with it;
        else served (the fast path first) within one window's worth of bytes, and the response's size recorded."""
        if throttle:
            return self._empty_fetch(frame, throttle)
        cap = quota.fetch_cap(self.state.quotas.windows.size_s)
        reply = NOT_SERVED_FAST
        request = decode_single_partition_fetch(frame) if session.served is not None and self.fast else None
        if request is not None:
            if cap is not None:
                request = request._replace(max_bytes=min(request.max_bytes, cap),
                                           partition_max_bytes=min(request.partition_max_bytes, cap))
            reply = handle_single_partition_fetch(request, self.state)
            if reply is not NOT_SERVED_FAST:
                self.fast_fetches += 1
                key = _FETCH << _VERSION_BITS | request.api_version
                session.served[key] = session.served.get(key, 0) + 1
        if reply is NOT_SERVED_FAST:
            reply = self._general(frame, session, 0, cap)
        if reply.__class__ is Parked:
            return Parked(_record_fetch_later(reply.awaitable, quota))
        if reply.__class__ is list:
            quota.record_fetch(reply_size(reply), time.monotonic())
        return reply

    def _empty_fetch(self, frame, throttle: int):
        try:
            request = decode_request(frame)
        except RemoteProtocolError as exc:
            raise CloseConnection(str(exc)) from None
        return encode_response(request.header, self._throttled_fetch(request.body, throttle))

    def _throttled_fetch(self, body, throttle: int) -> FetchResponse:
        """A throttled Fetch's empty answer: in an incremental session the session takes the request and answers
        with its id (its epoch moved), as Kafka's getThrottledResponse does; a full fetch makes no session."""
        context = self.state.fetch_sessions.begin(body, int(time.monotonic() * 1000))
        if context.__class__ is int:
            return FetchResponse(throttle_time_ms=throttle, error_code=context, session_id=0, responses=[])
        session_id = 0 if context.session is None else context.session.id
        return FetchResponse(throttle_time_ms=throttle, error_code=0, session_id=session_id, responses=[])

    # server.py's optional run contract: consecutive frames opening with RUN_KEY (Produce requests) are
    # handed over together to handle_frames
    RUN_KEY = _PRODUCE_KEY

    def handle_frames(self, frames: list, session: ClientSession, replies: list) -> None:
        """handle_frame of each frame, in order, each reply appended to `replies` (Rule 5): consecutive
        fast-path Produce requests of one led partition are appended to its log together
        (handlers.produce.handle_produce_group), and the replies of a group's successes may be carried by the first
        of them (the others None: server.py's contract). Raises CloseConnection as handle_frame does, the
        replies of the frames before it already in `replies`."""
        if session.served is None or session.gate is not None or not self.fast or (
                self.metering and not self._unquoted_run(frames, session)):
            for frame in frames:
                replies.append(self.handle_frame(frame, session))
            return
        self._run_of([decode_single_partition(frame) or frame for frame in frames], session, replies)

    # server.py's optional scan contract: the one-partition Produce requests at the head of a read, decoded
    # in one call (protocol/produce_run.py), are handed over to handle_run
    SCAN_RUN = staticmethod(scan_produce_run)

    def handle_run(self, requests: list, session: ClientSession, replies: list) -> None:
        """handle_frames of the requests SCAN_RUN decoded (Rule 5), without decoding them again."""
        if session.served is None or session.gate is not None or not self.fast or (
                self.metering and not self._unquoted_run([r.frame for r in requests], session)):
            for request in requests:
                replies.append(self.handle_frame(request.frame, session))
            return
        self._run_of(requests, session, replies)

    def _run_of(self, items: list, session: ClientSession, replies: list) -> None:
        """Rule 5 over `items`: decoded one-partition Produce requests, or frames that are not one."""
        served = session.served
        state = self.state
        group: list = []
        group_led = None
        checked = None  # (topic, index, acks) of the last request fast_produce_partition accepted
        for item in items:
            request = item if item.__class__ is SinglePartitionProduce else None
            led = None
            if request is not None and len(request.records):
                if group_led is not None and checked == (request.topic, request.index, request.acks) and \
                        not is_transactional(request.records):
                    led = group_led  # nothing that decides it has changed since the same check of the last one
                else:
                    led = fast_produce_partition(request, state)
                    checked = None if led is None else (request.topic, request.index, request.acks)
            if led is not None and (group_led is None or led is group_led):
                group.append(request)
                group_led = led
                continue
            if group:
                self._produce_group(group, group_led, served, replies)
                group, group_led = [], None
            if led is not None:
                group, group_led = [request], led
                continue
            checked = None
            replies.append(self.handle_frame(item if request is None else request.frame, session))
        if group:
            self._produce_group(group, group_led, served, replies)

    def _produce_group(self, requests: list, led, served: dict, replies: list) -> None:
        started = time.perf_counter()
        if len(requests) == 1:
            request = requests[0]
            answers = [handle_single_partition_produce(request, self.state)]
        else:
            answers = handle_produce_group(requests, led, self.state)
            self._grouped_produces += len(requests)
        self.meters.observe(_PRODUCE, time.perf_counter() - started, len(requests))
        self._fast_produces += len(requests)
        version = requests[0].api_version
        for request in requests:  # counted per group: one version per client, bar a mid-read change
            if request.api_version != version:
                for other in requests:
                    key = _PRODUCE << _VERSION_BITS | other.api_version
                    served[key] = served.get(key, 0) + 1
                break
        else:
            key = _PRODUCE << _VERSION_BITS | version
            served[key] = served.get(key, 0) + len(requests)
        for reply in answers:
            replies.append(Parked(reply) if reply.__class__ is CoroutineType else reply)

    def _single_partition_produce(self, frame, served: dict):
        """The Produce fast path (Rule 4); NOT_SERVED_FAST, having done nothing, when it does not apply."""
        request = decode_single_partition(frame)
        if request is None:
            return NOT_SERVED_FAST
        started = time.perf_counter()
        reply = handle_single_partition_produce(request, self.state)
        if reply is NOT_SERVED_FAST:
            return reply
        self.meters.observe(_PRODUCE, time.perf_counter() - started)
        self._fast_produces += 1
        key = _PRODUCE << _VERSION_BITS | request.api_version
        served[key] = served.get(key, 0) + 1
        return Parked(reply) if reply.__class__ is CoroutineType else reply

    def _single_partition_fetch(self, frame, served: dict):
        """The Fetch fast path (Rule 6); NOT_SERVED_FAST, having done nothing, when it does not apply."""
        request = decode_single_partition_fetch(frame)
        if request is None:
            return NOT_SERVED_FAST
        started = time.perf_counter()
        reply = handle_single_partition_fetch(request, self.state)
        if reply is NOT_SERVED_FAST:
            return reply
        self.meters.observe(_FETCH, time.perf_counter() - started)
        self.fast_fetches += 1
        key = _FETCH << _VERSION_BITS | request.api_version
        served[key] = served.get(key, 0) + 1
        return reply

    def _unsupported_version(self, exc: UnsupportedVersion, session: ClientSession):
        self._unsupported += 1
        if exc.api_key != ApiKey.API_VERSIONS:
            raise CloseConnection(str(exc))
        if session.refused is None:
            session.refused = self._client_table(self._refused, session.client or UNNAMED_CLIENT)
        key = exc.api_key << _VERSION_BITS | (exc.api_version & 0xFFFF)
        session.refused[key] = session.refused.get(key, 0) + 1
        return [encode_api_versions_fallback(exc.correlation_id)]

    def _identify(self, session: ClientSession, request) -> None:
        """Name the session: the software name and version from ApiVersions v3+, else the client_id."""
        header, body = request.header, request.body
        software = getattr(body, "client_software_name", None) if header.api_key == _API_VERSIONS else None
        if software:
            client = f"{software} {getattr(body, 'client_software_version', None) or ''}".strip()
        elif session.client is not None:
            return
        else:
            client = header.client_id or UNNAMED_CLIENT
        client = client[:MAX_CLIENT_NAME_CHARS]
        if client != session.client:
            session.client = client
            session.served = self._client_table(self._served, client)
            if session.refused is not None:
                session.refused = self._client_table(self._refused, client)

    @staticmethod
    def _client_table(table: dict[str, dict[int, int]], client: str) -> dict[int, int]:
        found = table.get(client)
        if found is None:
            if len(table) >= MAX_TRACKED_CLIENTS:
                client = OTHER_CLIENTS
            found = table.setdefault(client, {})
        return found

    async def _encode_later(self, header, pending, throttle_ms: int, started: float):
        body = await pending
        if body is None:
            self.meters.observe(header.api_key, time.perf_counter() - started)
            return None
        if throttle_ms and hasattr(body, "throttle_time_ms"):
            body.throttle_time_ms = throttle_ms
        return self._answered(header, body, started)

    def _answered(self, header, body, started: float) -> list:
        """The encoded reply, its latency and its top-level error code counted (broker/meters.py Rule 1)."""
        api_key = header.api_key
        code = getattr(body, "error_code", 0)
        if code:
            self.meters.error(api_key, code)
        reply = encode_response(header, body)
        self.meters.observe(api_key, time.perf_counter() - started)
        return reply

    def requests_by_api(self) -> dict[str, int]:
        """{api name: requests served}, summed over the clients (any thread: the tables are copied first)."""
        names: dict[str, int] = {}
        for packed in list(self._served.values()):
            for key, count in list(packed.items()):
                name = api_name(key >> _VERSION_BITS)
                names[name] = names.get(name, 0) + count
        return names

    def statistics(self) -> DispatcherStatistics:
        return DispatcherStatistics(self.requests_by_api(), self._unsupported, self._malformed, self._fast_produces, self._grouped_produces,
                                    _matrix(self._served), _matrix(self._refused))


def header_client_id(frame) -> str:
    """The client_id of a request header (every header version holds it as an int16-sized string); "" if null."""
    size = int.from_bytes(frame[8:10], "big", signed=True)
    return "" if size <= 0 else bytes(frame[10:10 + size]).decode("utf-8", "replace")


def fetch_replica_id(frame) -> int:
    """A Fetch's replica_id: below v12 the int32 the body opens with (behind a v1 header); from v12 (a v2 header
    with tagged fields, and from v15 the id in the body's replica_state, KIP-903) the decoded body's; -1 for a
    frame that does not decode (it is metered, and refused by the general path)."""
    if int.from_bytes(frame[2:4], "big", signed=True) < FIRST_FLEXIBLE_FETCH_VERSION:
        size = max(0, int.from_bytes(frame[8:10], "big", signed=True))
        return int.from_bytes(frame[10 + size:14 + size], "big", signed=True)
    try:
        body = decode_request(frame).body
    except RemoteProtocolError:
        return -1
    return fetch_topic_ids.replica_id_of(body)


def cap_fetch(body, cap: int) -> None:
    """Lower a Fetch request's byte limits to `cap` (Rule 7)."""
    body.max_bytes = min(body.max_bytes, cap)
    for topic in body.topics:
        for part in topic.partitions:
            part.partition_max_bytes = min(part.partition_max_bytes, cap)


def reply_size(reply: list) -> int:
    return sum(len(chunk) for chunk in reply)


async def _record_fetch_later(awaitable, quota):
    reply = await awaitable
    if reply is not None:
        quota.record_fetch(reply_size(reply), time.monotonic())
    return reply


def api_name(key: int) -> str:
    """Kafka's name of an api key (ApiKey.INIT_PRODUCER_ID -> "InitProducerId"); the number if unknown."""
    try:
        name = ApiKey(key).name
    except ValueError:
        return str(key)
    return "".join(word.capitalize() for word in name.split("_"))


def _matrix(table: dict[str, dict[int, int]]) -> dict[str, dict[str, tuple[int, ...]]]:
    """{client: {api name: sorted versions}} from the packed (api_key << 16 | version) keys."""
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for client, packed in sorted(table.items()):
        by_api: dict[str, list[int]] = {}
        for value in sorted(list(packed)):
            version = value & 0xFFFF
            version = version - 0x10000 if version & 0x8000 else version  # an int16 on the wire
            by_api.setdefault(api_name(value >> _VERSION_BITS), []).append(version)
        out[client] = {api: tuple(versions) for api, versions in by_api.items()}
    return out
