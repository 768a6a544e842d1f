"""The Kafka paper's section 5 on this machine: one producer, then one consumer, against one sparklog broker.

    .venv/bin/python benchmarks/paper.py [--messages 1000000] [--size 200] [--batches 1,50] [--cap SECONDS]

Starts a real ZooKeeper (embedded) and a broker subprocess with a temporary log dir; confluent-kafka is the
producer (so the broker is what is measured) with `batch.num.messages` = the batch size, and the consumer
fetches about 200 KB per partition fetch. Prints msg/s and MB/s (payload bytes, 10^6) for each test, the
broker's CPU, and the broker's bytes on disk per message minus the payload (the paper's "overhead").
This is a benchmark, not a test: nothing is asserted. With `--results FILE` it appends JSON rows in the
format of `../shared/peers/bench_common.py` `record()` (run_peers.sh --extra exports BENCH_RESULTS,
BENCH_N, BENCH_CAP_S and BENCH_MSG_SIZE, which are the defaults here), so make_table.py shows sparklog
beside the peers. With a cap (`--cap`, or BENCH_CAP_S) a produce test stops sending at the cap, as the
peers' tests do, and its row says how many messages were done.
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


def produce(bootstrap: str, topic: str, n: int, value: bytes, batch: int, cap_s: float | None = None
            ) -> tuple[int, float]:
    """(messages delivered, seconds) of producing up to `n` messages, stopping at `cap_s` if given."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "1", "batch.num.messages": batch,
        "linger.ms": 5 if batch > 1 else 0, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000, "enable.idempotence": False, "compression.type": "none",
    })
    producer.list_topics(topic, timeout=10)
    started = time.perf_counter()
    deadline = started + cap_s if cap_s else None
    produce_one = producer.produce
    sent = 0
    while sent < n:
        for _ in range(min(10_000, n - sent)):
            try:
                produce_one(topic, value)
            except BufferError:
                producer.poll(0.01)
                produce_one(topic, value)
        sent += min(10_000, n - sent)
        if deadline is not None and time.perf_counter() > deadline:
            break
    remaining = producer.flush(300)
    elapsed = time.perf_counter() - started
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return sent, elapsed


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
    parser.add_argument("--size", type=int, default=int(os.environ.get("BENCH_MSG_SIZE", 200)))
    parser.add_argument("--cap", type=float, default=float(os.environ.get("BENCH_CAP_S", 0)) or None,
                        help="stop each produce test after this many seconds (default: no cap)")
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
                cpu0, own0 = cpu_seconds(broker.pid), time.process_time()
                done, elapsed = produce(broker.address, TOPIC, args.messages, value, batch, args.cap)
                cpu = (cpu_seconds(broker.pid) - cpu0, time.process_time() - own0)
                time.sleep(1.0)  # let the periodic flush land
                after = disk_bytes(log_dir)
                overhead = ((after[0] - before[0]) / done - args.size, (after[1] - before[1]) / done - args.size)
                rows.append(row("produce", batch, args, done, elapsed, cpu, overhead, mode="acks=1"))
                print(format_row(rows[-1]), flush=True)
                if batch == max(int(b) for b in args.batches.split(",")):
                    cpu0, own0 = cpu_seconds(broker.pid), time.process_time()
                    elapsed = consume(broker.address, TOPIC, done)
                    cpu = (cpu_seconds(broker.pid) - cpu0, time.process_time() - own0)
                    rows.append(row("consume", FETCH_BYTES // 1024, args, done, elapsed, cpu, None,
                                    mode=f"assign, {FETCH_BYTES // 1024} KB fetches"))
                    print(format_row(rows[-1]), flush=True)
            finally:
                broker.stop()
    finally:
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)
    for r in rows:
        if args.results:
            with open(args.results, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


def row(test, batch, args, done, elapsed, cpu, overhead, mode="") -> dict:
    """One row in the peers' format (../shared/peers/bench_common.py record())."""
    import confluent_kafka

    from sparklog import __version__ as version

    rate = done / elapsed
    broker_cpu, client_cpu = cpu
    out = {
        "date": datetime.date.today().isoformat(), "system": "sparklog", "version": version,
        "client": "confluent-kafka " + confluent_kafka.version()[0], "test": test, "mode": mode, "batch": batch,
        "msg_size": args.size, "n_target": args.messages, "n_done": done, "capped": done < args.messages,
        "seconds": round(elapsed, 3), "msg_per_s": round(rate, 1), "mb_per_s": round(rate * args.size / 1e6, 2),
        "notes": "broker: one sparklog broker subprocess, 1 partition, default flush policy",
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "client_cpu_pct": round(100 * client_cpu / elapsed), "server_cpu_pct": round(100 * broker_cpu / elapsed),
    }
    if overhead is not None:
        out["overhead_b_per_msg"] = round(overhead[0], 1)
        out["overhead_apparent_b_per_msg"] = round(overhead[1], 1)
    return out


def format_row(r: dict) -> str:
    text = (f"{r['test']:8s} batch {r['batch']:>4}: {r['msg_per_s']:>12,.0f} msg/s {r['mb_per_s']:>8.2f} MB/s "
            f"({r['n_done']:,} msgs in {r['seconds']:.2f} s; CPU client {r['client_cpu_pct']}% broker "
            f"{r['server_cpu_pct']}%; load {r['loadavg_1m']})")
    if "overhead_b_per_msg" in r:
        text += f"  overhead {r['overhead_b_per_msg']} B/msg on disk (apparent {r['overhead_apparent_b_per_msg']})"
    return text


if __name__ == "__main__":
    sys.exit(main())
