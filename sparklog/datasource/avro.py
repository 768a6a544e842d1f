"""`valueFormat=avro`: framed Avro values (magic 0, schema id, Avro binary) decoded into a typed `value` struct.

    spark.readStream.format("sparklog").option("zookeeper.connect", zk).option("subscribe", "activity")
        .option("valueFormat", "avro").option("subject", "activity-value").load()
        .select("value.*")

Rule 1: one reader schema per DataFrame: the subject's latest version (or `subjectVersion`), or
`valueSchemaId`. `schema()` resolves it in the driver and pins its id in the options
(`sparklog.avro.readerSchemaId`), which Spark ships with the data source to every task, so the typed columns
the tasks build are the ones Spark declared even if the subject gains a version meanwhile.
Rule 2: every record is read with its own writer schema (the id in its framing) resolved to the reader
schema by Avro's rules; each schema is fetched from the registry once per task (`SchemaRegistry` caches
per id), not once per record.
Rule 3: a value that is not framed Avro, or whose schema cannot be resolved to the reader's, fails the task
naming topic, partition and offset; a null value (a tombstone) is a null struct.
The registry lives in ZooKeeper, so these options need `zookeeper.connect`.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparklog.datasource.options import (  # noqa: F401 - re-exported: the Avro options are declared there
    AVRO_OPTIONS,
    FORMATS,
    PINNED_ID,
    READ_OPTIONS,
    AvroValueError,
    kafka_setting,
    value_format,
)

_PRIMITIVES = {"boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
               "double": DoubleType(), "bytes": BinaryType(), "string": StringType(), "null": NullType()}
_LOGICAL = {"timestamp-millis": TimestampType(), "timestamp-micros": TimestampType(), "date": DateType()}


def _option(opts: Mapping[str, str], name: str) -> Any:
    """The option `name` as its declaration (options.READ_OPTIONS) parses it: the value load() checked."""
    return READ_OPTIONS.value(opts, name)


def reader_schema_id(registry, opts: Mapping[str, str]) -> int:
    """Rule 1: the pinned id, else `valueSchemaId`, else the subject's `subjectVersion` or latest version."""
    if opts.get(PINNED_ID) is not None:  # not an option: written by pin_value_schema, from an int
        return int(opts[PINNED_ID])
    schema_id = _option(opts, "valueSchemaId")
    if schema_id is not None:
        return int(schema_id)
    subject, version = _option(opts, "subject"), _option(opts, "subjectVersion")
    if version is not None:
        return int(registry.version(subject, version).schema_id)
    return int(registry.latest(subject).schema_id)


def _zookeeper(opts: Mapping[str, str]) -> str | None:
    return kafka_setting(opts, "zookeeper.connect")


def pin_value_schema(options, spark_schema: StructType) -> StructType:
    """For `DataSource.schema()`: `spark_schema` with `value` typed by the reader schema, pinned (Rule 1).

    `options` is the data source's own (mutable, case-insensitive) option map; the pin is written into it.
    """
    from sparklog.schemas import SchemaRegistry

    opts = {str(k).lower(): v for k, v in dict(options).items() if v is not None}
    if value_format(opts) != "avro":
        return spark_schema
    with SchemaRegistry.open(_zookeeper(opts)) as registry:
        schema_id = reader_schema_id(registry, opts)
        value_type = spark_type(registry.schema(schema_id))
    options[PINNED_ID] = str(schema_id)
    return StructType([StructField("value", value_type) if f.name == "value" else f for f in spark_schema.fields])


def spark_type(schema: Any, names: dict | None = None) -> DataType:
    """The Spark type of a parsed Avro schema (as Spark's `from_avro` maps them; every field nullable)."""
    names = {} if names is None else names
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in names:
            return spark_type(names[schema], names)
        raise AvroValueError(f"unknown Avro type {schema!r}")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return spark_type(branches[0], names)
        raise AvroValueError(f"Avro union {schema} has more than one non-null branch: not supported")
    kind = schema["type"]
    if schema.get("logicalType") in _LOGICAL:
        return _LOGICAL[schema["logicalType"]]
    if schema.get("logicalType") == "decimal":
        return DecimalType(schema["precision"], schema.get("scale", 0))
    if kind in ("record", "error"):
        names[schema["name"]] = schema
        return StructType([StructField(f["name"], spark_type(f["type"], names)) for f in schema["fields"]])
    if kind == "enum":
        return StringType()
    if kind == "fixed":
        return BinaryType()
    if kind == "array":
        return ArrayType(spark_type(schema["items"], names))
    if kind == "map":
        return MapType(StringType(), spark_type(schema["values"], names))
    return spark_type(kind, names)


class ValueDecoder:
    """Decodes the `value` column of the fetcher's Arrow batches into the reader schema's struct (Rules 2, 3)."""

    def __init__(self, opts: Mapping[str, str]) -> None:
        from pyspark.sql.pandas.types import to_arrow_type

        from sparklog.schemas import SchemaRegistry

        self.registry = SchemaRegistry.open(_zookeeper(opts))
        self.reader_id = reader_schema_id(self.registry, opts)
        self.reader = self.registry.schema(self.reader_id)
        self.arrow_type = to_arrow_type(spark_type(self.reader), timezone="UTC")

    def close(self) -> None:
        self.registry.close()

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        from sparklog.schemas import framing

        index = batch.schema.get_field_index("value")
        values = batch.column(index).to_pylist()
        decoded = []
        for row, payload in enumerate(values):
            if payload is None:
                decoded.append(None)
                continue
            try:
                schema_id, body = framing.split(payload)
                reader = None if schema_id == self.reader_id else self.reader  # no resolution needed: faster
                decoded.append(framing.decode_body(body, self.registry.schema(schema_id), reader))
            except Exception as exc:
                where = (f"{batch.column(batch.schema.get_field_index('topic'))[row]}-"
                         f"{batch.column(batch.schema.get_field_index('partition'))[row]} offset "
                         f"{batch.column(batch.schema.get_field_index('offset'))[row]}")
                raise AvroValueError(f"cannot decode the Avro value at {where}: {exc}") from exc
        column = pa.array(decoded, type=self.arrow_type)
        fields = list(batch.schema)
        fields[index] = pa.field("value", self.arrow_type)
        columns = list(batch.columns)
        columns[index] = column
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def decode_values(opts: Mapping[str, str], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The fetcher's batches with `value` decoded; the registry connection is closed when they end."""
    decoder = ValueDecoder(opts)
    try:
        for batch in batches:
            yield decoder.decode(batch)
    finally:
        decoder.close()
