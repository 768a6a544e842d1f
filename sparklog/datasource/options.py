"""The data source's options, parsed and validated once, under the names Spark's Kafka source uses.

Rule 1: every option is checked when the DataFrame is defined (`load()`), never in a task: a typo or a
refused Kafka setting fails before any data moves, with the advice Spark's Kafka source gives.
Rule 2: the parsed result is a frozen dataclass of plain values, so readers and writers that hold one stay
picklable (they are shipped to Spark's Python workers).

Rule 3: a `kafka.`-prefixed setting reaches the client when the client knows it (`CONSUMER_DEFAULTS`,
`PRODUCER_DEFAULTS`); the security settings (`security.protocol`, `ssl.*`, `sasl.*`) are security.py's to
accept, map and check, and one it cannot honour is refused, because ignoring it would send data in the clear
or log in as nobody; any other unknown one is logged as ignored, as Kafka's own clients warn "supplied but
isn't a known config".
Rule 4: every error's first line says what is wrong and what to do.
Rule 5: every option is declared once in `READ_OPTIONS` / `WRITE_OPTIONS` (`sparklog.settings`: type,
default, range, doc, the Spark Kafka option it mirrors); a bad value names the option, the value and the rule;
an option name close to a declared one is warned about with that name (`startingOffset`: did you mean
`startingOffsets`?), as Spark ignores options it does not know.

Names are case-insensitive, as Spark passes them. Kafka client settings may carry Spark's `kafka.` prefix
(`kafka.bootstrap.servers`) or none (`bootstrap.servers`); client settings may also carry our own
`sparklog.` prefix (`sparklog.linger.ms`).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from sparklog.client.config import CONSUMER_DEFAULTS, PRODUCER_DEFAULTS
from sparklog.client.config import resolve as resolve_settings
from sparklog.datasource.errors import show_message_first
from sparklog.datasource.consumer_pool import DEFAULT_CAPACITY, DEFAULT_IDLE_TIMEOUT_MS, PoolSettings
from sparklog.datasource.security import is_security_option, security_settings
from sparklog.settings import BOOLEAN, HIGH, INT, LONG, LOW, MEDIUM, STRING, WARN, Definitions, Setting

logger = logging.getLogger(__name__)

# Sentinels inside offset JSON, as in Spark's Kafka source (and Kafka's ListOffsets).
LATEST = -1
EARLIEST = -2

DEFAULT_GROUP_ID_PREFIX = "spark-kafka-source"  # Spark's Kafka source default
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's Kafka source default "15m"
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's Kafka source: spark.network.timeout, 120s
DEFAULT_FETCH_OFFSET_NUM_RETRIES = 3  # Spark's Kafka source default
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 10  # Spark's Kafka source default
DEFAULT_ZOOKEEPER_TIMEOUT_MS = 10_000

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}

# Refused Kafka settings, with the advice Spark's Kafka source (KafkaSourceProvider) gives for each.
_AUTO_OFFSET_RESET_ADVICE = (
    "Kafka option 'auto.offset.reset' is not supported.\n"
    "Instead set the source option 'startingOffsets' to 'earliest' or 'latest'\n"
    "to specify where to start. Structured Streaming manages which offsets are consumed\n"
    "internally, rather than relying on the kafkaConsumer to do it. This will ensure that no\n"
    "data is missed when new topics/partitions are dynamically subscribed. Note that\n"
    "'startingOffsets' only applies when a new Streaming query is started, and\n"
    "that resuming will always pick up from where the query left off. See the docs for more\n"
    "details."
)
REFUSED_READ_OPTIONS = {
    "group.id": (
        "Kafka option 'group.id' is not supported as user-specified consumer groups are not used to "
        "track offsets. Set the source option 'kafka.group.id' (or 'groupIdPrefix') to name the group "
        "under which the query's progress is recorded."
    ),
    "auto.offset.reset": _AUTO_OFFSET_RESET_ADVICE,
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte arrays with "
        "ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the keys."
    ),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte arrays "
        "with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the values."
    ),
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}
REFUSED_WRITE_OPTIONS = {
    "key.serializer": (
        "Kafka option 'key.serializer' is not supported as keys are serialized with "
        "ByteArraySerializer or StringSerializer. Use DataFrame operations to explicitly serialize "
        "the keys into either strings or byte arrays."
    ),
    "value.serializer": (
        "Kafka option 'value.serializer' is not supported as value are serialized with "
        "ByteArraySerializer or StringSerializer. Use DataFrame operations to explicitly serialize "
        "the values into either strings or byte arrays."
    ),
    "transactional.id": (
        "Kafka option 'transactional.id' is not supported: the sink names its transactions itself. Use the "
        "options deliveryGuarantee=exactly-once and transactionalIdPrefix."
    ),
}
_PREFIXED_ALLOWED = {"group.id"}
STRATEGIES = ("error", "latest")
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"
DELIVERY_GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)
_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,200}")  # it names a topic too (exactly_once.py): Kafka's legal characters
SUBSCRIPTIONS = ("subscribe", "subscribepattern", "assign")
_SUBSCRIPTION_NAMES = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
# Kafka settings the source itself interprets; they never reach a client as settings.
SOURCE_KAFKA_SETTINGS = frozenset({"bootstrap.servers", "zookeeper.connect", "group.id",
                                   "zookeeper.connection.timeout.ms"})
# Client settings a reader or writer passes through (with a `kafka.` or `sparklog.` prefix, Rule 3).
# `auto.offset.reset` belongs to the source (startingOffsets), never to the user.
# The security settings are security.py's (Rule 3): they join the settings after its checks.
CONSUMER_SETTINGS = tuple(sorted(name for name in set(CONSUMER_DEFAULTS) - SOURCE_KAFKA_SETTINGS - {"auto.offset.reset"}
                                 if not is_security_option(name)))
PRODUCER_SETTINGS = tuple(sorted(name for name in set(PRODUCER_DEFAULTS) - SOURCE_KAFKA_SETTINGS
                                 if not is_security_option(name)))


class SparklogOptionError(ValueError):
    """An option is missing, malformed, refused or not valid for this kind of query.

    Its message is the first line the user reads (errors.py Rule 2).
    """

    def __init__(self, *args) -> None:
        super().__init__(*args)
        show_message_first()


@dataclass(frozen=True)
class Subscription:
    """What to read: `kind` is "subscribe" (topics), "subscribePattern" (pattern) or "assign" (partitions)."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribePattern":
            return re.search(self.pattern, topic) is not None  # Spark 4: `topicRegex.findFirstIn(name)`
        if self.kind == "subscribe":
            return topic in self.topics
        return any(t == topic for t, _ in self.partitions)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends.

    `kind` is "earliest", "latest", "offsets" (`offsets`: {(topic, partition): offset, -2/-1 sentinels}),
    "timestamp" (`timestamp`: ms for every partition) or "timestamps" (`offsets` holds per-partition ms).
    """

    kind: str
    offsets: tuple[tuple[tuple[str, int], int], ...] = ()
    timestamp: int | None = None

    @property
    def by_partition(self) -> dict[tuple[str, int], int]:
        return dict(self.offsets)


@dataclass(frozen=True)
class ConnectionOptions:
    bootstrap_servers: str | None
    zookeeper_connect: str | None
    settings: tuple[tuple[str, Any], ...] = ()
    zookeeper_timeout_ms: int = DEFAULT_ZOOKEEPER_TIMEOUT_MS


@dataclass(frozen=True)
class ReadOptions:
    connection: ConnectionOptions
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_num_retries: int = DEFAULT_FETCH_OFFSET_NUM_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    group_id: str | None = None
    group_id_prefix: str = DEFAULT_GROUP_ID_PREFIX
    query_key: str | None = None  # names the query's own initial offsets in ZooKeeper; never the group id
    wait_for_topics: bool = False  # sparklog.waitForTopics: a missing topic is "no partitions yet", not an error
    commit_progress: bool = True
    avro_options: tuple[tuple[str, str], ...] = ()  # valueFormat=avro (see sparklog.datasource.avro)
    columns: tuple[str, ...] | None = None  # the columns a user-supplied schema selects, in its order; None: all
    consumer_cache: PoolSettings = PoolSettings()  # sparklog.consumer.cache.*: the worker's consumer pool


@dataclass(frozen=True)
class WriteOptions:
    connection: ConnectionOptions
    topic: str | None = None
    producer_settings: tuple[tuple[str, Any], ...] = field(default=())
    delivery_guarantee: str = AT_LEAST_ONCE
    transactional_id_prefix: str | None = None
    batch_id: int | None = None  # foreachBatch's batch id (to_sparklog), for an exactly-once batch write


# ---------------------------------------------------------------------------------------------- helpers


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in dict(options).items() if v is not None}


def kafka_setting(opts: Mapping[str, str], name: str) -> str | None:
    """A Kafka client setting given bare (`bootstrap.servers`) or with Spark's `kafka.` prefix."""
    return opts.get(name) or opts.get("kafka." + name)

# -- the Avro value options (datasource/avro.py decodes with them; declared and checked here) --------------------

PINNED_ID = "sparklog.avro.readerSchemaId"  # set by avro.pin_value_schema (avro.py Rule 1); lower-case, as options are matched
FORMATS = ("binary", "avro")
# The options a task's decoder needs (lower-cased), carried in ReadOptions.avro_options.
AVRO_OPTIONS = ("valueformat", "subject", "subjectversion", "valueschemaid", PINNED_ID, "zookeeper.connect",
                "kafka.zookeeper.connect")


class AvroValueError(ValueError):
    pass


def _avro_option(opts: Mapping[str, str], name: str) -> Any:
    return READ_OPTIONS.value(opts, name)


def value_format(opts: Mapping[str, str]) -> str:
    """The `valueFormat` option (lower-cased option names), validated."""
    fmt = str(_avro_option(opts, "valueFormat")).lower()
    if fmt not in FORMATS:
        raise AvroValueError(f"Option 'valueFormat' must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt == "avro":
        if not kafka_setting(opts, "zookeeper.connect"):
            raise AvroValueError("Option valueFormat=avro needs 'zookeeper.connect': the schema registry is in ZooKeeper")
        if not any(k in opts for k in ("subject", "valueschemaid", PINNED_ID)):
            raise AvroValueError("Option valueFormat=avro needs 'subject' (or 'valueSchemaId') to choose the reader schema")
    return fmt


def parse_duration_ms(value: str, name: str = "maxTriggerDelay") -> int:
    """`"15m"`, `"30s"`, `"500ms"`, `"2000"` (ms) -> milliseconds, as Spark's time strings."""
    match = _DURATION.match(str(value))
    if not match:
        raise SparklogOptionError(f"Invalid value '{value}' for option '{name}': expected a duration like '15m'")
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _DURATION_MS[unit]


def _duration(value: Any, name: str = "maxTriggerDelay") -> Any:
    return parse_duration_ms(value, name) if isinstance(value, str) else value


def _cache_timeout(value: Any) -> Any:
    return _duration(value, "sparklog.consumer.cache.timeout")


def _option(name, type_, default, doc, importance=LOW, low=None, kafka=None, **extra) -> Setting:
    """A Spark option: `kafka` names the Spark Kafka source option it mirrors ("" when it is ours alone)."""
    return Setting(name, type_, default, doc, importance, low, kafka=kafka, **extra)


_SPARK = None  # the option of Spark's Kafka source of the same name
_CONNECTION_OPTIONS = (
    _option("kafka.bootstrap.servers", STRING, None, "host:port,... of brokers (or set zookeeper.connect)", HIGH,
            kafka=_SPARK),
    _option("zookeeper.connect", STRING, None, "ZooKeeper, to find brokers in its registry and for the Avro "
            "schema registry", HIGH, kafka=""),
    _option("zookeeper.connection.timeout.ms", LONG, DEFAULT_ZOOKEEPER_TIMEOUT_MS, "how long connecting to "
            "ZooKeeper may take", low=1, kafka=""),
)
READ_OPTIONS = Definitions("Spark source", (
    *_CONNECTION_OPTIONS,
    _option("subscribe", STRING, None, "topics to read, comma-separated (one of subscribe, subscribePattern, "
            "assign)", HIGH, kafka=_SPARK),
    _option("subscribePattern", STRING, None, "a regex of the topics to read", HIGH, kafka=_SPARK),
    _option("assign", STRING, None, "JSON of the partitions to read: {\"t\":[0,1]}", HIGH, kafka=_SPARK),
    _option("startingOffsets", STRING, None, "earliest, latest or JSON {\"t\":{\"0\":23}} (default: latest when "
            "streaming, earliest in a batch)", HIGH, kafka=_SPARK),
    _option("endingOffsets", STRING, "latest", "batch reads: latest or JSON", kafka=_SPARK),
    _option("startingTimestamp", LONG, None, "start every partition at this time (ms)", kafka=_SPARK),
    _option("endingTimestamp", LONG, None, "batch reads: end every partition at this time (ms)", kafka=_SPARK),
    _option("startingOffsetsByTimestamp", STRING, None, "JSON of start times per partition", kafka=_SPARK),
    _option("endingOffsetsByTimestamp", STRING, None, "batch reads: JSON of end times per partition",
            kafka=_SPARK),
    _option("startingOffsetsByTimestampStrategy", STRING, "error", "when no offset matches a start time: error "
            "or latest", choices=STRATEGIES, kafka=_SPARK),
    _option("maxOffsetsPerTrigger", LONG, None, "records per micro-batch at most", MEDIUM, 1, kafka=_SPARK),
    _option("minOffsetsPerTrigger", LONG, None, "records a micro-batch waits for, up to maxTriggerDelay", low=1,
            kafka=_SPARK),
    _option("maxTriggerDelay", LONG, DEFAULT_MAX_TRIGGER_DELAY_MS, "how long minOffsetsPerTrigger may delay a "
            "batch (a duration: 15m, 30s, 500ms)", low=0, kafka=_SPARK, convert=_duration),
    _option("minPartitions", INT, None, "Spark partitions at least (large ranges are split)", low=1,
            kafka=_SPARK),
    _option("maxRecordsPerPartition", LONG, None, "records per Spark partition at most", low=1, kafka=_SPARK),
    _option("failOnDataLoss", BOOLEAN, True, "fail when offsets are lost (deleted, fenced); else warn", HIGH,
            kafka=_SPARK),
    _option("includeHeaders", BOOLEAN, False, "add the records' headers column", kafka=_SPARK),
    _option("kafkaConsumer.pollTimeoutMs", LONG, DEFAULT_POLL_TIMEOUT_MS, "how long a task waits for a fetch",
            low=1, kafka=_SPARK),
    _option("fetchOffset.numRetries", INT, DEFAULT_FETCH_OFFSET_NUM_RETRIES, "retries of a failed offset lookup",
            low=0, kafka=_SPARK),
    _option("fetchOffset.retryIntervalMs", LONG, DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS, "wait between those "
            "retries", low=0, kafka=_SPARK),
    _option("kafka.group.id", STRING, None, "the group under which the query's progress is recorded",
            kafka=_SPARK),
    _option("groupIdPrefix", STRING, DEFAULT_GROUP_ID_PREFIX, "prefix of the generated group id", kafka=_SPARK),
    _option("sparklog.queryId", STRING, None, "names the query's own initial offsets in ZooKeeper (default: the "
            "checkpoint location)", kafka=""),
    _option("sparklog.commitProgress", BOOLEAN, True, "record the query's progress in the offset registry",
            kafka=""),
    _option("sparklog.waitForTopics", BOOLEAN, False, "a missing topic is \"no partitions yet\", not an error",
            kafka=""),
    _option("sparklog.consumer.cache.enabled", BOOLEAN, True, "keep each Spark Python worker's consumers between "
            "tasks, one per topic partition (false: every task opens and closes its own)", kafka=""),
    _option("sparklog.consumer.cache.capacity", INT, DEFAULT_CAPACITY, "idle consumers one Python worker keeps at "
            "most, a soft limit (Spark's spark.kafka.consumer.cache.capacity)", low=0, kafka=""),
    _option("sparklog.consumer.cache.timeout", LONG, DEFAULT_IDLE_TIMEOUT_MS, "a consumer idle this long is closed "
            "(a duration: 5m, 30s; Spark's spark.kafka.consumer.cache.timeout)", low=1, kafka="",
            convert=_cache_timeout),
    _option("valueFormat", STRING, "binary", "binary, or avro (decode with the schema registry)", kafka=""),
    _option("subject", STRING, None, "valueFormat=avro: the schema registry subject", kafka=""),
    _option("subjectVersion", INT, None, "valueFormat=avro: the reader schema's version (default: latest)",
            low=1, kafka=""),
    _option("valueSchemaId", INT, None, "valueFormat=avro: the reader schema's id", low=0, kafka=""),
), error=SparklogOptionError, label="Option '{}'", unknown=WARN, case_insensitive=True,
                           noun="option")
WRITE_OPTIONS = Definitions("Spark sink", (
    *_CONNECTION_OPTIONS,
    _option("topic", STRING, None, "the topic of rows without a topic column", HIGH, kafka=_SPARK),
    _option("deliveryGuarantee", STRING, AT_LEAST_ONCE, "at-least-once, or exactly-once: each task's rows in a "
            "transaction the driver commits (datasource/exactly_once.py); Flink KafkaSink's option", HIGH,
            choices=DELIVERY_GUARANTEES, kafka=""),
    _option("transactionalIdPrefix", STRING, None, "exactly-once: the prefix of the tasks' transactional ids "
            "(<prefix>-<partition>) and the name of the sink's decision topic; one per query", kafka=""),
    _option("batchId", STRING, None, "exactly-once batch writes in foreachBatch: the micro-batch's id, so a "
            "replayed batch is not written twice (to_sparklog passes it)", kafka=""),
), error=SparklogOptionError, label="Option '{}'", unknown=WARN, case_insensitive=True,
                           noun="option")


def _json_object(text: str, name: str) -> dict:
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise SparklogOptionError(f"Option '{name}' is not valid JSON: {text!r} ({exc})") from None
    if not isinstance(parsed, dict):
        raise SparklogOptionError(f"Option '{name}' must be a JSON object like {{\"topicA\":{{\"0\":23}}}}")
    return parsed


def parse_partition_json(text: str, name: str) -> dict[tuple[str, int], int]:
    """`{"t":{"0":23,"1":-2}}` -> {("t", 0): 23, ("t", 1): -2}."""
    result = {}
    for topic, partitions in _json_object(text, name).items():
        if not isinstance(partitions, dict):
            raise SparklogOptionError(f"Option '{name}': topic {topic!r} must map partitions to numbers")
        for partition, value in partitions.items():
            try:
                key = (str(topic), int(partition))
            except ValueError:
                raise SparklogOptionError(f"Option '{name}': partition {partition!r} is not an integer") from None
            if not isinstance(value, int) or isinstance(value, bool):
                raise SparklogOptionError(f"Option '{name}': {topic}-{partition} must be an integer, not {value!r}")
            result[key] = value
    return result


def parse_assign(text: str) -> tuple[tuple[str, int], ...]:
    """`{"topicA":[0,1],"topicB":[2,4]}` -> sorted (topic, partition) pairs."""
    pairs = set()
    for topic, partitions in _json_object(text, "assign").items():
        if not isinstance(partitions, list) or not all(isinstance(p, int) and p >= 0 for p in partitions):
            raise SparklogOptionError(f"Option 'assign': {topic!r} must map to a list of partition numbers")
        pairs.update((str(topic), p) for p in partitions)
    if not pairs:
        raise SparklogOptionError("No topicpartitions to assign as specified value for option 'assign' is '{}'")
    return tuple(sorted(pairs))


# ---------------------------------------------------------------------------------------------- reading


# Options Spark or sparklog itself passes, and Kafka settings given bare: never warned about (Rule 5). Spark
# hands a streaming query's `queryName` to its sink among the options, as it does `checkpointLocation`.
_PASSED_OPTIONS = frozenset({"path", "checkpointlocation", "queryname", "bootstrap.servers",
                             "sparklog.avro.readerschemaid"})


def warn_unknown(opts: Mapping[str, str], table: Definitions) -> None:
    """Warn, naming the nearest declared option, about an option nobody reads (Rule 5); client settings
    (`kafka.`, `sparklog.`) are checked by `client_settings`."""
    table.check_known(name for name in opts if name not in _PASSED_OPTIONS and not name.startswith(("kafka.", "sparklog.")))


def check_refused(opts: Mapping[str, str], refused: Mapping[str, str]) -> None:
    """Refuse a Kafka setting given bare or with `kafka.`; `kafka.group.id` alone is accepted (it names
    the group under which progress is recorded, as in Spark's Kafka source)."""
    for name, advice in refused.items():
        if name in opts or ("kafka." + name in opts and name not in _PREFIXED_ALLOWED):
            raise SparklogOptionError(advice)


def parse_connection(opts: Mapping[str, str], passthrough: tuple[str, ...]) -> ConnectionOptions:
    servers = kafka_setting(opts, "bootstrap.servers")
    zookeeper = kafka_setting(opts, "zookeeper.connect")
    if not servers and not zookeeper:
        raise SparklogOptionError(
            "No brokers to connect to: set the option 'kafka.bootstrap.servers' (host:port,...) or "
            "'zookeeper.connect' (brokers are then found in ZooKeeper's broker registry)"
        )
    timeout = READ_OPTIONS.value(opts, "zookeeper.connection.timeout.ms")
    return ConnectionOptions(servers, zookeeper, client_settings(opts, passthrough), timeout)


def client_settings(opts: Mapping[str, str], known: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """The `kafka.`/`sparklog.` settings the client knows, with values it accepts; refuse or log the rest
    (Rule 3)."""
    settings = []
    for name in known:
        for prefixed in ("kafka." + name, "sparklog." + name):
            if prefixed in opts:
                settings.append((name, opts[prefixed]))
    for option in sorted(k for k in opts if k.startswith("kafka.")):
        name = option[len("kafka."):]
        if name in known or name in SOURCE_KAFKA_SETTINGS or is_security_option(name):
            continue
        logger.warning("Kafka option '%s' is not a setting of sparklog's client and is ignored", option)
    _check_client_values(settings)
    return tuple(settings) + security_settings(opts, SparklogOptionError)


def _check_client_values(settings: list[tuple[str, Any]]) -> None:
    """A passed-through value the client would refuse fails now, at load(), not in a task."""
    for name, value in settings:
        defaults = CONSUMER_DEFAULTS if name in CONSUMER_DEFAULTS else PRODUCER_DEFAULTS
        try:
            resolve_settings(defaults, {name: value})
        except ValueError as exc:
            raise SparklogOptionError(f"Option 'kafka.{name}' has a value the client refuses: {exc}") from None


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in SUBSCRIPTIONS if name in opts]
    if len(given) != 1:
        if not given:
            raise SparklogOptionError(
                "One of the following options must be specified for Kafka source: subscribe, "
                "subscribePattern, assign. See the docs for more details."
            )
        names = ", ".join(_SUBSCRIPTION_NAMES[n] for n in given)
        raise SparklogOptionError(f"Only one of the following options can be specified: {names}")
    kind = given[0]
    value = str(opts[kind])
    if kind == "subscribe":
        topics = tuple(sorted({t.strip() for t in value.split(",") if t.strip()}))
        if not topics:
            raise SparklogOptionError(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        if not value.strip():
            raise SparklogOptionError("Pattern to subscribe is empty as specified value for option 'subscribePattern' is ''")
        try:
            re.compile(value.strip())
        except re.error as exc:
            raise SparklogOptionError(f"Option 'subscribePattern' is not a valid regex: {exc}") from None
        return Subscription("subscribePattern", pattern=value.strip())
    return Subscription("assign", partitions=parse_assign(value))


def _offset_spec(opts: Mapping[str, str], prefix: str, default: str) -> OffsetSpec:
    """`{prefix}Timestamp` > `{prefix}OffsetsByTimestamp` > `{prefix}Offsets`, as Spark's Kafka source."""
    global_ts = opts.get(f"{prefix}timestamp")
    if global_ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(str(global_ts).strip()))
        except ValueError:
            raise SparklogOptionError(f"Option '{prefix}Timestamp' must be a number of milliseconds") from None
    by_ts = opts.get(f"{prefix}offsetsbytimestamp")
    if by_ts is not None:
        spec = parse_partition_json(by_ts, f"{prefix}OffsetsByTimestamp")
        return OffsetSpec("timestamps", offsets=tuple(sorted(spec.items())))
    text = str(opts.get(f"{prefix}offsets", default)).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    spec = parse_partition_json(text, f"{prefix}Offsets")
    for (topic, partition), offset in sorted(spec.items()):
        if offset < EARLIEST:  # else a batch reports "Offsets [-3, 0) are missing": data loss, for a typo
            raise SparklogOptionError(f"Option '{prefix}Offsets': {topic}-{partition} is {offset}; use an offset "
                                      ">= 0, -2 for earliest or -1 for latest")
    return OffsetSpec("offsets", offsets=tuple(sorted(spec.items())))


def parse_read_options(options: Mapping[str, str], streaming: bool | None) -> ReadOptions:
    """Validate and parse a reader's options; `streaming` selects Spark's stream or batch rules.

    `streaming=None` checks only what batch and streaming reads share: `schema()` runs it at `load()`,
    before Spark says which kind of read it is.
    """
    opts = _lower(options)
    check_refused(opts, REFUSED_READ_OPTIONS)
    warn_unknown(opts, READ_OPTIONS)
    connection = parse_connection(opts, CONSUMER_SETTINGS)
    subscription = parse_subscription(opts)
    starting = _offset_spec(opts, "starting", "earliest" if streaming is False else "latest")
    ending = _offset_spec(opts, "ending", "latest")
    if streaming:
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in opts:
                raise SparklogOptionError(
                    "ending offset not valid in streaming queries: remove the option, or use a batch read "
                    "(spark.read) to stop at given offsets")
    elif streaming is False:
        _check_batch_offsets(starting, ending)
    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in STRATEGIES:
        raise SparklogOptionError(f"Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', not {strategy!r}")
    if streaming is False:
        for name in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
            opts.pop(name, None)  # Spark's Kafka source ignores them in batch queries
    option = functools.partial(READ_OPTIONS.value, opts)
    max_offsets, min_offsets = option("maxOffsetsPerTrigger"), option("minOffsetsPerTrigger")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise SparklogOptionError(  # Spark's KafkaSourceProvider message
            f"The value of minOffsetPerTrigger({min_offsets}) is higher than the maxOffsetsPerTrigger({max_offsets})."
        )
    return ReadOptions(
        connection=connection,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_strategy=strategy,
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=option("maxTriggerDelay"),
        min_partitions=option("minPartitions"),
        max_records_per_partition=option("maxRecordsPerPartition"),
        fail_on_data_loss=option("failOnDataLoss"),
        include_headers=option("includeHeaders"),
        poll_timeout_ms=option("kafkaConsumer.pollTimeoutMs"),
        fetch_offset_num_retries=option("fetchOffset.numRetries"),
        fetch_offset_retry_interval_ms=option("fetchOffset.retryIntervalMs"),
        group_id=opts.get("kafka.group.id"),
        group_id_prefix=option("groupIdPrefix"),
        # A group id may be shared by many queries, so it never keys a query's own state (issue 13 item 3).
        query_key=opts.get("sparklog.queryid") or opts.get("checkpointlocation"),
        commit_progress=option("sparklog.commitProgress"),
        wait_for_topics=option("sparklog.waitForTopics"),
        avro_options=_avro_options(opts),
        consumer_cache=PoolSettings(option("sparklog.consumer.cache.enabled"),
                                    option("sparklog.consumer.cache.capacity"),
                                    option("sparklog.consumer.cache.timeout")),
    )


def _avro_options(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The options `valueFormat=avro` decodes with, validated; empty for raw binary values."""
    try:
        if value_format(opts) != "avro":
            return ()
    except AvroValueError as exc:
        raise SparklogOptionError(str(exc)) from None
    return tuple(sorted((k, str(v)) for k, v in opts.items() if k in AVRO_OPTIONS))


def _check_batch_offsets(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Spark's Kafka source's batch rules: never start at latest, never end at earliest."""
    if starting.kind == "latest":
        raise SparklogOptionError("starting offset can't be latest for batch queries on Kafka")
    for (topic, partition), offset in starting.offsets if starting.kind == "offsets" else ():
        if offset == LATEST:
            raise SparklogOptionError(f"startingOffsets for {topic}-{partition} can't be latest for batch queries on Kafka")
    if ending.kind == "earliest":
        raise SparklogOptionError("ending offset can't be earliest for batch queries on Kafka")
    for (topic, partition), offset in ending.offsets if ending.kind == "offsets" else ():
        if offset == EARLIEST:
            raise SparklogOptionError(f"endingOffsets for {topic}-{partition} can't be earliest for batch queries on Kafka")


# ---------------------------------------------------------------------------------------------- writing


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    check_refused(opts, REFUSED_WRITE_OPTIONS)
    warn_unknown(opts, WRITE_OPTIONS)
    connection = parse_connection(opts, PRODUCER_SETTINGS)
    topic = opts.get("topic")
    guarantee, prefix = opts.get("deliveryguarantee", AT_LEAST_ONCE).strip().lower(), opts.get("transactionalidprefix")
    if guarantee not in DELIVERY_GUARANTEES:
        raise SparklogOptionError(f"Invalid value '{guarantee}' for option 'deliveryGuarantee': expected one of "
                                  f"{', '.join(DELIVERY_GUARANTEES)}")
    if guarantee == EXACTLY_ONCE and not prefix:
        raise SparklogOptionError("deliveryGuarantee exactly-once needs the option transactionalIdPrefix")
    if prefix is not None and not _PREFIX.fullmatch(prefix):
        raise SparklogOptionError(f"Invalid value '{prefix}' for option 'transactionalIdPrefix': 1 to 200 of "
                                  "a-z, A-Z, 0-9, '.', '_' and '-' (it names a topic too)")
    batch_id = opts.get("batchid")
    return WriteOptions(connection=connection, topic=topic.strip() if topic else None,
                        producer_settings=connection.settings, delivery_guarantee=guarantee,
                        transactional_id_prefix=prefix, batch_id=_batch_id(batch_id))


def _batch_id(value: str | None) -> int | None:
    if value is None:
        return None
    if not str(value).strip().isdigit():
        raise SparklogOptionError(f"Invalid value '{value}' for option 'batchId': expected a batch id (0, 1, ...)")
    return int(value)
