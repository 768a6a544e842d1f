"""Hypothesis strategies that build any message of sparklog.protocol for one version, from its schema:
fields present in the version get random values, the others keep their defaults (so encode -> decode
must give back an equal object)."""

from __future__ import annotations

from hypothesis import strategies as st

from sparklog.protocol.schema import F

_INTS = {
    "int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1), "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
}


def _scalar(typ: str):
    if typ in _INTS:
        lo, hi = _INTS[typ]
        return st.integers(lo, hi)
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "uuid": st.uuids(),
        "string": st.text(max_size=8),
        "bytes": st.binary(max_size=12),
        "records": st.binary(max_size=40),
    }[typ]


def _value(f: F, version: int):
    if f.fields is not None and not f.is_array:
        inner = struct_of(f.struct_cls, version)
        if version in f.tagged and version not in f.nullable:  # its default is not sent: it decodes to None
            inner = inner.filter(lambda s: s != f.struct_cls()) | st.none()
    elif f.fields is not None:
        inner = st.lists(struct_of(f.struct_cls, version), max_size=2)
    elif f.is_array:
        inner = st.lists(_scalar(f.elem), max_size=3)
    else:
        inner = _scalar(f.elem)
    if version in f.nullable:
        return st.none() | inner
    return inner


def struct_of(cls, version: int):
    """Instances of a generated class with random values for the fields present in ``version``."""
    kwargs = {f.name: _value(f, version) for f in cls._fields if version in f.versions}
    return st.builds(cls, **kwargs)
