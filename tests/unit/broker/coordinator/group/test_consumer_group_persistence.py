"""KIP-848 groups in `__consumer_offsets` (consumer_coordinator Rule 5, offset_store "Consumer groups"), over a real
compacted partition log, the real replica manager and purgatory: every change is appended before the heartbeat
is answered; a new coordinator (a new store loading the same log, compacted or not) rebuilds the group, whose
members carry on with their epochs and partitions; members gone and an emptied group leave tombstones only;
the offsets committed beside the records load as before."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.broker.coordinator.group.consumer_group import HeartbeatRequest
from sparklog.broker.coordinator.group import offset_store
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination import offsets as offset_registry
from sparklog.coordination import topic_ids
from sparklog.protocol import consumer_group_records as cgr
from sparklog.records.batch import iter_records, next_fetch_offset
from sparklog.storage import LogManager
from sparklog.storage.cleaner import Cleaner
from sparklog.storage.files import OS_FILES
from sparklog.storage.offset_map import OffsetMap
from support.offset_store_harness import OTHER, Partitions, loaded, new_store

NEVER = str(10**12)
PARTITIONS = 4
TOPICS = {"a": PARTITIONS}
OM = offset_registry.OffsetAndMetadata


@pytest.fixture
def manager(tmp_path):
    manager = LogManager([str(tmp_path / "logs")], {"flush.ms": NEVER, "min.compaction.lag.ms": "0"})
    yield manager
    manager.close()


def cluster(plog) -> Partitions:
    """This broker leads the offsets partition; topic `a` (4 partitions, with an id) is led elsewhere."""
    partitions = Partitions()
    partitions.lead(plog)
    snapshot = partitions.snapshot
    topic = TopicMeta("a", {i: PartitionMeta(i, OTHER, 0, (OTHER,), (OTHER,)) for i in range(PARTITIONS)}, {}, {},
                      topic_ids.new_topic_id())
    partitions.snapshot = MetadataSnapshot({**snapshot.topics, "a": topic}, snapshot.brokers, snapshot.leading)
    return partitions


async def beat(store, member_id: str, epoch: int, owned=None, **fields):
    """One heartbeat as the handler makes it: the change, then its write awaited."""
    groups = store.groups.consumer_groups
    result = groups.heartbeat("g", HeartbeatRequest(member_id, epoch, owned=owned, rebalance_timeout_ms=5000,
                                                    **fields), TOPICS)
    write = groups.write_changes("g")
    code = await write if write is not None else 0
    assert code == 0 and result.error == 0, (code, result)
    return result


async def settle(store, *member_ids):
    """Heartbeats until every member owns what it was last told (a few rounds)."""
    owned = {m: frozenset() for m in member_ids}
    epochs = dict.fromkeys(member_ids, 0)
    for _ in range(4):
        for m in member_ids:
            fields = {"subscribed_topic_names": ("a",)} if epochs[m] == 0 else {}
            result = await beat(store, m, epochs[m], owned[m], **fields)
            epochs[m] = result.member_epoch
            owned[m] = result.assignment if result.assignment is not None else owned[m]
    return epochs, owned


def group_records(plog) -> list:
    """(key, value) of every consumer group record in the log, in order (every segment)."""
    found, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read_replica(offset, 1 << 20).read_bytes()
        found += [(cgr.decode_key(r.key), r.value) for r in iter_records(data) if r.offset >= offset]
        offset = next_fetch_offset(data, offset)
    return [(k, v) for k, v in found if k is not None]


@pytest.mark.parametrize("compacted", [False, True])
def test_a_new_coordinator_rebuilds_the_group_and_its_members_carry_on(manager, compacted):
    plog = manager.get_or_create(OFFSETS_TOPIC, 0, {"cleanup.policy": "compact"})
    partitions = cluster(plog)

    async def scenario():
        store = await loaded(new_store(partitions))
        epochs, owned = await settle(store, "x", "y", "z")
        await beat(store, "z", -1, owned["z"])  # z leaves: its records are tombstoned
        epochs, owned = await settle_again(store, epochs, owned)
        assert await store.commit("g", {("a", 0): OM(5, "m")}) == {("a", 0): 0}
        before = store.groups.consumer_groups.describe("g")
        assert plog.high_watermark == plog.log_end_offset  # every record acknowledged was replicated first
        if compacted:
            plog.roll()
            plog.flush()
            Cleaner(OffsetMap(64 * 1024), OS_FILES).clean(plog)
        again = await loaded(new_store(partitions))  # the next coordinator
        rebuilt = again.groups.consumer_groups.describe("g")
        assert rebuilt is not None and set(rebuilt.members) == {"x", "y"}
        assert (rebuilt.group_epoch, rebuilt.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        for m in ("x", "y"):
            assert (rebuilt.members[m].epoch, rebuilt.members[m].assigned) == (epochs[m], owned[m])
            result = await beat(again, m, epochs[m], owned[m])  # carries on: same epoch, same partitions
            assert (result.member_epoch, result.assignment) == (epochs[m], owned[m])
        assert await again.fetch("g", None) == {("a", 0): OM(5, "m")}
        for m in ("x", "y"):
            await beat(again, m, -1, owned[m])
        assert again.groups.consumer_groups.describe("g") is None
        last = await loaded(new_store(partitions))
        assert last.groups.consumer_groups.describe("g") is None  # only tombstones were left
        await asyncio.gather(store.close(), again.close(), last.close())

    async def settle_again(store, epochs, owned):
        for _ in range(3):
            for m in ("x", "y"):
                result = await beat(store, m, epochs[m], owned[m])
                epochs[m] = result.member_epoch
                owned[m] = result.assignment if result.assignment is not None else owned[m]
        assert owned["x"] | owned["y"] == {("a", i) for i in range(PARTITIONS)}
        return epochs, owned

    asyncio.run(scenario())
    last_of_each = {}
    for key, value in group_records(plog):
        last_of_each[key] = value
    assert last_of_each and all(v is None for v in last_of_each.values())  # the group is gone: tombstones


def test_a_write_that_fails_answers_its_error_and_is_written_again(manager):
    """The offsets partition moves away before the write: NOT_COORDINATOR; back here, the next change writes
    every key the failed write touched."""
    plog = manager.get_or_create(OFFSETS_TOPIC, 0, {"cleanup.policy": "compact"})
    partitions = cluster(plog)

    async def scenario():
        store = await loaded(new_store(partitions))
        groups = store.groups.consumer_groups
        groups.heartbeat("g", HeartbeatRequest("x", 0, subscribed_topic_names=("a",), owned=frozenset()), TOPICS)
        write = groups.write_changes("g")
        snapshot = partitions.snapshot
        partitions.lose()
        assert await write == offset_store.NOT_COORDINATOR
        assert group_records(plog) == []
        partitions.snapshot = snapshot
        groups.heartbeat("g", HeartbeatRequest("y", 0, subscribed_topic_names=("a",), owned=frozenset()), TOPICS)
        assert await groups.write_changes("g") == 0
        assert {k.member_id for k, _ in group_records(plog)} == {"x", "y", None}
        await store.close()

    asyncio.run(scenario())
