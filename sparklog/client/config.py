"""Client settings under Kafka's own dotted names, with Kafka's defaults (or the paper's, where it names one).

Rule 1: a setting may be given by its dotted name (`{"batch.size": 65536}`, the way the data source and
Kafka users pass them) or as a keyword with underscores (`batch_size=65536`); both mean the same setting.
Rule 2: an unknown name raises `ValueError` naming the nearest known one (Kafka only warns, but a typo here
silently changes nothing). Every setting is declared once (`PRODUCER`, `CONSUMER`, `GROUP`, `ADMIN`: tables of
`sparklog.settings`, with type, default, range, importance and doc); strings are parsed to the declared type,
so settings may come straight from a command line or Spark, and a bad value names the key, value and rule.
Rule 3: a CLI command's `--command-config FILE` (`use_command_config`) lies under every client's settings.
"""

from __future__ import annotations

from typing import Any, Mapping

from sparklog.settings import BOOLEAN, HIGH, INT, LONG, LOW, PASSWORD, STRING, Definitions, Setting

AUTO_OFFSET_RESET = {"smallest": "earliest", "earliest": "earliest", "largest": "latest", "latest": "latest",
                     "none": "none"}
ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1, -1: -1, 0: 0, 1: 1}


def _servers_text(value: Any) -> Any:
    """A list of "host:port" (or (host, port)) as the one string form: "h1:9092,h2:9093"."""
    if isinstance(value, (list, tuple)):
        return ",".join(f"{item[0]}:{item[1]}" if isinstance(item, tuple) else str(item) for item in value)
    return value


def _acks_text(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _setting(name, type_, default, doc, importance=LOW, low=None, **extra) -> Setting:
    return Setting(name, type_, default, doc, importance, low, **extra)


COMMON_SETTINGS = (
    _setting("bootstrap.servers", STRING, None, "host:port,... of brokers to start from", HIGH,
             convert=_servers_text),
    _setting("client.id", STRING, "sparklog-python", "names this client in the brokers' logs"),
    _setting("request.timeout.ms", INT, 30_000, "how long a request may wait for its response", HIGH, 0),
    _setting("retry.backoff.ms", LONG, 100, "the first retry's wait, doubling to retry.backoff.max.ms (KIP-580)",
             low=0),
    _setting("retry.backoff.max.ms", LONG, 1_000, "the longest wait between retries (KIP-580)", low=0),
    _setting("reconnect.backoff.ms", LONG, 50, "the first reconnect's wait, doubling", low=0),
    _setting("reconnect.backoff.max.ms", LONG, 1_000, "the longest wait between reconnects (KIP-144)", low=0),
    _setting("metadata.max.age.ms", LONG, 300_000, "refresh metadata this often even without errors", low=0),
    _setting("socket.connection.setup.timeout.ms", LONG, 10_000, "how long a connection may take to open", low=0),
    _setting("max.in.flight.requests.per.connection", INT, 5, "requests sent before their responses", low=1),
    _setting("receive.message.max.bytes", INT, 100 * 1024 * 1024 + 512, "the largest response frame accepted",
             low=1, kafka="librdkafka's receive.message.max.bytes"),
    _setting("security.protocol", STRING, "plaintext", "plaintext, ssl, sasl_plaintext or sasl_ssl (librdkafka's "
             "names, any case)", HIGH, choices=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"), convert=_lower),
    _setting("ssl.ca.location", STRING, None, "PEM file of the CA certificates that verify the brokers "
             "(unset: the system's)"),
    _setting("ssl.certificate.location", STRING, None, "PEM file of this client's certificate (mutual TLS)"),
    _setting("ssl.key.location", STRING, None, "PEM file of this client's private key (mutual TLS)"),
    _setting("ssl.key.password", PASSWORD, None, "the private key's password"),
    _setting("ssl.endpoint.identification.algorithm", STRING, "https", "https: check the broker's host name "
             "against its certificate; none: do not", choices=("https", "none")),
    _setting("zookeeper.connection.timeout.ms", INT, 10_000, "without bootstrap.servers: how long finding the "
             "brokers in ZooKeeper may wait for a ZooKeeper server", low=1),
    _setting("sasl.mechanism", STRING, "GSSAPI", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (librdkafka's name; "
             "GSSAPI and OAUTHBEARER are refused)", HIGH, convert=_upper),
    _setting("sasl.username", STRING, None, "the SASL user (librdkafka's name)", HIGH),
    _setting("sasl.password", PASSWORD, None, "the SASL user's password (librdkafka's name)", HIGH),
    _setting("sasl.jaas.config", PASSWORD, None, "instead of sasl.username/sasl.password: Kafka's Java client "
             "form, one `ScramLoginModule` (or `PlainLoginModule`) `required username=\"..\" password=\"..\";`"),
)
# Where the client settings are listed, for the message that refuses an unknown one
SETTINGS_LIST = "docs/settings.md (Producer, Consumer), or sparklog.client.config"

PRODUCER = Definitions("producer", (
    *COMMON_SETTINGS,
    _setting("acks", STRING, "all", "0, 1 or all: which replicas acknowledge a write (Kafka >= 3.0's default; "
             "the paper's producer waited for the leader only: 1)", HIGH, choices=("all", "-1", "0", "1"),
             convert=_acks_text),
    _setting("enable.idempotence", BOOLEAN, True, "the broker keeps each batch once however often it is retried; "
             "implies acks=all (Kafka >= 3.0's default; see client/idempotence.py)", HIGH),
    _setting("transactional.id", STRING, None, "makes the producer transactional (init_transactions, "
             "begin/commit/abort_transaction; client/transactions.py); implies enable.idempotence", HIGH),
    _setting("transaction.timeout.ms", INT, 60_000, "how long the coordinator lets a transaction stay open "
             "before it aborts it (at most the broker's transaction.max.timeout.ms)", low=1),
    _setting("batch.size", INT, 65_536, "bytes of records per batch (design notes 4.4: \"64k or 10 ms\")", HIGH, 0),
    _setting("linger.ms", LONG, 10, "how long a batch waits to fill (design notes 4.4)", HIGH, 0),
    _setting("batch.num.messages", INT, 10_000, "records per batch at most", low=1,
             kafka="librdkafka's batch.num.messages"),
    _setting("compression.type", STRING, "none", "codec of the batches sent", HIGH,
             choices=("none", "gzip", "snappy", "lz4", "zstd")),
    _setting("buffer.memory", LONG, 32 * 1024 * 1024, "bytes of unsent records before send() blocks", HIGH, 0),
    _setting("max.block.ms", LONG, 60_000, "how long send() may block (buffer full, metadata)", low=0),
    _setting("max.request.size", INT, 1_048_576, "the largest request sent", low=0),
    _setting("retries", INT, 2_147_483_647, "retries of a failed batch, bounded by delivery.timeout.ms", low=0),
    _setting("delivery.timeout.ms", INT, 120_000, "when a send fails at the latest", low=0),
))
CONSUMER = Definitions("consumer", (
    *COMMON_SETTINGS,
    _setting("group.id", STRING, None, "the consumer group", HIGH),
    _setting("fetch.min.bytes", INT, 1, "bytes a fetch waits for, up to fetch.max.wait.ms", HIGH, 0),
    _setting("fetch.max.wait.ms", INT, 500, "how long a fetch waits for fetch.min.bytes", low=0),
    _setting("fetch.max.bytes", INT, 52_428_800, "records bytes of one fetch response", low=0),
    _setting("max.partition.fetch.bytes", INT, 1_048_576, "records bytes of one partition in a fetch", HIGH, 0),
    _setting("check.crcs", BOOLEAN, True, "check every fetched batch's CRC-32C"),
    _setting("auto.offset.reset", STRING, "latest", "where to start without a committed offset (the paper's "
             "smallest and largest are accepted)", choices=tuple(AUTO_OFFSET_RESET)),
    _setting("consumer.timeout.ms", LONG, -1, "iteration stops after this idle time (-1: never)", low=-1,
             kafka="kafka-python's consumer_timeout_ms"),
    _setting("max.poll.records", INT, 500, "records one poll returns at most", low=1),
    _setting("queued.max.chunks", INT, 4, "fetched responses buffered ahead of the application", low=1,
             kafka="the 0.8 consumer's queued.max.message.chunks"),
    _setting("isolation.level", STRING, "read_uncommitted", "read_committed hides aborted transactions",
             choices=("read_uncommitted", "read_committed")),
    _setting("client.rack", STRING, "", "this consumer's rack: brokers with the rack-aware replica.selector.class "
             "send its fetches to a replica in that rack (KIP-392, client/read_replica.py)"),
))
GROUP = Definitions("ZooKeeper group consumer", (
    *(setting for setting in CONSUMER.values()
      if setting.name not in ("auto.offset.reset", "zookeeper.connection.timeout.ms")),
    _setting("auto.offset.reset", STRING, "smallest", "where a group starts without a committed offset (the "
             "paper: \"the smallest or the largest offset\")", choices=tuple(AUTO_OFFSET_RESET)),
    _setting("auto.commit.enable", BOOLEAN, True, "commit consumed offsets to ZooKeeper periodically",
             kafka="the 0.8 consumer's auto.commit.enable"),
    _setting("auto.commit.interval.ms", LONG, 5_000, "how often offsets are committed", low=0),
    _setting("zookeeper.connect", STRING, None, "host:port[,...][/chroot] of ZooKeeper", HIGH),
    _setting("zookeeper.session.timeout.ms", INT, 6_000, "the group member's ZooKeeper session", low=1,
             kafka="the 0.8 consumer's zookeeper.session.timeout.ms"),
    _setting("zookeeper.connection.timeout.ms", INT, 6_000, "how long connecting to ZooKeeper may take", low=1),
    _setting("rebalance.backoff.ms", LONG, 200, "the first wait between rebalance attempts, doubling (the 0.8 "
             "consumer waited 2000 ms)", low=0),
    _setting("rebalance.max.backoff.ms", LONG, 3_000, "the longest wait between rebalance attempts", low=0, kafka=""),
    _setting("rebalance.handover.wait.ms", LONG, 2_000, "how long a rebalance waits for the record in hand",
             low=0, kafka=""),
    _setting("consumer.id", STRING, None, "this member's id (unset: <hostname>-<pid>-<random>)"),
))
KAFKA_GROUP = Definitions("Kafka group consumer", (
    *CONSUMER.values(),
    _setting("enable.auto.commit", BOOLEAN, True, "commit processed offsets every auto.commit.interval.ms (and "
             "before a rebalance and on close)", HIGH),
    _setting("auto.commit.interval.ms", LONG, 5_000, "how often offsets are committed", low=0),
    _setting("session.timeout.ms", INT, 45_000, "a member whose heartbeats stop this long leaves the group "
             "(Kafka >= 3.0's default; within the broker's group.min/max.session.timeout.ms)", HIGH, 1),
    _setting("heartbeat.interval.ms", INT, 3_000, "how often the member tells the coordinator it is alive "
             "(a third of the session timeout at most)", HIGH, 1),
    _setting("max.poll.interval.ms", INT, 300_000, "a member that does not poll for this long leaves the "
             "group, so its partitions move on; also the rebalance timeout", low=1),
    _setting("group.instance.id", STRING, None, "a static member's id (KIP-345): a restart within the session "
             "timeout keeps its partitions without a rebalance"),
    _setting("partition.assignment.strategy", STRING, "range", "the assignor the leader member runs "
             "(Kafka's RangeAssignor; the only one)", choices=("range",)),
))
ADMIN = Definitions("admin client", COMMON_SETTINGS)
_ALL = {setting.name: setting for table in (PRODUCER, CONSUMER, GROUP, KAFKA_GROUP) for setting in table.values()}

COMMON_DEFAULTS: dict[str, Any] = ADMIN.defaults()
PRODUCER_DEFAULTS: dict[str, Any] = PRODUCER.defaults()
CONSUMER_DEFAULTS: dict[str, Any] = CONSUMER.defaults()
GROUP_DEFAULTS: dict[str, Any] = GROUP.defaults()
KAFKA_GROUP_DEFAULTS: dict[str, Any] = KAFKA_GROUP.defaults()


# Rule 3: the settings of a command's `--command-config FILE` (the CLI's, as Kafka's tools take one): laid under
# every client the process opens, below the settings it is given; each client takes the keys it knows.
_COMMAND_CONFIG: dict[str, Any] = {}


def use_command_config(props: Mapping[str, str]) -> None:
    """Rule 3: `props` under every client of this process; a key no client knows is refused (ValueError)."""
    for name in props:
        if name not in _ALL:
            known = Definitions("client", _ALL.values(), error=ValueError, listed_in=SETTINGS_LIST)
            raise ValueError(f"--command-config: {known.unknown_message(name)}")
    _COMMAND_CONFIG.clear()
    _COMMAND_CONFIG.update(props)


def resolve(defaults: Mapping[str, Any], *sources: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge `sources` (later wins) over `defaults`, accepting dotted or underscored names; each value is
    parsed and checked by its declaration (Rule 2). The command's config (Rule 3) lies under them."""
    by_underscore = {name.replace(".", "_"): name for name in defaults}
    settings = dict(defaults)
    command = {name: value for name, value in _COMMAND_CONFIG.items() if name in defaults}
    for source in (command, *sources):
        for name, value in (source or {}).items():
            dotted = name if name in defaults else by_underscore.get(name)
            if dotted is None:
                known = Definitions("client", (_ALL[known] for known in defaults if known in _ALL), error=ValueError,
                                    listed_in=SETTINGS_LIST)
                raise ValueError(known.unknown_message(name.replace("_", "."), name))
            settings[dotted] = _ALL[dotted].parse(value, ValueError) if dotted in _ALL else value
    return _normalize(settings)


def _normalize(settings: dict[str, Any]) -> dict[str, Any]:
    if "acks" in settings:
        settings["acks"] = ACKS[settings["acks"]]
    if "auto.offset.reset" in settings:
        settings["auto.offset.reset"] = AUTO_OFFSET_RESET[str(settings["auto.offset.reset"]).lower()]
    return settings


def parse_servers(servers: str | list | tuple | None) -> list[tuple[str, int]]:
    """`"h1:9092,h2:9093"` (or a list of `"host:port"`) -> [(host, port)]."""
    if not servers:
        return []
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    result = []
    for item in items:
        if isinstance(item, tuple):
            result.append((item[0], int(item[1])))
            continue
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        result.append((host.strip("[]"), int(port)))
    return result


def parse_key_values(items: list[str] | None) -> dict[str, str]:
    """`["k=v", ...]` from a command line (`--property`, `--config`); a later key wins."""
    settings = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, not {item!r}")
        settings[key.strip()] = value.strip()
    return settings
