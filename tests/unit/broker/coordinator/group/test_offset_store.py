"""The `__consumer_offsets` store over a real partition log, a real replica manager and purgatory (acks=all),
a hand-made metadata snapshot and an injected clock: commits, the cache rebuilt from the log, load and
unload, expiry, the ZooKeeper fallback, and the errors Kafka's coordinator gives."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sparklog.broker import handlers
from sparklog.broker.coordinator.group import offset_store
from sparklog.broker.config import BrokerConfig
from sparklog.broker.coordinator.group.group import JoinRequest
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC
from sparklog.coordination import offsets as offset_registry
from sparklog.protocol import consumer_offsets, errors
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.headers import RequestHeader
from sparklog.protocol.offset_fetch import OffsetFetchRequest
from sparklog.protocol.registry import Request
from sparklog.records.batch import iter_records
from sparklog.storage import LogManager
from support.offset_store_harness import ME, OTHER, RETENTION_MIN, THIRD, Clock, Partitions, loaded, new_store

NEVER = str(10**12)
TP = ("t", 0)
OM = offset_registry.OffsetAndMetadata


@pytest.fixture
def plog(tmp_path):
    manager = LogManager([str(tmp_path / "logs")], {"flush.ms": NEVER})
    yield manager.get_or_create(OFFSETS_TOPIC, 0, {"cleanup.policy": "compact"})
    manager.close()


def test_a_commit_is_acknowledged_once_visible_and_the_cache_is_rebuilt_from_the_log(plog):
    partitions = Partitions()
    partitions.lead(plog)

    async def scenario():
        store = await loaded(new_store(partitions))
        assert await store.commit("g", {TP: OM(5, "a"), ("t", 1): OM(9, "")}) == {TP: 0, ("t", 1): 0}
        assert plog.high_watermark == plog.log_end_offset == 2  # acks=all: durable before acknowledged
        assert await store.commit("g", {TP: OM(7, "b")}) == {TP: 0}
        assert await store.fetch("g", [TP, ("t", 5)]) == {TP: OM(7, "b")}
        again = await loaded(new_store(partitions))  # a new coordinator: everything from the log
        assert await again.fetch("g", None) == {TP: OM(7, "b"), ("t", 1): OM(9, "")}

    asyncio.run(scenario())
    records = [(consumer_offsets.decode_key(r.key), consumer_offsets.decode_value(r.value).offset)
               for r in iter_records(plog.read(0, 1 << 20).read_bytes())]
    assert records[-1] == (consumer_offsets.CommitKey("g", "t", 0), 7)  # Kafka's record format


def test_requests_during_a_load_get_coordinator_load_in_progress(plog, monkeypatch):
    partitions = Partitions()
    partitions.lead(plog)
    release = threading.Event()
    real_read = offset_store.read_offsets
    monkeypatch.setattr(offset_store, "read_offsets", lambda *a: release.wait(10) and real_read(*a))
    config = BrokerConfig.from_properties({"broker.id": str(ME), "log.dirs": "/unused", "zookeeper.connect": "x:1"})
    fetch = OffsetFetchRequest(group_id="g", topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
        name="t", partition_indexes=[0])])

    async def raw_fetch(state, version):
        result = handlers.HANDLERS[ApiKey.OFFSET_FETCH](Request(RequestHeader(9, version, 1, "c"), fetch), state)
        return await result if asyncio.iscoroutine(result) else result

    async def scenario():
        store = new_store(partitions)
        state = handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=None,
                                           partitions=partitions, replicas=store.replicas, groups=store.groups,
                                           offsets=store)
        store.on_snapshot(partitions.snapshot)
        loading = errors.CoordinatorLoadInProgressError.errno
        response = await raw_fetch(state, 5)
        assert response.error_code == loading
        assert (await raw_fetch(state, 1)).topics[0].partitions[0].error_code == loading  # v1: per partition
        assert await store.commit("g", {TP: OM(1, "")}) == {TP: loading}
        release.set()
        await loaded(store)
        response = await raw_fetch(state, 5)
        assert response.error_code == 0 and response.topics[0].partitions[0].committed_offset == -1

    asyncio.run(scenario())


def test_a_partition_led_before_its_load_starts_is_loading_not_another_coordinator(plog):
    """The snapshot naming this broker leader is published from ZooKeeper's thread and the load starts when
    `on_snapshot` runs on the loop, later (the broker's listener): in between, a client this broker's own
    FindCoordinator sent here got NOT_COORDINATOR, which librdkafka's committed() does not retry (a fresh
    clone's test_offsets_topic failed so after every broker restarted). Kafka answers a partition it leads and
    has not loaded COORDINATOR_LOAD_IN_PROGRESS, which clients retry."""
    partitions = Partitions()
    partitions.lead(plog)

    async def scenario():
        store = new_store(partitions)  # the snapshot leads the partition; on_snapshot has not run yet
        loading = offset_store.COORDINATOR_LOAD_IN_PROGRESS
        assert store.status("g") == loading
        assert await store.commit("g", {TP: OM(1, "")}) == {TP: loading}
        with pytest.raises(offset_store.OffsetStoreError) as refused:
            await store.fetch("g", [TP])
        assert refused.value.code == loading
        await loaded(store)
        assert await store.fetch("g", [TP]) == {}
        partitions.lose()
        assert store.status("g") == offset_store.NOT_COORDINATOR  # led elsewhere: not loading here

    asyncio.run(scenario())


def test_losing_leadership_drops_the_cache_and_closes_the_partitions_groups(plog):
    partitions = Partitions()
    partitions.lead(plog)
    join = JoinRequest(member_id="", instance_id=None, client_id="c", client_host="", session_timeout_ms=10000,
                       rebalance_timeout_ms=10000, protocol_type="consumer", protocols=(("range", b""),),
                       api_version=3)

    async def scenario():
        store = await loaded(new_store(partitions))
        await store.commit("g", {TP: OM(3, "")})
        waiting = asyncio.ensure_future(store.groups.join("g", join))  # the initial rebalance delay holds it
        await asyncio.sleep(0.05)
        assert not waiting.done()
        partitions.lose()
        store.on_snapshot(partitions.snapshot)
        assert (await waiting).error == errors.NotCoordinatorError.errno
        assert store.status("g") == errors.NotCoordinatorError.errno and "g" not in store.groups.groups
        with pytest.raises(offset_store.OffsetStoreError) as raised:
            await store.fetch("g", [TP])
        assert raised.value.code == errors.NotCoordinatorError.errno

    asyncio.run(scenario())


def test_too_few_in_sync_replicas_refuse_the_commit_before_appending(plog):
    partitions = Partitions()
    partitions.lead(plog, replicas=(ME, OTHER, THIRD), isr=(ME,), min_insync=2)

    async def scenario():
        store = await loaded(new_store(partitions))
        assert await store.commit("g", {TP: OM(3, "")}) == {TP: errors.CoordinatorNotAvailableError.errno}
        assert plog.log_end_offset == 0

    asyncio.run(scenario())


def test_a_commit_not_replicated_in_time_fails_and_is_not_cached(plog):
    partitions = Partitions()
    partitions.lead(plog, replicas=(ME, OTHER), isr=(ME, OTHER))  # the follower never fetches

    async def scenario():
        store = await loaded(new_store(partitions))
        assert await store.commit("g", {TP: OM(3, "")}) == {TP: errors.CoordinatorNotAvailableError.errno}
        assert plog.log_end_offset == 1 and plog.high_watermark == 0
        assert await store.fetch("g", [TP]) == {}
        assert store.statistics().failed_commits == 1

    asyncio.run(scenario())


def test_offsets_of_an_empty_group_expire_by_tombstones(plog):
    partitions = Partitions()
    partitions.lead(plog)
    clock = Clock()

    async def scenario():
        store = await loaded(new_store(partitions, clock))
        await store.commit("g", {TP: OM(3, "")})
        await store.commit("busy", {TP: OM(4, "")})
        store.groups.has_members = lambda group: group == "busy"
        assert await store.expire() == 0  # the check that finds "g" empty starts its clock
        clock.now += RETENTION_MIN * 60_000 - 1
        assert await store.expire() == 0
        clock.now += 1
        assert await store.expire() == 1
        assert await store.fetch("g", [TP]) == {} and await store.fetch("busy", [TP]) == {TP: OM(4, "")}
        again = await loaded(new_store(partitions, clock))
        assert await again.fetch("g", None) == {}  # the tombstone is in the log

    asyncio.run(scenario())
    assert [r.value for r in iter_records(plog.read(0, 1 << 20).read_bytes())][-1] is None


def test_delete_writes_tombstones(plog):
    partitions = Partitions()
    partitions.lead(plog)

    async def scenario():
        store = await loaded(new_store(partitions))
        assert await store.delete("g") is False
        await store.commit("g", {TP: OM(3, ""), ("t", 1): OM(4, "")})
        assert await store.delete("g") is True
        assert await store.fetch("g", None) == {}
        assert plog.log_end_offset == 4

    asyncio.run(scenario())


def test_delete_offsets_tombstones_the_named_partitions_only_and_survives_a_reload(plog):
    partitions = Partitions()
    partitions.lead(plog)

    async def scenario():
        store = await loaded(new_store(partitions))
        await store.commit("g", {TP: OM(3, ""), ("t", 1): OM(4, ""), ("u", 0): OM(5, "")})
        end = plog.log_end_offset
        assert await store.delete_offsets("g", [TP, ("u", 0), ("t", 7)]) == 0  # t-7: never committed, no record
        assert plog.log_end_offset == end + 2
        assert await store.fetch("g", None) == {("t", 1): OM(4, "")}
        assert await store.delete_offsets("g", [TP]) == 0 and plog.log_end_offset == end + 2  # nothing to write
        again = await loaded(new_store(partitions))
        assert await again.fetch("g", None) == {("t", 1): OM(4, "")}

    asyncio.run(scenario())


def test_delete_offsets_hides_an_offset_only_zookeeper_holds_for_good(plog, zk):
    """The migration's fallback reads ZooKeeper for keys the topic never saw: OffsetDelete's tombstone is a
    record of the key, so the ZooKeeper offset does not come back."""
    partitions = Partitions()
    partitions.lead(plog)
    offset_registry.commit_offsets(zk, "legacy", {TP: OM(12, "zk"), ("t", 1): OM(13, "zk")})

    async def scenario():
        store = await loaded(new_store(partitions, zk=zk))
        assert await store.fetch("legacy", [TP, ("t", 1)]) == {TP: OM(12, "zk"), ("t", 1): OM(13, "zk")}
        assert await store.delete_offsets("legacy", [TP]) == 0
        assert await store.fetch("legacy", [TP, ("t", 1)]) == {("t", 1): OM(13, "zk")}

    asyncio.run(scenario())


def test_offsets_of_a_topic_seen_and_then_gone_are_tombstoned_but_a_topic_never_seen_keeps_its_own(plog):
    """A start's first snapshots lack topics (not read yet): only a topic observed and then missing is deleted."""
    partitions = Partitions()
    partitions.lead(plog)

    async def scenario():
        store = await loaded(new_store(partitions))  # observed: no topics but the offsets topic
        await store.commit("g", {("t", 0): OM(3, ""), ("u", 0): OM(4, "")})
        await store.commit("h", {("t", 0): OM(5, "")})
        partitions.topics(t="A", u="B")
        store.on_snapshot(partitions.snapshot)
        assert await store.fetch("g", None) == {("t", 0): OM(3, ""), ("u", 0): OM(4, "")}  # nothing deleted
        partitions.topics(u="B")  # t deleted
        store.on_snapshot(partitions.snapshot)
        assert await store.fetch("g", None) == {("u", 0): OM(4, "")} and await store.fetch("h", None) == {}
        assert store.statistics().deleted_topic_offsets == 2
        again = await loaded(new_store(partitions))  # a restart: the tombstones are in the log
        assert await again.fetch("g", None) == {("u", 0): OM(4, "")} and await again.fetch("h", None) == {}

    asyncio.run(scenario())


def test_a_topic_deleted_and_recreated_between_two_snapshots_loses_its_old_offsets_not_its_new_ones(plog):
    """A new topic id under the same name is a deletion; a commit that sees the new life before the snapshot
    listener has run still follows the old life's tombstones (the store looks at the newest snapshot first)."""
    partitions = Partitions()
    partitions.lead(plog)

    async def scenario():
        store = await loaded(new_store(partitions))
        partitions.topics(t="A")
        store.on_snapshot(partitions.snapshot)
        await store.commit("g", {TP: OM(30, "old"), ("t", 1): OM(31, "old")})
        partitions.topics(t="B")  # re-created; the listener has not run yet
        assert await store.commit("g", {TP: OM(1, "new")}) == {TP: 0}
        store.on_snapshot(partitions.snapshot)
        assert await store.fetch("g", None) == {TP: OM(1, "new")}
        partitions.topics(t=None)  # noted by a create here before its id was read: a new life again
        store.on_snapshot(partitions.snapshot)
        assert await store.fetch("g", None) == {}
        await store.commit("g", {TP: OM(2, "newer")})
        partitions.topics(t="C")  # its id read: the same life, nothing deleted
        store.on_snapshot(partitions.snapshot)
        assert await (await loaded(new_store(partitions))).fetch("g", None) == {TP: OM(2, "newer")}

    asyncio.run(scenario())


def test_a_partition_loading_when_its_topic_is_deleted_drops_the_offsets_once_loaded(plog, monkeypatch):
    partitions = Partitions()
    partitions.lead(plog)
    partitions.topics(t="A")

    async def scenario():
        first = await loaded(new_store(partitions))
        await first.commit("g", {TP: OM(3, "")})
        release = threading.Event()
        real_read = offset_store.read_offsets
        monkeypatch.setattr(offset_store, "read_offsets", lambda *a: release.wait(10) and real_read(*a))
        store = new_store(partitions)
        store.on_snapshot(partitions.snapshot)  # loading
        partitions.topics()
        store.on_snapshot(partitions.snapshot)
        release.set()
        await loaded(store)
        assert await store.fetch("g", None) == {}
        assert await (await loaded(new_store(partitions))).fetch("g", None) == {}

    asyncio.run(scenario())


def test_offsets_of_a_deleted_topic_are_dropped_even_when_their_tombstones_cannot_be_appended(plog):
    partitions = Partitions()
    partitions.lead(plog)
    partitions.topics(t="A")

    async def scenario():
        store = await loaded(new_store(partitions))
        await store.commit("g", {TP: OM(3, "")})
        plog.close()  # every append now fails
        partitions.topics()
        store.on_snapshot(partitions.snapshot)
        assert await store.fetch("g", None) == {}

    asyncio.run(scenario())


def test_offsets_committed_to_zookeeper_before_the_topic_are_still_found(plog, zk):
    """The upgrade path: ZooKeeper is read for keys the topic never saw, never for one it holds or deleted."""
    partitions = Partitions()
    partitions.lead(plog)
    offset_registry.commit_offsets(zk, "old", {TP: OM(12, "zk"), ("t", 1): OM(13, "zk"), ("t", 2): OM(14, "zk")})

    async def scenario():
        store = await loaded(new_store(partitions, zk=zk))
        assert await store.fetch("old", [TP, ("t", 9)]) == {TP: OM(12, "zk")}
        await store.commit("old", {TP: OM(20, "topic"), ("t", 2): OM(21, "")})
        store._caches[0].apply("old", ("t", 2), offset_store.Committed(None, "", 0, 99))  # as expiry would
        assert await store.fetch("old", None) == {TP: OM(20, "topic"), ("t", 1): OM(13, "zk")}
        assert await store.delete("old") is True  # the ZooKeeper offsets go too
        assert await store.fetch("old", [("t", 1)]) == {}

    asyncio.run(scenario())


def test_loading_skips_records_of_other_types_and_ones_that_do_not_decode(plog, caplog):
    import struct

    from sparklog.records.batch import build_batch

    key = consumer_offsets.encode_key(consumer_offsets.CommitKey("g", "t", 0))
    value = consumer_offsets.encode_value(consumer_offsets.CommitValue(8, "", 1))
    group_metadata = (struct.pack(">hh", 2, 1) + b"g", b"\x00\x03whatever", None, None)
    garbage = (key, b"\x00\x03\x00", None, None)  # a v3 value cut short
    plog.append(build_batch([group_metadata, (key, value, None, None), garbage]))
    plog.flush()
    partitions = Partitions()
    partitions.lead(plog)

    async def scenario():
        store = await loaded(new_store(partitions))
        assert await store.fetch("g", [TP]) == {TP: OM(8, "")}

    asyncio.run(scenario())
    assert any("offset 2 skipped" in r.getMessage() for r in caplog.records)
