"""Consumer and ownership registries and fenced commits, against a real ZooKeeper."""

from __future__ import annotations

import pytest

from sparklog.client import group_registry as reg
from sparklog.coordination import offsets, paths
from sparklog.coordination.connection import close, connect
from sparklog.coordination.offsets import CommitFenced, OffsetAndMetadata, commit_offsets, fetch_offsets


@pytest.fixture
def other(request, zk_connect):
    """A second client (another consumer process) on the same chroot."""
    client = connect(zk_connect)
    request.addfinalizer(lambda: close(client))
    return client


def test_register_lists_subscriptions_and_is_idempotent(zk):
    reg.register_consumer(zk, "g", "c1", {"t": 2})
    reg.register_consumer(zk, "g", "c1", {"t": 2})  # a retry after a lost connection
    reg.register_consumer(zk, "g", "c2", {"t": 1, "u": 1})
    assert reg.list_consumers(zk, "g") == {"c1": {"t": 2}, "c2": {"t": 1, "u": 1}}
    assert zk.exists(paths.consumer("g", "c1")).ephemeralOwner == zk.client_id[0]
    reg.unregister_consumer(zk, "g", "c1")
    assert list(reg.list_consumers(zk, "g")) == ["c2"]


def test_a_consumer_id_held_by_another_session_is_refused(zk, other):
    reg.register_consumer(zk, "g", "c1", {"t": 1})
    with pytest.raises(reg.ConsumerIdInUse):
        reg.register_consumer(other, "g", "c1", {"t": 1})
    reg.unregister_consumer(other, "g", "c1")  # not ours: left alone
    assert reg.list_consumers(zk, "g") == {"c1": {"t": 1}}


def test_registration_vanishes_with_the_session(zk, other):
    reg.register_consumer(other, "g", "c2", {"t": 1})
    close(other)
    assert reg.list_consumers(zk, "g") == {}


def test_claim_creates_the_owner_and_a_none_committed_offset(zk):
    claim = reg.claim(zk, "g", "c1", "t", 3)
    assert claim.committed is None and claim.owner_version == 0 and claim.offset_version == 0
    assert reg.get_owner(zk, "g", "t", 3) == "c1"
    assert reg.list_owners(zk, "g") == {("t", 3): "c1"}
    assert fetch_offsets(zk, "g", [("t", 3)]) == {("t", 3): OffsetAndMetadata(-1)}


def test_a_second_claim_conflicts_until_the_owner_releases(zk, other):
    first = reg.claim(zk, "g", "c1", "t", 0)
    with pytest.raises(reg.OwnershipConflict) as info:
        reg.claim(other, "g", "c2", "t", 0)
    assert info.value.owner == "c1"
    reg.release(other, "g", [first])  # not other's node: nothing happens
    assert reg.get_owner(zk, "g", "t", 0) == "c1"
    reg.release(zk, "g", [first])
    assert reg.get_owner(zk, "g", "t", 0) is None
    assert reg.claim(other, "g", "c2", "t", 0).committed is None


def test_claiming_again_in_the_same_session_is_idempotent(zk):
    reg.claim(zk, "g", "c1", "t", 0)
    again = reg.claim(zk, "g", "c1", "t", 0)
    assert reg.get_owner(zk, "g", "t", 0) == "c1" and again.offset_version == 0


def test_commits_advance_and_a_new_claim_reads_the_committed_offset(zk, other):
    claim = reg.claim(zk, "g", "c1", "t", 0)
    reg.commit_offset(zk, "g", claim, 10)
    reg.commit_offset(zk, "g", claim, 25, "meta")
    assert fetch_offsets(zk, "g", [("t", 0)])[("t", 0)] == OffsetAndMetadata(25, "meta")
    reg.release(zk, "g", [claim])
    assert reg.claim(other, "g", "c2", "t", 0).committed == 25


def test_a_consumer_whose_session_expired_cannot_overwrite_the_new_owners_offsets(zk_connect, other):
    stale = connect(zk_connect)
    try:
        old_claim = reg.claim(stale, "g", "c1", "t", 0)
        reg.commit_offset(stale, "g", old_claim, 5)
    finally:
        close(stale)  # the session ends: the owner node goes with it
    new_claim = reg.claim(other, "g", "c2", "t", 0)
    reg.commit_offset(other, "g", new_claim, 9)
    # The stale consumer comes back with a fresh session, even re-creating an owner node at version 0:
    revived = connect(zk_connect)
    try:
        with pytest.raises(CommitFenced):
            reg.commit_offset(revived, "g", old_claim, 6)
    finally:
        close(revived)
    assert fetch_offsets(other, "g", [("t", 0)])[("t", 0)].offset == 9


def test_a_commit_after_losing_ownership_is_fenced_even_before_anyone_committed(zk, other):
    claim = reg.claim(zk, "g", "c1", "t", 0)
    reg.release(zk, "g", [claim])
    reg.claim(other, "g", "c2", "t", 0)
    with pytest.raises(CommitFenced):
        reg.commit_offset(zk, "g", claim, 1)
    assert fetch_offsets(zk, "g", [("t", 0)])[("t", 0)].offset == -1


def test_a_member_less_write_to_an_owned_partition_is_refused_and_the_owner_goes_on(zk, other):
    claim = reg.claim(zk, "g", "c1", "t", 0)
    # e.g. a reset tool, the broker's OffsetCommit or a Spark query's progress under the same group id
    assert commit_offsets(other, "g", {("t", 0): 100, ("t", 1): 50}) == {("t", 0): "c1"}
    reg.commit_offset(zk, "g", claim, 1)  # its token still holds
    assert {tp: o.offset for tp, o in fetch_offsets(zk, "g").items()} == {("t", 0): 1, ("t", 1): 50}
    reg.release(zk, "g", [claim])
    assert commit_offsets(other, "g", {("t", 0): 100}) == {}  # nobody owns it now
    assert fetch_offsets(zk, "g", [("t", 0)])[("t", 0)].offset == 100
    assert not zk.exists(paths.owner("g", "t", 0))  # the write's owner-node check leaves nothing behind


def test_a_retried_commit_whose_first_attempt_landed_is_success(zk):
    claim = reg.claim(zk, "g", "c1", "t", 0)
    token = claim.offset_version
    reg.commit_offset(zk, "g", claim, 7)
    claim.offset_version = token  # as if the reply to the landed write was lost
    data = offsets.encode_offset(OffsetAndMetadata(7))
    version = offsets._inner_commit_owned(zk, claim, paths.owner("g", "t", 0), paths.offset("g", "t", 0), data)
    assert version == token + 1
