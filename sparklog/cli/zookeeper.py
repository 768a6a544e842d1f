"""`sparklog zookeeper start`: run the embedded ZooKeeper in the foreground until Ctrl-C (or SIGTERM)."""

from __future__ import annotations

import argparse
import signal
import sys
import time

DEFAULT_PORT = 2181  # ZooKeeper's standard client port
POLL_INTERVAL_S = 0.5


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    zookeeper = subparsers.add_parser("zookeeper", help="run a ZooKeeper server for a sparklog cluster")
    commands = zookeeper.add_subparsers(dest="zookeeper_command", metavar="SUBCOMMAND")
    start = commands.add_parser("start", help="start an embedded ZooKeeper (from the pyspark jars) in the foreground")
    start.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                       help="client port, 0 for any free one (default 2181)")
    start.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    start.add_argument(
        "--data-dir", default=None, help="where ZooKeeper keeps its data (default: a temporary directory, removed on exit)"
    )
    start.set_defaults(func=run_start)
    zookeeper.set_defaults(func=lambda args: _usage(zookeeper))


def port_number(text: str) -> int:
    """argparse type of a TCP port to listen on: 0 (any free one) to 65535."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"must be a port in [0, 65535], not {text!r}")
    return int(text)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_start(args: argparse.Namespace) -> int:
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper, JavaNotFound, ZooKeeperStartError

    server = EmbeddedZooKeeper(port=args.port, data_dir=args.data_dir, host=args.host)
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        try:
            server.start()
        except JavaNotFound as exc:
            print(f"sparklog zookeeper: {exc}", file=sys.stderr)
            return 1
        except ZooKeeperStartError as exc:
            print(f"sparklog zookeeper: {exc}", file=sys.stderr)
            return 1
        print(f"ZooKeeper is running at {server.connect_string} (data in {server.data_dir}); Ctrl-C stops it.")
        print(f"  brokers and clients: --zookeeper {server.connect_string}", flush=True)
        while server.running:
            time.sleep(POLL_INTERVAL_S)
        print(f"sparklog zookeeper: the ZooKeeper JVM exited; see {server.log_file}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping ZooKeeper", file=sys.stderr)
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
