"""The Confluent Schema Registry REST API over `SchemaRegistry`, sans-IO: a request in, `(status, JSON body)` out.

    GET  /subjects                                      ["page_views-value", ...]
    GET  /subjects/{s}/versions                         [1, 2, 3]
    POST /subjects/{s}/versions        {"schema": ...}  {"id": 7, "subject": s, "version": 3}
    GET  /subjects/{s}/versions/{v}                     {"subject", "version", "id", "schema"}   v: n, latest, -1
    GET  /subjects/{s}/versions/{v}/schema              the schema itself
    POST /subjects/{s}                 {"schema": ...}  the version of s that schema is (a lookup)
    GET  /schemas/ids/{id}                              {"schema": "<text>"}
    GET  /schemas/ids/{id}/subjects | /versions         the subjects / [{"subject", "version"}] that have it
    GET  /schemas/types                                 ["AVRO"]
    POST /compatibility/subjects/{s}/versions[/{v}]     {"is_compatible": bool} (+ "messages" when verbose=true)
    GET|PUT|DELETE /config[/{s}]                        {"compatibilityLevel": L}; PUT takes {"compatibility": L}

Rule 1: ids are the registry's ids (`SchemaRegistry`, Rule 1 there): the id a serializer is handed here is the id
it frames payloads with, and the id the Spark source resolves with the same registry.
Rule 2: every failure is Confluent's error body `{"error_code": N, "message": "..."}` with its HTTP status (the
first three digits of N): 40401 subject not found, 40402 version not found, 40403 schema not found, 40408 no
subject-level compatibility, 409 incompatible schema, 42201 invalid schema (and unsupported schema types and
references), 42202 invalid version, 42203 invalid compatibility level, 42208 invalid subject, 400 malformed
JSON, 404 no such endpoint, 405 method not allowed, 50001 a ZooKeeper error, 50002 a ZooKeeper timeout.
Rule 3: only Avro schemas without references are served (sparklog's registry holds Avro); deleting subjects or
versions is refused (405): ids are never reused, and the Spark source may still read data written with them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

from kazoo.exceptions import KazooException, OperationTimeoutError
from kazoo.handlers.threading import KazooTimeoutError

from sparklog.coordination.paths import InvalidName, plain_name
from sparklog.schemas.compatibility import LEVELS
from sparklog.schemas.registry import IncompatibleSchema, SchemaRegistry, SchemaRegistryError, canonical

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_VERSION = 2**31 - 1


@dataclass(frozen=True)
class Response:
    status: int
    body: Any


class RestError(Exception):
    """One of Confluent's error bodies (Rule 2)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code, self.message = error_code, message

    def response(self) -> Response:
        status = self.error_code if self.error_code < 1000 else self.error_code // 100
        return Response(status, {"error_code": self.error_code, "message": self.message})


@dataclass(frozen=True)
class Request:
    method: str
    path: list[str]  # decoded segments
    query: dict[str, list[str]]
    body: bytes

    def flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[-1].lower() == "true"

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8")) if self.body else {}
        except (UnicodeDecodeError, ValueError) as exc:
            raise RestError(400, f"malformed JSON request body: {exc}") from None


def handle(registry: SchemaRegistry, method: str, target: str, body: bytes = b"") -> Response:
    """The response to one request; `target` is the request line's path with its query string."""
    try:
        request = _request(method, target, body)
        return Response(200, _route(request)(registry, request))
    except RestError as exc:
        return exc.response()
    except (KazooTimeoutError, OperationTimeoutError) as exc:
        return RestError(50002, f"ZooKeeper timed out: {exc!r}").response()
    except KazooException as exc:
        return RestError(50001, f"error in the backend data store (ZooKeeper): {exc!r}").response()


def _request(method: str, target: str, body: bytes) -> Request:
    parts = urlsplit(target)
    segments = [unquote(s) for s in parts.path.strip("/").split("/") if s]
    return Request(method.upper(), segments, parse_qs(parts.query), body)


Handler = Callable[[SchemaRegistry, Request], Any]


def _route(request: Request) -> Handler:
    for pattern, methods in ROUTES:
        if len(pattern) == len(request.path) and all(p in (S, seg) for p, seg in zip(pattern, request.path)):
            if request.method in methods:
                return methods[request.method]
            why = " (deleting subjects and versions is not supported: ids are never reused)" \
                if request.method == "DELETE" and request.path[0] == "subjects" else ""
            raise RestError(405, f"HTTP 405 Method Not Allowed: {request.method} /{'/'.join(request.path)}{why}")
    raise RestError(404, f"HTTP 404 Not Found: no endpoint /{'/'.join(request.path)}")


# -- subjects


def _subject(request: Request, index: int = 1) -> str:
    subject = request.path[index]
    try:
        return plain_name(subject, "subject")
    except InvalidName as exc:
        raise RestError(42208, f"invalid subject {subject!r}: {exc}") from None


def _versions(registry: SchemaRegistry, subject: str) -> list:
    versions = registry.versions(subject)
    if not versions:
        raise RestError(40401, f"Subject '{subject}' not found.")
    return versions


def _version_number(text: str) -> int | None:
    """Rule 2: a version is 1..2^31-1, or "latest" / -1 (None: the latest); else 42202."""
    if text in ("latest", "-1"):
        return None
    if text.isdigit() and 1 <= int(text) <= MAX_VERSION:
        return int(text)
    raise RestError(42202, f"The specified version '{text}' is not a valid version id. Allowed values are between "
                           f"[1, {MAX_VERSION}] and the string \"latest\"")


def _find_version(registry: SchemaRegistry, subject: str, text: str):
    number = _version_number(text)
    versions = _versions(registry, subject)
    if number is None:
        return versions[-1]
    for found in versions:
        if found.version == number:
            return found
    raise RestError(40402, f"Version {number} not found.")


def _schema_text(request: Request) -> str:
    """Rule 3: the request's Avro schema in canonical form; 42201 for anything else."""
    body = request.json()
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise RestError(42201, "Invalid schema: the body must be a JSON object with a \"schema\" string")
    if body.get("schemaType", "AVRO") != "AVRO":
        raise RestError(42201, f"Invalid schema: schemaType {body['schemaType']} is not supported (only AVRO)")
    if body.get("references"):
        raise RestError(42201, "Invalid schema: schema references are not supported")
    try:
        return canonical(body["schema"])
    except SchemaRegistryError as exc:
        raise RestError(42201, f"Invalid schema: {exc}") from None


def _described(registry: SchemaRegistry, version) -> dict:
    return {"subject": version.subject, "version": version.version, "id": version.schema_id,
            "schema": registry.schema_text(version.schema_id)}


def list_subjects(registry: SchemaRegistry, request: Request) -> list[str]:
    prefix = request.query.get("subjectPrefix", [""])[-1]
    return [s for s in registry.subjects() if s.startswith(prefix) and registry.versions(s)]


def list_versions(registry: SchemaRegistry, request: Request) -> list[int]:
    return [v.version for v in _versions(registry, _subject(request))]


def register(registry: SchemaRegistry, request: Request) -> dict:
    subject = _subject(request)
    text = _schema_text(request)
    try:
        version = registry.register_version(subject, text)
    except IncompatibleSchema as exc:
        raise RestError(409, f"Schema being registered is incompatible with an earlier schema for subject "
                             f"\"{subject}\", details: {exc.problems}") from None
    return {"id": version.schema_id, "subject": subject, "version": version.version}


def get_version(registry: SchemaRegistry, request: Request) -> dict:
    return _described(registry, _find_version(registry, _subject(request), request.path[3]))


def get_version_schema(registry: SchemaRegistry, request: Request) -> Any:
    found = _find_version(registry, _subject(request), request.path[3])
    return json.loads(registry.schema_text(found.schema_id))


def lookup(registry: SchemaRegistry, request: Request) -> dict:
    subject = _subject(request)
    versions = _versions(registry, subject)
    schema_id = registry.id_of(_schema_text(request))
    for version in versions:
        if version.schema_id == schema_id:
            return _described(registry, version)
    raise RestError(40403, "Schema not found")


# -- schemas by id


def _schema_by_id(registry: SchemaRegistry, text: str) -> tuple[int, str]:
    try:
        if text.isdigit():
            return int(text), registry.schema_text(int(text))
    except SchemaRegistryError:
        pass
    raise RestError(40403, f"Schema {text} not found")


def get_schema(registry: SchemaRegistry, request: Request) -> dict:
    return {"schema": _schema_by_id(registry, request.path[2])[1]}


def _uses(registry: SchemaRegistry, request: Request) -> list:
    schema_id, _ = _schema_by_id(registry, request.path[2])
    return [v for s in registry.subjects() for v in registry.versions(s) if v.schema_id == schema_id]


def get_schema_subjects(registry: SchemaRegistry, request: Request) -> list[str]:
    return sorted({v.subject for v in _uses(registry, request)})


def get_schema_versions(registry: SchemaRegistry, request: Request) -> list[dict]:
    return [{"subject": v.subject, "version": v.version} for v in _uses(registry, request)]


def schema_types(registry: SchemaRegistry, request: Request) -> list[str]:
    return ["AVRO"]


# -- compatibility


def test_compatibility(registry: SchemaRegistry, request: Request) -> dict:
    subject = _subject(request, 2)
    text = _schema_text(request)
    number = _find_version(registry, subject, request.path[4] if len(request.path) > 4 else "latest").version
    found = registry.compatibility_problems(subject, text, number)
    return {"is_compatible": not found, **({"messages": found} if request.flag("verbose") else {})}


# -- config


def _level_of(request: Request) -> str:
    body = request.json()
    level = body.get("compatibility", body.get("compatibilityLevel")) if isinstance(body, dict) else None
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise RestError(42203, f"Invalid compatibility level {level!r}. Valid values are {', '.join(LEVELS)}")
    return level.upper()


def get_config(registry: SchemaRegistry, request: Request) -> dict:
    if len(request.path) == 1:
        return {"compatibilityLevel": registry.level()}
    subject = _subject(request)
    level = registry.level(subject)
    if level is None and request.flag("defaultToGlobal"):
        level = registry.level()
    if level is None:
        raise RestError(40408, f"Subject '{subject}' does not have subject-level compatibility configured")
    return {"compatibilityLevel": level}


def put_config(registry: SchemaRegistry, request: Request) -> dict:
    subject = _subject(request) if len(request.path) > 1 else None
    level = _level_of(request)
    registry.set_level(level, subject)
    return {"compatibility": level}


def delete_config(registry: SchemaRegistry, request: Request) -> dict:
    subject = _subject(request) if len(request.path) > 1 else None
    previous = registry.delete_level(subject)
    if previous is None and subject is not None:
        raise RestError(40408, f"Subject '{subject}' does not have subject-level compatibility configured")
    return {"compatibilityLevel": previous or registry.level()}


def root(registry: SchemaRegistry, request: Request) -> dict:
    return {}


S = None  # a variable segment of a route: a subject, a version or an id
ROUTES: list[tuple[tuple[str | None, ...], dict[str, Handler]]] = [
    ((), {"GET": root}),
    (("subjects",), {"GET": list_subjects}),
    (("subjects", S), {"POST": lookup}),
    (("subjects", S, "versions"), {"GET": list_versions, "POST": register}),
    (("subjects", S, "versions", S), {"GET": get_version}),
    (("subjects", S, "versions", S, "schema"), {"GET": get_version_schema}),
    (("schemas", "ids", S), {"GET": get_schema}),
    (("schemas", "ids", S, "subjects"), {"GET": get_schema_subjects}),
    (("schemas", "ids", S, "versions"), {"GET": get_schema_versions}),
    (("schemas", "types"), {"GET": schema_types}),
    (("compatibility", "subjects", S, "versions"), {"POST": test_compatibility}),
    (("compatibility", "subjects", S, "versions", S), {"POST": test_compatibility}),
    (("config",), {"GET": get_config, "PUT": put_config, "DELETE": delete_config}),
    (("config", S), {"GET": get_config, "PUT": put_config, "DELETE": delete_config}),
]
