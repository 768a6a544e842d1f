"""jobs/mirror.py (output equals input: keys, values, headers, partitions, order) and jobs/pageview_counts.py
(windowed counts with a watermark, into a feed topic and a table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from jobs import mirror as mirror_job, pageview_counts  # noqa: E402
from jobs.events import make_events  # noqa: E402
from jobs.generate_events import generate  # noqa: E402

START_MS = 1_700_000_040_000  # a whole minute
SPAN_MS = 5 * 60_000


def _records(spark, zk: str, topic: str):
    rows = (spark.read.format("sparklog").option("zookeeper.connect", zk).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
            .select("partition", "offset", "key", "value", "headers").collect())
    return sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]),
                   tuple((h["key"], bytes(h["value"])) for h in r["headers"] or ())) for r in rows)


def test_mirror_output_equals_input(spark, sparklog_cluster, zookeeper, tmp_path):
    from support.cluster import Cluster

    source = sparklog_cluster.zk_connect
    topic = f"mirrored_{uuid.uuid4().hex[:8]}"
    produced = generate(source, 1500, topic=topic, monitoring_topic=f"mon_{topic}", partitions=3, server="fe-m")
    assert produced.failed == 0
    target = f"{zookeeper.connect_string}/mirror-{uuid.uuid4().hex}"
    with Cluster(target, tmp_path / "offline", brokers=1):
        # at-least-once: no transaction markers in the target, so even offsets match (exactly once: the next file)
        report = mirror_job.mirror(spark, source, target, [topic], str(tmp_path / "ckpt"),
                                   guarantee=mirror_job.AT_LEAST_ONCE)
        assert report.mirrored == 1500
        assert mirror_job.partition_counts(target, [topic]) == {topic: 3}
        got, want = _records(spark, target, topic), _records(spark, source, topic)
        assert len(want) == 1500 and got == want  # same partition, offset, key, value and headers
        assert all(h == (("server", b"fe-m"),) for *_, h in got)
        again = mirror_job.mirror(spark, source, target, [topic], str(tmp_path / "ckpt"),
                                  guarantee=mirror_job.AT_LEAST_ONCE)
        assert again.mirrored == 0 and len(_records(spark, target, topic)) == 1500


def mirror_in_a_session_of_its_own(source: str, target: str, topic: str, checkpoint: str) -> None:
    """The child of the next test: the mirror job in a Spark session whose workers' output is the child's."""
    from support.spark import new_session

    spark = new_session()
    try:
        print(f"MIRRORED {mirror_job.mirror(spark, source, target, [topic], checkpoint).mirrored}", flush=True)
    finally:
        spark.stop()


def test_the_mirror_s_query_name_is_spark_s_own_option_not_an_unknown_sink_option(sparklog_cluster, zookeeper,
                                                                                   tmp_path):
    """`sparklog demo` printed "unknown Spark sink option 'queryname'; ... ignored" twice: Spark hands a
    query's name (`writeStream.queryName`) to its sink among the options, as it does `checkpointLocation`, and
    the sink warned about it. Spark's Python workers write to the driver's output, so the child's is read."""
    from support.cluster import Cluster

    source = sparklog_cluster.zk_connect
    topic = f"named_{uuid.uuid4().hex[:8]}"
    assert generate(source, 200, topic=topic, monitoring_topic=f"mon_{topic}", partitions=2, server="fe-n").failed == 0
    target = f"{zookeeper.connect_string}/named-{uuid.uuid4().hex}"
    code = (f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}, {str(Path(__file__).parent)!r}]; "
            "import test_jobs_streams as t; t.mirror_in_a_session_of_its_own(*sys.argv[1:])")
    with Cluster(target, tmp_path / "offline", brokers=1):
        child = subprocess.run([sys.executable, "-c", code, source, target, topic, str(tmp_path / "ckpt")],
                               capture_output=True, text=True, timeout=600,
                               env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    out = child.stdout + child.stderr
    assert child.returncode == 0 and "MIRRORED 200" in out, out[-5000:]
    assert "unknown Spark sink option" not in out, [line for line in out.splitlines() if "sink option" in line]


def test_pageview_counts_emit_closed_windows_to_the_feed_and_the_table(spark, sparklog_cluster, tmp_path):
    zk = sparklog_cluster.zk_connect
    topic, feed = f"views_{uuid.uuid4().hex[:8]}", f"counts_{uuid.uuid4().hex[:8]}"
    generate(zk, 2000, topic=topic, monitoring_topic=f"mon_{topic}", partitions=2, server="fe-p",
             start_ms=START_MS, span_ms=SPAN_MS)
    expected = Counter()
    for event in make_events(2000, "fe-p", START_MS, SPAN_MS):
        if event.record["kind"] == "page_view":
            expected[(event.timestamp // 60_000 * 60_000, event.record["page"])] += 1
    watermark_ms = max(e.timestamp for e in make_events(2000, "fe-p", START_MS, SPAN_MS)) - 60_000
    closed = {k: v for k, v in expected.items() if k[0] + 60_000 <= watermark_ms}

    report = pageview_counts.run(spark, zk, str(tmp_path / "wh"), str(tmp_path / "ckpt"), topic=topic,
                                 feed_topic=feed, database="pv_test")
    assert report.windows == len(closed) and report.views == sum(closed.values())
    table = {(r["window_start"].timestamp() * 1000, r["page"]): r["views"]
             for r in spark.table(f"pv_test.{feed}").collect()}
    assert table == closed
    feed_rows = (spark.read.format("sparklog").option("zookeeper.connect", zk).option("subscribe", feed)
                 .option("startingOffsets", "earliest").load().selectExpr("CAST(value AS STRING) AS v").collect())
    assert sorted(json.loads(r["v"])["views"] for r in feed_rows) == sorted(closed.values())
