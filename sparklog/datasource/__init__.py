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

__all__ = ["SparklogDataSource", "offsets_behind_latest", "register", "to_sparklog"]


def register(spark) -> None:
    """Register the source on `spark` under the name "sparklog"."""
    spark.dataSource.register(SparklogDataSource)
