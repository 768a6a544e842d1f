"""The Kafka paper's section 5 on this machine: one producer, then one consumer, against one sparklog broker,
with the Fetch path beside a bare `os.sendfile` loop over the same segment files in the same run.

    .venv/bin/python benchmarks/paper.py [--messages 1000000] [--size 200] [--batches 1,50] [--cap SECONDS]
                                         [--idempotence] [--compression lz4] [--no-read-back]

Starts a real ZooKeeper (embedded) and a broker subprocess with a temporary log dir; confluent-kafka is the
producer (so the broker is what is measured) with `batch.num.messages` = the batch size, acks=1. Only
acknowledged messages count (delivery reports without error, measure.py Rule 1): failures are printed.
Prints msg/s and MB/s (payload bytes, 10^6) for each test, the broker's CPU, and the broker's bytes on disk
per message minus the payload (the paper's "overhead"), and the broker's CPU per acknowledged message (us/msg).
With `--idempotence` the producer has enable.idempotence=true (librdkafka then sends acks=all and at most five
requests in flight); with `--compression` its compression.type. One replica's acks=all waits for the flush
(README, "Durability and visibility"): `--override log.flush.visibility=appended` answers at the append, as
Kafka's broker does with one replica. `--no-read-back` skips the consume and kcat rows.

Then `kcat -P` (librdkafka in C, no Python per message) produces the same messages with
`batch.num.messages` = `--kcat-batch` (50; 0: no such row) into a topic of a fresh broker, so that the
broker's own produce capacity shows where confluent-kafka's Python client is the bound (its row's client
CPU). kcat waits for every delivery report before it exits; what counts is the partition's high watermark
after it (at most what was sent, less the failures kcat printed).

Then the log of the largest batch size is read back, every reader asked for exactly the messages that
were acknowledged, each within a deadline:
    consume 200K   confluent-kafka's consumer, the paper's ~200 KB per partition fetch
    consume 1M     the same with librdkafka's default 1 MiB per partition fetch
    kcat 1M        kcat (librdkafka in C, no Python per message) with the same settings, its output (one
                   offset a line) counted; its librdkafka (2.0) has no fetch.queue.backoff.ms, nor the throttle
    raw fetch 1M   a Fetch loop on one socket that counts records from batch headers only: the broker
                   with a client that costs next to nothing (the request encoded once and patched, each
                   reply read into one buffer, its records found at their fixed place); it reads the log over until about
                   PRECISION_BYTES were served, so that CPU times (in 10 ms ticks) are precise
    sendfile 1M    a bare os.sendfile stream of the partition's segment files, 1 MiB a call, as many passes
                   as the raw fetch loop, from a server process of its own to a reader in this process
    request 1M     a bare request/response server over the same files (measure.request_loop), a process of
                   its own: a 64-byte request, then a 72-byte head and one 1 MiB sendfile, one at a time as
                   the raw fetch loop asks: what serving those bytes as Fetch-sized replies costs with no work per request
Both baselines' CPU is their server process's, read from /proc as the broker's is, with the reader in another
process as the broker's readers are, and the reader's (measure.py Rule 3). Until issue 21 the loops' sender and receiver
shared one process, and the broker, whose loopback TCP work its client's process partly pays, "beat" that
floor by 2x; the figures quoted from those runs are withdrawn. Until 30 November 2026 the bare servers also
differed from the broker in their socket (blocking, with Nagle's algorithm: about 3x the kernel's cost per
byte), their reply (no head before the sendfile) and where the scheduler put them and their readers, and
the broker beat them by 2x again on a quiet machine: now they match it in all three (measure.py Rule 3).
The raw fetch loop and the two bare servers run RAW_ROUNDS times in turn, and each row is its median run.
Every consumer has `fetch.queue.backoff.ms` = 0: librdkafka >= 2.1 otherwise stops fetching for up to a
second once `queued.min.messages` are queued, and the figure is the client's throttle. The last columns
give the broker's CPU seconds per GB served (log bytes read); the raw fetch row adds its client's CPU and
the ratio of the two together to each bare server's and its reader's (measure.py Rule 3: the kernel bills
loopback TCP work to either end, so only the pair's total is comparable). The request/response pair does
what the raw fetch pair does for the same bytes and the same request pattern with no work per request or
reply: the ratio is >= 1 but for noise, and what is over 1 is the broker's own work per byte served
(decoding, the lookup, the reply's header) and the raw client's header walk.
A row that read fewer messages than asked, or a produce with failed or unacknowledged sends, is SHORT or
FAILED: the script says so at the end and exits 1 (measure.py Rule 4). With `--results FILE` it appends JSON rows in the
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
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from measure import (GB, confluent_consume, confluent_produce, cpu_seconds, create_single_partition_topic, kcat_consume, load,  # noqa: E402
                     below_floor, kcat_produce, payload, pinned, raw_fetch, request_loop, run, sendfile_loop, shortfall)

TOPIC = "paper"
PAPER_FETCH_BYTES = 200 * 1024  # the paper's consumer fetched about 200 KB at a time
DEFAULT_FETCH_BYTES = 1024 * 1024  # librdkafka's max.partition.fetch.bytes default
# librdkafka consumer settings (CONFIGURATION.md): no fetch backoff once the queue is full enough (default
# 1000 ms), fetch.min.bytes 1 (its default: answer as soon as anything is there), fetch.max.bytes its
# default 50 MiB, the local queue at its default 64 MiB (queued.max.messages.kbytes) and 100,000 messages
# (queued.min.messages): it keeps fetching until those fill.
CONSUMER_SETTINGS = {"fetch.queue.backoff.ms": 0, "fetch.min.bytes": 1, "fetch.max.bytes": 52_428_800,
                     "queued.max.messages.kbytes": 65_536, "queued.min.messages": 100_000,
                     "fetch.wait.max.ms": 100}
# kcat's librdkafka (2.0 here) predates fetch.queue.backoff.ms, and the throttle with it
KCAT_SETTINGS = {k: v for k, v in CONSUMER_SETTINGS.items() if k != "fetch.queue.backoff.ms"}
DEADLINE_S = 600.0  # any one loop
PRECISION_BYTES = 2 * 10**9  # what the raw fetch and sendfile loops serve, whatever the log's size
RAW_ROUNDS = 3  # the raw fetch loop and both bare servers run this many times, in turn; the median of each counts


def disk_bytes(path: Path) -> tuple[int, int]:
    alloc = int(subprocess.check_output(["du", "-s", "-B1", str(path)]).split()[0])
    apparent = int(subprocess.check_output(["du", "-s", "-b", str(path)]).split()[0])
    return alloc, apparent


def produce(bootstrap: str, n: int, value: bytes, batch: int, cap_s: float | None, idempotence: bool = False,
            compression: str = "none"):
    """confluent-kafka's producer; idempotent, it has acks=all (librdkafka requires it) and at most five
    requests in flight, as librdkafka sets them for enable.idempotence."""
    return confluent_produce({
        "bootstrap.servers": bootstrap, "acks": "all" if idempotence else "1", "batch.num.messages": batch,
        "linger.ms": 5 if batch > 1 else 0, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000, "enable.idempotence": idempotence, "compression.type": compression,
    }, TOPIC, n, value, cap_s=cap_s, deadline_s=DEADLINE_S)


def read_back(broker, log_dir: Path, n: int, args, rows: list) -> None:
    """Every reader of the module docstring, each over the same `n` acknowledged messages."""
    segments = sorted((log_dir / f"{TOPIC}-0").glob("*.log"))
    log_bytes = sum(p.stat().st_size for p in segments)
    passes = max(1, round(PRECISION_BYTES / log_bytes))
    host, port = broker.address.rsplit(":", 1)
    readers = [
        ("consume", "200K", lambda: (confluent_consume(
            {"bootstrap.servers": broker.address, "max.partition.fetch.bytes": PAPER_FETCH_BYTES,
             **CONSUMER_SETTINGS}, TOPIC, n, deadline_s=DEADLINE_S), None)),
        ("consume", "1M", lambda: (confluent_consume(
            {"bootstrap.servers": broker.address, "max.partition.fetch.bytes": DEFAULT_FETCH_BYTES,
             **CONSUMER_SETTINGS}, TOPIC, n, deadline_s=DEADLINE_S), None)),
        ("kcat", "1M", lambda: (kcat_consume(broker.address, TOPIC, n, {
            "max.partition.fetch.bytes": DEFAULT_FETCH_BYTES, **KCAT_SETTINGS}, DEADLINE_S), None)),
    ]

    def emit(test: str, fetch: str, done, received: int | None, cpu: tuple[float, float], want: int,
             extra: str = "") -> None:
        served = received if received is not None else log_bytes * done.got / n  # log's share read, passes included
        per_gb = cpu[0] / (served / GB) if served else float("nan")
        note = f"{per_gb:.3f} broker CPU-s/GB" + extra + ("" if done.got == want and not done.errors else shortfall(
            f"; SHORT: {test} {fetch} read {done.got:,} of {want:,}, {done.errors} errors"))
        rows.append(row(test, fetch, args, done.got, done.seconds, cpu, None, mode=f"{fetch} fetches", note=note))
        print(format_row(rows[-1]), flush=True)

    for test, fetch, read in readers:
        cpu0, own0 = cpu_seconds(broker.pid), own_cpu()
        done, received = read()
        emit(test, fetch, done, received, (cpu_seconds(broker.pid) - cpu0, own_cpu() - own0), n)
    raws, streams, bares = [], [], []
    for _ in range(RAW_ROUNDS):  # the raw fetch loop and the two bare servers in turn: load falls on all alike
        with pinned(broker.pid):  # placed as the bare servers are (measure.py Rule 3)
            cpu0, own0 = cpu_seconds(broker.pid), own_cpu()
            done, received = raw_fetch(host, int(port), TOPIC, n, DEFAULT_FETCH_BYTES, DEADLINE_S, passes)
            raws.append(((cpu_seconds(broker.pid) - cpu0, own_cpu() - own0), done, received))
        streams.append(sendfile_loop(segments, DEFAULT_FETCH_BYTES, DEADLINE_S, passes))
        bares.append(request_loop(segments, DEFAULT_FETCH_BYTES, DEADLINE_S, passes))
    # measure.py Rule 3: server and reader together, for the broker (and its raw client) as for the bare servers
    stream, bare = _median(streams, lambda s: s.pair / s.received), _median(bares, lambda s: s.pair / s.received)
    (cpu, done, received) = _median(raws, lambda r: sum(r[0]) / r[2] if r[2] else float("inf"))
    pair = sum(cpu) / (received / GB) if received else float("nan")
    bare_pair = bare.pair / (bare.received / GB)
    emit("raw fetch", "1M", done, received, cpu, n * passes,
         f", {pair:.3f} with its client = {pair / bare_pair:.2f}x the bare request/response pair's, "
         f"{pair / (stream.pair / (stream.received / GB)):.2f}x the sendfile stream pair's"
         + below_floor(pair / bare_pair, "raw fetch"))
    for name, base, what in (("sendfile  1M", stream, "1 MiB a sendfile, streamed"),
                             ("request   1M", bare, "a 72-byte head and one 1 MiB sendfile per 64-byte request")):
        short = "" if base.received == passes * log_bytes else shortfall(
            f"; SHORT: {name} received {base.received:,} of {passes * log_bytes:,} bytes")
        print(f"{name}: {n * passes * base.received / (passes * log_bytes) / base.wall:>12,.0f} msg/s "
              f"{base.received / base.wall / 1e6:>8.2f} MB/s of log ({base.received / 1e6:.1f} MB in {base.wall:.2f} s, "
              f"{passes} passes, {what}; {base.cpu / (base.received / GB):.3f} server-process CPU-s/GB, "
              f"{base.pair / (base.received / GB):.3f} with its reader){short}", flush=True)
    print(f"ratio (measure.py Rule 3; medians of {RAW_ROUNDS} runs in turn): the broker's CPU and its raw client's "
          "per GB served over a bare server's and its reader's (the kernel bills loopback TCP work to either end); "
          "the request/response pair does what the raw fetch pair does with no work per request or reply, so "
          ">= 1 but for noise: the excess is the broker's own work and the client's header walk", flush=True)


def _median(samples: list, key):
    """The sample whose `key` is the median of `samples` (the lower middle of an even count)."""
    return sorted(samples, key=key)[(len(samples) - 1) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=int(os.environ.get("BENCH_N", 1_000_000)))
    parser.add_argument("--size", type=int, default=int(os.environ.get("BENCH_MSG_SIZE", 200)))
    parser.add_argument("--cap", type=float, default=float(os.environ.get("BENCH_CAP_S", 0)) or None,
                        help="stop each produce test after this many seconds (default: no cap)")
    parser.add_argument("--batches", default="1,50")
    parser.add_argument("--kcat-batch", type=int, default=50, help="batch size of the kcat -P row (0: none)")
    parser.add_argument("--results", default=os.environ.get("BENCH_RESULTS"))
    parser.add_argument("--override", action="append", default=[], help="broker property key=value")
    parser.add_argument("--idempotence", action="store_true",
                        help="confluent-kafka with enable.idempotence=true (so acks=all; with one replica the "
                             "acknowledgement waits for the flush unless log.flush.visibility=appended)")
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                        help="confluent-kafka's compression.type for the produce rows")
    parser.add_argument("--no-read-back", action="store_true", help="produce rows only (no consume, kcat rows)")
    args = parser.parse_args()

    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from support.cluster import BrokerProcess

    work = Path(tempfile.mkdtemp(prefix="sparklog-paper-"))
    zk = EmbeddedZooKeeper()
    zk.start()
    rows = []
    print(f"load average {load()}", flush=True)
    try:
        value = payload(args.size)
        for batch in [int(b) for b in args.batches.split(",")]:
            log_dir = work / f"batch-{batch}" / "logs"
            overrides = dict(o.split("=", 1) for o in args.override)
            broker = BrokerProcess(1, f"{zk.connect_string}/paper-{batch}", log_dir, overrides=overrides)
            broker.start()
            try:
                create_single_partition_topic(broker.zk_connect, TOPIC)
                before = disk_bytes(log_dir)
                cpu0, own0 = cpu_seconds(broker.pid), own_cpu()
                done = produce(broker.address, args.messages, value, batch, args.cap, args.idempotence,
                               args.compression)
                cpu = (cpu_seconds(broker.pid) - cpu0, own_cpu() - own0)
                time.sleep(1.0)  # let the periodic flush land
                after = disk_bytes(log_dir)
                acked = max(done.acked, 1)
                overhead = ((after[0] - before[0]) / acked - args.size, (after[1] - before[1]) / acked - args.size)
                mode = ("acks=all, idempotent" if args.idempotence else "acks=1") + (
                    "" if args.compression == "none" else f", {args.compression}")
                rows.append(row("produce", batch, args, done.acked, done.seconds, cpu, overhead, mode=mode,
                                note=done.note()))
                print(format_row(rows[-1]), flush=True)
                if batch == max(int(b) for b in args.batches.split(",")) and not args.no_read_back:
                    read_back(broker, log_dir, done.acked, args, rows)
            finally:
                broker.stop()
        if args.kcat_batch and not args.no_read_back:
            rows.append(kcat_row(zk, work, value, args))
            print(format_row(rows[-1]), flush=True)
    finally:
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average {load()}")
    for r in rows:
        if args.results:
            with open(args.results, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


def kcat_row(zk, work: Path, value: bytes, args) -> dict:
    """The kcat -P produce row (module docstring), against a broker of its own."""
    from support.cluster import BrokerProcess

    batch = args.kcat_batch
    overrides = dict(o.split("=", 1) for o in args.override)
    broker = BrokerProcess(1, f"{zk.connect_string}/paper-kcat-{batch}", work / f"kcat-{batch}" / "logs",
                           overrides=overrides)
    broker.start()
    try:
        create_single_partition_topic(broker.zk_connect, TOPIC)
        cpu0, own0 = cpu_seconds(broker.pid), own_cpu()
        done = kcat_produce(broker.address, TOPIC, args.messages, value, {
            "acks": 1, "batch.num.messages": batch, "linger.ms": 5, "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000, "enable.idempotence": "false", "compression.codec": "none",
        }, str(work), DEADLINE_S)
        cpu = (cpu_seconds(broker.pid) - cpu0, own_cpu() - own0)
    finally:
        broker.stop()
    out = row("produce", batch, args, done.acked, done.seconds, cpu, None, mode="acks=1, kcat -P", note=done.note())
    out["client"] = "kcat (librdkafka 2.0)"
    return out


def own_cpu() -> float:
    """CPU seconds of this process and of its finished children (kcat)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def row(test, batch, args, done, elapsed, cpu, overhead, mode="", note="") -> dict:
    """One row in the peers' format (../shared/peers/bench_common.py record())."""
    import confluent_kafka

    from sparklog import __version__ as version

    rate = done / elapsed if elapsed else 0.0
    elapsed = elapsed or float("inf")
    broker_cpu, client_cpu = cpu
    out = {
        "date": datetime.date.today().isoformat(), "system": "sparklog", "version": version,
        "client": "confluent-kafka " + confluent_kafka.version()[0], "test": test, "mode": mode, "batch": batch,
        "msg_size": args.size, "n_target": args.messages, "n_done": done, "capped": done < args.messages,
        "seconds": round(elapsed, 3), "msg_per_s": round(rate, 1), "mb_per_s": round(rate * args.size / 1e6, 2),
        "notes": "broker: one sparklog broker subprocess, 1 partition, default flush policy",
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "client_cpu_pct": round(100 * client_cpu / elapsed), "server_cpu_pct": round(100 * broker_cpu / elapsed),
        "server_us_per_msg": round(1e6 * broker_cpu / done, 2) if done else None,
        "note": note,
    }
    if overhead is not None:
        out["overhead_b_per_msg"] = round(overhead[0], 1)
        out["overhead_apparent_b_per_msg"] = round(overhead[1], 1)
    return out


def format_row(r: dict) -> str:
    test = r["test"] + (" kcat" if r["client"].startswith("kcat") and r["test"] == "produce" else "")
    text = (f"{test:9s} {r['batch']:>4}: {r['msg_per_s']:>12,.0f} msg/s {r['mb_per_s']:>8.2f} MB/s "
            f"({r['n_done']:,} msgs in {r['seconds']:.2f} s; CPU client {r['client_cpu_pct']}% broker "
            f"{r['server_cpu_pct']}% = {r['server_us_per_msg']} us/msg; load {r['loadavg_1m']})")
    if "overhead_b_per_msg" in r:
        text += f"  overhead {r['overhead_b_per_msg']} B/msg on disk (apparent {r['overhead_apparent_b_per_msg']})"
    return text + (f"  {r['note']}" if r["note"] else "")


if __name__ == "__main__":
    sys.exit(run(main))
