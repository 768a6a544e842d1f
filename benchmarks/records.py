"""Microbenchmark: records/s of the RecordBatch codec, compiled (Cython) against pure Python, in one run.

For each codec: build_batch, RecordBatch.columns() (the consumer's and the Spark source's bulk decode) and
iter_records (a Record per record), beside a b"".join of the same payloads as a floor-of-cost baseline. Prints
each rate and the compiled/pure ratio, with the load average before and after (the machine may be shared).

Run: .venv/bin/python benchmarks/records.py [--records 50] [--value-bytes 200] [--seconds 1] [--compression none]
                                            [--key-bytes 0] [--headers 0]
"""

from __future__ import annotations

import argparse
import os
import time

from sparklog.records import batch, implementation
from sparklog.records.batch import iter_batches, iter_records


BASELINE = 'b"".join baseline'


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


def measure(records: list, compression: str, seconds: float) -> dict[str, float]:
    """Rates of the codec `batch` runs now (`batch.use` rebinds `batch.build_batch`, hence no import by name)."""
    build_batch = batch.build_batch
    built = build_batch(records, compression=compression)
    (decoded,) = iter_batches(built)
    count = len(records)

    def decode_records() -> None:
        for _ in iter_records(built):
            pass

    return {
        "build_batch": rate(lambda: build_batch(records, compression=compression), count, seconds),
        "columns()": rate(decoded.columns, count, seconds),
        "iter_records": rate(decode_records, count, seconds),
    }


def load() -> str:
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=50, help="records per batch")
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--key-bytes", type=int, default=0, help="0: null keys")
    parser.add_argument("--headers", type=int, default=0, help="headers per record")
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    parser.add_argument("--compression", default="none")
    args = parser.parse_args()
    values = [bytes([i % 251]) * args.value_bytes for i in range(args.records)]
    keys = [b"%0*d" % (args.key_bytes, i) if args.key_bytes else None for i in range(args.records)]
    headers = [("header-%d" % h, b"value") for h in range(args.headers)] or None
    records = [(key, value, headers, None) for key, value in zip(keys, values)]

    codecs = {implementation.PYTHON: batch.PYTHON_CODEC}
    try:  # measured even under SPARKLOG_NO_EXTENSIONS, when it was built
        codecs[implementation.CYTHON] = implementation.compiled(batch.PYTHON_CODEC, batch.RecordColumns)
    except ImportError as exc:
        print(f"the compiled codec is not built ({exc}): pure Python only")
    print(f"{args.records} records of {args.value_bytes} B, key {args.key_bytes} B, {args.headers} headers, "
          f"compression={args.compression}; {load()}")
    baseline = rate(lambda: b"".join(values), args.records, args.seconds)
    figures = {}
    previous = batch.CODEC
    try:
        for name, codec in codecs.items():
            batch.use(codec)
            figures[name] = measure(records, args.compression, args.seconds)
    finally:
        batch.use(previous)
    print(f"  {BASELINE:<14} {baseline:>14,.0f} records/s")
    print(f"  {'':<14} {'python':>14} {'cython':>14}   cython/python  cython/baseline")
    for measurement, pure in figures[implementation.PYTHON].items():
        compiled = figures.get(implementation.CYTHON, {}).get(measurement, float("nan"))
        print(f"  {measurement:<14} {pure:>14,.0f} {compiled:>14,.0f}   {compiled / pure:>12.2f}x "
              f"{compiled / baseline:>15.3f}")
    print(f"  ({load()} after)")


if __name__ == "__main__":
    main()
