"""`sparklog schema-registry start`: the Confluent-compatible schema registry REST API over the ZooKeeper registry.

    sparklog schema-registry start --zookeeper localhost:2181 --listeners http://127.0.0.1:8081

Serves in the foreground until Ctrl-C (or SIGTERM). Any number may run against one ZooKeeper: the registry's
state is all in ZooKeeper (`sparklog.schemas.registry`), so they agree on every id, version and level.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

DEFAULT_LISTENER = "http://127.0.0.1:8081"  # Confluent's port (its default host is 0.0.0.0)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    registry = subparsers.add_parser("schema-registry", help="serve the Confluent schema registry REST API")
    commands = registry.add_subparsers(dest="schema_registry_command", metavar="SUBCOMMAND")
    start = commands.add_parser("start", help="serve the REST API in the foreground")
    start.add_argument("--zookeeper", required=True, help="ZooKeeper connect string (host:port[/chroot])")
    start.add_argument("--listeners", default=DEFAULT_LISTENER,
                       help=f"http://HOST:PORT to serve on, Confluent's setting (default {DEFAULT_LISTENER}; "
                            "port 0 picks a free one)")
    start.set_defaults(func=run_start)
    registry.set_defaults(func=lambda args: (registry.print_help(), 2)[1])


def run_start(args: argparse.Namespace) -> int:
    from sparklog.schemas import SchemaRegistry
    from sparklog.schemas.http_server import RegistryServer, parse_listener

    host, port = parse_listener(args.listeners)  # a ValueError: one line, exit 1
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    try:
        with SchemaRegistry.open(args.zookeeper) as registry:
            try:
                server = RegistryServer(registry, host, port)
            except OSError as exc:
                print(f"error: cannot listen on {args.listeners}: {exc}", file=sys.stderr)
                return 1
            with server:
                print(f"Schema registry is serving at {server.url} (ZooKeeper {args.zookeeper}); Ctrl-C stops it.",
                      flush=True)
                stopped.wait()
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
