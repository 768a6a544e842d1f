"""The `sparklog` command, shaped like Kafka's tools: `sparklog <command> <subcommand> [options]`.

Each layer that owns commands has a `commands.py` with `add_parser(subparsers)`; the modules load their
heavy dependencies inside the command functions, so that `sparklog --help` stays fast.

Rule 1: every module listed is part of the package (jobs/ included): an import error in one of them is a bug
and propagates; it is never taken for "that piece is not installed".
Rule 2: a command that cannot reach what it needs (a broker, ZooKeeper) or gives up after its timeout ends
with one line on stderr, `error: ...`, and exit status 1, never a traceback.
Rule 3: so does a value the command was given that the layer checking it refuses (a ValueError: an address,
a setting, a name, a partition) and an error a broker answered with (a KafkaError: its Kafka name and what
it concerned). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (command, module that defines it); a module's add_parser() registers one or more subcommands.
COMMAND_MODULES = (
    "sparklog.coordination.commands",
    "sparklog.broker.commands",
    "sparklog.client.commands",
    "sparklog.client.group_commands",
    "sparklog.client.topic_commands",
    "jobs.demo",  # the pipeline's demo: jobs/ sits on top of every sparklog layer
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparklog", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)  # Rule 1
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from sparklog.client.errors import UNREACHABLE
    from sparklog.protocol.errors import KafkaError

    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
    except (*UNREACHABLE, ValueError, KafkaError) as exc:  # Rules 2 and 3
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
