"""The AvailableNow streaming read on `local-cluster[2,1,1024]`: two executor JVMs with their own Python
workers, so `read()` can rely on nothing but its partition and options.

A JVM hosts one SparkContext, so the cluster-mode query runs in a child process (`run_on_local_cluster`);
this process produces the records and checks the child's Parquet output with its own local session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from support.cluster import wait_until
from support.spark import COLUMNS, executors, expected_df, produce

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
EXECUTORS_TIMEOUT_S = 180  # two executor JVMs start beside the driver: seconds quiet, a minute at load 16


def run_on_local_cluster(zk_connect: str, topics: str, out: str, checkpoint: str) -> None:
    """The child: AvailableNow from sparklog to Parquet on local-cluster[2,1,1024]; prints the batch sizes."""
    from support.spark import new_session, run_available_now, stream

    spark = new_session("local-cluster[2,1,1024]", "sparklog-local-cluster",
                        {"spark.executor.memory": "1g", "spark.sql.shuffle.partitions": "4"})
    try:
        # The query's source process must connect back to the driver within Spark's fixed 10 s
        # (support/spark.py, WORKER_NOT_CONNECTED): start it once the two executor JVMs have started, not beside them.
        wait_until(lambda: executors(spark) == 2, "two executors registered", EXECUTORS_TIMEOUT_S)
        df = stream(spark, type("C", (), {"zk_connect": zk_connect})(), subscribe=topics,
                    startingOffsets="earliest", maxOffsetsPerTrigger=1500)
        sizes = run_available_now(df, out, checkpoint)
        print("RESULT " + json.dumps({"sizes": sizes, "executors": executors(spark)}), flush=True)
    finally:
        spark.stop()


def test_available_now_on_local_cluster(spark, sparklog_cluster, make_topic, tmp_path):
    topics = [make_topic(partitions=4) for _ in range(3)]
    produced = produce(sparklog_cluster.bootstrap, topics, 1000)
    code = (f"import sys; sys.path[:0] = [{str(HERE.parent)!r}, {str(HERE)!r}]; "
            "import test_datasource_cluster as t; t.run_on_local_cluster(*sys.argv[1:])")
    child = subprocess.run(
        [sys.executable, "-c", code, sparklog_cluster.zk_connect, ",".join(topics), str(tmp_path / "out"),
         str(tmp_path / "ckpt")],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    results = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
    assert child.returncode == 0 and results, child.stdout[-3000:] + child.stderr[-5000:]
    result = json.loads(results[0][len("RESULT "):])
    assert result["executors"] == 2
    assert sum(result["sizes"]) == 3000 and max(result["sizes"]) <= 1500
    got = spark.read.parquet(str(tmp_path / "out")).select(*COLUMNS)
    assertDataFrameEqual(got, expected_df(spark, produced))
