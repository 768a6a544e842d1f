"""Run a test module once with each RecordBatch codec: the compiled one and the pure-Python one.

`switched(name)` makes `sparklog.records.batch` run the codec `name` (`batch.use`), so every caller of
`build_batch`, `columns()`, `records()` and records/scan.py goes through it. The compiled one must be built:
a missing extension fails these tests instead of silently testing the fallback twice.
"""

from contextlib import contextmanager

from sparklog.records import batch, implementation

NAMES = [implementation.CYTHON, implementation.PYTHON]


@contextmanager
def switched(name: str):
    previous = batch.CODEC
    if name == implementation.PYTHON:
        batch.use(batch.PYTHON_CODEC)
    else:
        batch.use(implementation.compiled(batch.PYTHON_CODEC, batch.RecordColumns))
    try:
        yield batch.CODEC
    finally:
        batch.use(previous)
