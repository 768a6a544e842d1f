"""What the standard topic configs cost on the append path, against the default config in the same run.

    python benchmarks/topic_configs.py [--batches 2000] [--records 50] [--repeat 3]

One PartitionLog per config, in a temp dir; the same producer batches (lz4, 200-byte values, half random
bytes, as a producer sends them) are appended to each; the best of `--repeat` runs counts. Rows: the default config (baseline:
CreateTime, compression.type=producer, no timestamp bounds: `log_validator` returns no converter, append pays
nothing), message.timestamp.type=LogAppendTime (re-stamp + CRC per batch), the timestamp bounds (every
record's timestamp decoded), and compression.type=zstd / uncompressed (every batch decoded and rebuilt).
Prints records appended per second and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparklog.records.batch import build_batch  # noqa: E402
from sparklog.storage import Flusher, PartitionLog  # noqa: E402

CONFIGS = [
    ("default (baseline)", {}),
    ("LogAppendTime", {"message.timestamp.type": "LogAppendTime"}),
    ("timestamp bounds", {"message.timestamp.before.max.ms": "3600000", "message.timestamp.after.max.ms": "3600000"}),
    ("compression.type=zstd", {"compression.type": "zstd"}),
    ("compression.type=uncompressed", {"compression.type": "uncompressed"}),
]
NEVER_MS = 10**12


def batches(count: int, records: int) -> list[bytes]:
    now = int(time.time() * 1000)
    return [build_batch([(b"k%d" % i, os.urandom(100) + b"v" * 100, None, now) for i in range(records)],
                        compression="lz4") for _ in range(count)]


def run(settings: dict, data: list[bytes], flusher: Flusher) -> float:
    """Seconds to append every batch to a fresh log with these settings."""
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog.open(f"{tmp}/bench-0", {"flush.ms": NEVER_MS, **settings}, flusher=flusher)
        try:
            start = time.perf_counter()
            for batch in data:
                log.append(batch)
            return time.perf_counter() - start
        finally:
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--records", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = batches(args.batches, args.records)
    size_mb = sum(map(len, data)) / 1e6
    total = args.batches * args.records
    flusher = Flusher("bench-flusher")
    try:
        best = {name: min(run(settings, data, flusher) for _ in range(args.repeat)) for name, settings in CONFIGS}
    finally:
        flusher.close()
    base = best[CONFIGS[0][0]]
    print(f"{args.batches} batches x {args.records} records (lz4, {size_mb:.1f} MB), best of {args.repeat}")
    print(f"{'config':32} {'records/s':>10} {'vs default':>11}")
    for name, seconds in best.items():
        print(f"{name:32} {total / seconds:10,.0f} {base / seconds:10.2f}x")


if __name__ == "__main__":
    main()
