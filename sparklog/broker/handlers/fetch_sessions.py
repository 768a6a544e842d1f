"""The incremental fetch session cache (KIP-227): which partitions a Fetch reads, and which its answer carries.

A session names a topic by its id from Fetch v13 on, by its name before (`topic_key`, as Kafka's sessions do):
a topic deleted and re-created under the same name is another topic to a session of ids.

Sans-IO: the caller passes the time (`now_ms`) and gets back what to fetch and, after the read, the answer to
send; nothing here reads a log or a socket. The Fetch handler is the one caller (handlers/fetch.py); the
per-partition read stays in its core.

A request names a session by (session_id, session_epoch):
Rule 1 (full fetches): epoch 0 (INITIAL) or -1 (FINAL) is a full fetch of the request's partitions. A full fetch
naming a session id other than 0 first removes that session (a client closes or restarts its session so). Epoch -1
is sessionless (no session is made: what every Fetch was before sessions). Epoch 0 asks for a new session: one is
made (id a random positive int32 not in use, next epoch 1) if the cache has a free slot or an eviction (Rule 4)
frees one, and its id is answered in the response's session_id; else session_id 0 (the client keeps full fetches).
Rule 2 (incremental fetches): any other epoch is incremental. An unknown session id (never made, removed or
evicted) is answered FETCH_SESSION_ID_NOT_FOUND, a known one with an epoch other than the one it expects
INVALID_FETCH_SESSION_EPOCH, both in the response's top-level error_code with no partitions, the session left as
it was; the client starts over with a full fetch (Rule 1). Otherwise the request's partitions are added to the
session or replace its entry (fetch offset, leader epoch, max bytes), its forgotten_topics_data are removed, the
expected epoch advances (after 2^31-1 it wraps to 1), and the fetch reads every partition of the session. A
session left empty is removed and the fetch is sessionless.
Rule 3 (incremental answers): an incremental response carries only the partitions with records, an error, a
diverging epoch (Fetch v12+, KIP-320), a preferred read replica (KIP-392, follower_reads.py), or a high watermark,
last stable offset or log start offset other than the one last answered for it in this session (a partition
answered with an error is answered again when the error clears; a newly added one is answered).
Rule 4 (eviction, Kafka's FetchSessionCache): at most `max.incremental.fetch.session.cache.slots` sessions (0: no
sessions, every fetch is full). A session is privileged when a follower made it (replica_id >= 0). A new session
when the cache is full may take the slot of
  (a) the session unused longest, if it has been unused more than EVICTION_MS, whoever asks; else
  (b) the least valuable evictable session, if the newcomer is not less valuable than it. Value orders by
      (privileged, partitions, id): an unprivileged session is worth less than any privileged one, then fewer
      partitions are worth less. Evictable by a privileged newcomer: an unprivileged session, or any session that
      was older than EVICTION_MS when last used; by an unprivileged newcomer: only a session older than
      EVICTION_MS when last used. So a consumer never displaces a recently made session, and a follower displaces
      consumers' sessions but not another follower's young one.
  Otherwise no session is made (Rule 1's session_id 0). A fetch that uses a session (Rule 2) marks it used.
Rule 5 (what an incremental fetch reads, so that it costs what changed, not what the session holds): the
caller passes a `generation` (the objects that say who leads what: a new one whenever leadership, leader epochs
or replica sets change) and `changed(plog)` whenever a partition's visible state moves (its high watermark, its
log end on a leader with followers, its log start, a truncation, its ISR, a fence: the purgatory's notify, the one
authority, calls it from any thread; a session of ids is marked through the topic's id, `topic_id_of`). A session keeps the set of its partitions marked since they were last
read (`pending`). An incremental fetch reads the partitions the request names, the marked ones (taking the
marks before reading, so a change during the read marks again), and every partition of the session when its
generation is not the one of the session's last fetch (a new session's first incremental fetch too). A
partition read and answered (in the core's response before Rule 3's filter: the core leaves out only the
partitions it found quiet, whose answer Rule 3 would drop) stays marked: it is read again next time, until a
read finds it quiet. A long poll takes the marks that arrive while it waits (`refresh`) and is woken through
`wake(session)`; so an incremental fetch that reads no partition still waits, on its session, up to its
max_wait_ms (answered at once, an idle follower's fetch loop spins). Without a generation (`None`) every fetch reads every partition of the session.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from sparklog.broker.handlers.error_codes import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, NONE
from sparklog.protocol.fetch import FetchResponse, FetchTopic

__all__ = ["FetchSessionCache", "FetchContext", "EVICTION_MS", "INITIAL_EPOCH", "FINAL_EPOCH", "INVALID_SESSION_ID",
           "DEFAULT_SLOTS", "next_epoch", "topic_key"]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's min incremental fetch session eviction time
DEFAULT_SLOTS = 1000  # max.incremental.fetch.session.cache.slots: Kafka's default
_MAX_EPOCH = 0x7FFFFFFF

Key = tuple[str | uuid.UUID, int]  # (topic key, partition)


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (Rule 2): 1 after 2^31-1, FINAL stays FINAL."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


def topic_key(topic) -> str | uuid.UUID:
    """What a session names a topic by, as Kafka's does (KIP-516): from Fetch v13 on its id (a request's topic,
    forgotten topic or answered topic carries one then, so a re-created topic is another topic), before that
    its name."""
    topic_id = topic.topic_id
    return topic.topic if topic_id.int == 0 else topic_id


def _fetch_topic(key: str | uuid.UUID, partitions: list) -> FetchTopic:
    if key.__class__ is str:
        return FetchTopic(topic=key, partitions=partitions)
    return FetchTopic(topic="", topic_id=key, partitions=partitions)  # the Fetch handler names it by its id


class SessionFetch(NamedTuple):
    """What the core reads for an incremental fetch: the request's settings over (some of) the session's
    partitions (Rule 5)."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    topics: list
    rack_id: str = ""  # a consumer's rack (KIP-392, follower_reads.py)


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental request must carry
    # topic (topic_key) -> partition index -> the request's FetchPartition last given for it (fetch offset, epoch,
    # max bytes)
    partitions: dict = field(default_factory=dict)
    answered: dict = field(default_factory=dict)  # (topic key, index) -> (hw, lso, log start) last answered, or None
    pending: set = field(default_factory=set)  # Rule 5: the partitions to read at the next fetch
    seen: Any = None  # Rule 5: the generation of the last fetch (None: read every partition next time)
    # where each partition is in `partitions` ((topic's place, partition's place): the order a read of some keeps)
    places: dict = field(default_factory=dict)
    _next_place: int = 0

    @property
    def size(self) -> int:
        return len(self.answered)

    def value(self) -> tuple:
        """Rule 4's order of worth: (privileged, partitions, id)."""
        return self.privileged, self.size, self.id

    def evictable_by(self, privileged: bool, eviction_ms: int) -> bool:
        old = self.last_used_ms - self.created_ms > eviction_ms
        return old or (privileged and not self.privileged)

    def update(self, body) -> tuple[list[Key], list[Key]]:
        """Rule 2: add or replace the request's partitions, drop its forgotten ones; (the partitions new to the
        session, those it no longer holds)."""
        added, removed = [], []
        for topic in body.topics:
            name = topic_key(topic)
            parts = self.partitions.setdefault(name, {})
            for part in topic.partitions:
                parts[part.partition] = part
                key = (name, part.partition)
                if key not in self.answered:
                    self.answered[key] = None
                    self.places[key] = self._place(name)
                    added.append(key)
        for gone in body.forgotten_topics_data or ():
            name = topic_key(gone)
            parts = self.partitions.get(name, {})
            for index in gone.partitions:
                parts.pop(index, None)
                if self.places.pop((name, index), None) is not None:
                    del self.answered[(name, index)]
                    removed.append((name, index))
            if not parts:
                self.partitions.pop(name, None)
        return added, removed

    def _place(self, topic: str | uuid.UUID) -> tuple[int, int]:
        """A new partition's place: after every other (a topic's place is that of its first partition held)."""
        self._next_place += 1
        first = next(iter(self.partitions[topic]))
        held = self.places.get((topic, first))
        return (self._next_place if held is None else held[0]), self._next_place

    def fetch_of(self, body, keys=None) -> SessionFetch:
        """The request's settings over the session's partitions: all of them, or those of `keys`."""
        if keys is None:
            topics = [_fetch_topic(name, list(parts.values())) for name, parts in self.partitions.items()]
        else:
            places = self.places
            topics = _grouped(self.partitions, sorted((key for key in keys if key in places), key=places.__getitem__))
        return SessionFetch(body.replica_id, body.max_wait_ms, body.min_bytes, body.max_bytes, body.isolation_level,
                            topics, body.rack_id)

    def take_marks(self) -> list[Key]:
        """Rule 5: the marked partitions, unmarked before the caller reads them (any thread may mark meanwhile)."""
        pending = self.pending
        if not pending:
            return []
        keys = list(pending)
        pending.difference_update(keys)
        return keys


def _grouped(partitions: dict, keys) -> list:
    """The FetchPartitions of `keys` the session still holds, by topic (in the order of `keys`)."""
    by_topic: dict[str | uuid.UUID, list] = {}
    for name, index in keys:
        part = partitions.get(name, {}).get(index)
        if part is not None:
            by_topic.setdefault(name, []).append(part)
    return [_fetch_topic(name, parts) for name, parts in by_topic.items()]


def _answer(part) -> tuple | None:
    """What Rule 3 compares of a partition's answer; None for an error (answered again once it clears) or a
    preferred read replica (answered every time, as Kafka's session does)."""
    if part.error_code != NONE or part.preferred_read_replica >= 0:
        return None
    return part.high_watermark, part.last_stable_offset, part.log_start_offset


def _same(generation, seen) -> bool:
    """Rule 5: is `generation` the one last seen (element by element, by identity: they are big objects)?"""
    return seen is not None and len(seen) == len(generation) and all(a is b for a, b in zip(generation, seen))


class FetchContext:
    """One Fetch's use of the cache: `fetch` is what the core reads (the request itself, or the session's
    partitions Rule 5 names), `finish(response)` the response to send (session id set, filtered by Rule 3).
    A Fetch v13+ sets `namer` (fetch_topic_ids.py): every `fetch` built is named by it, and the answers it gives
    for the topics it cannot name (`unknown`) join the response before Rule 3's filter."""

    __slots__ = ("fetch", "_cache", "_session", "_create", "_now_ms", "_request", "_reading", "namer", "unknown")

    @property
    def last_answers(self) -> dict | None:
        """In an incremental session, (topic, partition) -> what Rule 3 last answered for it (None: answer it);
        else None."""
        return None if self._session is None else self._session.answered

    @property
    def session(self) -> FetchSession | None:
        """The incremental session this fetch uses (the key a long poll is woken by, Rule 5), or None."""
        return self._session

    @property
    def whole(self):
        """What the fetch names in all: the request, or every partition of its session."""
        if self._session is None:
            return self.fetch
        return self._named(self._session.fetch_of(self._request))

    def __init__(self, fetch, cache: FetchSessionCache, session: FetchSession | None, create: bool, now_ms: int):
        self.fetch = fetch
        self._cache = cache
        self._session = session
        self._create = create
        self._now_ms = now_ms
        self._request = fetch
        self._reading: set[Key] | None = None  # Rule 5: the partitions this fetch reads (None: all of them)
        self.namer: Callable[[Any], tuple[Any, list]] | None = None
        self.unknown: list = []

    def name_with(self, namer: Callable[[Any], tuple[Any, list]]) -> None:
        """Name `fetch`, and every one built after it, with `namer` (fetch -> (named fetch, answers of the topics
        it cannot name))."""
        self.namer = namer
        self.fetch = self._named(self.fetch)

    def _named(self, fetch):
        if self.namer is None:
            return fetch
        fetch, self.unknown = self.namer(fetch)
        return fetch

    def refresh(self, generation) -> Any:
        """Rule 5: `fetch` again, with the partitions marked since (or all of them, the generation having
        moved): what the core's next pass reads."""
        session = self._session
        if session is None or generation is None:
            return self.fetch
        if not _same(generation, session.seen):
            session.seen = generation
            session.take_marks()
            self._reading = set(session.answered)
        else:
            reading = self._reading
            if reading is None:
                reading = self._reading = {(topic_key(t), p.partition) for t in self._request.topics
                                           for p in t.partitions}
            reading.update(session.take_marks())
        self.fetch = self._named(session.fetch_of(self._request, self._reading))
        return self.fetch

    def finish(self, response: FetchResponse) -> FetchResponse:
        if self.unknown:
            response.responses += self.unknown
        session = self._session
        if session is not None:
            response.session_id = session.id
            response.responses = _changed(session, response.responses)
        elif self._create:
            response.session_id = self._cache.create(self._request, response, self._now_ms)
        return response


def _changed(session: FetchSession, responses: list) -> list:
    """Rule 3: the partitions to answer, each one's answer remembered; Rule 5: every partition the core
    answered stays marked."""
    answered, pending, kept = session.answered, session.pending, []
    for topic in responses:
        name, parts = topic_key(topic), []
        for part in topic.partitions:
            now = _answer(part)
            key = (name, part.partition_index)
            if key in answered:
                pending.add(key)
            if now is None or part.records or answered.get(key) != now or part.diverging_epoch is not None:
                parts.append(part)
                if key in answered:
                    answered[key] = now
        if parts:
            topic.partitions = parts
            kept.append(topic)
    return kept


def _no_wake(session: FetchSession) -> None:
    pass


def _no_id(topic: str) -> uuid.UUID | None:
    return None


class FetchSessionCache:
    """The sessions of one broker (module docstring)."""

    def __init__(self, slots: int = DEFAULT_SLOTS, eviction_ms: int = EVICTION_MS,
                 rng: random.Random | None = None, wake: Callable[[FetchSession], None] = _no_wake,
                 topic_id_of: Callable[[str], uuid.UUID | None] = _no_id) -> None:
        self.slots = slots
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self.wake = wake  # Rule 5: wakes a long poll parked on a session (any thread)
        self.topic_id_of = topic_id_of  # Rule 5: a topic's id, to mark the sessions that name it by id
        self._holders: dict[Key, tuple[FetchSession, ...]] = {}  # Rule 5: partition -> the sessions holding it

    def __len__(self) -> int:
        return len(self.sessions)

    def changed(self, plog) -> None:
        """Rule 5: `plog`'s visible state moved: mark it in every session holding it (any thread)."""
        topic, partition = plog.topic, plog.partition
        self._mark((topic, partition))
        topic_id = self.topic_id_of(topic)
        if topic_id is not None:
            self._mark((topic_id, partition))

    def _mark(self, key: Key) -> None:
        for session in self._holders.get(key, ()):
            session.pending.add(key)
            self.wake(session)

    def begin(self, body, now_ms: int, generation=None) -> FetchContext | int:
        """The context of the Fetch `body` (Rules 1, 2 and 5), or its top-level error code (Rule 2)."""
        session_id, epoch = body.session_id, body.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._drop(self.sessions.get(session_id))
            return FetchContext(body, self, None, epoch == INITIAL_EPOCH and self.slots > 0, now_ms)
        session = self.sessions.get(session_id)
        if session is None:
            return FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return INVALID_FETCH_SESSION_EPOCH
        self._hold(session, *session.update(body))
        if not session.answered:
            self._drop(session)
            return FetchContext(body, self, None, False, now_ms)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        context = FetchContext(body, self, session, False, now_ms)
        if generation is None:
            context.fetch = session.fetch_of(body)
        else:
            context.refresh(generation)
        return context

    def create(self, body, response: FetchResponse, now_ms: int) -> int:
        """Rule 1's new session for the full fetch `body` answered `response`: its id, or 0 when Rule 4 finds no
        slot."""
        privileged = body.replica_id >= 0
        size = sum(len(topic.partitions) for topic in body.topics)
        if len(self.sessions) >= self.slots and not self._evict(privileged, size, now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, now_ms, now_ms)
        self._hold(session, *session.update(body))
        for topic in response.responses:
            for part in topic.partitions:
                key = (topic_key(topic), part.partition_index)
                if key in session.answered:
                    session.answered[key] = _answer(part)
        self.sessions[session.id] = session
        return session.id

    def _hold(self, session: FetchSession, added: list[Key], removed: list[Key]) -> None:
        """Rule 5: who is marked when a partition changes; tuples replaced whole, for `changed` on other threads."""
        holders = self._holders
        for key in added:
            holders[key] = holders.get(key, ()) + (session,)
        for key in removed:
            left = tuple(s for s in holders.get(key, ()) if s is not session)
            if left:
                holders[key] = left
            else:
                holders.pop(key, None)

    def _drop(self, session: FetchSession | None) -> None:
        """Remove `session` (closed, emptied or evicted) and its marks."""
        if session is not None and self.sessions.pop(session.id, None) is session:
            self._hold(session, [], list(session.answered))

    def _evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Rule 4: free one slot for a newcomer, or say there is none."""
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stale.last_used_ms > self.eviction_ms:
            return self._remove(stale)
        evictable = [s for s in self.sessions.values() if s.evictable_by(privileged, self.eviction_ms)]
        if not evictable:
            return False
        cheapest = min(evictable, key=FetchSession.value)
        if (privileged, size, 0) < cheapest.value():
            return False
        return self._remove(cheapest)

    def _remove(self, session: FetchSession) -> bool:
        self._drop(session)
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _MAX_EPOCH)
            if session_id not in self.sessions:
                return session_id
