"""SCRAM credentials in a real ZooKeeper in Kafka's layout (coordination/scram_credentials.py): the znode's JSON,
the change notification, other keys of the user's config kept, bounds refused."""

from __future__ import annotations

import base64
import json

import pytest

from sparklog.coordination.scram_credentials import (credential_from_salted, delete_credential, list_users,
                                                     read_credentials, salted_password, store_credential, user_path)


def test_a_stored_credential_is_kafkas_json_with_a_change_notification(zk):
    cred = store_credential(zk, "alice", "SCRAM-SHA-256", "pw", 4096)
    data = json.loads(zk.get("/config/users/alice")[0])
    assert data == {"version": 1, "config": {"SCRAM-SHA-256": (
        f"salt={base64.b64encode(cred.salt).decode()},stored_key={base64.b64encode(cred.stored_key).decode()},"
        f"server_key={base64.b64encode(cred.server_key).decode()},iterations=4096")}}
    assert cred == credential_from_salted("SCRAM-SHA-256", cred.salt,
                                          salted_password("SCRAM-SHA-256", "pw", cred.salt, 4096), 4096)
    [change] = zk.get_children("/config/changes")
    assert change.startswith("config_change_")
    assert json.loads(zk.get(f"/config/changes/{change}")[0]) == {"version": 2, "entity_path": "users/alice"}


def test_other_keys_of_the_users_config_are_kept(zk):
    zk.create("/config/users/bob", b'{"version":1,"config":{"producer_byte_rate":"1024"}}', makepath=True)
    store_credential(zk, "bob", "SCRAM-SHA-512", "pw", 8192)
    assert json.loads(zk.get("/config/users/bob")[0])["config"]["producer_byte_rate"] == "1024"
    assert read_credentials(zk, "bob")["SCRAM-SHA-512"].iterations == 8192
    assert delete_credential(zk, "bob", "SCRAM-SHA-512") and not delete_credential(zk, "bob", "SCRAM-SHA-512")
    assert json.loads(zk.get("/config/users/bob")[0])["config"] == {"producer_byte_rate": "1024"}


def test_names_are_sanitized_as_kafka_does(zk):
    store_credential(zk, "CN=a/b,O=x", "SCRAM-SHA-256", "pw", 4096)
    assert user_path("CN=a/b,O=x") == "/config/users/CN%3Da%2Fb%2CO%3Dx"
    assert list_users(zk) == ["CN=a/b,O=x"] and read_credentials(zk, "CN=a/b,O=x")


@pytest.mark.parametrize("mechanism, iterations, words", [("SCRAM-SHA-1", 4096, "unknown SCRAM mechanism"),
                                                          ("SCRAM-SHA-256", 4095, "iterations 4095"),
                                                          ("SCRAM-SHA-256", 16385, "iterations 16385")])
def test_bad_mechanisms_and_iterations_are_refused_and_nothing_is_written(zk, mechanism, iterations, words):
    with pytest.raises(ValueError, match=words):
        store_credential(zk, "carol", mechanism, "pw", iterations)
    assert not zk.exists("/config/users/carol")


def test_a_brokers_credential_cache_follows_the_change_notifications(zk):
    """Read at start, then reloaded per notification: added, changed and deleted without a restart."""
    import time

    from sparklog.broker.security.credential_cache import CredentialCache

    store_credential(zk, "early", "SCRAM-SHA-256", "pw", 4096)
    cache = CredentialCache(zk)
    assert cache.lookup("early", "SCRAM-SHA-256")[3] == 4096 and cache.lookup("late", "SCRAM-SHA-256") is None

    def eventually(predicate):
        deadline = time.monotonic() + 30
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.05)
        return predicate()

    store_credential(zk, "late", "SCRAM-SHA-256", "pw", 5000)
    assert eventually(lambda: cache.lookup("late", "SCRAM-SHA-256") is not None)
    store_credential(zk, "early", "SCRAM-SHA-256", "pw2", 6000)
    assert eventually(lambda: cache.lookup("early", "SCRAM-SHA-256")[3] == 6000)
    delete_credential(zk, "late", "SCRAM-SHA-256")
    assert eventually(lambda: cache.lookup("late", "SCRAM-SHA-256") is None)
