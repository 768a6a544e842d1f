"""The `sparklog` PySpark data source."""
