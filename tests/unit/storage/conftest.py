import pytest

from sparklog.storage import Flusher


@pytest.fixture
def flusher():
    """A private Flusher, so a test's logs never share a background thread with another test's."""
    flusher = Flusher("test-flusher")
    yield flusher
    flusher.close()
