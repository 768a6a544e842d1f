"""The broker's per-read Produce work: the one-partition requests a read holds, decoded in one call, and the
replies of a group of successful appends encoded in one call. Sans-IO, over a buffer.

    scan_produce_run(view, start, limit, max_frame_bytes) -> ([SinglePartitionProduce], position after them)
    encode_produce_replies(requests, base_offsets, log_append_time_ms, log_start_offset) -> bytes

Rule 1: the scan takes size-prefixed frames one behind the other from `start` while each is whole in `view`,
        has a size within 0..max_frame_bytes, and is a one-partition Produce request as
        `produce.decode_single_partition` decodes it (its Rule 1); it stops before the first frame that is
        not (cut short, over the limit, another api or shape, damaged: the caller's frame decoder and the
        general path deal with it, with the errors they give today) and after `limit` frames. Each request's
        `records` and `frame` are views of `view`: nothing is copied.
Rule 2: `encode_produce_replies` gives the bytes of `produce.encode_single_partition_response` for each
        request and its base offset, one after the other.
Rule 3: two twins, the same output: the compiled one (`_cproduce`, Cython) unless records/implementation.py
        (the one selector, its Rule 1) chooses the pure-Python one; this pure-Python
        one is the authority. `IMPLEMENTATION` names the one running, `COMPILED_UNAVAILABLE` why not the
        compiled one (tests/unit/protocol/test_produce_run.py runs both against each other and the codec).
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from sparklog.protocol.produce import (SinglePartitionProduce, decode_single_partition,
                                       encode_single_partition_response)
from sparklog.records import implementation
from sparklog.records.implementation import CYTHON, PYTHON

__all__ = ["scan_produce_run", "encode_produce_replies", "IMPLEMENTATION", "COMPILED_UNAVAILABLE",
           "py_scan_produce_run", "py_encode_produce_replies"]

_SIZE = struct.Struct(">i")  # the frame size prefix
KERNEL = "sparklog.protocol._cproduce"


def py_scan_produce_run(view: memoryview, start: int, limit: int,
                        max_frame_bytes: int) -> tuple[list[SinglePartitionProduce], int]:
    """Rule 1, in Python."""
    requests: list[SinglePartitionProduce] = []
    end, pos = len(view), start
    while len(requests) < limit and end - pos >= 4:
        (size,) = _SIZE.unpack_from(view, pos)
        if size < 0 or size > max_frame_bytes or end - pos - 4 < size:
            break
        request = decode_single_partition(view[pos + 4:pos + 4 + size])
        if request is None:
            break
        requests.append(request)
        pos += 4 + size
    return requests, pos


def py_encode_produce_replies(requests: list[SinglePartitionProduce], base_offsets: list[int], log_append_time_ms: int,
                              log_start_offset: int) -> bytes:
    """Rule 2, in Python."""
    if len(base_offsets) != len(requests):
        raise ValueError("one base offset per request")
    return b"".join([encode_single_partition_response(request, base, log_append_time_ms, log_start_offset)
                     for request, base in zip(requests, base_offsets)])


def _select() -> tuple[Callable[..., tuple[list[Any], int]], Callable[..., bytes], str, str | None]:
    """(scan_produce_run, encode_produce_replies, implementation name, why not the compiled one) per Rule 3."""
    kernel = implementation.load(KERNEL, "Produce scan", ("bind", "scan_produce_run", "encode_produce_replies"))
    if kernel is None:
        return py_scan_produce_run, py_encode_produce_replies, PYTHON, implementation.report_of(KERNEL)
    kernel.bind(SinglePartitionProduce)
    return kernel.scan_produce_run, kernel.encode_produce_replies, CYTHON, None


scan_produce_run, encode_produce_replies, IMPLEMENTATION, COMPILED_UNAVAILABLE = _select()
