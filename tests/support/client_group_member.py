"""One consumer-group member as a process, for the multi-process group tests.

    python tests/support/client_group_member.py --zookeeper ZK --group G --topic T --out FILE [--id ID]
        [--commit-ms 500] [--session-ms 3000] [--process-ms 0] [--streams N]

Writes one line per processed record, flushed at once so that a `kill -9` loses nothing already written:
`R <wall time> <partition> <offset> <member id>`. SIGTERM closes the member cleanly (commit, release, leave)
and writes `CLOSED <wall time> <statistics as JSON>`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sparklog.client.group import GroupConsumer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zookeeper", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--id")
    parser.add_argument("--commit-ms", type=int, default=500)
    parser.add_argument("--session-ms", type=int, default=3000)
    parser.add_argument("--process-ms", type=float, default=0.0)
    parser.add_argument("--streams", type=int, default=0, help="use create_message_streams with N streams")
    args = parser.parse_args()

    stop = threading.Event()

    def on_term(signum, frame):
        stop.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    settings = {"zookeeper.session.timeout.ms": args.session_ms, "consumer.id": args.id}
    consumer = GroupConsumer([args.topic], args.group, args.zookeeper, auto_offset_reset="smallest",
                             auto_commit_interval_ms=args.commit_ms, **settings)
    out = open(args.out, "a", buffering=1)
    lock = threading.Lock()

    def consume(records) -> None:
        for record in records:
            if args.process_ms:
                time.sleep(args.process_ms / 1000.0)
            with lock:
                out.write(f"R {time.time():.6f} {record.partition} {record.offset} {consumer.consumer_id}\n")
            if stop.is_set():
                return

    try:
        if args.streams:
            streams = consumer.create_message_streams({args.topic: args.streams})[args.topic]
            threads = [threading.Thread(target=consume, args=(s,), daemon=True) for s in streams]
            for t in threads:
                t.start()
            while not stop.is_set():
                time.sleep(0.1)
        else:
            consume(consumer)
    except KeyboardInterrupt:
        pass
    finally:
        stats = consumer.statistics()
        consumer.close()
        with lock:
            out.write(f"CLOSED {time.time():.6f} {json.dumps(stats, default=str)}\n")
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
