"""A member of a Kafka consumer group (the classic protocol, KIP-848's predecessor that every Kafka client
speaks): the broker's group coordinator decides who is in the group, the leader member assigns the partitions,
and offsets are committed with the member's generation, so a member that was pushed out cannot overwrite its
successor's commits. The paper's ZooKeeper groups are `group.py`; both kinds share the pull `Consumer`.

    consumer = KafkaGroupConsumer(["events"], bootstrap_servers="localhost:9092", **{"group.id": "g1"})
    for record in consumer:
        process(record)          # processed once the loop comes back (Rule 1)
    consumer.close()             # commits what was processed, leaves the group

Membership (the application thread moves it; the heartbeat thread only sets flags):
    UNJOINED --JoinGroup (MEMBER_ID_REQUIRED: again with the id it names), SyncGroup--> STABLE(generation)
    STABLE --heartbeat says REBALANCE_IN_PROGRESS--> commit what was processed (still our generation),
        revoke every partition (eager, as the range assignor is), UNJOINED
    STABLE --heartbeat says ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID, or no poll for max.poll.interval.ms
        (then LeaveGroup)--> LOST: revoke every partition without committing (the group has moved on;
        UNKNOWN_MEMBER_ID also forgets the member id), UNJOINED
    FENCED_INSTANCE_ID (a newer static member has our group.instance.id) is fatal: raised to the application.
    any --close()--> commit, LeaveGroup (a static member stays, KIP-345), CLOSED

Rule 1 (delivery, at-least-once): a record counts as processed when the application comes back for more (the
next poll, or the next record after the last of a poll's batch). Only processed offsets are committed: before
a rejoin, every auto.commit.interval.ms with enable.auto.commit, and on close. `commit()` stores everything
returned so far, as Kafka's commitSync does.
Rule 2 (assignment): Kafka's RangeAssignor. Per topic, the partitions in order and the members subscribed to
it sorted (static members by group.instance.id first, then by member id); each member takes a contiguous
range, the first `partitions % members` one more (`coordination.rebalance.assign`, the paper's Algorithm 1).
Rule 3 (liveness): a heartbeat every heartbeat.interval.ms from a daemon thread keeps the membership while
the application processes; a poll that waits is cut into heartbeat-sized slices so that a rebalance is
joined within one interval, not at the next record.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Iterable, Iterator

from sparklog.client.config import CONSUMER_DEFAULTS, KAFKA_GROUP_DEFAULTS, resolve
from sparklog.client.consumer import Consumer
from sparklog.client.errors import COORDINATOR_MOVED_ERRORS
from sparklog.client.message import ConsumerRecord
from sparklog.coordination.rebalance import assign_all
from sparklog.protocol import ApiKey, for_code
from sparklog.protocol.consumer_protocol import (CONSUMER_PROTOCOL_TYPE, ConsumerProtocolAssignment,
                                                 ConsumerProtocolSubscription, TopicPartitions, assigned_partitions,
                                                 decode_subscription, encode_assignment, encode_subscription)
from sparklog.protocol.groups import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

logger = logging.getLogger(__name__)

JOIN_GROUP_VERSION = 5  # group_instance_id (KIP-345); MEMBER_ID_REQUIRED from v4 (KIP-394)
SYNC_GROUP_VERSION = 3
HEARTBEAT_VERSION = 3
LEAVE_GROUP_VERSION = 3
SUBSCRIPTION_VERSION = 0  # the eager range protocol needs no owned partitions; every client reads version 0
RANGE = "range"
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 22, 25, 27
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID = 79, 82
LOST_MEMBERSHIP = frozenset({ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID})
NO_GENERATION = -1
JOIN_SLACK_S = 5.0  # a JoinGroup waits for the whole rebalance: the rebalance timeout and this (as Kafka's)

TopicPartition = tuple[str, int]


def range_assignment(members: dict[str, tuple[str | None, list[str]]], partitions: dict[str, int]
                     ) -> dict[str, list[TopicPartition]]:
    """Rule 2: {member id: its partitions} from {member id: (group.instance.id, topics)} and
    {topic: partition count}; a topic nobody knows (not in `partitions`) has no partitions."""
    def order(member: str) -> tuple:
        instance = members[member][0]
        return (0, instance) if instance else (1, member)

    ranked = {member: f"{rank:08d}" for rank, member in enumerate(sorted(members, key=order))}
    out: dict[str, list[TopicPartition]] = {member: [] for member in members}
    for topic, count in sorted(partitions.items()):
        subscribers = [member for member, (_, topics) in members.items() if topic in topics]
        shares = assign_all([(topic, p) for p in range(count)], [ranked[m] for m in subscribers])
        for member in subscribers:
            out[member].extend(shares[ranked[member]])
    return out


class KafkaGroupConsumer:
    """A Kafka consumer group member over a pull Consumer; see the module docstring."""

    def __init__(self, topics: Iterable[str], bootstrap_servers=None, zookeeper: str | None = None,
                 **settings) -> None:
        config = resolve(KAFKA_GROUP_DEFAULTS, settings)
        if not config["group.id"]:
            raise ValueError("a Kafka group consumer needs the group.id setting")
        if config["heartbeat.interval.ms"] >= config["session.timeout.ms"]:
            raise ValueError(f"heartbeat.interval.ms ({config['heartbeat.interval.ms']}) must be lower than "
                             f"session.timeout.ms ({config['session.timeout.ms']})")
        self.config = config
        self.topics = sorted(set(topics))
        self._consumer = Consumer(bootstrap_servers, zookeeper,
                                  **{k: v for k, v in config.items() if k in CONSUMER_DEFAULTS})
        self.generation = NO_GENERATION
        self.member_id = ""
        self._stable = False
        self._rejoin = threading.Event()
        self._rejoin.set()
        self._lost = False
        self._fatal: BaseException | None = None
        self._closed = threading.Event()
        self._last_poll = time.monotonic()
        self._next_commit = self._last_poll + config["auto.commit.interval.ms"] / 1000
        self._heartbeat = threading.Thread(target=self._heartbeats, name="sparklog-group-heartbeat", daemon=True)
        self._heartbeat.start()

    # -- the application's calls ---------------------------------------------------------------------

    def poll(self, timeout: float | None = 0.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to `max_records` records of this member's partitions, waiting up to `timeout` s (None: until
        some arrive); joins or rejoins the group first when needed (Rule 3)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        slice_s = self.config["heartbeat.interval.ms"] / 1000
        while True:
            self._before_fetch()
            remaining = slice_s if deadline is None else max(0.0, min(slice_s, deadline - time.monotonic()))
            records = self._consumer.poll(remaining, max_records)
            if records or (deadline is not None and time.monotonic() >= deadline) or self._closed.is_set():
                return records

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records of this member's partitions; ends after `consumer.timeout.ms` (>= 0) without one."""
        idle_ms = self.config["consumer.timeout.ms"]
        last = time.monotonic()
        while not self._closed.is_set():
            records = self.poll(self.config["heartbeat.interval.ms"] / 1000)
            if not records:
                if idle_ms >= 0 and time.monotonic() - last >= idle_ms / 1000:
                    return
                continue
            last = time.monotonic()
            yield from records

    def assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment()

    def commit(self) -> None:
        """Store everything returned so far at the coordinator, with this member's generation."""
        if self._stable and not self._lost:
            self._consumer.commit(self._consumer.positions(), member=(self.generation, self.member_id))

    def committed(self, partitions: Iterable[TopicPartition]) -> dict:
        return self._consumer.committed(partitions)

    def close(self, timeout: float | None = None) -> None:
        """Commit what was processed (enable.auto.commit), leave the group (a static member stays), stop."""
        if self._closed.is_set():
            return
        try:
            if self._stable and not self._lost and self._fatal is None:
                if self.config["enable.auto.commit"]:
                    self._quietly(self.commit, "commit on close")
                if self.config["group.instance.id"] is None:
                    self._quietly(self._leave, "LeaveGroup on close")
        finally:
            self._closed.set()
            self._heartbeat.join(timeout=5.0)
            self._consumer.close(timeout)

    def __enter__(self) -> "KafkaGroupConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- membership (the application thread) -----------------------------------------------------------

    def _before_fetch(self) -> None:
        self._last_poll = time.monotonic()
        if self._fatal is not None:
            raise self._fatal
        if self._rejoin.is_set():
            self._rebalance()
        elif self.config["enable.auto.commit"] and self._last_poll >= self._next_commit:
            self._next_commit = self._last_poll + self.config["auto.commit.interval.ms"] / 1000
            self._quietly(self.commit, "auto-commit")

    def _rebalance(self) -> None:
        """Revoke every partition (committing first unless the membership was lost), then join and sync until
        a generation holds, and take its assignment."""
        if self._stable and not self._lost and self.config["enable.auto.commit"]:
            self._quietly(self.commit, "commit before the rebalance")
        self._stable = False
        self._consumer.assign([])
        while True:
            self._rejoin.clear()
            self._lost = False
            joined = self._join()
            code, assignment = self._sync(joined)
            if code == 0:
                break
            if code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            elif code not in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
                raise for_code(code)(f"SyncGroup of group {self.config['group.id']}")
        partitions = assigned_partitions(assignment)
        logger.info("group %s generation %d: member %s assigned %s", self.config["group.id"], self.generation,
                    self.member_id, ", ".join(f"{t}-{p}" for t, p in partitions) or "nothing")
        self._consumer.assign(partitions)
        self._stable = True

    def _join(self):
        subscription = encode_subscription(ConsumerProtocolSubscription(
            topics=self.topics, user_data=None, owned_partitions=[], generation_id=NO_GENERATION, rack_id=None),
            SUBSCRIPTION_VERSION)
        rebalance_ms = self.config["max.poll.interval.ms"]
        while True:
            request = JoinGroupRequest(
                group_id=self.config["group.id"], session_timeout_ms=self.config["session.timeout.ms"],
                rebalance_timeout_ms=rebalance_ms, member_id=self.member_id,
                group_instance_id=self.config["group.instance.id"], protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=RANGE, metadata=subscription)])
            wait = rebalance_ms / 1000 + JOIN_SLACK_S
            response = self._at_coordinator(ApiKey.JOIN_GROUP, JOIN_GROUP_VERSION, request, wait)
            if response.error_code == MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
                continue
            if response.error_code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if response.error_code:
                raise for_code(response.error_code)(f"JoinGroup of group {self.config['group.id']}")
            self.generation, self.member_id = response.generation_id, response.member_id
            return response

    def _sync(self, joined) -> tuple[int, bytes]:
        assignments = []
        if joined.leader == joined.member_id:
            assignments = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                           for m, a in self._assign(joined.members).items()]
        request = SyncGroupRequest(group_id=self.config["group.id"], generation_id=self.generation,
                                   member_id=self.member_id, group_instance_id=self.config["group.instance.id"],
                                   assignments=assignments)
        response = self._at_coordinator(ApiKey.SYNC_GROUP, SYNC_GROUP_VERSION, request,
                                        self.config["max.poll.interval.ms"] / 1000 + JOIN_SLACK_S)
        return response.error_code, response.assignment

    def _assign(self, members) -> dict[str, bytes]:
        """The leader's work: every member's Assignment (Rule 2) from their subscriptions."""
        subscriptions = {m.member_id: (m.group_instance_id, list(decode_subscription(m.metadata).topics))
                         for m in members}
        topics = sorted({topic for _, wanted in subscriptions.values() for topic in wanted})
        counts = {topic: len(self._consumer.partitions_for_topic(topic)) for topic in topics}
        out = {}
        for member, partitions in range_assignment(subscriptions, counts).items():
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            out[member] = encode_assignment(ConsumerProtocolAssignment(
                assigned_partitions=[TopicPartitions(topic=t, partitions=p) for t, p in by_topic.items()],
                user_data=None), SUBSCRIPTION_VERSION)
        return out

    def _leave(self) -> None:
        request = LeaveGroupRequest(group_id=self.config["group.id"], members=[
            LeaveGroupRequest.MemberIdentity(member_id=self.member_id, group_instance_id=None)])
        self._at_coordinator(ApiKey.LEAVE_GROUP, LEAVE_GROUP_VERSION, request, None)
        self._stable = False

    def _at_coordinator(self, api_key: int, version: int, request, wait: float | None):
        """The coordinator's answer, whatever its error code but a moved coordinator's (asked again)."""
        def moved(response):
            code = response.error_code
            return [(code, f"group {self.config['group.id']}")] if code in COORDINATOR_MOVED_ERRORS else []

        return self._consumer.at_coordinator(api_key, version, request, wait, moved, request_timeout=wait)

    def _quietly(self, call, what: str) -> None:
        try:
            call()
        except Exception as exc:  # a failed commit re-delivers (Rule 1); it must not stop the consumer
            logger.warning("group %s: %s failed: %s", self.config["group.id"], what, exc)

    # -- the heartbeat thread (Rule 3): it only sets flags -----------------------------------------------

    def _heartbeats(self) -> None:
        interval = self.config["heartbeat.interval.ms"] / 1000
        while not self._closed.wait(interval):
            if not self._stable or self._rejoin.is_set():
                continue
            if time.monotonic() - self._last_poll > self.config["max.poll.interval.ms"] / 1000:
                logger.warning("group %s: no poll for max.poll.interval.ms (%d ms): leaving the group",
                               self.config["group.id"], self.config["max.poll.interval.ms"])
                self._quietly(self._leave, "LeaveGroup")
                self._lose()
                continue
            try:
                code = self._heartbeat_once(interval)
            except Exception as exc:  # unreachable for now: the session timeout decides, not one heartbeat
                logger.debug("group %s: heartbeat failed: %s", self.config["group.id"], exc)
                continue
            self._on_heartbeat(code)

    def _heartbeat_once(self, wait: float) -> int:
        request = HeartbeatRequest(group_id=self.config["group.id"], generation_id=self.generation,
                                   member_id=self.member_id, group_instance_id=self.config["group.instance.id"])
        return self._at_coordinator(ApiKey.HEARTBEAT, HEARTBEAT_VERSION, request, wait).error_code

    def _on_heartbeat(self, code: int) -> None:
        if code == REBALANCE_IN_PROGRESS:
            self._rejoin.set()
        elif code in LOST_MEMBERSHIP:
            if code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self._lose()
        elif code == FENCED_INSTANCE_ID:
            self._fatal = for_code(code)(f"group {self.config['group.id']}: another member has group.instance.id "
                                         f"{self.config['group.instance.id']!r}")
            self._lose()
        elif code:
            logger.warning("group %s: heartbeat answered %s", self.config["group.id"], for_code(code).__name__)

    def _lose(self) -> None:
        self._lost = True
        self._rejoin.set()
