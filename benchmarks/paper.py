"""The Kafka paper's section 5 on this machine: one producer, then one consumer, against one sparklog broker.

    .venv/bin/python benchmarks/paper.py [--messages 1000000] [--size 200] [--batches 1,50]

Starts a real ZooKeeper (embedded) and a broker subprocess with a temporary log dir; confluent-kafka is the
producer (so the broker is what is measured) with `batch.num.messages` = the batch size, and the consumer
fetches about 200 KB per partition fetch. Prints msg/s and MB/s (payload bytes, 10^6) for each test, the
broker's CPU, and the broker's bytes on disk per message minus the payload (the paper's "overhead").
This is a benchmark, not a test: nothing is asserted. With `--results FILE` it appends JSON rows in the
format of `../shared/peers/bench_common.py` (set BENCH_RESULTS to match run_peers.sh --extra).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

TOPIC = "paper"
FETCH_BYTES = 200 * 1024  # the paper's consumer fetched about 200 KB at a time
TICK = os.sysconf("SC_CLK_TCK")


def payload(size: int, seed: int = 2011) -> bytes:
    """The peers' fixed printable payload (bench_common.payload), so rows compare."""
    rnd = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return bytes(rnd.choice(alphabet) for _ in range(size))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICK


def disk_bytes(path: Path) -> tuple[int, int]:
    alloc = int(subprocess.check_output(["du", "-s", "-B1", str(path)]).split()[0])
    apparent = int(subprocess.check_output(["du", "-s", "-b", str(path)]).split()[0])
    return alloc, apparent


def produce(bootstrap: str, topic: str, n: int, value: bytes, batch: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "1", "batch.num.messages": batch,
        "linger.ms": 5 if batch > 1 else 0, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000, "enable.idempotence": False, "compression.type": "none",
    })
    producer.list_topics(topic, timeout=10)
    started = time.perf_counter()
    produce_one = producer.produce
    for _ in range(n):
        try:
            produce_one(topic, value)
        except BufferError:
            producer.poll(0.01)
            produce_one(topic, value)
    remaining = producer.flush(300)
    elapsed = time.perf_counter() - started
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return elapsed


def consume(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "paper-bench", "enable.auto.commit": False,
        "fetch.max.bytes": 4 * 1024 * 1024, "max.partition.fetch.bytes": FETCH_BYTES,
        "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 65536,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < n:
        batch = consumer.consume(10000, 1.0)
        for m in batch:
            if m.error() is None:
                got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=int(os.environ.get("BENCH_N", 1_000_000)))
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batches", default="1,50")
    parser.add_argument("--results", default=os.environ.get("BENCH_RESULTS"))
    parser.add_argument("--override", action="append", default=[], help="broker property key=value")
    args = parser.parse_args()

    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from support.cluster import BrokerProcess

    work = Path(tempfile.mkdtemp(prefix="sparklog-paper-"))
    zk = EmbeddedZooKeeper()
    zk.start()
    rows = []
    try:
        value = payload(args.size)
        for batch in [int(b) for b in args.batches.split(",")]:
            log_dir = work / f"batch-{batch}" / "logs"
            overrides = dict(o.split("=", 1) for o in args.override)
            broker = BrokerProcess(1, f"{zk.connect_string}/paper-{batch}", log_dir, overrides=overrides)
            broker.start()
            try:
                from sparklog.coordination import topics
                from sparklog.coordination.connection import close, connect

                client = connect(broker.zk_connect)
                topics.create_topic(client, TOPIC, 1, 1)
                close(client)
                time.sleep(0.5)
                before = disk_bytes(log_dir)
                cpu0 = cpu_seconds(broker.pid)
                elapsed = produce(broker.address, TOPIC, args.messages, value, batch)
                cpu1 = cpu_seconds(broker.pid)
                time.sleep(1.0)  # let the periodic flush land
                after = disk_bytes(log_dir)
                overhead = ((after[0] - before[0]) / args.messages - args.size,
                            (after[1] - before[1]) / args.messages - args.size)
                rows.append(row("produce", batch, args, elapsed, cpu1 - cpu0, overhead))
                if batch == max(int(b) for b in args.batches.split(",")):
                    cpu0 = cpu_seconds(broker.pid)
                    elapsed = consume(broker.address, TOPIC, args.messages)
                    rows.append(row("consume", FETCH_BYTES // 1024, args, elapsed,
                                    cpu_seconds(broker.pid) - cpu0, None, unit="KB fetch"))
            finally:
                broker.stop()
    finally:
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)
    for r in rows:
        print(format_row(r))
        if args.results:
            with open(args.results, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


def row(test, batch, args, elapsed, broker_cpu, overhead, unit="batch") -> dict:
    n = args.messages
    return {
        "system": "sparklog", "test": test, "batch": batch, "unit": unit, "n_target": n, "n_done": n,
        "seconds": round(elapsed, 3), "msgs_per_s": round(n / elapsed), "mb_per_s": round(n * args.size / elapsed / 1e6, 2),
        "server_cpu_pct": round(100 * broker_cpu / elapsed), "overhead_du": None if overhead is None else round(overhead[0], 1),
        "overhead_apparent": None if overhead is None else round(overhead[1], 1),
        "client": "confluent-kafka " + __import__("confluent_kafka").version()[0],
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def format_row(r: dict) -> str:
    text = (f"{r['test']:8s} {r['unit']} {r['batch']:>4}: {r['msgs_per_s']:>10,} msg/s {r['mb_per_s']:>8.2f} MB/s "
            f"({r['seconds']:.2f} s, broker CPU {r['server_cpu_pct']}%)")
    if r["overhead_du"] is not None:
        text += f"  overhead {r['overhead_du']} B/msg on disk (apparent {r['overhead_apparent']})"
    return text


if __name__ == "__main__":
    sys.exit(main())
