"""`codec`: runs a test once with each RecordBatch codec, the compiled one and the pure-Python one.

The fixture makes `sparklog.records.batch` run the codec named by its parameter for the test's module
(`batch.use`), so every caller of `build_batch`, `columns()` and `records()` goes through it. The compiled one
must be built here: a missing extension fails these tests instead of silently testing the fallback twice.
"""

import pytest

from sparklog.records import batch, implementation


@pytest.fixture(scope="module", params=[implementation.CYTHON, implementation.PYTHON])
def codec(request):
    previous = batch.CODEC
    if request.param == implementation.PYTHON:
        batch.use(batch.PYTHON_CODEC)
    else:
        batch.use(implementation.compiled(batch.PYTHON_CODEC, batch.RecordColumns))
    yield batch.CODEC
    batch.use(previous)
