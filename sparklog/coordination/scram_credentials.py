"""SCRAM credentials in ZooKeeper, in Kafka's layout, so Kafka's tools and sparklog's brokers read the same znodes.

    /config/users/<user>               {"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,
                                                               server_key=<b64>,iterations=<n>", ...}}
    /config/changes/config_change_<n>  {"version":2,"entity_path":"users/<user>"}   (persistent sequential)

`<user>` is the name as Kafka's Sanitizer writes it (URL-encoded). The password is never stored: only the salt,
StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key") (RFC 5802),
with SaltedPassword = Hi(password, salt, iterations).

Rule 1: a write changes only its own mechanism's key in the user's `config` (quotas share the znode): read, change,
write with the read's version, retried on a concurrent change; a user znode left with an empty config is kept
(Kafka keeps it too).
Rule 2: every write is followed by one change notification naming the user, which each broker's
`CredentialCache` (broker side) reads to reload that user without restart.
Rule 3: iterations are in [MIN_ITERATIONS, MAX_ITERATIONS] (Kafka's bounds) and the mechanism one of MECHANISMS;
anything else raises `ValueError` with one line, nothing written.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying

__all__ = ["ScramCredential", "MECHANISMS", "MIN_ITERATIONS", "MAX_ITERATIONS", "store_credential",
           "store_salted", "delete_credential", "read_credentials", "list_users", "user_path", "salted_password",
           "credential_from_salted", "parse_credential", "format_credential", "CHANGE_PREFIX",
           "user_of_entity_path"]

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}  # mechanism -> hashlib name
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Kafka's ScramCredentialUtils / KIP-554 upper bound
SALT_BYTES = 32
USER_JSON_VERSION = 1
CHANGE_JSON_VERSION = 2
CHANGE_PREFIX = "config_change_"


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def user_path(user: str) -> str:
    """`/config/users/<user>`, the name URL-encoded as Kafka's Sanitizer does (so `/` and `%` are safe)."""
    return f"{paths.CONFIG_USERS}/{quote(user, safe='-._')}"


def user_of_entity_path(entity_path: str) -> str | None:
    """The user a notification's `users/<sanitized>` names, else None (topics, clients, ...)."""
    kind, _, name = entity_path.partition("/")
    return unquote(name) if kind == "users" and name and "/" not in name else None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode("utf-8"), salt, iterations)


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    name = _hash(mechanism)
    client_key = hmac.digest(salted, b"Client Key", name)
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), hmac.digest(salted, b"Server Key", name),
                           iterations)


def format_credential(cred: ScramCredential) -> str:
    """Kafka's ScramCredentialUtils.credentialToString."""
    b64 = base64.b64encode
    return (f"salt={b64(cred.salt).decode()},stored_key={b64(cred.stored_key).decode()},"
            f"server_key={b64(cred.server_key).decode()},iterations={cred.iterations}")


def parse_credential(text: str) -> ScramCredential:
    """The inverse of format_credential; ValueError on anything else."""
    fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
    try:
        return ScramCredential(base64.b64decode(fields["salt"], validate=True),
                               base64.b64decode(fields["stored_key"], validate=True),
                               base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"not a SCRAM credential ({exc})") from None


def store_credential(zk: KazooClient, user: str, mechanism: str, password: str,
                     iterations: int = MIN_ITERATIONS) -> ScramCredential:
    """Salt and store `password` for `user` (works before any broker runs); returns what was stored."""
    _check(user, mechanism, iterations)
    salt = os.urandom(SALT_BYTES)
    return store_salted(zk, user, mechanism, salt, salted_password(mechanism, password, salt, iterations),
                        iterations)


def store_salted(zk: KazooClient, user: str, mechanism: str, salt: bytes, salted: bytes,
                 iterations: int) -> ScramCredential:
    """Store a credential from its salted password (AlterUserScramCredentials' upsertion)."""
    _check(user, mechanism, iterations)
    cred = credential_from_salted(mechanism, salt, salted, iterations)
    _update(zk, user, lambda config: config.__setitem__(mechanism, format_credential(cred)))
    return cred


def delete_credential(zk: KazooClient, user: str, mechanism: str) -> bool:
    """Remove `user`'s credential of `mechanism`; False when there was none (nothing written)."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}: one of {', '.join(MECHANISMS)}")
    if mechanism not in read_credentials(zk, user):
        return False
    return _update(zk, user, lambda config: config.pop(mechanism, None))


def read_credentials(zk: KazooClient, user: str) -> dict[str, ScramCredential]:
    """`user`'s credentials by mechanism ({} for a user without any); a malformed entry is left out."""
    try:
        data, _ = retrying(zk, zk.get, user_path(user))
    except NoNodeError:
        return {}
    config = _config(data)
    out = {}
    for mechanism in MECHANISMS:
        if mechanism in config:
            try:
                out[mechanism] = parse_credential(config[mechanism])
            except ValueError:
                continue
    return out


def list_users(zk: KazooClient) -> list[str]:
    try:
        return sorted(unquote(name) for name in retrying(zk, zk.get_children, paths.CONFIG_USERS))
    except NoNodeError:
        return []


def _config(data: bytes) -> dict:
    """A user znode's config; an empty znode (a parent made for /config/users/<user>/clients/<id>) has none."""
    return decode(data).get("config", {}) if data else {}


def _update(zk: KazooClient, user: str, change) -> bool:
    path = user_path(user)
    while True:
        try:
            data, stat = retrying(zk, zk.get, path)
        except NoNodeError:
            config: dict = {}
            change(config)
            try:
                retrying(zk, zk.create, path, encode({"version": USER_JSON_VERSION, "config": config}),
                         makepath=True)
            except NodeExistsError:
                continue
            break
        config = _config(data)
        change(config)
        try:
            retrying(zk, zk.set, path, encode({"version": USER_JSON_VERSION, "config": config}), stat.version)
        except BadVersionError:
            continue
        break
    _notify(zk, user)
    return True


def _notify(zk: KazooClient, user: str) -> None:
    body = encode({"version": CHANGE_JSON_VERSION, "entity_path": f"users/{quote(user, safe='-._')}"})
    retrying(zk, zk.create, f"{paths.CONFIG_CHANGES}/{CHANGE_PREFIX}", body, sequence=True, makepath=True)


def _check(user: str, mechanism: str, iterations: int) -> None:
    if not user:
        raise ValueError("a SCRAM credential needs a user name")
    _hash(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"{mechanism} iterations {iterations} not in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}: one of {', '.join(MECHANISMS)}") from None
