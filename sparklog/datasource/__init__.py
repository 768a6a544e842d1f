"""The `sparklog` PySpark data source: `format("sparklog")` for batch and streaming reads and writes.

    from sparklog.datasource import register
    register(spark)          # only needed where the `pyspark_sparklog` module is not importable
    spark.read.format("sparklog").option("subscribe", "t").option("kafka.bootstrap.servers", "h:9092").load()

`to_sparklog(**options)` is the `foreachBatch` function for output mode "update", and
`offsets_behind_latest(query.lastProgress["sources"][0])` gives Spark's Kafka source's lag metrics.

The names are imported on first use (PEP 562): Spark's Python workers import this package to unpickle a
reader or a writer, and a read task should not pay for the writer's imports, nor a write for the reader's.
"""

from __future__ import annotations

import importlib

from sparklog.datasource import zip_imports

zip_imports.install()  # a Spark Python worker imports this package: its later tasks skip re-reading pyspark.zip

__all__ = ["SparklogDataSource", "activate", "offsets_behind_latest", "register", "to_sparklog"]

_LAZY = {"SparklogDataSource": "source", "offsets_behind_latest": "offsets", "to_sparklog": "writer"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


def register(spark) -> None:
    """Register the source on `spark` under the name "sparklog"."""
    from sparklog.datasource.source import SparklogDataSource

    spark.dataSource.register(SparklogDataSource)


def activate(spark) -> None:
    """Make `spark` the active session of the calling thread, so that `df.write.format("sparklog")` works there.

    Spark resolves a Python data source for a write through the JVM thread's *active* session, and a Python
    thread other than the one that built the session has none: the write fails with DATA_SOURCE_NOT_FOUND
    before any sparklog code runs, so no registration can help (reads, which go through another lookup, and
    `register(spark)` alike). pyspark sets the active session this way itself (`createDataFrame`).

    A Spark Connect session (`SparkSession.builder.remote(...)`) needs nothing and has no JVM here to ask: the
    Connect server runs each request of the session with that session active, whatever thread sent it.
    """
    if is_connect(spark):
        return
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


def is_connect(spark) -> bool:
    """Whether `spark` is a Spark Connect client session (told by its class, without importing Connect's
    client, which needs grpcio)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")
