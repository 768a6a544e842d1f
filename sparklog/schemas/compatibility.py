"""Avro schema resolution as a predicate: can a reader with one schema read data written with another?

Rule 1: `can_read(reader, writer)` follows the Avro specification's "Schema Resolution" rules, the rules
fastavro applies when it reads with a reader schema: so whenever it returns no problems, fastavro reads
every datum of the writer schema with the reader schema (the unit tests hold it to that).
Rule 2: it never raises for an incompatible pair; it returns the list of problems, each naming the path
inside the schema, so a refused registration can say exactly what is wrong.

The rules, in short: primitives match or promote (int -> long, float, double; long -> float, double;
float -> double; string <-> bytes); records match by full name (or a reader alias), every reader field is
read from the writer field of the same name (or alias) or has a default; writer fields the reader lacks
are skipped; enums need every writer symbol in the reader (or a reader default); arrays and maps resolve
their items and values; fixed types need the same name and size; every branch of a writer union must be
readable, and a writer non-union must be readable by some branch of a reader union.
"""

from __future__ import annotations

from typing import Any

# Avro's promotions: writer type -> reader types that read it.
PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
NAMED = {"record", "error", "enum", "fixed"}


def named_types(schema: Any, table: dict | None = None) -> dict[str, dict]:
    """Full name -> definition of every named type inside a parsed (`fastavro.parse_schema`) schema."""
    table = {} if table is None else table
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, table)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in NAMED and "name" in schema:
            table.setdefault(schema["name"], schema)
        for field in schema.get("fields", ()):
            named_types(field["type"], table)
        for key in ("items", "values"):
            if key in schema:
                named_types(schema[key], table)
        if isinstance(kind, (dict, list)):
            named_types(kind, table)
    return table


def can_read(reader: Any, writer: Any) -> list[str]:
    """Problems that stop `reader` from reading data written with `writer`; empty when compatible."""
    return _Resolver(named_types(reader), named_types(writer)).check(reader, writer, "")


class _Resolver:
    def __init__(self, reader_names: dict, writer_names: dict) -> None:
        self.reader_names = reader_names
        self.writer_names = writer_names
        self.assumed: set[tuple[str, str]] = set()  # named pairs under check: recursion assumes success

    def resolve(self, schema: Any, names: dict) -> Any:
        """A reference (a name string) to its definition; `{"type": "int"}` to "int"."""
        while True:
            if isinstance(schema, str) and schema not in PRIMITIVES:
                schema = names.get(schema, schema)
            elif isinstance(schema, dict) and isinstance(schema.get("type"), str) and schema["type"] in PRIMITIVES \
                    and "logicalType" not in schema:
                schema = schema["type"]
            elif isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
                schema = schema["type"]
            else:
                return schema

    def check(self, reader: Any, writer: Any, path: str) -> list[str]:
        reader = self.resolve(reader, self.reader_names)
        writer = self.resolve(writer, self.writer_names)
        if isinstance(writer, list):
            problems = []
            for i, branch in enumerate(writer):
                problems += self.check(reader, branch, f"{path}[writer union branch {i}]")
            return problems
        if isinstance(reader, list):
            for branch in reader:
                if not self.check(branch, writer, path):
                    return []
            return [f"{path or '/'}: no branch of the reader union {_show(reader)} reads the writer's {_show(writer)}"]
        kind_r, kind_w = _kind(reader), _kind(writer)
        if kind_r != kind_w:
            if kind_w in PROMOTIONS and kind_r in PROMOTIONS[kind_w]:
                return []
            return [f"{path or '/'}: the writer's {kind_w} cannot be read as {kind_r}"]
        if kind_r in PRIMITIVES:
            return []
        return getattr(self, f"_{kind_r}")(reader, writer, path)

    def _named_match(self, reader: dict, writer: dict, path: str) -> list[str]:
        names = {reader["name"], *(_aliases(reader))}
        if writer["name"] not in names and writer["name"].rsplit(".", 1)[-1] not in {
            n.rsplit(".", 1)[-1] for n in names
        }:
            return [f"{path or '/'}: the writer's {writer['name']} does not match the reader's {reader['name']}"]
        return []

    def _record(self, reader: dict, writer: dict, path: str) -> list[str]:
        problems = self._named_match(reader, writer, path)
        pair = (reader["name"], writer["name"])
        if problems or pair in self.assumed:
            return problems
        self.assumed.add(pair)
        written = {f["name"]: f for f in writer.get("fields", ())}
        for field in reader.get("fields", ()):
            match = next((written[n] for n in (field["name"], *field.get("aliases", ())) if n in written), None)
            where = f"{path}/{field['name']}"
            if match is not None:
                problems += self.check(field["type"], match["type"], where)
            elif "default" not in field:
                problems.append(f"{where}: field {field['name']!r} is new and has no default")
        return problems

    _error = _record

    def _enum(self, reader: dict, writer: dict, path: str) -> list[str]:
        problems = self._named_match(reader, writer, path)
        missing = [s for s in writer.get("symbols", ()) if s not in reader.get("symbols", ())]
        if missing and "default" not in reader:
            problems.append(f"{path or '/'}: enum {reader['name']} lacks the writer's symbols {missing}")
        return problems

    def _fixed(self, reader: dict, writer: dict, path: str) -> list[str]:
        problems = self._named_match(reader, writer, path)
        if reader.get("size") != writer.get("size"):
            problems.append(f"{path or '/'}: fixed {reader['name']} has size {reader.get('size')}, "
                            f"the writer's {writer.get('size')}")
        return problems

    def _array(self, reader: dict, writer: dict, path: str) -> list[str]:
        return self.check(reader["items"], writer["items"], f"{path}[]")

    def _map(self, reader: dict, writer: dict, path: str) -> list[str]:
        return self.check(reader["values"], writer["values"], f"{path}{{}}")


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    kind = schema.get("type")
    return kind if isinstance(kind, str) else "?"


def _aliases(schema: dict) -> list[str]:
    return list(schema.get("aliases", ()))


def _show(schema: Any) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_show(s) for s in schema) + "]"
    if isinstance(schema, dict):
        return schema.get("name") or _kind(schema)
    return str(schema)
