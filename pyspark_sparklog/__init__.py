"""Auto-registration of the `sparklog` data source.

pyspark looks up every importable top-level module named `pyspark_*` the first time a Python data source is
used, and registers its `DefaultSource` (a `DataSource` subclass) under `DefaultSource.name()`; so
`format("sparklog")` works after `pip install sparklog`, with no `spark.dataSource.register` call.
"""

from sparklog.datasource.source import SparklogDataSource


class DefaultSource(SparklogDataSource):
    """`format("sparklog")`; see `sparklog.datasource.source.SparklogDataSource`."""


__all__ = ["DefaultSource"]
