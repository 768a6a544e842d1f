"""The `sparklog` PySpark data source: `format("sparklog")` for batch and streaming reads and writes.

    from sparklog.datasource import register
    register(spark)          # only needed where the `pyspark_sparklog` module is not importable
    spark.read.format("sparklog").option("subscribe", "t").option("bootstrap.servers", "h:9092").load()
"""

from __future__ import annotations

from sparklog.datasource.source import SparklogDataSource

__all__ = ["SparklogDataSource", "register"]


def register(spark) -> None:
    """Register the source on `spark` under the name "sparklog"."""
    spark.dataSource.register(SparklogDataSource)
