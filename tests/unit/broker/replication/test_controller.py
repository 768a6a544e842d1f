"""The controller in-process against a real ZooKeeper, with brokers stood in by their registrations only:
a broker leaving moves its leaderships in one fenced batch, a concurrent ISR write is re-read, not
overwritten, and preferred elections and the imbalance check pick the right partitions."""

from __future__ import annotations

import pytest

from sparklog.broker.replication.controller import Controller, imbalanced_partitions
from sparklog.coordination import topics
from sparklog.coordination.brokers import BrokerRegistration
from sparklog.coordination.connection import close, connect
from sparklog.coordination.controller_requests import request_preferred_election
from sparklog.coordination.topics import PartitionState, TopicAssignment
from support.zookeeper import wait_for


@pytest.fixture
def cluster(request, zk_connect):
    """Registrations of brokers 1..3 on their own sessions, and a controller on broker 1's."""
    return start_cluster(request, zk_connect, auto_leader_rebalance=False)


def start_cluster(request, zk_connect, **controller_settings):
    clients, registrations = {}, {}
    for b in (1, 2, 3):
        clients[b] = connect(zk_connect)
        registrations[b] = BrokerRegistration(clients[b], b, "127.0.0.1", 9000 + b)
        registrations[b].register()
    controller = Controller(clients[1], 1, **controller_settings)
    controller.start()

    def finish():
        controller.close()
        for b in clients:
            registrations[b].close()
            close(clients[b])

    request.addfinalizer(finish)
    wait_for(lambda: controller.statistics().is_controller)
    return controller, registrations


def test_a_departed_broker_loses_its_leaderships_and_isr_places(zk, cluster):
    controller, registrations = cluster
    topics.create_topic(zk, "t", 6, 3, live_broker_ids=[1, 2, 3])
    before = topics.get_topic(zk, "t").states
    registrations[2].close()
    wait_for(lambda: all(2 not in s.isr for s in topics.get_topic(zk, "t").states.values()))
    after = topics.get_topic(zk, "t").states
    for p, state in after.items():
        if before[p].leader == 2:
            assert state.leader in (1, 3) and state.leader_epoch == before[p].leader_epoch + 1
        else:
            assert (state.leader, state.leader_epoch) == (before[p].leader, before[p].leader_epoch)
        assert state.controller_epoch == controller.statistics().epoch
    stats = controller.statistics()
    led = sum(1 for s in before.values() if s.leader == 2)
    assert (stats.elections, stats.isr_changes) == (led, 6 - led)  # one write per partition, none wasted


def test_a_leaders_concurrent_isr_write_is_reread_not_overwritten(zk, cluster):
    controller, registrations = cluster
    topics.create_topic(zk, "c", 0, 0, live_broker_ids=[1, 2, 3], assignment={0: (1, 2, 3)})
    write = controller._write
    raced = []

    def race_then_write(decided):
        # between the controller's read and its write of the ISR without broker 3, leader 1 drops lagging
        # follower 2 (staged at the write: a read for another event may decide nothing and write nothing)
        if not raced and ("c", 0) in decided:
            raced.append(True)
            s = topics.partition_state(zk, "c", 0)
            topics.set_partition_state(zk, "c", 0, PartitionState(1, (1, 3), s.leader_epoch, s.controller_epoch),
                                       s.zk_version)
        return write(decided)

    controller._write = race_then_write
    registrations[3].close()
    wait_for(lambda: topics.partition_state(zk, "c", 0).isr == (1,))
    assert controller.statistics().write_conflicts >= 1
    assert topics.partition_state(zk, "c", 0).leader_epoch == 0  # ISR changes only: no leader change


def test_preferred_election_request_moves_leaders_back(zk, cluster):
    controller, _ = cluster
    topics.create_topic(zk, "p", 3, 3, live_broker_ids=[1, 2, 3])
    assignment = topics.get_topic(zk, "p").partitions
    for p, replicas in assignment.items():  # leadership moved away, as after a failover
        s = topics.partition_state(zk, "p", p)
        topics.set_partition_state(zk, "p", p, PartitionState(replicas[1], s.isr, s.leader_epoch + 1, 1),
                                   s.zk_version)
    request_preferred_election(zk, [("p", 0), ("p", 1)])
    wait_for(lambda: zk.exists("/admin/preferred_replica_election") is None)
    states = topics.get_topic(zk, "p").states
    assert states[0].leader == assignment[0][0] and states[1].leader == assignment[1][0]
    assert states[2].leader == assignment[2][1]  # not asked for


def test_the_periodic_imbalance_check_gives_brokers_their_preferred_leaderships_back(request, zk, zk_connect):
    start_cluster(request, zk_connect, auto_leader_rebalance=True, imbalance_check_interval_s=0.3,
                  imbalance_percentage=10)
    topics.create_topic(zk, "bal", 3, 3, live_broker_ids=[1, 2, 3])
    assignment = topics.get_topic(zk, "bal").partitions
    for p, replicas in assignment.items():
        s = topics.partition_state(zk, "bal", p)
        topics.set_partition_state(zk, "bal", p, PartitionState(replicas[2], s.isr, s.leader_epoch + 1, 1),
                                   s.zk_version)
    wait_for(lambda: all(s.leader == assignment[p][0] for p, s in topics.get_topic(zk, "bal").states.items()))


def test_imbalanced_partitions_are_those_of_brokers_over_the_threshold():
    def topic(name, leaders):
        parts = {p: (pref, 9) for p, (pref, _) in enumerate(leaders)}
        states = {p: PartitionState(lead, (pref, 9, lead)) for p, (pref, lead) in enumerate(leaders)}
        return TopicAssignment(name, parts, states)

    # broker 1 is preferred for 10 partitions and leads 9 (10% not led: at the threshold, fine);
    # broker 2 is preferred for 4 and leads 2 (50%): both of those come back
    t = {"a": topic("a", [(1, 1)] * 9 + [(1, 9)]), "b": topic("b", [(2, 2), (2, 2), (2, 9), (2, 9)])}
    assert imbalanced_partitions(t, live={1, 2, 9}, percentage=10) == [("b", 2), ("b", 3)]
    assert imbalanced_partitions(t, live={1, 9}, percentage=10) == []  # broker 2 is dead: nothing to give it


def run_cli(zk_connect, *args) -> int:
    import argparse

    from sparklog.cli.topics import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    parsed = parser.parse_args(["topics", "--zookeeper", zk_connect, *args])
    return parsed.func(parsed)


def test_reassignment_through_the_cli_adds_waits_for_the_isr_moves_leadership_and_drops(
        zk, zk_connect, cluster, tmp_path, capsys):
    topics.create_topic(zk, "r", 0, 0, live_broker_ids=[1, 2, 3], assignment={0: (1, 2)})
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"r","partition":0,"replicas":[3,2]}]}')
    assert run_cli(zk_connect, "reassign", "--plan", str(plan)) == 0
    wait_for(lambda: topics.get_topic(zk, "r").partitions[0] == (3, 2, 1))  # the new replica is added
    assert run_cli(zk_connect, "reassign", "--plan", str(plan), "--verify") == 1
    assert "still in progress" in capsys.readouterr().out
    s = topics.partition_state(zk, "r", 0)  # the leader lets broker 3 into the ISR once it caught up
    topics.set_partition_state(zk, "r", 0, PartitionState(1, (1, 2, 3), s.leader_epoch, s.controller_epoch),
                               s.zk_version)
    wait_for(lambda: zk.exists("/admin/reassign_partitions") is None)
    final = topics.partition_state(zk, "r", 0)
    assert topics.get_topic(zk, "r").partitions[0] == (3, 2)
    assert (final.leader, set(final.isr), final.leader_epoch) == (3, {2, 3}, s.leader_epoch + 1)
    assert run_cli(zk_connect, "reassign", "--plan", str(plan), "--verify") == 0


def test_bad_reassignment_plans_and_elect_leaders_errors_are_one_line(zk, zk_connect, cluster, tmp_path, capsys):
    topics.create_topic(zk, "b", 1, 1, live_broker_ids=[1])
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"b","partition":0,"replicas":[9]}]}')
    assert run_cli(zk_connect, "reassign", "--plan", str(plan)) == 1
    assert capsys.readouterr().err.strip() == "error: b-0: unknown broker(s) [9] (live: [1, 2, 3])"
    plan.write_text("not json")
    assert run_cli(zk_connect, "reassign", "--plan", str(plan)) == 1
    assert capsys.readouterr().err.startswith("error: not a reassignment plan")
    assert run_cli(zk_connect, "elect-leaders", "--topic", "nope") == 1
    assert capsys.readouterr().err.strip() == "error: unknown topic 'nope'"


def test_create_with_a_replica_assignment_from_the_cli(zk, zk_connect, cluster, capsys):
    assert run_cli(zk_connect, "create", "manual", "--replica-assignment", "3:1,1:2") == 0
    assert topics.get_topic(zk, "manual").partitions == {0: (3, 1), 1: (1, 2)}
    assert run_cli(zk_connect, "create", "bad", "--replica-assignment", "1:x") == 1
    assert capsys.readouterr().err.strip() == "error: --replica-assignment '1:x' is not broker ids joined by ':' and ','"
    assert run_cli(zk_connect, "create", "dup", "--replica-assignment", "1:1") == 1
    assert "lists a broker twice" in capsys.readouterr().err
