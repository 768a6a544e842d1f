"""The authorizer's decision (coordination/acl.py Rule 1 and 2), by example and against a small model."""

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.coordination.acl import (AccessControlEntry, AclBinding, AclBindingFilter, AclSnapshot, Authorizer,
                                       Operation, PatternType, Permission, ResourcePattern, ResourceType,
                                       check_binding, parse_member, parse_super_users)

ALICE, BOB = "User:alice", "User:bob"
TOPIC = ResourceType.TOPIC
ALLOW, DENY = Permission.ALLOW, Permission.DENY
OPS = [op for op in Operation if op > Operation.ANY]


def snapshot(*bindings):
    entries = {}
    for pattern, entry in bindings:
        entries.setdefault(pattern, set()).add(entry)
    return AclSnapshot(entries)


def acl(name, principal, op, permission=ALLOW, host="*", pattern=PatternType.LITERAL, rtype=TOPIC):
    return ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, permission)


def test_no_acl_denies_unless_allow_everyone():
    assert not Authorizer().authorize(AclSnapshot(), ALICE, "1.2.3.4", Operation.READ, TOPIC, "t")
    assert Authorizer(allow_everyone_if_no_acl_found=True).authorize(AclSnapshot(), ALICE, "1.2.3.4",
                                                                     Operation.READ, TOPIC, "t")


def test_an_acl_for_someone_else_still_counts_as_found():
    acls = snapshot(acl("t", BOB, Operation.READ))
    assert not Authorizer(allow_everyone_if_no_acl_found=True).authorize(acls, ALICE, "h", Operation.READ, TOPIC, "t")


def test_deny_beats_allow():
    acls = snapshot(acl("t", ALICE, Operation.READ), acl("t", ALICE, Operation.READ, DENY))
    assert not Authorizer().authorize(acls, ALICE, "h", Operation.READ, TOPIC, "t")


def test_super_user_beats_deny():
    acls = snapshot(acl("t", ALICE, Operation.ALL, DENY))
    assert Authorizer(super_users=parse_super_users("User:bob; User:alice")).authorize(
        acls, ALICE, "h", Operation.READ, TOPIC, "t")


def test_implied_operations():
    auth = Authorizer()
    for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        assert auth.authorize(snapshot(acl("t", ALICE, op)), ALICE, "h", Operation.DESCRIBE, TOPIC, "t")
    alter_configs = snapshot(acl("t", ALICE, Operation.ALTER_CONFIGS))
    assert auth.authorize(alter_configs, ALICE, "h", Operation.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not auth.authorize(alter_configs, ALICE, "h", Operation.DESCRIBE, TOPIC, "t")
    assert not auth.authorize(snapshot(acl("t", ALICE, Operation.DESCRIBE)), ALICE, "h", Operation.READ, TOPIC, "t")
    # a DENY is not widened: DENY READ leaves an ALLOW DESCRIBE alone
    acls = snapshot(acl("t", ALICE, Operation.READ, DENY), acl("t", ALICE, Operation.DESCRIBE))
    assert auth.authorize(acls, ALICE, "h", Operation.DESCRIBE, TOPIC, "t")


def test_wildcards_hosts_and_prefixes():
    auth = Authorizer()
    acls = snapshot(acl("*", "User:*", Operation.READ, host="10.0.0.1"),
                    acl("pay", ALICE, Operation.WRITE, pattern=PatternType.PREFIXED))
    assert auth.authorize(acls, BOB, "10.0.0.1", Operation.READ, TOPIC, "anything")
    assert not auth.authorize(acls, BOB, "10.0.0.2", Operation.READ, TOPIC, "anything")
    assert auth.authorize(acls, ALICE, "h", Operation.WRITE, TOPIC, "payments")
    assert not auth.authorize(acls, ALICE, "h", Operation.WRITE, TOPIC, "pa")
    assert not auth.authorize(acls, ALICE, "h", Operation.WRITE, ResourceType.GROUP, "payments")


def test_filters():
    binding = AclBinding(*acl("payments", ALICE, Operation.READ))
    prefixed = AclBinding(*acl("pay", ALICE, Operation.READ, pattern=PatternType.PREFIXED))
    match = AclBindingFilter(TOPIC, "payments", PatternType.MATCH)
    assert match.matches(binding) and match.matches(prefixed)
    assert not AclBindingFilter(TOPIC, "payments", PatternType.PREFIXED).matches(prefixed)
    assert AclBindingFilter(principal=ALICE, operation=Operation.READ).matches(prefixed)
    assert not AclBindingFilter(permission=DENY).matches(binding)


def test_check_binding_and_names():
    assert check_binding(AclBinding(*acl("t", ALICE, Operation.READ))) is None
    assert "cluster" in check_binding(AclBinding(*acl("c", ALICE, Operation.ALTER, rtype=ResourceType.CLUSTER)))
    assert check_binding(AclBinding(*acl("t", ALICE, Operation.ANY))) is not None
    assert parse_member(Operation, "ClusterAction") is Operation.CLUSTER_ACTION
    assert parse_member(Operation, "describe_configs") is Operation.DESCRIBE_CONFIGS


# ---- against a small model

NAMES = ["a", "ab", "abc", "b", "*"]
PRINCIPALS = [ALICE, BOB, "User:*"]
HOSTS = ["1.1.1.1", "2.2.2.2", "*"]
TYPES = [ResourceType.TOPIC, ResourceType.GROUP]
# the operations whose implications differ, so that drawn ACLs meet each other often
FEW_OPS = [Operation.ALL, Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALTER_CONFIGS,
           Operation.DESCRIBE_CONFIGS]

bindings = st.lists(st.builds(
    lambda rtype, name, pattern, principal, host, op, permission: AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, permission)),
    st.sampled_from(TYPES), st.sampled_from(NAMES), st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(PRINCIPALS), st.sampled_from(HOSTS), st.sampled_from(FEW_OPS), st.sampled_from([ALLOW, DENY])),
    max_size=12)


def model(bindings, super_users, allow_empty, principal, host, op, rtype, name):
    if principal in super_users:
        return True
    applying = [b.entry for b in bindings if b.pattern.type == rtype and (
        (b.pattern.pattern == PatternType.LITERAL and b.pattern.name in (name, "*"))
        or (b.pattern.pattern == PatternType.PREFIXED and name.startswith(b.pattern.name)))]
    if not applying:
        return allow_empty
    mine = [e for e in applying if e.principal in (principal, "User:*") and e.host in (host, "*")]
    if any(e.permission == DENY and e.operation in (op, Operation.ALL) for e in mine):
        return False
    implied = {op, Operation.ALL}
    if op == Operation.DESCRIBE:
        implied |= {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    if op == Operation.DESCRIBE_CONFIGS:
        implied.add(Operation.ALTER_CONFIGS)
    return any(e.permission == ALLOW and e.operation in implied for e in mine)


@settings(max_examples=400, deadline=None)
@given(bindings, st.sets(st.sampled_from([ALICE, BOB])), st.booleans(), st.sampled_from([ALICE, BOB]),
       st.sampled_from(["1.1.1.1", "2.2.2.2"]), st.sampled_from(FEW_OPS[1:]), st.sampled_from(TYPES),
       st.sampled_from(["a", "ab", "abc", "b", "c"]))
def test_decision_matches_the_model(bindings, super_users, allow_empty, principal, host, op, rtype, name):
    acls = snapshot(*((b.pattern, b.entry) for b in bindings))
    auth = Authorizer(frozenset(super_users), allow_empty)
    assert auth.authorize(acls, principal, host, op, rtype, name) == model(
        bindings, super_users, allow_empty, principal, host, op, rtype, name)


@settings(max_examples=200, deadline=None)
@given(bindings, st.sampled_from([ALICE, BOB]), st.sampled_from(["1.1.1.1"]), st.sampled_from(NAMES))
def test_authorized_operations_are_the_decision_per_operation(bindings, principal, host, name):
    acls = snapshot(*((b.pattern, b.entry) for b in bindings))
    auth = Authorizer()
    bits = auth.authorized_operations(acls, principal, host, TOPIC, name, OPS)
    assert {op for op in OPS if bits >> op & 1} == {op for op in OPS if auth.authorize(
        acls, principal, host, op, TOPIC, name)}


@settings(max_examples=200, deadline=None)
@given(bindings, st.sampled_from([ALICE, BOB]), st.sampled_from(FEW_OPS[1:]), st.sampled_from(["a", "ab", "b"]),
       st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]))
def test_a_matching_deny_denies_whatever_else_allows(bindings, principal, op, name, pattern):
    acls = snapshot(*((b.pattern, b.entry) for b in bindings),
                    acl(name[0] if pattern is PatternType.PREFIXED else name, "User:*", op, DENY, pattern=pattern),
                    acl(name, principal, Operation.ALL))
    assert not Authorizer(allow_everyone_if_no_acl_found=True).authorize(acls, principal, "1.1.1.1", op, TOPIC, name)
