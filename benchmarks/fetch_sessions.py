"""Fetch sessions (KIP-227) against sessionless fetches, in one run: broker CPU per Fetch and bytes per request.

    python benchmarks/fetch_sessions.py [--partitions 2000] [--fetches 300] [--rounds 3] [--window-s 20]

Everything runs on this machine (an embedded ZooKeeper, `sparklog broker` processes).

Consumer (one broker, one topic of `--partitions` partitions, mostly idle): each round first writes ACTIVE
partitions' worth of records (sparklog's producer, acks=all, counted by measure.py Rule 1) into ACTIVE of the
partitions, then a fetch loop in this process (sparklog's codec and protocol/fetch_session_handler.py, one
connection, max_wait_ms 0 so that each Fetch is answered at once) sends `--fetches` Fetch v11 requests of every
partition, reading from where it is: the first answers carry the new records, the rest nothing. "without" is
sessionless (session_epoch -1: every request names every partition, every answer every partition); "with"
keeps a session (after one full request, a request names only the partitions whose offset moved and an answer
only the partitions with something new). Rounds alternate without/with on the same broker. Per row: broker CPU
per Fetch (the broker process's user+system from /proc over the loop), request and response bytes per Fetch.
The row is SHORT (measure.py Rule 4) unless every record written in the round is read, exactly once, with no
error in any answer.

Replica fetchers (three brokers, one topic of `--partitions` partitions at replication factor 3, idle): each
broker follows the other two, in sessions (max.incremental.fetch.session.cache.slots 1000, the default) or not
(slots 0: the leader makes no session, every follower Fetch names and is answered every partition). The two
clusters run one after the other. Per row over a `--window-s` window after the ISR is whole: the brokers' CPU
and the requests and request bytes they received (their statistics; in an idle cluster these are the
followers' Fetches), summed over the three. SHORT unless every partition has its 3 replicas in sync at the end.

The ratio column is with/without (issue 28's goal: <= 0.3x CPU per Fetch on the idle-heavy consumer case).
The load average is printed with every row: the machine may be shared.
"""

from __future__ import annotations

import argparse
import socket
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

from measure import (SIZE, _count_records, _recv_exactly, cpu_seconds, load, one_broker_cluster,  # noqa: E402
                     run as run_benchmark, shortfall, sparklog_produce)

ACTIVE = 20  # partitions written per round: 1% of 2,000
RECORDS_PER_ROUND = 2000
VALUE = b"x" * 100
FETCH_VERSION = 11
PARTITION_MAX_BYTES = 1 << 20
DEADLINE_S = 600.0
CLUSTER_START_S = 900.0  # a cluster's brokers opening 2,000 logs each, on a loaded machine


def _fetch_round(host: str, port: int, topic: str, offsets: list[int], sessions: bool, fetches: int,
                 broker_pid: int, deadline: float) -> tuple[dict, int, list[str]]:
    """`fetches` Fetches of every partition from `offsets` (moved on as records arrive): (figures, records
    read, problems)."""
    from sparklog.protocol.api_keys import ApiKey
    from sparklog.protocol.fetch import FetchPartition, FetchRequest
    from sparklog.protocol.fetch_session_handler import FetchSessionHandler
    from sparklog.protocol.registry import decode_response, encode_request

    handler = FetchSessionHandler(enabled=sessions)
    wanted = {(topic, p): FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=PARTITION_MAX_BYTES)
              for p, o in enumerate(offsets)}
    sent = received = read = done = 0
    problems: list[str] = []
    with socket.create_connection((host, port), timeout=30) as sock:
        cpu = cpu_seconds(broker_pid)
        for done in range(1, fetches + 1):
            if time.monotonic() > deadline:
                problems.append(f"deadline after {done - 1} fetches")
                break
            session_id, epoch, topics, forgotten = handler.build(wanted)
            frame = encode_request(ApiKey.FETCH, FETCH_VERSION, done, "bench-fetch-sessions", FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                session_id=session_id, session_epoch=epoch, topics=topics, forgotten_topics_data=forgotten))
            sock.sendall(frame)
            (size,) = SIZE.unpack(_recv_exactly(sock, 4))
            body = memoryview(_recv_exactly(sock, size))
            sent, received = sent + len(frame), received + size + 4
            _, response = decode_response(ApiKey.FETCH, FETCH_VERSION, body)
            if not handler.handle(response):
                problems.append(f"session error {response.error_code}")
            read += _take(response, wanted, offsets, problems)
        cpu = cpu_seconds(broker_pid) - cpu
    figures = {"fetches": done, "cpu_ms": 1000 * cpu / max(done, 1), "request_b": sent / max(done, 1),
               "response_b": received / max(done, 1)}
    return figures, read, problems


def _take(response, wanted: dict, offsets: list[int], problems: list[str]) -> int:
    """Count the answer's records and move the partitions' offsets past them."""
    from sparklog.protocol.fetch import FetchPartition

    read = 0
    for topic in response.responses:
        for part in topic.partitions:
            if part.error_code:
                problems.append(f"partition {part.partition_index}: error {part.error_code}")
                continue
            if part.records is None or not len(part.records):
                continue
            index = part.partition_index
            count, offsets[index] = _count_records(memoryview(part.records), offsets[index])
            read += count
            wanted[(topic.topic, index)] = FetchPartition(partition=index, fetch_offset=offsets[index],
                                                          partition_max_bytes=PARTITION_MAX_BYTES)
    return read


def consumer_case(partitions: int, fetches: int, rounds: int) -> None:
    from sparklog.client import Producer

    topic = "idle"
    print(f"consumer of {partitions} partitions ({ACTIVE} written per round, {RECORDS_PER_ROUND} records), "
          f"{fetches} Fetch v{FETCH_VERSION} per row, max_wait_ms 0")
    results: dict[bool, list[dict]] = {False: [], True: []}
    with one_broker_cluster([topic], partitions, chroot="fetchsess") as (cluster, _):
        broker = cluster.brokers[1]
        offsets = [0] * partitions
        with Producer(cluster.bootstrap, acks="all") as producer:
            for round_no in range(rounds):
                for sessions in (False, True):
                    produced = sparklog_produce(producer, topic, RECORDS_PER_ROUND, VALUE, partitions=ACTIVE)
                    figures, read, problems = _fetch_round(broker.host, broker.port, topic, offsets, sessions,
                                                           fetches, broker.pid, time.monotonic() + DEADLINE_S)
                    note = produced.note()
                    if read != produced.acked or problems:
                        note += shortfall(f"; SHORT: read {read} of {produced.acked} acknowledged; "
                                          f"{problems[:3]}")
                    results[sessions].append(figures)
                    _row(f"round {round_no + 1} {'with' if sessions else 'without'} sessions", figures, note)
    _ratio("consumer", results)


def replication_case(partitions: int, window_s: float) -> None:
    print(f"replica fetchers: 3 brokers, {partitions} partitions at RF 3, idle, {window_s:.0f} s window")
    results = {}
    for sessions in (False, True):
        slots = 1000 if sessions else 0
        figures, note = _replication_window(partitions, window_s, slots)
        results[sessions] = [figures]
        _row(f"{'with' if sessions else 'without'} sessions (slots {slots})", figures, note)
    _ratio("replica fetchers", results)


def _replication_window(partitions: int, window_s: float, slots: int) -> tuple[dict, str]:
    from sparklog.coordination import topics as topic_admin
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from support.cluster import Cluster, wait_until_every_broker_knows_all

    work = Path(tempfile.mkdtemp(prefix="sparklog-bench-"))
    zookeeper = EmbeddedZooKeeper()
    zookeeper.start()
    try:
        zk_connect = f"{zookeeper.connect_string}/fetchsess-{uuid.uuid4().hex[:6]}"
        overrides = {"max.incremental.fetch.session.cache.slots": str(slots), "auto.create.topics.enable": "false"}
        with Cluster(zk_connect, work / "brokers", brokers=3, overrides=overrides) as cluster:
            wait_until_every_broker_knows_all(cluster)
            client = connect(zk_connect)
            try:
                topic_admin.create_topic(client, "replicated", partitions, 3, live_broker_ids=[1, 2, 3])
            finally:
                close(client)
            if not _wait_in_sync(cluster, partitions, time.monotonic() + CLUSTER_START_S):
                return {"fetches": 0, "cpu_ms": 0.0, "request_b": 0.0, "response_b": 0.0}, shortfall(
                    "; SHORT: the ISR never became whole")
            time.sleep(5)  # the fetchers settle into their steady state
            before = _broker_counters(cluster)
            time.sleep(window_s)
            after = _broker_counters(cluster)
            in_sync = _wait_in_sync(cluster, partitions, time.monotonic() + 60)
    finally:
        zookeeper.stop()
    requests = after[1] - before[1]
    figures = {"fetches": requests, "cpu_ms": 1000 * (after[0] - before[0]) / max(requests, 1),
               "request_b": (after[2] - before[2]) / max(requests, 1), "response_b": float("nan")}
    return figures, "" if in_sync else shortfall("; SHORT: the ISR was not whole after the window")


def _broker_counters(cluster) -> tuple[float, int, int]:
    """(CPU seconds, requests, request bytes received), summed over the brokers."""
    cpu = requests = received = 0
    for broker in cluster.brokers.values():
        stats = broker.statistics()["server"]
        cpu += cpu_seconds(broker.pid)
        requests += stats["requests"]
        received += stats["bytes_received"]
    return cpu, requests, received


def _wait_in_sync(cluster, partitions: int, deadline: float) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    while time.monotonic() < deadline:
        try:
            parts = admin.list_topics("replicated", timeout=30).topics["replicated"].partitions.values()
        except Exception:  # noqa: BLE001 - a loaded cluster may not answer in time: ask again
            parts = []
        if len(parts) == partitions and all(len(p.isrs) == 3 for p in parts):
            return True
        time.sleep(2)
    return False


def _row(name: str, figures: dict, note: str) -> None:
    print(f"  {name:<34} fetches {figures['fetches']:>6}  broker CPU {figures['cpu_ms']:8.3f} ms/fetch  "
          f"request {figures['request_b']:9.0f} B  response {figures['response_b']:9.0f} B  "
          f"load {load()}{note}", flush=True)


def _ratio(case: str, results: dict) -> None:
    if not results[False] or not results[True]:
        return
    cpu = {s: statistics.median(r["cpu_ms"] for r in rows) for s, rows in results.items()}
    request = {s: statistics.median(r["request_b"] for r in rows) for s, rows in results.items()}
    print(f"  {case}: with/without sessions: CPU per fetch {cpu[True] / max(cpu[False], 1e-9):.2f}x, "
          f"request bytes {request[True] / max(request[False], 1e-9):.3f}x (medians; load {load()})", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--fetches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--skip-replication", action="store_true")
    args = parser.parse_args()
    consumer_case(args.partitions, args.fetches, args.rounds)
    if not args.skip_replication:
        replication_case(args.partitions, args.window_s)
    return 0


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
