"""Avro schema compatibility: can a reader with one schema read data written with another, and the
compatibility levels of a schema registry built on that predicate.

The rules themselves are Apache Avro's: `avro.compatibility.ReaderWriterCompatibilityChecker`, the official
Python port of Avro's Java `SchemaCompatibility`, which Confluent's registry runs for its Avro checks. This
module only adapts it (parsed schemas in, a list of readable problems out) and defines the levels.

Rule 1: `can_read(reader, writer)` follows the Avro specification's "Schema Resolution" rules, the rules
fastavro applies when it reads with a reader schema: so whenever it returns no problems, fastavro reads
every datum of the writer schema with the reader schema (the unit tests hold it to that, by property).
Rule 2: it never raises for an incompatible pair; it returns the list of problems, each naming the location
inside the schema (a JSON pointer into the reader schema), so a refused registration says what is wrong.
Rule 3: `problems(level, new, previous)` checks a new schema against a subject's earlier schemas (oldest
first) as Confluent's levels do: BACKWARD, the new schema reads the latest; FORWARD, the latest reads the
new; FULL, both; each _TRANSITIVE variant against every earlier version, not just the latest; NONE, nothing.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType, SchemaIncompatibilityType

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"  # Confluent's global default

_WHAT = {
    SchemaIncompatibilityType.reader_field_missing_default_value: "field {!r} is new and has no default",
    SchemaIncompatibilityType.missing_enum_symbols: "the reader's enum lacks the writer's symbols {}",
    SchemaIncompatibilityType.missing_union_branch: "the reader's union has no branch for the writer's {}",
    SchemaIncompatibilityType.fixed_size_mismatch: "fixed sizes differ: {}",
    SchemaIncompatibilityType.name_mismatch: "names differ: {}",
    SchemaIncompatibilityType.type_mismatch: "{}",
}


def can_read(reader: Any, writer: Any) -> list[str]:
    """Problems that stop `reader` from reading data written with `writer`; empty when compatible.

    Either schema may be JSON text or the parsed form (`json.loads`, or `fastavro.parse_schema`'s).
    """
    result = ReaderWriterCompatibilityChecker().get_compatibility(parse(reader), parse(writer))
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    where, messages = ", ".join(sorted(result.locations - {"/"}) or ["/"]), sorted(result.messages)
    if len(result.incompatibilities) == 1:  # the checker keeps no pairing of messages to locations: one is exact
        return [f"{where}: {_WHAT[result.incompatibilities[0]].format(messages[0])}"]
    kinds = ", ".join(sorted({kind.value for kind in result.incompatibilities}))
    return [f"{where}: {kinds}: {'; '.join(messages)}"]


def problems(level: str, new: Any, previous: Sequence[Any]) -> list[str]:
    """Problems with registering `new` after `previous` (oldest first) under `level` (Rule 3)."""
    if level not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}: one of {', '.join(LEVELS)}")
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    found: list[str] = []
    for old in reversed(against):  # newest first, as Confluent reports
        if level.startswith(("BACKWARD", "FULL")):
            found += [f"reading the old schema: {p}" for p in can_read(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            found += [f"the old schema reading: {p}" for p in can_read(old, new)]
    return found


def parse(schema: Any) -> avro.schema.Schema:
    """`schema` (JSON text or its parsed form) as Apache Avro's parser reads it; raises its parse errors."""
    text = schema if isinstance(schema, str) and schema.lstrip()[:1] in ("{", "[", '"') else None
    if text is None:
        text = json.dumps(_plain(schema))
    return avro.schema.parse(text)


def _plain(schema: Any) -> Any:
    """A schema without fastavro's private keys (`__fastavro_parsed`, `__named_schemas`)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if not k.startswith("__")}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema
