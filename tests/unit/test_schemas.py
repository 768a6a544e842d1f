"""sparklog.schemas: the framing, the compatibility rules (held to fastavro's own resolution), and the
registry against a real ZooKeeper (ids stable, incompatible versions refused, concurrent registration)."""

from __future__ import annotations

import io
import json
import threading

import fastavro
import pytest
from fastavro.read import SchemaResolutionError
from hypothesis import given, settings, strategies as st

from sparklog.schemas import (
    FramingError,
    IncompatibleSchema,
    SchemaRegistry,
    UnknownSchema,
    can_read,
    canonical,
    encode,
    split,
)
from sparklog.schemas.framing import decode_body

VIEW_V1 = {"type": "record", "name": "PageView", "namespace": "sparklog.events", "fields": [
    {"name": "member_id", "type": "long"},
    {"name": "page", "type": "string"},
    {"name": "count", "type": "int"},
]}
VIEW_V2 = {**VIEW_V1, "fields": VIEW_V1["fields"] + [{"name": "agent", "type": ["null", "string"], "default": None}]}
VIEW_V3_PROMOTED = {**VIEW_V2, "fields": [
    {"name": "member_id", "type": "long"}, {"name": "page", "type": "string"}, {"name": "count", "type": "double"},
    {"name": "agent", "type": ["null", "string"], "default": None},
]}
VIEW_BAD = {**VIEW_V1, "fields": VIEW_V1["fields"] + [{"name": "session", "type": "string"}]}  # no default


def avro_bytes(schema, datum) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


def fastavro_reads(reader, writer, datum) -> bool:
    """The oracle: does fastavro resolve `datum` written with `writer` into `reader`?"""
    try:
        fastavro.schemaless_reader(io.BytesIO(avro_bytes(writer, datum)), fastavro.parse_schema(writer),
                                   fastavro.parse_schema(reader))
    except SchemaResolutionError:
        return False
    return True


# -- framing


def test_framing_round_trip_and_header_layout():
    schema = fastavro.parse_schema(VIEW_V1)
    datum = {"member_id": 7, "page": "/jobs", "count": 3}
    payload = encode(258, schema, datum)
    assert payload[:5] == b"\x00\x00\x00\x01\x02"  # magic 0, id 258 big-endian
    schema_id, body = split(payload)
    assert schema_id == 258 and bytes(body) == avro_bytes(VIEW_V1, datum)
    assert decode_body(body, schema) == datum


@pytest.mark.parametrize("payload, message", [
    (b"", "shorter than"), (b"\x00\x00\x01", "shorter than"), (b"\x01\x00\x00\x00\x01x", "unknown magic byte 1"),
    (b'{"json": 1}', "unknown magic byte"),
])
def test_framing_refuses_what_is_not_framed(payload, message):
    with pytest.raises(FramingError, match=message):
        split(payload)


def test_framing_refuses_an_id_that_does_not_fit():
    with pytest.raises(ValueError):
        encode(2**32, fastavro.parse_schema("string"), "x")


# -- canonical form


def test_canonical_form_ignores_layout_and_namespace_spelling():
    spaced = json.dumps(VIEW_V1, indent=4)
    reordered = {"fields": VIEW_V1["fields"], "name": "sparklog.events.PageView", "type": "record"}
    assert canonical(spaced) == canonical(VIEW_V1) == canonical(reordered)


def test_canonical_form_keeps_defaults():
    with_default = {**VIEW_V1, "fields": [{**VIEW_V1["fields"][0], "default": 0}] + VIEW_V1["fields"][1:]}
    assert canonical(with_default) != canonical(VIEW_V1)


# -- compatibility, held to fastavro


PAIRS = [  # (reader, writer, datum written, compatible)
    (VIEW_V2, VIEW_V1, {"member_id": 1, "page": "/", "count": 2}, True),  # added field with a default
    (VIEW_V1, VIEW_V2, {"member_id": 1, "page": "/", "count": 2, "agent": "x"}, True),  # dropped field
    (VIEW_V3_PROMOTED, VIEW_V2, {"member_id": 1, "page": "/", "count": 2, "agent": None}, True),  # int -> double
    (VIEW_BAD, VIEW_V1, {"member_id": 1, "page": "/", "count": 2}, False),  # added field, no default
    (VIEW_V2, VIEW_V3_PROMOTED, {"member_id": 1, "page": "/", "count": 2.5, "agent": None}, False),  # narrowing
    ("long", "int", 5, True), ("int", "long", 5, False), ("bytes", "string", "a", True), ("string", "bytes", b"a", True),
    (["null", "long"], "int", 3, True), ("long", ["null", "int"], None, False),
    ({"type": "array", "items": "double"}, {"type": "array", "items": "float"}, [1.5], True),
    ({"type": "map", "values": "int"}, {"type": "map", "values": "long"}, {"a": 1}, False),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, {"type": "enum", "name": "E", "symbols": ["A"]}, "A", True),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, {"type": "enum", "name": "E", "symbols": ["A", "B"]}, "B", False),
    ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 2}, b"ab", False),
]


@pytest.mark.parametrize("reader, writer, datum, compatible", PAIRS)
def test_can_read_agrees_with_fastavro(reader, writer, datum, compatible):
    problems = can_read(fastavro.parse_schema(reader), fastavro.parse_schema(writer))
    assert (not problems) == compatible, problems
    assert fastavro_reads(reader, writer, datum) == compatible


def test_problems_name_the_field():
    problems = can_read(fastavro.parse_schema(VIEW_BAD), fastavro.parse_schema(VIEW_V1))
    assert problems == ["/fields/3: field 'session' is new and has no default"]


TYPES = ["int", "long", "float", "double", "string", "bytes", "boolean"]
VALUES = {"int": 7, "long": 2**40, "float": 1.5, "double": 2.25, "string": "s", "bytes": b"b", "boolean": True}


@st.composite
def evolutions(draw):
    """A writer record and a reader record that adds, drops and retypes fields at random."""
    names = draw(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=5, unique=True))
    writer = [{"name": n, "type": draw(st.sampled_from(TYPES))} for n in names]
    reader = []
    for field in writer:
        if draw(st.booleans()):  # keep (maybe retyped)
            reader.append({"name": field["name"], "type": draw(st.sampled_from(TYPES + [field["type"]] * 3))})
    for n in draw(st.lists(st.sampled_from("uvwxyz"), max_size=2, unique=True)):
        t = draw(st.sampled_from(TYPES))
        reader.append({"name": n, "type": t, **({"default": VALUES[t] if t != "bytes" else "b"}
                                                 if draw(st.booleans()) else {})})
    record = lambda fields: {"type": "record", "name": "R", "fields": fields}  # noqa: E731
    return record(reader), record(writer), {f["name"]: VALUES[f["type"]] for f in writer}


@settings(max_examples=200, deadline=None)
@given(evolutions())
def test_can_read_agrees_with_fastavro_on_random_evolutions(case):
    reader, writer, datum = case
    problems = can_read(fastavro.parse_schema(reader), fastavro.parse_schema(writer))
    assert (not problems) == fastavro_reads(reader, writer, datum), problems


# -- the registry in ZooKeeper


def test_same_schema_same_id_and_ids_are_immutable(zk):
    registry = SchemaRegistry(zk)
    first = registry.register(VIEW_V1)
    assert registry.register(json.dumps(VIEW_V1, indent=2)) == first
    second = registry.register(VIEW_V2)
    assert second != first
    stored_first = zk.get(f"/schemas/ids/{first}")[0]
    assert registry.register(VIEW_V1) == first and zk.get(f"/schemas/ids/{first}")[0] == stored_first
    assert registry.id_of(VIEW_V2) == second and registry.id_of(VIEW_BAD) is None
    assert json.loads(registry.schema_text(first)) == json.loads(canonical(VIEW_V1))


def test_subject_versions_evolve_backward_compatibly(zk):
    registry = SchemaRegistry(zk)
    v1 = registry.register_version("page_views-value", VIEW_V1)
    v2 = registry.register_version("page_views-value", VIEW_V2)
    v3 = registry.register_version("page_views-value", VIEW_V3_PROMOTED)
    assert [v.version for v in (v1, v2, v3)] == [1, 2, 3]
    assert registry.register_version("page_views-value", VIEW_V2) == v2  # already a version: unchanged
    assert registry.latest("page_views-value") == v3
    assert registry.subjects() == ["page_views-value"]
    assert sorted(zk.get_children("/schemas/subjects/page_views-value/versions")) == ["1", "2", "3"]


def test_incompatible_version_is_refused_and_nothing_is_written(zk):
    registry = SchemaRegistry(zk)
    registry.register_version("views", VIEW_V1)
    ids_before = sorted(zk.get_children("/schemas/ids"))
    with pytest.raises(IncompatibleSchema) as refused:
        registry.register_version("views", VIEW_BAD)
    message = str(refused.value)
    assert "not backward compatible with version 1 of subject 'views'" in message
    assert "field 'session' is new and has no default" in message
    assert [v.version for v in registry.versions("views")] == [1]
    assert sorted(zk.get_children("/schemas/ids")) == ids_before


def test_unknown_ids_and_subjects(zk):
    registry = SchemaRegistry(zk)
    with pytest.raises(UnknownSchema):
        registry.schema(99)
    with pytest.raises(UnknownSchema):
        registry.latest("nothing")


def test_concurrent_registration_of_one_schema_gets_one_id(zk_connect):
    registries = [SchemaRegistry.open(zk_connect) for _ in range(6)]
    results, barrier = [], threading.Barrier(len(registries))

    def register(registry):
        barrier.wait()
        results.append((registry.register(VIEW_V2), registry.register_version("s", VIEW_V2).version))

    try:
        threads = [threading.Thread(target=register, args=(r,)) for r in registries]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(results) == 6 and len(set(results)) == 1, results
        assert len(registries[0].zk.get_children("/schemas/ids")) == 1
    finally:
        for r in registries:
            r.close()


def test_concurrent_registration_of_different_schemas_gets_distinct_ids(zk_connect):
    schemas = [{"type": "record", "name": f"R{i}", "fields": [{"name": "x", "type": "int"}]} for i in range(6)]
    registries = [SchemaRegistry.open(zk_connect) for _ in schemas]
    ids, barrier = {}, threading.Barrier(len(schemas))

    def register(i):
        barrier.wait()
        ids[i] = registries[i].register(schemas[i])

    try:
        threads = [threading.Thread(target=register, args=(i,)) for i in range(len(schemas))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(ids.values()) == list(range(1, 7))
        assert all(registries[0].schema_text(ids[i]) == canonical(schemas[i]) for i in ids)
    finally:
        for r in registries:
            r.close()


def test_encode_decode_resolves_and_caches_each_schema_once(zk):
    registry = SchemaRegistry(zk)
    old = registry.register_version("views", VIEW_V1).schema_id
    new = registry.register_version("views", VIEW_V2).schema_id
    payload = registry.encode(old, {"member_id": 1, "page": "/", "count": 2})
    reader = SchemaRegistry(zk)
    fetched = []
    original_get = zk.get
    zk.get = lambda path, *a, **k: (fetched.append(path), original_get(path, *a, **k))[1]
    try:
        for _ in range(3):
            assert reader.decode(payload, reader.schema(new)) == {"member_id": 1, "page": "/", "count": 2, "agent": None}
    finally:
        zk.get = original_get
    assert sorted(fetched) == sorted([f"/schemas/ids/{new}", f"/schemas/ids/{old}"])


# -- compatibility on random schema trees (unions, enums, fixed, arrays, maps, nested records), held to fastavro

LEAVES = ["null", "boolean", "int", "long", "float", "double", "string", "bytes"]
LEAF_VALUES = {"null": None, "boolean": True, "int": 7, "long": 2**40, "float": 1.5, "double": 2.25,
               "string": "s", "bytes": b"b"}


@st.composite
def avro_types(draw, path="T", depth=0):
    """A random Avro type; named types are named by their kind and path, so a reader and a writer drawn alike
    match names. (Never one name for two kinds: fastavro resolves named types by name alone, and reads a
    writer's enum "T" with a reader's fixed "T" as garbage or a KeyError, where Avro's rules say type mismatch.)"""
    kinds = ["leaf"] * 4 + (["union", "enum", "fixed", "array", "map", "record"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "leaf":
        return draw(st.sampled_from(LEAVES))
    if kind == "union":
        return draw(st.lists(st.sampled_from(LEAVES), min_size=1, max_size=3, unique=True))
    if kind == "enum":
        enum = {"type": "enum", "name": f"E{path}", "symbols": draw(st.lists(st.sampled_from("ABC"), min_size=1, unique=True))}
        return {**enum, "default": enum["symbols"][0]} if draw(st.booleans()) else enum
    if kind == "fixed":
        return {"type": "fixed", "name": f"F{path}", "size": draw(st.sampled_from([2, 4]))}
    if kind in ("array", "map"):
        key = "items" if kind == "array" else "values"
        return {"type": kind, key: draw(avro_types(path=f"{path}_{key}", depth=depth + 1))}
    fields = []
    for name in draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True)):
        field_type = draw(avro_types(path=f"{path}_{name}", depth=depth + 1))
        field = {"name": name, "type": field_type}
        if draw(st.booleans()):
            field["default"] = _default(field_type)
        fields.append(field)
    return {"type": "record", "name": f"R{path}", "fields": fields}


def _default(schema):
    """A valid default (JSON: bytes and fixed as strings); a union's default is of its first branch."""
    value = avro_datum(schema[0] if isinstance(schema, list) else schema, 0)
    return json.loads(json.dumps(value, default=lambda b: b.decode("latin-1")))


def avro_datum(schema, choice: int):
    """A datum of `schema`; `choice` picks union branches and enum symbols, so choices 0..3 cover them all."""
    if isinstance(schema, str):
        return LEAF_VALUES[schema]
    if isinstance(schema, list):
        return avro_datum(schema[choice % len(schema)], choice)
    kind = schema["type"]
    if kind == "enum":
        return schema["symbols"][choice % len(schema["symbols"])]
    if kind == "fixed":
        return b"x" * schema["size"]
    if kind == "array":
        return [avro_datum(schema["items"], choice)]  # never empty: an empty array reads under any items type
    if kind == "map":
        return {"k": avro_datum(schema["values"], choice)}
    return {f["name"]: avro_datum(f["type"], choice) for f in schema["fields"]}


@settings(max_examples=400, deadline=None)
@given(avro_types(), avro_types())
def test_can_read_agrees_with_fastavro_on_random_schema_trees(reader, writer):
    """Compatible exactly when fastavro reads every covering datum of the writer schema with the reader schema."""
    problems = can_read(reader, writer)
    readable = all(fastavro_reads(reader, writer, avro_datum(writer, choice)) for choice in range(4))
    assert (not problems) == readable, (reader, writer, problems)


@st.composite
def evolved(draw, schema):
    """`schema` changed at random the ways schemas evolve: fields added (with or without a default), dropped or
    retyped; enum symbols dropped or added, or a default given; union branches dropped or added; sizes and leaf
    types changed. Names stay, so what is tested is the resolution of like-named types."""
    if isinstance(schema, str):
        return draw(st.sampled_from([schema] * 3 + LEAVES))
    if isinstance(schema, list):
        branches = draw(st.lists(st.sampled_from(LEAVES), min_size=1, max_size=4, unique=True))
        return draw(st.sampled_from([schema, branches, sorted(set(schema) | {"null"})]))
    kind, changed = schema["type"], dict(schema)
    if kind == "enum":
        symbols = draw(st.sampled_from([schema["symbols"], schema["symbols"][:-1] or ["A"],
                                        sorted(set(schema["symbols"]) | {"C"})]))
        changed = {k: v for k, v in schema.items() if k != "default"} | {"symbols": symbols}
        if draw(st.booleans()):
            changed["default"] = symbols[0]
    elif kind == "fixed":
        changed["size"] = draw(st.sampled_from([schema["size"], 2, 4]))
    elif kind in ("array", "map"):
        key = "items" if kind == "array" else "values"
        changed[key] = draw(evolved(schema[key]))
    elif kind == "record":
        fields = [_retyped(f, draw(evolved(f["type"]))) for f in schema["fields"] if draw(st.integers(0, 4))]
        if draw(st.booleans()):
            fields.append({"name": "z", "type": "long", **({"default": 0} if draw(st.booleans()) else {})})
        changed["fields"] = fields
    return changed


def _retyped(field, field_type):
    return {**field, "type": field_type, **({"default": _default(field_type)} if "default" in field else {})}


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_can_read_agrees_with_fastavro_on_evolved_schema_trees(data):
    """A writer and its evolution as the reader, or the other way round (mostly like-shaped pairs, which random
    pairs rarely are): compatible exactly when fastavro reads every covering datum."""
    schema = data.draw(avro_types())
    reader, writer = data.draw(st.permutations([schema, data.draw(evolved(schema))]))
    problems = can_read(reader, writer)
    readable = all(fastavro_reads(reader, writer, avro_datum(writer, choice)) for choice in range(4))
    assert (not problems) == readable, (reader, writer, problems)
