"""`sparklog produce` and `sparklog consume`: the console clients, like Kafka's tools (`sparklog groups` is in
groups.py).

    sparklog produce TOPIC [--key-separator :] < lines
    sparklog consume TOPIC [--group G] [--from-beginning] [--max-messages N]
    sparklog consume --bootstrap-server HOST:PORT --topic T --group G     (a Kafka group, as Kafka's tool)
    sparklog consume TOPIC --partition P --offset N|earliest|latest

The topic may also be `--topic TOPIC` and `--property` `--producer-property`/`--consumer-property`, as Kafka's
console tools name them; their own --property settings are theirs here too: the producer's parse.key and
key.separator, the consumer's (its DefaultMessageFormatter's, the only `--formatter`) print.timestamp,
print.partition, print.offset, print.headers, print.key, print.value, key.separator, line.separator,
headers.separator, headers.key.separator and null.literal, their values taken as typed (spaces kept).

Servers come from `--bootstrap-server host:port[,...]`, else from the ZooKeeper broker registry
(`--zookeeper`, default 127.0.0.1:2181), waiting `--zookeeper-timeout-ms` (zookeeper.connection.timeout.ms) at
most for a ZooKeeper server. `--property key=value` passes any client setting by its Kafka name.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    produce = subparsers.add_parser("produce", help="send lines from stdin as records")
    _connection_args(produce, "--producer-property")
    _topic_args(produce)
    produce.add_argument("--key-separator", help="split each line into key SEP value at the first SEP")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.set_defaults(func=run_produce)

    consume = subparsers.add_parser("consume", help="print records of a topic")
    _connection_args(consume, "--consumer-property")
    _topic_args(consume)
    consume.add_argument("--group", help="consume as a member of this consumer group: a Kafka group with "
                         "--bootstrap-server (or --consumer-property group.id=G), else the paper's ZooKeeper group")
    consume.add_argument("--from-beginning", action="store_true",
                         help="start at the smallest offset (new groups, or without --group)")
    consume.add_argument("--max-messages", type=_count, help="exit after this many records")
    consume.add_argument("--partition", type=int, action="append", help="only these partitions (no --group)")
    consume.add_argument("--offset", type=_start_offset, help="start here in the one --partition: an offset, "
                         "earliest or latest (kafka-console-consumer's --offset)")
    consume.add_argument("--print-key", action="store_true", help="print KEY<tab>VALUE")
    consume.add_argument("--timeout-ms", type=int, default=-1, help="exit after this long without a record")
    consume.add_argument("--formatter", type=_formatter, help="Kafka's DefaultMessageFormatter (the only one; "
                         "its --property settings print.timestamp, print.headers, line.separator ...)")
    consume.set_defaults(func=run_consume, check_offset=lambda args: _offset_alone(consume, args))


def _connection_args(parser: argparse.ArgumentParser, kafka_property_option: str) -> None:
    parser.add_argument("--bootstrap-server", help="host:port[,host:port] (default: from ZooKeeper)")
    parser.add_argument("--zookeeper", default=DEFAULT_ZOOKEEPER, help="host:port[/chroot] (default %(default)s)")
    add_zookeeper_timeout(parser)
    producing = kafka_property_option == "--producer-property"
    example = "linger.ms=50" if producing else "fetch.max.wait.ms=100"
    own = "the reader's " + ", ".join(READER_PROPERTIES) if producing else "the formatter's " + ", ".join(
        FORMATTER_PROPERTIES)
    parser.add_argument("--property", kafka_property_option, action="append", default=[], metavar="KEY=VALUE",
                        help=f"a client setting by its Kafka name, e.g. {example} (listed in docs/settings.md), "
                             f"or {own}")


def _topic_args(parser: argparse.ArgumentParser) -> None:
    """The topic as sparklog's positional TOPIC or as Kafka's console tools name it, `--topic TOPIC`: one of
    them, once (checked by `_one_topic` when the command runs)."""
    parser.add_argument("topic", nargs="?")
    parser.add_argument("--topic", dest="topic_option", metavar="TOPIC", help="the topic (as TOPIC)")
    parser.set_defaults(check_topic=lambda args: _one_topic(parser, args))


def _start_offset(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"an offset (>= 0), earliest or latest, not {text!r}")
    return int(text)


def _offset_alone(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """kafka-console-consumer's rules for --offset: one partition named, no --from-beginning, no group."""
    if args.offset is None:
        return
    if len(args.partition or ()) != 1:
        parser.error("--offset needs exactly one --partition")
    if args.from_beginning or args.group:
        parser.error(f"--offset is not allowed with {'--from-beginning' if args.from_beginning else '--group'}")


def _one_topic(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.topic is not None and args.topic_option is not None:
        parser.error(f"name the topic once: {args.topic!r} or --topic {args.topic_option!r}")
    if args.topic is None and args.topic_option is None:
        parser.error("the topic is required (TOPIC or --topic TOPIC)")
    args.topic = args.topic if args.topic is not None else args.topic_option


def add_zookeeper_timeout(parser: argparse.ArgumentParser, hidden: bool = False) -> None:
    """`--zookeeper-timeout-ms MS`, zookeeper.connection.timeout.ms of every command that may ask ZooKeeper;
    `hidden`: the same option repeated after a subcommand (as `--zookeeper` is), without a default of its own."""
    if hidden:
        parser.add_argument("--zookeeper-timeout-ms", type=_zookeeper_timeout_ms, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)
        return
    parser.add_argument("--zookeeper-timeout-ms", type=_zookeeper_timeout_ms, metavar="MS",
                        help="how long to wait for a ZooKeeper server before giving up "
                             "(zookeeper.connection.timeout.ms; default %d)" % _zookeeper_timeout_default())


def _zookeeper_timeout_ms(text: str) -> int:
    from sparklog.client.config import ADMIN

    return ADMIN["zookeeper.connection.timeout.ms"].parse(text, argparse.ArgumentTypeError)


def _zookeeper_timeout_default() -> int:
    from sparklog.client.config import ADMIN

    return ADMIN["zookeeper.connection.timeout.ms"].default


def zookeeper_timeout_s(args: argparse.Namespace) -> float:
    """The seconds a command waits for a ZooKeeper server: `--zookeeper-timeout-ms`, else the default."""
    given = args.zookeeper_timeout_ms
    return (given if given is not None else _zookeeper_timeout_default()) / 1000.0


# kafka-console-consumer's --formatter names of its DefaultMessageFormatter (Kafka 2/3 and 3.7+)
DEFAULT_FORMATTERS = ("kafka.tools.DefaultMessageFormatter", "org.apache.kafka.tools.consumer.DefaultMessageFormatter")


def _formatter(text: str) -> str:
    if text not in DEFAULT_FORMATTERS and text != "DefaultMessageFormatter":
        raise argparse.ArgumentTypeError(f"the formatter is Kafka's DefaultMessageFormatter ({DEFAULT_FORMATTERS[0]} "
                                         f"or {DEFAULT_FORMATTERS[1]}), not {text!r}")
    return text


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a count (an integer >= 0), not {text!r}")
    return value


# Kafka's console tools take these as --property (their line reader's and message formatter's), not as client
# settings: {name: default}. The separator's default is Kafka's, a tab.
READER_PROPERTIES = {"parse.key": "false", "key.separator": "\t"}
FORMATTER_PROPERTIES = {"print.timestamp": "false", "print.key": "false", "print.value": "true",
                        "print.partition": "false", "print.offset": "false", "print.headers": "false",
                        "key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
                        "headers.key.separator": ":", "null.literal": "null"}


def _tool_properties(args: argparse.Namespace, known: dict[str, str]) -> dict[str, str | bool]:
    """The console tool's own --property settings (`known`), taken out of `args.property`: the rest are client
    settings. Boolean ones are true or false, as Kafka reads them."""
    ours = [p for p in args.property if p.split("=", 1)[0].strip() in known]
    if any("=" not in p for p in args.property):
        raise SystemExit(f"error: --property: expected KEY=VALUE, not {next(p for p in args.property if '=' not in p)!r}")
    given = {p.split("=", 1)[0].strip(): p.split("=", 1)[1] for p in ours}  # a separator's spaces are kept
    args.property = [p for p in args.property if p not in ours]
    chosen: dict[str, str | bool] = {**known, **given}
    for name, value in chosen.items():
        if known[name] in ("true", "false"):
            if value.lower() not in ("true", "false"):
                raise SystemExit(f"error: --property {name} is true or false, not {value!r}")
            chosen[name] = value.lower() == "true"
    return chosen


def _properties(args: argparse.Namespace) -> dict[str, str]:
    from sparklog.client.config import parse_key_values

    try:
        settings = parse_key_values(args.property)
    except ValueError as exc:
        raise SystemExit(f"error: --property: {exc}") from None
    settings.setdefault("zookeeper.connection.timeout.ms", str(int(zookeeper_timeout_s(args) * 1000)))  # README
    return settings


def _servers(args: argparse.Namespace) -> dict:
    return {"bootstrap_servers": args.bootstrap_server, "zookeeper": None if args.bootstrap_server else args.zookeeper}


# -- produce / consume --------------------------------------------------------------------------------------


def run_produce(args: argparse.Namespace) -> int:
    from sparklog.client.producer import Producer

    args.check_topic(args)
    reader = _tool_properties(args, READER_PROPERTIES)
    separator = args.key_separator.encode() if args.key_separator else None
    if separator is None and reader["parse.key"]:
        separator = reader["key.separator"].encode()
    failures = []
    with Producer(**_servers(args), **_properties(args)) as producer:
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if separator is not None and separator in line:
                key, line = line.split(separator, 1)
            future = producer.send(args.topic, line, key=key, partition=args.partition)
            future.add_errback(failures.append)
        producer.flush()
    for error in failures[:5]:
        print(f"error: {error}", file=sys.stderr)
    return 1 if failures else 0


def run_consume(args: argparse.Namespace) -> int:
    args.check_topic(args)
    args.check_offset(args)
    kafka_group = _kafka_group(args)
    if kafka_group and args.partition:
        raise ValueError("--partition is not allowed with a group: the group coordinator assigns the partitions")
    formatter = _tool_properties(args, FORMATTER_PROPERTIES)
    formatter["print.key"] = formatter["print.key"] or args.print_key
    if formatter["print.timestamp"]:
        formatter["timestamp.type"] = _timestamp_type(args, _properties(args))
    settings = _properties(args)
    settings.setdefault("consumer.timeout.ms", args.timeout_ms)
    reset = "earliest" if args.from_beginning else "latest"
    out = sys.stdout.buffer
    count = 0
    if kafka_group:
        consumer = _kafka_group_consumer(args, kafka_group, settings, reset)
    elif args.group:
        consumer = _group_consumer(args, settings, reset)
    else:
        consumer = _plain_consumer(args, settings, reset)
    try:
        for record in consumer if args.max_messages != 0 else ():
            out.write(_formatted(record, formatter))
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
        out.flush()
        if args.group or kafka_group:
            consumer.commit()
    except BrokenPipeError:
        pass
    finally:
        consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _kafka_group(args: argparse.Namespace) -> str | None:
    """kafka-console-consumer's group: `--group` or the `group.id` consumer property (both: they must agree).
    With --bootstrap-server it is a Kafka group, joined through the group coordinator (KafkaGroupConsumer);
    with ZooKeeper only, `--group` is the paper's ZooKeeper group (GroupConsumer)."""
    named = next((p.split("=", 1)[1].strip() for p in args.property if p.split("=", 1)[0].strip() == "group.id"),
                 None)
    if args.group and named and args.group != named:
        raise ValueError(f"the group ids given by --group ({args.group!r}) and --consumer-property group.id "
                         f"({named!r}) differ")
    return (args.group or named) if args.bootstrap_server else None


def _formatted(record, formatter: dict) -> bytes:
    """Kafka's DefaultMessageFormatter: the fields asked for, in its order (timestamp, partition, offset,
    headers, key, value), joined by key.separator, ended by line.separator."""
    fields = []
    if formatter["print.timestamp"]:
        fields.append(b"%s:%d" % (formatter["timestamp.type"], record.timestamp) if record.timestamp >= 0
                      else b"NO_TIMESTAMP")
    if formatter["print.partition"]:
        fields.append(b"Partition:%d" % record.partition)
    if formatter["print.offset"]:
        fields.append(b"Offset:%d" % record.offset)
    if formatter["print.headers"]:
        fields.append(_headers(record.headers, formatter) if record.headers else b"NO_HEADERS")
    null = formatter["null.literal"].encode()
    if formatter["print.key"]:
        fields.append(record.key if record.key is not None else null)
    if formatter["print.value"]:
        fields.append(record.value if record.value is not None else null)
    return formatter["key.separator"].encode().join(fields) + formatter["line.separator"].encode()


def _headers(headers, formatter: dict) -> bytes:
    null = formatter["null.literal"].encode()
    pairs = [name.encode() + formatter["headers.key.separator"].encode() + (null if value is None else value)
             for name, value in headers]
    return formatter["headers.separator"].encode().join(pairs)


def _timestamp_type(args, settings: dict) -> bytes:
    """The topic's message.timestamp.type, as the formatter names it (CreateTime or LogAppendTime): a record
    read here does not carry its batch's type, and the topic's config is what the broker stamped by."""
    from sparklog.client.admin import AdminClient

    with AdminClient(**_servers(args), **{k: v for k, v in settings.items() if k != "consumer.timeout.ms"
                                          and k in _admin_settings()}) as admin:
        value = admin.describe_configs(args.topic).get("message.timestamp.type", ("CreateTime", 0))[0]
    return (value or "CreateTime").encode()


def _admin_settings() -> frozenset[str]:
    from sparklog.client.config import ADMIN

    return frozenset(ADMIN)


def _kafka_group_consumer(args, group: str, settings: dict, reset: str):
    from sparklog.client.kafka_group_consumer import KafkaGroupConsumer

    settings.update({"group.id": group, "auto.offset.reset": reset})
    return KafkaGroupConsumer([args.topic], bootstrap_servers=args.bootstrap_server, **settings)


def _group_consumer(args, settings: dict, reset: str):
    from sparklog.client.group import GroupConsumer

    if args.bootstrap_server:
        settings["bootstrap.servers"] = args.bootstrap_server
    return GroupConsumer([args.topic], args.group, args.zookeeper, auto_offset_reset=reset, **settings)


def _plain_consumer(args, settings: dict, reset: str):
    from sparklog.client.consumer import Consumer

    settings["auto.offset.reset"] = reset
    consumer = Consumer(**_servers(args), **settings)
    try:
        idle = args.timeout_ms / 1000 if args.partition and args.timeout_ms >= 0 else None  # the wait it had
        known = consumer.partitions_for_topic(args.topic, timeout=idle)
        missing = [p for p in args.partition or () if p not in known]
        if missing:  # else it would wait for records of a partition that is not there, and say "0 messages"
            raise ValueError(f"topic {args.topic!r} has {len(known)} partitions, not partition {missing[0]}")
    except BaseException:
        consumer.close()
        raise
    consumer.assign([(args.topic, p) for p in args.partition or known])
    if args.offset is not None:  # out of the log, auto.offset.reset (latest here) decides, as in Kafka's tool
        tp = (args.topic, args.partition[0])
        if args.offset == "earliest":
            consumer.seek_to_beginning(tp)
        elif args.offset == "latest":
            consumer.seek_to_end(tp)
        else:
            consumer.seek(tp, args.offset)
    return consumer
