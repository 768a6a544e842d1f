"""ACLs in ZooKeeper in Kafka's layout, and a cache kept by the change notifications (coordination/acl_store.py)."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.coordination.acl import (AccessControlEntry, AclBinding, AclBindingFilter, Operation, PatternType,
                                       Permission, ResourcePattern, ResourceType)
from sparklog.coordination.acl_store import (AclCache, AclStore, decode_change, decode_entries, encode_change,
                                             encode_entries)
from sparklog.coordination.connection import close, connect
from tests.support.zookeeper import wait_for

READ = AccessControlEntry("User:alice", "*", Operation.READ, Permission.ALLOW)
DENY_WRITE = AccessControlEntry("User:bob", "10.0.0.1", Operation.WRITE, Permission.DENY)
TOPIC_T = ResourcePattern(ResourceType.TOPIC, "t")
PREFIX = ResourcePattern(ResourceType.GROUP, "grp-", PatternType.PREFIXED)


def test_kafka_layout(zk):
    store = AclStore(zk)
    store.add([AclBinding(TOPIC_T, READ), AclBinding(PREFIX, DENY_WRITE)])
    assert json.loads(zk.get("/kafka-acl/Topic/t")[0]) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert json.loads(zk.get("/kafka-acl-extended/prefixed/Group/grp-")[0])["acls"] == [
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"}]
    literal = zk.get_children("/kafka-acl-changes")
    assert [c[:12] for c in literal] == ["acl_changes_"] and len(literal[0]) == 22
    assert zk.get(f"/kafka-acl-changes/{literal[0]}")[0] == b"Topic:t"
    [extended] = zk.get_children("/kafka-acl-extended-changes")
    assert json.loads(zk.get(f"/kafka-acl-extended-changes/{extended}")[0]) == {
        "version": 1, "resourceType": "GROUP", "name": "grp-", "patternType": "PREFIXED"}
    assert store.load().entries == {TOPIC_T: {READ}, PREFIX: {DENY_WRITE}}


def test_remove_by_filter_drops_empty_patterns(zk):
    store = AclStore(zk)
    store.add([AclBinding(TOPIC_T, READ), AclBinding(TOPIC_T, DENY_WRITE), AclBinding(PREFIX, DENY_WRITE)])
    [removed] = store.remove([AclBindingFilter(permission=Permission.DENY)])
    assert sorted(map(str, removed)) == sorted(map(str, [AclBinding(TOPIC_T, DENY_WRITE),
                                                         AclBinding(PREFIX, DENY_WRITE)]))
    assert store.load().entries == {TOPIC_T: {READ}}
    assert zk.exists("/kafka-acl-extended/prefixed/Group/grp-") is None


def test_cache_follows_changes_made_elsewhere(zk, zk_connect):
    AclStore(zk).add([AclBinding(TOPIC_T, READ)])
    other = connect(zk_connect)
    try:
        cache = AclCache(other).start()
        assert cache.snapshot.entries == {TOPIC_T: {READ}}
        AclStore(zk).add([AclBinding(PREFIX, DENY_WRITE)])
        wait_for(lambda: cache.snapshot.entries == {TOPIC_T: {READ}, PREFIX: {DENY_WRITE}}, 30)
        AclStore(zk).remove([AclBindingFilter(ResourceType.TOPIC)])
        wait_for(lambda: cache.snapshot.entries == {PREFIX: {DENY_WRITE}}, 30)
        cache.stop()
    finally:
        close(other)


def test_unparseable_znode_holds_no_acl(zk):
    zk.create("/kafka-acl/Topic/bad", b"{not json", makepath=True)
    assert AclStore(zk).load().entries == {}


entries = st.frozensets(st.builds(AccessControlEntry, st.sampled_from(["User:a", "User:*", "User:CN=x,O=y"]),
                                  st.sampled_from(["*", "10.0.0.1", "::1"]),
                                  st.sampled_from([op for op in Operation if op > Operation.ANY]),
                                  st.sampled_from([Permission.ALLOW, Permission.DENY])), max_size=6)
patterns = st.builds(ResourcePattern, st.sampled_from([t for t in ResourceType if t > ResourceType.ANY]),
                     st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1),
                     st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]))


@settings(max_examples=200, deadline=None)
@given(entries, patterns)
def test_codecs_round_trip(found, pattern):
    assert decode_entries(encode_entries(found)) == found
    assert decode_change(*encode_change(pattern)) == pattern
