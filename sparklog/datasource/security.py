"""The source's and sink's security options: TLS and SASL as Spark's Kafka source users give them.

Rule 1 (names): an option is `kafka.` and a client setting of Kafka's Java client (what Spark users type) or of
librdkafka (what sparklog's client takes): `security.protocol`, `sasl.mechanism`, `sasl.username`,
`sasl.password`, `sasl.jaas.config` (one `ScramLoginModule`/`PlainLoginModule ... required username=".."
password="..";`), `ssl.ca.location` or `ssl.truststore.location` (PEM certificates; `ssl.truststore.type` PEM),
`ssl.certificate.location` + `ssl.key.location` or `ssl.keystore.location` (key and chain in one PEM file;
`ssl.keystore.type` PEM), `ssl.key.password`, `ssl.endpoint.identification.algorithm` (https; none or ""
turn the host-name check off). Kafka's Java names become the client's (`SETTINGS` holds the client's).
Rule 2 (no silent downgrade): any other `kafka.ssl.*` / `kafka.sasl.*` option, an unknown protocol, mechanism
or store type, a store that does not load, or a login the client would refuse fails at `load()`/`start()`
with one line naming the option, never in a task, never by ignoring it.
Rule 3 (secrets): passwords and the JAAS text are `Hidden`: their repr (a plan, a dataclass, a log line)
is `'[hidden]'`, and no error here quotes them. They travel to the executors inside the reader's and
writer's options (ConnectionOptions.settings), as every other client setting does: each task's client
logs in itself.
"""

from __future__ import annotations

import ssl
from typing import Any, Mapping

# The client's security settings (librdkafka's names), the only ones the data source hands to its clients.
SETTINGS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "sasl.jaas.config",
            "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
            "ssl.endpoint.identification.algorithm")
_JAVA_NAMES = ("ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location", "ssl.keystore.type")
OPTIONS = frozenset(SETTINGS + _JAVA_NAMES)  # Rule 1: the accepted option names, without `kafka.`
_SECRETS = frozenset({"sasl.password", "sasl.jaas.config", "ssl.key.password"})
PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
_HOST_CHECK = {"https": "https", "none": "none", "": "none"}


class Hidden(str):
    """A secret setting's value (Rule 3): itself to the client, `'[hidden]'` to repr."""

    def __repr__(self) -> str:
        return "'[hidden]'"


def is_security_option(name: str) -> bool:
    """Whether `name` (without `kafka.`) is this module's to accept or refuse (Rule 2)."""
    return name == "security.protocol" or name.startswith(("ssl.", "sasl."))


def security_settings(opts: Mapping[str, str], refuse) -> tuple[tuple[str, Any], ...]:
    """The client settings of the `kafka.` security options in `opts` (lower-cased names), checked (Rules 1-2);
    `refuse(message)` makes the error to raise."""
    given = {name[len("kafka."):]: value for name, value in opts.items()
             if name.startswith("kafka.") and is_security_option(name[len("kafka."):])}
    for name in sorted(given):
        if name not in OPTIONS:
            raise refuse(f"Option 'kafka.{name}' is not supported by sparklog's client: remove it (its security "
                         "options: " + ", ".join(f"kafka.{o}" for o in sorted(OPTIONS)) + ")")
    settings = _client_names(given, refuse)
    protocol = settings.get("security.protocol", "plaintext")
    for name in sorted(given):
        prefix = name.split(".")[0]
        if prefix != "security" and prefix not in protocol:  # sasl.* without SASL_*, ssl.* without *SSL
            raise refuse(f"Option 'kafka.{name}' is set but kafka.security.protocol is {protocol.upper()}, which "
                         f"does not use it: set kafka.security.protocol (SASL_SSL, SSL or SASL_PLAINTEXT)")
    if protocol in ("ssl", "sasl_ssl"):
        _check_stores(given, settings, refuse)
    _check_with_client(settings, refuse)
    if protocol == "plaintext":
        settings.pop("security.protocol", None)  # the client's default: nothing to carry
    return tuple(sorted(settings.items()))


def _client_names(given: dict[str, str], refuse) -> dict[str, Any]:
    """Rule 1: values checked, Java names mapped to the client's, secrets hidden."""
    settings = {name: Hidden(value) if name in _SECRETS else str(value).strip()
                for name, value in given.items() if name in SETTINGS}
    _choose(settings, "security.protocol", PROTOCOLS, refuse)
    if "sasl.mechanism" in settings:
        settings["sasl.mechanism"] = settings["sasl.mechanism"].upper()
    algorithm = settings.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        if algorithm.lower() not in _HOST_CHECK:
            raise refuse(f"Option 'kafka.ssl.endpoint.identification.algorithm' must be https, or none (or \"\") to "
                         f"skip the host-name check, not {algorithm!r}")
        settings["ssl.endpoint.identification.algorithm"] = _HOST_CHECK[algorithm.lower()]
    for store in ("truststore", "keystore"):
        kind = str(given.get(f"ssl.{store}.type", "PEM")).strip()
        if kind.upper() != "PEM":
            raise refuse(f"Option 'kafka.ssl.{store}.type' is {kind!r}: sparklog's client reads PEM stores only "
                         f"(convert the store to PEM and set kafka.ssl.{store}.type=PEM)")
    _java_location(given, settings, "ssl.truststore.location", ("ssl.ca.location",), refuse)
    _java_location(given, settings, "ssl.keystore.location", ("ssl.certificate.location", "ssl.key.location"), refuse)
    return settings


def _choose(settings: dict, name: str, choices: tuple[str, ...], refuse) -> None:
    if name in settings:
        value = settings[name].lower()
        if value not in choices:
            raise refuse(f"Option 'kafka.{name}' is {settings[name]!r}: it must be one of "
                         f"{', '.join(c.upper() for c in choices)}")
        settings[name] = value


def _java_location(given: dict, settings: dict, java: str, client: tuple[str, ...], refuse) -> None:
    """`java` (Kafka's Java client's PEM store) stands for the client's `client` settings, never beside them."""
    if java not in given:
        return
    both = [name for name in client if name in given]
    if both:
        raise refuse(f"Options 'kafka.{java}' and 'kafka.{both[0]}' name the same file: give one of them")
    for name in client:
        settings[name] = str(given[java]).strip()


def _check_stores(given: dict, settings: dict, refuse) -> None:
    """Rule 2: each PEM file the TLS connections need loads now, named by the option the user gave."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca = settings.get("ssl.ca.location")
    if ca is not None:
        try:
            context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            option = "ssl.truststore.location" if "ssl.truststore.location" in given else "ssl.ca.location"
            raise refuse(f"Option 'kafka.{option}': {ca} does not load as PEM certificates ({_why(exc)})") from None
    cert, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    if cert is not None or key is not None:
        try:
            context.load_cert_chain(cert or key, key, password=settings.get("ssl.key.password") or None)
        except (OSError, ssl.SSLError) as exc:
            option = ("ssl.keystore.location" if "ssl.keystore.location" in given
                      else "ssl.certificate.location/kafka.ssl.key.location")
            raise refuse(f"Option 'kafka.{option}': the certificate and key do not load ({_why(exc)}); check "
                         "the files and kafka.ssl.key.password") from None


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)


def _check_with_client(settings: dict, refuse) -> None:
    """Rule 2: the client's own checks, now: a login or TLS set-up it would refuse fails at load()."""
    from sparklog.client.config import CONSUMER_DEFAULTS, resolve
    from sparklog.client.connection import tls_context
    from sparklog.client.sasl import login_of

    try:
        config = resolve(CONSUMER_DEFAULTS, settings)
        login_of(config)
        tls_context(config)
    except ValueError as exc:
        raise refuse(f"Option 'kafka.{_named(str(exc))}' cannot be used: {exc}") from None


def _named(message: str) -> str:
    """The client setting a client error names first (its messages open with it)."""
    return next((name for name in SETTINGS if message.startswith(name)), "security.protocol")


def security_of(settings: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """The security settings among a connection's client settings: what every client of it needs."""
    return {name: value for name, value in settings if name in SETTINGS}
