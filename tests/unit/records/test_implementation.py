"""The codec switch: the compiled codec is built and active here, SPARKLOG_NO_EXTENSIONS selects the pure-Python
one, and the two agree byte for byte, value for value and error for error on anything hypothesis makes up."""

import os
import subprocess
import sys
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparklog.records import batch, implementation
from sparklog.records.batch import HEADER_SIZE, LOG_APPEND_TIME, BatchHeader, Record, build_batch

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
PURE = batch.PYTHON_CODEC
COMPILED = implementation.compiled(PURE, batch.RecordColumns)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(function, *args):
    """What a call gives, comparable across implementations: its result's repr (types included, a memoryview
    as its bytes), or the exception's type and message."""
    try:
        return "returned", repr(plain(function(*args)))
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return "raised", type(exc), str(exc)


def plain(value):
    """`value` with each memoryview in it as ("memoryview", its bytes): a view's repr is its address, which two
    results share only when the allocator happens to reuse it (another thread's allocation in between and they
    differ), and says nothing of what the view holds."""
    if isinstance(value, memoryview):
        return "memoryview", value.tobytes()
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple keeps its type's name
        return type(value).__name__, tuple(plain(item) for item in value)
    if type(value) in (list, tuple):
        return type(value)(plain(item) for item in value)
    return value


def same(name: str, *args):
    compiled, pure = outcome(getattr(COMPILED, name), *args), outcome(getattr(PURE, name), *args)
    assert compiled == pure
    return compiled


# -- the switch ---------------------------------------------------------------------------------------------


def test_the_compiled_codec_is_built_and_active():
    """No silent fallback: the test environment (setup.sh, CI) must have built the extension."""
    import sparklog.records

    assert sparklog.records.COMPILED_UNAVAILABLE is None
    assert sparklog.records.IMPLEMENTATION == implementation.CYTHON == batch.CODEC.name
    assert batch.CODEC.decode_columns.__module__ == "sparklog.records._cbatch"


def test_report_lists_every_kernel_compiled_in_a_fresh_interpreter():
    """The one report (implementation.py Rule 4): every kernel of pyproject.toml's ext-modules, each compiled
    here (the test build has them all), and each pure with the variable's reason under SPARKLOG_NO_EXTENSIONS."""
    import tomllib
    from pathlib import Path

    with open(Path(__file__).resolve().parents[3] / "pyproject.toml", "rb") as file:
        kernels = sorted(module["name"] for module in tomllib.load(file)["tool"]["setuptools"]["ext-modules"])
    script = ("import sparklog.protocol.produce_run, sparklog.client.sendpath; from sparklog.records import "
              "implementation as i; print(sorted((k.module, k.compiled, k.unavailable) for k in i.report()))")
    for variable, expected in ((None, (True, None)), ("1", (False, "SPARKLOG_NO_EXTENSIONS is set"))):
        env = {key: value for key, value in os.environ.items() if key != implementation.NO_EXTENSIONS_VARIABLE}
        env.update({implementation.NO_EXTENSIONS_VARIABLE: variable} if variable else {})
        result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == repr([(kernel, *expected) for kernel in kernels])


def implementation_in_a_fresh_interpreter(variable: str | None) -> list[str]:
    env = {key: value for key, value in os.environ.items() if key != implementation.NO_EXTENSIONS_VARIABLE}
    if variable is not None:
        env[implementation.NO_EXTENSIONS_VARIABLE] = variable
    script = "import sparklog.records as r; print(r.IMPLEMENTATION); print(r.COMPILED_UNAVAILABLE)"
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_environment_variable_selects_the_pure_python_codec():
    assert implementation_in_a_fresh_interpreter("1") == ["python", "SPARKLOG_NO_EXTENSIONS is set"]
    assert implementation_in_a_fresh_interpreter("0") == ["cython", "None"]
    assert implementation_in_a_fresh_interpreter(None) == ["cython", "None"]


def test_an_extension_older_than_its_source_falls_back_and_says_so(monkeypatch):
    from sparklog.records import _cbatch

    monkeypatch.delenv(implementation.NO_EXTENSIONS_VARIABLE, raising=False)  # the outer run's, if set: set below

    def older_bind(*args):
        raise TypeError(f"bind() takes exactly 5 positional arguments ({len(args)} given)")

    monkeypatch.setattr(_cbatch, "bind", older_bind)
    codec, why = implementation.select(PURE, batch.RecordColumns)
    assert codec is PURE and why.startswith("the compiled codec is older than its source")
    monkeypatch.setenv(implementation.NO_EXTENSIONS_VARIABLE, "yes")
    assert implementation.select(PURE, batch.RecordColumns) == (PURE, "SPARKLOG_NO_EXTENSIONS is set")


# -- varints ------------------------------------------------------------------------------------------------

any_int = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(),
    st.sampled_from([INT64_MIN, INT64_MAX, INT64_MAX + 1, INT64_MIN - 1, 0, -1, True]),
)


@FUZZ
@given(value=st.one_of(any_int, st.floats(allow_nan=False), st.none(), st.text(max_size=2)))
def test_encode_varint_agrees(value):
    same("encode_varint", value)


@FUZZ
@given(
    data=st.binary(max_size=14),
    position=st.integers(-3, 15) | st.just(1 << 70),
    kind=st.sampled_from([bytes, bytearray, memoryview]),
)
@example(data=b"\xff" * 9 + b"\x01", position=0, kind=bytes)  # INT64_MIN: a 10-byte varint
@example(data=b"\xff" * 9 + b"\x7f", position=0, kind=bytes)  # 70 bits: more than int64
def test_decode_varint_agrees(data, position, kind):
    same("decode_varint", kind(data), position)


# -- building -----------------------------------------------------------------------------------------------

fields = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.sampled_from([b"\xab" * 8192, b"", b"x" * 63, b"y" * 64]),
    st.binary(max_size=4).map(bytearray),
    st.text(max_size=3),
)
header_values = st.one_of(st.none(), st.binary(max_size=10), st.binary(max_size=3).map(bytearray), st.integers(0, 2))
header_items = st.one_of(
    st.tuples(st.text(max_size=6), header_values),
    st.tuples(st.text(max_size=6), header_values).map(list),
    st.tuples(st.binary(max_size=3), header_values),
    st.just(("\ud800", b"lone surrogate")),
    st.tuples(st.text(max_size=2)),
)
headers = st.one_of(
    st.none(),
    st.just([]),
    st.just(()),
    st.lists(header_items, max_size=3),
    st.lists(header_items, max_size=3).map(tuple),
    st.just("not headers"),
)
stamps = st.one_of(st.none(), any_int, st.floats(allow_nan=False, allow_infinity=False))
valid_headers = st.none() | st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=5)), max_size=2)
valid_for_building = st.lists(
    st.tuples(st.none() | st.binary(max_size=70), st.none() | st.binary(max_size=70), valid_headers,
              st.none() | any_int),
    max_size=6,
)
records = st.one_of(
    st.tuples(fields, fields, headers, stamps),
    st.builds(lambda r: Record(-1, r[3], r[0], r[1], r[2]), st.tuples(fields, fields, headers, stamps)),
    st.tuples(fields, fields, headers),  # too short
    st.just("not a record"),
)


@FUZZ
@given(
    batch_records=st.lists(records, max_size=6)
    | st.lists(st.tuples(fields, fields, headers, stamps), max_size=6)
    | valid_for_building,
    now_ms=st.one_of(st.integers(0, 1 << 41), any_int),
    as_generator=st.booleans(),
)
@example(batch_records=[(None, b"v", None, INT64_MIN), (b"k", None, None, INT64_MAX)], now_ms=0, as_generator=False)
@example(batch_records=[(None, b"v", None, INT64_MAX), (b"k", None, None, None)], now_ms=-1, as_generator=True)
def test_encode_records_agrees(batch_records, now_ms, as_generator):
    compiled = outcome(COMPILED.encode_records, iter(batch_records) if as_generator else batch_records, now_ms)
    pure = outcome(PURE.encode_records, batch_records, now_ms)
    if compiled[0] == "returned":  # the compiled codec gives the section as one part, the pure one in many
        compiled = outcome(joined, COMPILED, batch_records, now_ms)
        pure = outcome(joined, PURE, batch_records, now_ms)
    assert compiled == pure


def joined(codec, batch_records, now_ms):
    parts, count, base_ts, max_ts = codec.encode_records(batch_records, now_ms)
    return b"".join(parts), count, base_ts, max_ts


def mixed_record(i: int, timestamp: int) -> tuple:
    """Keys, values of 0 to 299 bytes (1- and 2-byte lengths), a header on every 7th record."""
    return b"k%d" % i, b"v" * (i % 300), [("trace", b"%d" % i)] if i % 7 == 0 else None, timestamp


def test_build_batch_is_byte_identical_on_a_large_batch():
    many = [mixed_record(i, 1000 + i) for i in range(5000)]
    assert joined(COMPILED, many, 0) == joined(PURE, many, 0)
    for compression in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert COMPILED.build_batch(many, compression, 7) == PURE.build_batch(many, compression, 7)


def test_build_batch_has_the_pure_signature():
    """The compiled build_batch repeats the pure one's parameters and defaults: they must not drift apart."""
    import inspect

    def parameters(function):
        return [(p.name, p.default, p.kind) for p in inspect.signature(function).parameters.values()]

    assert parameters(COMPILED.build_batch) == parameters(PURE.build_batch)


header_fields = st.one_of(st.integers(-2, 2), any_int, st.sampled_from([1 << 15, -(1 << 15) - 1, 1 << 31, None, 1.0]))


@FUZZ
@given(
    batch_records=st.lists(st.tuples(fields, fields, headers, any_int), max_size=4) | valid_for_building.filter(
        lambda built: all(record[3] is not None for record in built)),
    compression=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd", 0, 3, "brotli", 9]),
    numbers=st.tuples(header_fields, st.sampled_from([0, 1, 2, True, 1.0, None]), header_fields, header_fields,
                      header_fields, header_fields),
    flags=st.tuples(st.booleans(), st.sampled_from([False, True, 0, 1, "", "x"])),
)
@example(batch_records=[(None, b"v", None, 1)], compression="none", numbers=(0, 0, -1, -1, -1, -1),
         flags=(False, False))
def test_build_batch_agrees(batch_records, compression, numbers, flags):
    """Explicit timestamps only: a None one means now, which two calls may read differently."""
    base_offset, timestamp_type, producer_id, producer_epoch, base_sequence, leader_epoch = numbers
    same("build_batch", batch_records, compression, base_offset, timestamp_type, producer_id, producer_epoch,
         base_sequence, leader_epoch, *flags)


# -- decoding -----------------------------------------------------------------------------------------------

valid_records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=20),
        valid_headers,
        st.integers(INT64_MIN >> 1, INT64_MAX >> 1),
    ),
    min_size=1,
    max_size=5,
)
damage = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3)


def header(base_offset, base_ts, max_ts, count, attributes) -> BatchHeader:
    return BatchHeader(base_offset, 0, -1, 2, 0, attributes, max(count - 1, 0), base_ts, max_ts, -1, -1, -1, count)


@FUZZ
@given(
    built=valid_records,
    writes=damage,
    cut=st.integers(-5, 0),
    extra=st.binary(max_size=3),
    count_change=st.sampled_from([0, 0, 0, -1, 1, 100]),
    base_offset=st.sampled_from([0, 5, INT64_MAX - 2, INT64_MIN]),
    base_ts=st.sampled_from([0, INT64_MAX, INT64_MIN, 1_700_000_000_000]),
    attributes=st.sampled_from([0, LOG_APPEND_TIME << 3]),
)
def test_decode_columns_agrees_on_damaged_sections(built, writes, cut, extra, count_change, base_offset, base_ts,
                                                   attributes):
    section = bytearray(build_batch(built)[HEADER_SIZE:])
    for position, value in writes:
        section[position % len(section)] = value
    section = bytes(section[: len(section) + cut] + extra) if cut else bytes(section + extra)
    batch_header = header(base_offset, base_ts, 42, len(built) + count_change, attributes)
    same("decode_columns", section, batch_header)


@FUZZ
@given(section=st.binary(max_size=60), count=st.integers(-1, 6), attributes=st.sampled_from([0, 8]))
def test_decode_columns_agrees_on_random_bytes(section, count, attributes):
    same("decode_columns", section, header(7, 1000, 2000, count, attributes))


class Row(NamedTuple):
    """A consumer's record: what decode_records builds, (topic, partition) then the record's five fields."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple


@FUZZ
@given(
    built=valid_records,
    writes=damage,
    cut=st.integers(-5, 0),
    count_change=st.sampled_from([0, 0, 0, -1, 1, 100]),
    base_offset=st.sampled_from([0, 5, INT64_MAX - 2, INT64_MIN]),
    base_ts=st.sampled_from([0, INT64_MAX, INT64_MIN, 1_700_000_000_000]),
    attributes=st.sampled_from([0, LOG_APPEND_TIME << 3]),
)
def test_decode_records_agrees_on_damaged_sections(built, writes, cut, count_change, base_offset, base_ts,
                                                   attributes):
    section = bytearray(build_batch(built)[HEADER_SIZE:])
    for position, value in writes:
        section[position % len(section)] = value
    section = bytes(section[: len(section) + cut]) if cut else bytes(section)
    batch_header = header(base_offset, base_ts, 42, len(built) + count_change, attributes)
    result = same("decode_records", section, batch_header, ("topic", 7), Row)
    if not writes and not cut and not count_change:
        assert result[0] == "returned"


@FUZZ
@given(section=st.binary(max_size=60), count=st.integers(-1, 6), attributes=st.sampled_from([0, 8]))
def test_decode_records_agrees_on_random_bytes(section, count, attributes):
    same("decode_records", section, header(7, 1000, 2000, count, attributes), ("t", 0), Row)


@pytest.mark.parametrize("prefix, cls", [(["t", 0], Row), (("t", 0), list), (("t", 0), "Row"), ((), tuple)])
def test_decode_records_of_other_prefixes_and_classes_defers_to_python(prefix, cls):
    section = build_batch([(b"k", b"v", None, 3)])[HEADER_SIZE:]
    same("decode_records", section, header(0, 0, 3, 1, 0), prefix, cls)


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_decode_columns_of_other_buffers_defers_to_python(kind):
    section = build_batch([(b"k", b"v", None, 3)])[HEADER_SIZE:]
    assert same("decode_columns", kind(section), header(0, 0, 3, 1, 0))[0] == "returned"


def test_valid_input_never_leaves_the_fast_path():
    """The agreement above would hold trivially if the compiled codec deferred everything to Python."""
    from sparklog.records import _cbatch

    def deferred(*args):
        raise AssertionError(f"deferred to Python: {args!r:.80}")

    many = [mixed_record(i, 1000 - i) for i in range(500)]
    many.append(Record(0, 7, None, None, (("h", None),)))
    shared = (implementation.codec_id, implementation.compress, implementation.crc32c, implementation.time.time_ns)
    _cbatch.bind(implementation.Codec("deferred", *[deferred] * 7), batch.RecordColumns, *shared)
    try:
        parts, count, base_ts, max_ts = _cbatch.encode_records(many, 5)
        built = [_cbatch.build_batch(many, compression, 9) for compression in ("none", "lz4")]
        (decoded,) = batch.iter_batches(PURE.build_batch(many, base_offset=9, timestamp_type=LOG_APPEND_TIME))
        columns = _cbatch.decode_columns(decoded.raw[HEADER_SIZE:].tobytes(), decoded)
        varints = _cbatch.encode_varint(INT64_MIN), _cbatch.decode_varint(b"\x80\x01", 0)
        rows = _cbatch.decode_records(decoded.raw[HEADER_SIZE:].tobytes(), decoded, ("t", 3), Row)
    finally:
        implementation.compiled(PURE, batch.RecordColumns)
    assert varints == (b"\xff" * 9 + b"\x01", (64, 2))
    assert built == [PURE.build_batch(many, compression, 9) for compression in ("none", "lz4")]
    assert (count, base_ts, max_ts) == (501, 1000, 1000) and len(parts) == 1
    assert columns.offsets == list(range(9, 510)) and columns.timestamps == [1000] * 501
    assert columns.headers[0] == (("trace", b"0"),) and columns.headers[-1] == (("h", None),)
    assert rows == [Row("t", 3, *column) for column in zip(*columns)] and type(rows[0]) is Row


def test_decode_chunk_takes_plain_batches_in_bulk_and_stops_at_the_first_it_does_not_take():
    """The bulk step of batch.chunk_tuples (whose agreement with tuples_in_range test_batch.py checks under
    both codecs): it must really take plain batches, or that agreement would hold trivially."""
    from sparklog.records import _cbatch

    plain = [bytearray(PURE.build_batch([(None, b"%d" % (3 * n + i), None, 9) for i in range(3)])) for n in range(3)]
    for n, raw in enumerate(plain):
        batch.set_base_offset(raw, 3 * n)
    data = b"".join(plain)
    records, position = _cbatch.decode_chunk(data, 0, 4, ("t", 1), Row, True)
    assert position == len(data) and records == [Row("t", 1, o, 9, None, b"%d" % o, ()) for o in range(4, 9)]
    marker = PURE.build_batch([(None, b"", None, 1)], is_control=True)
    compressed = PURE.build_batch([(None, b"v", None, 1)], "gzip")
    bad = bytearray(plain[0])
    bad[-2] ^= 1  # a value byte: still well-formed, no longer matching the CRC-32C
    for stopper in (marker, compressed, bytes(bad), plain[0][:-1]):
        records, position = _cbatch.decode_chunk(bytes(plain[0]) + stopper, 0, 0, ("t", 1), Row, True)
        assert position == len(plain[0]) and len(records) == 3
    assert _cbatch.decode_chunk(bytes(plain[0]) + bytes(bad), 0, 0, ("t", 1), Row, False)[1] == 2 * len(bad)
