"""`sparklog zookeeper start`: run the embedded ZooKeeper in the foreground until Ctrl-C (or SIGTERM):
standalone, or one member of a replicated ensemble (`--id N --servers 1=HOST:2888:3888:2181,2=...,3=...`, one
command per member, each with its own `--data-dir`; brokers take every member: `--zookeeper h:2181,h:2182,h:2183`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

DEFAULT_PORT = 2181  # ZooKeeper's standard client port
POLL_INTERVAL_S = 0.5
START_TIMEOUT_S = 30  # a standalone server's start
QUORUM_WAIT_S = 120  # an ensemble member serves once a majority runs: its peers are started by hand


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
    start.add_argument("--id", type=int, help="this server's id in the ensemble (its myid), one of --servers")
    start.add_argument("--servers", metavar="ID=HOST:QUORUM:ELECTION:CLIENT,...",
                       help="every ensemble member (ZooKeeper's server.N lines plus each one's client port); "
                            "with --id and --data-dir, this server is that member and --port is its client port")
    start.add_argument("--jaas", metavar="FILE", help="serve SASL DIGEST-MD5 logins: a JAAS file whose Server "
                       'section is a DigestLoginModule with user_<name>="<password>" entries, as ZooKeeper reads it')
    start.add_argument("--require-sasl", action="store_true", help="with --jaas: refuse every request of a client "
                       "that has not logged in (ZooKeeper's enforce.auth.enabled)")
    start.add_argument("--ssl-keystore", metavar="PEM", help="also serve a TLS client port: the server's key and "
                       "certificate chain in one PEM file (client certificates are required and are logins)")
    start.add_argument("--ssl-truststore", metavar="PEM", help="with --ssl-keystore: the CA certificates that sign "
                       "the clients' certificates")
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

    try:
        server = _server(args, EmbeddedZooKeeper)
    except ValueError as exc:
        print(f"sparklog zookeeper: {exc}", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        try:
            if server.peers is not None:
                print(f"waiting up to {QUORUM_WAIT_S} s for a majority of the ensemble to run", flush=True)
            server.start(timeout=QUORUM_WAIT_S if server.peers is not None else START_TIMEOUT_S)
        except JavaNotFound as exc:
            print(f"sparklog zookeeper: {exc}", file=sys.stderr)
            return 1
        except ZooKeeperStartError as exc:
            print(f"sparklog zookeeper: {exc}", file=sys.stderr)
            return 1
        everyone = server.connect_string if server.peers is None else ",".join(
            peer.connect_string for _, peer in sorted(server.peers.items()))
        role = "" if server.server_id is None else f" as server {server.server_id} ({server.mode()})"
        print(f"ZooKeeper is running at {server.connect_string}{role} (data in {server.data_dir}); Ctrl-C stops it.")
        print(f"  brokers and clients: --zookeeper {everyone}", flush=True)
        if server.tls is not None:
            print(f"  over TLS: --zookeeper {server.secure_connect_string} (zookeeper.ssl.client.enable=true)",
                  flush=True)
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


def _server(args: argparse.Namespace, server_class):
    """A standalone server, or with --servers the ensemble member --id (ValueError: one line saying what)."""
    from sparklog.coordination.zookeeper_server import parse_servers, sasl_users_of_jaas

    if args.require_sasl and not args.jaas:
        raise ValueError("--require-sasl needs --jaas (the users who may log in)")
    sasl = dict(sasl_users=sasl_users_of_jaas(args.jaas), require_sasl=args.require_sasl) if args.jaas else {}
    sasl.update(_tls(args))
    if args.servers is None:
        if args.id is not None:
            raise ValueError("--id names a member of --servers; give --servers too")
        return server_class(port=args.port, data_dir=args.data_dir, host=args.host, **sasl)
    peers = parse_servers(args.servers)
    if args.id not in peers:
        raise ValueError(f"--id must be one of the ids in --servers ({', '.join(map(str, sorted(peers)))}), "
                         f"not {args.id}")
    if args.data_dir is None:
        raise ValueError("an ensemble member needs --data-dir (its myid and data outlive a restart)")
    me = peers[args.id]
    return server_class(port=me.client_port, data_dir=args.data_dir, host=me.host, server_id=args.id, peers=peers,
                        **sasl)


def _tls(args: argparse.Namespace) -> dict:
    """`tls=ServerTls(...)` of --ssl-keystore/--ssl-truststore, both or neither (ValueError: one line)."""
    from sparklog.coordination.zookeeper_server import ServerTls

    stores = (args.ssl_keystore, args.ssl_truststore)
    if not any(stores):
        return {}
    if not all(stores):
        raise ValueError("--ssl-keystore and --ssl-truststore go together")
    for store in stores:
        if not Path(store).is_file():
            raise ValueError(f"{store}: no such file")
    return {"tls": ServerTls(*stores)}


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
