"""The RecordBatch v2 codec, the bottom layer: producers, brokers, logs and consumers all speak it.

`batch` builds, validates and decodes batches; `compression` holds the codecs of the records section;
`implementation` is the one selector between the compiled kernels (`_cbatch` and its siblings, Cython) and
the pure-Python twins, and `implementation.report()` says which runs. Like Kafka's `common/record` and
kafka-python's `kafka/record/`, it imports nothing else of sparklog, so a client that only encodes batches
never loads the log machinery.

`sparklog.records.IMPLEMENTATION` is the active codec, "cython" or "python" (set SPARKLOG_NO_EXTENSIONS=1
for the latter), and `sparklog.records.COMPILED_UNAVAILABLE` says why it is not the compiled one (None if it is).
"""

from typing import TypeAlias

# Any contiguous bytes a codec reads (a batch or a frame is often a memoryview of a fetched buffer).
BytesLike: TypeAlias = bytes | bytearray | memoryview


def __getattr__(name: str) -> str | None:
    """IMPLEMENTATION and COMPILED_UNAVAILABLE, read from `batch` on first use: importing the package alone
    loads no codec."""
    if name in ("IMPLEMENTATION", "COMPILED_UNAVAILABLE"):
        from sparklog.records import batch

        return batch.CODEC.name if name == "IMPLEMENTATION" else batch.COMPILED_UNAVAILABLE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
