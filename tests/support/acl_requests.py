"""Requests of every API for the authorizer's table tests (unit and integration): a body with one of
everything, and every error code a response holds."""

from __future__ import annotations

# Fields given a value that names something real for the ACL APIs (a topic, LITERAL, READ, ALLOW), so a request
# is refused for its ACL and not for its shape; replica_id -1 (a consumer), acks 1 (answered).
_NAMED = (("replica_id", -1), ("acks", 1), ("resource_type", 2), ("resource_type_filter", 2),
          ("pattern_type_filter", 3), ("resource_pattern_type", 3), ("operation", 3), ("permission_type", 3))
AUTHORIZATION_CODES = {29, 30, 31, 53}  # TOPIC_, GROUP_, CLUSTER_, TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def filled(cls, version: int):
    """A request body with one of everything: names "t" (the group and transactional id too), numbers 0."""
    values = {}
    for f in cls._fields:
        if version not in f.versions:
            continue
        if f.struct_cls is not None:  # a struct array, or a single struct (a cursor)
            values[f.name] = [filled(f.struct_cls, version)] if f.is_array else filled(f.struct_cls, version)
        elif f.is_array:
            values[f.name] = ["t"] if f.elem == "string" else [0]
        elif f.elem == "string":
            values[f.name] = "t"
    names = {f.name for f in cls._fields}
    values.update((name, value) for name, value in _NAMED if name in names)
    return cls(**values)


def codes(obj) -> set[int]:
    """Every error code anywhere in a response."""
    found = set()
    for name in getattr(obj, "__slots__", ()):
        value = getattr(obj, name)
        if name.endswith("error_code") and isinstance(value, int):
            found.add(value)
        for item in value if isinstance(value, list) else []:
            found |= codes(item)
    return found
