"""The controller election recipe against a real ZooKeeper: wins, epochs, take-over, fencing, idempotence."""

import threading

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

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


def test_random_joins_resignations_and_expiries_keep_one_controller_and_growing_epochs(zookeeper, zk_connect):
    """Hypothesis drives candidates joining, closing and losing their sessions; after each step exactly one
    live candidate is controller, it is the one /controller names, and the epoch never repeats."""

    class Elections(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.members = {}  # broker id -> (client, election)
            self.next_id = 1
            self.epochs = []
            self.observer = connect(zk_connect, session_timeout=SHORT_SESSION_S)
            self.join()

        @rule()
        def join(self):
            client = connect(zk_connect, session_timeout=SHORT_SESSION_S)
            election = ControllerElection(client, self.next_id, lambda e, v: None, lambda: None)
            election.start()
            self.members[self.next_id] = (client, election)
            self.next_id += 1

        @rule(data=st.data())
        def leave(self, data):
            if len(self.members) > 1:
                broker = data.draw(st.sampled_from(sorted(self.members)))
                client, election = self.members.pop(broker)
                election.close()
                close(client)

        @rule()
        def expire_the_controller(self):
            current = read_controller(self.observer)
            if current in self.members:
                expire_session(self.members[current][0], zookeeper)

        @invariant()
        def one_controller(self):
            def settled():
                acting = [b for b, (_, e) in self.members.items() if e.is_controller]
                return len(acting) == 1 and read_controller(self.observer) == acting[0]

            wait_for(settled, timeout=20)
            epoch = read_controller_epoch(self.observer)[0]
            if not self.epochs or self.epochs[-1] != epoch:
                assert not self.epochs or epoch > self.epochs[-1]
                self.epochs.append(epoch)

        def teardown(self):
            for client, election in self.members.values():
                election.close()
                close(client)
            close(self.observer)

    Elections.TestCase.settings = settings(max_examples=3, stateful_step_count=5, deadline=None,
                                           suppress_health_check=list(HealthCheck))
    Elections.TestCase().runTest()
