"""The broker's SASL settings, with Kafka's names (declared here in `SASL`, part of config.py's broker table).

    sasl.enabled.mechanisms                     mechanisms served on SASL listeners (PLAIN, SCRAM-SHA-256/512)
    sasl.mechanism.inter.broker.protocol        the mechanism this broker logs in with to other brokers
    sasl.jaas.config / listener.name.<listener>.<mechanism>.sasl.jaas.config   (the prefixed form wins)
        PlainLoginModule: user_<name>="<password>" entries are PLAIN's users; username/password the broker's own
        ScramLoginModule: username/password the broker's own (SCRAM users live in ZooKeeper)
    listener.name.<listener>.sasl.enabled.mechanisms   the listener's own list
    connection.failed.authentication.delay.ms   a failed authentication's reply waits this long (Kafka's 100)
    connections.max.reauth.ms                   KIP-368 session lifetime (0: none)
    sasl.server.max.receive.size                largest frame before authentication (Kafka's 524288)

Rule 1 (no silent downgrade): with any SASL listener, every enabled mechanism must be one sparklog serves and
have a JAAS entry of its login module, and the inter-broker mechanism must be enabled with a username and a
password; anything else is a `SaslConfigError` naming the key, at start.
Rule 2: without a SASL listener these settings are checked for type only, as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from sparklog.protocol.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasEntry, JaasError, parse_jaas
from sparklog.settings import INT, LIST, LONG, PASSWORD, STRING, Definitions, Setting

__all__ = ["SASL", "SaslConfig", "SaslConfigError", "SUPPORTED_MECHANISMS", "is_listener_sasl_key"]

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = {PLAIN: PLAIN_LOGIN_MODULE, "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
                        "SCRAM-SHA-512": SCRAM_LOGIN_MODULE}
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100
DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE = 524288
_PREFIX = "listener.name."


class SaslConfigError(ValueError):
    """A SASL setting the broker cannot serve as given."""


SASL = Definitions("sasl", (
    Setting("sasl.enabled.mechanisms", LIST, "GSSAPI", "SASL mechanisms served on SASL listeners (PLAIN, "
            "SCRAM-SHA-256, SCRAM-SHA-512; GSSAPI and OAUTHBEARER are refused)"),
    Setting("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI", "the mechanism brokers log in to each "
            "other with"),
    Setting("sasl.jaas.config", PASSWORD, None, "JAAS login-module entries (PlainLoginModule, ScramLoginModule)"),
    Setting("connection.failed.authentication.delay.ms", INT, DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
            "delay of the reply to a failed authentication", low=0),
    Setting("connections.max.reauth.ms", LONG, 0, "a SASL session's lifetime (KIP-368; 0: none)", low=0),
    Setting("sasl.server.max.receive.size", INT, DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE, "largest frame accepted "
            "before authentication", low=1),
), error=SaslConfigError)


def is_listener_sasl_key(key: str) -> bool:
    """`listener.name.<l>.<mechanism>.sasl.jaas.config` or `listener.name.<l>.sasl.enabled.mechanisms`."""
    return key.startswith(_PREFIX) and (key.endswith(".sasl.jaas.config")
                                        or key.endswith(".sasl.enabled.mechanisms"))


@dataclass(frozen=True)
class SaslConfig:
    enabled_mechanisms: tuple[str, ...] = ("GSSAPI",)
    inter_broker_mechanism: str = "GSSAPI"
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
    reauth_ms: int = 0
    max_receive_size: int = DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE
    # (listener, mechanism) -> its JAAS entry; listener "" for the unprefixed sasl.jaas.config
    jaas: Mapping[tuple[str, str], JaasEntry] = field(default_factory=dict)
    listener_mechanisms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], sasl_listeners: tuple[str, ...] = (),
                        inter_broker_listener: str | None = None) -> "SaslConfig":
        """Typed and checked (Rule 1) for the SASL listeners named; `inter_broker_listener` if it is one."""
        values = SASL.parse({k: v for k, v in props.items() if k in SASL}, "ignore")
        config = cls(tuple(m.strip().upper() for m in (values["sasl.enabled.mechanisms"] or "").split(",")
                           if m.strip()),
                     values["sasl.mechanism.inter.broker.protocol"].strip().upper(),
                     values["connection.failed.authentication.delay.ms"], values["connections.max.reauth.ms"],
                     values["sasl.server.max.receive.size"], _jaas_entries(props, values["sasl.jaas.config"]),
                     _listener_mechanisms(props))
        for listener in sasl_listeners:
            config._check_listener(listener)
        if inter_broker_listener is not None:
            config._check_inter_broker(inter_broker_listener)
        return config

    def mechanisms(self, listener: str) -> tuple[str, ...]:
        return self.listener_mechanisms.get(listener.upper(), self.enabled_mechanisms)

    def jaas_entry(self, listener: str, mechanism: str) -> JaasEntry | None:
        return self.jaas.get((listener.upper(), mechanism)) or self.jaas.get(("", mechanism))

    def plain_users(self, listener: str) -> dict[str, str]:
        """PLAIN's users on `listener`: the `user_<name>="<password>"` options of its PlainLoginModule entry."""
        entry = self.jaas_entry(listener, PLAIN)
        options = entry.options if entry is not None else {}
        return {key[len("user_"):]: value for key, value in options.items() if key.startswith("user_")}

    def login(self, listener: str) -> tuple[str, str, str]:
        """(mechanism, username, password) this broker logs in to `listener` with (inter-broker)."""
        entry = self.jaas_entry(listener, self.inter_broker_mechanism)
        assert entry is not None, "checked at start (Rule 1)"
        return self.inter_broker_mechanism, entry.options["username"], entry.options["password"]

    def _check_listener(self, listener: str) -> None:
        mechanisms = self.mechanisms(listener)
        if not mechanisms:
            raise SaslConfigError(f"sasl.enabled.mechanisms is empty for SASL listener {listener}")
        for mechanism in mechanisms:
            module = SUPPORTED_MECHANISMS.get(mechanism)
            if module is None:
                raise SaslConfigError(f"sasl.enabled.mechanisms: {mechanism} is not served (sparklog serves "
                                      f"{', '.join(SUPPORTED_MECHANISMS)}) on listener {listener}")
            entry = self.jaas_entry(listener, mechanism)
            if entry is None or entry.login_module != module:
                raise SaslConfigError(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config (or "
                                      f"sasl.jaas.config): no {module} entry for {mechanism} on {listener}")

    def _check_inter_broker(self, listener: str) -> None:
        mechanism = self.inter_broker_mechanism
        if mechanism not in self.mechanisms(listener):
            raise SaslConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism} is not in "
                                  f"sasl.enabled.mechanisms of the inter-broker listener {listener}")
        entry = self.jaas_entry(listener, mechanism)
        if entry is None or not {"username", "password"} <= set(entry.options):
            raise SaslConfigError(f"the {mechanism} JAAS entry of {listener} needs username and password (the "
                                  f"broker's own inter-broker login)")


def _jaas_entries(props: Mapping[str, str], unprefixed: str | None) -> dict[tuple[str, str], JaasEntry]:
    found: dict[tuple[str, str], JaasEntry] = {}
    if unprefixed:
        for entry in _parse("sasl.jaas.config", unprefixed):
            for mechanism, module in SUPPORTED_MECHANISMS.items():
                if module == entry.login_module:
                    found.setdefault(("", mechanism), entry)
    for key, value in props.items():
        if key.startswith(_PREFIX) and key.endswith(".sasl.jaas.config"):
            listener, _, mechanism = key[len(_PREFIX):-len(".sasl.jaas.config")].partition(".")
            entries = _parse(key, value)
            if len(entries) != 1:
                raise SaslConfigError(f"{key}: one JAAS entry expected, {len(entries)} given")
            found[(listener.upper(), mechanism.upper())] = entries[0]
    return found


def _listener_mechanisms(props: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    out = {}
    for key, value in props.items():
        if key.startswith(_PREFIX) and key.endswith(".sasl.enabled.mechanisms"):
            listener = key[len(_PREFIX):-len(".sasl.enabled.mechanisms")]
            out[listener.upper()] = tuple(m.strip().upper() for m in value.split(",") if m.strip())
    return out


def _parse(key: str, text: str) -> list[JaasEntry]:
    try:
        return parse_jaas(text)
    except JaasError as exc:
        raise SaslConfigError(f"{key}: {exc}") from None
