"""source.py Rule 3: a user-supplied schema selects some of the source's columns, or fails at load()."""

import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from sparklog.datasource.arrow import spark_schema
from sparklog.datasource.options import SparklogOptionError, parse_read_options
from sparklog.datasource.source import SparklogDataSource, selected_columns

OPTIONS = {"bootstrap.servers": "localhost:9092", "subscribe": "t"}


KAFKA_FIELDS = {f.name: f for f in spark_schema(True).fields}


def fields(*items):
    """A StructType of the source's fields named in `items`, or of (name, type) pairs given as such."""
    return StructType([KAFKA_FIELDS[i] if isinstance(i, str) else StructField(*i) for i in items])


def options(**extra):
    return parse_read_options({**OPTIONS, **extra}, streaming=False)


@pytest.mark.parametrize("want", [("offset",), ("value", "partition")])
def test_a_projection_is_taken_in_its_order(want):
    assert selected_columns(fields(*want), options()) == want
    reader = SparklogDataSource(OPTIONS).reader(fields(*want))
    assert reader.options.columns == want


def test_the_whole_schema_reads_everything():
    assert selected_columns(spark_schema(), options()) is None
    assert selected_columns(spark_schema(True), options(includeHeaders="true")) is None
    assert SparklogDataSource(OPTIONS).reader(spark_schema()).options.columns is None


@pytest.mark.parametrize("schema, message", [
    (fields(("value", StringType())), "value string is not a column"),
    (fields(("payload", BinaryType())), "payload binary is not a column"),
    (fields("headers"), "headers"),  # only with includeHeaders
    (fields("offset", "offset"), "at most once"),
    (fields(), "at least one"),
])
def test_anything_else_fails_with_one_line(schema, message):
    with pytest.raises(SparklogOptionError, match=message):
        selected_columns(schema, options())


def test_no_projection_with_avro_values():
    avro = {"valueFormat": "avro", "subject": "events-value", "zookeeper.connect": "localhost:2181"}
    with pytest.raises(SparklogOptionError, match="valueFormat=avro"):
        selected_columns(fields("offset"), options(**avro))


def test_a_read_worker_imports_neither_the_writer_nor_pyarrow_compute():
    """What a Spark Python worker imports to unpickle a reader and run `read()`: the write path and
    `pyarrow.compute` (a quarter second on a loaded machine) are not part of it."""
    import subprocess
    import sys

    code = ("import sys, pyspark_sparklog, sparklog.datasource.batch_reader, sparklog.datasource.stream_reader, "
            "sparklog.datasource.fetcher; "
            "print(sorted(m for m in ('pyarrow.compute', 'sparklog.datasource.writer', 'sparklog.client.producer') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
