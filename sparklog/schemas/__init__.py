"""Avro schemas for sparklog payloads: a registry in ZooKeeper, compatibility rules, the framing, and the
Confluent REST API over the registry (`rest`, sans-IO, and its HTTP edge `http_server`).

    from sparklog.schemas import SchemaRegistry, IncompatibleSchema, encode, split

Layering: imports `sparklog.coordination` only; the data source and the jobs build on it.
"""

from sparklog.schemas.compatibility import can_read
from sparklog.schemas.framing import FramingError, decode_body, encode, split
from sparklog.schemas.registry import (
    IncompatibleSchema,
    SchemaRegistry,
    SchemaRegistryError,
    SchemaVersion,
    UnknownSchema,
    canonical,
    fingerprint,
)

__all__ = ["SchemaRegistry", "SchemaVersion", "SchemaRegistryError", "IncompatibleSchema", "UnknownSchema",
           "FramingError", "can_read", "canonical", "fingerprint", "encode", "decode_body", "split"]
