"""`sparklog groups`: list, describe, reset and delete consumer groups of both kinds, like Kafka's
`kafka-consumer-groups.sh`.

    sparklog groups list
    sparklog groups describe G|--all-groups [--offsets | --members | --state]
    sparklog groups reset-offsets G --to earliest|latest|OFFSET [--topic T[:P,P...] | --all-topics] [--dry-run]
    sparklog groups reset-offsets G --to-earliest|--to-latest|--to-current|--to-offset N|--to-datetime T|
                                    --by-duration D|--shift-by N|--from-file CSV [--execute] [--export]
    sparklog groups delete G
    sparklog groups delete-offsets G --topic T[:P,P...]

Two kinds of group share the name space (docs/architecture.md):
- Kafka groups (`subscribe()` of any Kafka client), coordinated by a broker: read and changed over the Kafka
  protocol only (client/kafka_groups.py: ListGroups, DescribeGroups, OffsetFetch, OffsetCommit, DeleteGroups,
  OffsetDelete),
  wherever the coordinator keeps their offsets. Those of the consumer protocol (KIP-848,
  `group.protocol=consumer`) show as kafka-consumer (ConsumerGroupDescribe: the assignor as the strategy).
- ZooKeeper groups (the paper's, `GroupConsumer`): consumers, owners and offsets in the ZooKeeper registry
  (`/consumers/<g>/ids|owners|offsets`), read and written as they always were.
Log end offsets come from ListOffsets at each partition's leader for both.

Rule 1 (which kind): a group the coordinator knows (DescribeGroups not Dead) is a Kafka group; else one whose
consumer registry `/consumers/<g>/ids` exists is a ZooKeeper group; else one whose coordinator has committed
offsets for it (OffsetFetch) is an inactive Kafka group (state Empty); else one with offsets in the ZooKeeper
registry alone (a Spark query's progress) is an inactive ZooKeeper group; else there is no such group.
`list` shows groups that the brokers list (ListGroups) as kafka, registered ZooKeeper groups as zookeeper,
and the other names in the registry (committed offsets, no consumers) as offsets.
With `--bootstrap-server` and no `--zookeeper`, ZooKeeper is not asked at all: only Kafka groups are found,
and a command that would have needed ZooKeeper says in its one line what it did not check.
Rule 2: what cannot be reached (a broker, ZooKeeper) ends the command with one line and exit status 1
(cli.py Rule 2), never with an empty table; so does a broker's refusal (its Kafka error, named).
Rule 3: reset-offsets and delete refuse a group with members: a Kafka group in any state but Empty (as
kafka-consumer-groups does), a ZooKeeper group with a registered consumer. A member that joins between the
check and the write is refused by the coordinator (or the registry's fencing rule), also in one line.
Rule 4: reset-offsets `--to` commits at once (`--dry-run`: the plan only); kafka-consumer-groups' options
(`--to-earliest`, `--to-latest`, `--to-current`, `--to-offset`, `--to-datetime`, `--by-duration`, `--shift-by`,
`--from-file`) show the plan only unless `--execute`, as in Kafka's tool, so a command copied from Kafka's
documentation changes nothing unless it says so. An offset outside a partition's [log start, log end] (given, or
shifted from the committed one) becomes the nearer bound with a warning, as kafka-consumer-groups does;
`--shift-by` needs a committed offset in every partition; `--from-file` a plan of topic,partition,offset lines
(Kafka's CSV, which `--export` prints), checked whole before anything is contacted. Nothing is committed if a
partition's leader does not answer. The scope is Kafka's: `--topic T` (every partition) or `--topic T:P,P`
(those), repeatable; `--all-topics`, or neither, every partition the group committed.
Rule 5: delete-offsets is Kafka's `kafka-consumer-groups --delete-offsets`: OffsetDelete at the coordinator of a
Kafka group, which decides per partition (a topic its members consume is refused, GROUP_SUBSCRIBED_TO_TOPIC);
one line per partition with its outcome, exit status 1 if any was refused. A ZooKeeper group's offsets are
not touched (reset-offsets or delete them; the one line says so).
Rule 6: `describe --members` of a Kafka group shows each member's client quota (issue 25) in a QUOTA column: for
each quota key, the value of `clients/<its client-id>`, else of `clients/<default>` (DescribeClientQuotas),
"-" when neither sets one. DescribeGroups does not name a member's principal, so the user levels of the
precedence (which come first for an authenticated member) are not resolved here; the throttle each broker
gives a (user, client-id) now is its `sparklog_client_quota_throttle_ms` series (docs/metrics.md).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparklog.cli.columns import NO_VALUE, print_columns
from sparklog.cli.console import DEFAULT_ZOOKEEPER, add_zookeeper_timeout, zookeeper_timeout_s

if TYPE_CHECKING:  # the command loads its clients when it runs (cli.py)
    from sparklog.client.kafka_groups import GroupMember

KAFKA, ZOOKEEPER, OFFSETS_ONLY = "kafka", "zookeeper", "offsets"
KAFKA_CONSUMER = "kafka-consumer"  # a Kafka group of the consumer protocol (KIP-848, group.protocol=consumer)
NAMED_RESETS = {"earliest": 0, "smallest": 0, "latest": 1, "largest": 1}  # index into (log start, log end)
DEFAULT_TIMEOUT_MS = 30_000  # the admin client's request.timeout.ms (Kafka's default 30000)

TopicPartition = tuple[str, int]


@dataclass
class GroupView:
    """One group as the command shows it, whatever its kind."""

    name: str
    kind: str
    state: str
    protocol_type: str = ""
    strategy: str = ""
    coordinator: str = NO_VALUE
    members: list[GroupMember] = field(default_factory=list)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    owners: dict[TopicPartition, str] = field(default_factory=dict)  # ZooKeeper owners with no member entry

    def owner_of(self, tp: TopicPartition) -> GroupMember | None:
        return next((m for m in self.members if tp in m.assignment), None)

    def inactive(self) -> bool:
        return not self.members and not self.owners


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    groups = subparsers.add_parser("groups", help="list, describe, reset and delete consumer groups "
                                   "(ZooKeeper groups and broker-coordinated Kafka groups)")
    groups.add_argument("--zookeeper", help=f"host:port[/chroot] (default {DEFAULT_ZOOKEEPER}, or none with "
                        "--bootstrap-server: Kafka groups only)")
    add_zookeeper_timeout(groups)
    groups.add_argument("--bootstrap-server", help="host:port[,host:port] (default: from ZooKeeper)")
    groups.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                        help="how long to wait for the brokers (default %(default)s, request.timeout.ms)")
    commands = groups.add_subparsers(dest="groups_command", metavar="SUBCOMMAND")
    commands.add_parser("list", help="every group: kind, state, members").set_defaults(func=run_list)
    describe = commands.add_parser("describe", help="per partition: offset, log end, lag, owner (Kafka's shape)")
    describe.add_argument("group", nargs="?")
    describe.add_argument("--all-groups", action="store_true", help="every group, one after another")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="per partition: offset, log end, lag, owner (the "
                      "default)")
    view.add_argument("--members", action="store_true", help="one line per member, with its assignment")
    view.add_argument("--state", action="store_true", help="coordinator, assignment strategy, state, members")
    describe.set_defaults(func=run_describe)
    reset = commands.add_parser("reset-offsets", help="set a group's committed offsets (group must be inactive)")
    reset.add_argument("group")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", help="earliest, latest or an offset (committed at once unless --dry-run)")
    target.add_argument("--to-earliest", action="store_true", help="as kafka-consumer-groups (plan only "
                        "unless --execute, as all of its options below)")
    target.add_argument("--to-latest", action="store_true", help="each partition's log end")
    target.add_argument("--to-offset", metavar="OFFSET", help="this offset (clamped to each partition's log)")
    target.add_argument("--to-datetime", type=_datetime_ms, metavar="YYYY-MM-DDTHH:mm:SS.sss",
                        help="the first offset at or after this time (local time unless it ends with Z or "
                             "+hh:mm; the log end when none is)")
    target.add_argument("--by-duration", type=_duration_ms, metavar="PnDTnHnMn.nS", help="the first offset at or "
                        "after this long ago (an ISO-8601 duration, as PT1H or P1DT12H; the log end when none is)")
    target.add_argument("--to-current", action="store_true", help="the committed offset (the log end where "
                        "there is none)")
    target.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be negative; "
                        "clamped to the log)")
    target.add_argument("--from-file", metavar="CSV", help="the offsets a file gives: lines topic,partition,offset "
                        "or group,topic,partition,offset (Kafka's reset plan; clamped to the log)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets, commit nothing")
    mode.add_argument("--execute", action="store_true", help="commit them (needed by the kafka-consumer-groups "
                      "options)")
    reset.add_argument("--export", action="store_true", help="print the new offsets as CSV lines "
                       "topic,partition,offset (what --from-file reads)")
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]", help="only these topics, or these "
                       "partitions of one (repeatable; default: every partition the group committed)")
    scope.add_argument("--all-topics", action="store_true", help="every partition the group committed (the "
                       "default; kafka-consumer-groups asks for it or --topic)")
    reset.set_defaults(func=run_reset)
    delete = commands.add_parser("delete", help="delete an inactive group and its committed offsets")
    delete.add_argument("group")
    delete.set_defaults(func=run_delete)
    delete_offsets = commands.add_parser("delete-offsets", help="delete a Kafka group's committed offsets of "
                                         "some topics (kafka-consumer-groups --delete-offsets)")
    delete_offsets.add_argument("group")
    delete_offsets.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P...]",
                                help="a topic (every partition) or some of its partitions; repeatable")
    delete_offsets.set_defaults(func=run_delete_offsets)
    for parser in commands.choices.values():  # --zookeeper also after the subcommand, as for `topics`
        parser.add_argument("--zookeeper", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        add_zookeeper_timeout(parser, hidden=True)
        parser.add_argument("--bootstrap-server", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        parser.add_argument("--timeout", type=int, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    groups.set_defaults(func=lambda args: (groups.print_help(), 2)[1])


# -- finding a group (Rule 1) -----------------------------------------------------------------------------------


class Session:
    """The admin client, and a ZooKeeper connection opened only when a command needs one."""

    def __init__(self, args: argparse.Namespace) -> None:
        from sparklog.client.kafka_groups import KafkaGroupAdmin

        # Rule 1's note: with only --bootstrap-server, no ZooKeeper is asked
        self._zookeeper = args.zookeeper if args.zookeeper is not None else (
            None if args.bootstrap_server else DEFAULT_ZOOKEEPER)
        self._zookeeper_timeout_s = zookeeper_timeout_s(args)
        self.admin = KafkaGroupAdmin(args.bootstrap_server, None if args.bootstrap_server else self._zookeeper,
                                     request_timeout_ms=args.timeout,
                                     zookeeper_connection_timeout_ms=round(self._zookeeper_timeout_s * 1000))
        self._zk = None

    @property
    def asks_zookeeper(self) -> bool:
        return self._zookeeper is not None

    @property
    def zk(self):
        if self._zk is None:
            from sparklog.coordination.connection import connect

            self._zk = connect(self._zookeeper, timeout=self._zookeeper_timeout_s)
        return self._zk

    def node_text(self, node: int) -> str:
        """Kafka's "host:port (id)" of a broker."""
        host, port = self.admin.brokers().get(node, ("?", "?"))
        return f"{host}:{port} ({node})"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.admin.close()
        if self._zk is not None:
            from sparklog.coordination.connection import close

            close(self._zk)


def find_group(session: Session, name: str) -> GroupView | None:
    """Rule 1; None when neither kind has the group (no members, no committed offsets)."""
    from sparklog.client import group_registry as registry

    found = session.admin.describe_group(name)
    if found is not None:
        return _kafka_view(session, found)
    if session.asks_zookeeper and registry.is_registered_group(session.zk, name):
        return _zookeeper_view(session.zk, name)
    committed = session.admin.committed_offsets(name)
    if committed:
        return GroupView(name, KAFKA, "Empty", coordinator=session.node_text(session.admin.coordinator(name)),
                         committed=committed)
    if not session.asks_zookeeper:
        return None
    alone = _zookeeper_view(session.zk, name)  # the registry's offsets alone: a Spark query's progress
    return alone if alone.committed else None


def _kafka_view(session: Session, found) -> GroupView:
    committed = session.admin.committed_offsets(found.group_id)
    return GroupView(found.group_id, _kind(found), found.state, found.protocol_type, found.protocol,
                     session.node_text(found.coordinator), list(found.members), committed)


def _kind(found) -> str:
    from sparklog.client.kafka_groups import CONSUMER

    return KAFKA_CONSUMER if found.group_type == CONSUMER else KAFKA


def _zookeeper_view(zk, name: str) -> GroupView:
    from sparklog.client import group_registry as registry
    from sparklog.client.kafka_groups import GroupMember
    from sparklog.coordination.offsets import fetch_offsets

    owners = registry.list_owners(zk, name)
    consumers = registry.list_consumers(zk, name)
    members = [GroupMember(c, None, NO_VALUE, NO_VALUE, tuple(sorted(tp for tp, o in owners.items() if o == c)))
               for c in consumers]
    committed = {tp: o.offset for tp, o in fetch_offsets(zk, name).items() if o.offset >= 0}
    strays = {tp: o for tp, o in owners.items() if o not in consumers}  # owner gone from ids, node not yet
    return GroupView(name, ZOOKEEPER, "Active" if consumers else "Empty", ZOOKEEPER, "range", "ZooKeeper",
                     members, committed, strays)


def _no_group(session: Session, name: str) -> int:
    unchecked = "" if session.asks_zookeeper else " among the Kafka groups (ZooKeeper groups not checked: no --zookeeper)"
    print(f"error: consumer group {name!r} does not exist{unchecked}", file=sys.stderr)
    return 1


def _refused(exc: Exception) -> int:
    """Rule 2 for a broker's refusal: its Kafka error name and what it concerned, one line."""
    print(f"error: {exc}", file=sys.stderr)
    return 1


# -- list -----------------------------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    from sparklog.client import group_registry as registry
    from sparklog.coordination.offsets import list_groups

    rows = []
    with Session(args) as session:
        kafka = session.admin.list_groups()
        registered = list_groups(session.zk) if session.asks_zookeeper else []
        for name in sorted(set(kafka) | set(registered)):
            if name in kafka:
                found = session.admin.describe_group(name)
                state, members = (found.state, len(found.members)) if found else ("Dead", 0)
                rows.append((name, _kind(found) if found else KAFKA, state, str(members)))
            elif registry.is_registered_group(session.zk, name):
                members = len(registry.list_consumers(session.zk, name))
                rows.append((name, ZOOKEEPER, "Active" if members else "Empty", str(members)))
            else:
                rows.append((name, OFFSETS_ONLY, "Empty", "0"))
    print_columns(("GROUP", "TYPE", "STATE", "#MEMBERS"), rows)
    if not session.asks_zookeeper:
        print("note: ZooKeeper groups not listed (no --zookeeper)", file=sys.stderr)
    return 0


# -- describe -------------------------------------------------------------------------------------------------


def run_describe(args: argparse.Namespace) -> int:
    from sparklog.protocol.errors import KafkaError

    if (args.group is None) == (not args.all_groups):
        print("error: describe takes a GROUP or --all-groups (not both)", file=sys.stderr)
        return 2
    with Session(args) as session:
        try:
            names = _every_group(session) if args.all_groups else [args.group]
            shown = 0
            for name in names:
                group = find_group(session, name)
                if group is None and args.all_groups:
                    continue  # deleted since it was listed
                if group is None:
                    return _no_group(session, name)
                if shown:
                    print()
                _describe(session, args, group)
                shown += 1
        except KafkaError as exc:
            return _refused(exc)
    return 0


def _every_group(session: Session) -> list[str]:
    """Every group `list` shows: the brokers' and, when ZooKeeper is asked, the registry's."""
    from sparklog.coordination.offsets import list_groups

    registered = list_groups(session.zk) if session.asks_zookeeper else []
    return sorted(set(session.admin.list_groups()) | set(registered))


def _describe(session: Session, args: argparse.Namespace, group: GroupView) -> None:
    if args.state:
        print_state(group)
    elif args.members:
        print_members(group, member_quotas(session.admin, group.members) if group.kind == KAFKA else None)
    else:
        print_offsets(group, offset_rows(group, session.admin.log_ends(described_partitions(group))))


def described_partitions(group: GroupView) -> list[TopicPartition]:
    return sorted(set(group.committed) | {tp for m in group.members for tp in m.assignment} | set(group.owners))


def offset_rows(group: GroupView, ends: dict[TopicPartition, tuple[int, int]]) -> list[dict]:
    """One row per partition the group committed or holds: Kafka's columns, None where unknown."""
    rows = []
    for tp in described_partitions(group):
        offset, end = group.committed.get(tp), ends.get(tp, (None, None))[1]
        member = group.owner_of(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "current": offset, "end": end,
                     "lag": None if offset is None or end is None else max(0, end - offset),
                     "consumer": member.member_id if member else group.owners.get(tp),
                     "host": member.client_host if member else None, "client": member.client_id if member else None})
    return rows


def print_offsets(group: GroupView, rows: list[dict]) -> None:
    if group.inactive():
        print(f"Consumer group {group.name!r} has no active members.\n")
    print_columns(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                   "HOST", "CLIENT-ID"),
                  [(group.name, r["topic"], r["partition"], r["current"], r["end"], r["lag"], r["consumer"],
                    r["host"], r["client"]) for r in rows])
    unknown = [f"{r['topic']}-{r['partition']}" for r in rows if r["lag"] is None]
    total = sum(r["lag"] for r in rows if r["lag"] is not None)
    print(f"\nTOTAL-LAG {total}" + (f" (not counting {', '.join(unknown)}: no committed offset or no log end)"
                                     if unknown else ""))


def print_members(group: GroupView, quotas: dict[str, str] | None = None) -> None:
    """One row per member; with `quotas` ({client-id: text}, `member_quotas`) a QUOTA column (Rule 6)."""
    if not group.members:
        print(f"Consumer group {group.name!r} has no active members.")
        return
    headers = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
    rows = [(group.name, m.member_id, m.instance_id, m.client_host, m.client_id, len(m.assignment),
             ",".join(f"{t}-{p}" for t, p in m.assignment)) for m in group.members]
    if quotas is not None:
        headers += ("QUOTA",)
        rows = [(*row, quotas.get(m.client_id)) for row, m in zip(rows, group.members)]
    print_columns(headers, rows)


def member_quotas(admin, members) -> dict[str, str]:
    """{client-id: "consumer_byte_rate=2097152,..."} of the client-id quotas each member's client-id gets
    (clients/<client-id>, else clients/<default>, key by key: Rule 6), from DescribeClientQuotas."""
    from sparklog.coordination.client_quotas import QUOTA_KEYS
    from sparklog.protocol.client_quotas import CLIENT_ID, MATCH_ANY

    configs = {dict(components).get(CLIENT_ID): values
               for components, values in admin.describe_client_quotas([(CLIENT_ID, MATCH_ANY, None)], strict=True)}
    found = {}
    for client in {m.client_id for m in members}:
        applied = {key: next((configs[name][key] for name in (client, None) if key in configs.get(name, {})), None)
                   for key in QUOTA_KEYS}
        found[client] = ",".join(f"{key}={int(value) if value == int(value) else value}"
                                 for key, value in applied.items() if value is not None)
    return found


def print_state(group: GroupView) -> None:
    print_columns(("GROUP", "TYPE", "COORDINATOR (ID)", "PROTOCOL-TYPE", "ASSIGNMENT-STRATEGY", "STATE",
                   "#MEMBERS"),
                  [(group.name, group.kind, group.coordinator, group.protocol_type, group.strategy, group.state,
                    len(group.members))])


# -- reset-offsets and delete -------------------------------------------------------------------------------


def run_reset(args: argparse.Namespace) -> int:
    from sparklog.protocol.errors import KafkaError

    to, commit = reset_target(args)
    if to is not None and to not in NAMED_RESETS and not to.isdigit():
        option = "--to" if args.to is not None else "--to-offset"
        print(f"error: {option} is earliest, latest or an offset (>= 0), not {to!r}", file=sys.stderr)
        return 2
    try:
        args.scope = [_topic_partitions(spec) for spec in args.topic or ()]
        args.plan = read_reset_plan(args.from_file, args.group) if args.from_file is not None else None
    except (ValueError, PlanError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.to, args.commit = to, commit
    with Session(args) as session:
        try:
            return _reset(session, args)
        except KafkaError as exc:
            return _refused(exc)


def reset_target(args: argparse.Namespace) -> tuple[str | None, bool]:
    """(target, whether to commit) by Rule 4: earliest, latest or an offset, or None for the options that find
    each partition's own (--shift-by, --to-datetime, --by-duration, --from-file)."""
    if args.to is not None:
        return args.to, not args.dry_run
    to = "earliest" if args.to_earliest else "latest" if args.to_latest else args.to_offset
    return to, args.execute


def _reset(session: Session, args: argparse.Namespace) -> int:
    group = find_group(session, args.group)
    if group is not None and not group.inactive():  # Rule 3
        print(f"error: offsets can only be reset while group {args.group!r} is inactive, but its state is "
              f"{group.state} with {len(group.members) or len(group.owners)} member(s); stop them first",
              file=sys.stderr)
        return 1
    committed = group.committed if group else {}
    partitions = ([tp for topic, chosen in args.scope
                   for tp in (session.admin.partitions_of(topic) if chosen is None else chosen)]
                  if args.scope else sorted(committed))
    if args.plan is not None:  # the file names the partitions; a --topic scope narrows them
        partitions = sorted(set(args.plan) & set(partitions) if args.scope else args.plan)
    if not partitions:
        print(f"error: group {args.group!r} has no committed offsets; name --topic", file=sys.stderr)
        return 1
    offsets = _targets(session, args, partitions, committed)
    if offsets is None:
        return 1
    if not args.commit:
        _print_reset(args.group, offsets, args.export)
        again = "without --dry-run" if args.dry_run else "with --execute"
        print(f"dry run: nothing committed; run it again {again} to commit these offsets", file=sys.stderr)
        return 0
    if group is not None and group.kind == ZOOKEEPER:
        from sparklog.coordination.offsets import commit_offsets

        refused = commit_offsets(session.zk, args.group, offsets)  # the registry's fencing rule
        if refused:
            print(f"error: group {args.group!r} became active; not reset: " + ", ".join(
                f"{t}-{p} (owned by {owner})" for (t, p), owner in sorted(refused.items())), file=sys.stderr)
            return 1
    else:
        session.admin.commit_offsets(args.group, offsets)  # the coordinator refuses if members joined
    _print_reset(args.group, offsets, args.export)
    return 0


def _print_reset(group: str, offsets: dict[TopicPartition, int], export: bool = False) -> None:
    if export:  # kafka-consumer-groups --export: one group's plan as CSV, no header
        for (t, p), o in sorted(offsets.items()):
            print(f"{t},{p},{o}")
        return
    print_columns(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), [(group, t, p, o) for (t, p), o in sorted(offsets.items())])


# java.time.Duration.parse's form, which kafka-consumer-groups --by-duration takes: PnDTnHnMn.nS, each part
# optional (at least one; T only before a time part), signed, the seconds alone with a fraction (up to 9 digits).
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?=[-+\d])(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)
_NS_PER = (86_400 * 10**9, 3_600 * 10**9, 60 * 10**9, 10**9)  # day, hour, minute, second


def _duration_ms(text: str) -> int:
    """kafka-consumer-groups' --by-duration: an ISO-8601 duration (java.time.Duration's form) in ms, floored as
    Instant.toEpochMilli floors."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.group(i) for i in (2, 3, 4, 5)):
        raise argparse.ArgumentTypeError(f"not an ISO-8601 duration like PT1H or P1DT12H30M: {text!r}")
    sign, *parts, fraction = match.groups()
    ns = sum(int(part) * unit for part, unit in zip(parts, _NS_PER) if part)
    if fraction:
        ns += (-1 if parts[3].startswith("-") else 1) * int(fraction.ljust(9, "0"))
    return (-ns if sign == "-" else ns) // 1_000_000


class PlanError(ValueError):
    """A --from-file reset plan that cannot be used: nothing is committed."""


def read_reset_plan(path: str, group: str) -> dict[TopicPartition, int]:
    """kafka-consumer-groups --from-file: CSV lines topic,partition,offset (one group's plan, as --export writes
    it) or group,topic,partition,offset (lines of other groups skipped); blank lines skipped. One form per file;
    a partition named twice, a line of another shape or a negative offset is refused, naming its line."""
    import csv

    try:
        with open(path, newline="") as file:
            rows = [(number, row) for number, row in enumerate(csv.reader(file), 1) if row]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PlanError(f"cannot read reset plan {path}: {exc}") from None
    width = len(rows[0][1]) if rows else 3
    plan: dict[TopicPartition, int] = {}
    for number, row in rows:
        if len(row) != width or width not in (3, 4):
            raise PlanError(f"{path} line {number}: expected topic,partition,offset or group,topic,partition,offset "
                            f"(as the first line), not {','.join(row)!r}")
        if width == 4 and row[0] != group:
            continue
        topic, partition, offset = row[-3:]
        if not (partition.isdigit() and offset.isdigit()):
            raise PlanError(f"{path} line {number}: partition and offset are numbers (>= 0), not {partition!r} "
                            f"and {offset!r}")
        if (topic, int(partition)) in plan:
            raise PlanError(f"{path} line {number}: {topic}-{partition} twice")
        plan[(topic, int(partition))] = int(offset)
    if not plan:
        raise PlanError(f"{path}: no reset plan for group {group!r}")
    return plan


def _datetime_ms(text: str) -> int:
    """kafka-consumer-groups' --to-datetime: ISO 8601, local time unless a zone is given; epoch ms."""
    import datetime

    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time like 2024-01-31T23:59:59.000: {text!r}") from None
    return round(moment.astimezone().timestamp() * 1000)


def _targets(session: Session, args: argparse.Namespace, partitions: list[TopicPartition],
             committed: dict) -> dict[TopicPartition, int] | None:
    """Each partition's new offset: its log start or end, or the offset given, clamped into [log start, log
    end] with a warning, as kafka-consumer-groups does (an offset outside would meet OFFSET_OUT_OF_RANGE at the
    group's next fetch, and its auto.offset.reset)."""
    to, at_time, shift_by = args.to, getattr(args, "to_datetime", None), getattr(args, "shift_by", None)
    if getattr(args, "by_duration", None) is not None:  # back from now, as Kafka's tool reckons it
        at_time = int(time.time() * 1000) - args.by_duration
    ends = session.admin.log_ends(partitions, at_time)
    missing = [f"{t}-{p}" for t, p in partitions if (t, p) not in ends]
    if missing:
        print(f"error: no leader answered for the log offsets of {', '.join(missing)}; nothing reset",
              file=sys.stderr)
        return None
    if to in NAMED_RESETS:
        return {tp: ends[tp][NAMED_RESETS[to]] for tp in partitions}
    if at_time is not None:  # no record at or after the time: the log end, as Kafka's tool does
        return {tp: ends[tp][2] if ends[tp][2] >= 0 else ends[tp][1] for tp in partitions}
    if args.plan is not None:
        return {tp: _clamped(tp, args.plan[tp], *ends[tp]) for tp in partitions}
    if getattr(args, "to_current", False):  # as Kafka's tool: not clamped; the log end where nothing is committed
        return {tp: committed.get(tp, ends[tp][1]) for tp in partitions}
    if to is None:  # --shift-by
        uncommitted = [f"{t}-{p}" for t, p in partitions if (t, p) not in committed]
        if uncommitted:
            print(f"error: cannot shift {', '.join(uncommitted)}: the group has no committed offset there; "
                  "nothing reset", file=sys.stderr)
            return None
        return {tp: _clamped(tp, committed[tp] + shift_by, *ends[tp]) for tp in partitions}
    return {tp: _clamped(tp, int(to), *ends[tp]) for tp in partitions}


def _clamped(tp: TopicPartition, offset: int, log_start: int, log_end: int) -> int:
    bound, side = (log_end, "higher than the log end") if offset > log_end else (
        (log_start, "lower than the log start") if offset < log_start else (offset, None))
    if side is not None:
        print(f"warning: new offset {offset} is {side} of {tp[0]}-{tp[1]}; it is set to {bound}", file=sys.stderr)
    return bound


def run_delete(args: argparse.Namespace) -> int:
    """DeleteGroups at the coordinator for a Kafka group (NON_EMPTY_GROUP while it has members); a ZooKeeper
    group's registry is deleted in ZooKeeper, refused while a consumer is registered."""
    from sparklog.coordination.offsets import GroupNotEmpty, UnknownGroup, delete_group
    from sparklog.protocol.errors import GroupIdNotFoundError, KafkaError, NonEmptyGroupError

    with Session(args) as session:
        try:
            group = find_group(session, args.group)
            if group is None:
                return _no_group(session, args.group)
            if group.kind == ZOOKEEPER:
                delete_group(session.zk, args.group)
            else:
                session.admin.delete_group(args.group)
        except (NonEmptyGroupError, GroupNotEmpty):
            print(f"error: group {args.group!r} is not empty: stop its members first", file=sys.stderr)
            return 1
        except (GroupIdNotFoundError, UnknownGroup):
            return _no_group(session, args.group)
        except KafkaError as exc:
            return _refused(exc)
    print(f"Deletion of requested consumer group {args.group!r} was successful.")
    return 0


# -- delete-offsets (Rule 4) ------------------------------------------------------------------------------------


def run_delete_offsets(args: argparse.Namespace) -> int:
    from sparklog.protocol.errors import GroupIdNotFoundError, KafkaError, for_code

    try:
        named = [_topic_partitions(spec) for spec in args.topic]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with Session(args) as session:
        try:
            partitions = [tp for topic, chosen in named
                          for tp in (session.admin.partitions_of(topic) if chosen is None else chosen)]
            outcome = session.admin.delete_offsets(args.group, partitions)
        except GroupIdNotFoundError:
            if session.asks_zookeeper and _zookeeper_group(session, args.group):
                print(f"error: group {args.group!r} is a ZooKeeper group: delete-offsets is for Kafka groups "
                      "(use reset-offsets, or delete)", file=sys.stderr)
                return 1
            return _no_group(session, args.group)
        except KafkaError as exc:
            return _refused(exc)
    print_columns(("TOPIC", "PARTITION", "STATUS"), [
        (t, p, "Successful" if code == 0 else f"Error: {for_code(code).message} ({for_code(code).description})")
        for (t, p), code in sorted(outcome.items())])
    return 1 if any(outcome.values()) else 0


def _topic_partitions(spec: str) -> tuple[str, list[TopicPartition] | None]:
    """Kafka's --topic form: "T" (every partition) or "T:0,2"."""
    topic, _, listed = spec.partition(":")
    if not topic or (":" in spec and not listed):
        raise ValueError(f"--topic is TOPIC or TOPIC:P,P..., not {spec!r}")
    if not listed:
        return topic, None
    try:
        return topic, [(topic, int(p)) for p in listed.split(",")]
    except ValueError:
        raise ValueError(f"--topic {spec!r}: partitions are numbers, as in {topic}:0,1") from None


def _zookeeper_group(session: Session, name: str) -> bool:
    from sparklog.client import group_registry as registry

    return registry.is_registered_group(session.zk, name) or bool(_zookeeper_view(session.zk, name).committed)
