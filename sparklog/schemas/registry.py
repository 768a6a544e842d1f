"""A lightweight Avro schema registry kept in ZooKeeper (the paper, section 4: every message carries the id
of its schema, and the id resolves to the schema through a registry).

    /schemas/latest_id                          "7"                   the id counter (versioned set)
    /schemas/ids/<id>                           {"schema": "<canonical JSON>", "fingerprint": "<sha256>"}
    /schemas/fingerprints/<sha256>              {"id": 7}             dedup index: one id per schema
    /schemas/subjects/<subject>/versions/<n>    {"id": 7}             n = 1, 2, ...
    /schemas/config                             {"compatibilityLevel": "BACKWARD"}   the global level (absent: BACKWARD)
    /schemas/config/<subject>                   {"compatibilityLevel": "FULL"}       a subject's own level

Rule 1: a schema has one id forever. The id and its dedup entry are created in one multi-op together with
the counter's versioned set, so two processes registering the same schema at once get the same id (the
loser's multi fails as a whole and it reads the winner's id), and a retry after a lost connection finds
its own registration. Ids are never reused or rewritten.
Rule 2: "the same schema" means the same canonical form: fastavro's parse with full names, keys sorted,
no whitespace. Unlike Avro's Parsing Canonical Form it keeps defaults and aliases, which change how data
resolves, so two schemas differing only in a default get two ids.
Rule 3: a subject's new version must be compatible with its earlier versions under the subject's level (its
own, else the global one, else BACKWARD: a reader with the new schema reads data written with the latest
one), as `compatibility.problems` checks it, or `IncompatibleSchema` is raised listing the problems, and
nothing is written. Levels are Confluent's (NONE, BACKWARD, FORWARD, FULL and their _TRANSITIVE variants).
Rule 4: parsed schemas are cached per id for the life of the registry object: ids are immutable, so the
cache never goes stale, and a consumer resolves each id once.

Transitions of a subject: ABSENT --register--> version 1 --compatible register--> version n+1; registering
a schema the subject already has returns that version and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

import fastavro
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from sparklog.coordination.connection import close, commit, connect, decode, encode, retrying
from sparklog.coordination.paths import plain_name
from sparklog.schemas import compatibility, framing
from sparklog.schemas.compatibility import DEFAULT_LEVEL, LEVELS, problems

ROOT = "/schemas"
LATEST_ID = f"{ROOT}/latest_id"
IDS = f"{ROOT}/ids"
FINGERPRINTS = f"{ROOT}/fingerprints"
SUBJECTS = f"{ROOT}/subjects"
CONFIG = f"{ROOT}/config"
FIRST_ID = 1  # Confluent's registry starts at 1 too; 0 is never an id


class SchemaRegistryError(ValueError):
    """A schema or subject the registry cannot accept or does not know."""


class UnknownSchema(SchemaRegistryError, LookupError):
    pass


class IncompatibleSchema(SchemaRegistryError):
    """A new version of a subject is not compatible with its earlier ones under the subject's level (Rule 3)."""

    def __init__(self, subject: str, version: int, problems: list[str], level: str = DEFAULT_LEVEL) -> None:
        self.subject, self.version, self.problems, self.level = subject, version, problems, level
        listed = "\n  ".join(problems)
        super().__init__(
            f"schema is not {level.lower().replace('_', ' ')} compatible with version {version} of subject "
            f"{subject!r} ({_DIRECTION[level.split('_')[0]]}):\n  {listed}"
        )


_DIRECTION = {
    "BACKWARD": "a reader with the new schema could not read data written with the old one",
    "FORWARD": "a reader with the old schema could not read data written with the new one",
    "FULL": "the new and the old schema could not read each other's data",
}


class InvalidLevel(SchemaRegistryError):
    """Not one of Confluent's compatibility levels."""


@dataclass(frozen=True)
class SchemaVersion:
    subject: str
    version: int
    schema_id: int


def canonical(schema: Any) -> str:
    """The canonical text of an Avro schema given as JSON text, a dict or a list (Rule 2)."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError:
            schema = schema.decode() if isinstance(schema, bytes) else schema  # a bare name like "string"
    try:
        parsed = fastavro.parse_schema(schema, _write_hint=False)
    except Exception as exc:  # fastavro raises SchemaParseException, UnknownType, ValueError ...
        raise SchemaRegistryError(f"not a valid Avro schema: {exc}") from exc
    text = json.dumps(parsed, sort_keys=True, separators=(",", ":"))
    try:
        compatibility.parse(text)  # the compatibility checker must read every registered schema too
    except Exception as exc:  # avro raises SchemaParseException, AvroException, TypeError ...
        raise SchemaRegistryError(f"not a valid Avro schema: {exc}") from exc
    return text


def fingerprint(canonical_text: str) -> str:
    return hashlib.sha256(canonical_text.encode("utf-8")).hexdigest()


class SchemaRegistry:
    """Register schemas, look them up by id or subject, and encode/decode framed payloads.

        with SchemaRegistry.open("localhost:2181") as registry:
            version = registry.register_version("page_views-value", SCHEMA)
            payload = registry.encode(version.schema_id, {"member_id": 42, ...})
            registry.decode(payload)       # -> the record, the writer's schema fetched once per id

    Thread-safe; the registry owns its ZooKeeper client only when made by `open()`.
    """

    def __init__(self, zk: KazooClient, owns_client: bool = False) -> None:
        self.zk = zk
        self._owns_client = owns_client
        self._parsed: dict[int, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(cls, zookeeper: str) -> "SchemaRegistry":
        return cls(connect(zookeeper), owns_client=True)

    def close(self) -> None:
        if self._owns_client:
            close(self.zk)

    def __enter__(self) -> "SchemaRegistry":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- ids

    def register(self, schema: Any) -> int:
        """The id of `schema`, registering it if it is new (Rule 1)."""
        text = canonical(schema)
        return retrying(self.zk, self._inner_register, text, fingerprint(text))

    def _inner_register(self, text: str, digest: str) -> int:
        found = self._id_by_fingerprint(digest)
        if found is not None:
            return found
        try:
            data, stat = self.zk.get(LATEST_ID)
            new_id, expected_version = int(decode(data)) + 1, stat.version
        except NoNodeError:
            self.zk.ensure_path(IDS)
            self.zk.ensure_path(FINGERPRINTS)
            new_id, expected_version = FIRST_ID, None
        tx = self.zk.transaction()
        if expected_version is None:
            tx.create(LATEST_ID, encode(new_id))
        else:
            tx.set_data(LATEST_ID, encode(new_id), version=expected_version)
        tx.create(f"{IDS}/{new_id}", encode({"schema": text, "fingerprint": digest}))
        tx.create(f"{FINGERPRINTS}/{digest}", encode({"id": new_id}))
        try:
            commit(tx)
        except (BadVersionError, NodeExistsError):
            raise ForceRetryError() from None  # someone else took the id or registered this schema: look again
        return new_id

    def _id_by_fingerprint(self, digest: str) -> int | None:
        try:
            data, _ = self.zk.get(f"{FINGERPRINTS}/{digest}")
        except NoNodeError:
            return None
        return int(decode(data)["id"])

    def id_of(self, schema: Any) -> int | None:
        """The id of `schema` if it is registered, else None."""
        return retrying(self.zk, self._id_by_fingerprint, fingerprint(canonical(schema)))

    def schema_text(self, schema_id: int) -> str:
        try:
            data, _ = retrying(self.zk, self.zk.get, f"{IDS}/{int(schema_id)}")
        except NoNodeError:
            raise UnknownSchema(f"no schema has id {schema_id}") from None
        return decode(data)["schema"]

    def schema(self, schema_id: int) -> Any:
        """The parsed schema of `schema_id` (cached, Rule 4); raises `UnknownSchema`."""
        parsed = self._parsed.get(schema_id)
        if parsed is None:
            parsed = fastavro.parse_schema(json.loads(self.schema_text(schema_id)))
            with self._lock:
                parsed = self._parsed.setdefault(schema_id, parsed)
        return parsed

    # -- subjects

    def register_version(self, subject: str, schema: Any) -> SchemaVersion:
        """Add `schema` as the next version of `subject` (Rule 3) or return the version it already is."""
        plain_name(subject, "subject")
        text = canonical(schema)
        return retrying(self.zk, self._inner_register_version, subject, text)

    def _inner_register_version(self, subject: str, text: str) -> SchemaVersion:
        versions = self._versions(subject)
        digest = fingerprint(text)
        known = self._id_by_fingerprint(digest)
        for version, schema_id in versions:
            if schema_id == known:
                return SchemaVersion(subject, version, schema_id)
        self._check(subject, text, versions)
        schema_id = known if known is not None else self._inner_register(text, digest)
        number = versions[-1][0] + 1 if versions else 1
        try:
            self.zk.create(f"{SUBJECTS}/{subject}/versions/{number}", encode({"id": schema_id}), makepath=True)
        except NodeExistsError:
            raise ForceRetryError() from None  # a concurrent registration took this version: check again
        return SchemaVersion(subject, number, schema_id)

    def _check(self, subject: str, text: str, versions: list[tuple[int, int]]) -> None:
        """Rule 3: raise `IncompatibleSchema` if `text` may not follow `versions` under the subject's level."""
        level = self._level(subject)
        found = problems(level, text, [self.schema_text(schema_id) for _, schema_id in versions])
        if found:
            raise IncompatibleSchema(subject, versions[-1][0], found, level)

    def compatibility_problems(self, subject: str, schema: Any, number: int) -> list[str]:
        """What stops `schema` from following version `number` of `subject` under the subject's level
        (the _TRANSITIVE levels check it against every version up to `number`); raises `UnknownSchema`."""
        text = canonical(schema)
        upto = [(v.version, v.schema_id) for v in self.versions(subject) if v.version <= number]
        if not upto or upto[-1][0] != number:
            raise UnknownSchema(f"subject {subject!r} has no version {number}")
        level = retrying(self.zk, self._level, subject)
        return problems(level, text, [self.schema_text(schema_id) for _, schema_id in upto])

    def _versions(self, subject: str) -> list[tuple[int, int]]:
        """[(version, schema id)] of `subject`, oldest first."""
        try:
            children = self.zk.get_children(f"{SUBJECTS}/{subject}/versions")
        except NoNodeError:
            return []
        result = []
        for child in sorted(children, key=int):
            data, _ = self.zk.get(f"{SUBJECTS}/{subject}/versions/{child}")
            result.append((int(child), int(decode(data)["id"])))
        return result

    def versions(self, subject: str) -> list[SchemaVersion]:
        plain_name(subject, "subject")
        return [SchemaVersion(subject, v, i) for v, i in retrying(self.zk, self._versions, subject)]

    def latest(self, subject: str) -> SchemaVersion:
        versions = self.versions(subject)
        if not versions:
            raise UnknownSchema(f"subject {subject!r} has no registered schema")
        return versions[-1]

    def version(self, subject: str, number: int) -> SchemaVersion:
        for found in self.versions(subject):
            if found.version == number:
                return found
        raise UnknownSchema(f"subject {subject!r} has no version {number}")

    # -- compatibility levels (Rule 3)

    def level(self, subject: str | None = None) -> str | None:
        """The level set for `subject` (None: the global one, BACKWARD unless set); None if the subject has none."""
        if subject is not None:
            plain_name(subject, "subject")
        found = retrying(self.zk, self._stored_level, subject)
        return DEFAULT_LEVEL if found is None and subject is None else found

    def effective_level(self, subject: str) -> str:
        plain_name(subject, "subject")
        return retrying(self.zk, self._level, subject)

    def set_level(self, level: str, subject: str | None = None) -> None:
        if level not in LEVELS:
            raise InvalidLevel(f"invalid compatibility level {level!r}: one of {', '.join(LEVELS)}")
        if subject is not None:
            plain_name(subject, "subject")
        retrying(self.zk, self._inner_set_level, _config_path(subject), encode({"compatibilityLevel": level}))

    def _inner_set_level(self, path: str, data: bytes) -> None:
        try:
            self.zk.set(path, data)
        except NoNodeError:
            try:
                self.zk.create(path, data, makepath=True)
            except NodeExistsError:
                raise ForceRetryError() from None  # created meanwhile: set it

    def delete_level(self, subject: str | None = None) -> str | None:
        """Remove the level set for `subject` (None: the global one, back to BACKWARD); the removed level."""
        previous = self.level(subject) if subject is not None else retrying(self.zk, self._stored_level, None)
        if previous is not None:
            retrying(self.zk, self._inner_delete_level, _config_path(subject))
        return previous

    def _inner_delete_level(self, path: str) -> None:
        try:
            if path == CONFIG:
                self.zk.set(path, b"")  # the global node parents the subjects' ones
            else:
                self.zk.delete(path)
        except NoNodeError:
            pass  # already gone: idempotent

    def _stored_level(self, subject: str | None) -> str | None:
        try:
            data, _ = self.zk.get(_config_path(subject))
        except NoNodeError:
            return None
        return decode(data)["compatibilityLevel"] if data else None

    def _level(self, subject: str) -> str:
        return self._stored_level(subject) or self._stored_level(None) or DEFAULT_LEVEL

    def subjects(self) -> list[str]:
        try:
            return sorted(retrying(self.zk, self.zk.get_children, SUBJECTS))
        except NoNodeError:
            return []

    # -- payloads

    def encode(self, schema_id: int, datum: Any) -> bytes:
        return framing.encode(schema_id, self.schema(schema_id), datum)

    def decode(self, payload: bytes, reader_schema: Any = None) -> Any:
        """The datum of a framed payload, read with its writer's schema (resolved to `reader_schema`)."""
        schema_id, body = framing.split(payload)
        return framing.decode_body(body, self.schema(schema_id), reader_schema)


def _config_path(subject: str | None) -> str:
    return CONFIG if subject is None else f"{CONFIG}/{subject}"
