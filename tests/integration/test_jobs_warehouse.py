"""jobs/load_warehouse.py: exactly once across a SIGKILL of the loading process and a re-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from jobs.generate_events import generate  # noqa: E402
from jobs.load_warehouse import load  # noqa: E402

EVENTS = 3000
PER_TRIGGER = 600  # five micro-batches, so the kill lands in the middle of the load


def _table_summary(spark, table: str):
    row = spark.sql(f"SELECT count(*) AS n, count(DISTINCT event_id) AS ids, sum(crc32(event_id)) AS crc "
                    f"FROM {table}").first()
    return row["n"], row["ids"], row["crc"]


def test_load_is_exactly_once_across_a_kill_and_a_rerun(spark, sparklog_cluster, tmp_path):
    zk = sparklog_cluster.zk_connect
    topic = f"activity_{uuid.uuid4().hex[:8]}"
    produced = generate(zk, EVENTS, topic=topic, monitoring_topic=f"mon_{topic}", partitions=2, server="fe-wh")
    assert produced.sent == EVENTS and produced.failed == 0
    warehouse, checkpoints = tmp_path / "warehouse", tmp_path / "checkpoints"
    commits = checkpoints / topic / "commits"
    command = [sys.executable, "-m", "jobs.load_warehouse", "--zookeeper", zk, "--warehouse", str(warehouse),
               "--checkpoints", str(checkpoints), "--topics", topic, "--database", "wh_test",
               "--max-offsets-per-trigger", str(PER_TRIGGER), "--metastore", "none"]
    with open(tmp_path / "job.out", "wb") as out:
        job = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while not (commits / "1").exists() and job.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert job.poll() is None, (tmp_path / "job.out").read_text()[-3000:]
            os.killpg(job.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
            job.wait(30)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(30)
    committed_before = len([p for p in commits.iterdir() if p.name.isdigit()])
    assert 2 <= committed_before < EVENTS // PER_TRIGGER  # killed mid-run

    [rerun] = load(spark, zk, str(warehouse), str(checkpoints), [topic], database="wh_test",
                   max_offsets_per_trigger=PER_TRIGGER)
    assert 0 < rerun.loaded < EVENTS  # it resumed; it did not start over
    assert rerun.rows == EVENTS
    assert _table_summary(spark, f"wh_test.{topic}") == (EVENTS, EVENTS, produced.checksum)

    partitions = spark.sql(f"SELECT DISTINCT event_date, event_hour FROM wh_test.{topic}").count()
    assert partitions >= 1 and {"event_date", "event_hour"} <= set(spark.table(f"wh_test.{topic}").columns)
    assert any(p.name.startswith("event_date=") for p in (warehouse / "wh_test.db" / topic).iterdir())

    [again] = load(spark, zk, str(warehouse), str(checkpoints), [topic], database="wh_test")
    assert again.loaded == 0 and again.rows == EVENTS
