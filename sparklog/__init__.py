"""sparklog: a Kafka-style distributed commit log, with a PySpark Structured Streaming data source."""

__version__ = "0.1.0"
