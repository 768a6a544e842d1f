"""`sparklog topics create|list|describe|alter|delete|elect-leaders|reassign`, shaped like Kafka's
`kafka-topics.sh` (and, for `alter --config`, `kafka-configs.sh --alter --add-config/--delete-config`).

The topic commands talk to ZooKeeper (as `kafka-topics.sh --zookeeper` did), or with `--bootstrap-server` to the
brokers' Admin API (`topics_admin.py`, as Kafka 3's tool); `describe` also asks each
partition's leader for its log start and end offsets when that broker is reachable, and flags partitions
that are offline (no live leader) or under-replicated (ISR smaller than the replica list). Topic configs are
checked against the storage's `LogConfig` before anything is written: a bad or unknown one is refused with
one line naming it; `alter` writes the new overrides in one set, which the brokers apply to open logs.
`elect-leaders` writes Kafka's `/admin/preferred_replica_election` request, and `reassign --plan FILE` (the
JSON of kafka-reassign-partitions) its `/admin/reassign_partitions` request; the controller acts on both.
`reassign --verify` exits 0 once every partition of the plan has exactly its target replicas, 1 before.
`reassign --throttle BYTES_PER_SEC` first writes the replication throttles for the moving replicas, as
kafka-reassign-partitions does (coordination/replication_throttles.py Rule: reassignment-throttles); the
`--verify` that finds the plan done removes them.
The internal `__consumer_offsets` is neither grown nor deleted here, as `kafka-topics.sh` refuses (its group
-> partition mapping is offsets.topic.num.partitions; the brokers refuse the same through the admin APIs).
"""

from __future__ import annotations

import argparse
import logging
import sys

from sparklog.cli.topic_rules import checked_overrides, parse_replica_assignment, partition_status
from sparklog.cli.columns import print_columns
from sparklog.cli.console import add_zookeeper_timeout, zookeeper_timeout_s
from sparklog.protocol import consumer_offsets

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"


def add_parser(subparsers) -> None:
    topics = subparsers.add_parser("topics", help="create, list, describe and delete topics")
    topics.add_argument("--zookeeper", default=DEFAULT_ZOOKEEPER, help="host:port[/chroot] (default %(default)s)")
    add_zookeeper_timeout(topics)
    topics_sub = topics.add_subparsers(dest="topics_command", metavar="SUBCOMMAND")
    create = topics_sub.add_parser("create", help="create a topic, partitions round-robin over live brokers")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1,
                        help="copies of each partition, placed rack-aware when every broker has broker.rack")
    create.add_argument("--replica-assignment", metavar="B:B,B:B",
                        help="explicit replicas, as kafka-topics.sh: partitions separated by commas, each "
                             "partition's brokers by colons, the first its preferred leader (e.g. 1:2,2:3)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="topic-level override (retention.ms, segment.bytes, ...); repeatable")
    create.set_defaults(func=_zookeeper_only(_topics_create))
    lst = topics_sub.add_parser("list", help="list topics")
    lst.set_defaults(func=_zookeeper_only(_topics_list))
    describe = topics_sub.add_parser("describe", help="partitions, leaders, replicas, ISR, log offsets")
    describe.add_argument("name", nargs="?")
    describe.add_argument("--under-replicated-partitions", action="store_true",
                          help="only partitions whose ISR is smaller than their replica list")
    describe.add_argument("--unavailable-partitions", action="store_true",
                          help="only partitions without a live leader")
    describe.set_defaults(func=_zookeeper_only(_topics_describe))
    alter = topics_sub.add_parser("alter", help="add partitions, or set and delete config overrides, live")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, help="the new (larger) number of partitions")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                       help="set a topic-level override; repeatable")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="remove an override (back to the broker default); repeatable")
    alter.add_argument("--replica-assignment", metavar="B:B,B:B", help="with --partitions: every partition's "
                       "replicas, as for create; the entries past the current count place the new partitions")
    alter.set_defaults(func=_zookeeper_only(_topics_alter))
    elect = topics_sub.add_parser("elect-leaders", help="move leadership back to each partition's preferred "
                                                        "(first) replica")
    elect.add_argument("--topic", help="only this topic's partitions (default: every topic)")
    elect.set_defaults(func=_zookeeper_only(_topics_elect_leaders))
    reassign = topics_sub.add_parser("reassign", help="move partitions to other brokers (kafka-reassign-partitions)")
    reassign.add_argument("--plan", required=True, metavar="FILE",
                          help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}')
    reassign.add_argument("--verify", action="store_true", help="report whether the plan has been carried out "
                          "(and, once it has, remove the replication throttles)")
    reassign.add_argument("--throttle", type=_positive_rate, metavar="BYTES_PER_SEC",
                          help="bound the replication of the moving replicas to this rate (kafka-reassign-partitions)")
    reassign.set_defaults(func=_zookeeper_only(_topics_reassign))
    delete = topics_sub.add_parser("delete", help="delete a topic (brokers delete their local logs)")
    delete.add_argument("name")
    delete.set_defaults(func=_zookeeper_only(_topics_delete))
    topics.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                        help="through the brokers' Admin API instead of ZooKeeper (kafka-topics.sh's form)")
    for parser in (create, lst, describe, alter, delete, elect, reassign):
        parser.add_argument("--zookeeper", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        parser.add_argument("--bootstrap-server", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        add_zookeeper_timeout(parser, hidden=True)
    topics.set_defaults(func=lambda args: topics.print_help() or 2)


def _zookeeper_only(command):
    """With --bootstrap-server (Kafka 3's kafka-topics.sh form) the command goes through the Admin API
    (topics_admin.py); with --zookeeper, through ZooKeeper."""
    def run(args: argparse.Namespace) -> int:
        if getattr(args, "bootstrap_server", None) is not None:
            from sparklog.cli import topics_admin

            return topics_admin.run(args, DESCRIBE_OFFSETS_TIMEOUT_S)
        return command(args)
    return run


# -- topics -----------------------------------------------------------------------------------------------------


def _zk(args):
    from sparklog.coordination.connection import connect

    return connect(args.zookeeper, timeout=zookeeper_timeout_s(args))


def _topics_create(args) -> int:
    from sparklog.client.config import parse_key_values
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close

    try:
        config = checked_overrides(parse_key_values(args.config))
        assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    zk = _zk(args)
    try:
        created = topics.create_topic(zk, args.name, args.partitions, args.replication_factor, config=config,
                                      assignment=assignment)
    except _topic_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        close(zk)
    print(f"Created topic {created.name} with {len(created.partitions)} partitions.")
    return 0


def _topic_errors() -> tuple[type[Exception], ...]:
    """What a topic command reports as one `error:` line (bad input or state, never a bug)."""
    from sparklog.coordination import topics

    return (topics.TopicExists, topics.UnknownTopic, topics.InvalidTopicName, topics.InvalidPartitions,
            topics.InvalidReplicationFactor, ValueError)


def _topics_alter(args) -> int:
    from sparklog.client.config import parse_key_values
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close

    if args.partitions is None and not args.config and not args.delete_config:
        print("error: nothing to alter: give --partitions, --config or --delete-config", file=sys.stderr)
        return 2
    if args.replica_assignment and args.partitions is None:
        print("error: --replica-assignment places new partitions: give --partitions too", file=sys.stderr)
        return 2
    if args.name == consumer_offsets.TOPIC and args.partitions is not None:
        print(f"error: {consumer_offsets.FIXED_PARTITIONS}", file=sys.stderr)
        return 1
    zk = _zk(args)
    try:
        done = []
        found = topics.get_topic(zk, args.name)
        if args.partitions is not None and args.partitions <= len(found.partitions):  # before writing anything
            raise topics.InvalidPartitions(f"topic {args.name!r} has {len(found.partitions)} partitions; "
                                           f"--partitions must be larger, not {args.partitions}")
        if args.config or args.delete_config:
            wanted = _altered_config(found.config, parse_key_values(args.config), args.delete_config)
            topics.set_topic_config(zk, args.name, wanted)
            done.append("config " + (", ".join(f"{k}={v}" for k, v in sorted(wanted.items())) or "(no overrides)"))
        if args.partitions is not None:
            topics.add_partitions(zk, args.name, args.partitions, assignment=_added_assignment(args, found))
            done.append(f"partitions {len(found.partitions)} -> {args.partitions}")
    except _topic_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        close(zk)
    print(f"Altered topic {args.name}: {'; '.join(done)}.")
    return 0


def _added_assignment(args, found) -> dict[int, tuple[int, ...]] | None:
    """kafka-topics --alter's --replica-assignment lists every partition; its entries from the topic's current
    count on are the new partitions' (add_partitions checks them as CreatePartitions does)."""
    if not args.replica_assignment:
        return None
    listed = parse_replica_assignment(args.replica_assignment)
    return {p: replicas for p, replicas in listed.items() if p >= len(found.partitions)}


def _altered_config(current: dict[str, str], settings: dict[str, str], deleted: list[str]) -> dict[str, str]:
    missing = sorted(set(deleted) - set(current))
    if missing:
        raise ValueError(f"cannot delete {', '.join(missing)}: not set on the topic "
                         f"(its overrides: {', '.join(sorted(current)) or 'none'})")
    wanted = {k: v for k, v in current.items() if k not in deleted}
    wanted.update(settings)
    return checked_overrides(wanted)


def _topics_list(args) -> int:
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close

    zk = _zk(args)
    try:
        for name in topics.list_topics(zk):
            print(name)
    finally:
        close(zk)
    return 0


def _topics_delete(args) -> int:
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close

    if args.name == consumer_offsets.TOPIC:
        print(f"error: {args.name} is internal: the group coordinators need it", file=sys.stderr)
        return 1
    zk = _zk(args)
    try:
        topics.delete_topic(zk, args.name)
    except (topics.UnknownTopic, topics.InvalidTopicName) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        close(zk)
    print(f"Deleted topic {args.name}.")
    return 0


def _fenced(by_broker: dict) -> str:
    """Damaged offset ranges the brokers fenced (bit rot), e.g. "1: 500-510, 900-901", or "-"."""
    return "; ".join(f"{b}: " + ", ".join(f"{s}-{e - 1}" for s, e in r) for b, r in sorted(by_broker.items())) or "-"


def _topics_elect_leaders(args) -> int:
    from sparklog.coordination import topics
    from sparklog.coordination.controller_requests import ElectionPending, request_preferred_election

    def elect(zk) -> None:
        names = [args.topic] if args.topic else topics.list_topics(zk)
        wanted = [(t.name, p) for t in (topics.get_topic(zk, n) for n in names) for p in t.partitions]
        request_preferred_election(zk, wanted)
        print(f"Requested a preferred leader election for {len(wanted)} partitions.")

    return _with_zk(args, elect, (topics.UnknownTopic, topics.InvalidTopicName, ElectionPending))


def _topics_reassign(args) -> int:
    from pathlib import Path

    from sparklog.coordination import brokers, reassignment, replication_throttles, topics

    try:
        plan = reassignment.parse_plan(Path(args.plan).read_text(encoding="utf-8"))
    except (OSError, reassignment.InvalidPlan) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    outcome = []

    def act(zk) -> None:
        assignments = {t: topics.get_topic(zk, t).partitions for t in sorted({t for t, _ in plan})
                       if t in topics.list_topics(zk)}
        if args.verify:
            pending = reassignment.pending_reassignment(zk) or {}
            for (t, p), target in sorted(plan.items()):
                complete = assignments.get(t, {}).get(p) == tuple(target) and (t, p) not in pending
                outcome.append(complete)
                print(f"Reassignment of partition {t}-{p} is {'complete' if complete else 'still in progress'}.")
            if all(outcome):
                _clear_throttles(zk, plan)
            return
        reassignment.validate_plan(plan, assignments, set(brokers.live_brokers(zk)))
        if args.throttle is not None:
            if reassignment.pending_reassignment(zk) is not None:
                raise reassignment.ReassignmentPending("a partition reassignment is in progress; check it with "
                                                       "--verify")
            throttled = replication_throttles.set_throttles(zk, plan, assignments, args.throttle)
            print(f"The inter-broker throttle limit was set to {args.throttle} B/s on brokers "
                  f"{','.join(map(str, sorted(throttled)))}.")
        reassignment.request_reassignment(zk, plan)
        print(f"Started the reassignment of {len(plan)} partitions; check it with --verify.")

    code = _with_zk(args, act, (reassignment.InvalidPlan, reassignment.ReassignmentPending, topics.UnknownTopic))
    return code if code or all(outcome) else 1


def _positive_rate(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes per second, not {text!r}")
    return value


def _clear_throttles(zk, plan) -> None:
    """kafka-reassign-partitions --verify once done: the rates off every broker, the lists off the plan's topics."""
    from sparklog.coordination import brokers, replication_throttles

    known = set(brokers.live_brokers(zk)) | {b for target in plan.values() for b in target}
    replication_throttles.clear_throttles(zk, {t for t, _ in plan}, known)
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, sorted(known)))}")
    print(f"Clearing topic-level throttles on topic {','.join(sorted({t for t, _ in plan}))}")


def _with_zk(args, action, errors: tuple) -> int:
    """Run `action(zk)` on a fresh ZooKeeper connection; one of `errors` is one line on stderr and exit 1."""
    from sparklog.coordination.connection import close

    zk = _zk(args)
    try:
        action(zk)
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        close(zk)
    return 0


def _cleaner(reports: dict) -> str:
    """Each broker's dirty ratio of the log and its cleaner's last run: `1: 0.42, last 2026-11-23 08:01:02
    removed 1200 in 0.3 s` (or `never`)."""
    import datetime

    parts = []
    for broker, report in sorted(reports.items()):
        run = report.get("last_run")
        last = "never" if not run else (
            f"last {datetime.datetime.fromtimestamp(run['ended_ms'] / 1000):%Y-%m-%d %H:%M:%S} removed "
            f"{run['records_removed']} in {run['duration_ms'] / 1000:.1f} s")
        parts.append(f"{broker}: {report.get('dirty_ratio', 0):.2f}, {last}")
    return "; ".join(parts) or "-"


def _topics_describe(args) -> int:
    from sparklog.coordination import brokers, log_cleaner, log_faults, topics
    from sparklog.coordination.connection import close

    zk = _zk(args)
    try:
        names = [args.name] if args.name else topics.list_topics(zk)
        try:
            found = [topics.get_topic(zk, name) for name in names]
        except (topics.UnknownTopic, topics.InvalidTopicName) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        live = brokers.live_brokers(zk)
        faults = log_faults.read_all(zk).by_partition
        cleaning = log_cleaner.read_all(zk)
    finally:
        close(zk)
    offsets, silent = _leader_offsets(found, live)
    shown = 0
    for topic in found:
        rows = _describe_rows(args, topic, live, silent, offsets, faults, cleaning)
        if not rows and (args.under_replicated_partitions or args.unavailable_partitions):
            continue  # the flags list only what they ask for
        config = ", ".join(f"{k}={v}" for k, v in sorted(topic.config.items())) or "-"
        print(("\n" if shown else "") + f"{topic.name}  partitions={len(topic.partitions)}  "
              f"replication={topic.replication_factor}  config: {config}")
        compacted = any(key[0] == topic.name for key in cleaning)  # a cleaner column only for compacted topics
        print_columns(DESCRIBE_COLUMNS + ((CLEANER_COLUMN,) if compacted else ()),
                      [row if compacted else row[:-1] for row in rows])
        shown += 1
    return 0


# `topics describe`'s plain columns (Kafka's tools never wrap a cell), and the cleaner's, for compacted topics
DESCRIBE_COLUMNS = ("partition", "leader", "replicas", "isr", "status", "log start", "log end",
                    "fenced (broker: offsets)")
CLEANER_COLUMN = "cleaner (broker: dirty ratio, last run)"
# How long `topics describe` waits for the leaders' log offsets: every live broker is asked at once, and one
# that has not answered by then (dead but still registered: its ZooKeeper session outlives it) is marked.
DESCRIBE_OFFSETS_TIMEOUT_S = 1.5


def _leader_offsets(found, live) -> tuple[dict, set[int]]:
    """The log offsets of every partition whose leader is registered, asked of all leaders at once within
    DESCRIBE_OFFSETS_TIMEOUT_S; and the leaders that did not answer."""
    from sparklog.client.admin import AdminClient

    leaders = {(t.name, p): state.leader for t in found for p, state in t.states.items() if state.leader in live}
    if not leaders:
        return {}, set()
    bound_ms = str(int(DESCRIBE_OFFSETS_TIMEOUT_S * 1000))
    # one look, no retry: the connection's "cannot reach ...; retrying" would be wrong; the table marks it
    logging.getLogger("sparklog.client.connection").setLevel(logging.ERROR)
    with AdminClient(bootstrap_servers=[(b.host, b.port) for b in live.values()],
                     **{"socket.connection.setup.timeout.ms": bound_ms, "request.timeout.ms": bound_ms}) as admin:
        return admin.leader_offsets(leaders, DESCRIBE_OFFSETS_TIMEOUT_S,
                                    brokers={i: (b.host, b.port) for i, b in live.items()})


def _describe_rows(args, topic, live, silent, offsets, faults, cleaning) -> list[tuple]:
    """One row a partition (the cleaner's cell last), only those the flags ask for."""
    rows = []
    for p, replicas in sorted(topic.partitions.items()):
        state = topic.states.get(p)
        status = partition_status(replicas, state, live, silent)
        if (args.under_replicated_partitions and status != "under-replicated") or (
                args.unavailable_partitions and status not in ("offline", "unreachable")):
            continue
        start, end = offsets.get((topic.name, p), ("?", "?"))  # "?": its leader did not say
        rows.append((p, _leader_cell(state, live, silent), ",".join(map(str, replicas)),
                     "-" if state is None else ",".join(map(str, state.isr)), status, start, end,
                     _fenced(faults.get((topic.name, p), {})), _cleaner(cleaning.get((topic.name, p), {}))))
    return rows


def _leader_cell(state, live, silent) -> str:
    if state is None:
        return "-"
    if state.leader not in live:
        return "none" if state.leader < 0 else f"{state.leader} (down)"
    return f"{state.leader} (unreachable)" if state.leader in silent else str(state.leader)
