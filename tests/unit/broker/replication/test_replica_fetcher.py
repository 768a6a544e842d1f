"""truncation_point (KIP-101, KIP-279) on the cases the KIPs describe, and against a model of two logs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker.replication.replica_fetcher import truncation_point
from sparklog.storage.files import OS_FILES
from sparklog.storage.leader_epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEndOffset, LeaderEpochCache


def cache_of(tmp_path, name, epochs):
    """A cache for a log whose offset i was written in epochs[i]."""
    cache = LeaderEpochCache(str(tmp_path / name), OS_FILES)
    (tmp_path / name).mkdir(exist_ok=True)
    for offset, epoch in enumerate(epochs):
        if epoch > cache.latest_epoch:
            cache.assign(epoch, offset)
    return cache


def converge(tmp_path, leader_epochs, follower_epochs, follower_hw=0, leader_epoch=None):
    """Run the follower's truncation loop against the leader (which assigned `leader_epoch` at its LEO on
    becoming leader, as replica_manager does); return where the follower's log ends."""
    leader = cache_of(tmp_path, "leader", leader_epochs)
    if leader_epoch is not None:
        leader.assign(leader_epoch, len(leader_epochs))
    follower_log = list(follower_epochs)
    for _ in range(20):
        follower = cache_of(tmp_path, f"f{len(follower_log)}", follower_log)
        answer = leader.end_offset_for(follower.latest_epoch, len(leader_epochs))
        offset, finished = truncation_point(answer, follower, len(follower_log), min(follower_hw, len(follower_log)))
        follower_log = follower_log[:offset]
        if finished:
            return len(follower_log)
    raise AssertionError("did not finish")


def test_kip101_leader_died_before_the_followers_fetched(tmp_path):
    # old leader wrote 0..9 in epoch 0, of which followers had 0..7; the new leader wrote 8.. in epoch 1
    assert converge(tmp_path, [0] * 8 + [1] * 5, [0] * 10) == 8


def test_kip279_follower_missing_an_epoch_asks_again(tmp_path):
    # follower: epoch 0 to 10, then epoch 2; leader: epoch 0 to 8, epoch 1 to 12, epoch 3
    assert converge(tmp_path, [0] * 8 + [1] * 4 + [3] * 3, [0] * 10 + [2] * 3) == 8


def test_without_epochs_the_follower_falls_back_to_its_high_watermark(tmp_path):
    follower = cache_of(tmp_path, "f", [])
    answer = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert truncation_point(answer, follower, 10, 6) == (6, True)


@settings(max_examples=200, deadline=None)
@given(common=st.lists(st.integers(0, 2), max_size=8),
       leader_tail=st.lists(st.integers(0, 2), max_size=6), follower_tail=st.lists(st.integers(0, 2), max_size=6),
       bump=st.integers(1, 3))
def test_truncates_to_exactly_the_common_prefix(tmp_path_factory, common, leader_tail, follower_tail, bump):
    """Two logs sharing `common`, then diverging in epochs only their own leader used (as elections make
    them): the follower keeps exactly the longest prefix on which both agree."""
    common = sorted(common)
    top = common[-1] if common else 0
    follower = common + [top + bump] * len(follower_tail)  # epoch of a leader that lost its tail
    leader = common + [top + bump + 1 + e for e in sorted(leader_tail)]
    agreed = next((i for i, (a, b) in enumerate(zip(leader, follower)) if a != b), min(len(leader), len(follower)))
    assert converge(tmp_path_factory.mktemp("c"), leader, follower, leader_epoch=top + bump + 4) == agreed


def test_the_fetchers_stop_when_closed_right_after_their_partitions_are_taken_away():
    """A controlled shutdown's close(): set_partitions({}) wakes a fetcher's timed wait and stop() cancels it
    in the same loop turn. Python 3.11's wait_for returns the finished wait and drops that cancel; the
    fetcher must stop anyway (the broker hung on SIGTERM until it was SIGKILLed)."""
    import asyncio
    import time

    from sparklog.broker.replication.replica_fetcher import FollowTarget, ReplicaFetcherManager
    from sparklog.coordination.brokers import BrokerInfo

    async def scenario():
        manager = ReplicaFetcherManager(2)
        await manager.update({("t", 0): FollowTarget(None, 1, 0)}, {1: BrokerInfo(1, "127.0.0.1", 9)})
        manager.fetchers[1].partitions[("t", 0)].retry_at = time.monotonic() + 60  # backing off: a timed wait
        await asyncio.sleep(0.05)
        closing = asyncio.ensure_future(manager.close())
        done, _ = await asyncio.wait({closing}, timeout=2)
        assert done, "the fetcher did not stop"

    asyncio.run(scenario())


def test_stop_ends_the_fetcher_even_when_its_cancellation_is_swallowed():
    """Python 3.11's asyncio.wait_for can lose a cancellation that arrives as the awaited call completes
    (gh-86296); a broker's shutdown then waited forever for its replica fetcher. Simulated here by a wake-up
    wait that returns normally when cancelled, as wait_for then does."""
    import asyncio

    from sparklog.broker.replication.replica_fetcher import ReplicaFetcher

    async def scenario():
        fetcher = ReplicaFetcher(broker_id=1, leader_id=2)
        real_wait, swallowed = fetcher._wake.wait, []

        async def wait_losing_one_cancel():
            try:
                return await real_wait()
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(True)
                return True

        fetcher._wake.wait = wait_losing_one_cancel
        fetcher.start()
        await asyncio.sleep(0.01)  # idle: no partitions, waiting to be woken
        stopping = asyncio.ensure_future(fetcher.stop())
        done, _ = await asyncio.wait({stopping}, timeout=2)
        if not done:  # the old fetcher: a second cancellation ends it, so the test ends too
            fetcher._task.cancel()
            await stopping
        assert swallowed and done and fetcher._task.done()

    asyncio.run(scenario())
