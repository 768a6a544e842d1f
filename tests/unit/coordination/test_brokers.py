import signal
import subprocess
import sys
import threading
import time

import pytest

from sparklog.coordination.brokers import (
    BrokerIdInUse,
    BrokerInfo,
    BrokerRegistration,
    RegistrationState,
    live_brokers,
    watch_brokers,
)
from sparklog.coordination.connection import close, connect, decode
from support.zookeeper import expire_session, wait_for

SHORT_SESSION_S = 2.0


@pytest.fixture
def clients(request, zk_connect):
    made = []

    def make(session_timeout=SHORT_SESSION_S):
        client = connect(zk_connect, session_timeout=session_timeout)
        made.append(client)
        return client

    request.addfinalizer(lambda: [close(c) for c in made])
    return make


def test_registration_is_kafkas_json(zk):
    with BrokerRegistration(zk, 1, "h1", 9092, rack="r1"):
        value = decode(zk.get("/brokers/ids/1")[0])
        assert zk.exists("/brokers/ids/1").ephemeralOwner == zk.client_id[0]
        assert value["endpoints"] == ["PLAINTEXT://h1:9092"]
        assert value["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert (value["host"], value["port"], value["jmx_port"], value["rack"]) == ("h1", 9092, -1, "r1")
        assert value["version"] == 5 and value["timestamp"].isdigit()
        assert live_brokers(zk) == {1: BrokerInfo(1, "h1", 9092, "r1", ("PLAINTEXT://h1:9092",))}
    assert live_brokers(zk) == {}


def test_duplicate_live_id_is_refused(clients):
    first, second = clients(), clients()
    with BrokerRegistration(first, 7, "a", 1):
        registration = BrokerRegistration(second, 7, "b", 2)
        with pytest.raises(BrokerIdInUse, match="broker id 7"):
            registration.register()
        assert registration.state is RegistrationState.NEW
        assert live_brokers(second)[7].host == "a"


def test_own_ephemeral_after_reconnect_is_success(zk):
    # Our create reached the server, then the connection dropped: the retried create finds our own node.
    zk.ensure_path("/brokers/ids")
    zk.create("/brokers/ids/4", b'{"host":"h","port":1}', ephemeral=True)
    registration = BrokerRegistration(zk, 4, "h", 1)
    registration.register()
    assert registration.active
    registration.close()
    assert not zk.exists("/brokers/ids/4")


def test_register_waits_for_a_dead_brokers_node_to_expire(clients, zookeeper):
    dead, restarted = clients(), clients()
    BrokerRegistration(dead, 2, "h", 1).register()
    timer = threading.Timer(0.5, expire_session, args=(dead, zookeeper))
    timer.start()
    registration = BrokerRegistration(restarted, 2, "h", 1)
    registration.register(wait=10)
    timer.join()
    assert registration.active
    assert restarted.exists("/brokers/ids/2").ephemeralOwner == restarted.client_id[0]
    registration.close()


def test_node_disappears_when_the_session_expires(clients, zk_connect, request):
    # A broker process killed with -9 never closes its session; the server expires it after the timeout.
    script = (
        "import sys, time\n"
        "from sparklog.coordination.connection import connect\n"
        "from sparklog.coordination.brokers import BrokerRegistration\n"
        f"zk = connect({zk_connect!r}, session_timeout={SHORT_SESSION_S})\n"
        "BrokerRegistration(zk, 3, 'h', 1).register()\n"
        "print('registered', flush=True)\n"
        "time.sleep(60)\n"
    )
    broker = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    request.addfinalizer(lambda: (broker.kill(), broker.wait()))
    assert broker.stdout.readline().strip() == "registered"
    observer = clients()
    assert 3 in live_brokers(observer)
    broker.send_signal(signal.SIGKILL)
    broker.wait()
    assert 3 in live_brokers(observer)  # still there until the session times out
    wait_for(lambda: 3 not in live_brokers(observer), timeout=SHORT_SESSION_S * 5)


def test_reregisters_after_session_loss(clients, zookeeper):
    broker, observer = clients(), clients()
    registration = BrokerRegistration(broker, 5, "h", 1)
    registration.register()
    old_session = broker.client_id[0]
    expire_session(broker, zookeeper)
    wait_for(lambda: registration.statistics().registrations == 2)
    assert registration.active
    stat = observer.exists("/brokers/ids/5")
    assert stat.ephemeralOwner == broker.client_id[0] != old_session
    registration.close()
    assert registration.state is RegistrationState.CLOSED


def test_conflict_after_session_loss_is_reported(clients, zookeeper):
    broker, usurper = clients(), clients()
    conflicts = []
    registration = BrokerRegistration(broker, 6, "h", 1, on_conflict=conflicts.append)
    registration.register()
    broker.stop()  # closes the session (LOST) and keeps the client away while the usurper registers
    assert not usurper.exists("/brokers/ids/6")
    BrokerRegistration(usurper, 6, "u", 2).register()
    broker.start(timeout=10)
    wait_for(lambda: registration.state is RegistrationState.CONFLICT)
    assert isinstance(conflicts[0], BrokerIdInUse)
    assert live_brokers(usurper)[6].host == "u"
    registration.close()


def test_suspended_means_stop_acting(zk):
    registration = BrokerRegistration(zk, 8, "h", 1)
    registration.register()
    from kazoo.protocol.states import KazooState

    registration._on_session_state(KazooState.SUSPENDED)  # what kazoo calls when the connection drops
    assert not registration.active and registration.state is RegistrationState.SUSPENDED
    registration._on_session_state(KazooState.CONNECTED)
    assert registration.active
    registration.close()


def test_watch_reports_joins_and_leaves(clients):
    observer, broker = clients(), clients()
    seen = []
    watch = watch_brokers(observer, lambda brokers: seen.append(sorted(brokers)))
    with BrokerRegistration(broker, 1, "h", 1):
        # ZooKeeper watches are one-shot: two quick joins may reach the observer as one change
        wait_for(lambda: seen[-1] == [1])
        with BrokerRegistration(broker, 2, "h", 2):
            wait_for(lambda: seen[-1] == [1, 2])
    wait_for(lambda: seen[-1] == [])
    assert seen[0] == [] and [1] in seen
    watch.stop()
    count = len(seen)
    BrokerRegistration(broker, 3, "h", 3).register()
    time.sleep(0.3)
    assert len(seen) == count
