"""Client benchmark (the paper's section 5, scaled): our Python producer and consumer beside confluent-kafka's.

    python benchmarks/clients.py [--bootstrap HOST:PORT] [-n 1000000] [--cap 60] [--results FILE]
                                 [--only producer|consumer] [--codecs none,gzip,snappy,lz4,zstd] [--batches 1,50]

Workload as in ../shared/peers: N messages of a fixed 200-byte printable payload, one producer then one
consumer, a single-partition topic per test, every process on this machine. "Batch 1" and "batch 50" are
records per RecordBatch (`batch.num.messages`, librdkafka's name, for both clients); the producer sends
asynchronously and the time ends when the last acknowledgement (acks=1) arrives. Only acknowledged
messages count, for both clients (sparklog futures that succeeded, confluent-kafka delivery reports without
error: benchmarks/measure.py Rule 1); failures and messages unacknowledged at the deadline are printed. A
test stops sending after `--cap` seconds. Each consumer is asked for exactly the messages acknowledged on
its topic and has the same deadline; confluent-kafka's runs with `fetch.queue.backoff.ms` = 0 (paper.py
says why). MB/s counts payload bytes (10^6 B/s). CPU % is process CPU
time over wall time (100 = one core): the client process (all its threads) and the broker. "msg per client
CPU-s" divides by the client's CPU time instead of the wall time: on a shared, loaded machine it shows what
the client's code costs, independent of how much of a core the scheduler gave it.

Without `--bootstrap` it starts an embedded ZooKeeper and one `sparklog broker` subprocess, and stops both.
The "peers' best" column is NOT measured in this run: it quotes the peers' best Python rows on this machine
from ../shared/peers/RESULTS.md (17,500 msg/s produced at batch 1, 66,000 at batch 50, 117,000 consumed);
the same-run baseline is the confluent-kafka row beside each sparklog row.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from measure import confluent_consume as measured_confluent_consume  # noqa: E402
from measure import confluent_produce as measured_confluent_produce  # noqa: E402
from measure import payload, shortfall  # noqa: E402
from measure import run as run_benchmark  # noqa: E402

PEERS = {("produce", 1): 17_518, ("produce", 50): 66_343, ("consume", 1000): 117_436}
MSG_SIZE = 200
DEADLINE_S = 600.0  # flush and consume loops end by then whatever the broker does


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


def ours_produce(bootstrap: str, n: int, batch: int, codec: str, cap: float, meter: Meter
                 ) -> tuple[str, int, str]:
    """(topic, messages acknowledged, note on failures) of sending up to `n` messages for `cap` seconds."""
    from sparklog.client import Producer

    topic = create_topic(bootstrap)
    value = payload(MSG_SIZE)
    producer = Producer(bootstrap, **{"batch.num.messages": batch, "compression.type": codec, "acks": 1})
    send = producer.send
    futures = []
    with meter:
        deadline = time.perf_counter() + cap
        while len(futures) < n and time.perf_counter() < deadline:
            futures.extend(send(topic, value) for _ in range(min(1000, n - len(futures))))
        try:
            producer.flush(DEADLINE_S)
        except TimeoutError:
            pass  # counted below as unacknowledged
    producer.close(1)
    acked = sum(1 for f in futures if f.succeeded())
    failed = sum(1 for f in futures if f.failed())
    return topic, acked, failure_note(failed, len(futures) - acked - failed)


def confluent_produce(bootstrap: str, n: int, batch: int, codec: str, cap: float, meter: Meter
                      ) -> tuple[str, int, str]:
    topic = create_topic(bootstrap)
    with meter:
        done = measured_confluent_produce(
            {"bootstrap.servers": bootstrap, "batch.num.messages": batch, "compression.type": codec,
             "linger.ms": 10, "acks": 1, "queue.buffering.max.messages": 1_000_000}, topic, n, payload(MSG_SIZE),
            cap_s=cap, deadline_s=cap + DEADLINE_S)
    return topic, done.acked, failure_note(done.failed, done.unacknowledged)


def failure_note(failed: int, unacknowledged: int) -> str:
    return shortfall(f"FAILED {failed}, unacknowledged {unacknowledged}") if failed or unacknowledged else ""


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
    with meter:
        done = measured_confluent_consume({"bootstrap.servers": bootstrap, "fetch.queue.backoff.ms": 0}, topic, n,
                                          deadline_s=cap)
    return done.got


def print_table(rows: list[dict]) -> None:
    print("\n| Client | Test | Batch | Compression | msg/s | MB/s | Msgs done / target | s | CPU % client / broker "
          "| msg per client CPU-s | vs peers' best (RESULTS.md, not this run) | note |")
    print("|---|---|---:|---|---:|---:|---|---:|---|---:|---|---|")
    for r in rows:
        peer = PEERS.get((r["test"], 1000 if r["test"] == "consume" else r["batch"]))
        ratio = f"{r['msg_per_s'] / peer:.1f}x of {peer:,}" if peer else ""
        print(f"| {r['system']} | {r['test']} | {r['batch']} | {r['compression']} | **{r['msg_per_s']:,}** | "
              f"{r['mb_per_s']} | {r['msgs']:,} / {r['target']:,} | {r['seconds']} | {r['cpu_client']} / "
              f"{r['cpu_broker']} | {r['msg_per_client_cpu_s'] or 0:,} | {ratio} | {r['note']} |")


def run(bootstrap: str, broker_pid: int | None, args) -> list[dict]:
    rows: list[dict] = []
    codecs = args.codecs.split(",")
    consume_topic, consume_n = None, 0

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
                topic, done, note = ours_produce(bootstrap, args.n, batch, codec, args.cap, meter)
                emit(row("sparklog-python", "produce", batch, codec, done, args.n, meter, note))
                if batch == 50 and codec == "none":
                    consume_topic, consume_n = topic, done
            meter = Meter(broker_pid)
            _, done, note = confluent_produce(bootstrap, args.n, batch, "none", args.cap, meter)
            emit(row("confluent-kafka", "produce", batch, "none", done, args.n, meter, note))
    if args.only in (None, "consumer"):
        if consume_topic is None:
            consume_topic, consume_n, _ = ours_produce(bootstrap, args.n, 50, "none", DEADLINE_S, Meter(broker_pid))
        for client, consume in (("sparklog-python", ours_consume), ("confluent-kafka", confluent_consume)):
            meter = Meter(broker_pid)
            done = consume(bootstrap, consume_topic, consume_n, args.cap, meter)
            emit(row(client, "consume", 1000, "none", done, consume_n, meter,
                     "the batch-50 topic's acknowledged records" + ("" if done == consume_n else shortfall(
                         f"; SHORT: {client} consumed {done:,} of {consume_n:,}"))))
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

        work = Path(tempfile.mkdtemp(prefix="sparklog-bench-"))
        zookeeper = EmbeddedZooKeeper()
        zookeeper.start()
        try:
            with Cluster(f"{zookeeper.connect_string}/bench-{uuid.uuid4().hex[:8]}", work, brokers=1) as cluster:
                broker = next(iter(cluster.brokers.values()))
                rows = run(cluster.bootstrap, broker.pid, args)
        finally:
            zookeeper.stop()
            shutil.rmtree(work, ignore_errors=True)  # the broker's logs: hundreds of MB a run
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
