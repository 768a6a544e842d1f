"""Microbenchmark: records/s of build_batch and iter_records beside a b"".join baseline of the same payloads.

Run: .venv/bin/python benchmarks/records.py [--records 50] [--value-bytes 200] [--seconds 1] [--compression none]
"""

from __future__ import annotations

import argparse
import time

from sparklog.records.batch import build_batch, iter_records


def rate(function, records_per_call: int, seconds: float) -> float:
    """Calls `function` for about `seconds`; records per second."""
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(100):
            function()
        calls += 100
    return calls * records_per_call / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=50, help="records per batch")
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    parser.add_argument("--compression", default="none")
    args = parser.parse_args()
    values = [bytes([i % 251]) * args.value_bytes for i in range(args.records)]
    records = [(None, value, None, None) for value in values]
    batch = build_batch(records, compression=args.compression)

    def decode() -> None:
        for _ in iter_records(batch):
            pass

    figures = {
        'b"".join baseline': rate(lambda: b"".join(values), args.records, args.seconds),
        "build_batch": rate(lambda: build_batch(records, compression=args.compression), args.records, args.seconds),
        "iter_records": rate(decode, args.records, args.seconds),
    }
    print(f"{args.records} records of {args.value_bytes} B, no key, no headers, compression={args.compression}")
    for name, value in figures.items():
        print(f"  {name:<18} {value:>14,.0f} records/s")


if __name__ == "__main__":
    main()
