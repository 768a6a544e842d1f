"""The controller election recipe against a real ZooKeeper: wins, epochs, take-over, fencing, idempotence."""

import threading

import pytest

from sparklog.coordination import paths
from sparklog.coordination.connection import close, connect, decode, encode
from sparklog.coordination.controller_election import (
    ControllerElection,
    ControllerMoved,
    ElectionState,
    commit_fenced,
    read_controller,
    read_controller_epoch,
)
from support.zookeeper import expire_session, wait_for

SHORT_SESSION_S = 2.0


class Recorder:
    def __init__(self):
        self.events = []
        self.lock = threading.Lock()

    def elected(self, epoch, version):
        with self.lock:
            self.events.append(("elected", epoch, version))

    def resigned(self):
        with self.lock:
            self.events.append(("resigned",))


@pytest.fixture
def candidates(request, zk_connect):
    made = []

    def make(broker_id):
        client = connect(zk_connect, session_timeout=SHORT_SESSION_S)
        rec = Recorder()
        election = ControllerElection(client, broker_id, rec.elected, rec.resigned)
        made.append((client, election))
        election.start()
        return client, election, rec

    def cleanup():
        for client, election in made:
            election.close()
            close(client)

    request.addfinalizer(cleanup)
    return make


def test_first_candidate_wins_epoch_one(zk, candidates):
    _, election, rec = candidates(1)
    wait_for(lambda: election.is_controller)
    assert read_controller(zk) == 1
    assert decode(zk.get(paths.CONTROLLER)[0])["brokerid"] == 1
    assert read_controller_epoch(zk)[0] == 1
    assert rec.events == [("elected", 1, election.epoch_zk_version)]


def test_two_candidates_one_wins_and_the_other_takes_over_with_a_bumped_epoch(zk, candidates):
    client1, first, rec1 = candidates(1)
    wait_for(lambda: first.is_controller)
    _, second, rec2 = candidates(2)
    wait_for(lambda: second.state is ElectionState.FOLLOWER)
    assert second.controller_id == 1 and rec2.events == []
    first.close()
    assert rec1.events[-1] == ("resigned",)
    wait_for(lambda: second.is_controller)
    assert read_controller(zk) == 2
    assert read_controller_epoch(zk)[0] == 2
    assert rec2.events == [("elected", 2, second.epoch_zk_version)]


def test_a_dead_controllers_session_expiry_elects_another(zk, zookeeper, candidates):
    client1, first, rec1 = candidates(1)
    wait_for(lambda: first.is_controller)
    _, second, _ = candidates(2)
    wait_for(lambda: second.state is ElectionState.FOLLOWER)
    expire_session(client1, zookeeper)
    wait_for(lambda: second.is_controller)
    assert read_controller_epoch(zk)[0] == 2
    wait_for(lambda: ("resigned",) in rec1.events)  # the old controller learns it lost, stops acting
    wait_for(lambda: first.state is ElectionState.FOLLOWER)


def test_a_deposed_controllers_fenced_write_fails_and_changes_nothing(zk, zookeeper, candidates):
    zk.create("/target", b"before")
    client1, first, _ = candidates(1)
    wait_for(lambda: first.is_controller)
    stale_version = first.epoch_zk_version
    commit_fenced(client1, stale_version, lambda txn: txn.set_data("/target", b"by-1"))
    assert zk.get("/target")[0] == b"by-1"
    _, second, _ = candidates(2)
    first.close()  # deposed: another broker wins
    wait_for(lambda: second.is_controller)
    with pytest.raises(ControllerMoved):
        commit_fenced(client1, stale_version, lambda txn: txn.set_data("/target", b"zombie"))
    assert zk.get("/target")[0] == b"by-1"
    commit_fenced(zk, second.epoch_zk_version, lambda txn: txn.set_data("/target", b"by-2"))
    assert zk.get("/target")[0] == b"by-2"


def test_a_fenced_write_reports_the_failing_operation_itself(zk, candidates):
    from kazoo.exceptions import BadVersionError

    zk.create("/target", b"v0")
    client, election, _ = candidates(1)
    wait_for(lambda: election.is_controller)
    with pytest.raises(BadVersionError):
        commit_fenced(client, election.epoch_zk_version, lambda txn: txn.set_data("/target", b"x", version=7))
    assert zk.get("/target")[0] == b"v0"


def test_a_win_whose_reply_was_lost_is_a_win_without_a_second_bump(zk_connect):
    """Our session already owns /controller (the multi landed, the reply did not): the epoch is read back."""
    client = connect(zk_connect, session_timeout=SHORT_SESSION_S)
    try:
        client.create(paths.CONTROLLER_EPOCH, b"4")
        client.create(paths.CONTROLLER, encode({"version": 1, "brokerid": 7, "timestamp": "0"}), ephemeral=True)
        rec = Recorder()
        election = ControllerElection(client, 7, rec.elected, rec.resigned)
        election.start()
        wait_for(lambda: election.is_controller)
        assert read_controller_epoch(client)[0] == 4
        assert rec.events == [("elected", 4, 0)]
        election.close()
        assert client.exists(paths.CONTROLLER) is None  # deleted on close since it was ours
    finally:
        close(client)


def test_epochs_only_grow_over_many_take_overs(zk, candidates):
    seen = []
    for broker_id in range(1, 5):
        _, election, _ = candidates(broker_id)
        wait_for(lambda: election.is_controller)
        seen.append(election.epoch)
        election.close()
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert read_controller(zk) == -1
