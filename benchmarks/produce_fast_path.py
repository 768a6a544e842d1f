"""The one-partition Produce fast path against the general codec, per version: microseconds to decode a request
and encode its success reply, and the ratio, all in one run.

    nice -n 19 .venv/bin/python benchmarks/produce_fast_path.py [--versions 8,11] [--records 1,100]

Each frame is what librdkafka sends for one partition: client_id "rdkafka", no transactional_id, acks=-1,
timeout 30 s, topic "events", a RecordBatch of N records of 100-byte values (records/batch.build_batch).
Rows (best of 7 interleaved rounds, µs a request):
    fast        produce.decode_single_partition + encode_single_partition_response (the pure-Python codec)
    compiled    produce_run.scan_produce_run + encode_produce_replies of that one frame (the broker's grouped
                path; the compiled twin unless SPARKLOG_NO_EXTENSIONS is set)
    general     registry.decode_request + the ProduceResponse a handler builds + registry.encode_response
The ratio is fast (or compiled) / general: below 1, the fast path is cheaper.
"""

from __future__ import annotations

import argparse
import sys
import timeit

from sparklog.protocol import (ApiKey, PartitionProduceData, PartitionProduceResponse, ProduceRequest,
                               ProduceResponse, TopicProduceData, TopicProduceResponse, decode_request,
                               encode_request, encode_response)
from sparklog.protocol.produce import decode_single_partition, encode_single_partition_response
from sparklog.protocol.produce_run import IMPLEMENTATION, encode_produce_replies, scan_produce_run
from sparklog.records.batch import build_batch


def frame(version: int, records: int) -> bytes:
    """A size-prefixed one-partition Produce request."""
    batch = build_batch([(b"key-%d" % i, bytes(100), None, None) for i in range(records)])
    body = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[TopicProduceData(
        name="events", partition_data=[PartitionProduceData(index=0, records=batch)])])
    return encode_request(ApiKey.PRODUCE, version, 7, "rdkafka", body)


def fast(view: memoryview) -> bytes:
    request = decode_single_partition(view)
    assert request is not None
    return encode_single_partition_response(request, 42, -1, 0)


def compiled(whole: memoryview) -> bytes:
    requests, _ = scan_produce_run(whole, 0, 1, 1 << 20)
    return encode_produce_replies(requests, [42], -1, 0)


def general(view: memoryview) -> list:
    request = decode_request(view)
    part = request.body.topic_data[0]
    return encode_response(request.header, ProduceResponse(responses=[TopicProduceResponse(
        name=part.name, partition_responses=[PartitionProduceResponse(
            index=part.partition_data[0].index, error_code=0, base_offset=42, log_append_time_ms=-1,
            log_start_offset=0)])], throttle_time_ms=0))


def best(calls: list, number: int, rounds: int = 7) -> list[float]:
    """Seconds a call of each (fn, arg), best of `rounds`; the rounds interleave the calls, so that a machine
    busier in one moment weighs on every one of them alike."""
    times = [float("inf")] * len(calls)
    for _ in range(rounds):
        for k, (fn, arg) in enumerate(calls):
            times[k] = min(times[k], timeit.timeit(lambda: fn(arg), number=number) / number)
    return times


def row(version: int, records: int, number: int) -> None:
    whole = memoryview(frame(version, records))
    view = whole[4:]
    reply = fast(view)
    assert reply == b"".join(bytes(c) for c in general(view)) == compiled(whole)  # Rule 2, checked before timing
    f, c, g = best([(fast, view), (compiled, whole), (general, view)], number)
    print(f"Produce v{version:<2d} {records:4d} records {len(whole):7d} B   fast {f * 1e6:6.2f} µs  "
          f"compiled {c * 1e6:6.2f} µs  general {g * 1e6:6.2f} µs   fast/general {f / g:.3f}x  "
          f"compiled/general {c / g:.3f}x", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", default="8,11", help="Produce versions, comma-separated (default 8,11)")
    parser.add_argument("--records", default="1,100", help="records per batch, comma-separated (default 1,100)")
    parser.add_argument("--number", type=int, default=20_000, help="calls per timing (default 20000)")
    args = parser.parse_args(argv)
    print(f"produce_run: {IMPLEMENTATION}")
    for records in (int(n) for n in args.records.split(",")):
        for version in (int(v) for v in args.versions.split(",")):
            row(version, records, args.number)
    return 0


if __name__ == "__main__":
    sys.exit(main())
