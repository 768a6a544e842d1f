"""The broker's CPU per GiB served by 1 MiB one-partition Fetch requests, beside a bare `os.sendfile` loop of
the same bytes in the same run, for one or more source trees (issue 12: goal ≤ 2× the loop).

    .venv/bin/python benchmarks/fetch_cost.py [-n 2000] [--window 1] [--reps 7] [TREE ...]

Each TREE is a checkout of this repository (default: this one); compare a commit with the work tree by
exporting it first, e.g. `git archive <commit> | tar -x -C /tmp/base` (copy the built
sparklog/records/_cbatch*.so beside its sources). For each repetition, a bare sendfile loop
(measure.sendfile_loop, 1 MiB a call, as many bytes as the fetches serve) and a bare request/response loop
(measure.request_loop: one 1 MiB sendfile per small request, one at a time) run first, then each tree's broker
in turn: broker_requests.py's server of that tree (real BrokerServer + Dispatcher + handlers + storage, one
partition of ~20 MB, no ZooKeeper) in a subprocess, asked for `-n` Fetch v11 requests of 1 MiB with
`--window` in flight on one connection, each reply read whole with recv_into. The broker's CPU comes from
/proc (user + system); the loop's is its sender thread's. Printed: median and minimum of the repetitions
(CPU-s/GiB, and the ratio to the loop's median and minimum, and to the request loop's median), the median
MB/s, and the load average before and after. The repetitions alternate the trees, so a shared machine's load falls on all of them alike; the
minimum is what the code costs with the least interference.
With `--client-pause-us`, the client busies itself that long after each reply, so the broker idles between
requests and answers each one woken up, its caches cold: here (load 6-7) 1500 µs took the same broker from
0.154 to 0.333 CPU-s/GiB (`-n 400 --reps 5`, medians of two runs a minute apart). paper.py's raw fetch row
(the whole broker, with ZooKeeper, over a ~210 MB log that confluent-kafka wrote) reads 2.7-3.3x the loop where
this script reads 1.3-1.6x, with clients alike cheap: the rest of that gap is not explained yet.
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
sys.path.insert(0, str(REPO / "benchmarks"))

import broker_requests  # noqa: E402
from measure import request_loop, sendfile_loop  # noqa: E402

MIB = 1 << 20
SIZE = struct.Struct(">i")
WARM = 100
SERVER = """
import sys
sys.path.insert(0, {tree!r}); sys.path.insert(0, {benchmarks!r})
import broker_requests
broker_requests.FETCH_BYTES = {fetch_bytes}
broker_requests.serve("fetch", "asyncio")
"""


def exchange(sock: socket.socket, todo: list[bytes], window: int, view: memoryview, deadline: float,
             pause_s: float = 0.0) -> None:
    """Send `todo` keeping `window` requests in flight; read each reply whole into `view`, then busy the client
    for `pause_s` (a client that works on each reply, as paper.py's raw fetch loop decodes it in Python)."""
    sent = done = 0
    while done < len(todo):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{done} of {len(todo)} replies before the deadline")
        while sent < len(todo) and sent - done < window:
            sock.sendall(todo[sent])
            sent += 1
        _fill(sock, view[:4])
        (size,) = SIZE.unpack_from(view, 0)
        _fill(sock, view[:size])
        done += 1
        if pause_s:
            until = time.perf_counter() + pause_s
            while time.perf_counter() < until:
                pass


def _fill(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("the broker closed the connection")
        got += n


def broker_cost(tree: str, n: int, window: int, deadline_s: float, pause_s: float = 0.0) -> tuple[float, float]:
    """(broker CPU-s per GiB, MB/s) of `n` 1 MiB fetches from `tree`'s server."""
    todo = broker_requests.frames("fetch", n + WARM)
    code = SERVER.format(tree=tree, benchmarks=str(Path(tree) / "benchmarks"), fetch_bytes=MIB)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=tree)
    try:
        port = int(proc.stdout.readline())
        buf = bytearray(8 * MIB)
        deadline = time.monotonic() + deadline_s
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            exchange(sock, todo[:WARM], window, memoryview(buf), deadline)
            cpu0, started = broker_requests.cpu_seconds(proc.pid), time.perf_counter()
            exchange(sock, todo[WARM:], window, memoryview(buf), deadline, pause_s)
            cpu, wall = broker_requests.cpu_seconds(proc.pid) - cpu0, time.perf_counter() - started
        return cpu / (n * MIB / 2**30), n * MIB / wall / 1e6
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
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.n} fetches of 1 MiB, window "
          f"{args.window}, client pause {args.client_pause_us:g} µs, {args.reps} repetitions", flush=True)
    loop: list[float] = []
    requests: list[float] = []
    rows: dict[str, list[tuple[float, float]]] = {tree: [] for tree in args.trees}
    with tempfile.NamedTemporaryFile(prefix="sparklog-fetch-cost-") as f:
        f.write(os.urandom(20 * MIB))
        f.flush()
        for _ in range(args.reps):
            cpu, sent, _ = sendfile_loop([Path(f.name)], MIB, args.deadline, max(1, args.n // 20))
            loop.append(cpu / (sent / 2**30))
            cpu, sent, _ = request_loop([Path(f.name)], MIB, args.deadline, max(1, args.n // 20))
            requests.append(cpu / (sent / 2**30))
            for tree in args.trees:
                rows[tree].append(broker_cost(tree, args.n, args.window, args.deadline, args.client_pause_us / 1e6))
    mid = args.reps // 2
    base_median, base_min = sorted(loop)[mid], min(loop)
    rr_median, rr_min = sorted(requests)[mid], min(requests)
    print(f"{'sendfile loop':<40}{base_median:>8.3f} CPU-s/GiB median, {base_min:.3f} min")
    print(f"{'request loop':<40}{rr_median:>8.3f} CPU-s/GiB median = {rr_median / base_median:.2f}x the loop's; "
          f"min {rr_min:.3f}")
    for tree, cells in rows.items():
        cpus, rates = sorted(c for c, _ in cells), sorted(r for _, r in cells)
        print(f"{tree:<40}{cpus[mid]:>8.3f} CPU-s/GiB median = {cpus[mid] / base_median:.2f}x the loop's; "
              f"min {cpus[0]:.3f} = {cpus[0] / base_min:.2f}x; {cpus[mid] / rr_median:.2f}x the request loop's; "
              f"{rates[mid]:,.0f} MB/s median")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
