"""Versioned message declarations, compiled per version into straight-line decoders and encoders.

A message is declared as in Kafka's JSON specs (field names in snake_case, version ranges as strings)::

    MetadataRequest = message("MetadataRequest", api_key=3, versions="1-8", flexible="none", fields=[
        F("topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=[
            F("name", "string", "0+"),
        ]),
        F("allow_auto_topic_creation", "bool", "4+", default=True),
    ])

``message`` returns a class; nested struct arrays become classes too, reachable as attributes of the
message class (``MetadataRequest.MetadataRequestTopic``) and named by their spec type. Instances are
plain objects with ``__slots__``: every field of every version is an attribute, constructed by keyword
with the spec default for whatever is not given (so a body built for one version encodes in any other,
fields absent from that version being skipped). ``==`` compares all fields; ``repr`` shows them.

Per version, ``compile`` generates Python source for one decoder and one encoder (nested arrays are
inlined as loops; consecutive fixed-width fields are merged into one ``struct.Struct``), so decoding costs
no per-field interpretation. Contract of the generated functions:

* ``decode(buf: memoryview, pos, end) -> (obj, pos)``; raises ``struct.error``, ``ValueError``
  (``DecodeError``) or ``IndexError`` on bad input, which the registry turns into RemoteProtocolError.
  Every length and count the peer sent is checked against the bytes left before anything is allocated
  for it: an array of ``n`` elements needs ``n`` times the smallest encoding of one element
  (``min_wire_size``), so a 20-byte frame claiming two billion topics is refused at once, and no frame
  can make the decoder build more objects than its own bytes could encode.
  ``records`` fields decode to a ``memoryview`` slice of ``buf`` (no copy); ``bytes`` to ``bytes``.
* ``encode(obj, b: bytearray, chunks: list) -> bytearray``: appends to ``b``. A ``records`` value that is
  not a small buffer (a large bytes/memoryview, or any object with ``__len__`` such as a storage
  ``FileSlice``) is not copied: ``b`` is closed into ``chunks``, the value appended as its own chunk, and
  a fresh bytearray returned for the rest.
"""

from __future__ import annotations

import struct
import uuid
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

from sparklog.protocol.types import TYPES, read_uvarint, write_uvarint

__all__ = ["F", "message", "Versions", "DecodeError", "INLINE_RECORDS_MAX", "Struct"]

# A records value up to this many bytes is copied into the encoder's buffer; a larger one becomes its
# own chunk (writev/sendmsg will gather it), so a 1 MB fetch response is not copied by the codec.
INLINE_RECORDS_MAX = 16 * 1024

_MAX_VERSION = 0x7FFF
_NO_DEFAULT = object()
_LIST_DEFAULT = object()  # sentinel default of array fields: a fresh [] per instance


class DecodeError(ValueError):
    """Bad input found by a generated decoder (a null where not nullable, a length past the end)."""


class Versions:
    """A version range of the specs: "3+", "1-7", "5", or "none"."""

    __slots__ = ("lo", "hi")

    def __init__(self, spec: str | None):
        spec = (spec or "none").strip()
        if spec == "none":
            self.lo, self.hi = 1, 0  # empty
        elif spec.endswith("+"):
            self.lo, self.hi = int(spec[:-1]), _MAX_VERSION
        elif "-" in spec:
            lo, hi = spec.split("-")
            self.lo, self.hi = int(lo), int(hi)
        else:
            self.lo = self.hi = int(spec)

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def __repr__(self) -> str:
        return f"Versions({self.lo}-{self.hi})"


class F:
    """One field of a spec: name (snake_case), type ("int32", "string", "[]int32", "[]StructName"),
    versions, and the optional ``nullable`` versions, ``default``, ``tag`` + ``tagged`` versions, and
    ``fields`` for a struct array or a single struct (a nullable single struct is preceded on the wire by
    an int8 marker, -1 for null and 1 otherwise, as Kafka's generated code writes it)."""

    __slots__ = ("name", "type", "versions", "nullable", "default", "tag", "tagged", "fields",
                 "struct_cls", "is_array", "elem")
    struct_cls: type[Struct] | None  # the generated class of a struct array's elements

    def __init__(self, name: str, type: str, versions: str = "0+", *, nullable: str | None = None,
                 default: Any = _NO_DEFAULT, tag: int | None = None, tagged: str | None = None,
                 fields: list[F] | None = None):
        self.name = name
        self.type = type
        self.versions = Versions(versions)
        self.nullable = Versions(nullable)
        self.tag = tag
        self.tagged = Versions(tagged)
        self.fields = fields
        self.is_array = type.startswith("[]")
        self.elem = type[2:] if self.is_array else type
        self.struct_cls = None
        if fields is None and self.elem not in TYPES:
            raise TypeError(f"{name}: unknown type {type!r}")
        if default is _NO_DEFAULT and fields is not None and not self.is_array:
            default = None  # a single struct: given by the caller, or null where nullable
        if default is _NO_DEFAULT:
            default = _LIST_DEFAULT if self.is_array else TYPES[self.elem].zero
            if self.elem == "uuid" and not self.is_array:
                default = uuid.UUID(int=0)
        self.default = default


if TYPE_CHECKING:
    class _StructType(type):
        """What mypy knows of a generated class: its nested struct classes are attributes (`_make_class`)."""

        def __getattr__(cls, name: str) -> type[Struct]: ...
else:
    _StructType = type


class Struct(metaclass=_StructType):
    """Base of generated classes: ``__eq__`` over all fields, ``__repr__``, ``to_dict``."""

    __slots__ = ()
    _fields: tuple[F, ...] = ()

    if TYPE_CHECKING:  # the fields are declared as data (F) and set by the generated __init__
        def __init__(self, **fields: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in self._fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        """Fields as a dict, nested structs as dicts (records left as they are)."""
        out = {}
        for f in self._fields:
            v = getattr(self, f.name)
            if f.fields is not None and v is not None:
                v = [e.to_dict() for e in v] if f.is_array else v.to_dict()
            out[f.name] = v
        return out


def _make_class(name: str, fields: list[F], module: str, base: type[Struct] = Struct) -> type[Struct]:
    """A slotted class with a keyword-only constructor whose defaults are the spec defaults."""
    ns: dict[str, Any] = {"_LIST": _LIST_DEFAULT}
    params, body = [], []
    for i, f in enumerate(fields):
        if f.fields is not None:
            f.struct_cls = _make_class(f.elem, f.fields, module)
        ns[f"_d{i}"] = f.default
        params.append(f"{f.name}=_d{i}")
        if f.default is _LIST_DEFAULT:
            body.append(f"    self.{f.name} = [] if {f.name} is _LIST else {f.name}")
        else:
            body.append(f"    self.{f.name} = {f.name}")
    src = f"def __init__(self, *, {', '.join(params)}):\n" + ("\n".join(body) or "    pass") + "\n"
    if not params:
        src = "def __init__(self):\n    pass\n"
    exec(src, ns)
    attrs = {"__slots__": tuple(f.name for f in fields), "__init__": ns["__init__"],
             "_fields": tuple(fields), "__module__": module, "__hash__": None}
    for f in fields:
        if f.struct_cls is not None:
            attrs[f.elem] = f.struct_cls
    return type(name, (base,), attrs)


# A compiled decoder: (buffer, position, end) -> (the struct, the position after it).
Decoder = Callable[[Any, int, int], tuple[Any, int]]
# A compiled encoder: (the struct, the bytearray being written, the chunks list) -> that bytearray.
Encoder = Callable[[Any, bytearray, list[Any]], bytearray]


class Message(Struct):
    """Base of request and response classes. Class attributes: ``api_key``, ``name``,
    ``min_version``/``max_version`` (what this codec serves), ``flexible`` (a Versions)."""

    __slots__ = ()
    api_key: ClassVar[int] = -1
    min_version: ClassVar[int] = 0
    max_version: ClassVar[int] = -1
    flexible: ClassVar[Versions] = Versions("none")
    _decoders: ClassVar[dict[int, Decoder]]
    _encoders: ClassVar[dict[int, Encoder]]

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return version in cls.flexible

    @classmethod
    def decoder(cls, version: int) -> Decoder:
        """The compiled ``decode(buf, pos, end) -> (obj, pos)`` of a version (compiled once, cached)."""
        fn = cls._decoders.get(version)
        if fn is None:
            cls._check_version(version)
            fn = cls._decoders[version] = _compile_decoder(cls, version)
        return fn

    @classmethod
    def encoder(cls, version: int) -> Encoder:
        """The compiled ``encode(obj, b, chunks) -> b`` of a version (compiled once, cached)."""
        fn = cls._encoders.get(version)
        if fn is None:
            cls._check_version(version)
            fn = cls._encoders[version] = _compile_encoder(cls, version)
        return fn

    @classmethod
    def _check_version(cls, version: int) -> None:
        if not cls.min_version <= version <= cls.max_version:
            raise ValueError(f"{cls.__name__} has no version {version}")


def message(name: str, *, api_key: int, versions: str, flexible: str = "none", fields: list[F],
            module: str | None = None) -> type[Message]:
    """Declare a request or response: its api key, the versions this codec serves, and its fields."""
    v = Versions(versions)
    cls: type[Message] = _make_class(name, fields, module or __name__, base=Message)  # type: ignore[assignment]  # base=Message makes one
    cls.api_key = api_key
    cls.min_version, cls.max_version = v.lo, v.hi
    cls.flexible = Versions(flexible)
    cls._decoders = {}
    cls._encoders = {}
    return cls


# --------------------------------------------------------------------------------------------------
# code generation


class _Gen:
    """Accumulates generated source lines and the constants they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "_ruv": read_uvarint, "_wuv": write_uvarint, "_Bad": DecodeError, "_UUID": uuid.UUID,
            "_unpack": struct.unpack_from, "_pack": struct.pack, "_LIST": _LIST_DEFAULT,
            "_I16": struct.Struct(">h").unpack_from, "_I32": struct.Struct(">i").unpack_from,
            "_P16": struct.Struct(">h").pack, "_P32": struct.Struct(">i").pack,
            "_BUFS": (bytes, bytearray, memoryview), "_INLINE": INLINE_RECORDS_MAX,
        }
        self._n = 0

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def const(self, value: Any, prefix: str = "_k") -> str:
        name = self.var(prefix)
        self.ns[name] = value
        return name

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def build(self, fn_name: str, signature: str) -> Any:
        src = f"def {fn_name}({signature}):\n" + "\n".join(self.lines) + "\n"
        exec(compile(src, f"<sparklog.protocol {fn_name}>", "exec"), self.ns)
        fn = self.ns[fn_name]
        fn.source = src
        return fn


def _present(fields: Sequence[F], version: int) -> tuple[list[F], list[F]]:
    """(untagged fields, tagged fields sorted by tag) of a struct in one version."""
    plain = [f for f in fields if version in f.versions and version not in f.tagged]
    tagged = sorted((f for f in fields if version in f.versions and version in f.tagged), key=lambda f: -1 if f.tag is None else f.tag)
    return plain, tagged


def _default_expr(g: _Gen, f: F) -> str:
    if f.default is _LIST_DEFAULT:
        return "[]"
    if f.default is None or isinstance(f.default, (bool, int, float, str, bytes)):
        return repr(f.default)
    return g.const(f.default)


# ---- decoder


def min_wire_size(fields: Sequence[F], version: int, flex: bool) -> int:
    """The fewest bytes one struct of ``fields`` takes on the wire in ``version`` (every array and
    string empty or null, no tagged fields)."""
    plain, _ = _present(fields, version)
    return sum(_min_field_size(f, flex) for f in plain) + (1 if flex else 0)


def _min_field_size(f: F, flex: bool) -> int:
    if f.is_array:
        return 1 if flex else 4
    if f.struct_cls is not None:  # a single struct: its int8 null marker at least (or one empty struct)
        return 1
    prim = TYPES[f.elem]
    if prim.fmt:
        return prim.size
    if f.elem == "uuid":
        return 16
    return 1 if flex else (2 if f.elem == "string" else 4)


def _min_element_size(f: F, version: int, flex: bool) -> int:
    if f.struct_cls is not None:
        return min_wire_size(f.struct_cls._fields, version, flex)
    prim = TYPES[f.elem]
    if prim.fmt:
        return prim.size
    return 16 if f.elem == "uuid" else _min_field_size(F("_", f.elem), flex)


def _compile_decoder(cls: type[Message], version: int) -> Decoder:
    g = _Gen()
    flex = version in cls.flexible
    obj = _gen_decode_struct(g, cls, cls._fields, version, flex, 1)
    g.emit(1, f"return {obj}, pos")
    decoder: Decoder = g.build(f"decode_{cls.__name__}_v{version}", "buf, pos, end")
    return decoder


def _gen_decode_struct(g: _Gen, cls: type[Struct], fields: Sequence[F], version: int, flex: bool, ind: int) -> str:
    plain, tagged = _present(fields, version)
    values: dict[str, str] = {}
    run: list[F] = []  # consecutive fixed-width fields, decoded with one struct

    def flush() -> None:
        if not run:
            return
        s = struct.Struct(">" + "".join(TYPES[f.elem].fmt or "" for f in run))
        names = [g.var("v") for _ in run]
        g.emit(ind, f"{', '.join(names)}, = {g.const(s.unpack_from, '_S')}(buf, pos)")
        g.emit(ind, f"pos += {s.size}")
        for f, n in zip(run, names):
            values[f.name] = n
        run.clear()

    for f in plain:
        if not f.is_array and TYPES.get(f.elem) and TYPES[f.elem].fmt:
            run.append(f)
            continue
        flush()
        values[f.name] = _gen_decode_value(g, f, version, flex, ind)
    flush()
    if flex:
        _gen_decode_tags(g, tagged, values, version, ind)
    o = g.var("o")
    g.emit(ind, f"{o} = {g.const(cls.__new__, '_new')}({g.const(cls, '_C')})")
    for f in fields:
        g.emit(ind, f"{o}.{f.name} = {values.get(f.name) or _default_expr(g, f)}")
    return o


def _gen_decode_tags(g: _Gen, tagged: list[F], values: dict[str, str], version: int, ind: int) -> None:
    for f in tagged:
        values[f.name] = g.var("t")
        g.emit(ind, f"{values[f.name]} = {_default_expr(g, f)}")
    nt = g.var("nt")
    g.emit(ind, f"{nt}, pos = _ruv(buf, pos)")
    g.emit(ind, f"if {nt} > end - pos: raise _Bad('tag count past the end')")
    g.emit(ind, f"for _ in range({nt}):")
    tg, sz, stop = g.var("tg"), g.var("sz"), g.var("stop")
    g.emit(ind + 1, f"{tg}, pos = _ruv(buf, pos)")
    g.emit(ind + 1, f"{sz}, pos = _ruv(buf, pos)")
    g.emit(ind + 1, f"{stop} = pos + {sz}")
    g.emit(ind + 1, f"if {stop} > end: raise _Bad('tagged field past the end')")
    for i, f in enumerate(tagged):
        g.emit(ind + 1, f"{'if' if i == 0 else 'elif'} {tg} == {f.tag}:")
        v = _gen_decode_value(g, f, version, True, ind + 2)
        g.emit(ind + 2, f"{values[f.name]} = {v}")
        g.emit(ind + 2, f"if pos > {stop}: raise _Bad('tagged field overran its size')")
    g.emit(ind + 1, f"pos = {stop}")


def _gen_len(g: _Gen, ind: int, flex: bool, width: str) -> str:
    """Emit the read of a length prefix; returns the variable (-1 means null)."""
    n = g.var("n")
    if flex:
        g.emit(ind, f"{n}, pos = _ruv(buf, pos)")
        g.emit(ind, f"{n} -= 1")
    else:
        g.emit(ind, f"{n}, = _{width}(buf, pos)")
        g.emit(ind, f"pos += {2 if width == 'I16' else 4}")
    return n


def _gen_null_check(g: _Gen, ind: int, f: F, version: int, n: str, out: str) -> None:
    g.emit(ind, f"if {n} < 0:")
    if version in f.nullable:
        g.emit(ind + 1, f"{out} = None")
    else:
        g.emit(ind + 1, f"raise _Bad('null {f.name}')")
    g.emit(ind, "else:")


def _gen_decode_value(g: _Gen, f: F, version: int, flex: bool, ind: int) -> str:
    out = g.var("x")
    if f.is_array:
        n = _gen_len(g, ind, flex, "I32")
        _gen_null_check(g, ind, f, version, n, out)
        size = max(_min_element_size(f, version, flex), 1)
        g.emit(ind + 1, f"if {n} * {size} > end - pos: raise _Bad('{f.name}: array count past the end')")
        prim = TYPES.get(f.elem)
        if prim is not None and prim.fmt:
            g.emit(ind + 1, f"{out} = list(_unpack('>%d{prim.fmt}' % {n}, buf, pos))")
            g.emit(ind + 1, f"pos += {prim.size} * {n}")
            return out
        g.emit(ind + 1, f"{out} = []")
        g.emit(ind + 1, f"for _ in range({n}):")
        if f.struct_cls is not None:
            e = _gen_decode_struct(g, f.struct_cls, f.struct_cls._fields, version, flex, ind + 2)
        else:
            e = _gen_decode_scalar(g, f.elem, f, version, flex, ind + 2, element=True)
        g.emit(ind + 2, f"{out}.append({e})")
        return out
    if f.struct_cls is not None:
        return _gen_decode_single_struct(g, f, version, flex, ind, out)
    return _gen_decode_scalar(g, f.elem, f, version, flex, ind, out=out)


def _gen_decode_single_struct(g: _Gen, f: F, version: int, flex: bool, ind: int, out: str) -> str:
    if version in f.nullable:
        g.emit(ind, "if pos >= end: raise _Bad('struct marker past the end')")
        g.emit(ind, "if buf[pos] >= 128:")
        g.emit(ind + 1, f"{out} = None; pos += 1")
        g.emit(ind, "else:")
        g.emit(ind + 1, "pos += 1")
        ind += 1
    struct_cls = f.struct_cls
    assert struct_cls is not None  # a single struct's field always names its class
    e = _gen_decode_struct(g, struct_cls, struct_cls._fields, version, flex, ind)
    g.emit(ind, f"{out} = {e}")
    return out


def _gen_decode_scalar(g: _Gen, typ: str, f: F, version: int, flex: bool, ind: int, out: str | None = None,
                       element: bool = False) -> str:
    out = out or g.var("x")
    prim = TYPES[typ]
    if prim.fmt:
        g.emit(ind, f"{out}, = {g.const(struct.Struct('>' + prim.fmt).unpack_from, '_S')}(buf, pos)")
        g.emit(ind, f"pos += {prim.size}")
        return out
    if typ == "uuid":
        g.emit(ind, "if pos + 16 > end: raise _Bad('uuid past the end')")
        g.emit(ind, f"{out} = _UUID(bytes=bytes(buf[pos:pos + 16]))")
        g.emit(ind, "pos += 16")
        return out
    n = _gen_len(g, ind, flex, "I16" if typ == "string" else "I32")
    if element:  # elements of arrays of strings are never null in our specs
        g.emit(ind, f"if {n} < 0: raise _Bad('null element in {f.name}')")
        g.emit(ind, "if True:")
    else:
        _gen_null_check(g, ind, f, version, n, out)
    e = g.var("e")
    g.emit(ind + 1, f"{e} = pos + {n}")
    g.emit(ind + 1, f"if {e} > end: raise _Bad('{f.name} past the end')")
    if typ == "string":
        g.emit(ind + 1, f"{out} = str(buf[pos:{e}], 'utf-8')")
    elif typ == "bytes":
        g.emit(ind + 1, f"{out} = bytes(buf[pos:{e}])")
    else:  # records: a view of the frame, never copied
        g.emit(ind + 1, f"{out} = buf[pos:{e}]")
    g.emit(ind + 1, f"pos = {e}")
    return out


# ---- encoder


def _compile_encoder(cls: type[Message], version: int) -> Encoder:
    g = _Gen()
    flex = version in cls.flexible
    _gen_encode_struct(g, "obj", cls._fields, version, flex, 1, "b")
    g.emit(1, "return b")
    encoder: Encoder = g.build(f"encode_{cls.__name__}_v{version}", "obj, b, chunks")
    return encoder


def _gen_encode_struct(g: _Gen, o: str, fields: Sequence[F], version: int, flex: bool, ind: int, b: str) -> None:
    plain, tagged = _present(fields, version)
    run: list[F] = []

    def flush() -> None:
        if not run:
            return
        s = struct.Struct(">" + "".join(TYPES[f.elem].fmt or "" for f in run))
        args = ", ".join(f"{o}.{f.name}" for f in run)
        g.emit(ind, f"{b} += {g.const(s.pack, '_S')}({args})")
        run.clear()

    for f in plain:
        if not f.is_array and TYPES.get(f.elem) and TYPES[f.elem].fmt:
            run.append(f)
            continue
        flush()
        _gen_encode_value(g, f, f"{o}.{f.name}", version, flex, ind, b)
    flush()
    if flex:
        _gen_encode_tags(g, o, tagged, version, ind, b)


def _gen_encode_tags(g: _Gen, o: str, tagged: list[F], version: int, ind: int, b: str) -> None:
    if not tagged:
        g.emit(ind, f"{b} += b'\\x00'")
        return
    tl = g.var("tl")
    g.emit(ind, f"{tl} = []")
    for f in tagged:
        x, sb = g.var("x"), g.var("sb")
        g.emit(ind, f"{x} = {o}.{f.name}")
        g.emit(ind, f"if {_tag_sent(g, f, x, version)}:")
        g.emit(ind + 1, f"{sb} = bytearray()")
        _gen_encode_value(g, f, x, version, True, ind + 1, sb)
        g.emit(ind + 1, f"{tl}.append(({f.tag}, {sb}))")
    tg, sb = g.var("tg"), g.var("sb")
    g.emit(ind, f"{b} += _wuv(len({tl}))")
    g.emit(ind, f"for {tg}, {sb} in {tl}:")
    g.emit(ind + 1, f"{b} += _wuv({tg}); {b} += _wuv(len({sb})); {b} += {sb}")


def _tag_sent(g: _Gen, f: F, x: str, version: int) -> str:
    """Whether tagged field ``f`` (its value in ``x``) is written: as Kafka, only when it is not its default. A
    non-nullable struct's default is the struct of its fields' defaults, which None stands for here."""
    if f.struct_cls is not None and not f.is_array and version not in f.nullable:
        return f"{x} is not None and {x} != {g.const(f.struct_cls(), '_D')}"
    return f"{x} != {'[]' if f.default is _LIST_DEFAULT else _default_expr(g, f)}"


def _gen_encode_len(g: _Gen, ind: int, flex: bool, b: str, n: str, width: str) -> None:
    if flex:
        g.emit(ind, f"{b} += _wuv({n} + 1)")
    else:
        g.emit(ind, f"{b} += _P{width}({n})")


def _gen_encode_null(g: _Gen, ind: int, f: F, version: int, flex: bool, b: str, x: str, width: str) -> None:
    """Emit ``if x is None: <null>`` + ``else:``; a None where not nullable is an encoding error."""
    g.emit(ind, f"if {x} is None:")
    if version in f.nullable:
        null = b"\x00" if flex else (b"\xff\xff" if width == "16" else b"\xff\xff\xff\xff")
        g.emit(ind + 1, f"{b} += {null!r}")
    else:
        g.emit(ind + 1, f"raise TypeError('{f.name} is not nullable in version {version}')")
    g.emit(ind, "else:")


def _gen_encode_value(g: _Gen, f: F, x0: str, version: int, flex: bool, ind: int, b: str) -> None:
    x = g.var("x")
    g.emit(ind, f"{x} = {x0}")
    if f.is_array:
        _gen_encode_null(g, ind, f, version, flex, b, x, "32")
        _gen_encode_len(g, ind + 1, flex, b, f"len({x})", "32")
        prim = TYPES.get(f.elem)
        if prim is not None and prim.fmt:
            g.emit(ind + 1, f"{b} += _pack('>%d{prim.fmt}' % len({x}), *{x})")
            return
        e = g.var("el")
        g.emit(ind + 1, f"for {e} in {x}:")
        if f.struct_cls is not None:
            _gen_encode_struct(g, e, f.struct_cls._fields, version, flex, ind + 2, b)
        else:
            _gen_encode_scalar(g, f, e, version, flex, ind + 2, b, element=True)
        return
    if f.struct_cls is not None:
        _gen_encode_single_struct(g, f, x, version, flex, ind, b)
        return
    _gen_encode_scalar(g, f, x, version, flex, ind, b)


def _gen_encode_single_struct(g: _Gen, f: F, x: str, version: int, flex: bool, ind: int, b: str) -> None:
    if version in f.nullable:
        g.emit(ind, f"if {x} is None:")
        g.emit(ind + 1, f"{b} += b'\\xff'")
        g.emit(ind, "else:")
        g.emit(ind + 1, f"{b} += b'\\x01'")
        ind += 1
    else:
        g.emit(ind, f"if {x} is None: raise TypeError('{f.name} is not nullable in version {version}')")
    assert f.struct_cls is not None  # a single struct's field always names its class
    _gen_encode_struct(g, x, f.struct_cls._fields, version, flex, ind, b)


def _gen_encode_scalar(g: _Gen, f: F, x: str, version: int, flex: bool, ind: int, b: str,
                       element: bool = False) -> None:
    typ = f.elem
    prim = TYPES[typ]
    if prim.fmt:
        g.emit(ind, f"{b} += {g.const(struct.Struct('>' + prim.fmt).pack, '_S')}({x})")
        return
    if typ == "uuid":
        g.emit(ind, f"{b} += {x}.bytes")
        return
    width = "16" if typ == "string" else "32"
    if element:
        g.emit(ind, "if True:")
    else:
        _gen_encode_null(g, ind, f, version, flex, b, x, width)
    if typ == "string":
        s = g.var("s")
        g.emit(ind + 1, f"{s} = {x}.encode('utf-8')")
        _gen_encode_len(g, ind + 1, flex, b, f"len({s})", width)
        g.emit(ind + 1, f"{b} += {s}")
    elif typ == "bytes":
        _gen_encode_len(g, ind + 1, flex, b, f"len({x})", width)
        g.emit(ind + 1, f"{b} += {x}")
    else:  # records
        n = g.var("n")
        g.emit(ind + 1, f"if type({x}) is memoryview: {x} = {x}.cast('B') if {x}.format != 'B' else {x}")
        g.emit(ind + 1, f"{n} = len({x})")
        _gen_encode_len(g, ind + 1, flex, b, n, width)
        g.emit(ind + 1, f"if {n} <= _INLINE and isinstance({x}, _BUFS):")
        g.emit(ind + 2, f"{b} += {x}")
        g.emit(ind + 1, "else:")
        g.emit(ind + 2, f"chunks.append({b}); chunks.append({x}); {b} = bytearray()")
