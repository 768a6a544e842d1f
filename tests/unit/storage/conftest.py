import pytest

from sparklog.storage import Flusher
from support.codecs import NAMES, switched


@pytest.fixture
def flusher():
    """A private Flusher, so a test's logs never share a background thread with another test's."""
    flusher = Flusher("test-flusher")
    yield flusher
    flusher.close()


@pytest.fixture(scope="module", params=NAMES)
def codec(request):
    """The cleaner's modules run once with each RecordBatch codec (tests/support/codecs.py): the compiled scan
    and the pure-Python one must clean alike."""
    with switched(request.param) as active:
        yield active
