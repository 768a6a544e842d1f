"""Transactional offsets in `__consumer_offsets` (offset_store.py, "Transactional offsets"; offset_cache Rule:
transactional-offsets-pending), over a real partition log, replica manager and purgatory: TxnOffsetCommit's
offsets are appended as a transactional batch, pending until the marker (written by WriteTxnMarkers' own
code); COMMIT commits them, ABORT drops them; a reload from the log (a new coordinator), a restart of the log
(recovery) and a compaction of it give back the same committed and pending offsets. The state machine checks
any sequence of those against a model."""

from __future__ import annotations

import asyncio
import tempfile
from types import SimpleNamespace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC, OffsetStoreError
from sparklog.broker.coordinator.transaction import handlers as txn_handlers
from sparklog.coordination.offsets import OffsetAndMetadata as OM
from sparklog.protocol import errors
from sparklog.records.batch import iter_batches
from sparklog.storage import LogManager
from sparklog.storage.cleaner import Cleaner
from sparklog.storage.files import OS_FILES
from sparklog.storage.offset_map import OffsetMap
from support.offset_store_harness import Partitions, loaded, new_store

NEVER = str(10**12)
GROUPS = ("g", "h")
TPS = (("t", 0), ("t", 1))
PRODUCERS = (7, 8, 9)
EPOCH = 0
UNSTABLE = errors.UnstableOffsetCommitError.errno
COMMIT_TIMEOUT_MS = 30_000  # the append's wait for the (one) in-sync replica: generous on a loaded machine


class Harness:
    """One offsets partition led here: its log (reopened on `restart`), the store, WriteTxnMarkers' state."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.loop = asyncio.new_event_loop()
        self.partitions = Partitions()
        self.manager = self.plog = self.store = None
        self.open_log()

    def open_log(self) -> None:
        self.manager = LogManager([self.directory], {"flush.ms": NEVER, "min.compaction.lag.ms": "0"})
        self.plog = self.manager.get_or_create(OFFSETS_TOPIC, 0, {"cleanup.policy": "compact"})
        self.partitions.lead(self.plog)
        self.reload()

    def reload(self) -> None:
        """A coordinator taking the partition over: a new store, loaded from the log."""
        self.store = self.run(loaded(new_store(self.partitions, offsets_commit_timeout_ms=COMMIT_TIMEOUT_MS)))

    def restart(self) -> None:
        self.manager.close()
        self.open_log()

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def marker(self, producer_id: int, commit: bool) -> int:
        """WriteTxnMarkers' own path for one marker on the partition (transaction handlers Rule 3)."""
        state = SimpleNamespace(partitions=self.partitions, replicas=self.store.replicas, offsets=self.store)
        marker = SimpleNamespace(producer_id=producer_id, producer_epoch=EPOCH, transaction_result=commit,
                                 coordinator_epoch=0)
        return self.run(txn_handlers._write_marker(state, marker, (OFFSETS_TOPIC, 0)))

    def clean(self) -> None:
        self.plog.roll()
        self.plog.flush()
        Cleaner(OffsetMap(64 * 1024), OS_FILES).clean(self.plog)

    def close(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        self.manager.close()


class Model:
    """The committed offsets as the log's order decides them: (log offset, offset or None) per key."""

    def __init__(self) -> None:
        self.next = 0  # the log end offset
        self.committed: dict[tuple[str, tuple[str, int]], tuple[int, int | None]] = {}
        self.pending: dict[int, dict[tuple[str, tuple[str, int]], tuple[int, int]]] = {}

    def commit(self, key, offset: int | None) -> None:
        self.committed[key] = (self.next, offset)
        self.next += 1

    def txn_commit(self, producer_id: int, key, offset: int) -> None:
        self.pending.setdefault(producer_id, {})[key] = (self.next, offset)
        self.next += 1

    def marker(self, producer_id: int, commit: bool) -> None:
        for key, (position, offset) in self.pending.pop(producer_id, {}).items():
            if commit and self.committed.get(key, (-1, None))[0] < position:
                self.committed[key] = (position, offset)
        self.next += 1

    def live(self, group: str) -> dict:
        return {tp: OM(offset) for (g, tp), (_, offset) in self.committed.items() if g == group and offset is not None}

    def unstable(self, group: str) -> set:
        return {tp for held in self.pending.values() for g, tp in held if g == group}


class TransactionalOffsets(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.harness = Harness(self.tmp.name)
        self.model = Model()

    @rule(group=st.sampled_from(GROUPS), tp=st.sampled_from(TPS), offset=st.integers(0, 1000))
    def commit(self, group, tp, offset):
        assert self.harness.run(self.harness.store.commit(group, {tp: OM(offset)})) == {tp: 0}
        self.model.commit((group, tp), offset)

    @rule(producer_id=st.sampled_from(PRODUCERS), group=st.sampled_from(GROUPS), tp=st.sampled_from(TPS),
          offset=st.integers(0, 1000))
    def txn_offset_commit(self, producer_id, group, tp, offset):
        codes = self.harness.run(self.harness.store.commit_transactional(group, (producer_id, EPOCH), {tp: OM(offset)}))
        assert codes == {tp: 0}
        self.model.txn_commit(producer_id, (group, tp), offset)

    @rule(producer_id=st.sampled_from(PRODUCERS), commit=st.booleans())
    def marker(self, producer_id, commit):
        assert self.harness.marker(producer_id, commit) == 0
        self.model.marker(producer_id, commit)

    @rule(group=st.sampled_from(GROUPS), tp=st.sampled_from(TPS))
    def delete_offset(self, group, tp):
        assert self.harness.run(self.harness.store.delete_offsets(group, [tp])) == 0
        if (group, tp) in self.model.committed and self.model.committed[(group, tp)][1] is not None:
            self.model.commit((group, tp), None)

    @rule()
    def new_coordinator(self):
        self.harness.reload()

    @rule()
    def restart(self):
        self.harness.restart()

    @rule()
    def compact(self):
        self.harness.clean()

    @invariant()
    def same_offsets_as_the_model(self):
        store = self.harness.store
        assert self.harness.plog.log_end_offset == self.model.next
        for group in GROUPS:
            assert self.harness.run(store.fetch(group, None)) == self.model.live(group), group
            assert store.unstable(group, TPS) == self.model.unstable(group), group

    def teardown(self):
        self.harness.close()
        self.tmp.cleanup()


def test_transactional_offsets_survive_reload_restart_and_compaction_as_the_model_says():
    run_state_machine_as_test(TransactionalOffsets, settings=settings(
        max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)))


def scenario(body):
    with tempfile.TemporaryDirectory() as directory:
        harness = Harness(directory)
        try:
            body(harness)
        finally:
            harness.close()


def test_txn_offsets_are_one_transactional_batch_of_the_producer_pending_until_the_commit_marker():
    def body(h):
        store = h.store
        assert h.run(store.commit("g", {TPS[0]: OM(3)})) == {TPS[0]: 0}
        assert h.run(store.commit_transactional("g", (7, EPOCH), {TPS[0]: OM(5), TPS[1]: OM(6)})) == {
            TPS[0]: 0, TPS[1]: 0}
        batch = list(iter_batches(h.plog.read(1, 1 << 20).read_bytes()))[0]
        assert (batch.producer_id, batch.producer_epoch, batch.is_transactional, batch.record_count) == (
            7, EPOCH, True, 2)
        assert h.run(store.fetch("g", None)) == {TPS[0]: OM(3)}  # pending: not visible
        assert store.unstable("g", TPS) == {TPS[0], TPS[1]}
        h.reload()  # a new coordinator before the marker: still pending, still invisible
        assert (h.run(h.store.fetch("g", None)), h.store.unstable("g", TPS)) == ({TPS[0]: OM(3)}, set(TPS))
        assert h.marker(7, True) == 0
        assert (h.run(h.store.fetch("g", None)), h.store.unstable("g", TPS)) == ({TPS[0]: OM(5), TPS[1]: OM(6)},
                                                                                set())
        h.reload()
        assert h.run(h.store.fetch("g", None)) == {TPS[0]: OM(5), TPS[1]: OM(6)}

    scenario(body)


def test_an_abort_marker_drops_the_pending_offsets_before_and_after_a_reload():
    def body(h):
        assert h.run(h.store.commit_transactional("g", (8, EPOCH), {TPS[0]: OM(9)})) == {TPS[0]: 0}
        h.reload()
        assert h.marker(8, False) == 0
        assert (h.run(h.store.fetch("g", None)), h.store.unstable("g", TPS)) == ({}, set())
        h.restart()
        assert (h.run(h.store.fetch("g", None)), h.store.unstable("g", TPS)) == ({}, set())

    scenario(body)


def test_a_fenced_producer_epoch_is_refused_with_nothing_written():
    def body(h):
        assert h.run(h.store.commit_transactional("g", (7, 3), {TPS[0]: OM(1)})) == {TPS[0]: 0}
        end = h.plog.log_end_offset
        assert h.run(h.store.commit_transactional("g", (7, 2), {TPS[0]: OM(2)})) == {
            TPS[0]: errors.InvalidProducerEpochError.errno}
        assert h.plog.log_end_offset == end

    scenario(body)


def test_require_stable_answers_unstable_offset_commit_for_pending_partitions_only():
    from sparklog.broker.handlers.coordinators import handle_offset_fetch
    from sparklog.protocol.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic

    t0, u0 = ("t", 0), ("u", 0)

    def fetch(h, require_stable, topics=True):
        state = SimpleNamespace(partitions=h.partitions, offsets=h.store, groups=h.store.groups, broker_id=1)
        body = OffsetFetchRequest(group_id="g", require_stable=require_stable, topics=[
            OffsetFetchRequestTopic(name=t, partition_indexes=[0]) for t in "tu"] if topics else None)
        answer = h.run(handle_offset_fetch(SimpleNamespace(body=body, api_version=7), state))
        return answer.error_code, {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                                   for t in answer.topics for p in t.partitions}

    def body(h):
        h.partitions.topics(t=None, u=None)
        assert h.run(h.store.commit("g", {t0: OM(3), u0: OM(4)})) == {t0: 0, u0: 0}
        assert h.run(h.store.commit_transactional("g", (7, EPOCH), {t0: OM(5)})) == {t0: 0}
        assert fetch(h, True) == (0, {t0: (-1, UNSTABLE), u0: (4, 0)})
        assert fetch(h, True, topics=False) == (0, {t0: (-1, UNSTABLE), u0: (4, 0)})
        assert fetch(h, False) == (0, {t0: (3, 0), u0: (4, 0)})
        assert h.marker(7, True) == 0
        assert fetch(h, True) == (0, {t0: (5, 0), u0: (4, 0)})

    scenario(body)


def test_require_stable_never_answers_the_old_offset_of_a_transaction_whose_marker_lands_during_the_fetch():
    """OffsetFetch reads the store's ZooKeeper fallback for a partition the topic has never seen (an await):
    a marker that commits a pending offset meanwhile must not leave the answer with the offset from before the
    marker and no UNSTABLE_OFFSET_COMMIT (librdkafka's 0103_transactions read its previous transaction's
    offset so, right after commit_transaction)."""
    from sparklog.broker.handlers.coordinators import handle_offset_fetch
    from sparklog.protocol.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic

    t0, u0 = ("t", 0), ("u", 0)

    def body(h):
        h.partitions.topics(t=None, u=None)
        assert h.run(h.store.commit("g", {t0: OM(3)})) == {t0: 0}
        assert h.run(h.store.commit_transactional("g", (7, EPOCH), {t0: OM(5)})) == {t0: 0}

        async def zookeeper_read_while_the_marker_lands(fn, *args):
            h.store.complete_transaction(0, 7, True)
            return {}

        h.store.zk, h.store._blocking = object(), zookeeper_read_while_the_marker_lands
        state = SimpleNamespace(partitions=h.partitions, offsets=h.store, groups=h.store.groups, broker_id=1)
        request = OffsetFetchRequest(group_id="g", require_stable=True, topics=[
            OffsetFetchRequestTopic(name=t, partition_indexes=[0]) for t in "tu"])
        answer = h.run(handle_offset_fetch(SimpleNamespace(body=request, api_version=7), state))
        found = {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                 for t in answer.topics for p in t.partitions}
        assert found[t0] in ((-1, UNSTABLE), (5, 0)), found
        assert found[u0] == (-1, 0)

    scenario(body)


def test_the_store_refuses_to_answer_for_a_partition_it_does_not_lead():
    def body(h):
        h.partitions.lose()
        try:
            h.store.unstable("g", TPS)
        except OffsetStoreError as exc:
            assert exc.code == errors.NotCoordinatorError.errno
        else:
            raise AssertionError("unstable() answered for a partition not led here")

    scenario(body)


def test_compaction_drops_aborted_and_superseded_offsets_and_keeps_an_undecided_transactions():
    from sparklog.records.batch import iter_records

    t0, t1 = TPS

    def offsets_in_log(h):
        data = b"".join(piece.read_bytes() for piece in h.plog.iter_slices(0))
        return sorted(r.offset for r in iter_records(data))

    def body(h):
        store, run = h.store, h.run
        assert run(store.commit("g", {t0: OM(1)})) == {t0: 0}  # 0
        assert run(store.commit_transactional("g", (7, EPOCH), {t0: OM(2)})) == {t0: 0}  # 1
        assert h.marker(7, False) == 0  # 2: ABORT
        assert run(store.commit("g", {t1: OM(4)})) == {t1: 0}  # 3
        assert run(store.commit_transactional("g", (8, EPOCH), {t0: OM(3)})) == {t0: 0}  # 4
        assert h.marker(8, True) == 0  # 5: COMMIT
        h.plog.roll()
        assert run(store.commit_transactional("g", (9, EPOCH), {t1: OM(9)})) == {t1: 0}  # 6: undecided
        h.clean()
        assert offsets_in_log(h) == [3, 4, 6]  # 0 superseded by 4, 1 aborted; 6 past the LSO
        h.reload()
        assert (run(h.store.fetch("g", None)), h.store.unstable("g", TPS)) == ({t0: OM(3), t1: OM(4)}, {t1})
        assert h.marker(9, True) == 0
        h.restart()
        assert run(h.store.fetch("g", None)) == {t0: OM(3), t1: OM(9)}

    scenario(body)
