"""TLS against plaintext on one broker, in one run: produce and consume rates over an SSL listener beside the
same over a PLAINTEXT listener of the same broker, and the broker's CPU per GB served over each.

    .venv/bin/python benchmarks/security.py [-n 200000] [--size 1000] [--reps 3]

One broker (a subprocess, embedded ZooKeeper) with listeners PLAINTEXT and SSL (PEM stores of a CA made for
the run with `cryptography`, TLS 1.3). Per repetition and protocol, alternating which goes first: confluent-kafka
produces `-n` records of `--size` bytes (acks=1, lz4 off, linger 5 ms) to a one-partition topic of its own, then
consumes them from offset 0. Rates are acknowledged (measure.py Rule 1) or received records over the time
taken; CPU is the broker's user+system from /proc over the consume, divided by the bytes of record values
received (CPU-s/GB). Printed: the median of the repetitions per row and the ratios TLS/plaintext (goals,
issue 24: consume >= 0.5x, produce >= 0.7x), with the load average. A short row fails the run (measure.py Rule 4).
TLS serves record sets by copying them (server.py: sendfile cannot carry TLS); plaintext keeps sendfile.
Where a produce's time goes, per protocol: the broker's CPU (/proc) and the client's (this process: the
producing loop and librdkafka's threads, getrusage) over the produce, per GB of record values acknowledged.
Over TLS both sides pay the record layer on the same cores: the client encrypts (librdkafka writes each
buffer segment as a TLS record of its own) and the broker decrypts on its event loop (asyncio's SSL protocol).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from measure import confluent_consume, confluent_produce, cpu_seconds, load, payload, run, shortfall  # noqa: E402

GOALS = {"produce": 0.7, "consume": 0.5}


def one_rep(broker, configs: dict, n: int, value: bytes, order: list[str]) -> dict:
    """{protocol: {"produce": rec/s, "consume": rec/s, "cpu": CPU-s/GB}} of one repetition."""
    from confluent_kafka.admin import AdminClient, NewTopic

    rows = {}
    for protocol in order:
        config = configs[protocol]
        topic = f"sec-{protocol.lower()}-{uuid.uuid4().hex[:6]}"
        admin = AdminClient(config)  # kept alive until the result arrives
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
        time.sleep(1.0)
        broker_before, client_before = cpu_seconds(broker.proc.pid), own_cpu_seconds()
        produced = confluent_produce({**config, "acks": 1, "linger.ms": 5}, topic, n, value)
        produce_cpu = {"broker": cpu_seconds(broker.proc.pid) - broker_before, "client": own_cpu_seconds() - client_before}
        if produced.acked != n:
            shortfall(f"{protocol} produce: {produced.acked} of {n} acknowledged{produced.note()}")
        before = cpu_seconds(broker.proc.pid)
        consumed = confluent_consume({**config, "fetch.max.bytes": 52428800}, topic, n)
        cpu = cpu_seconds(broker.proc.pid) - before
        if consumed.got != n or consumed.errors:
            shortfall(f"{protocol} consume: {consumed.got} of {n}, {consumed.errors} errors")
        gigabytes = consumed.got * len(value) / 1e9
        produced_gb = produced.acked * len(value) / 1e9
        rows[protocol] = {"produce": produced.acked / produced.seconds, "consume": consumed.got / consumed.seconds,
                          "cpu": cpu / gigabytes if gigabytes else float("nan"),
                          **{f"{side} produce cpu": seconds / produced_gb if produced_gb else float("nan")
                             for side, seconds in produce_cpu.items()}}
    return rows


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process (the client: the producing loop and librdkafka's threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from support.certs import make_pki
    from support.cluster import Cluster

    work = Path(tempfile.mkdtemp(prefix="sparklog-security-"))
    pki = make_pki(work / "pki")
    zookeeper = EmbeddedZooKeeper()
    zookeeper.start()
    print(f"load before: {load()}; n={args.n} x {args.size} B, {args.reps} repetitions")
    try:
        with Cluster(f"{zookeeper.connect_string}/sec-{uuid.uuid4().hex[:6]}", work / "brokers", overrides={
                "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **pki.broker_ssl()}) as cluster:
            broker = cluster.brokers[1]
            ports = {name: port for name, (_, port, _) in broker.listeners().items()}
            configs = {"PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"},
                       "SSL": {"bootstrap.servers": f"localhost:{ports['SSL']}", "security.protocol": "SSL",
                               "ssl.ca.location": str(pki.ca)}}
            reps = [one_rep(broker, configs, args.n, payload(args.size), ["PLAINTEXT", "SSL"][::1 - 2 * (i % 2)])
                    for i in range(args.reps)]
    finally:
        zookeeper.stop()
    report(reps)
    print(f"load after: {load()}")
    return 0


PRODUCE_CPU = ("broker produce cpu", "client produce cpu")


def report(reps: list[dict]) -> None:
    median = {p: {k: statistics.median(r[p][k] for r in reps) for k in ("produce", "consume", "cpu", *PRODUCE_CPU)}
              for p in ("PLAINTEXT", "SSL")}
    print(f"{'':10} {'produce rec/s':>14} {'consume rec/s':>14} {'broker CPU-s/GB consumed':>26}")
    for protocol, row in median.items():
        print(f"{protocol:10} {row['produce']:>14,.0f} {row['consume']:>14,.0f} {row['cpu']:>26.2f}")
    for kind, goal in GOALS.items():
        ratio = median["SSL"][kind] / median["PLAINTEXT"][kind]
        print(f"TLS/plaintext {kind}: {ratio:.2f}x (goal >= {goal}x: {'met' if ratio >= goal else 'NOT met'})")
    print(f"TLS/plaintext broker CPU per GB consumed: {median['SSL']['cpu'] / median['PLAINTEXT']['cpu']:.2f}x")
    for key in PRODUCE_CPU:
        side = key.split()[0]
        print(f"{side} CPU-s per GB produced: plaintext {median['PLAINTEXT'][key]:.2f}, TLS {median['SSL'][key]:.2f} "
              f"({median['SSL'][key] / median['PLAINTEXT'][key]:.2f}x)")


if __name__ == "__main__":
    sys.exit(run(main))
