"""The broker's cost per request: CPU microseconds of the broker process per Produce and Fetch, beside a
baseline measured in the same run, on each event loop.

    .venv/bin/python benchmarks/broker_requests.py [-n 20000] [--window 32] [--loops asyncio,uvloop]

The broker side is the real `BrokerServer` + `Dispatcher` + handlers + storage (one partition, records
visible at append, no ZooKeeper: a hand-made metadata snapshot as in the unit tests), in a subprocess; the
client (this process) keeps `--window` requests in flight on one connection, as librdkafka does, and reads
every reply. The broker's CPU time comes from /proc (user + system), so what the client costs, and most of
what other processes on a shared machine cost, is not counted.

Rows, per event loop:
    baseline      the same server with an App that answers each frame with a fixed 30-byte reply: the cost of
                  framing, the event loop and the socket alone
    produce b1    Produce v8 acks=1, one partition, a batch of 1 record of 200 bytes
    produce b50   the same with a batch of 50 records (10 KB)
    produce b1 all / b50 all   the same two with acks=all (-1): the partition has one replica and its records
                  are visible at append, so the write is answered at once, as on the fast path of a replicated
                  partition whose followers keep up; what is measured is the acks=all path's own cost
    fetch 64K     Fetch v11, one partition, up to 64 KB of records (sent with os.sendfile)
Each prints µs of broker CPU per request and its ratio to the baseline of the same loop; with more than one
loop, the last column is the ratio to the first loop's row (below 1: the other loop is cheaper). The load
average is printed too. Then, where the time goes: the same requests' stages timed in this process (best
of 5, µs): decode_request, the handler (for Produce: with the append to the log), encode_response, and the
whole of `Dispatcher.handle_frame` (which takes the one-partition Produce fast path where the three others
are the general path's stages).
With --quota-cost, Produce b1, b50 and Fetch 64K run with no quota configured, with a quota on another client
(the dispatcher metering, this client unquoted) and with a quota on this client that it never reaches (metered
per request), --rounds rounds in rotating order: the median µs of each and their ratio to no quota.
With --records-check-cost, only Produce b1 and b50 run, each with the broker's check of a client's records
(records/verify.py, called by PartitionLog's client appends) switched off and on, alternating for --rounds
rounds (each round swaps which goes first): the median µs of each and their ratio, then the check alone per batch in
this process (best of 5, µs) with each codec.
uvloop is tried only when it is installed. It is not a dependency: here it cut the bare-framing baseline
(~25%) but not a Produce or Fetch (within ±5%, the noise of a shared machine), whose cost is in decoding,
the handler and the append, not in the event loop.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from measure import error_codes, run, shortfall  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
SIZE = struct.Struct(">i")
VALUE = b"x" * 200
FETCH_BYTES = 64 * 1024
FETCH_LOG_BATCHES = 2000  # batches of 50 records in the fetched log (~20 MB): fetches cycle through it
SCENARIOS = ("baseline", "produce b1", "produce b50", "produce b1 all", "produce b50 all", "fetch 64K")


# -- the broker side (a subprocess) ----------------------------------------------------------------------------


class EchoApp:
    """The baseline App: every frame gets the same small reply."""

    REPLY = SIZE.pack(26) + bytes(26)

    def __init__(self) -> None:
        from sparklog.protocol.errors import RemoteProtocolError
        from sparklog.protocol.frame import NEED_DATA

        self.NEED_DATA = NEED_DATA
        self.FRAME_ERRORS = (RemoteProtocolError,)

    def new_decoder(self):
        from sparklog.protocol.frame import FrameDecoder

        return FrameDecoder(1 << 24)

    def new_session(self, peer_ip=""):
        return None

    def handle_frame(self, frame, session):
        return [self.REPLY]


def kafka_app(log_dir: str, fetch_log: bool, quota: str = "none"):
    from sparklog.broker import handlers
    from sparklog.broker.config import BrokerConfig
    from sparklog.broker.network.dispatch import Dispatcher
    from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
    from sparklog.coordination.brokers import BrokerInfo
    from sparklog.records.batch import build_batch
    from sparklog.storage import LogManager

    class Partitions:
        def __init__(self, snapshot):
            self.snapshot = snapshot

    logs = LogManager([log_dir], {"flush.visibility": "appended"})
    config = BrokerConfig.from_properties({"broker.id": "1", "log.dirs": log_dir, "zookeeper.connect": "unused:1"})
    leading = {("t", 0): logs.get_or_create("t", 0)}
    if fetch_log:
        batch = build_batch([(None, VALUE, None, None)] * 50)
        for _ in range(FETCH_LOG_BATCHES):
            leading[("t", 0)].append(batch)
    topics = {"t": TopicMeta("t", {0: PartitionMeta(0, 1, 0, (1,), (1,))})}
    state = handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=logs,
                                       partitions=Partitions(MetadataSnapshot(topics, {1: BrokerInfo(1, "127.0.0.1", 1)},
                                                                        leading)))
    if quota != "none":  # --quota-cost: a byte-rate quota never reached, on this client ("bench") or another
        from sparklog.coordination.client_quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, Entity

        state.quotas.update(Entity(client=quota), {PRODUCER_BYTE_RATE: 1e15, CONSUMER_BYTE_RATE: 1e15})
    return Dispatcher(state)


def serve(app_name: str, loop_name: str, records_check: bool = True, quota: str = "none") -> None:
    """Print the port, serve until stdin closes."""
    import asyncio

    from sparklog.broker.network.server import BrokerServer

    if not records_check:  # --records-check-cost's "off": what the broker cost before the check existed
        from sparklog.storage import append as log

        log._check_records = lambda batch: None

    with tempfile.TemporaryDirectory(prefix="sparklog-requests-") as log_dir:
        app = EchoApp() if app_name == "baseline" else kafka_app(log_dir, app_name.startswith("fetch"), quota)
        server = BrokerServer(app)
        _, port = server.bind("127.0.0.1", 0)

        async def main() -> None:
            loop = asyncio.get_running_loop()
            stdin_closed = loop.run_in_executor(None, sys.stdin.read)
            task = asyncio.create_task(server.serve())
            await server.started.wait()
            print(port, flush=True)
            await stdin_closed
            server.stop()
            await task

        factory = None
        if loop_name == "uvloop":
            import uvloop

            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(main())


# -- the client side -------------------------------------------------------------------------------------------


def frames(scenario: str, n: int, fetch_bytes: int = FETCH_BYTES) -> list[bytes]:
    """`n` requests of `scenario`, correlation ids 0..n-1; a Fetch asks for up to `fetch_bytes`."""
    from sparklog.protocol import (ApiKey, FetchPartition, FetchRequest, FetchTopic, PartitionProduceData,
                                   ProduceRequest, TopicProduceData)
    from sparklog.protocol.registry import encode_request
    from sparklog.records.batch import build_batch

    if scenario.startswith(("baseline", "produce")):
        records = build_batch([(None, VALUE, None, None)] * (50 if "b50" in scenario else 1))
        acks = -1 if scenario.endswith(" all") else 1
        body = ProduceRequest(acks=acks, timeout_ms=30_000, topic_data=[TopicProduceData(
            name="t", partition_data=[PartitionProduceData(index=0, records=records)])])
        return [encode_request(ApiKey.PRODUCE, 8, i, "bench", body) for i in range(n)]
    out = []
    for i in range(n):
        offset = (i * 50) % (FETCH_LOG_BATCHES * 50 - 50 * 10)
        body = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=fetch_bytes, topics=[FetchTopic(topic="t",
        partitions=[
            FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=fetch_bytes)])])
        out.append(encode_request(ApiKey.FETCH, 11, i, "bench", body))
    return out


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICK


class Replies:
    """Counts whole reply frames in what the socket returns, and the error codes in them (measure.py Rule 4:
    a reply with an error is not a request served). The baseline's fixed replies are not decoded."""

    def __init__(self, scenario: str = "baseline") -> None:
        from sparklog.protocol import ApiKey

        self.buf = bytearray()
        self.count = 0
        self.errors: dict[int, int] = {}
        self.api_key = None if scenario == "baseline" else ApiKey.FETCH if scenario.startswith("fetch") \
            else ApiKey.PRODUCE

    def feed(self, data: bytes) -> None:
        self.buf += data
        start = 0
        while len(self.buf) - start >= 4:
            (size,) = SIZE.unpack_from(self.buf, start)
            if len(self.buf) - start - 4 < size:
                break
            if self.api_key is not None:
                self._check(memoryview(self.buf)[start + 4:start + 4 + size])
            start += 4 + size
            self.count += 1
        del self.buf[:start]

    def _check(self, frame: memoryview) -> None:
        from sparklog.protocol import ApiKey
        from sparklog.protocol.registry import decode_response

        _, response = decode_response(self.api_key, 11 if self.api_key == ApiKey.FETCH else 8, frame)
        for code in error_codes(response):
            self.errors[code] = self.errors.get(code, 0) + 1


def measure(scenario: str, loop_name: str, n: int, window: int, records_check: bool = True,
            quota: str = "none") -> tuple[float, float]:
    """(µs of broker CPU per request, seconds of wall time); a reply with an error code makes the row SHORT
    (measure.py Rule 4)."""
    todo = frames(scenario, n)
    proc = subprocess.Popen([sys.executable, __file__, "--serve", scenario, "--loop", loop_name]
                            + ([] if records_check else ["--no-records-check"]) + ["--quota", quota],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            replies = Replies(scenario)
            warm = min(1000, n // 10)
            _exchange(sock, todo[:warm], replies, window)
            cpu0, started = cpu_seconds(proc.pid), time.perf_counter()
            _exchange(sock, todo[warm:], replies, window)
            cpu, wall = cpu_seconds(proc.pid) - cpu0, time.perf_counter() - started
        if replies.errors:
            print(shortfall(f"{scenario} ({loop_name}): SHORT, replies with error codes {replies.errors} "
                            f"(of {replies.count})"), flush=True)
        return cpu / (n - warm) * 1e6, wall
    finally:
        proc.stdin.close()
        proc.wait(30)


def _exchange(sock, todo: list[bytes], replies: Replies, window: int) -> None:
    expected = replies.count + len(todo)
    sent = 0
    while replies.count < expected:
        while sent < len(todo) and sent - (replies.count - (expected - len(todo))) < window:
            sock.sendall(todo[sent])
            sent += 1
        replies.feed(sock.recv(1 << 20))


def breakdown(n: int) -> None:
    """µs per stage of one request, in this process (no socket, no event loop)."""
    import timeit

    from sparklog.broker.network.dispatch import HANDLERS
    from sparklog.protocol.registry import decode_request, encode_response

    print(f"{'stage (µs)':<16}{'decode':>10}{'handler':>10}{'encode':>10}{'dispatch':>10}")
    for scenario in SCENARIOS[1:]:
        with tempfile.TemporaryDirectory(prefix="sparklog-requests-") as log_dir:
            dispatcher = kafka_app(log_dir, scenario.startswith("fetch"))
            frame = memoryview(frames(scenario, 1)[0])[4:]
            request = decode_request(frame)
            handler = HANDLERS[request.header.api_key]
            body = handler(request, dispatcher.state)
            session = dispatcher.new_session()
            dispatcher.handle_frame(frame, session)  # names the session: later frames may take a fast path
            stages = (lambda: decode_request(frame), lambda: handler(request, dispatcher.state),
                      lambda: encode_response(request.header, body), lambda: dispatcher.handle_frame(frame, session))
            cells = [min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6 for fn in stages]
            print(f"{scenario:<16}" + "".join(f"{c:>10.1f}" for c in cells), flush=True)
            dispatcher.state.logs.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=32, help="requests in flight on the connection")
    parser.add_argument("--loops", default=None, help="asyncio,uvloop (default: uvloop too if installed)")
    parser.add_argument("--records-check-cost", action="store_true",
                        help="Produce b1/b50 with the records check off and on (see the docstring)")
    parser.add_argument("--rounds", type=int, default=5, help="alternations for --records-check-cost")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--loop", default="asyncio", help=argparse.SUPPRESS)
    parser.add_argument("--no-records-check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quota-cost", action="store_true",
                        help="Produce b1/b50 and Fetch 64K without quotas, metered unquoted, metered quoted")
    parser.add_argument("--quota", default="none", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.loop, not args.no_records_check, args.quota)
        return 0
    if args.records_check_cost:
        return records_check_cost(args.n, args.window, args.rounds)
    if args.quota_cost:
        return quota_cost(args.n, args.window, args.rounds)
    loops = args.loops.split(",") if args.loops else ["asyncio"] + (["uvloop"] if _has_uvloop() else [])
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.n} requests, window {args.window}")
    header = f"{'request':<16}" + "".join(f"{loop + ' µs':>14}{'x base':>8}" for loop in loops)
    print(header + (f"{loops[1] + '/' + loops[0]:>18}" if len(loops) > 1 else ""))
    base: dict[str, float] = {}
    for scenario in SCENARIOS:
        cells, costs = [], []
        for loop in loops:
            cost, _ = measure(scenario, loop, args.n, args.window)
            base.setdefault(loop, cost)
            costs.append(cost)
            cells.append(f"{cost:>14.1f}{cost / base[loop]:>8.2f}")
        ratio = f"{costs[1] / costs[0]:>18.2f}" if len(costs) > 1 else ""
        print(f"{scenario:<16}" + "".join(cells) + ratio, flush=True)
    breakdown(min(args.n, 5000))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


QUOTA_MODES = (("none", "no quota"), ("other", "other quoted"), ("bench", "quoted"))


def quota_cost(n: int, window: int, rounds: int) -> int:
    """Each request with no quota configured (dispatch Rule 7 off: the unmetered path), with a quota on another
    client only (metering on, this client unquoted) and on this client (metered, never throttled), rotating
    which goes first each round; medians and their ratio to "no quota"."""
    import statistics

    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {n} requests, window {window}, "
          f"{rounds} rounds")
    print(f"{'request':<16}" + "".join(f"{label + ' µs':>18}" for _, label in QUOTA_MODES) + f"{'x none':>14}")
    for scenario in ("produce b1", "produce b50", "fetch 64K"):
        costs: dict[str, list[float]] = {mode: [] for mode, _ in QUOTA_MODES}
        for round_ in range(rounds):
            order = [mode for mode, _ in QUOTA_MODES]
            for mode in order[round_ % 3:] + order[:round_ % 3]:
                costs[mode].append(measure(scenario, "asyncio", n, window, quota=mode)[0])
        medians = [statistics.median(costs[mode]) for mode, _ in QUOTA_MODES]
        ratios = " ".join(f"{m / medians[0]:.2f}" for m in medians[1:])
        print(f"{scenario:<16}" + "".join(f"{m:>18.1f}" for m in medians) + f"{ratios:>14}", flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def records_check_cost(n: int, window: int, rounds: int) -> int:
    """Produce b1 and b50 with the records check off ("before") and on, alternating; then the check alone."""
    import statistics
    import timeit

    from sparklog.records import batch
    from sparklog.records.implementation import compiled
    from sparklog.records.verify import records_error

    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {n} requests, window {window}, "
          f"{rounds} rounds")
    print(f"{'request':<16}{'off µs':>10}{'on µs':>10}{'on/off':>8}   (medians; each round's on/off)")
    for scenario in ("produce b1", "produce b50"):
        costs: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(rounds):
            for check in ((False, True) if round_ % 2 == 0 else (True, False)):  # neither always goes first
                costs[check].append(measure(scenario, "asyncio", n, window, check)[0])
        off, on = statistics.median(costs[False]), statistics.median(costs[True])
        each = " ".join(f"{b / a:.2f}" for a, b in zip(costs[False], costs[True]))
        print(f"{scenario:<16}{off:>10.1f}{on:>10.1f}{on / off:>8.2f}   ({each})", flush=True)
    print(f"{'check alone (µs)':<16}{'cython':>10}{'python':>10}")
    for label, codec in (("b1", "none"), ("b50", "none"), ("b50 lz4", "lz4")):
        build = batch.build_batch([(None, VALUE, None, None)] * (1 if label == "b1" else 50),
                                            compression=codec)
        cells = []
        for chosen in (compiled(batch.PYTHON_CODEC, batch.RecordColumns), batch.PYTHON_CODEC):
            previous = batch.CODEC
            batch.use(chosen)
            try:
                view = memoryview(build)
                cells.append(min(timeit.repeat(lambda: records_error(view), number=2000, repeat=5)) / 2000 * 1e6)
            finally:
                batch.use(previous)
        print(f"{label:<16}" + "".join(f"{c:>10.2f}" for c in cells), flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(run(main))
