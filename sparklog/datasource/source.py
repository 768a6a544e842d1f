"""The `sparklog` data source: Spark's Kafka source options, schema and semantics over sparklog.

Rule 1: options are validated where Spark first hands them over — `schema()` checks what every read needs
(it runs at `load()`), `reader`/`streamReader`/`writer`/`streamWriter` what batch or streaming adds — so
errors surface at `load()`/`save()`/`start()`, before any task runs.
Rule 3: the schema is Spark's Kafka source's; a user-supplied schema (`spark.read.schema(...)`) may select
some of its columns, by name and with their types, in any order (`selected_columns`): the rows are the same,
projected, and columns nobody reads are never built (pyspark gives Python sources no column pruning). Any
other field, a changed type, a repeated or empty selection, or a selection with valueFormat=avro fails at
`load()`. (Spark's Kafka source refuses every user schema; a projection changes no value, so we take it.)
Rule 4: `streamReader` never raises: pyspark's stream runner would report its own UnboundLocalError ('reader')
instead; an option refused there (endingOffsets, which Spark's Kafka source refuses for streaming) comes back
as a reader that raises it at the query's first call, so it is the first line of the query's exception.
Rule 2: a topic is append-only: a batch write in mode "overwrite" is refused (Spark's Kafka sink refuses it
too). Spark itself refuses its default mode ErrorIfExists for Python sources, so batch writes say
`.mode("append")`. Streaming Complete mode (which Spark passes as overwrite) appends every row each batch,
as Spark's Kafka sink does.
"""

from __future__ import annotations

import dataclasses

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from sparklog.datasource.arrow import spark_schema
from sparklog.datasource.options import (EXACTLY_ONCE, ReadOptions, SparklogOptionError, _lower, parse_read_options,
                                        parse_write_options)

OVERWRITE_REFUSED = (
    'Save mode "overwrite" is not allowed for sparklog: a topic is append-only and cannot be truncated. '
    'Use .mode("append") (Spark refuses its default "errorifexists" for Python data sources).'
)


class SparklogDataSource(DataSource):
    """Read and write sparklog topics from Spark, as with Spark's Kafka source (`format("kafka")`).

    Registration: installing sparklog makes `format("sparklog")` available (pyspark imports the top-level
    `pyspark_sparklog` module and registers its `DefaultSource`); `sparklog.datasource.register(spark)` does
    the same explicitly.

    Example::

        df = (spark.readStream.format("sparklog")
              .option("zookeeper.connect", "localhost:2181")   # or bootstrap.servers
              .option("subscribe", "events")
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", 10000)
              .load())
        query = (df.selectExpr("CAST(value AS STRING)").writeStream.format("parquet")
                 .option("checkpointLocation", "/tmp/ckpt").trigger(availableNow=True).start("/tmp/out"))

        (spark.range(10).selectExpr("CAST(id AS STRING) AS value").write.format("sparklog")
         .option("bootstrap.servers", "localhost:9092").option("topic", "events").mode("append").save())

    Batch writes say `.mode("append")` (Rule 2). Streaming writes take output modes append and complete;
    for update (an aggregation written to a topic) use `foreachBatch(sparklog.datasource.writer.to_sparklog(...))`,
    because pyspark's Python sink cannot declare update mode.
    """

    @classmethod
    def name(cls) -> str:
        return "sparklog"

    def schema(self) -> StructType:
        options = parse_read_options(self.options, streaming=None)  # Rule 1: a read's options fail at load()
        schema = spark_schema(options.include_headers)
        if "valueformat" in _lower(self.options):  # valueFormat=avro types `value` (sparklog.datasource.avro)
            from sparklog.datasource.avro import pin_value_schema

            schema = pin_value_schema(self.options, schema)
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        from sparklog.datasource.batch_reader import SparklogBatchReader

        return SparklogBatchReader(with_columns(parse_read_options(self.options, streaming=False), schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from sparklog.datasource.stream_reader import RefusedStreamReader, SparklogStreamReader

        try:
            options = with_columns(parse_read_options(self.options, streaming=True), schema)
        except SparklogOptionError as exc:  # Rule 4
            return RefusedStreamReader(exc)
        return SparklogStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from sparklog.datasource.writer import SparklogWriter, check_login, validate_schema

        if overwrite:
            raise SparklogOptionError(OVERWRITE_REFUSED)
        options = parse_write_options(self.options)
        validate_schema(schema, options)
        check_login(options)
        if options.delivery_guarantee == EXACTLY_ONCE:
            from sparklog.datasource.exactly_once import ExactlyOnceWriter

            return ExactlyOnceWriter(options)
        return SparklogWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from sparklog.datasource.writer import SparklogStreamWriter, check_login, validate_schema

        options = parse_write_options(self.options)
        validate_schema(schema, options)
        check_login(options)
        if options.delivery_guarantee == EXACTLY_ONCE:
            from sparklog.datasource.exactly_once import ExactlyOnceStreamWriter

            return ExactlyOnceStreamWriter(options)
        return SparklogStreamWriter(options)


def with_columns(options: ReadOptions, schema: StructType | None) -> ReadOptions:
    """`options` reading only the columns `schema` selects (Rule 3)."""
    columns = selected_columns(schema, options) if schema is not None else None
    return options if columns is None else dataclasses.replace(options, columns=columns)


def selected_columns(schema: StructType, options: ReadOptions) -> tuple[str, ...] | None:
    """The column names of a user-supplied `schema`, or None when it is the whole source schema (Rule 3)."""
    full = spark_schema(options.include_headers)
    names = [field.name for field in schema.fields]
    if options.avro_options:  # only the source's own schema, `value` typed by the reader schema
        if names == full.names:
            return None
        raise SparklogOptionError("a user-specified schema cannot be combined with valueFormat=avro: remove .schema()")
    types = {field.name: field.dataType for field in full.fields}
    for field in schema.fields:
        if types.get(field.name) != field.dataType:
            raise SparklogOptionError(
                f"user-specified schema field {field.name} {field.dataType.simpleString()} is not a column of "
                f"sparklog's schema {full.simpleString()}: select some of its columns, with their types")
    if not names or len(set(names)) != len(names):
        raise SparklogOptionError(
            f"a user-specified schema must select each of sparklog's columns at most once, and at least one: {names}")
    return None if names == full.names else tuple(names)
