"""`codec`: runs a test once with each RecordBatch codec, the compiled one and the pure-Python one.

The fixture swaps the four functions `sparklog.records.batch` switches between (see
`sparklog.records.implementation`) for the test's module, so every caller of `build_batch`, `columns()` and
`records()` goes through the codec named by the parameter. The compiled one must be built here: a missing
extension fails these tests instead of silently testing the fallback twice.
"""

import pytest

from sparklog.records import batch, implementation


def codec_named(name: str) -> implementation.Codec:
    if name == implementation.PYTHON:
        return batch.PYTHON_CODEC
    return implementation.compiled(batch.PYTHON_CODEC, batch.RecordColumns)


@pytest.fixture(scope="module", params=[implementation.CYTHON, implementation.PYTHON])
def codec(request):
    chosen = codec_named(request.param)
    with pytest.MonkeyPatch.context() as patch:
        for field in ("encode_varint", "decode_varint"):
            patch.setattr(batch, field, getattr(chosen, field))
        patch.setattr(batch, "_encode_records", chosen.encode_records)
        patch.setattr(batch, "_decode_columns", chosen.decode_columns)
        yield chosen
