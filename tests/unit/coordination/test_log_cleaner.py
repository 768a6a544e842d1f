"""The brokers' log cleaner reports in ZooKeeper, and their column in `sparklog topics describe`."""

from sparklog.cli import main
from sparklog.coordination import log_cleaner, paths, topics

RUN = {"ended_ms": 1_700_000_000_000, "duration_ms": 1500, "first_dirty": 0, "end": 120, "records_removed": 97,
       "bytes_read": 9000, "bytes_written": 1200}


def test_each_broker_replaces_its_own_report_and_a_bad_node_is_skipped(zk):
    assert log_cleaner.read_all(zk) == {}
    log_cleaner.publish(zk, 1, {("t", 0): {"dirty_ratio": 0.5, "last_run": None}})
    log_cleaner.publish(zk, 2, {("t", 0): {"dirty_ratio": 0.25, "last_run": RUN}})
    zk.create(f"{paths.LOG_CLEANER}/3", b"{not json")
    assert log_cleaner.read_all(zk) == {("t", 0): {1: {"dirty_ratio": 0.5, "last_run": None},
                                                   2: {"dirty_ratio": 0.25, "last_run": RUN}}}
    log_cleaner.publish(zk, 1, {})  # the topic is no longer compacted here
    assert set(log_cleaner.read_all(zk)[("t", 0)]) == {2}


def test_topics_describe_shows_the_dirty_ratio_and_last_run_of_compacted_topics_only(zk, zk_connect, capsys,
                                                                                    monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    topics.create_topic(zk, "t", 2, 1, {"cleanup.policy": "compact"}, live_broker_ids=[1])
    topics.create_topic(zk, "plain", 1, 1, live_broker_ids=[1])
    log_cleaner.publish(zk, 1, {("t", 0): {"dirty_ratio": 0.42, "last_run": RUN},
                                ("t", 1): {"dirty_ratio": 0.9, "last_run": None}})
    assert main(["topics", "--zookeeper", zk_connect, "describe", "t"]) == 0
    out = capsys.readouterr().out
    assert "dirty ratio" in out and "1: 0.42, last" in out and "removed 97 in 1.5 s" in out and "1: 0.90, never" in out
    assert main(["topics", "--zookeeper", zk_connect, "describe", "plain"]) == 0
    assert "dirty ratio" not in capsys.readouterr().out
