"""The transaction history run: consume-transform-produce workers under random SIGKILLs, then the checker
(support/transaction_history.py). `scripts/transactions_run.py` runs it for minutes on its own cluster,
`tests/integration/test_transactions_history.py` for a short while on the suite's ZooKeeper.

- an input topic pre-filled with `inputs` values `in-<n>` (acks=all), an output topic, both RF 3, min ISR 2;
- `workers` processes (support/transaction_worker.py), each with its own transactional.id, in one group;
- a nemesis that every few seconds SIGKILLs, in turn: the transaction coordinator of a worker's transactional.id,
  the group's coordinator (it holds the offsets sent in transactions), the leader of an input or output partition, a worker. A killed broker is restarted after a pause (at most one
  broker down at once, so acks=all with min ISR 2 goes on); a killed worker is restarted at once with the same
  transactional.id (its open transaction is aborted by its successor's InitProducerId); a worker that exits
  on its own (fatal error) is restarted too, and counted.
Rule 1: the faults stop after `seconds` (and `min_faults`); everything is healed; the drain (Rule 4); the
workers get SIGTERM; then the final reads: every output partition read_committed to its last stable offset and
read_uncommitted to its high watermark (a read that cannot reach its end raises AssertionError, never reads as
short), and the group's offsets.
Rule 2: every process started here is stopped before `run` returns; the caller owns the cluster.
Rule 3: with `spare_group_coordinator` no fault kills the broker coordinating the group (as found just before
the kill). Nothing needs it now: a transaction's offsets are written to `__consumer_offsets` as a transactional
batch and a new group coordinator loads them pending until their marker (offset_store.py, "Transactional
offsets"); before that, one killed between TxnOffsetCommit and the COMMIT marker lost them, and
`scripts/transactions_run.py --minutes 3 --seed 1` found 350 duplicates. Both the suite's short run and the
script kill it.
Rule 4 (the drain): the workers stop pacing (SIGUSR1, worker Rule 2) and go on until the group's committed
offsets reach the input's ends. The rate is measured over the drain's first `drain_window_s` (longer than a
stuck worker takes to be ended by its watchdog, worker Rule 4, restarted and its partitions rebalanced); the
deadline is then `drain_margin` times what is left over that rate, past the window. A window with nothing
committed, or the deadline passed, ends the drain unfinished: the run fails (`RunResult.ok`) whatever the
checker finds, and the checker's "missing" and "offsets" then include input never processed.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from support.fault_run import LIBRDKAFKA_LOG_LEVEL, heal, high_watermark, wait_for_leaders
from support.transaction_history import Report, TransactionHistory, input_value

WORKER = Path(__file__).resolve().parent / "transaction_worker.py"
FAULT_KINDS = ("coordinator", "worker", "group-coordinator", "leader")
FAULT_INTERVAL_S = (3.0, 6.0)
DOWN_S = (1.0, 4.0)
FINAL_READ_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TransactionRunSettings:
    seconds: float = 300.0
    inputs: int = 20000
    partitions: int = 4
    workers: int = 3
    seed: int | None = None
    min_faults: int = 0
    drain_window_s: float = 60.0  # Rule 4: the drain's rate is measured over this long
    drain_margin: float = 3.0  # Rule 4: the drain may take this many times what the measured rate predicts
    session_timeout_ms: int = 3000
    worker_args: tuple[str, ...] = ()  # e.g. ("--no-offsets",): a planted defect
    fault_kinds: tuple[str, ...] = FAULT_KINDS
    fault_interval_s: tuple[float, float] = FAULT_INTERVAL_S  # a fault every so many seconds, uniformly
    spare_group_coordinator: bool = False  # the broker coordinating the group is never killed (Rule 3)

    def broker_overrides(self) -> dict[str, str]:
        from support.transactions import TXN_SETTINGS

        return {**TXN_SETTINGS, "zookeeper.session.timeout.ms": str(self.session_timeout_ms),
                "log.flush.interval.ms": "50"}


@dataclass
class RunResult:
    faults: list[str] = field(default_factory=list)
    worker_exits: int = 0  # workers that exited on their own (a fatal error) and were restarted
    left_after_faults: int = -1  # input records not yet committed by the group when the faults ended
    fault_rate: float = 0.0  # input records committed a second while the faults went on
    drain: "Drain | None" = None
    report: Report | None = None
    phases: dict[str, float] = field(default_factory=dict)  # seconds each phase took, in order
    stuck_workers: list[str] = field(default_factory=list)  # did not stop on SIGTERM (their stacks: their logs)
    watchdog_exits: int = 0  # of worker_exits, those the worker's watchdog made (worker Rule 4)
    _lap_start: float = field(default_factory=time.monotonic)

    def lap(self, phase: str) -> float:
        """Records the seconds since the previous lap as `phase`'s; returns them."""
        now = time.monotonic()
        self.phases[phase], self._lap_start = now - self._lap_start, now
        return self.phases[phase]

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.ok and self.drain is not None and self.drain.finished

    def summary(self) -> str:
        faults = ", ".join(self.faults[:30]) + (" ..." if len(self.faults) > 30 else "")
        return (f"faults: {len(self.faults)} ({faults})\nworkers exited on their own: {self.worker_exits} (their "
                f"watchdog: {self.watchdog_exits}); input "
                f"left when the faults ended: {self.left_after_faults} (committed {self.fault_rate:.1f}/s during "
                f"the faults)\n{self.drain}\nworkers that did not stop on SIGTERM: {self.stuck_workers or 'none'}"
                f"\nphases: {', '.join(f'{k} {v:.0f} s' for k, v in self.phases.items())}"
                f"\n{self.report}")


@dataclass
class Drain:
    """Rule 4's outcome."""

    left: int  # input records not committed when the drain began
    seconds: float = 0.0
    rate: float = 0.0  # committed a second over the measuring window (0: not measured)
    deadline_s: float = 0.0  # the bound the rate gave, from the drain's start
    still_left: int = -1  # at the end: 0 when finished

    @property
    def finished(self) -> bool:
        return self.still_left == 0

    def __str__(self) -> str:
        verdict = "finished" if self.finished else f"did NOT finish: {self.still_left} input records left"
        bound = (f"{self.rate:.1f}/s over its first window, deadline {self.deadline_s:.0f} s" if self.rate else
                 "within its first window" if self.finished else "nothing committed in its first window")
        return f"drain {verdict} after {self.seconds:.0f} s ({self.left} left at its start; {bound})"


class Workers:
    """The worker processes, by transactional.id (Rule 2)."""

    def __init__(self, cluster, names: dict[str, str], journal_dir: Path, extra: tuple[str, ...]) -> None:
        self.cluster, self.names, self.journal_dir, self.extra = cluster, names, journal_dir, extra
        self.procs: dict[str, subprocess.Popen] = {}
        self.draining = False

    def start(self, tid: str) -> None:
        bootstrap = ",".join(b.address for b in self.cluster.brokers.values())
        with open(self.journal_dir / f"{tid}.log", "ab") as log:  # the worker's stderr, beside its journal
            self.procs[tid] = subprocess.Popen(
                [sys.executable, str(WORKER), bootstrap, self.names["in"], self.names["out"], self.names["group"],
                 tid, str(self.journal_dir / f"{tid}.journal"), *self.extra, *(("--drain",) * self.draining)],
                stderr=log)

    def drain(self) -> None:
        """Rule 4: no more pacing, for the running workers and those started from now on."""
        self.draining = True
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)

    def restart_exited(self) -> int:
        exited = [tid for tid, proc in self.procs.items() if proc.poll() is not None]
        for tid in exited:
            self.start(tid)
        return len(exited)

    def kill(self, tid: str) -> None:
        self.procs[tid].kill()
        self.procs[tid].wait()
        self.start(tid)

    def stop(self) -> list[str]:
        """SIGTERM to each; one still running after STOP_TIMEOUT_S gets SIGABRT (its stack goes to its log), then
        SIGKILL. The transactional ids of those that did not stop on SIGTERM."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        stuck = []
        for tid, proc in self.procs.items():
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                stuck.append(tid)
                proc.send_signal(signal.SIGABRT)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        return stuck

    def watchdog_exits(self) -> int:
        """Worker processes their watchdog ended (worker Rule 4): faulthandler's "Timeout (...)!" in their logs."""
        return sum(path.read_text(errors="replace").count("Timeout (") for path in self.journal_dir.glob("*.log"))

    def journal_lines(self):
        for path in sorted(self.journal_dir.glob("*.journal")):
            yield from path.read_text().splitlines()


def run(cluster, zk_connect: str, settings: TransactionRunSettings, journal_dir: Path) -> RunResult:
    """The whole scenario (module docstring) on a started three-broker `cluster`."""
    rnd, result = random.Random(settings.seed), RunResult()
    suffix = uuid.uuid4().hex[:8]
    names = {"in": f"txin-{suffix}", "out": f"txout-{suffix}", "group": f"txg-{suffix}"}
    _create_topics(zk_connect, names, settings.partitions)
    wait_for_leaders(cluster.bootstrap, names["in"], settings.partitions)
    wait_for_leaders(cluster.bootstrap, names["out"], settings.partitions)
    ends = _fill(cluster, names["in"], settings.inputs)
    result.lap("setup")
    workers = Workers(cluster, names, journal_dir, settings.worker_args)
    tids = [f"txw-{suffix}-{i}" for i in range(settings.workers)]
    try:
        for tid in tids:
            workers.start(tid)
        _nemesis(cluster, workers, tids, names, settings, rnd, result)
        heal(cluster)
        result.left_after_faults = _left(_committed(cluster, names, ends), ends)
        faults_s = result.lap("faults")
        if result.left_after_faults >= 0:
            result.fault_rate = (sum(ends.values()) - result.left_after_faults) / faults_s
        result.drain = _drain(cluster, workers, names, ends, settings, result)
    finally:
        result.stuck_workers = workers.stop()
        result.watchdog_exits = workers.watchdog_exits()
        heal(cluster)
        result.lap("drain")
    history = TransactionHistory(settings.inputs)
    history.output_partitions = settings.partitions
    history.record_journal(workers.journal_lines())
    _final_reads(cluster, names["out"], settings.partitions, history)
    committed = _final_committed(cluster, names, ends)  # {} when unreadable: a problem for every partition
    history.group_offsets = {p: (committed.get(p), end) for p, end in ends.items()}
    result.report = history.check()
    result.lap("final reads")
    return result


def _left(committed: dict[int, int], ends: dict[int, int]) -> int:
    """Input records the group has not committed yet; -1 when its offsets could not be read."""
    return sum(ends.values()) - sum(max(0, o) for o in committed.values()) if committed else -1


def _create_topics(zk_connect: str, names: dict, partitions: int) -> None:
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    zk = connect(zk_connect)
    try:
        for topic in (names["in"], names["out"]):
            topics.create_topic(zk, topic, partitions, 3, config={"min.insync.replicas": "2"})
    finally:
        close(zk)


def _fill(cluster, topic: str, inputs: int) -> dict[int, int]:
    """The numbered input values, acks=all and idempotent; each partition's end after."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "log_level": LIBRDKAFKA_LOG_LEVEL})
    ends: dict[int, int] = {}

    def delivered(err, msg):
        assert err is None, err
        ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    for n in range(inputs):
        while True:
            try:
                producer.produce(topic, input_value(n), key=str(n).encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(FINAL_READ_TIMEOUT_S) == 0, "the input was not all delivered"
    return ends


def _nemesis(cluster, workers: Workers, tids, names, settings, rnd: random.Random, result: RunResult) -> None:
    deadline = time.monotonic() + settings.seconds
    while time.monotonic() < deadline or len(result.faults) < settings.min_faults:
        time.sleep(rnd.uniform(*settings.fault_interval_s))
        result.worker_exits += workers.restart_exited()
        kinds = settings.fault_kinds
        kind = kinds[len(result.faults) % len(kinds)]  # in turn: min_faults=len(kinds) makes one of each
        if kind == "worker":
            tid = rnd.choice(tids)
            result.faults.append(f"worker {tid[-1]}")
            workers.kill(tid)
            continue
        victim = _victim(cluster, kind, rnd, tids, names, settings.partitions)
        broker = cluster.brokers.get(victim)
        if settings.spare_group_coordinator and victim == _coordinator(cluster, names["group"], 0):
            continue
        if broker is None or not broker.running or not all(b.running for b in cluster.brokers.values()):
            continue
        result.faults.append(f"{kind} {victim}")
        broker.kill()
        time.sleep(rnd.uniform(*DOWN_S))
        broker.start()


def _victim(cluster, kind: str, rnd: random.Random, tids, names, partitions: int) -> int | None:
    """The broker a fault of `kind` picks: a transactional id's coordinator, the group's, or a leader."""
    if kind == "coordinator":
        return _coordinator(cluster, rnd.choice(tids), 1)
    if kind == "group-coordinator":
        return _coordinator(cluster, names["group"], 0)
    return _leader(cluster, names[rnd.choice(["in", "out"])], rnd.randrange(partitions))


def _coordinator(cluster, key: str, key_type: int) -> int | None:
    from sparklog.protocol import ApiKey, FindCoordinatorRequest
    from support.wire import request

    broker = next(b for b in cluster.brokers.values() if b.running)
    try:
        found = request(broker.host, broker.port, ApiKey.FIND_COORDINATOR, 2,
                        FindCoordinatorRequest(key=key, key_type=key_type))
    except (OSError, ConnectionError):
        return None
    return found.node_id if found.error_code == 0 else None


def _leader(cluster, topic: str, partition: int) -> int | None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=5).topics[topic]
        return md.partitions[partition].leader
    except (KafkaException, KeyError):
        return None


def _drain(cluster, workers: Workers, names, ends: dict[int, int], settings, result: RunResult) -> Drain:
    """Rule 4: until the group's committed offsets reach the input's ends, or the deadline the rate gives."""
    workers.drain()
    start = time.monotonic()
    left = result.left_after_faults if result.left_after_faults >= 0 else sum(ends.values())  # -1: unread
    drain = Drain(left=left, still_left=left)
    window_start, window_left = start, left
    while drain.still_left != 0:
        time.sleep(1.0)
        result.worker_exits += workers.restart_exited()
        now, left = time.monotonic(), _left(_committed(cluster, names, ends), ends)
        drain.still_left, drain.seconds = (left if left >= 0 else drain.still_left), now - start
        if not drain.rate and now - window_start >= settings.drain_window_s:
            if window_left - drain.still_left <= 0:
                break  # a whole window with nothing committed: stuck
            drain.rate = (window_left - drain.still_left) / (now - window_start)
            drain.deadline_s = drain.seconds + settings.drain_margin * drain.still_left / drain.rate
        if drain.rate and drain.seconds > drain.deadline_s:
            break
    return drain


def _committed(cluster, names, ends: dict[int, int]) -> dict[int, int]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": names["group"],
                         "enable.auto.commit": False, "log_level": LIBRDKAFKA_LOG_LEVEL})
    try:
        found = consumer.committed([TopicPartition(names["in"], p) for p in ends], 10)
        return {tp.partition: tp.offset for tp in found}
    except KafkaException:
        return {}
    finally:
        consumer.close()


def _final_committed(cluster, names, ends: dict[int, int]) -> dict[int, int]:
    """The group's offsets, asked again until readable or FINAL_READ_TIMEOUT_S passed ({}: never readable)."""
    deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
    while not (committed := _committed(cluster, names, ends)) and time.monotonic() < deadline:
        time.sleep(1.0)
    return committed


def _final_reads(cluster, topic: str, partitions: int, history: TransactionHistory) -> None:
    wait_for_leaders(cluster.bootstrap, topic, partitions)
    for p in range(partitions):
        history.record_final(p, _read(cluster, topic, p, "read_committed"),
                             _read(cluster, topic, p, "read_uncommitted"))


def _read(cluster, topic: str, partition: int, isolation: str):
    """(end, [(offset, value)]) of one partition from its start to its end under `isolation` (LSO or HW); an
    AssertionError if the position does not reach the end by FINAL_READ_TIMEOUT_S (Rule 1)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"final-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "log_level": LIBRDKAFKA_LOG_LEVEL})
    tp, log = TopicPartition(topic, partition), []
    deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
    try:
        end = high_watermark(consumer, tp)
        consumer.assign([TopicPartition(topic, partition, 0)])
        while end > 0 and (position := consumer.position([tp])[0].offset) < end:
            if time.monotonic() > deadline:
                raise AssertionError(f"{isolation} read of {topic}-{partition} stopped at {position}, its end {end}")
            log += [(m.offset(), m.value()) for m in consumer.consume(1000, 0.5) if m.error() is None]
    finally:
        consumer.close()
    return end, log
