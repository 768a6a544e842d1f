"""zookeeper.set.acl in the broker's configuration: refused at start, in one line, without a ZooKeeper login."""

import pytest

from sparklog.broker.config import BrokerConfig, ConfigError
from sparklog.coordination.zookeeper_security import DIGEST_LOGIN_MODULE

BASE = {"broker.id": "1", "log.dirs": "/tmp/x", "zookeeper.connect": "127.0.0.1:2181"}


def test_set_acl_is_off_by_default():
    assert BrokerConfig.from_properties(BASE).zookeeper_set_acl is False


def test_set_acl_without_a_login_is_refused_in_one_line(monkeypatch):
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    with pytest.raises(ConfigError, match="^zookeeper.set.acl is true, but no authentication to ZooKeeper") as raised:
        BrokerConfig.from_properties({**BASE, "zookeeper.set.acl": "true"})
    assert "\n" not in str(raised.value)


def test_set_acl_with_the_client_section_of_kafka_opts(monkeypatch, tmp_path):
    (tmp_path / "jaas.conf").write_text(f'Client {{ {DIGEST_LOGIN_MODULE} required username="k" password="p"; }};')
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={tmp_path / 'jaas.conf'}")
    assert BrokerConfig.from_properties({**BASE, "zookeeper.set.acl": "true"}).zookeeper_set_acl is True


def test_an_unreadable_login_file_is_refused_even_without_set_acl(monkeypatch, tmp_path):
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={tmp_path / 'missing.conf'}")
    with pytest.raises(ConfigError, match="java.security.auth.login.config .*missing.conf: cannot read it"):
        BrokerConfig.from_properties(BASE)
