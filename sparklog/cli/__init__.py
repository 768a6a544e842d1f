"""The `sparklog` command, shaped like Kafka's tools: `sparklog <command> <subcommand> [options]`.

Each command has a module in this package with `add_parser(subparsers)` (the package sits above client,
broker and coordination: it imports them, nothing below imports it); the modules load their heavy
dependencies inside the command functions, so that `sparklog --help` stays fast.

Rule 1: every module listed is part of the package (jobs/ included): an import error in one of them is a bug
and propagates; it is never taken for "that piece is not installed".
Rule 2: a command that cannot reach what it needs (a broker, ZooKeeper) or gives up after its timeout ends
with one line on stderr, `error: ...`, and exit status 1, never a traceback.
Rule 3: so does a value the command was given that the layer checking it refuses (a ValueError: an address,
a setting, a name, a partition) and an error a broker answered with (a KafkaError: its Kafka name and what
it concerned). Anything else is a bug and keeps its traceback.
Rule 5: every command takes `--command-config FILE`, as Kafka's tools do: a .properties file of client settings
(librdkafka's names: `security.protocol`, `ssl.*`, ...), taken out of the arguments before they are parsed and
laid under every client the command opens (`sparklog.client.config.use_command_config`).
Rule 4: Kafka's tool forms are read as sparklog's (`kafka_tool_form`): kafka-topics.sh and
kafka-consumer-groups.sh name the action as an option and the object with an option (`topics --describe --topic
T`, `groups --reset-offsets --group G ...`); a command with exactly one such action and no subcommand becomes
`topics describe T`, `groups reset-offsets G ...`, the other options unchanged. Anything else is left to argparse.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (command, module that defines it); a module's add_parser() registers one or more subcommands.
COMMAND_MODULES = (
    "sparklog.cli.zookeeper",
    "sparklog.cli.broker",
    "sparklog.cli.console",
    "sparklog.cli.groups",
    "sparklog.cli.topics",
    "sparklog.cli.transactions",
    "sparklog.cli.acls",
    "sparklog.cli.configs",
    "sparklog.cli.schema_registry",
    "jobs.demo",  # the pipeline's demo: jobs/ sits on top of every sparklog layer
)


# Rule 4: command -> (the object's option, {Kafka's action option: sparklog's subcommand}, the other subcommands)
KAFKA_TOOL_ACTIONS = {
    "topics": ("--topic", {"--list": "list", "--create": "create", "--describe": "describe", "--alter": "alter",
                           "--delete": "delete"}, ("elect-leaders", "reassign")),
    "groups": ("--group", {"--list": "list", "--describe": "describe", "--delete": "delete",
                           "--reset-offsets": "reset-offsets", "--delete-offsets": "delete-offsets"}, ()),
}


def kafka_tool_form(argv: list[str]) -> list[str]:
    """Rule 4: `[command, subcommand, object?, *other options]` for a Kafka tool's form, else `argv` as given."""
    if not argv or argv[0] not in KAFKA_TOOL_ACTIONS:
        return argv
    name_option, actions, others = KAFKA_TOOL_ACTIONS[argv[0]]
    rest, name = list(argv[1:]), None
    for i, token in enumerate(rest):
        if token == name_option and i + 1 < len(rest):
            name, rest = rest[i + 1], rest[:i] + rest[i + 2:]
            break
        if token.startswith(name_option + "="):
            name, rest = token.split("=", 1)[1], rest[:i] + rest[i + 1:]
            break
    given = [token for token in rest if token in actions]
    subcommands = {*actions.values(), *others}
    if len(given) != 1 or any(token in subcommands for token in rest):
        return argv
    rest.remove(given[0])
    every = given[0] == "--describe" and "--all-groups" in rest
    if argv[0] == "groups" and (name is None) != (given[0] == "--list" or every):
        return argv  # every groups action but --list names one group (--describe: or --all-groups)
    return [argv[0], actions[given[0]], *([name] if name is not None else []), *rest]


def command_config(argv: list[str]) -> list[str]:
    """Rule 5: `argv` without `--command-config FILE` (or `=FILE`), whose settings now lie under every client."""
    for i, token in enumerate(argv):
        if token == "--command-config" or token.startswith("--command-config="):
            path = token.split("=", 1)[1] if "=" in token else (argv[i + 1] if i + 1 < len(argv) else "")
            if not path:
                raise ValueError("--command-config needs a FILE")
            from sparklog.broker.config import load_properties
            from sparklog.client.config import use_command_config

            use_command_config(load_properties(path))
            return argv[:i] + argv[i + (1 if "=" in token else 2):]
    return argv


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparklog", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)  # Rule 1
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        argv = command_config(sys.argv[1:] if argv is None else list(argv))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(kafka_tool_form(argv))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from kazoo.exceptions import NoAuthError

    from sparklog.client.errors import UNREACHABLE
    from sparklog.coordination.zookeeper_security import NOT_AUTHORIZED_HINT
    from sparklog.protocol.errors import KafkaError

    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
    except (*UNREACHABLE, ValueError, KafkaError) as exc:  # Rules 2 and 3
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except NoAuthError:  # a znode of secured brokers (coordination/zookeeper_security.py)
        print(f"error: ZooKeeper refused access to a znode: {NOT_AUTHORIZED_HINT}", file=sys.stderr)
        return 1

