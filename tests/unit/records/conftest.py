"""`codec`: runs a test once with each RecordBatch codec, the compiled one and the pure-Python one
(tests/support/codecs.py)."""

import pytest

from support.codecs import NAMES, switched


@pytest.fixture(scope="module", params=NAMES)
def codec(request):
    with switched(request.param) as active:
        yield active
