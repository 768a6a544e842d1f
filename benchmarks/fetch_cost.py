"""The broker's CPU per GiB served by 1 MiB one-partition Fetch requests, beside bare sendfile servers of the
same bytes in the same run, for one or more source trees (issue 12: goal ≤ 2× the bare request/response server).

    .venv/bin/python benchmarks/fetch_cost.py [-n 2000] [--window 1] [--reps 7] [TREE ...]

Each TREE is a checkout of this repository (default: this one); compare a commit with the work tree by
exporting it first, e.g. `git archive <commit> | tar -x -C /tmp/base` (copy the built
sparklog/records/_cbatch*.so beside its sources). For each repetition, two baselines (measure.py Rule 3: each a
server process of its own, its CPU read from /proc as the broker's is, the reader in this process) serve as
many bytes as the fetches do: a sendfile stream (measure.sendfile_loop, 1 MiB a call) and a request/response
server (measure.request_loop: a small head and one 1 MiB sendfile per small request, one at a time, as the
fetches ask), each placed and counted as the broker is: server and reader CPU together, pinned to a CPU each. Then
each tree's broker in turn: broker_requests.py's server of that tree (real BrokerServer + Dispatcher +
handlers + storage, one partition of ~20 MB, no ZooKeeper) in a subprocess, asked for `-n` Fetch v11
requests of FETCH_BYTES (1 MiB: the requests carry it) with `--window` in flight on one connection, each
reply read whole with recv_into and its error codes checked. Every figure is CPU seconds over the bytes the
client received (replies whole; the fetches near the log's end return less than 1 MiB). Printed: median and
minimum of the repetitions (CPU-s/GiB: the broker's alone, and the broker's and its client's together, whose
ratio to the request/response pair's median and minimum is the comparison: the bare cost of serving those
bytes as Fetch replies, which the broker cannot beat but for noise: the excess over 1 is the broker's own work
per byte and the client's error-code check; and to the stream's), the median MB/s and reply size, and the
load average before and after. A median reply under half of FETCH_BYTES means the requests did not ask for what
the figures say: the row is SHORT and the script exits 1 (measure.py Rule 4). The repetitions alternate the
trees, so a shared machine's load falls on all of them alike; the minimum is what the code costs with the
least interference.
With `--client-pause-us`, the client busies itself that long after each reply, so the broker idles between
requests and answers each one woken up, its caches cold.
Until issue 21 the client's requests carried broker_requests' 64 KiB while the figures divided by 1 MiB a
fetch, and the baselines' sender and receiver shared one process: the figures this docstring quoted then
(0.154-0.333 CPU-s/GiB, 1.3-1.6x the loop) were about 16x too low and are withdrawn; README "Benchmarks"
has the measured ones. Until 30 November 2026 the bare servers had neither the broker's socket nor its
reply's head, nor its placement, and the broker "beat" them by up to 2x on a quiet machine (measure.py Rule 3).
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
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import broker_requests  # noqa: E402
from measure import Served, below_floor, fetch_error, pinned, request_loop, run, sendfile_loop, shortfall  # noqa: E402

MIB = 1 << 20
TOPIC = "t"  # broker_requests' one partition
FETCH_BYTES = MIB  # what each request asks for (max_bytes and partition_max_bytes)
SHORT_REPLY = 0.5  # a median reply under this share of FETCH_BYTES: the requests did not ask for FETCH_BYTES
SIZE = struct.Struct(">i")
WARM = 100
SERVER = """
import sys
sys.path.insert(0, {tree!r}); sys.path.insert(0, {benchmarks!r})
import broker_requests
broker_requests.serve("fetch", "asyncio")
"""


def exchange(sock: socket.socket, todo: list[bytes], window: int, view: memoryview, deadline: float,
             pause_s: float = 0.0) -> list[int]:
    """Send `todo` keeping `window` requests in flight; read each reply whole into `view`, then busy the client
    for `pause_s` (a client that works on each reply, as paper.py's raw fetch loop decodes it in Python).
    Returns each reply's size in bytes (its size prefix included); a reply with an error code raises."""
    sent = done = 0
    sizes = []
    while done < len(todo):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{done} of {len(todo)} replies before the deadline")
        while sent < len(todo) and sent - done < window:
            sock.sendall(todo[sent])
            sent += 1
        _fill(sock, view[:4])
        (size,) = SIZE.unpack_from(view, 0)
        _fill(sock, view[4:size + 4])
        if error := fetch_error(view, TOPIC):
            raise ConnectionError(f"a Fetch reply with error code {error}")
        sizes.append(size + 4)
        done += 1
        if pause_s:
            until = time.perf_counter() + pause_s
            while time.perf_counter() < until:
                pass
    return sizes


def _fill(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("the broker closed the connection")
        got += n


class Cost(NamedTuple):
    cpu_per_gib: float  # broker CPU seconds per GiB received by the client (replies whole, headers included)
    mb_per_s: float
    median_reply: int  # bytes
    pair_per_gib: float  # broker and client CPU seconds together per GiB (measure.py Rule 3)


def broker_cost(tree: str, n: int, window: int, deadline_s: float, pause_s: float = 0.0) -> Cost:
    """What `n` fetches of FETCH_BYTES from `tree`'s server cost the broker, per byte the client received."""
    todo = broker_requests.frames("fetch", n + WARM, FETCH_BYTES)
    code = SERVER.format(tree=tree, benchmarks=str(Path(tree) / "benchmarks"))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=tree)
    try:
        port = int(proc.stdout.readline())
        buf = bytearray(8 * MIB)
        deadline = time.monotonic() + deadline_s
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            exchange(sock, todo[:WARM], window, memoryview(buf), deadline)
            with pinned(proc.pid):  # placed as the bare servers are (measure.py Rule 3)
                cpu0, own0, started = broker_requests.cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
                sizes = exchange(sock, todo[WARM:], window, memoryview(buf), deadline, pause_s)
                cpu, wall = broker_requests.cpu_seconds(proc.pid) - cpu0, time.perf_counter() - started
                own = time.process_time() - own0
        received = sum(sizes)
        gib = received / 2**30
        return Cost(cpu / gib, received / wall / 1e6, sorted(sizes)[len(sizes) // 2], (cpu + own) / gib)
    finally:
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=2000, help="measured fetches per tree and repetition")
    parser.add_argument("--window", type=int, default=1, help="requests in flight on the connection")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds for any one loop")
    parser.add_argument("--client-pause-us", type=float, default=0.0,
                        help="the client's busy time after each reply (default 0: it only reads)")
    parser.add_argument("trees", nargs="*", default=[str(REPO)])
    args = parser.parse_args(argv)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.n} fetches of "
          f"{FETCH_BYTES:,} bytes, window {args.window}, client pause {args.client_pause_us:g} µs, "
          f"{args.reps} repetitions", flush=True)
    loop: list[Served] = []
    requests: list[Served] = []
    rows: dict[str, list[Cost]] = {tree: [] for tree in args.trees}
    with tempfile.NamedTemporaryFile(prefix="sparklog-fetch-cost-") as f:
        f.write(os.urandom(20 * MIB))
        f.flush()
        for _ in range(args.reps):
            for baseline, costs in ((sendfile_loop, loop), (request_loop, requests)):
                costs.append(baseline([Path(f.name)], FETCH_BYTES, args.deadline, max(1, args.n // 20)))
            for tree in args.trees:
                rows[tree].append(broker_cost(tree, args.n, args.window, args.deadline, args.client_pause_us / 1e6))
    report(args.reps // 2, loop, requests, rows)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def report(mid: int, loop: list[Served], requests: list[Served], rows: dict[str, list[Cost]]) -> None:
    """The medians and minimums of the module docstring; a tree whose replies were not FETCH_BYTES-sized
    fetches (median under SHORT_REPLY of it) is SHORT (measure.py Rule 4)."""
    def per_gib(served: list[Served], pair: bool) -> list[float]:
        return sorted((s.pair if pair else s.cpu) / (s.received / 2**30) for s in served)

    stream, stream_pair = per_gib(loop, False), per_gib(loop, True)
    rr, rr_pair = per_gib(requests, False), per_gib(requests, True)
    print(f"{'sendfile stream':<40}{stream[mid]:>8.3f} CPU-s/GiB median (server), {stream_pair[mid]:.3f} with its "
          f"reader; min {stream[0]:.3f}, {stream_pair[0]:.3f}")
    print(f"{'request/response server':<40}{rr[mid]:>8.3f} CPU-s/GiB median (server), {rr_pair[mid]:.3f} with its "
          f"reader; min {rr[0]:.3f}, {rr_pair[0]:.3f}")
    for tree, cells in rows.items():
        cpus, rates = sorted(c.cpu_per_gib for c in cells), sorted(c.mb_per_s for c in cells)
        pairs = sorted(c.pair_per_gib for c in cells)
        reply = sorted(c.median_reply for c in cells)[mid]
        short = "" if reply >= SHORT_REPLY * FETCH_BYTES else shortfall(
            f"; SHORT: the median reply is {reply:,} bytes where fetches of {FETCH_BYTES:,} were asked")
        print(f"{tree:<40}{cpus[mid]:>8.3f} CPU-s/GiB median (broker), {pairs[mid]:.3f} with its client = "
              f"{pairs[mid] / rr_pair[mid]:.2f}x the request/response pair's, {pairs[mid] / stream_pair[mid]:.2f}x the "
              f"stream's; min {pairs[0]:.3f} = {pairs[0] / rr_pair[0]:.2f}x; {rates[mid]:,.0f} MB/s median; "
              f"median reply {reply:,} bytes{short}{below_floor(pairs[mid] / rr_pair[mid], tree)}")


if __name__ == "__main__":
    sys.exit(run(main))
