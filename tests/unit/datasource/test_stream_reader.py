"""The stream reader's offset logic against a fake cluster: initial offsets, read limits, AvailableNow,
min rows with maxTriggerDelay, data-loss checks and planning."""

import json
import pickle

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from sparklog.datasource.errors import DataLossError
from sparklog.datasource.metadata import OffsetLookupError, resolve
from sparklog.datasource.options import SparklogOptionError, parse_read_options
from sparklog.datasource.stream_reader import SparklogStreamReader


class FakeOracle:
    """Partitions and offsets held in dicts; `log_start` and `log_end` per (topic, partition)."""

    def __init__(self, options, cluster):
        self.options, self.cluster = options, cluster

    def partitions(self, subscription):
        if subscription.kind == "assign":
            return list(subscription.partitions)
        return sorted(tp for tp in self.cluster["end"] if subscription.matches(tp[0]))

    def earliest(self, tps):
        return {tp: self.cluster["start"].get(tp, 0) for tp in tps}

    def latest(self, tps):
        return {tp: self.cluster["end"][tp] for tp in tps}

    def offsets_for_times(self, timestamps):
        # record i of every partition has timestamp 1000 * i
        return {tp: (ts + 999) // 1000 if (ts + 999) // 1000 < self.cluster["end"][tp] else None
                for tp, ts in timestamps.items()}

    def zookeeper(self):
        return None

    def bootstrap(self):
        return "h:1"

    def close(self):
        pass


def reader(cluster, clock=None, **options):
    opts = parse_read_options({"bootstrap.servers": "h:1", "subscribe": "a,b", **options}, streaming=True)
    kwargs = {"clock": clock} if clock else {}
    return SparklogStreamReader(opts, oracle_factory=lambda o: FakeOracle(o, cluster), **kwargs)


@pytest.fixture
def cluster():
    return {"start": {}, "end": {("a", 0): 100, ("a", 1): 50, ("b", 0): 10}}


def test_initial_offset_earliest_latest_and_json(cluster):
    assert reader(cluster, startingOffsets="earliest").initialOffset() == {"a": {"0": 0, "1": 0}, "b": {"0": 0}}
    assert reader(cluster).initialOffset() == {"a": {"0": 100, "1": 50}, "b": {"0": 10}}
    r = reader(cluster, startingOffsets='{"a":{"0":7,"1":-2},"b":{"0":-1}}')
    assert json.dumps(r.initialOffset()) == '{"a": {"0": 7, "1": 0}, "b": {"0": 10}}'


def test_specific_offsets_must_name_every_partition(cluster):
    with pytest.raises(SparklogOptionError, match="you must specify all TopicPartitions"):
        reader(cluster, startingOffsets='{"a":{"0":7}}').initialOffset()


def test_starting_timestamps(cluster):
    assert reader(cluster, startingTimestamp="5500").initialOffset() == {"a": {"0": 6, "1": 6}, "b": {"0": 6}}
    with pytest.raises(OffsetLookupError, match="b-0 and timestamp 20500"):
        reader(cluster, startingTimestamp="20500").initialOffset()
    with pytest.raises(OffsetLookupError, match="No offset matched"):
        reader(cluster, startingOffsetsByTimestamp='{"a":{"0":1,"1":1},"b":{"0":99000}}').initialOffset()
    r = reader(cluster, startingOffsetsByTimestamp='{"a":{"0":1,"1":1},"b":{"0":99000}}',
               startingOffsetsByTimestampStrategy="latest")
    assert r.initialOffset() == {"a": {"0": 1, "1": 1}, "b": {"0": 10}}


def test_read_limits(cluster):
    r = reader(cluster, maxOffsetsPerTrigger="16")
    start = {"a": {"0": 0, "1": 0}, "b": {"0": 0}}
    assert r.getDefaultReadLimit() == ReadMaxRows(16)
    assert r.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 100, "1": 50}, "b": {"0": 10}}
    end = r.latestOffset(start, ReadMaxRows(16))
    assert end == {"a": {"0": 10, "1": 5}, "b": {"0": 1}}
    assert r.reportLatestOffset() == {"a": {"0": 100, "1": 50}, "b": {"0": 10}}
    done = {"a": {"0": 100, "1": 50}, "b": {"0": 10}}
    assert r.latestOffset(done, ReadMaxRows(16)) == done  # no new data: start comes back unchanged


def test_available_now_freezes_target_and_keeps_rate_limit(cluster):
    r = reader(cluster, maxOffsetsPerTrigger="100", startingOffsets="earliest")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    cluster["end"][("a", 0)] = 1000  # produced after the trigger started: not read by this run
    batches, total = 0, 0
    while True:
        end = r.latestOffset(start, r.getDefaultReadLimit())
        if end == start:
            break
        size = sum(p.end - p.start for p in r.partitions(start, end))
        assert size <= 100
        total, batches, start = total + size, batches + 1, end
    assert total == 160 and batches == 2
    assert start == {"a": {"0": 100, "1": 50}, "b": {"0": 10}}


def test_min_rows_waits_until_max_trigger_delay(cluster):
    now = [1000.0]
    r = reader(cluster, clock=lambda: now[0], minOffsetsPerTrigger="500", maxTriggerDelay="10s")
    start = {"a": {"0": 0, "1": 0}, "b": {"0": 0}}
    assert r.getDefaultReadLimit() == ReadMinRows(500)
    assert r.latestOffset(start, ReadMinRows(500)) != start  # the first batch is never delayed
    assert r.latestOffset(start, ReadMinRows(500)) == start  # 160 < 500: wait
    now[0] += 11
    assert r.latestOffset(start, ReadMinRows(500)) == {"a": {"0": 100, "1": 50}, "b": {"0": 10}}
    assert r.latestOffset(start, ReadMinRows(100)) != start  # enough rows: no wait


def test_new_partitions_start_from_zero(cluster):
    r = reader(cluster)
    start = {"a": {"0": 100, "1": 50}}
    parts = r.partitions(start, {"a": {"0": 100, "1": 50}, "b": {"0": 10}})
    assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [("b", 0, 0, 10)]


def test_data_loss_gone_partition_and_backwards_offsets(cluster):
    start = {"a": {"0": 100, "1": 50}, "b": {"0": 10}}
    with pytest.raises(DataLossError, match="b-0 are gone"):
        reader(cluster).partitions(start, {"a": {"0": 100, "1": 50}})
    with pytest.raises(DataLossError, match=r"a-1's offset was changed from 50 to 20"):
        reader(cluster).partitions(start, {"a": {"0": 100, "1": 20}, "b": {"0": 10}})
    lenient = reader(cluster, failOnDataLoss="false")
    assert lenient.partitions(start, {"a": {"0": 101, "1": 20}}) == [
        p for p in lenient.partitions({"a": {"0": 100}}, {"a": {"0": 101}})]


def test_planning_options_and_pickling(cluster):
    r = reader(cluster, minPartitions="10")
    r.oracle  # open the (fake) oracle: it must not travel with the reader
    parts = r.partitions({"a": {"0": 0, "1": 0}, "b": {"0": 0}}, {"a": {"0": 100, "1": 50}, "b": {"0": 10}})
    assert len(parts) >= 10 and sum(p.end - p.start for p in parts) == 160
    assert all(p.bootstrap == "h:1" for p in parts)
    copy = pickle.loads(pickle.dumps(r.options))
    assert copy == r.options
    assert pickle.loads(pickle.dumps(SparklogStreamReader(r.options)))._oracle is None


def test_resolve_ending_timestamp_falls_back_to_latest(cluster):
    oracle = FakeOracle(None, cluster)
    opts = parse_read_options({"bootstrap.servers": "h", "subscribe": "a", "endingTimestamp": "99999"}, streaming=False)
    assert resolve(opts.ending, [("a", 0), ("a", 1)], oracle, is_start=False) == {("a", 0): 100, ("a", 1): 50}


def test_latest_start_is_resolved_once_per_query_although_spark_asks_again(cluster):
    """Spark calls initialOffset() again for batch 0; a producer moved "latest" in between (issue 13 item 1)."""
    r = reader(cluster)  # startingOffsets=latest, no ZooKeeper, no query id
    first = r.initialOffset()
    cluster["end"][("a", 0)] = 130
    assert r.initialOffset() == first
    end = r.latestOffset(first, r.getDefaultReadLimit())
    parts = r.partitions(r.initialOffset(), end)  # no DataLossError: the start did not move past the end
    assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [("a", 0, 100, 130)]


def test_progress_latest_offset_is_the_real_latest_and_offsets_behind_are_derived(cluster):
    from sparklog.datasource.offsets import offsets_behind_latest

    r = reader(cluster, maxOffsetsPerTrigger="16", startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    latest = r.reportLatestOffset()
    assert latest == {"a": {"0": 100, "1": 50}, "b": {"0": 10}} and end != latest
    progress = {"endOffset": json.dumps(end), "latestOffset": json.dumps(latest)}
    assert offsets_behind_latest(progress) == {
        "minOffsetsBehindLatest": "9", "maxOffsetsBehindLatest": "90", "avgOffsetsBehindLatest": str((90 + 45 + 9) / 3)}
    assert offsets_behind_latest({"endOffset": None, "latestOffset": None}) == {}


def test_a_starting_offset_past_the_end_is_said_in_spark_s_words_and_later_regressions_as_deletions(cluster):
    """Issue 26: the first range from startingOffsets said "offsets [100, 500) were deleted", which never existed."""
    r = reader(cluster, startingOffsets='{"a":{"0":500,"1":0},"b":{"0":0}}')
    start = r.initialOffset()
    with pytest.raises(DataLossError, match=r"^Partition a-0: the starting offset 500 is greater than the latest "
                                            r"offset 100 .*failOnDataLoss"):
        r.partitions(start, r.latestOffset(start, ReadAllAvailable()))
    later = {"a": {"0": 120, "1": 0}, "b": {"0": 0}}  # not the starting offsets: offsets went backwards
    with pytest.raises(DataLossError, match=r"offsets \[100, 120\) were deleted"):
        r.partitions(later, r.latestOffset(later, ReadAllAvailable()))


def test_a_topic_deleted_under_a_running_query_is_data_loss_naming_fail_on_data_loss(cluster):
    """Issue 26: it got the start-time advice "create it first, or set 'sparklog.waitForTopics'"."""
    from sparklog.datasource.metadata import TopicNotFound

    class DeletingOracle(FakeOracle):
        def partitions(self, subscription, missing_ok=False):
            if self.cluster.get("deleted") and not missing_ok:
                raise TopicNotFound("Topic b does not exist at h:1: create it first", ("b",))
            return [tp for tp in super().partitions(subscription) if tp[0] != "b" or not self.cluster.get("deleted")]

    opts = parse_read_options({"bootstrap.servers": "h:1", "subscribe": "a,b"}, streaming=True)
    r = SparklogStreamReader(opts, oracle_factory=lambda o: DeletingOracle(o, cluster))
    start = r.initialOffset()
    cluster["deleted"] = True
    with pytest.raises(DataLossError, match=r"^Topic b was deleted while the query read it.*failOnDataLoss"):
        r.latestOffset(start, ReadAllAvailable())
    lenient = parse_read_options({"bootstrap.servers": "h:1", "subscribe": "a,b", "failOnDataLoss": "false"},
                                 streaming=True)
    r = SparklogStreamReader(lenient, oracle_factory=lambda o: DeletingOracle(o, cluster))
    assert r.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 100, "1": 50}}  # goes on without it
