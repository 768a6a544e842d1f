"""The controller: what the broker holding `/controller` does, and a stopping broker's request to it.

Every broker runs a `Controller`; only the one its `ControllerElection` elects acts (Kafka's ZK-mode
`KafkaController`, with one event thread). The contract with the brokers is the partition state znode: the
controller writes leader, leader epoch, ISR and controller epoch; brokers learn them through the watches
`broker/replication/partitions.py` keeps, and become leader or follower.

Rule 1: one event at a time, on the controller's own thread; watch callbacks (kazoo's thread) only queue.
Every event re-reads what it decides on (live brokers, assignments, states with their zk versions), so a
lost or coalesced notification costs nothing: the next event sees the truth.
Rule 2: the states an event decides are written in one batch: multis of up to MAX_OPS_PER_MULTI state writes,
each multi fenced by the controller epoch (`commit_fenced`) and each write conditional on the version read.
A partition changed meanwhile (a leader shrinking its ISR) fails its multi: those partitions are re-read and
decided again, up to MAX_WRITE_ATTEMPTS times. `ControllerMoved` means another broker won: stop acting.
Rule 3: elections are the pure functions of `coordination/leader_election.py`: clean from the ISR; offline
(leader -1) when no ISR member lives unless `unclean.leader.election.enable` (broker default, topic
override) — then the first live replica leads, and we log that acknowledged data may have been lost.

Events and what they do:

    ELECTED(epoch)        give every topic created before topic ids its id (topics.assign_missing_topic_ids;
                          deterministic, so two controllers racing write the same value), reconcile every
                          partition (a partition whose leader died while nobody was controller gets elected
                          now) and start watching
    BROKERS_CHANGED       reconcile: a dead broker's leaderships move in one batch, it leaves every ISR;
                          an offline partition whose ISR member is back gets it as leader
    SHUTDOWN_REQUESTED    `/controlled_shutdown/<id>` appeared: reconcile with those brokers not eligible to
                          lead and out of every ISR (they exit once no partition needs them)
    LOG_FAULTS            a broker's `/log_faults/<id>` report changed: reconcile with each damaged replica
                          not eligible to lead its partition and out of its ISR while an undamaged ISR member
                          lives (leader_election Rule 6); it repairs as a follower (replica_fetcher Rule 3)
                          and rejoins the ISR by catching up
    PREFERRED_ELECTION    `/admin/preferred_replica_election` written: move the listed partitions'
                          leadership to their first replica, then delete the request
    REASSIGN              `/admin/reassign_partitions` written, and every REASSIGNMENT_CHECK_S while it is
                          pending: each listed partition takes its next step (coordination/reassignment.py);
                          the request is deleted once every partition is done
    REBALANCE_CHECK       every leader.imbalance.check.interval.seconds with auto.leader.rebalance.enable:
                          a broker leading less than (100 - leader.imbalance.per.broker.percentage)% of the
                          partitions it is preferred for gets them back
    RESIGNED              stop acting: watches are dropped, queued events are ignored

A stopping broker (`controlled_shutdown`) creates its ephemeral request znode and waits, bounded by
`controlled.shutdown.timeout.ms`, until no partition it could hand over still names it leader or ISR member.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from sparklog.coordination import brokers as broker_registry
from sparklog.coordination import controller_requests as requests
from sparklog.coordination import log_faults
from sparklog.coordination import reassignment
from sparklog.coordination import paths
from sparklog.coordination import topics as topic_registry
from sparklog.coordination.connection import encode, retrying
from sparklog.coordination.controller_election import (
    ControllerElection,
    ControllerMoved,
    commit_fenced,
)
from sparklog.coordination.leader_election import Election, damaged_excluded, elect, elect_preferred

log = logging.getLogger(__name__)

# ZooKeeper's jute.maxbuffer (1 MiB) bounds one multi; a state write is ~150 bytes, so this stays far below.
MAX_OPS_PER_MULTI = 1000
MAX_WRITE_ATTEMPTS = 5  # re-read and decide again this often when partitions change under us
EVENT_RETRY_DELAY_S = 1.0  # an event that failed (ZooKeeper away) is handled again after this
REASSIGNMENT_CHECK_S = 0.5  # how often a pending reassignment looks for new replicas having joined the ISR
SHUTDOWN_POLL_S = 0.05  # a stopping broker re-reads its partitions' states this often
UNCLEAN_KEY = "unclean.leader.election.enable"  # topic-level override of the broker default
TOPIC_KEYS = frozenset({UNCLEAN_KEY})  # the topic-level settings the controller reads (all booleans)

PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class ControllerStatistics:
    broker_id: int
    controller_id: int
    is_controller: bool
    epoch: int
    events: int
    elections: int  # leader changes written (to NO_LEADER included)
    unclean_elections: int
    isr_changes: int  # ISR-only changes written (a dead or stopping follower removed)
    write_conflicts: int  # multis refused because a partition changed meanwhile
    offline_partitions: int  # as of the last reconcile
    last_decision_ms: float  # from event to states written, last event that wrote something
    last_error: str | None


@dataclass(frozen=True)
class _Event:
    kind: str
    generation: int  # the election this event belongs to; stale ones are ignored
    payload: object = None


class Controller:
    """Competes for `/controller` and, while elected, keeps every partition led (module docstring)."""

    def __init__(self, zk, broker_id: int, unclean_leader_election: bool = False,
                 auto_leader_rebalance: bool = True, imbalance_check_interval_s: float = 300.0,
                 imbalance_percentage: int = 10) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.unclean_default = unclean_leader_election
        self.auto_rebalance = auto_leader_rebalance
        self.imbalance_check_interval_s = imbalance_check_interval_s
        self.imbalance_percentage = imbalance_percentage
        self.election = ControllerElection(zk, broker_id, self._on_elected, self._on_resigned)
        self._events: queue.Queue[_Event | None] = queue.Queue()
        self._generation = 0
        self._epoch_zk_version = -1
        self._epoch = -1
        self._acting = False
        self._lock = threading.Lock()
        self._watch_generation = -1
        self._brokers_watch = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None
        self._counts = dict.fromkeys(("events", "elections", "unclean", "isr", "conflicts", "offline"), 0)
        self._last_decision_ms = 0.0
        self._last_error: str | None = None

    @property
    def controller_id(self) -> int:
        return self.broker_id if self.election.is_controller else self.election.controller_id

    def statistics(self) -> ControllerStatistics:
        c = self._counts
        return ControllerStatistics(
            self.broker_id, self.controller_id, self.election.is_controller, self._epoch, c["events"],
            c["elections"], c["unclean"], c["isr"], c["conflicts"], c["offline"], self._last_decision_ms,
            self._last_error)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"controller-{self.broker_id}", daemon=True)
        self._thread.start()
        self.election.start()

    def close(self) -> None:
        self.election.close()
        self._events.put(None)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._timer is not None:
            self._timer.cancel()

    # -- election callbacks (the election's thread) ---------------------------------------------------------

    def _on_elected(self, epoch: int, epoch_zk_version: int) -> None:
        with self._lock:
            self._generation += 1
            self._epoch, self._epoch_zk_version, self._acting = epoch, epoch_zk_version, True
            generation = self._generation
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        self._queue("ELECTED", generation)

    def _on_resigned(self) -> None:
        with self._lock:
            was = self._acting
            self._generation += 1
            self._acting = False
            watch, self._brokers_watch = self._brokers_watch, None
        if watch is not None:
            watch.stop()
        if was:
            log.info("broker %d is no longer the controller", self.broker_id)

    def _queue(self, kind: str, generation: int | None = None, payload: object = None) -> None:
        with self._lock:
            generation = self._generation if generation is None else generation
        self._events.put(_Event(kind, generation, payload))

    # -- watches (kazoo's thread: queue only) -----------------------------------------------------------------

    def _watch(self, generation: int) -> None:
        """Watch the live brokers and the admin requests for this term; each watch ends with the term."""
        def current() -> bool:
            return self._generation == generation and self._acting

        def on_brokers(_live) -> None:
            if current():
                self._queue("BROKERS_CHANGED", generation)

        def on_children(_children) -> bool | None:
            if not current():
                return False
            self._queue("SHUTDOWN_REQUESTED", generation)
            return None

        def on_preferred(data, _stat) -> bool | None:
            if not current():
                return False
            if data is not None:
                self._queue("PREFERRED_ELECTION", generation, data)
            return None

        watched_reports: set[str] = set()

        def on_fault_reports(children) -> bool | None:
            if not current():
                return False
            for child in children:
                if child not in watched_reports:
                    watched_reports.add(child)
                    DataWatch(self.zk, f"{paths.LOG_FAULTS}/{child}", on_fault_report)
            return None

        def on_fault_report(_data, _stat) -> bool | None:
            if not current():
                return False
            self._queue("LOG_FAULTS", generation)
            return None

        def on_reassign(data, _stat) -> bool | None:
            if not current():
                return False
            if data is not None:
                self._queue("REASSIGN", generation)
            return None

        self._brokers_watch = broker_registry.watch_brokers(self.zk, on_brokers)
        retrying(self.zk, self.zk.ensure_path, paths.CONTROLLED_SHUTDOWN)
        ChildrenWatch(self.zk, paths.CONTROLLED_SHUTDOWN, on_children)
        DataWatch(self.zk, paths.PREFERRED_REPLICA_ELECTION, on_preferred)
        retrying(self.zk, self.zk.ensure_path, paths.LOG_FAULTS)
        ChildrenWatch(self.zk, paths.LOG_FAULTS, on_fault_reports)
        DataWatch(self.zk, paths.REASSIGN_PARTITIONS, on_reassign)
        if self.auto_rebalance:
            self._schedule_rebalance(generation)

    def _schedule_rebalance(self, generation: int) -> None:
        def tick() -> None:
            if self._generation == generation and self._acting:
                self._queue("REBALANCE_CHECK", generation)
                self._schedule_rebalance(generation)

        self._timer = _later(self.imbalance_check_interval_s, tick)

    # -- the controller thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            event = self._events.get()
            if event is None:
                return
            with self._lock:
                if event.generation != self._generation or not self._acting:
                    continue  # from an earlier term
            self._counts["events"] += 1
            started = time.monotonic()
            try:
                wrote = self._handle(event)
            except ControllerMoved as exc:
                log.warning("controller %d was deposed: %s", self.broker_id, exc)
                self._on_resigned()
                continue
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the next event (or a retry) reconciles
                self._last_error = f"{type(exc).__name__}: {exc}"
                log.warning("controller event %s failed (%s); retrying", event.kind, self._last_error)
                _later(EVENT_RETRY_DELAY_S, self._events.put, event)
                continue
            if wrote:
                self._last_decision_ms = (time.monotonic() - started) * 1000.0
                log.info("controller %d: %s decided %d partition states in %.1f ms", self.broker_id, event.kind,
                         wrote, self._last_decision_ms)

    def _handle(self, event: _Event) -> int:
        if event.kind == "ELECTED":
            if self._watch_generation != event.generation:
                self._watch_generation = event.generation
                self._watch(event.generation)
            self._assign_topic_ids()
            return self._reconcile()
        if event.kind in ("BROKERS_CHANGED", "SHUTDOWN_REQUESTED", "LOG_FAULTS"):
            return self._reconcile()
        if event.kind == "PREFERRED_ELECTION":
            return self._preferred_election(event.payload)
        if event.kind == "REBALANCE_CHECK":
            return self._rebalance_check()
        if event.kind == "REASSIGN":
            return self._reassign(event.generation)
        raise ValueError(f"unknown controller event {event.kind}")

    # -- decisions -------------------------------------------------------------------------------------------

    def _assign_topic_ids(self) -> None:
        migrated = topic_registry.assign_missing_topic_ids(self.zk)
        if migrated:
            log.info("controller %d: assigned topic ids to %d topics created before topic ids: %s",
                     self.broker_id, len(migrated), ", ".join(migrated))

    def _reconcile(self) -> int:
        """Every partition to its next state under the current live, stopping and damaged brokers (Rule 3)."""
        damaged = log_faults.read_all(self.zk).by_partition

        def decide(topic: topic_registry.TopicAssignment, p: int, state, live, stopping) -> Election | None:
            bad = set(damaged.get((topic.name, p), ()))
            excluded = damaged_excluded(state, live, stopping, bad)
            if state.leader in bad and state.leader not in excluded:
                log.warning("%s-%d: leader %d has a damaged log %s but no undamaged in-sync replica to hand "
                            "leadership to: it keeps leading, serving around the damage", topic.name, p,
                            state.leader, damaged[(topic.name, p)][state.leader])
            return elect(topic.partitions[p], state, live, self._epoch, self._unclean(topic), excluded)

        return self._decide_and_write(decide, None)

    def _preferred_election(self, data: bytes) -> int:
        try:
            wanted = requests.parse_preferred_election(data)
        except ValueError as exc:
            log.warning("ignoring it: %s", exc)
            wanted = set()

        def decide(topic, p, state, live, _stopping) -> Election | None:
            return elect_preferred(topic.partitions[p], state, live, self._epoch)

        wrote = self._decide_and_write(decide, wanted)
        requests.finish_preferred_election(self.zk)
        return wrote

    def _reassign(self, generation: int) -> int:
        """Each partition of the pending reassignment one step on; re-checked until all are done."""
        plan = reassignment.pending_reassignment(self.zk)
        if plan is None:
            return 0
        live = set(broker_registry.live_brokers(self.zk))
        wrote, all_done = 0, True
        for topic in sorted({t for t, _ in plan}):
            targets = {p: r for (t, p), r in plan.items() if t == topic}
            written, done = self._reassign_topic(topic, targets, live)
            wrote += written
            all_done &= done
        if all_done:
            reassignment.finish_reassignment(self.zk, plan)
            log.info("partition reassignment of %d partitions is complete", len(plan))
        else:
            _later(REASSIGNMENT_CHECK_S, self._queue, "REASSIGN", generation)
        return wrote

    def _reassign_topic(self, topic: str, targets: Mapping[int, tuple[int, ...]], live: set[int]) -> tuple[int, bool]:
        """One fenced multi: the topic znode (version-checked) and the partition states that change."""
        try:
            value, version = reassignment.read_topic_znode(self.zk, topic)
        except NoNodeError:
            return 0, True  # deleted meanwhile: nothing left to move
        before, states, done = value, {}, True
        for p, target in sorted(targets.items()):
            replicas = value["partitions"].get(str(p))
            if replicas is None:
                continue
            state = topic_registry.partition_state(self.zk, topic, p)
            step = reassignment.next_step(target, replicas, (value.get("adding_replicas") or {}).get(str(p), ()),
                                          (value.get("removing_replicas") or {}).get(str(p), ()), state, live,
                                          self._epoch)
            done &= step is not None and step.done
            if step is None:
                continue
            value = reassignment.with_step(value, p, step)
            if step.state is not None and step.state != state:
                states[p] = step.state
        if value == before and not states:
            return 0, done

        def add_ops(txn) -> None:
            txn.set_data(paths.topic(topic), encode(value), version=version)
            for p, state in states.items():
                txn.set_data(paths.partition_state(topic, p), encode(state.to_json()), version=state.zk_version)

        try:
            retrying(self.zk, commit_fenced, self.zk, self._epoch_zk_version, add_ops)
        except (BadVersionError, NoNodeError):
            self._counts["conflicts"] += 1
            return 0, False  # changed meanwhile: the next check decides again
        for p, state in states.items():
            log.info("reassignment of %s-%d: leader %d epoch %d isr %s", topic, p, state.leader, state.leader_epoch,
                     list(state.isr))
        return 1 + len(states), done

    def _rebalance_check(self) -> int:
        topics = self._read_topics()
        live = set(broker_registry.live_brokers(self.zk))
        wanted = set(imbalanced_partitions(topics, live, self.imbalance_percentage))
        if not wanted:
            return 0

        def decide(topic, p, state, live_, _stopping) -> Election | None:
            return elect_preferred(topic.partitions[p], state, live_, self._epoch)

        return self._decide_and_write(decide, wanted)

    def _decide_and_write(self, decide: Callable, only: set[PartitionKey] | None) -> int:
        """Read, decide, write in fenced batches; partitions that changed meanwhile are decided again."""
        written = 0
        for _ in range(MAX_WRITE_ATTEMPTS):
            topics = self._read_topics()
            live = set(broker_registry.live_brokers(self.zk))
            stopping = self._stopping(live)
            decided: dict[PartitionKey, Election] = {}
            offline = 0
            for name, topic in topics.items():
                for p, state in topic.states.items():
                    if only is not None and (name, p) not in only:
                        continue
                    election = decide(topic, p, state, live, stopping)
                    if election is not None:
                        decided[(name, p)] = election
                    final = state if election is None else election.state
                    offline += final.leader == topic_registry.NO_LEADER
            if only is None:
                self._counts["offline"] = offline
            written_now, conflicts = self._write(decided)
            written += written_now
            if not conflicts:
                return written
            only = conflicts if only is None else only & conflicts
        log.warning("controller: partitions kept changing; giving up until the next event")
        return written

    def _write(self, decided: Mapping[PartitionKey, Election]) -> tuple[int, set[PartitionKey]]:
        items = sorted(decided.items())
        conflicts: set[PartitionKey] = set()
        written = 0
        for start in range(0, len(items), MAX_OPS_PER_MULTI):
            chunk = items[start:start + MAX_OPS_PER_MULTI]

            def add_ops(txn, chunk=chunk) -> None:
                for (name, p), election in chunk:
                    txn.set_data(paths.partition_state(name, p), encode(election.state.to_json()),
                                 version=election.state.zk_version)

            try:
                retrying(self.zk, commit_fenced, self.zk, self._epoch_zk_version, add_ops)
            except (BadVersionError, NoNodeError):
                self._counts["conflicts"] += 1
                conflicts.update(key for key, _ in chunk)
                continue
            written += len(chunk)
            for key, election in chunk:
                self._count(key, decided_from=election)
        return written, conflicts

    def _count(self, key: PartitionKey, decided_from: Election) -> None:
        state = decided_from.state
        if decided_from.unclean:
            self._counts["unclean"] += 1
            log.warning("unclean leader election: broker %d leads %s-%d though it was not in the ISR; "
                        "messages acknowledged by the old ISR may have been lost", state.leader, *key)
        if state.leader == topic_registry.NO_LEADER:
            log.warning("%s-%d is offline: no in-sync replica is alive (unclean leader election is off)", *key)
        log.info("%s-%d: leader %d epoch %d isr %s", key[0], key[1], state.leader, state.leader_epoch,
                 list(state.isr))
        self._counts["elections" if decided_from.leader_changed else "isr"] += 1

    def _read_topics(self) -> dict[str, topic_registry.TopicAssignment]:
        return topic_registry.get_topics(self.zk)

    def _stopping(self, live: set[int]) -> set[int]:
        return requests.stopping_brokers(self.zk) & live

    def _unclean(self, topic: topic_registry.TopicAssignment) -> bool:
        value = topic.config.get(UNCLEAN_KEY)
        return self.unclean_default if value is None else value.strip().lower() == "true"


def _later(delay_s: float, fn: Callable, *args) -> threading.Timer:
    """`fn(*args)` after `delay_s` on a daemon timer (a stopping broker never waits for one)."""
    timer = threading.Timer(delay_s, fn, args)
    timer.daemon = True
    timer.start()
    return timer


def imbalanced_partitions(topics: Mapping[str, topic_registry.TopicAssignment], live: set[int],
                          percentage: int) -> list[PartitionKey]:
    """Kafka's auto rebalance: for each live broker whose ratio of partitions it is preferred for but does not
    lead exceeds `percentage`%, the partitions it should get back."""
    preferred: dict[int, list[tuple[PartitionKey, bool]]] = {}
    for name, topic in topics.items():
        for p, replicas in topic.partitions.items():
            state = topic.states.get(p)
            if not replicas or state is None or replicas[0] not in live:
                continue
            preferred.setdefault(replicas[0], []).append(((name, p), state.leader == replicas[0]))
    wanted = []
    for _broker, owned in preferred.items():
        not_led = [key for key, leads in owned if not leads]
        if owned and len(not_led) * 100 > percentage * len(owned):
            wanted.extend(not_led)
    return wanted


# -- the stopping broker's side ------------------------------------------------------------------------------


def controlled_shutdown(zk, broker_id: int, timeout_s: float) -> bool:
    """Ask the controller to move this broker's leaderships and ISR memberships away; wait until done.

    Returns True once no partition still names this broker leader or ISR member where another ISR member
    could take over, False at the timeout (the broker then stops anyway, as Kafka's does after its retries).
    The request znode is ephemeral: it goes with this broker's session. Without a ZooKeeper connection there
    is no controller to ask: False at once, and the broker stops (the controller sees its session end).
    """
    if not zk.connected:
        return False
    requests.request_controlled_shutdown(zk, broker_id)
    deadline = time.monotonic() + timeout_s
    while True:
        if not still_needed(zk, broker_id):
            return True
        if time.monotonic() >= deadline or not zk.connected:
            return False
        time.sleep(SHUTDOWN_POLL_S)


def still_needed(zk, broker_id: int) -> bool:
    """Whether some partition still names this broker leader or ISR member while another live ISR member
    could take its place."""
    live = set(broker_registry.live_brokers(zk))
    for topic in topic_registry.get_topics(zk).values():
        for state in topic.states.values():
            others = (set(state.isr) & live) - {broker_id}
            if others and (state.leader == broker_id or broker_id in state.isr):
                return True
    return False
