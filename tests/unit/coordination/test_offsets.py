import pytest

from sparklog.coordination import offsets
from sparklog.coordination.connection import decode
from sparklog.coordination.offsets import GroupNotEmpty, OffsetAndMetadata, UnknownGroup


def test_commit_and_fetch(zk):
    offsets.commit_offsets(zk, "g", {("t", 0): (10, "meta"), ("t", 1): 20, ("u", 0): OffsetAndMetadata(5)})
    assert decode(zk.get("/consumers/g/offsets/t/0")[0]) == {"version": 1, "offset": 10, "metadata": "meta"}
    assert offsets.fetch_offsets(zk, "g") == {
        ("t", 0): OffsetAndMetadata(10, "meta"),
        ("t", 1): OffsetAndMetadata(20, ""),
        ("u", 0): OffsetAndMetadata(5, ""),
    }
    assert offsets.fetch_offsets(zk, "g", [("t", 1), ("t", 7)]) == {("t", 1): OffsetAndMetadata(20)}
    offsets.commit_offsets(zk, "g", {("t", 0): (11, "")})
    assert offsets.fetch_offsets(zk, "g", [("t", 0)])[("t", 0)].offset == 11
    assert offsets.fetch_offsets(zk, "other") == {}


def test_reads_the_papers_decimal_text(zk):
    zk.create("/consumers/old/offsets/t/0", b"1234", makepath=True)
    assert offsets.fetch_offsets(zk, "old") == {("t", 0): OffsetAndMetadata(1234, "")}


def test_list_and_delete_groups(zk):
    assert offsets.list_groups(zk) == []
    offsets.commit_offsets(zk, "a", {("t", 0): 1})
    offsets.commit_offsets(zk, "b", {("t", 0): 1})
    assert offsets.list_groups(zk) == ["a", "b"]
    offsets.delete_group(zk, "a")
    assert offsets.list_groups(zk) == ["b"]
    with pytest.raises(UnknownGroup):
        offsets.delete_group(zk, "a")


def test_a_group_with_live_consumers_is_not_deleted(zk):
    offsets.commit_offsets(zk, "g", {("t", 0): 1})
    zk.create("/consumers/g/ids/c1", b"{}", ephemeral=True, makepath=True)
    with pytest.raises(GroupNotEmpty):
        offsets.delete_group(zk, "g")
    assert offsets.fetch_offsets(zk, "g")


def test_member_less_writes_are_refused_while_a_member_owns_the_partition(zk):
    claim = offsets.claim(zk, "g", "member-1", "t", 0)
    assert offsets.commit_offsets(zk, "g", {("t", 0): 7, ("t", 1): 8}) == {("t", 0): "member-1"}
    assert offsets.fetch_offsets(zk, "g", [("t", 0)])[("t", 0)].offset == -1  # the claim's "none committed"
    offsets.commit_owned(zk, "g", claim, 3)
    assert offsets.fetch_offsets(zk, "g")[("t", 0)].offset == 3
    assert offsets.fetch_offsets(zk, "g")[("t", 1)].offset == 8


def test_a_claim_after_a_member_less_write_gets_a_fresh_token(zk):
    offsets.commit_offsets(zk, "g", {("t", 0): 5})
    claim = offsets.claim(zk, "g", "member-1", "t", 0)
    assert claim.committed == 5
    offsets.commit_owned(zk, "g", claim, 6)
    assert offsets.fetch_offsets(zk, "g")[("t", 0)].offset == 6


def test_a_commit_after_the_group_was_deleted_recreates_its_nodes(zk):
    offsets.commit_offsets(zk, "g", {("t", 0): 1, ("t", 1): 2})
    offsets.delete_group(zk, "g")
    assert offsets.commit_offsets(zk, "g", {("t", 0): 3, ("t", 1): 4}) == {}
    assert {tp: v.offset for tp, v in offsets.fetch_offsets(zk, "g").items()} == {("t", 0): 3, ("t", 1): 4}
