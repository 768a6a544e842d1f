"""The broker's TLS: its `ssl.*` settings (Kafka's names), the SSL contexts built from them, and the principal a
client certificate maps to.

Rule 1 (stores): a key store and a trust store are PEM (KIP-651: `ssl.keystore.location` a file holding the
private key and its certificate chain, or inline `ssl.keystore.key` + `ssl.keystore.certificate.chain`;
`ssl.truststore.location` or inline `ssl.truststore.certificates`) or PKCS12 (converted to PEM with the
`cryptography` library). Kafka's default type, JKS, and anything else is refused: `TlsConfigError`, one line
naming the key, the store and why, raised when the broker's configuration is read, before anything starts.
Rule 2 (no downgrade): a context is built whole or not at all: a store that does not load, a protocol or
cipher name the platform does not know, `ssl.client.auth=requested|required` without a trust store, each is
refused; nothing is ever served with less than the settings ask.
Rule 3 (client auth): `ssl.client.auth` none -> no certificate asked; requested -> asked, a missing one
allowed (the principal stays User:ANONYMOUS) but an untrusted one refused; required -> a trusted one needed.
Rule 4 (principal): a verified client certificate's subject, as an RFC 2253 distinguished name
("CN=alice,OU=eng,O=acme"), goes through `ssl.principal.mapping.rules` (Kafka's syntax: a comma-separated list
of `RULE:regex/replacement/[LU]` and `DEFAULT`; the first rule whose regex matches the whole name gives the
replacement, `$1` naming a group, lower- or upper-cased by L or U; DEFAULT gives the name unchanged); the
connection's principal is "User:<that name>". A name no rule matches is refused (as Kafka's NoMatchingRule).
Rule 5 (inter-broker): when the inter-broker listener speaks SSL, the broker's own connections to other
brokers (replica fetchers, transaction markers) verify them with the same trust store, present the same key
store, and check the host name unless `ssl.endpoint.identification.algorithm` is empty.
Rule 6 (per listener): `listener.name.<listener>.ssl.<setting>` (Kafka's listener prefix, the listener name in
any case) overrides `ssl.<setting>` for that listener alone, key by key; its server context, handshake timeout
and principal mapping are built from the result, and the inter-broker client context from the inter-broker
listener's. A prefixed key naming no `ssl.*` setting, no listener of `listeners`, or a listener that does not
speak TLS is refused at start, one line naming the key: a setting that would be silently unused is refused.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any, Mapping

from sparklog.settings import HIGH, INT, LIST, LOW, PASSWORD, STRING, Definitions, Setting


class TlsConfigError(ValueError):
    """An ssl.* setting the broker cannot serve as asked."""


STORE_TYPES = ("JKS", "PEM", "PKCS12")  # Kafka's names; JKS is Kafka's default and is refused (Rule 1)
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
TLS_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
                "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000


def _items(value: str | None) -> list[str]:
    """A LIST setting's value (a comma-joined string) as its items."""
    return [item for item in (value or "").split(",") if item]


def _versions_rule(value: Any) -> str | None:
    unknown = [v for v in _items(value) if v not in TLS_VERSIONS]
    return f"unknown protocol {unknown[0]!r} (known: {', '.join(TLS_VERSIONS)})" if unknown else None


SSL = Definitions("ssl", (
    Setting("ssl.keystore.type", STRING, "JKS", "PEM or PKCS12 (Kafka's default JKS is refused)", HIGH,
            choices=STORE_TYPES),
    Setting("ssl.keystore.location", STRING, None, "the key store file (PEM: private key and certificate chain)",
            HIGH),
    Setting("ssl.keystore.password", PASSWORD, None, "the PKCS12 key store's password", HIGH),
    Setting("ssl.key.password", PASSWORD, None, "the private key's password (an encrypted PEM key)", HIGH),
    Setting("ssl.keystore.key", PASSWORD, None, "the private key inline, PEM (KIP-651)", HIGH),
    Setting("ssl.keystore.certificate.chain", PASSWORD, None, "the certificate chain inline, PEM (KIP-651)", HIGH),
    Setting("ssl.truststore.type", STRING, "JKS", "PEM or PKCS12 (Kafka's default JKS is refused)", HIGH,
            choices=STORE_TYPES),
    Setting("ssl.truststore.location", STRING, None, "the trust store file (PEM: CA certificates)", HIGH),
    Setting("ssl.truststore.password", PASSWORD, None, "the PKCS12 trust store's password", HIGH),
    Setting("ssl.truststore.certificates", PASSWORD, None, "trusted certificates inline, PEM (KIP-651)", HIGH),
    Setting("ssl.client.auth", STRING, "none", "none, requested or required: ask clients for a certificate",
            choices=tuple(CLIENT_AUTH)),
    Setting("ssl.principal.mapping.rules", STRING, "DEFAULT", "RULE:regex/replacement/[LU],...,DEFAULT: a client "
            "certificate's subject to a user name", LOW),
    Setting("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", "TLS versions accepted", rule=_versions_rule),
    Setting("ssl.protocol", STRING, "TLSv1.3", "the highest TLS version (TLS: the highest enabled)",
            choices=("TLS", *TLS_VERSIONS)),
    Setting("ssl.cipher.suites", LIST, None, "cipher suites, OpenSSL names (unset: the platform's defaults)", LOW),
    Setting("ssl.endpoint.identification.algorithm", STRING, "https", "https: the broker checks other brokers' "
            "host names on inter-broker TLS; empty: it does not", LOW),
    Setting("ssl.handshake.timeout.ms", INT, DEFAULT_HANDSHAKE_TIMEOUT_MS, "a TLS handshake not done by then is "
            "dropped", low=1, kafka=""),
), error=TlsConfigError)


@dataclass(frozen=True)
class TlsSettings:
    """The parsed ssl.* values; `server_context()` / `client_context()` build from them (Rules 1-2)."""

    values: Mapping[str, Any]

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "TlsSettings":
        return cls(SSL.parse({k: v for k, v in props.items() if k in SSL}, policy="ignore"))

    def overridden(self, overrides: Mapping[str, str], prefix: str) -> "TlsSettings":
        """These settings with a listener's prefixed ones laid over them, each parsed and named with its
        prefixed key (Rule 6)."""
        label = prefix + "{}"
        return TlsSettings({**self.values, **{key: SSL[key].parse(value, TlsConfigError, label)
                                              for key, value in overrides.items()}})

    @property
    def handshake_timeout_s(self) -> float:
        return self.values["ssl.handshake.timeout.ms"] / 1000.0

    @property
    def mapping(self) -> "PrincipalMapper":
        return PrincipalMapper.parse(self.values["ssl.principal.mapping.rules"])

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._common(ctx)
        if not self._load_keystore(ctx):
            raise TlsConfigError("a TLS listener needs a key store: set ssl.keystore.location (or "
                                 "ssl.keystore.key and ssl.keystore.certificate.chain); it is never served as "
                                 "PLAINTEXT")
        auth = self.values["ssl.client.auth"]
        ctx.verify_mode = CLIENT_AUTH[auth]
        if not self._load_truststore(ctx) and auth != "none":
            raise TlsConfigError(f"ssl.client.auth={auth} needs a trust store (ssl.truststore.location or "
                                 "ssl.truststore.certificates)")
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """For this broker's connections to other brokers' SSL listeners (Rule 5)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._common(ctx)
        if not self._load_truststore(ctx):
            raise TlsConfigError("inter-broker SSL needs a trust store (ssl.truststore.location or "
                                 "ssl.truststore.certificates)")
        self._load_keystore(ctx)
        ctx.check_hostname = bool(self.values["ssl.endpoint.identification.algorithm"])
        return ctx

    def _common(self, ctx: ssl.SSLContext) -> None:
        enabled = sorted(TLS_VERSIONS[v] for v in _items(self.values["ssl.enabled.protocols"]))
        if not enabled:
            raise TlsConfigError("ssl.enabled.protocols is empty: no TLS version to serve")
        highest = self.values["ssl.protocol"]
        ceiling = TLS_VERSIONS.get(highest, enabled[-1])
        try:
            ctx.minimum_version = enabled[0]
            ctx.maximum_version = min(enabled[-1], ceiling)
        except ValueError as exc:
            raise TlsConfigError(f"ssl.enabled.protocols: {exc}") from None
        if ctx.maximum_version < ctx.minimum_version:
            raise TlsConfigError(f"ssl.protocol={highest} is below every one of ssl.enabled.protocols")
        ciphers = _items(self.values["ssl.cipher.suites"])
        if ciphers:
            set_cipher_suites(ctx, ciphers)

    def _load_keystore(self, ctx: ssl.SSLContext) -> bool:
        v = self.values
        kind, location = v["ssl.keystore.type"], v["ssl.keystore.location"]
        if location is None and v["ssl.keystore.key"] is None and v["ssl.keystore.certificate.chain"] is None:
            return False
        _check_type("ssl.keystore.type", kind)
        what = f"ssl.keystore.location '{location}'" if location else "ssl.keystore.key/certificate.chain"
        try:
            if kind == "PKCS12":
                key_pem, chain_pem = _pkcs12_key_store(_read(location), v["ssl.keystore.password"])
                _load_pem_chain(ctx, key_pem + chain_pem, None)
            elif location:
                ctx.load_cert_chain(location, password=v["ssl.key.password"] or None)
            else:
                if not (v["ssl.keystore.key"] and v["ssl.keystore.certificate.chain"]):
                    raise ValueError("inline PEM needs both ssl.keystore.key and ssl.keystore.certificate.chain")
                _load_pem_chain(ctx, (v["ssl.keystore.key"] + "\n" + v["ssl.keystore.certificate.chain"]).encode(),
                                v["ssl.key.password"])
        except (OSError, ValueError, ssl.SSLError) as exc:
            raise TlsConfigError(f"{what}: cannot load the {kind} key store: {_why(exc)}") from None
        return True

    def _load_truststore(self, ctx: ssl.SSLContext) -> bool:
        v = self.values
        kind, location, inline = v["ssl.truststore.type"], v["ssl.truststore.location"], v["ssl.truststore.certificates"]
        if location is None and inline is None:
            return False
        _check_type("ssl.truststore.type", kind)
        what = f"ssl.truststore.location '{location}'" if location else "ssl.truststore.certificates"
        try:
            if kind == "PKCS12":
                ctx.load_verify_locations(cadata=_pkcs12_trust_store(_read(location), v["ssl.truststore.password"]))
            elif location:
                ctx.load_verify_locations(cafile=location)
            else:
                ctx.load_verify_locations(cadata=inline)
        except (OSError, ValueError, ssl.SSLError) as exc:
            raise TlsConfigError(f"{what}: cannot load the {kind} trust store: {_why(exc)}") from None
        if not ctx.get_ca_certs():
            raise TlsConfigError(f"{what}: the {kind} trust store holds no certificate")
        return True


LISTENER_PREFIX = "listener.name."


def is_listener_ssl_key(key: str) -> bool:
    """`listener.name.<listener>.ssl.<setting>` (Rule 6)."""
    return key.startswith(LISTENER_PREFIX) and ".ssl." in key[len(LISTENER_PREFIX):]


def listener_tls_settings(props: Mapping[str, str], protocols: Mapping[str, str],
                          tls_protocols: tuple[str, ...]) -> dict[str, TlsSettings]:
    """The TlsSettings of each listener whose protocol (`protocols`: listener name -> protocol) is one of
    `tls_protocols`: the unprefixed ssl.* with that listener's prefixed keys laid over them (Rule 6)."""
    base = TlsSettings.from_properties(props)
    overrides = _listener_overrides(props, protocols, tls_protocols)
    return {name: base.overridden(overrides.get(name, {}), f"{LISTENER_PREFIX}{name.lower()}.")
            for name, protocol in protocols.items() if protocol in tls_protocols}


def _listener_overrides(props: Mapping[str, str], protocols: Mapping[str, str],
                        tls_protocols: tuple[str, ...]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for key, value in props.items():
        if not is_listener_ssl_key(key):
            continue
        listener, _, setting = key[len(LISTENER_PREFIX):].partition(".")
        listener = listener.upper()
        if setting not in SSL:
            raise TlsConfigError(f"{key}: {SSL.unknown_message(setting)}")
        if listener not in protocols:
            raise TlsConfigError(f"{key}: no listener {listener} in listeners ({', '.join(protocols)}); the "
                                 f"setting would be unused")
        if protocols[listener] not in tls_protocols:
            raise TlsConfigError(f"{key}: listener {listener} speaks {protocols[listener]}, not TLS; the setting "
                                 f"would be unused")
        found.setdefault(listener, {})[setting] = value
    return found


def _check_type(key: str, kind: str) -> None:
    if kind not in ("PEM", "PKCS12"):
        raise TlsConfigError(f"{key}={kind}: sparklog reads PEM and PKCS12 stores, not {kind} (convert it with "
                             f"keytool -importkeystore -deststoretype PKCS12)")


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _read(location: str | None) -> bytes:
    if not location:
        raise ValueError("a PKCS12 store needs its location")
    with open(location, "rb") as f:
        return f.read()


def _load_pem_chain(ctx: ssl.SSLContext, pem: bytes, password: str | None) -> None:
    """ssl loads a key and chain only from a file: a private (0600) temporary one, removed at once."""
    fd, path = tempfile.mkstemp(prefix="sparklog-keystore-", suffix=".pem")
    try:
        os.write(fd, pem)
        os.close(fd)
        ctx.load_cert_chain(path, password=password or None)
    finally:
        os.unlink(path)


def _pkcs12_key_store(data: bytes, password: str | None) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    if key is None or cert is None:
        raise ValueError("the store holds no private key with its certificate")
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *extra])
    return key_pem, chain


def _pkcs12_trust_store(data: bytes, password: str | None) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def set_cipher_suites(ctx: ssl.SSLContext, names: list[str]) -> None:
    """TLS 1.2 suites by OpenSSL name; TLS 1.3 suites cannot be narrowed through Python's ssl, so a list
    naming none of them caps the version at TLS 1.2 and a list naming only some is refused (Rule 2)."""
    tls13 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.3"}
    named13 = [n for n in names if n in tls13]
    older = [n for n in names if n not in tls13]
    if named13 and set(named13) != tls13:
        raise TlsConfigError(f"ssl.cipher.suites: TLS 1.3 suites can be enabled all ({', '.join(sorted(tls13))}) "
                             f"or none, not {', '.join(named13)} alone")
    for name in older:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(name)
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: unknown cipher suite {name!r} (OpenSSL names)") from None
    if older:
        ctx.set_ciphers(":".join(older))
    if not named13:
        if ctx.minimum_version > ssl.TLSVersion.TLSv1_2:
            raise TlsConfigError("ssl.cipher.suites names no TLS 1.3 suite but only TLS 1.3 is enabled")
        ctx.maximum_version = min(ctx.maximum_version, ssl.TLSVersion.TLSv1_2)


# -- principals (Rule 4) ---------------------------------------------------------------------------------------

_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


class NoMatchingRule(ValueError):
    """No ssl.principal.mapping.rules rule matches a certificate's name."""


@dataclass(frozen=True)
class PrincipalMapper:
    rules: tuple[tuple[re.Pattern, str, str] | None, ...]  # None: DEFAULT

    @classmethod
    def parse(cls, text: str) -> "PrincipalMapper":
        rules: list = []
        position, text = 0, text.strip()
        while position < len(text):
            match = _RULE.match(text, position)
            if match is None or match.end() == position:
                raise TlsConfigError(f"ssl.principal.mapping.rules: cannot read {text[position:]!r} (RULE:regex/"
                                     f"replacement/[LU] or DEFAULT, comma-separated)")
            position = match.end()
            rules.append(None if match.group(1) else _rule(match.group(2), match.group(3), match.group(4)))
        return cls(tuple(rules) or (None,))

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            if rule is None:
                return distinguished_name
            pattern, replacement, case = rule
            match = pattern.fullmatch(distinguished_name)
            if match:
                mapped = match.expand(replacement)
                return mapped.lower() if case == "L" else mapped.upper() if case == "U" else mapped
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule matches {distinguished_name!r}")


def _rule(pattern: str, replacement: str, case: str) -> tuple[re.Pattern, str, str]:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise TlsConfigError(f"ssl.principal.mapping.rules: bad regex {pattern!r}: {exc}") from None
    return compiled, re.sub(r"\$(\d+)", r"\\g<\1>", replacement.replace("\\", "\\\\")), case


def certificate_name(der: bytes) -> str:
    """A certificate's subject as an RFC 2253 name, most specific part first ("CN=alice,O=acme,C=US")."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def peer_principal(ssl_object: Any, mapper: PrincipalMapper) -> str | None:
    """"User:<mapped name>" of a verified client certificate, or None when the client sent none (Rule 3)."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return f"User:{mapper.name(certificate_name(der))}" if der else None
