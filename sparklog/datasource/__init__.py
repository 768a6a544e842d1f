"""The `sparklog` PySpark data source: `format("sparklog")` for batch and streaming reads and writes.

    from sparklog.datasource import register
    register(spark)          # only needed where the `pyspark_sparklog` module is not importable
    spark.read.format("sparklog").option("subscribe", "t").option("kafka.bootstrap.servers", "h:9092").load()

`to_sparklog(**options)` is the `foreachBatch` function for output mode "update", and
`offsets_behind_latest(query.lastProgress["sources"][0])` gives Spark's Kafka source's lag metrics.
"""

from __future__ import annotations

from sparklog.datasource.offsets import offsets_behind_latest
from sparklog.datasource.source import SparklogDataSource
from sparklog.datasource.writer import to_sparklog

__all__ = ["SparklogDataSource", "activate", "offsets_behind_latest", "register", "to_sparklog"]


def register(spark) -> None:
    """Register the source on `spark` under the name "sparklog"."""
    spark.dataSource.register(SparklogDataSource)


def activate(spark) -> None:
    """Make `spark` the active session of the calling thread, so that `df.write.format("sparklog")` works there.

    Spark resolves a Python data source for a write through the JVM thread's *active* session, and a Python
    thread other than the one that built the session has none: the write fails with DATA_SOURCE_NOT_FOUND
    before any sparklog code runs, so no registration can help (reads, which go through another lookup, and
    `register(spark)` alike). pyspark sets the active session this way itself (`createDataFrame`).
    """
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
