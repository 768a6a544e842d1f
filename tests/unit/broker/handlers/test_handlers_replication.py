"""Produce, Fetch, ListOffsets and OffsetForLeaderEpoch as a leader: acks=all waits for the high watermark
(issue 14: never acknowledged before it is visible), min.insync.replicas, follower fetches moving the HW,
and leader-epoch fencing. Real logs, a hand-made snapshot, no ZooKeeper."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import (FetchPartition, FetchRequest, FetchTopic, ListOffsetsPartition, ListOffsetsRequest,
                               ListOffsetsTopic, PartitionProduceData, ProduceRequest, RequestHeader,
                               TopicProduceData)
from sparklog.protocol.offset_for_leader_epoch import (OffsetForLeaderEpochRequest, OffsetForLeaderPartition,
                                                       OffsetForLeaderTopic)
from sparklog.protocol.registry import Request
from sparklog.records.batch import build_batch, iter_batches
from sparklog.storage import LogManager

ME, OTHER, THIRD = 1, 2, 3
NEVER = str(10**12)
EPOCH = 4


class FakePartitions:
    def __init__(self, snapshot):
        self.snapshot = snapshot


# The topic override the partition manager applies to the log it opens (the log holds min.insync.replicas typed).
MIN_INSYNC_2 = {"min.insync.replicas": "2"}


@pytest.fixture
def logs(tmp_path):
    manager = LogManager([str(tmp_path / "logs")], {"flush.ms": NEVER})  # flushed-only visibility (default)
    yield manager
    manager.close()


@pytest.fixture
def state(logs):
    config = BrokerConfig.from_properties({"broker.id": str(ME), "log.dirs": "/unused", "zookeeper.connect": "u:1"})
    leading = {("one", 0): logs.get_or_create("one", 0), ("three", 0): logs.get_or_create("three", 0, MIN_INSYNC_2)}
    topics = {
        "one": TopicMeta("one", {0: PartitionMeta(0, ME, EPOCH, (ME,), (ME,))}),
        "three": TopicMeta("three", {0: PartitionMeta(0, ME, EPOCH, (ME, OTHER, THIRD), (ME, OTHER))},
                           config={"min.insync.replicas": "2"}),
    }
    brokers = {b: BrokerInfo(b, "127.0.0.1", 9090 + b) for b in (ME, OTHER, THIRD)}
    return handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=logs,
                                      partitions=FakePartitions(MetadataSnapshot(topics, brokers, leading)))


def request(body, api_key, version):
    return Request(RequestHeader(api_key, version, 7, "test"), body)


def produce(state, topic, values, acks=-1, timeout_ms=5000):
    records = build_batch([(None, v, None, None) for v in values])
    body = ProduceRequest(acks=acks, timeout_ms=timeout_ms, topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=0, records=records)])])
    return handlers.handle_produce(request(body, 0, 8), state)


def code_of(response):
    return response.responses[0].partition_responses[0].error_code


def latest(state, topic, current_leader_epoch=-1):
    body = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsTopic(name=topic, partitions=[
        ListOffsetsPartition(partition_index=0, timestamp=-1, current_leader_epoch=current_leader_epoch)])])
    part = handlers.handle_list_offsets(request(body, 2, 5), state).topics[0].partitions[0]
    return part.error_code, part.offset, part.leader_epoch


def fetch(state, topic, offset, replica_id=-1, current_leader_epoch=-1):
    body = FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=1, topics=[FetchTopic(topic=topic, partitions=[
        FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=100_000,
                       current_leader_epoch=current_leader_epoch)])])
    return handlers.handle_fetch(request(body, 1, 11), state).responses[0].partitions[0]


def test_acks_all_is_answered_only_once_the_write_is_visible(state, logs):
    """Issue 14: with RF 1 and flushed-only visibility (flush.ms never reached here), acks=all is not
    answered at the append but once the write is fsynced and visible; that fsync is started at once."""
    async def scenario():
        seen_at_ack = []
        logs.get("one", 0).add_high_watermark_listener(lambda plog, hw: seen_at_ack.append(hw))
        pending = produce(state, "one", [b"a"])
        assert asyncio.iscoroutine(pending)  # not visible at the append: no answer yet
        response = await asyncio.wait_for(pending, 2)
        assert code_of(response) == 0 and seen_at_ack == [1]
        assert latest(state, "one")[:2] == (0, 1)  # ListOffsets right after the ack sees the write
        await state.replicas.close()

    asyncio.run(scenario())


def test_a_single_replica_offline_then_led_again_answers_acks_all_once_flushed(state, logs):
    """The fault run's RF 1 stall: a restarted broker first sees its only-replica partition offline (leader
    -1: a FOLLOWER of nobody), then leads it. Its HW must follow fsyncs again, or every acks=all write
    waits until REQUEST_TIMED_OUT and each retry appends the batch once more."""
    async def scenario():
        snapshot = state.partitions.snapshot
        plog = logs.get("one", 0)
        offline = dict(snapshot.topics, one=TopicMeta("one", {0: PartitionMeta(0, -1, EPOCH + 1, (ME,), (ME,))}))
        state.replicas.apply(MetadataSnapshot(offline, snapshot.brokers, {}, following={("one", 0): plog}))
        led = dict(snapshot.topics, one=TopicMeta("one", {0: PartitionMeta(0, ME, EPOCH + 2, (ME,), (ME,))}))
        state.partitions.snapshot = MetadataSnapshot(led, snapshot.brokers, snapshot.leading)
        state.replicas.apply(state.partitions.snapshot)
        response = await asyncio.wait_for(produce(state, "one", [b"a"]), 2)
        assert code_of(response) == 0 and plog.high_watermark == 1
        await state.replicas.close()

    asyncio.run(scenario())


def test_acks_all_not_replicated_in_time_is_request_timed_out(state, logs):
    response = asyncio.run(produce(state, "three", [b"a"], timeout_ms=100))
    assert code_of(response) == handlers.REQUEST_TIMED_OUT
    assert logs.get("three", 0).high_watermark == 0


def test_acks_all_below_min_insync_is_refused_and_nothing_appended_while_acks_one_works(state, logs):
    state.partitions.snapshot.topics["three"].partitions[0] = PartitionMeta(0, ME, EPOCH, (ME, OTHER, THIRD), (ME,))
    assert code_of(produce(state, "three", [b"x"])) == handlers.NOT_ENOUGH_REPLICAS
    assert logs.get("three", 0).log_end_offset == 0
    assert code_of(produce(state, "three", [b"y"], acks=1)) == 0
    assert logs.get("three", 0).log_end_offset == 1


def test_acks_all_waits_for_the_isr_followers_fetch(state, logs):
    async def scenario():
        task = asyncio.ensure_future(produce(state, "three", [b"a", b"b"]))
        await asyncio.sleep(0.05)
        assert not task.done()
        part = fetch(state, "three", 0, replica_id=OTHER, current_leader_epoch=EPOCH)  # reads beyond the HW
        assert part.error_code == 0 and part.high_watermark == 0
        copied = part.records.read_bytes()
        assert [b.partition_leader_epoch for b in iter_batches(copied)] == [EPOCH]
        assert fetch(state, "three", 0).records.length == 0  # consumers see nothing yet
        await asyncio.sleep(0.05)
        assert not task.done()
        part = fetch(state, "three", 2, replica_id=OTHER, current_leader_epoch=EPOCH)  # the follower has it
        assert part.high_watermark == 2
        assert code_of(await asyncio.wait_for(task, 2)) == 0
        assert fetch(state, "three", 0).records.read_bytes() == copied

    asyncio.run(scenario())


def test_acks_all_keeps_waiting_across_a_new_epoch_of_the_same_leader(state):
    async def scenario():
        task = asyncio.ensure_future(produce(state, "three", [b"a"]))
        await asyncio.sleep(0.05)
        snapshot = state.partitions.snapshot
        topics = dict(snapshot.topics)
        topics["three"] = TopicMeta("three", {0: PartitionMeta(0, ME, EPOCH + 1, (ME, OTHER, THIRD), (ME, OTHER))},
                                    config={"min.insync.replicas": "2"})
        state.partitions.snapshot = MetadataSnapshot(topics, snapshot.brokers, snapshot.leading)
        state.replicas.apply(state.partitions.snapshot)  # what the partition manager's listener does
        await asyncio.sleep(0.05)
        assert not task.done()
        assert fetch(state, "three", 1, replica_id=OTHER, current_leader_epoch=EPOCH).error_code == \
            handlers.errors.FencedLeaderEpochError.errno  # a follower still in the old epoch
        fetch(state, "three", 1, replica_id=OTHER, current_leader_epoch=EPOCH + 1)
        assert code_of(await asyncio.wait_for(task, 2)) == 0
        await state.replicas.close()

    asyncio.run(scenario())


def test_only_a_follower_of_the_partition_reads_past_the_high_watermark(state):
    produce(state, "three", [b"a"], acks=1)
    assert fetch(state, "three", 0, replica_id=7).records.length == 0  # not a replica: a consumer's view
    assert fetch(state, "three", 0, replica_id=OTHER).records.length > 0


@pytest.mark.parametrize("epoch, code", [(-1, 0), (EPOCH, 0), (EPOCH - 1, handlers.errors.FencedLeaderEpochError.errno),
                                         (EPOCH + 1, handlers.errors.UnknownLeaderEpochError.errno)])
def test_current_leader_epoch_is_checked(state, epoch, code):
    assert fetch(state, "one", 0, current_leader_epoch=epoch).error_code == code
    assert latest(state, "one", current_leader_epoch=epoch)[0] == code


def test_list_offsets_reports_the_leader_epoch(state):
    assert latest(state, "one") == (0, 0, EPOCH)


def test_a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_offset_not_available(state, logs):
    """KIP-207: a leader (e.g. restarted with the whole cluster: its HW starts at the log start) answered
    ListOffsets latest with its lagging HW, 0 while the log held records, until its followers fetched: kcat -Q,
    the groups command's lag and a consumer reset to latest saw the log end go back to 0. Until the HW reaches
    the epoch's start it is OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before v5), both retriable; a time
    lookup that finds nothing visible too; the earliest offset is answered."""
    async def scenario():
        produce(state, "three", [b"a", b"b"], acks=1)  # LEO 2, HW 0: no follower has fetched
        snapshot = state.partitions.snapshot
        topics = dict(snapshot.topics)
        topics["three"] = TopicMeta("three", {0: PartitionMeta(0, ME, EPOCH + 1, (ME, OTHER, THIRD), (ME, OTHER))},
                                    config={"min.insync.replicas": "2"})
        state.partitions.snapshot = MetadataSnapshot(topics, snapshot.brokers, snapshot.leading)
        state.replicas.apply(state.partitions.snapshot)  # leader again in a new epoch starting at offset 2

        def answer(timestamp, version=5):
            body = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsTopic(
                name="three", partitions=[ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])
            part = handlers.handle_list_offsets(request(body, 2, version), state).topics[0].partitions[0]
            return part.error_code, part.offset

        not_available = handlers.errors.OffsetNotAvailableError.errno
        assert answer(-1) == (not_available, -1)
        assert answer(-1, version=4) == (handlers.LEADER_NOT_AVAILABLE, -1)
        assert answer(0) == (not_available, -1)  # offset 0's record is not visible yet
        assert answer(-2) == (0, 0)
        fetch(state, "three", 2, replica_id=OTHER, current_leader_epoch=EPOCH + 1)  # the follower has both
        assert answer(-1) == (0, 2)
        assert answer(0) == (0, 0)
        await state.replicas.close()

    asyncio.run(scenario())


def test_offset_for_leader_epoch_answers_from_the_epoch_cache(state, logs):
    produce(state, "one", [b"a", b"b"], acks=1)
    logs.get("one", 0).flush()
    body = OffsetForLeaderEpochRequest(replica_id=OTHER, topics=[OffsetForLeaderTopic(topic="one", partitions=[
        OffsetForLeaderPartition(partition=0, current_leader_epoch=EPOCH, leader_epoch=EPOCH),
        OffsetForLeaderPartition(partition=0, current_leader_epoch=EPOCH, leader_epoch=EPOCH - 1),
        OffsetForLeaderPartition(partition=0, current_leader_epoch=EPOCH - 1, leader_epoch=EPOCH)])])
    answers = handlers.handle_offset_for_leader_epoch(request(body, 23, 3), state).topics[0].partitions
    assert [(a.error_code, a.leader_epoch, a.end_offset) for a in answers] == [
        (0, EPOCH, 2), (0, EPOCH - 1, 0), (handlers.errors.FencedLeaderEpochError.errno, -1, -1)]


# -- with a real ZooKeeper: ISR writes, NOT_ENOUGH_REPLICAS_AFTER_APPEND, a zombie leader fenced ---------------

LAG_MS = 200


@pytest.fixture
def zk_state(zk, logs):
    """A broker leading a fresh RF-3 topic `z` (min.insync.replicas=2) whose state lives in ZooKeeper."""
    from sparklog.broker.replication.partitions import topic_meta
    from sparklog.broker.replication.purgatory import Purgatory
    from sparklog.broker.replication.replica_manager import ReplicaManager
    from sparklog.coordination import topics

    created = topics.create_topic(zk, "z", 1, 3, {"min.insync.replicas": "2"}, live_broker_ids=[1, 2, 3])
    me = created.states[0].leader
    config = BrokerConfig.from_properties({"broker.id": str(me), "log.dirs": "/u", "zookeeper.connect": "u:1"})
    snapshot = MetadataSnapshot({"z": topic_meta(topics.get_topic(zk, "z"))}, {}, {("z", 0): logs.get_or_create("z", 0, MIN_INSYNC_2)})
    purgatory = Purgatory()
    replicas = ReplicaManager(zk, me, purgatory, replica_lag_time_max_ms=LAG_MS)
    return handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=zk, logs=logs,
                                      partitions=FakePartitions(snapshot), waiters=purgatory, replicas=replicas)


def test_isr_shrinking_while_acks_all_waits_is_not_enough_replicas_after_append_then_expands(zk, zk_state):
    from sparklog.coordination import topics

    me = zk_state.broker_id
    others = [b for b in (1, 2, 3) if b != me]

    async def scenario():
        zk_state.replicas.start(asyncio.get_running_loop())
        pending = produce(zk_state, "z", [b"a"], timeout_ms=10_000)
        assert code_of(await asyncio.wait_for(pending, 5)) == handlers.errors.NotEnoughReplicasAfterAppendError.errno
        state = topics.partition_state(zk, "z", 0)
        assert (state.leader, state.isr, state.leader_epoch) == (me, (me,), 0)  # the leader's version-checked write
        assert code_of(produce(zk_state, "z", [b"b"])) == handlers.NOT_ENOUGH_REPLICAS
        fetch(zk_state, "z", 1, replica_id=others[0], current_leader_epoch=0)  # caught up: rejoins
        for _ in range(600):  # 30 s for the ISR's ZooKeeper write on a loaded machine
            await asyncio.sleep(0.05)
            if topics.partition_state(zk, "z", 0).isr == tuple(sorted((me, others[0]))):
                break
        assert topics.partition_state(zk, "z", 0).isr == tuple(sorted((me, others[0])))
        await zk_state.replicas.close()

    asyncio.run(scenario())


def test_a_zombie_leader_never_acknowledges_acks_all(zk, zk_state):
    """Its state moved on (a new leader, a new epoch) without it noticing: the ISR shrink it needs is a
    version-checked write that fails, so it fences itself and answers NOT_LEADER_OR_FOLLOWER."""
    from sparklog.coordination import topics

    me = zk_state.broker_id
    others = [b for b in (1, 2, 3) if b != me]
    old = topics.partition_state(zk, "z", 0)
    moved = topics.set_partition_state(zk, "z", 0, topics.PartitionState(others[0], tuple(others), 1, 1),
                                       expected_version=old.zk_version)

    async def scenario():
        zk_state.replicas.start(asyncio.get_running_loop())
        pending = produce(zk_state, "z", [b"zombie"], timeout_ms=10_000)
        assert code_of(await asyncio.wait_for(pending, 5)) == handlers.NOT_LEADER_OR_FOLLOWER
        assert code_of(produce(zk_state, "z", [b"again"])) == handlers.NOT_LEADER_OR_FOLLOWER
        assert zk_state.replicas.statistics().fencings == 1
        await zk_state.replicas.close()

    asyncio.run(scenario())
    assert topics.partition_state(zk, "z", 0) == moved  # the controller's state stands
    assert latest(zk_state, "z")[0] == handlers.NOT_LEADER_OR_FOLLOWER  # fenced: serves nothing
    assert zk_state.logs.get("z", 0).high_watermark == 0  # nothing of the zombie's became visible


def test_while_zookeeper_is_away_the_leader_serves_and_the_isr_change_waits(zk_connect, zk_state):
    """The broker's own session is gone (its client stopped): the shrink cannot be written, so acks=all waits
    (and times out) instead of being acknowledged by a leader alone, while acks=1 goes on."""
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    away = connect(zk_connect)
    close(away)
    zk_state.replicas.zk = away
    before = topics.partition_state(zk_state.zk, "z", 0)

    async def scenario():
        zk_state.replicas.start(asyncio.get_running_loop())
        response = await produce(zk_state, "z", [b"waits"], timeout_ms=4 * LAG_MS)
        assert code_of(response) == handlers.REQUEST_TIMED_OUT
        assert code_of(produce(zk_state, "z", [b"served"], acks=1)) == 0
        assert zk_state.replicas.statistics().isr_writes == 0
        await zk_state.replicas.close()

    asyncio.run(scenario())
    assert topics.partition_state(zk_state.zk, "z", 0) == before
    assert zk_state.logs.get("z", 0).log_end_offset == 2


def fence_middle_batch(plog):
    """Three one-batch segments, the middle one's record bytes flipped and found by a scrub: (start, end)."""
    for value in (b"before", b"damaged", b"after"):
        plog.roll()
        plog.append(build_batch([(None, value, None, None)]))
    plog.roll()
    plog.flush()
    middle = plog.segments[-3]
    with open(middle.path, "r+b") as f:
        f.seek(middle.size - 3)
        byte = f.read(1)[0]
        f.seek(middle.size - 3)
        f.write(bytes([byte ^ 0x20]))
    plog.scrub()
    assert plog.fenced_ranges() == ((middle.base_offset, middle.base_offset + 1),)
    return middle.base_offset


def test_a_fetch_into_a_fence_goes_to_an_in_sync_replica_that_holds_it_whole(state, logs):
    """Handlers Rule 4: with another ISR member, stepping over the fence would be a gap it need not be."""
    fenced = fence_middle_batch(logs.get("three", 0))
    for replica_id in (-1, OTHER):  # a consumer and a follower alike
        assert fetch(state, "three", fenced, replica_id=replica_id).error_code == handlers.NOT_LEADER_OR_FOLLOWER
    assert fetch(state, "three", fenced + 1, replica_id=OTHER).error_code == 0  # past it: served


def test_a_leader_alone_in_its_isr_serves_around_its_fence(state, logs):
    fenced = fence_middle_batch(logs.get("one", 0))
    part = fetch(state, "one", fenced, replica_id=-1)
    assert part.error_code == 0
    assert [b.base_offset for b in iter_batches(part.records.read_bytes())] == [fenced + 1]


def test_a_replica_a_reassignment_adds_in_the_same_leader_epoch_becomes_a_follower_of_the_leader(state, logs):
    """A reassignment's STARTED step writes the new replicas and keeps the leader and its epoch: the leader
    must track the new replica (it reads past the HW, its fetches count for the ISR), or the move never
    completes (it never joins the ISR). Likewise a replica dropped leaves the followers."""
    async def scenario():
        produce(state, "one", [b"a", b"b"], acks=1)
        snapshot = state.partitions.snapshot
        topics = dict(snapshot.topics)
        topics["one"] = TopicMeta("one", {0: PartitionMeta(0, ME, EPOCH, (OTHER, ME), (ME,))})
        state.partitions.snapshot = MetadataSnapshot(topics, snapshot.brokers, snapshot.leading)
        state.replicas.apply(state.partitions.snapshot)
        led = state.replicas.leader_of(state.partitions.snapshot, ("one", 0))
        assert set(led.state.followers) == {OTHER}
        assert fetch(state, "one", 0, replica_id=OTHER, current_leader_epoch=EPOCH).records.length > 0
        fetch(state, "one", 2, replica_id=OTHER, current_leader_epoch=EPOCH)
        assert led.state.to_expand(2) == {OTHER}
        topics["one"] = TopicMeta("one", {0: PartitionMeta(0, ME, EPOCH, (ME,), (ME,))})
        state.partitions.snapshot = MetadataSnapshot(topics, snapshot.brokers, snapshot.leading)
        state.replicas.apply(state.partitions.snapshot)
        assert not state.replicas.leader_of(state.partitions.snapshot, ("one", 0)).state.followers
        await state.replicas.close()

    asyncio.run(scenario())
