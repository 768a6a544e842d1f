"""The brokers' fenced-range reports in ZooKeeper, and their column in `sparklog topics describe`."""


from sparklog.cli import main
from sparklog.coordination import log_faults, paths, topics


def test_each_broker_replaces_its_own_report(zk):
    assert log_faults.read_all(zk) == log_faults.LogFaults({}, ())
    log_faults.publish(zk, 1, {("t", 0): ((5, 8), (20, 21)), ("t", 1): ()})
    log_faults.publish(zk, 2, {("t", 0): ((6, 7),)})
    assert log_faults.read_all(zk).by_partition == {("t", 0): {1: ((5, 8), (20, 21)), 2: ((6, 7),)}}
    log_faults.publish(zk, 1, {})  # repaired, or deleted with its topic
    assert log_faults.read_all(zk).by_partition == {("t", 0): {2: ((6, 7),)}}


def test_an_unparsable_report_is_named_not_fatal(zk):
    log_faults.publish(zk, 1, {("t", 0): ((5, 8),)})
    zk.create(f"{paths.LOG_FAULTS}/3", b"{not json")
    found = log_faults.read_all(zk)
    assert found.by_partition == {("t", 0): {1: ((5, 8),)}} and found.unreadable == ("3",)


def test_topics_describe_shows_the_fenced_ranges(zk, zk_connect, capsys):
    topics.create_topic(zk, "t", 2, 1, live_broker_ids=[1])
    log_faults.publish(zk, 1, {("t", 1): ((5, 8),)})
    assert main(["topics", "--zookeeper", zk_connect, "describe", "t"]) == 0
    out = capsys.readouterr().out
    assert "fenced" in out and "1: 5-7" in out
