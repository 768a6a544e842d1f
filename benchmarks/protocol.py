"""Codec micro-benchmarks: microseconds per operation, beside a baseline of unpacking the request
header prefix alone. Run: .venv/bin/python benchmarks/protocol.py"""

from __future__ import annotations

import struct
import timeit

from sparklog.protocol import (ApiKey, FetchableTopicResponse, FetchResponse, PartitionData,
                               PartitionProduceData, ProduceRequest, RequestHeader, TopicProduceData,
                               decode_request, encode_request, encode_response)

RECORDS = bytes(12 * 1024)  # a 12 KB record set


class FileSliceStandIn:
    """What the broker passes in a Fetch response: a length, written later with os.sendfile."""

    def __len__(self):
        return 1 << 20


def _report(name: str, fn, number: int = 50_000, baseline: float | None = None) -> float:
    best = min(timeit.repeat(fn, number=number, repeat=5)) / number
    extra = f"  ({best / baseline:5.1f}x baseline)" if baseline else ""
    print(f"{name:58s} {best * 1e6:8.2f} us/op {1 / best:12,.0f} ops/s{extra}")
    return best


def main() -> None:
    produce = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[TopicProduceData(
        name="events", partition_data=[PartitionProduceData(index=0, records=RECORDS)])])
    frame = encode_request(ApiKey.PRODUCE, 7, 1, "producer-1", produce)[4:]
    header = struct.Struct(">hhi")
    baseline = _report("baseline: struct unpack of the request header prefix",
                       lambda: header.unpack_from(frame, 0))
    _report("decode_request: Produce v7, 1 partition, 12 KB records", lambda: decode_request(frame),
            baseline=baseline)

    fetch_header = RequestHeader(ApiKey.FETCH, 10, 7, "consumer-1")

    def fetch_response(records):
        return FetchResponse(session_id=0, responses=[FetchableTopicResponse(topic="events", partitions=[
            PartitionData(partition_index=0, high_watermark=1000, last_stable_offset=1000,
                          log_start_offset=0, records=records)])])

    in_place = fetch_response(FileSliceStandIn())
    _report("encode_response: Fetch v10, 1 partition, FileSlice records",
            lambda: encode_response(fetch_header, in_place), baseline=baseline)
    inline = fetch_response(RECORDS)
    _report("encode_response: Fetch v10, 1 partition, 12 KB bytes records",
            lambda: encode_response(fetch_header, inline), baseline=baseline)
    _report("build + encode_response: Fetch v10, FileSlice records",
            lambda: encode_response(fetch_header, fetch_response(in_place.responses[0].partitions[0].records)),
            baseline=baseline)


if __name__ == "__main__":
    main()
