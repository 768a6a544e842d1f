"""The metrics endpoint's cost (issue 27): a broker's produce throughput with and without its endpoint being
scraped every second, and the time of one scrape of a broker hosting thousands of partitions and groups.

    .venv/bin/python benchmarks/metrics.py [--messages 1000000] [--size 100] [--rounds 5]
                                           [--partitions 5000] [--groups 1000] [--scrapes 5]

One embedded ZooKeeper and one broker with `metrics.listener` set, in both parts.

Part 1 (throughput): after a warm-up round, rounds alternating which goes first, each producing `--messages` messages of `--size`
bytes with confluent-kafka (acks=1, linger.ms=5) to a fresh single-partition topic, once while nothing scrapes
and once while a process of its own scrapes /metrics every second (each scrape read whole). Only
acknowledged messages count, timed to the last delivery report (measure.py Rule 1); a round with a failed or
unacknowledged send is FAILED and the script exits 1 (Rule 4). It prints each round, the medians and the
ratio scraped / not scraped (goal >= 0.98), and beside it the broker's CPU per message (user + system, from
/proc), which on a shared machine is steadier than the wall clock; then the idle broker's CPU over 15 s
without and with the scraper: the broker CPU one scrape costs. The request paths' own counters (broker/meters.py) run in both
arms: what is compared is the endpoint's work.

Part 2 (scrape time): `--partitions` partitions (topics of at most 1000 partitions, one replica), one record
produced to each partition, `--groups` groups with an offset committed on 5 partitions each (AdminClient
alter_consumer_group_offsets), then `--scrapes` scrapes timed from the GET to the last byte (goal: the
slowest under 1 s), with the broker's CPU over each scrape (the broker idle otherwise: its own timers
included), a figure the machine's load disturbs less than the wall clock. A scrape that does not answer, or
that lacks the lag of a committed group, is SHORT.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import multiprocessing
import time
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import confluent_produce, cpu_seconds, load, payload, run, shortfall  # noqa: E402

ENDPOINT = re.compile(r"metrics endpoint on (http://[^/\s]+/metrics)")
SCRAPE_EVERY_S = 1.0
SCRAPE_TIMEOUT_S = 30.0
TOPIC_PARTITIONS = 1000  # per topic in part 2 (max.partitions.per.topic is raised to it)
GROUP_PARTITIONS = 5  # partitions each group commits in part 2
PRODUCER = {"acks": "1", "linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000}


@contextmanager
def broker(max_partitions: int):
    """ZooKeeper and one broker with the endpoint on: yields (cluster, zk_connect, metrics url)."""
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from support.cluster import Cluster

    work = Path(tempfile.mkdtemp(prefix="sparklog-bench-metrics-"))
    zookeeper = EmbeddedZooKeeper()
    zookeeper.start()
    try:
        zk_connect = f"{zookeeper.connect_string}/bench"
        overrides = {"metrics.listener": "http://127.0.0.1:0", "max.broker.partitions": str(max_partitions + 100),
                     "max.partitions.per.topic": str(TOPIC_PARTITIONS), "auto.create.topics.enable": "false"}
        with Cluster(zk_connect, work / "brokers", brokers=1, overrides=overrides) as cluster:
            url = ENDPOINT.findall(cluster.brokers[1].out_path.read_text(errors="replace"))[-1]
            yield cluster, zk_connect, url
    finally:
        zookeeper.stop()
        shutil.rmtree(work, ignore_errors=True)


def create_topics(zk_connect: str, partitions_each: list[int]) -> list[str]:
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    names = [f"bench-{uuid.uuid4().hex[:8]}" for _ in partitions_each]
    client = connect(zk_connect)
    try:
        for name, count in zip(names, partitions_each):
            topics.create_topic(client, name, count, 1)
    finally:
        close(client)
    return names


def scrape(url: str) -> tuple[float, str]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as reply:
        text = reply.read().decode()
    return time.perf_counter() - started, text


def _scrape_every_second(url: str, done, scrapes, errors) -> None:
    while not done.wait(SCRAPE_EVERY_S):
        try:
            scrape(url)
            scrapes.value += 1
        except OSError:
            errors.value += 1


class Scraper:
    """A process of its own (so it takes no time from the producing client's interpreter) scraping `url`
    every second until stopped; counts the scrapes and the failures."""

    def __init__(self, url: str) -> None:
        context = multiprocessing.get_context("fork")
        self.done, self._scrapes, self._errors = context.Event(), context.Value("i", 0), context.Value("i", 0)
        self._process = context.Process(target=_scrape_every_second, name="scraper", daemon=True,
                                        args=(url, self.done, self._scrapes, self._errors))

    def start(self) -> None:
        self._process.start()

    def join(self) -> None:
        self._process.join(SCRAPE_TIMEOUT_S + 5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    @property
    def scrapes(self) -> int:
        return self._scrapes.value

    @property
    def errors(self) -> int:
        return self._errors.value


def produce_round(cluster, zk_connect: str, url: str, args, scraped: bool) -> tuple[float, float] | None:
    """(acknowledged messages a second, broker CPU microseconds a message) of one round, None if FAILED."""
    (topic,) = create_topics(zk_connect, [1])
    time.sleep(1.0)  # the broker opens the log
    scraper = Scraper(url) if scraped else None
    pid = cluster.brokers[1].pid
    cpu_before = cpu_seconds(pid)
    if scraper:
        scraper.start()
    try:
        result = confluent_produce({"bootstrap.servers": cluster.bootstrap, **PRODUCER}, topic, args.messages,
                                   payload(args.size), partition=0)
    finally:
        if scraper:
            scraper.done.set()
            scraper.join()
    cpu_us = (cpu_seconds(pid) - cpu_before) * 1e6 / max(1, result.acked)
    rate = result.acked / result.seconds if result.seconds else 0.0
    extra = f", broker CPU {cpu_us:.2f} us/msg" + (f", {scraper.scrapes} scrapes" if scraper else "")
    note = result.note()
    if scraper and (scraper.errors or not scraper.scrapes):
        note += shortfall(f"; SHORT: {scraper.scrapes} scrapes answered, {scraper.errors} failed")
    print(f"  {'scraped' if scraped else 'not scraped':12s} {result.acked:>8d} acked in {result.seconds:6.2f} s: "
          f"{rate:>10,.0f} msg/s{extra}{note}", flush=True)
    return None if note else (rate, cpu_us)


def throughput(args) -> None:
    print(f"Part 1: produce throughput, {args.messages} x {args.size} B, acks=1, {args.rounds} rounds "
          f"(load {load()})", flush=True)
    rates: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with broker(100) as (cluster, zk_connect, url):
        print("  warm-up (not counted):", flush=True)
        produce_round(cluster, zk_connect, url, args, False)
        for i in range(args.rounds):
            for scraped in ((False, True) if i % 2 == 0 else (True, False)):
                rate = produce_round(cluster, zk_connect, url, args, scraped)
                if rate is not None:
                    rates[scraped].append(rate)
        idle_cost(cluster, url)
    if rates[False] and rates[True]:
        plain, scraped = (statistics.median(r for r, _ in rates[k]) for k in (False, True))
        plain_cpu, scraped_cpu = (statistics.median(c for _, c in rates[k]) for k in (False, True))
        print(f"  medians: not scraped {plain:,.0f} msg/s, scraped every {SCRAPE_EVERY_S:.0f} s {scraped:,.0f} msg/s: "
              f"ratio {scraped / plain:.3f} (goal >= 0.98); broker CPU {plain_cpu:.2f} vs {scraped_cpu:.2f} us/msg: "
              f"ratio {plain_cpu / scraped_cpu:.3f} (load {load()})", flush=True)


def idle_cost(cluster, url: str, seconds: float = 15.0) -> None:
    """The broker's CPU over `seconds` idle, without then with the scraper: what one scrape costs it."""
    pid = cluster.brokers[1].pid
    before = cpu_seconds(pid)
    time.sleep(seconds)
    quiet = cpu_seconds(pid) - before
    scraper = Scraper(url)
    before = cpu_seconds(pid)
    scraper.start()
    time.sleep(seconds)
    scraper.done.set()
    scraper.join()
    scraped = cpu_seconds(pid) - before
    if not scraper.scrapes or scraper.errors:
        shortfall(f"SHORT: idle: {scraper.scrapes} scrapes answered, {scraper.errors} failed")
        return
    print(f"  idle broker, {seconds:.0f} s: CPU {quiet * 1000:.0f} ms not scraped, {scraped * 1000:.0f} ms with "
          f"{scraper.scrapes} scrapes: {(scraped - quiet) * 1000 / scraper.scrapes:.1f} ms of broker CPU a scrape "
          f"(load {load()})", flush=True)


def commit_groups(bootstrap: str, topics: list[str], groups: int) -> list[str]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"bench-group-{i}" for i in range(groups)]
    for i, name in enumerate(names):
        topic = topics[i % len(topics)]
        tps = [TopicPartition(topic, (i * GROUP_PARTITIONS + p) % TOPIC_PARTITIONS, 0) for p in range(GROUP_PARTITIONS)]
        for future in admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(name, tps)]).values():
            future.result(timeout=60)
    return names


def produce_everywhere(bootstrap: str, topics: list[str], partitions_each: list[int]) -> None:
    """One record to every partition, so that every log has a segment with a batch and a high watermark."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "1"})
    failed = []
    for topic, count in zip(topics, partitions_each):
        for partition in range(count):
            producer.produce(topic, b"x", partition=partition,
                             on_delivery=lambda err, _m: failed.append(err) if err else None)
    remaining = producer.flush(120)
    if remaining or failed:
        shortfall(f"FAILED: {len(failed)} failed, {remaining} unacknowledged of the one-record-per-partition writes")


def scrape_time(args) -> None:
    partitions_each = [TOPIC_PARTITIONS] * (args.partitions // TOPIC_PARTITIONS)
    if args.partitions % TOPIC_PARTITIONS:
        partitions_each.append(args.partitions % TOPIC_PARTITIONS)
    print(f"Part 2: scrape time, {args.partitions} partitions in {len(partitions_each)} topics, {args.groups} groups "
          f"(load {load()})", flush=True)
    with broker(args.partitions) as (cluster, zk_connect, url):
        started = time.perf_counter()
        topics = create_topics(zk_connect, partitions_each)
        wait_open(url, args.partitions)
        produce_everywhere(cluster.bootstrap, topics, partitions_each)
        groups = commit_groups(cluster.bootstrap, topics, args.groups)
        print(f"  set up in {time.perf_counter() - started:.0f} s", flush=True)
        times, cpus = [], []
        pid = cluster.brokers[1].pid
        for _ in range(args.scrapes):
            time.sleep(1.0)
            cpu_before = cpu_seconds(pid)
            seconds, text = scrape(url)
            cpus.append(cpu_seconds(pid) - cpu_before)
            times.append(seconds)
            lags = text.count("sparklog_consumer_group_lag{")
            logs = text.count("sparklog_log_size_bytes{")
            print(f"  scrape {seconds * 1000:7.1f} ms (broker CPU {cpus[-1] * 1000:6.1f} ms), {len(text) / 1e6:.2f} MB, {logs} partitions, {lags} lag series",
                  flush=True)
            if logs < args.partitions or lags < len(groups) * GROUP_PARTITIONS:
                shortfall(f"SHORT: a scrape had {logs} partitions of {args.partitions}, {lags} lag series of "
                          f"{len(groups) * GROUP_PARTITIONS}")
        print(f"  median {statistics.median(times) * 1000:.0f} ms, slowest {max(times) * 1000:.0f} ms (goal < 1000 ms); "
              f"broker CPU a scrape: median {statistics.median(cpus) * 1000:.0f} ms (load {load()})", flush=True)


def wait_open(url: str, partitions: int, timeout_s: float = 600.0) -> None:
    """Until the broker has opened every partition's log (its scrape lists them)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if scrape(url)[1].count("sparklog_log_size_bytes{") >= partitions:
            return
        time.sleep(1.0)
    shortfall(f"SHORT: the broker did not open {partitions} partitions in {timeout_s:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-scrape", action="store_true")
    args = parser.parse_args()
    if not args.skip_throughput:
        throughput(args)
    if not args.skip_scrape:
        scrape_time(args)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
