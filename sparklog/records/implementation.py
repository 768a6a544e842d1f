"""Which RecordBatch codec runs: the compiled one (`_cbatch`, Cython) or the pure-Python one in `batch`.

As aiokafka does with `aiokafka/record/_crecords/`, the hot functions of `sparklog.records.batch` (varints,
`build_batch` and the `_encode_records` under it, `_decode_columns` under `RecordBatch.columns()` and
`records()`, `_decode_records` under `RecordBatch.tuples()`, `_decode_chunk` under `chunk_tuples`) have a compiled twin, built from `_cbatch.pyx`
at install time when a C compiler is there.

Rule 1: chosen once, when `batch` is imported: the compiled codec, unless the environment variable
        SPARKLOG_NO_EXTENSIONS is set to anything but "" or "0", or the extension was not built or was built
        from an older `_cbatch.pyx` (then `sparklog.records.COMPILED_UNAVAILABLE` says which).
Rule 2: both give the same bytes, values and errors. The pure-Python codec is the authority: the compiled
        one hands it every input its fast path does not take (see `_cbatch`'s docstring).
Rule 3: `sparklog.records.IMPLEMENTATION` names the active codec: "cython" or "python".
"""

from __future__ import annotations

import os
import time
from typing import Callable, NamedTuple

from crc32c import crc32c

from sparklog.records.compression import codec_id, compress

NO_EXTENSIONS_VARIABLE = "SPARKLOG_NO_EXTENSIONS"
CYTHON = "cython"
PYTHON = "python"


class Codec(NamedTuple):
    """One implementation of the functions `batch` switches between."""

    name: str
    encode_varint: Callable
    decode_varint: Callable
    encode_records: Callable
    decode_columns: Callable
    build_batch: Callable
    decode_records: Callable
    decode_chunk: Callable


def extensions_disabled() -> bool:
    return os.environ.get(NO_EXTENSIONS_VARIABLE, "") not in ("", "0")


REQUIRED_EXTRAS = ("scan_section", "join_kept", "whole_prefix", "put_batches", "filter_batches",
                   "decode_buffers", "decode_into", "decode_records", "plain_records_ok", "section_records_ok", "check_sets", "seek_timestamp")
# ^ what records/scan.py, sweep.py, buffers.py, verify.py, append_check.py and seek.py take from it


def compiled(pure: Codec, record_columns: type) -> Codec:
    """The compiled codec, deferring to `pure`; ImportError when the extension was not built."""
    from sparklog.records import _cbatch

    for name in REQUIRED_EXTRAS:  # an extension built before these existed is older than its source
        getattr(_cbatch, name)
    _cbatch.bind(pure, record_columns, codec_id, compress, crc32c, time.time_ns)
    return Codec(
        CYTHON,
        _cbatch.encode_varint,
        _cbatch.decode_varint,
        _cbatch.encode_records,
        _cbatch.decode_columns,
        _cbatch.build_batch,
        _cbatch.decode_records,
        _cbatch.decode_chunk,
    )


def select(pure: Codec, record_columns: type) -> tuple[Codec, str | None]:
    """(the codec to run, why the compiled one is not it, or None when it is)."""
    if extensions_disabled():
        return pure, f"{NO_EXTENSIONS_VARIABLE} is set"
    try:
        return compiled(pure, record_columns), None
    except ImportError as exc:
        return pure, f"the compiled codec was not built ({exc})"
    except (TypeError, AttributeError) as exc:  # an extension built from an older _cbatch.pyx
        return pure, f"the compiled codec is older than its source; rebuild it with scripts/setup.sh ({exc})"
