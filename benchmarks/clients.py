"""Client benchmark (the paper's section 5, scaled): our Python producer and consumer beside confluent-kafka's.

    python benchmarks/clients.py [--bootstrap HOST:PORT] [-n 1000000] [--cap 60] [--results FILE]
                                 [--only producer|consumer] [--codecs none,gzip,snappy,lz4,zstd] [--batches 1,50]

Workload as in ../shared/peers: N messages of a fixed 200-byte printable payload, one producer then one
consumer, a single-partition topic per test, every process on this machine. "Batch 1" and "batch 50" are
records per RecordBatch (`batch.num.messages`, librdkafka's name, for both clients); the producer sends
asynchronously and the time ends when the last acknowledgement (acks=1) arrives. A test stops sending after
`--cap` seconds and counts what was acknowledged. MB/s counts payload bytes (10^6 B/s). CPU % is process CPU
time over wall time (100 = one core): the client process (all its threads) and the broker. "msg per client
CPU-s" divides by the client's CPU time instead of the wall time: on a shared, loaded machine it shows what
the client's code costs, independent of how much of a core the scheduler gave it.

Without `--bootstrap` it starts an embedded ZooKeeper and one `sparklog broker` subprocess, and stops both.
Peers' best Python rows on this machine (../shared/peers/RESULTS.md): 17,500 msg/s produced at batch 1,
66,000 at batch 50, 117,000 consumed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

PEERS = {("produce", 1): 17_518, ("produce", 50): 66_343, ("consume", 1000): 117_436}
MSG_SIZE = 200


def payload(size: int = MSG_SIZE, seed: int = 2011) -> bytes:
    """The peers' payload: fixed, printable, not trivially compressible."""
    rnd = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return bytes(rnd.choice(alphabet) for _ in range(size))


class Meter:
    """Wall time and CPU of this process and of the broker process."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid

    def _broker_cpu(self) -> float:
        if not self.broker_pid:
            return 0.0
        try:
            fields = Path(f"/proc/{self.broker_pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return 0.0

    def __enter__(self) -> "Meter":
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._cpu = usage.ru_utime + usage.ru_stime
        self._broker = self._broker_cpu()
        self._t = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self._t
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.client_cpu = 100 * (usage.ru_utime + usage.ru_stime - self._cpu) / self.wall
        self.broker_cpu = 100 * (self._broker_cpu() - self._broker) / self.wall


def row(client: str, test: str, batch: int, codec: str, done: int, target: int, meter: Meter, note: str = "") -> dict:
    rate = done / meter.wall if meter.wall else 0.0
    return {"system": client, "test": test, "batch": batch, "compression": codec, "msgs": done, "target": target,
            "seconds": round(meter.wall, 2), "msg_per_s": round(rate), "mb_per_s": round(rate * MSG_SIZE / 1e6, 2),
            "cpu_client": round(meter.client_cpu), "cpu_broker": round(meter.broker_cpu),
            "msg_per_client_cpu_s": round(done / (meter.wall * meter.client_cpu / 100)) if meter.client_cpu else None,
            "note": note}


def create_topic(bootstrap: str) -> str:
    from sparklog.client.admin import AdminClient

    name = f"bench-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topic(name, 1)
    return name


def ours_produce(bootstrap: str, n: int, batch: int, codec: str, cap: float, meter: Meter) -> tuple[str, int]:
    from sparklog.client import Producer

    topic = create_topic(bootstrap)
    value = payload()
    producer = Producer(bootstrap, **{"batch.num.messages": batch, "compression.type": codec, "acks": 1})
    send = producer.send
    sent = 0
    with meter:
        deadline = time.perf_counter() + cap
        while sent < n:
            for _ in range(min(1000, n - sent)):
                send(topic, value)
            sent += min(1000, n - sent)
            if time.perf_counter() > deadline:
                break
        producer.flush()
    producer.close()
    return topic, sent


def confluent_produce(bootstrap: str, n: int, batch: int, codec: str, cap: float, meter: Meter) -> tuple[str, int]:
    from confluent_kafka import Producer

    topic = create_topic(bootstrap)
    value = payload()
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": batch, "compression.type": codec,
                         "linger.ms": 10, "acks": 1, "queue.buffering.max.messages": 1_000_000})
    sent = 0
    with meter:
        deadline = time.perf_counter() + cap
        while sent < n:
            try:
                producer.produce(topic, value)
                sent += 1
            except BufferError:
                producer.poll(0.001)
            if sent % 1000 == 0:
                producer.poll(0)
                if time.perf_counter() > deadline:
                    break
        producer.flush()
    return topic, sent


def ours_consume(bootstrap: str, topic: str, n: int, cap: float, meter: Meter) -> int:
    from sparklog.client import Consumer

    got = 0
    with Consumer(bootstrap, **{"auto.offset.reset": "earliest", "consumer.timeout.ms": 10_000}) as consumer:
        consumer.assign([(topic, 0)])
        with meter:
            deadline = time.perf_counter() + cap
            for record in consumer:
                got += 1
                if got >= n or (got % 10_000 == 0 and time.perf_counter() > deadline):
                    break
    return got


def confluent_consume(bootstrap: str, topic: str, n: int, cap: float, meter: Meter) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    try:
        with meter:
            deadline = time.perf_counter() + cap
            while got < n and time.perf_counter() < deadline:
                for msg in consumer.consume(1000, 1.0):
                    if not msg.error():
                        got += 1
    finally:
        consumer.close()
    return got


def print_table(rows: list[dict]) -> None:
    print("\n| Client | Test | Batch | Compression | msg/s | MB/s | Msgs done / target | s | CPU % client / broker "
          "| msg per client CPU-s | vs peers' best |")
    print("|---|---|---:|---|---:|---:|---|---:|---|---:|---|")
    for r in rows:
        peer = PEERS.get((r["test"], 1000 if r["test"] == "consume" else r["batch"]))
        ratio = f"{r['msg_per_s'] / peer:.1f}x of {peer:,}" if peer else ""
        print(f"| {r['system']} | {r['test']} | {r['batch']} | {r['compression']} | **{r['msg_per_s']:,}** | "
              f"{r['mb_per_s']} | {r['msgs']:,} / {r['target']:,} | {r['seconds']} | {r['cpu_client']} / "
              f"{r['cpu_broker']} | {r['msg_per_client_cpu_s'] or 0:,} | {ratio} |")


def run(bootstrap: str, broker_pid: int | None, args) -> list[dict]:
    rows: list[dict] = []
    codecs = args.codecs.split(",")
    consume_topic = None

    def emit(r: dict) -> None:
        rows.append(r)
        print(json.dumps(r), flush=True)
        if args.results:
            with open(args.results, "a") as f:
                f.write(json.dumps(r) + "\n")

    if args.only in (None, "producer"):
        for batch in [int(b) for b in args.batches.split(",")]:
            for codec in codecs:
                meter = Meter(broker_pid)
                topic, done = ours_produce(bootstrap, args.n, batch, codec, args.cap, meter)
                emit(row("sparklog-python", "produce", batch, codec, done, args.n, meter))
                if batch == 50 and codec == "none":
                    consume_topic = topic
            meter = Meter(broker_pid)
            _, done = confluent_produce(bootstrap, args.n, batch, "none", args.cap, meter)
            emit(row("confluent-kafka", "produce", batch, "none", done, args.n, meter))
    if args.only in (None, "consumer"):
        if consume_topic is None:
            consume_topic, _ = ours_produce(bootstrap, args.n, 50, "none", 600, Meter(broker_pid))
        meter = Meter(broker_pid)
        done = ours_consume(bootstrap, consume_topic, args.n, args.cap, meter)
        emit(row("sparklog-python", "consume", 1000, "none", done, args.n, meter, "records of the batch-50 topic"))
        meter = Meter(broker_pid)
        done = confluent_consume(bootstrap, consume_topic, args.n, args.cap, meter)
        emit(row("confluent-kafka", "consume", 1000, "none", done, args.n, meter, "consume(1000)"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start ZooKeeper and one broker)")
    parser.add_argument("--broker-pid", type=int, help="with --bootstrap: the broker's pid, for its CPU %%")
    parser.add_argument("-n", type=int, default=int(os.environ.get("BENCH_N", 1_000_000)))
    parser.add_argument("--cap", type=float, default=float(os.environ.get("BENCH_CAP_S", 60)))
    parser.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd")
    parser.add_argument("--batches", default="1,50", help="records per batch to test (default 1,50)")
    parser.add_argument("--only", choices=["producer", "consumer"])
    parser.add_argument("--results", help="append each row as JSON to this file")
    args = parser.parse_args()
    if args.bootstrap:
        rows = run(args.bootstrap, args.broker_pid, args)
    else:
        from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
        from support.cluster import Cluster

        zookeeper = EmbeddedZooKeeper()
        zookeeper.start()
        try:
            with Cluster(f"{zookeeper.connect_string}/bench-{uuid.uuid4().hex[:8]}",
                         Path(tempfile.mkdtemp(prefix="sparklog-bench-")), brokers=1) as cluster:
                broker = next(iter(cluster.brokers.values()))
                rows = run(cluster.bootstrap, broker.pid, args)
        finally:
            zookeeper.stop()
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
