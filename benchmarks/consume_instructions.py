"""Instructions (valgrind callgrind's Ir) per record consumed, for one or more source trees: the consume path's
cost counted in instructions, which a shared machine's load does not move, where timing it moves 2x.

    .venv/bin/python benchmarks/consume_instructions.py [-n 200000] [--small 20000] [--skip-client]
                                                         [--isolation read_committed] [TREE ...]

Each TREE is a checkout of this repository with its compiled kernels built in place (default: this one; a
tree's own `.venv/bin/python` runs it when it has one), as for fetch_cost.py. Per tree, in a subprocess of its
own: an EmbeddedZooKeeper and one broker of that tree; `-n` records of 200 B produced by that tree's Producer
(batch.num.messages 50, acks=1: clients.py's consume topic), not counted. Then two sides:

Rule 1 (the client): the tree's Consumer loop (clients.py's `ours_consume`: assign, iterate) under callgrind
against the plain broker, once for `-n` records and once for `--small`; the figure is the difference over the
records between them, so start-up (imports, connection, metadata) cancels out.
Rule 2 (the broker): the broker restarted on the same log under callgrind; kcat (paper.py's kcat row settings,
partition 0 from the beginning to the end) consumes everything once, measured as "cold" (the codecs a request
version needs are generated on first use, protocol/schema.py: about half of it), then WARM_PASSES times,
measured as "warm" (per record read), with callgrind's
counters zeroed before and dumped after (callgrind_control), and an idle window of IDLE_S between them
measured the same way: the background work's rate, which `warm - idle` takes off in proportion to the
measured window's wall time. kcat's own librdkafka default is read_committed (`--isolation` to change it).
Callgrind counts user-space instructions only: the kernel's sendfile and TCP work are not in the broker's
figure, so its ratio between trees overstates what a change costs in CPU seconds per byte served.
Rule 3: a run that consumed fewer records than produced is SHORT (measure.py Rule 4) and the script exits 1.

Printed per tree: client Ir per record, broker Ir per record (cold, warm, warm less idle), the fetches the broker
answered with records (sendfile calls in the warm window) and each figure's ratio to the first tree's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CALLGRIND = ["valgrind", "--tool=callgrind", "--dump-instr=no", "--compress-strings=no", "--compress-pos=no"]
RECORD_BYTES = 200
TOPIC = "consume-instructions"
SETTLE_S = 20.0  # the callgrind broker's start-up work (registration, leadership) done before the first zero
IDLE_S = 30.0
WARM_PASSES = 5  # kcat reads of the whole partition in the warm window: ~200 fetches, the background's bursts small beside them
DEADLINE_S = 3600.0
# paper.py's KCAT_SETTINGS and DEFAULT_FETCH_BYTES
KCAT_SETTINGS = {"max.partition.fetch.bytes": 1_048_576, "fetch.min.bytes": 1, "fetch.max.bytes": 52_428_800,
                 "queued.max.messages.kbytes": 65_536, "queued.min.messages": 100_000, "fetch.wait.max.ms": 100}
# tests/support/cluster.py's settings for a one-broker test cluster
BROKER_OVERRIDES = {"offsets.topic.num.partitions": "1", "log.retention.check.interval.ms": str(24 * 3600 * 1000)}
CLIENT = """
import sys
sys.path.insert(0, {tree!r})
from sparklog.client import Consumer
got = 0
with Consumer({bootstrap!r}, **{{"auto.offset.reset": "earliest", "consumer.timeout.ms": 600_000}}) as consumer:
    consumer.assign([({topic!r}, 0)])
    for record in consumer:
        got += 1
        if got >= {n}:
            break
print("got", got)
"""


def total_ir(path: Path) -> int:
    return int(re.search(r"^(?:summary|totals):\s+(\d+)", path.read_text(errors="replace"), re.M).group(1))


def sendfile_calls(path: Path) -> int:
    """Calls of os.sendfile in a callgrind dump: the Fetch replies that carried records."""
    lines = path.read_text(errors="replace").splitlines()
    return sum(int(lines[i + 1].split()[0].split("=")[1]) for i, line in enumerate(lines[:-1])
               if line == "cfn=os_sendfile" and lines[i + 1].startswith("calls="))


def kcat_command(address: str, isolation: str) -> list[str]:
    cmd = ["kcat", "-C", "-b", address, "-t", TOPIC, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "x"]
    for key, value in {**KCAT_SETTINGS, "isolation.level": isolation}.items():
        cmd += ["-X", f"{key}={value}"]
    return cmd


def produce(bootstrap: str, n: int) -> int:
    from sparklog.client import Producer
    from sparklog.client.admin import AdminClient

    with AdminClient(bootstrap) as admin:
        admin.create_topic(TOPIC, 1)
    producer = Producer(bootstrap, **{"batch.num.messages": 50, "compression.type": "none", "acks": 1})
    value = bytes(33 + i % 94 for i in range(RECORD_BYTES))
    futures = [producer.send(TOPIC, value) for _ in range(n)]
    producer.flush(DEADLINE_S)
    producer.close(1)
    return sum(1 for f in futures if f.succeeded())


def client_ir(tree: Path, bootstrap: str, n: int, out: Path) -> int:
    """Rule 1: the Consumer loop's instructions for `n` records."""
    path = out / f"client-{n}.callgrind"
    code = CLIENT.format(tree=str(tree), bootstrap=bootstrap, topic=TOPIC, n=n)
    done = subprocess.run([*CALLGRIND, f"--callgrind-out-file={path}", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=DEADLINE_S)
    if f"got {n}\n" not in done.stdout:
        raise RuntimeError(f"SHORT: the consumer did not read {n} records: {done.stdout[-300:]} {done.stderr[-1000:]}")
    return total_ir(path)


def broker_windows(broker, out: Path, n: int, isolation: str) -> dict:
    """Rule 2: {window: (Ir, wall seconds, sendfile calls)} of the callgrind broker for cold, idle and warm."""
    windows = {}
    time.sleep(SETTLE_S)
    for window in ("cold", "idle", "warm"):
        for dump in out.glob("broker.[0-9]*"):
            dump.unlink()
        subprocess.run(["callgrind_control", "-z", str(broker.proc.pid)], check=True, capture_output=True,
                       timeout=DEADLINE_S)
        started = time.monotonic()
        if window == "idle":
            time.sleep(IDLE_S)
        for _ in range({"cold": 1, "idle": 0, "warm": WARM_PASSES}[window]):
            done = subprocess.run(kcat_command(broker.address, isolation), capture_output=True, timeout=DEADLINE_S)
            if len(done.stdout) != n:
                raise RuntimeError(f"SHORT: kcat read {len(done.stdout)} of {n}: {done.stderr[-500:]!r}")
        wall = time.monotonic() - started
        subprocess.run(["callgrind_control", "-d", str(broker.proc.pid)], check=True, capture_output=True,
                       timeout=DEADLINE_S)
        dumps = sorted(out.glob("broker.[0-9]*.[0-9]*"))
        windows[window] = (sum(map(total_ir, dumps)), wall, sum(map(sendfile_calls, dumps)))
        for dump in dumps:
            dump.rename(out / f"{window}-{dump.name}")
    return windows


def one_tree(args) -> dict:
    """Both sides for the tree this process imports (`--child`); the figures as a dict."""
    from sparklog.broker import launcher
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

    class CallgrindBroker(launcher.BrokerProcess):
        def command(self) -> list[str]:
            return [*CALLGRIND, f"--callgrind-out-file={out}/broker.%p", *super().command()]

    tree, out = Path(args.child), Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="consume-instructions-"))
    zookeeper = EmbeddedZooKeeper()
    zookeeper.start()
    figures: dict = {"tree": str(tree)}
    try:
        zk = f"{zookeeper.connect_string}/ci-{uuid.uuid4().hex[:8]}"
        log_dir = work / "broker-1" / "logs"
        broker = launcher.BrokerProcess(1, zk, log_dir, BROKER_OVERRIDES).start()
        try:
            acked = produce(broker.address, args.n)
            if acked != args.n:
                raise RuntimeError(f"SHORT: {acked} of {args.n} records acknowledged")
            if not args.skip_client:
                big, small = (client_ir(tree, broker.address, n, out) for n in (args.n, args.small))
                figures["client"] = (big - small) / (args.n - args.small)
        finally:
            broker.stop()
        measured = CallgrindBroker(1, zk, log_dir, BROKER_OVERRIDES, port=broker.port).start(timeout=600)
        try:
            windows = broker_windows(measured, out, args.n, args.isolation)
        finally:
            measured.stop()
    finally:
        zookeeper.stop()
        shutil.rmtree(work, ignore_errors=True)
    (cold, _, _), (idle, idle_wall, _), (warm, warm_wall, fetches) = (windows[w] for w in ("cold", "idle", "warm"))
    read = WARM_PASSES * args.n
    figures.update(cold=cold / args.n, warm=warm / read, fetches=fetches,
                   warm_less_idle=(warm - idle / idle_wall * warm_wall) / read)
    return figures


def measure(tree: Path, args, out: Path) -> dict:
    """one_tree in a subprocess of `tree` (its own interpreter when it has a .venv)."""
    python = tree / ".venv" / "bin" / "python"
    cmd = [str(python if python.exists() else sys.executable), str(Path(__file__).resolve()), "--child", str(tree),
           "--out", str(out), "-n", str(args.n), "--small", str(args.small), "--isolation", args.isolation]
    if args.skip_client:
        cmd.append("--skip-client")
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=4 * DEADLINE_S)
    if done.returncode:
        raise RuntimeError(f"{tree}: {done.stdout[-500:]} {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_table(rows: list[dict]) -> None:
    first = rows[0]
    names = ("client", "cold", "warm", "warm_less_idle")
    print(f"{'tree':40} {'fetches':>7} " + " ".join(f"{n + ' Ir/rec':>22}" for n in names))
    for row in rows:
        cells = [f"{row[n]:10.1f} ({row[n] / first[n]:5.3f}x)" if n in row else f"{'-':>22}" for n in names]
        print(f"{row['tree'][-40:]:40} {row['fetches']:7d} " + " ".join(f"{c:>22}" for c in cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", default=[str(REPO)])
    parser.add_argument("-n", type=int, default=200_000, help="records produced and consumed")
    parser.add_argument("--small", type=int, default=20_000, help="the client's second, shorter run (Rule 1)")
    parser.add_argument("--isolation", default="read_committed", choices=["read_committed", "read_uncommitted"],
                        help="kcat's isolation.level (librdkafka's default: read_committed)")
    parser.add_argument("--skip-client", action="store_true", help="the broker side only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="where the callgrind dumps go (default: a temporary directory, removed)")
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, args.child)
        print(json.dumps(one_tree(args)))
        return 0
    top = Path(args.out or tempfile.mkdtemp(prefix="consume-instructions-"))
    rows = []
    try:
        for i, tree in enumerate(args.trees):
            out = top / f"tree{i}"
            out.mkdir(parents=True, exist_ok=True)
            rows.append(measure(Path(tree).resolve(), args, out))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if not args.out:
            shutil.rmtree(top, ignore_errors=True)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "benchmarks"))
    from measure import run

    sys.exit(run(main))
