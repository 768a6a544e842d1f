"""Client settings under Kafka's own dotted names, with Kafka's defaults (or the paper's, where it names one).

Rule 1: a setting may be given by its dotted name (`{"batch.size": 65536}`, the way the data source and
Kafka users pass them) or as a keyword with underscores (`batch_size=65536`); both mean the same setting.
Rule 2: an unknown name raises `ValueError` (Kafka only warns, but a typo here silently changes nothing).
Strings are converted to the default's type, so settings may come straight from a command line or Spark.
"""

from __future__ import annotations

from typing import Any, Mapping

COMMON_DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": None,
    "client.id": "sparklog-python",
    "request.timeout.ms": 30_000,  # Kafka's default
    "retry.backoff.ms": 100,  # Kafka's default: the first retry's wait, doubling (see backoff.py)
    "retry.backoff.max.ms": 1_000,  # Kafka's default (KIP-580)
    "reconnect.backoff.ms": 50,  # Kafka's default
    "reconnect.backoff.max.ms": 1_000,  # Kafka's default (KIP-144)
    "metadata.max.age.ms": 300_000,  # Kafka's default: refresh even without errors every 5 minutes
    "socket.connection.setup.timeout.ms": 10_000,  # Kafka's default
    "max.in.flight.requests.per.connection": 5,  # Kafka's default
    "receive.message.max.bytes": 100 * 1024 * 1024 + 512,  # librdkafka's default frame limit
}

PRODUCER_DEFAULTS: dict[str, Any] = {
    **COMMON_DEFAULTS,
    "acks": "all",  # Kafka >= 3.0's default (the paper's producer waited for the leader only: acks=1)
    "enable.idempotence": True,  # Kafka >= 3.0's default: see client/idempotence.py for what it implies
    "batch.size": 65_536,  # design notes 4.4: "64k or 10 ms"
    "linger.ms": 10,  # design notes 4.4
    "batch.num.messages": 10_000,  # librdkafka's name and default: records per batch at most
    "compression.type": "none",
    "buffer.memory": 32 * 1024 * 1024,  # Kafka's default: bytes of unsent records before send() blocks
    "max.block.ms": 60_000,  # Kafka's default
    "max.request.size": 1_048_576,  # Kafka's default
    "retries": 2_147_483_647,  # Kafka's default; bounded in practice by delivery.timeout.ms
    "delivery.timeout.ms": 120_000,  # Kafka's default
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    **COMMON_DEFAULTS,
    "group.id": None,
    "fetch.min.bytes": 1,  # Kafka's default
    "fetch.max.wait.ms": 500,  # Kafka's default
    "fetch.max.bytes": 52_428_800,  # Kafka's default
    "max.partition.fetch.bytes": 1_048_576,  # Kafka's default
    "check.crcs": True,  # Kafka's default
    "auto.offset.reset": "latest",  # Kafka's default; the paper's names smallest|largest are accepted
    "consumer.timeout.ms": -1,  # kafka-python's consumer_timeout_ms: iteration stops after this idle time
    "max.poll.records": 500,  # Kafka's default
    "queued.max.chunks": 4,  # fetched responses buffered ahead of the application (old Kafka: 10 chunks)
    "isolation.level": "read_uncommitted",
}

GROUP_DEFAULTS: dict[str, Any] = {
    **CONSUMER_DEFAULTS,
    "auto.offset.reset": "smallest",  # the paper: "the smallest or the largest offset"
    "auto.commit.enable": True,  # the 0.8 ZooKeeper consumer's name
    "auto.commit.interval.ms": 5_000,  # Kafka's default
    "zookeeper.connect": None,
    "zookeeper.session.timeout.ms": 6_000,  # the 0.8 consumer's default
    "zookeeper.connection.timeout.ms": 6_000,
    "rebalance.backoff.ms": 200,  # the 0.8 consumer waited 2000 ms; we back off from 200 ms, doubling
    "rebalance.max.backoff.ms": 3_000,
    "rebalance.handover.wait.ms": 2_000,  # how long a rebalance waits for the application's record in hand
    "consumer.id": None,  # default: <hostname>-<pid>-<random>
}

AUTO_OFFSET_RESET = {"smallest": "earliest", "earliest": "earliest", "largest": "latest", "latest": "latest",
                     "none": "none"}
ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1, -1: -1, 0: 0, 1: 1}


def resolve(defaults: Mapping[str, Any], *sources: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge `sources` (later wins) over `defaults`, accepting dotted or underscored names."""
    by_underscore = {name.replace(".", "_"): name for name in defaults}
    settings = dict(defaults)
    for source in sources:
        for name, value in (source or {}).items():
            dotted = name if name in defaults else by_underscore.get(name)
            if dotted is None:
                raise ValueError(f"unknown setting {name!r}; known: {', '.join(sorted(defaults))}")
            settings[dotted] = _convert(dotted, value, defaults[dotted])
    return _normalize(settings)


def _convert(name: str, value: Any, default: Any) -> Any:
    if not isinstance(value, str) or default is None or isinstance(default, str):
        return value
    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{name} is true or false, not {value!r}")
        return value.lower() == "true"
    if name == "acks":
        return value
    try:
        return type(default)(value)
    except ValueError:
        raise ValueError(f"{name} must be a {type(default).__name__}, not {value!r}") from None


def _normalize(settings: dict[str, Any]) -> dict[str, Any]:
    if "acks" in settings:
        if settings["acks"] not in ACKS:
            raise ValueError(f"acks is 0, 1 or all, not {settings['acks']!r}")
        settings["acks"] = ACKS[settings["acks"]]
    if "auto.offset.reset" in settings:
        reset = str(settings["auto.offset.reset"]).lower()
        if reset not in AUTO_OFFSET_RESET:
            raise ValueError(f"auto.offset.reset is one of {sorted(AUTO_OFFSET_RESET)}, not {reset!r}")
        settings["auto.offset.reset"] = AUTO_OFFSET_RESET[reset]
    if settings.get("max.in.flight.requests.per.connection", 1) < 1:
        raise ValueError("max.in.flight.requests.per.connection must be at least 1")
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
