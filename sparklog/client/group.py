"""ZooKeeper consumer groups (paper 3.2 and 3.3): decentralised rebalancing by Algorithm 1, at-least-once.

    consumer = GroupConsumer(["topic1"], "group1", "localhost:2181", auto_offset_reset="smallest")
    for record in consumer:
        process(record)                      # committed once the loop comes back for the next record
    streams = consumer.create_message_streams({"topic1": 2})["topic1"]   # the paper's API

Registries (see group_registry.py): `/consumers/<g>/ids/<id>` (ours, ephemeral, holds the subscription),
`/consumers/<g>/owners/<t>/<p>` (ephemeral), `/consumers/<g>/offsets/<t>/<p>` (persistent).

Algorithm 1, run by the coordinator thread on start and on every change of the broker registry, the consumer
registry or a subscribed topic's partitions (kazoo watches only set a flag): commit what was processed, stop
fetching and release every owned partition; read the registries; per subscribed topic T sort P_T and the
consumer streams C_T (each consumer contributes one "<id>-<n>" per stream, as Kafka 0.8 did) and take our
streams' range chunks (`coordination.rebalance.assign`); claim each partition; on a conflict (a consumer that
has not released yet) release all, back off (exponential with jitter from `rebalance.backoff.ms`, backoff.py) and retry; then fetch each
partition from its committed offset, or from the smallest/largest offset for a new group.

Delivery (paper 3.3): a record counts as processed when the application comes back for the next one; auto
commits (every `auto.commit.interval.ms`, on rebalance and on close) store processed offsets, and `commit()`
stores everything delivered so far. A rebalance first stops handing out records and waits (up to
`rebalance.handover.wait.ms`) until the application has finished the one it holds, then commits, so a graceful
hand-over re-delivers nothing; a crash re-delivers at most what was processed since the last commit.

Session states (kazoo listener; it only flips flags, the coordinator thread does the ZooKeeper calls):
    CONNECTED --SUSPENDED--> SUSPENDED: stop handing out records (our ownership may be expiring)
    SUSPENDED --CONNECTED (same session)--> CONNECTED: resume
    any --LOST (session expired)--> LOST: drop every partition and queued record at once, then (coordinator)
        re-register with the new session and rebalance. Commits of the old session are fenced anyway
        (group_registry Rule 2).
A process stopped (SIGSTOP) past its session timeout cannot run the listener in time, so the iterators also
check a heartbeat the coordinator thread stamps every 100 ms: if it is older than half the session timeout,
they wait until the coordinator has verified that our registration still belongs to our current session.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
import uuid
from typing import Iterator

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from sparklog.client import group_registry as registry
from sparklog.client.backoff import ExponentialBackoff
from sparklog.client.config import CONSUMER_DEFAULTS, GROUP_DEFAULTS, resolve
from sparklog.client.consumer import Consumer
from sparklog.client.errors import ClientClosed
from sparklog.client.message import ConsumerRecord
from sparklog.coordination import paths, rebalance
from sparklog.coordination.connection import close as close_zk, connect, retrying
from sparklog.coordination.topics import UnknownTopic, get_topic

logger = logging.getLogger(__name__)

HEARTBEAT_S = 0.1  # how often the coordinator thread stamps its heartbeat and looks for work
CHUNK_WAIT_S = 0.2  # iterators wake this often to notice session changes and close()
STREAM_QUEUE_CHUNKS = 2  # chunks waiting per message stream


def default_consumer_id(group: str) -> str:
    """`<group>_<host>-<pid>-<8 hex>`, like Kafka 0.8's `<group>_<host>-<time>-<uuid>`."""
    return f"{group}_{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class GroupConsumer:
    """One member of a ZooKeeper consumer group; see the module docstring."""

    def __init__(self, topics, group_id: str, zookeeper: str, auto_offset_reset: str = "smallest",
                 auto_commit_interval_ms: int | None = None, **settings) -> None:
        given = dict(settings)
        given["auto.offset.reset"] = auto_offset_reset
        if auto_commit_interval_ms is not None:
            given["auto.commit.interval.ms"] = auto_commit_interval_ms
        config = resolve(GROUP_DEFAULTS, given, {"group.id": group_id, "zookeeper.connect": zookeeper})
        self.config = config
        self._rebalance_backoff = ExponentialBackoff(config["rebalance.backoff.ms"], config["rebalance.max.backoff.ms"])
        self.group = paths.plain_name(group_id, "group")
        self.topics: dict[str, int] = _subscription(topics)
        self.consumer_id = config["consumer.id"] or default_consumer_id(group_id)
        self.session_timeout = config["zookeeper.session.timeout.ms"] / 1000.0
        self._zk = connect(zookeeper, timeout=config["zookeeper.connection.timeout.ms"] / 1000.0,
                           session_timeout=self.session_timeout)
        consumer_settings = {k: v for k, v in config.items() if k in CONSUMER_DEFAULTS and k != "bootstrap.servers"}
        self._consumer = Consumer(config["bootstrap.servers"], zookeeper if not config["bootstrap.servers"] else None,
                                  **consumer_settings)
        self._cond = threading.Condition()
        self._zk_lock = threading.RLock()  # commits and rebalances, one at a time
        self._claims: dict[tuple[str, int], registry.Claim] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._stream_of: dict[tuple[str, int], int] = {}
        self._claim_session: int | None = None
        self._rebalance_needed = False
        self._session_lost = False
        self._suspended = False
        self._verify_requested = False
        self._heartbeat = time.monotonic()
        self._closed = False
        self._started = False
        self._dispatcher: threading.Thread | None = None
        self._streams: list[queue.Queue] = []
        self._current: Iterator | None = None
        self._pausing = False  # a rebalance is under way: hand out nothing
        self._holding: set = set()  # one token per iterator holding a record the application has not finished
        self.rebalances = 0
        self.fenced_commits = 0
        self._thread = threading.Thread(target=self._run, name=f"sparklog-group-{self.consumer_id}", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> "GroupConsumer":
        """Register in the group and start rebalancing (done by the first iteration if not called)."""
        with self._cond:
            if self._started:
                return self
            if self._closed:
                raise ClientClosed("the group consumer is closed")
            self._started = True
        self._zk.add_listener(self._on_session)
        registry.register_consumer(self._zk, self.group, self.consumer_id, self.topics)
        stat = retrying(self._zk, self._zk.exists, paths.consumer(self.group, self.consumer_id))
        self._claim_session = stat.ephemeralOwner if stat is not None else None
        retrying(self._zk, self._zk.ensure_path, paths.group_ids(self.group))
        retrying(self._zk, self._zk.ensure_path, paths.BROKER_IDS)
        ChildrenWatch(self._zk, paths.BROKER_IDS, self._on_registry_change)
        ChildrenWatch(self._zk, paths.group_ids(self.group), self._on_registry_change)
        for topic in self.topics:
            DataWatch(self._zk, paths.topic(topic), self._on_topic_change)
        self._request_rebalance()
        self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Commit what was processed, release our partitions, leave the group and close the connections."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        try:
            if self._started:
                if self._thread.is_alive():
                    self._thread.join(timeout)
                if not self._session_lost and self._zk.connected:
                    with self._zk_lock:
                        if self.config["auto.commit.enable"]:
                            self._commit(delivered=False)
                        self._consumer._assign({})
                        registry.release(self._zk, self.group, list(self._claims.values()))
                        self._claims = {}
                        registry.unregister_consumer(self._zk, self.group, self.consumer_id)
        except Exception:  # leaving must not fail: our ephemeral nodes go with the session anyway
            logger.exception("group consumer %s: error while leaving", self.consumer_id)
        finally:
            self._consumer.close()
            close_zk(self._zk)
            if self._dispatcher is not None:
                self._dispatcher.join(timeout)

    def __enter__(self) -> "GroupConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- records ---------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Every record of our partitions; never ends (blocks when none is available) until `close()`
        or, if `consumer.timeout.ms` >= 0, that long without a record."""
        self.start()
        idle_ms = self.config["consumer.timeout.ms"]
        last = time.monotonic()
        while not self._closed:
            current = self._current
            if current is None:
                chunk = self._next_chunk()
                if chunk is None:
                    if idle_ms >= 0 and time.monotonic() - last > idle_ms / 1000.0:
                        return
                    continue
                current = self._current = self._guarded_records(chunk)
            # Not `yield from`: leaving the loop early must not close `current`; the next iteration resumes it.
            for record in current:
                yield record
            if self._current is current:
                self._current = None
            last = time.monotonic()

    def create_message_streams(self, topic_count_map: dict[str, int]) -> dict[str, list["MessageStream"]]:
        """The paper's API: `n` never-ending iterators per topic over evenly distributed partitions.

        Must be called before iterating; it replaces the subscription (each stream counts as one consumer
        in Algorithm 1, so two consumers with two streams each split a topic four ways).
        """
        with self._cond:
            if self._started:
                raise RuntimeError("create_message_streams must be called before consuming")
        self.topics = _subscription(topic_count_map)
        total = sum(self.topics.values())
        self._streams = [queue.Queue(STREAM_QUEUE_CHUNKS) for _ in range(total)]
        result: dict[str, list[MessageStream]] = {}
        index = 0
        for topic, count in self.topics.items():
            result[topic] = [MessageStream(self, self._streams[index + i]) for i in range(count)]
            index += count
        self.start()
        self._dispatcher = threading.Thread(target=self._dispatch, name=f"sparklog-streams-{self.consumer_id}",
                                            daemon=True)
        self._dispatcher.start()
        return result

    def _dispatch(self) -> None:
        """Route chunks to the stream that owns their partition (stream threads block on their queues)."""
        while not self._closed:
            try:
                chunk = self._next_chunk()
            except ClientClosed:
                return
            if chunk is None:
                continue
            stream = self._stream_of.get(chunk[0].tp)
            if stream is None:
                continue
            while not self._closed and chunk[0].epoch == chunk[1]:
                try:
                    self._streams[stream].put(chunk, timeout=CHUNK_WAIT_S)
                    break
                except queue.Full:
                    continue

    def _next_chunk(self):
        """The next chunk we may hand out, or None after a short wait (so callers notice close())."""
        if (self._pausing or self._suspended or self._verify_requested
                or time.monotonic() - self._heartbeat > self.session_timeout / 2):
            if not self._wait_until_trusted():
                return None
        try:
            return self._consumer.next_chunk(CHUNK_WAIT_S)
        except ClientClosed:
            if self._closed:
                return None
            raise

    def _guarded_records(self, chunk) -> Iterator[ConsumerRecord]:
        """The chunk's records, each handed out only while our ownership is not in doubt; a record counts
        as processed when the application asks for the next one."""
        state, epoch = chunk[0], chunk[1]
        limit = self.session_timeout / 2
        monotonic = time.monotonic
        holding, token = self._holding, object()
        for record in self._consumer._chunk_records(chunk):
            if self._pausing or self._suspended or self._verify_requested or monotonic() - self._heartbeat > limit:
                if not self._trusted(state, epoch):
                    return  # revoked, or the session was lost: the partition may be someone else's now
            holding.add(token)
            yield record
            state.processed = record[2] + 1
            holding.discard(token)

    def _trusted(self, state, epoch: int) -> bool:
        while not self._closed and state.epoch == epoch:
            if self._wait_until_trusted():
                return state.epoch == epoch
        return False

    def _wait_until_trusted(self) -> bool:
        """Block (briefly) while our ownership is in doubt; True once the coordinator vouches for it."""
        with self._cond:
            if time.monotonic() - self._heartbeat > self.session_timeout / 2:
                self._verify_requested = True  # we may have been stopped: is our session still ours?
                self._cond.notify_all()
            self._cond.wait(CHUNK_WAIT_S)
            return not (self._pausing or self._suspended or self._verify_requested or self._closed)

    # -- commits ---------------------------------------------------------------------------------------

    def commit(self) -> None:
        """Store, for each owned partition, the offset after the last record delivered to the application."""
        with self._zk_lock:
            self._commit(delivered=True)

    def committed(self) -> dict[tuple[str, int], int]:
        """What this consumer last committed (or read as committed at its claim)."""
        return dict(self._committed)

    def _commit(self, delivered: bool) -> None:
        states = self._consumer._states
        for tp, claim in list(self._claims.items()):
            state = states.get(tp)
            if state is None:
                continue
            offset = state.position if delivered else state.processed
            if offset is None or offset <= self._committed.get(tp, -1):
                continue  # nothing new (an auto commit never undoes a commit() of delivered records)
            try:
                registry.commit_offset(self._zk, self.group, claim, offset)
                self._committed[tp] = offset
            except registry.CommitFenced:
                self.fenced_commits += 1
                logger.warning("group consumer %s: commit of %s fenced; rebalancing", self.consumer_id, tp)
                self._claims.pop(tp, None)
                self._request_rebalance()

    # -- the coordinator thread -----------------------------------------------------------------------

    def _run(self) -> None:
        next_commit = time.monotonic() + self.config["auto.commit.interval.ms"] / 1000.0
        backoff_until = 0.0
        attempt = 0
        while True:
            with self._cond:
                self._stamp_heartbeat()
                if self._closed:
                    return
                self._cond.wait(HEARTBEAT_S)
                self._stamp_heartbeat()
            try:
                if self._session_lost:
                    self._after_session_loss()
                if self._verify_requested:
                    self._verify_session()
                if self._rebalance_needed and not self._suspended and time.monotonic() >= backoff_until:
                    if self._rebalance():
                        attempt = 0
                    else:
                        backoff_until = time.monotonic() + self._rebalance_backoff.delay(attempt)
                        attempt += 1
                now = time.monotonic()
                if self.config["auto.commit.enable"] and now >= next_commit and not self._suspended:
                    next_commit = now + self.config["auto.commit.interval.ms"] / 1000.0
                    with self._zk_lock:
                        self._commit(delivered=False)
            except Exception as exc:  # ZooKeeper unavailable for longer than the retry deadline, mostly
                logger.warning("group consumer %s: %s; retrying", self.consumer_id, exc or type(exc).__name__,
                               exc_info=logger.isEnabledFor(logging.DEBUG))
                self._request_rebalance()
                backoff_until = time.monotonic() + self._rebalance_backoff.delay(attempt)
                attempt += 1

    def _stamp_heartbeat(self) -> None:
        """(Under `_cond`.) A gap since the last stamp means this process was stopped: the session may have
        expired meanwhile, so the iterators must wait for `_verify_session` before handing out records."""
        now = time.monotonic()
        if now - self._heartbeat > self.session_timeout / 2:
            self._verify_requested = True
        self._heartbeat = now
        self._cond.notify_all()

    def _rebalance(self) -> bool:
        """Algorithm 1; returns False after a conflict (the caller backs off and retries)."""
        with self._zk_lock:
            self._rebalance_needed = False
            try:
                self._pause_handing_out()
                if self._claims and self.config["auto.commit.enable"]:
                    self._commit(delivered=False)
                return self._reassign()
            finally:
                with self._cond:
                    self._pausing = False
                    self._cond.notify_all()

    def _pause_handing_out(self) -> None:
        """Stop handing out records and wait (up to `rebalance.handover.wait.ms`) until the application has
        finished the records it holds: then the commit covers them and the next owner starts right after,
        so a graceful hand-over delivers nothing twice."""
        with self._cond:
            self._pausing = True
        deadline = time.monotonic() + self.config["rebalance.handover.wait.ms"] / 1000.0
        while self._holding and time.monotonic() < deadline and not self._closed:
            time.sleep(0.005)

    def _reassign(self) -> bool:
        """(Under _zk_lock, paused.) Release everything, compute our share and claim it."""
        self._consumer._assign({})  # stop fetching before giving anything up
        registry.release(self._zk, self.group, list(self._claims.values()))
        self._claims = {}
        self._stream_of = {}
        wanted = self._compute_assignment()
        claims = {}
        try:
            for tp in wanted:
                claims[tp] = registry.claim(self._zk, self.group, self.consumer_id, *tp)
        except registry.OwnershipConflict as exc:
            logger.info("group consumer %s: %s; releasing and retrying", self.consumer_id, exc)
            registry.release(self._zk, self.group, list(claims.values()))
            self._rebalance_needed = True
            return False
        self._claims = claims
        self._stream_of = dict(wanted)
        self._committed = {tp: c.committed for tp, c in claims.items() if c.committed is not None}
        self._consumer._assign({tp: c.committed for tp, c in claims.items()})
        self.rebalances += 1
        logger.info("group consumer %s owns %s", self.consumer_id, sorted(claims))
        return True

    def _compute_assignment(self) -> dict[tuple[str, int], int]:
        """{(topic, partition): stream index} for our streams, by Algorithm 1 over the registries."""
        consumers = registry.list_consumers(self._zk, self.group)
        consumers.setdefault(self.consumer_id, dict(self.topics))  # our registration may be being re-made
        retrying(self._zk, self._zk.get_children, paths.BROKER_IDS)  # read the broker registry (Algorithm 1)
        partitions = {topic: _partitions(self._zk, topic) for topic in self.topics}
        return stream_assignment(partitions, consumers, self.consumer_id, self.topics)

    def _after_session_loss(self) -> None:
        """LOST: everything we owned is gone with the old session; register again in the new one."""
        with self._zk_lock:
            self._session_lost = False
            self._claims = {}
            self._stream_of = {}
            self._consumer._assign({})
            registry.register_consumer(self._zk, self.group, self.consumer_id, self.topics)
            # The session that registered us (read back: kazoo may have reconnected in between).
            stat = retrying(self._zk, self._zk.exists, paths.consumer(self.group, self.consumer_id))
            self._claim_session = stat.ephemeralOwner if stat is not None else None
            self._rebalance_needed = True

    def _verify_session(self) -> None:
        """After a suspicious pause: our registration must belong to the session that made our claims."""
        try:
            stat = retrying(self._zk, self._zk.exists, paths.consumer(self.group, self.consumer_id))
        except Exception:
            logger.exception("group consumer %s: cannot verify the session", self.consumer_id)
            return  # stay paused; try again on the next heartbeat
        if stat is None or stat.ephemeralOwner != self._claim_session or self._session_lost:
            logger.warning("group consumer %s: session lost while paused; dropping partitions", self.consumer_id)
            self._consumer._assign({})
            self._claims = {}
            self._session_lost = True
            self._after_session_loss()
        with self._cond:
            self._verify_requested = False
            self._cond.notify_all()

    # -- watches and the session listener (kazoo's threads: flags only) -------------------------------

    def _request_rebalance(self) -> None:
        with self._cond:
            self._rebalance_needed = True
            self._cond.notify_all()

    def _on_registry_change(self, _children) -> bool | None:
        if self._closed:
            return False
        self._request_rebalance()
        return None

    def _on_topic_change(self, _data, _stat) -> bool | None:
        if self._closed:
            return False
        self._request_rebalance()
        return None

    def _on_session(self, state: KazooState) -> None:
        if state == KazooState.SUSPENDED:
            self._suspended = True
        elif state == KazooState.LOST:
            self._session_lost = True
            self._consumer._assign({})  # stop at once: others may own our partitions soon
            self._suspended = False
        else:
            self._suspended = False
        with self._cond:
            self._cond.notify_all()

    # -- introspection ---------------------------------------------------------------------------------

    def owned(self) -> list[tuple[str, int]]:
        return sorted(self._claims)

    def statistics(self) -> dict:
        """Plain JSON-able values: owned partitions as [topic, partition], committed as "topic-partition"."""
        return {"consumer_id": self.consumer_id, "owned": [list(tp) for tp in self.owned()],
                "rebalances": self.rebalances, "fenced_commits": self.fenced_commits,
                "committed": {f"{t}-{p}": o for (t, p), o in sorted(self._committed.items())}}


class MessageStream:
    """One of the paper's sub-streams: a never-ending iterator over the records of its partitions."""

    def __init__(self, group: GroupConsumer, chunks: queue.Queue) -> None:
        self._group = group
        self._chunks = chunks
        self._current: Iterator | None = None

    def __iter__(self) -> Iterator[ConsumerRecord]:
        group = self._group
        while not group._closed:
            current = self._current
            if current is None:
                try:
                    chunk = self._chunks.get(timeout=CHUNK_WAIT_S)
                except queue.Empty:
                    continue
                current = self._current = group._guarded_records(chunk)
            for record in current:  # see GroupConsumer.__iter__
                yield record
            if self._current is current:
                self._current = None


def stream_assignment(partitions: dict[str, list], consumers: dict[str, dict[str, int]], me: str,
                      my_topics: dict[str, int]) -> dict:
    """Algorithm 1 for every stream of consumer `me`, pure: {partition: index of our stream}.

    `partitions[topic]` are the topic's partitions; `consumers` maps every registered consumer id to its
    subscription {topic: streams}. Each stream is one consumer "thread" `<id>-<n>` in the sorted list C_T;
    our streams are numbered across topics in `my_topics` order (topic 1's streams first).
    """
    wanted: dict = {}
    stream_base = 0
    for topic, count in my_topics.items():
        threads = [f"{cid}-{i}" for cid, sub in consumers.items() for i in range(sub.get(topic, 0))]
        for i in range(count):
            for tp in rebalance.assign(partitions.get(topic, []), threads, f"{me}-{i}"):
                wanted[tp] = stream_base + i
        stream_base += count
    return wanted


def _subscription(topics) -> dict[str, int]:
    if isinstance(topics, str):
        topics = [topics]
    if isinstance(topics, dict):
        result = {paths.topic_name(t): int(n) for t, n in topics.items()}
    else:
        result = {paths.topic_name(t): 1 for t in topics}
    if not result or any(n < 1 for n in result.values()):
        raise ValueError("subscribe to at least one topic, with at least one stream each")
    return result


def _partitions(zk, topic: str) -> list[tuple[str, int]]:
    try:
        return [(topic, p) for p in sorted(get_topic(zk, topic).partitions)]
    except (UnknownTopic, NoNodeError):
        return []
