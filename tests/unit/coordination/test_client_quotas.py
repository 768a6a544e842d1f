"""Client quota entities: the eight-level precedence (property-tested), Kafka's ZooKeeper layout and change
notifications against a real ZooKeeper, and the refusal of bad values."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.coordination import client_quotas as cq
from sparklog.coordination.client_quotas import DEFAULT, Entity, QuotaValueError
from tests.support.zookeeper import wait_for

NAMES = st.sampled_from(["alice", "bob", "c1", "c2"])
KEYS = st.sampled_from(cq.QUOTA_KEYS)
# the notes' list, written out as the eight (user, client) patterns, most specific first
LEVELS = [("U", "C"), ("U", DEFAULT), ("U", None), (DEFAULT, "C"), (DEFAULT, DEFAULT), (DEFAULT, None),
          (None, "C"), (None, DEFAULT)]


def entities():
    user = st.one_of(st.none(), st.just(DEFAULT), NAMES)
    client = st.one_of(st.none(), st.just(DEFAULT), NAMES)
    return st.tuples(user, client).filter(lambda uc: uc != (None, None)).map(lambda uc: Entity(*uc))


def brute_force(configs, user, client, key):
    """Read the list of design notes 4.9 literally: the first level, top down, that is stored and sets `key`."""
    for u, c in LEVELS:
        entity = Entity(user if u == "U" else u, client if c == "C" else c)
        if entity in configs and key in configs[entity]:
            return entity, configs[entity][key]
    return None


@given(st.dictionaries(entities(), st.dictionaries(KEYS, st.floats(1, 1e9)), max_size=12), NAMES, NAMES, KEYS)
def test_resolve_is_the_first_of_the_eight_levels_that_sets_the_key(configs, user, client, key):
    assert cq.resolve(configs, user, client, key) == brute_force(configs, user, client, key)


@pytest.mark.parametrize("level", range(8))
def test_each_level_wins_over_every_level_below_it(level):
    """Store all eight levels for (alice, c1), each with its own value: the one at `level` wins once the ones
    above it are removed."""
    configs = {}
    for index, (u, c) in enumerate(LEVELS):
        entity = Entity("alice" if u == "U" else u, "c1" if c == "C" else c)
        configs[entity] = {cq.PRODUCER_BYTE_RATE: float(index + 1)}
    for above in list(configs)[:level]:
        del configs[above]
    entity, value = cq.resolve(configs, "alice", "c1", cq.PRODUCER_BYTE_RATE)
    assert value == level + 1
    assert entity == list(configs)[0]
    # another user and client-id see only the levels that name neither: <default>/<default>, <default>, clients/<default>
    assert cq.resolve(configs, "bob", "c2", cq.PRODUCER_BYTE_RATE)[1] == [5, 5, 5, 5, 5, 6, 8, 8][level]


@given(st.text(min_size=1, max_size=30))
def test_sanitized_names_are_one_znode_and_round_trip(name):
    sanitized = cq.sanitize(name)
    assert "/" not in sanitized and sanitized not in (".", "..")
    assert cq.desanitize(sanitized) == name or name == DEFAULT


def test_a_name_of_dots_alone_is_escaped_as_zookeeper_refuses_dot_and_dot_dot_as_a_znode():
    # hypothesis found "." kept as it is: /config/clients/. is a path ZooKeeper refuses (Kafka's Sanitizer
    # keeps it too, and its ZooKeeper write fails)
    assert cq.sanitize(".") == "%2E" and cq.sanitize("..") == "%2E%2E"
    assert cq.desanitize("%2E") == "." and cq.desanitize("%2E%2E") == ".."
    assert cq.sanitize("...") == "..." and cq.sanitize(".a") == ".a"  # only the two names ZooKeeper refuses


def test_sanitize_is_kafkas():
    assert cq.sanitize("user@example.com") == "user%40example.com"
    assert cq.sanitize("a b*c") == "a%20b%2Ac"
    assert Entity("CN=x,O=y", DEFAULT).path == "users/CN%3Dx%2CO%3Dy/clients/<default>"


@pytest.mark.parametrize("text", ["-1", "0", "abc", "nan", "inf", "1e300", "", "  "])
def test_bad_values_are_refused_in_one_line(text):
    with pytest.raises(QuotaValueError) as info:
        cq.check_value(cq.PRODUCER_BYTE_RATE, text)
    assert "\n" not in str(info.value) and cq.PRODUCER_BYTE_RATE in str(info.value)


def test_request_percentage_bounded_and_unknown_keys_refused():
    assert cq.check_value(cq.REQUEST_PERCENTAGE, "50") == 50.0
    with pytest.raises(QuotaValueError):
        cq.check_value(cq.REQUEST_PERCENTAGE, "1e7")
    with pytest.raises(QuotaValueError, match="unknown quota"):
        cq.check_value("producer_bytes_rate", "10")


def test_zookeeper_layout_and_notifications_are_kafkas(zk):
    cq.alter_entity_config(zk, Entity(client="foo"), {cq.PRODUCER_BYTE_RATE: "1048576"})
    cq.alter_entity_config(zk, Entity("alice", DEFAULT), {cq.CONSUMER_BYTE_RATE: "2097152"})
    data, _ = zk.get("/config/clients/foo")
    assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1048576"}}
    data, _ = zk.get("/config/users/alice/clients/<default>")
    assert json.loads(data) == {"version": 1, "config": {"consumer_byte_rate": "2097152"}}
    changes = sorted(zk.get_children("/config/changes"))
    assert changes == ["config_change_0000000000", "config_change_0000000001"]
    notes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in changes]
    assert notes == [{"version": 2, "entity_path": "clients/foo"},
                     {"version": 2, "entity_path": "users/alice/clients/<default>"}]
    assert cq.read_all(zk) == {Entity(client="foo"): {"producer_byte_rate": 1048576.0},
                               Entity("alice", DEFAULT): {"consumer_byte_rate": 2097152.0}}


def test_bad_value_writes_nothing(zk):
    with pytest.raises(QuotaValueError):
        cq.alter_entity_config(zk, Entity(client="foo"), {cq.PRODUCER_BYTE_RATE: "-5"})
    assert zk.exists("/config/clients/foo") is None


def test_watch_applies_every_change_without_restart(zk):
    seen = {}
    cq.alter_entity_config(zk, Entity(client="before"), {cq.PRODUCER_BYTE_RATE: "100"})
    watch = cq.QuotaConfigWatch(zk, lambda entity, quotas: seen.__setitem__(entity, quotas))
    watch.start()
    try:
        assert seen == {Entity(client="before"): {cq.PRODUCER_BYTE_RATE: 100.0}}
        cq.alter_entity_config(zk, Entity("ghost"), {cq.REQUEST_PERCENTAGE: "25"})  # a user that does not exist yet
        wait_for(lambda: seen.get(Entity("ghost")) == {cq.REQUEST_PERCENTAGE: 25.0})
        cq.alter_entity_config(zk, Entity(client="before"), {}, remove=(cq.PRODUCER_BYTE_RATE,))
        wait_for(lambda: seen.get(Entity(client="before")) == {})
    finally:
        watch.close()
