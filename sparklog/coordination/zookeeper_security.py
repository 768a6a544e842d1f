"""How sparklog's ZooKeeper clients log in and which ACLs the znodes they create get: the one authority for both.

Credentials come the way Kafka's JVMs take them, so a Kafka operator's set-up works unchanged: the JAAS file named
by the `java.security.auth.login.config` system property, given as `-Djava.security.auth.login.config=FILE` in the
`KAFKA_OPTS` environment variable (its section `Client`, or the one named by `-Dzookeeper.sasl.clientconfig=NAME`):

    Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required username="kafka" password="kafka-secret";
    };

TLS to ZooKeeper (a `secureClientPort`) takes Kafka's broker settings (`ZOOKEEPER_TLS`: `zookeeper.ssl.client.enable`,
`zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty`, `zookeeper.ssl.keystore.*`,
`zookeeper.ssl.truststore.*`, PEM stores), or the same as ZooKeeper's system properties in KAFKA_OPTS
(`-Dzookeeper.client.secure=true -Dzookeeper.ssl.keyStore.location=...`), the broker's settings winning as in
Kafka. A client certificate is a login too: ZooKeeper's X509AuthenticationProvider makes its subject the
creator's identity (`x509:CN=...`).

Every client sparklog makes (brokers, the CLI, the Spark source's ZooKeeper group mode, the schema registry)
reads it through `ZooKeeperSecurity.from_environment()` in `connection.connect()`, the one place kazoo clients are
built.

Rule 1 (no silent downgrade): a named file that cannot be read or parsed, a `Client` section without
username/password, or a login module other than DigestLoginModule is a `ZooKeeperSecurityError` naming it. A file
without the section means no SASL to ZooKeeper, as in Kafka (`JaasUtils.isZkSaslEnabled`).
Rule 1b: TLS enabled needs the Netty socket (as Kafka requires), a PEM trust store and PEM stores only; a store
that is missing or of another type is a `ZooKeeperSecurityError` naming the setting; the server's name is checked
against its certificate unless `zookeeper.ssl.endpoint.identification.algorithm` is empty.
Rule 2 (ACLs, Kafka's `ZkData.defaultAcls`): a client with `set_acl` creates every znode with CREATOR_ALL (all
rights for the creator's authenticated identity, `sasl:<username>`) plus world READ, except under the sensitive
roots (`SENSITIVE_ROOTS`: SCRAM credentials, broker configs), which get CREATOR_ALL alone, and under
`/consumers`, left open because the ZooKeeper-group consumers of any identity write there (as Kafka's old
consumer path). Without `set_acl` znodes are created open (ZooKeeper's default).
Rule 3: `set_acl` without a login is refused (`require_login`): CREATOR_ALL needs an authenticated creator.
Tools (not brokers) set ACLs whenever they are logged in, as Kafka's tools do; brokers follow
`zookeeper.set.acl`.
Rule 4: the persistent roots (`PERSISTENT_PATHS`) are created by a broker with `zookeeper.set.acl` at start,
as Kafka's brokers create theirs, so that no one else can create them first with open ACLs.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from sparklog.protocol.jaas import JaasError, parse_jaas_file
from sparklog.settings import BOOLEAN, LOW, PASSWORD, STRING, Definitions, Setting

__all__ = ["NOT_AUTHORIZED_HINT", "ZOOKEEPER_TLS", "ZooKeeperTls", "ZooKeeperSecurity", "ZooKeeperSecurityError", "acls_for", "create_persistent_paths", "DIGEST_LOGIN_MODULE", "PERSISTENT_PATHS",
           "SENSITIVE_ROOTS"]

DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
LOGIN_CONFIG_PROPERTY = "java.security.auth.login.config"
CLIENT_SECTION_PROPERTY = "zookeeper.sasl.clientconfig"
DEFAULT_CLIENT_SECTION = "Client"
OPTS_VARIABLE = "KAFKA_OPTS"
SASL_MECHANISM = "DIGEST-MD5"
SENSITIVE_ROOTS = ("/config/users", "/config/brokers", "/delegation_token")
OPEN_ROOTS = ("/consumers",)
PERSISTENT_PATHS = ("/consumers", "/brokers/ids", "/brokers/topics", "/config/changes", "/config/topics",
                    "/config/clients", "/config/users", "/config/brokers", "/admin", "/kafka-acl",
                    "/kafka-acl-changes", "/kafka-acl-extended", "/kafka-acl-extended-changes", "/cluster",
                    "/log_faults", "/log_cleaner", "/controlled_shutdown")


NETTY_SOCKET = "org.apache.zookeeper.ClientCnxnSocketNetty"
PEM = "PEM"
# ZooKeeper's system property (KAFKA_OPTS -D...) -> Kafka's broker setting of the same thing
SYSTEM_PROPERTIES = {"zookeeper.client.secure": "zookeeper.ssl.client.enable",
                     "zookeeper.clientCnxnSocket": "zookeeper.clientCnxnSocket",
                     "zookeeper.ssl.keyStore.location": "zookeeper.ssl.keystore.location",
                     "zookeeper.ssl.keyStore.password": "zookeeper.ssl.keystore.password",
                     "zookeeper.ssl.keyStore.type": "zookeeper.ssl.keystore.type",
                     "zookeeper.ssl.trustStore.location": "zookeeper.ssl.truststore.location",
                     "zookeeper.ssl.trustStore.type": "zookeeper.ssl.truststore.type",
                     "zookeeper.ssl.hostnameVerification": "zookeeper.ssl.endpoint.identification.algorithm"}


class ZooKeeperSecurityError(ValueError):
    """The ZooKeeper login configuration cannot be used as given (one line naming it)."""


ZOOKEEPER_TLS = Definitions("zookeeper", (
    Setting("zookeeper.ssl.client.enable", BOOLEAN, False, "TLS to ZooKeeper's secureClientPort (the client "
            "certificate, if any, is a login: zookeeper.set.acl)", LOW),
    Setting("zookeeper.clientCnxnSocket", STRING, None, f"{NETTY_SOCKET}, required with TLS (Kafka's rule)", LOW),
    Setting("zookeeper.ssl.keystore.location", STRING, None, "PEM file of the client's key and certificate chain",
            LOW),
    Setting("zookeeper.ssl.keystore.password", PASSWORD, None, "the key's password, if it is encrypted", LOW),
    Setting("zookeeper.ssl.keystore.type", STRING, PEM, "PEM only (JKS and PKCS12 are refused)", LOW),
    Setting("zookeeper.ssl.truststore.location", STRING, None, "PEM file of the CA certificates trusted", LOW),
    Setting("zookeeper.ssl.truststore.password", PASSWORD, None, "unused for PEM trust stores", LOW),
    Setting("zookeeper.ssl.truststore.type", STRING, PEM, "PEM only", LOW),
    Setting("zookeeper.ssl.endpoint.identification.algorithm", STRING, "HTTPS", "HTTPS checks ZooKeeper's name "
            "against its certificate; empty does not", LOW),
), error=ZooKeeperSecurityError)


@dataclass(frozen=True)
class ZooKeeperTls:
    """Rule 1b's checked stores, as kazoo takes them."""

    truststore: str
    keystore: str | None = None
    keystore_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    def kazoo_options(self) -> dict:
        return {"use_ssl": True, "ca": self.truststore, "certfile": self.keystore, "keyfile": self.keystore,
                "keyfile_password": self.keystore_password, "verify_certs": True,
                "check_hostname": self.check_hostname}


# What a tool says when ZooKeeper refuses it a znode (Rule 2: only the brokers' login may write, or read credentials)
NOT_AUTHORIZED_HINT = (f"log in as the brokers' ZooKeeper identity (a JAAS '{DEFAULT_CLIENT_SECTION}' section named "
                       f"by {OPTS_VARIABLE}=-D{LOGIN_CONFIG_PROPERTY}=FILE)")


@dataclass(frozen=True)
class ZooKeeperSecurity:
    """A ZooKeeper client's login (SASL DIGEST-MD5, or none) and whether the znodes it creates get ACLs."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    set_acl: bool = False
    source: str = ""  # where the login came from, for messages
    tls: ZooKeeperTls | None = None

    @property
    def authenticated(self) -> bool:
        return self.username is not None or (self.tls is not None and self.tls.keystore is not None)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, set_acl: bool | None = None,
                         settings: Mapping[str, str] | None = None) -> "ZooKeeperSecurity":
        """The login of `KAFKA_OPTS` (Rule 1) and TLS (Rule 1b: `settings`, Kafka-named, over KAFKA_OPTS');
        `set_acl=None` sets ACLs whenever logged in (a tool's rule 3)."""
        options = java_properties((environ if environ is not None else os.environ).get(OPTS_VARIABLE, ""))
        login = _client_login(options)
        security = cls(*login) if login else cls()
        tls = _tls({**{SYSTEM_PROPERTIES[k]: v for k, v in options.items() if k in SYSTEM_PROPERTIES},
                    **{k: v for k, v in (settings or {}).items() if k in ZOOKEEPER_TLS}})
        security = ZooKeeperSecurity(security.username, security.password, False, security.source, tls)
        return security.with_set_acl(security.authenticated if set_acl is None else set_acl)

    def with_set_acl(self, set_acl: bool) -> "ZooKeeperSecurity":
        return ZooKeeperSecurity(self.username, self.password, set_acl, self.source, self.tls)

    def require_login(self, setting: str = "zookeeper.set.acl") -> None:
        """Rule 3: `set_acl` needs a login."""
        if self.set_acl and not self.authenticated:
            raise ZooKeeperSecurityError(
                f"{setting} is true, but no authentication to ZooKeeper is configured (a JAAS '{DEFAULT_CLIENT_SECTION}' "
                f"section named by {OPTS_VARIABLE}=-D{LOGIN_CONFIG_PROPERTY}=FILE)")

    def kazoo_options(self) -> dict:
        """KazooClient keyword arguments: the SASL login and TLS."""
        options = self.tls.kazoo_options() if self.tls is not None else {}
        if self.username is not None:
            options["sasl_options"] = {"mechanism": SASL_MECHANISM, "username": self.username,
                                       "password": self.password}
        return options

    def acls(self, path: str) -> list | None:
        """The ACL a znode created at `path` gets (Rule 2); None: ZooKeeper's open default."""
        return acls_for(path) if self.set_acl else None

    def describe(self) -> str:
        logins = [f"SASL {SASL_MECHANISM} user {self.username!r} ({self.source})"] if self.username else []
        if self.tls is not None and self.tls.keystore:
            logins.append(f"the TLS certificate of {self.tls.keystore}")
        return " and ".join(logins) or "no login"


def acls_for(path: str) -> list:
    """Rule 2 for one path (relative to the client's chroot)."""
    if _under(path, OPEN_ROOTS):
        return list(OPEN_ACL_UNSAFE)
    if _under(path, SENSITIVE_ROOTS):
        return list(CREATOR_ALL_ACL)
    return list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)


def create_persistent_paths(zk) -> None:
    """Rule 4: each of `PERSISTENT_PATHS`, created with its ACL if missing (a path that exists keeps its ACL)."""
    for path in PERSISTENT_PATHS:
        zk.retry(zk.ensure_path, path)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


def java_properties(opts: str) -> dict[str, str]:
    """`-Dkey=value` options of a JVM command line (`KAFKA_OPTS`), shell-quoted as a shell passes them."""
    try:
        words = shlex.split(opts)
    except ValueError as exc:
        raise ZooKeeperSecurityError(f"{OPTS_VARIABLE} does not parse as shell words: {exc}") from None
    return dict(word[2:].partition("=")[::2] for word in words if word.startswith("-D"))


def _tls(settings: Mapping[str, str]) -> ZooKeeperTls | None:
    """Rule 1b over Kafka-named settings."""
    values = ZOOKEEPER_TLS.parse(settings)
    if not values["zookeeper.ssl.client.enable"]:
        return None
    if values["zookeeper.clientCnxnSocket"] != NETTY_SOCKET:
        raise ZooKeeperSecurityError(f"zookeeper.ssl.client.enable=true needs zookeeper.clientCnxnSocket={NETTY_SOCKET}")
    for store in ("keystore", "truststore"):
        if values[f"zookeeper.ssl.{store}.type"].upper() != PEM:
            raise ZooKeeperSecurityError(f"zookeeper.ssl.{store}.type={values[f'zookeeper.ssl.{store}.type']}: "
                                         "only PEM stores are read")
        location = values[f"zookeeper.ssl.{store}.location"]
        if location and not Path(location).is_file():
            raise ZooKeeperSecurityError(f"zookeeper.ssl.{store}.location {location}: no such file")
    if not values["zookeeper.ssl.truststore.location"]:
        raise ZooKeeperSecurityError("zookeeper.ssl.client.enable=true needs zookeeper.ssl.truststore.location")
    check = values["zookeeper.ssl.endpoint.identification.algorithm"] not in ("", "false")
    return ZooKeeperTls(values["zookeeper.ssl.truststore.location"], values["zookeeper.ssl.keystore.location"],
                        values["zookeeper.ssl.keystore.password"], check)


def _client_login(options: Mapping[str, str]) -> tuple[str, str, bool, str] | None:
    """(username, password, set_acl placeholder, source) of the JAAS file's client section, or None (Rule 1)."""
    name = options.get(LOGIN_CONFIG_PROPERTY)
    if not name:
        return None
    section = options.get(CLIENT_SECTION_PROPERTY) or DEFAULT_CLIENT_SECTION
    try:
        sections = parse_jaas_file(Path(name).read_text())
    except OSError as exc:
        raise ZooKeeperSecurityError(f"{LOGIN_CONFIG_PROPERTY} {name}: cannot read it: {exc.strerror}") from None
    except JaasError as exc:
        raise ZooKeeperSecurityError(f"{LOGIN_CONFIG_PROPERTY} {name}: {exc}") from None
    if section not in sections:
        return None
    return _digest_login(sections[section], f"section {section} of {name}")


def _digest_login(entries: list, where: str) -> tuple[str, str, bool, str]:
    if len(entries) != 1 or entries[0].login_module != DIGEST_LOGIN_MODULE:
        modules = ", ".join(e.login_module for e in entries) or "none"
        raise ZooKeeperSecurityError(f"JAAS {where}: ZooKeeper logins are one {DIGEST_LOGIN_MODULE} (SASL "
                                     f"{SASL_MECHANISM}), not {modules}")
    options = entries[0].options
    if not options.get("username") or "password" not in options:
        raise ZooKeeperSecurityError(f"JAAS {where}: {DIGEST_LOGIN_MODULE} needs username and password")
    return options["username"], options["password"], False, where
