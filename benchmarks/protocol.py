"""Codec micro-benchmarks: microseconds per operation of sparklog's wire codec, each beside aiokafka's codec
(its classic Struct classes, pure Python) doing the same work on the same bytes in the same run.

    .venv/bin/python benchmarks/protocol.py

Rows (best of 5, µs an operation), each with its ratio to aiokafka's (below 1: sparklog's is cheaper):
    decode Produce v7    the request header and body of one partition with 12 KB of records;
                         aiokafka: RequestHeader_v1's schema, then ProduceRequest_v7.decode, from the same frame
    encode Fetch v10     a response of one partition whose 12 KB of records are bytes; aiokafka:
                         FetchResponse_v10(...).encode() (the body: no size prefix and correlation id, 8 bytes)
    encode Fetch v10, FileSlice   the same response whose 1 MiB of records is a FileSlice, its bytes written
                         later with os.sendfile; aiokafka has no such thing and encodes the 1 MiB inline, which
                         is what a broker on its codec would do
    build + encode ...   the FileSlice row with the response built in the timed call, as a handler does
"""

from __future__ import annotations

import io
import sys
import timeit

from sparklog.protocol import (ApiKey, FetchableTopicResponse, FetchResponse, PartitionData,
                               PartitionProduceData, ProduceRequest, RequestHeader, TopicProduceData,
                               decode_request, encode_request, encode_response)

RECORDS = bytes(12 * 1024)  # a 12 KB record set
SLICE_BYTES = 1 << 20  # the FileSlice's length


class FileSliceStandIn:
    """What the broker passes in a Fetch response: a length, written later with os.sendfile."""

    def __len__(self):
        return SLICE_BYTES


def _best(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def _report(name: str, ours, theirs, number: int = 20_000) -> None:
    mine, base = _best(ours, number), _best(theirs, number)
    print(f"{name:44s} {mine * 1e6:8.2f} µs/op (aiokafka {base * 1e6:8.2f}) = {mine / base:.3g}x aiokafka's",
          flush=True)


def _aiokafka_fetch(records) -> bytes:
    from aiokafka.protocol.fetch import FetchResponse_v10

    # throttle, error, session id; topic, [partition, error, high watermark, last stable, log start, aborted, records]
    return FetchResponse_v10(0, 0, 0, [("events", [(0, 0, 1000, 1000, 0, [], records)])]).encode()


def main() -> int:
    from aiokafka.protocol.api import RequestHeader_v1
    from aiokafka.protocol.produce import ProduceRequest_v7

    produce = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[TopicProduceData(
        name="events", partition_data=[PartitionProduceData(index=0, records=RECORDS)])])
    frame = encode_request(ApiKey.PRODUCE, 7, 1, "producer-1", produce)[4:]

    def aiokafka_decode():
        data = io.BytesIO(frame)
        return RequestHeader_v1.SCHEMA.decode(data), ProduceRequest_v7.decode(data)

    _report("decode Produce v7, 1 partition, 12 KB", lambda: decode_request(frame), aiokafka_decode)
    fetch_header = RequestHeader(ApiKey.FETCH, 10, 7, "consumer-1")

    def fetch_response(records):
        return FetchResponse(session_id=0, responses=[FetchableTopicResponse(topic="events", partitions=[
            PartitionData(partition_index=0, high_watermark=1000, last_stable_offset=1000,
                          log_start_offset=0, records=records)])])

    inline, in_place, inline_slice = fetch_response(RECORDS), fetch_response(FileSliceStandIn()), bytes(SLICE_BYTES)
    _report("encode Fetch v10, 1 partition, 12 KB bytes", lambda: encode_response(fetch_header, inline),
            lambda: _aiokafka_fetch(RECORDS))
    _report("encode Fetch v10, 1 partition, FileSlice", lambda: encode_response(fetch_header, in_place),
            lambda: _aiokafka_fetch(inline_slice), number=2_000)
    _report("build + encode Fetch v10, FileSlice",
            lambda: encode_response(fetch_header, fetch_response(in_place.responses[0].partitions[0].records)),
            lambda: _aiokafka_fetch(inline_slice), number=2_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
