"""The noisy neighbour: a latency-sensitive producer's acks=1 latency alone, beside an unthrottled flood, and
beside the same flood held by a client-id quota (design notes 4.9, KIP-219). One run, one broker.

    .venv/bin/python benchmarks/quotas.py [--seconds 10] [--quota-mib 2]

The latency producer (confluent-kafka, client.id "latency", acks=1, linger.ms=0) sends one 200-byte message every
10 ms to its own topic and times each from produce() to its delivery report. The flood (confluent-kafka in a
process of its own, client.id "flood", 10 KB values, as fast as the broker takes them) writes another topic.
Rows: p50 and p99 latency (ms) and their ratio to the row "alone", and the flood's acknowledged MB/s. The quota
row is measured after the quota (clients/flood producer_byte_rate = --quota-mib MiB/s, written in ZooKeeper
while the flood runs) has had `--settle` seconds to take hold. Goal: the quota row's p99 within 2x of alone.
A message not acknowledged makes its row FAILED (measure.py Rule 4): the run then exits 1.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import load, one_broker_cluster, payload, run, shortfall  # noqa: E402

INTERVAL_S = 0.01
VALUE = payload(200)
FLOOD_VALUE = payload(10_000)
GOAL = 2.0


def latencies(bootstrap: str, seconds: float) -> tuple[list[float], int]:
    """(latencies in ms of the acknowledged messages, messages not acknowledged)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "latency", "acks": 1, "linger.ms": 0})
    found: list[float] = []
    failed = [0]

    def report(sent_at):
        def delivered(err, _msg):
            if err is None:
                found.append((time.perf_counter() - sent_at) * 1000.0)
            else:
                failed[0] += 1
        return delivered

    end = time.monotonic() + seconds
    next_at = time.monotonic()
    sent = 0
    while time.monotonic() < end:
        producer.produce("latency", VALUE, on_delivery=report(time.perf_counter()))
        sent += 1
        next_at += INTERVAL_S
        producer.poll(max(0.0, next_at - time.monotonic()))
    producer.flush(30)
    return found, sent - len(found)


def flood(bootstrap: str, stop, acked) -> None:
    """In a process of its own: produce FLOOD_VALUE as fast as the broker acknowledges, counting bytes acked."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "flood", "acks": 1, "linger.ms": 5,
                         "queue.buffering.max.kbytes": 16384})

    def delivered(err, msg):
        if err is None:
            with acked.get_lock():
                acked.value += len(msg.value())

    while not stop.is_set():
        try:
            producer.produce("flood", FLOOD_VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
            continue
        producer.poll(0)
    producer.purge()
    producer.flush(10)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def row(name: str, found: list[float], missing: int, alone_p99: float | None, flood_mb_s: float | None) -> float:
    p50, p99 = percentile(found, 0.5), percentile(found, 0.99)
    ratio = f"{p99 / alone_p99:9.2f}" if alone_p99 else f"{1.0:9.2f}"
    flood_text = f"{flood_mb_s:11.1f}" if flood_mb_s is not None else f"{'-':>11}"
    note = shortfall(f"; FAILED: {missing} of {len(found) + missing} not acknowledged") if missing else ""
    print(f"{name:<26}{p50:9.2f}{p99:9.2f}{ratio}{flood_text}{note}", flush=True)
    return p99


def flood_rate(acked, seconds: float, phase) -> float:
    before = acked.value
    result = phase()
    return result, (acked.value - before) / seconds / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured phase")
    parser.add_argument("--quota-mib", type=float, default=2.0, help="the flood's producer_byte_rate, MiB/s")
    parser.add_argument("--settle", type=float, default=4.0, help="seconds between setting the quota and measuring")
    args = parser.parse_args()
    from sparklog.coordination import client_quotas as cq
    from sparklog.coordination.connection import close, connect

    print(f"load average {load()}; {args.seconds:.0f} s per phase, flood quota {args.quota_mib} MiB/s")
    print(f"{'latency producer':<26}{'p50 ms':>9}{'p99 ms':>9}{'x alone':>9}{'flood MB/s':>11}")
    with one_broker_cluster(["latency", "flood"], 1, chroot="quotas") as (cluster, _):
        found, missing = latencies(cluster.bootstrap, args.seconds)
        alone = row("alone", found, missing, None, None)
        stop, acked = multiprocessing.Event(), multiprocessing.Value("q", 0)
        flooder = multiprocessing.Process(target=flood, args=(cluster.bootstrap, stop, acked))
        flooder.start()
        try:
            time.sleep(2.0)  # the flood at full speed
            (found, missing), mb_s = flood_rate(acked, args.seconds, lambda: latencies(cluster.bootstrap, args.seconds))
            row("beside the flood", found, missing, alone, mb_s)
            zk = connect(cluster.zk_connect)
            try:
                cq.alter_entity_config(zk, cq.Entity(client="flood"),
                                       {cq.PRODUCER_BYTE_RATE: str(int(args.quota_mib * 1024 * 1024))})
            finally:
                close(zk)
            time.sleep(args.settle)
            (found, missing), mb_s = flood_rate(acked, args.seconds, lambda: latencies(cluster.bootstrap, args.seconds))
            quota_p99 = row("beside the flood, quota", found, missing, alone, mb_s)
        finally:
            stop.set()
            flooder.join(30)
            if flooder.is_alive():
                flooder.kill()
    verdict = "met" if quota_p99 <= GOAL * alone else "NOT met"
    print(f"goal: p99 beside the quoted flood within {GOAL:.0f}x of alone: {verdict} "
          f"({quota_p99 / alone:.2f}x); load average {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
