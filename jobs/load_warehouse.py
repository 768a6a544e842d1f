"""Load sparklog topics into warehouse tables: Parquet partitioned by event date and hour, registered in
Spark's catalog — the paper's Hadoop loads, which stored data and offsets together and only on success.

    python -m jobs.load_warehouse --zookeeper localhost:2181 --warehouse /data/warehouse --topics activity

Rule 1: each topic is one `Trigger.AvailableNow` streaming query with its own checkpoint. The checkpoint's
offset log and the Parquet sink's metadata log (`_spark_metadata`) move together: a batch's files count
only once its log entry is written, and a re-run resumes at the first uncommitted batch with the same
offsets. So a load killed at any point and run again leaves the same table as one clean run.
Rule 2: values are framed Avro decoded by the data source (`valueFormat=avro`, subject `<topic>-value`);
the table has the value's fields, the source's topic, partition and offset beside them (`kafka_*`), and
`event_date` / `event_hour` (UTC) of the event time (the value's `timestamp`, else the record's).
Rule 3: the table is external (its location is the sink's directory) and reads go through the sink's
metadata log, so files of a killed, uncommitted batch are never visible.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python jobs/load_warehouse.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.common import job_session, run_to_completion, security_options, start_query  # noqa: E402
from jobs.events import ACTIVITY_TOPIC, subject  # noqa: E402

DEFAULT_DATABASE = "sparklog"
QUERY_TIMEOUT_S = 1800


@dataclass(frozen=True)
class TableLoad:
    topic: str
    table: str
    path: str
    loaded: int  # rows this run added
    rows: int  # rows in the table afterwards
    batches: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.loaded / self.seconds if self.seconds else 0.0


def load(spark, zookeeper: str, warehouse: str, checkpoints: str, topics=(ACTIVITY_TOPIC,),
         database: str = DEFAULT_DATABASE, max_offsets_per_trigger: int | None = None,
         security: dict | None = None) -> list[TableLoad]:
    """Run the load of every topic to completion (Rule 1) and register its table; one TableLoad each."""
    warehouse_dir = Path(warehouse).resolve()
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}` LOCATION '{warehouse_dir / (database + '.db')}'")
    return [_load_topic(spark, zookeeper, warehouse_dir, Path(checkpoints).resolve(), topic, database,
                        max_offsets_per_trigger, security) for topic in topics]


def source(spark, zookeeper: str, topic: str, max_offsets_per_trigger: int | None = None,
           security: dict | None = None):
    """The topic as a stream of typed rows (Rule 2)."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("sparklog").option("zookeeper.connect", zookeeper).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("valueFormat", "avro").option("subject", subject(topic)).options(**security_options(security)))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    df = reader.load()
    fields = df.schema["value"].dataType.fieldNames()
    event_time = F.col("value.timestamp") if "timestamp" in fields else F.col("timestamp")
    return df.select(
        "value.*",
        F.col("topic").alias("kafka_topic"), F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.to_date(event_time).alias("event_date"), F.hour(event_time).alias("event_hour"),
    )


def _load_topic(spark, zookeeper: str, warehouse: Path, checkpoints: Path, topic: str, database: str,
                max_offsets_per_trigger: int | None, security: dict | None) -> TableLoad:
    path = warehouse / f"{database}.db" / topic
    table = f"`{database}`.`{topic}`"
    started = time.perf_counter()
    query = start_query(source(spark, zookeeper, topic, max_offsets_per_trigger, security).writeStream.format("parquet")
                        .partitionBy("event_date", "event_hour").option("checkpointLocation", str(checkpoints / topic))
                        .trigger(availableNow=True).queryName(f"load_{topic}"), str(path))
    progress = run_to_completion(query, f"loading {topic}", QUERY_TIMEOUT_S)
    seconds = time.perf_counter() - started
    loaded = sum(p["numInputRows"] for p in progress)
    if path.exists():
        spark.sql(f"CREATE TABLE IF NOT EXISTS {table} USING parquet LOCATION '{path}'")
        spark.sql(f"REFRESH TABLE {table}")
        rows = spark.table(table).count()
    else:
        rows = 0  # nothing was ever loaded: no files, no table yet
    return TableLoad(topic, f"{database}.{topic}", str(path), loaded, rows, len(progress), seconds)


def metastore_conf(warehouse: str, metastore: str | None) -> dict:
    """Spark settings for the warehouse dir and, with `metastore`, an embedded Derby Hive metastore there."""
    conf = {"spark.sql.warehouse.dir": str(Path(warehouse).resolve())}
    if metastore:
        conf.update({
            "spark.sql.catalogImplementation": "hive",
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={Path(metastore).resolve()};create=true",
            "spark.hadoop.javax.jdo.option.ConnectionURL":
                f"jdbc:derby:;databaseName={Path(metastore).resolve()};create=true",
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={Path(metastore).resolve().parent}",
        })
    return conf


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.load_warehouse", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zookeeper", required=True, help="ZooKeeper connect string (brokers and schema registry)")
    p.add_argument("--warehouse", required=True, help="warehouse directory (tables live under <database>.db/)")
    p.add_argument("--checkpoints", help="checkpoint directory (default: <warehouse>/_checkpoints)")
    p.add_argument("--topics", default=ACTIVITY_TOPIC, help="comma-separated topics to load (%(default)s)")
    p.add_argument("--database", default=DEFAULT_DATABASE, help="catalog database (%(default)s)")
    p.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch (default: all at once)")
    p.add_argument("--metastore", help="embedded Derby metastore directory (default: <warehouse>/metastore_db); "
                                       "'none' keeps the session's in-memory catalog")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    checkpoints = args.checkpoints or str(Path(args.warehouse) / "_checkpoints")
    metastore = None if args.metastore == "none" else (args.metastore or str(Path(args.warehouse) / "metastore_db"))
    with job_session("sparklog-load-warehouse", conf=metastore_conf(args.warehouse, metastore)) as spark:
        loads = load(spark, args.zookeeper, args.warehouse, checkpoints, [t for t in args.topics.split(",") if t],
                     args.database, args.max_offsets_per_trigger)
    for item in loads:
        print(f"{item.table}: loaded {item.loaded} rows in {item.batches} batches ({item.seconds:.1f}s); "
              f"table has {item.rows} rows at {item.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
