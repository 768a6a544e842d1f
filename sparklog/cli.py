"""The `sparklog` command, shaped like Kafka's tools: `sparklog <command> <subcommand> [options]`.

Each layer that owns commands has a `commands.py` with `add_parser(subparsers)`; they are imported lazily
so that `sparklog --help` stays fast and a missing optional piece breaks only its own command.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (command, module that defines it); a module's add_parser() registers one or more subcommands.
COMMAND_MODULES = (
    "sparklog.storage.commands",
    "sparklog.coordination.commands",
    "sparklog.broker.commands",
    "sparklog.client.commands",
    "sparklog.client.topic_commands",
    "sparklog.datasource.commands",
    "jobs.demo",  # the pipeline's demo: jobs/ sits on top of every sparklog layer
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparklog", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if name == exc.name or name.startswith(f"{exc.name}."):  # that part is not installed
                continue
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
