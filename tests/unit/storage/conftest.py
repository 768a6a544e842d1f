"""Fixtures of the storage tests, and the rule that a test closes every file it opens.

- `flusher`: a private Flusher; at the end of the test it closes the logs still registered with it (a test
  that asserts on an open log need not close it itself). A log a test "killed" (unregistered, as a SIGKILL
  leaves it) is the test's to release (support/crashfs.py: CrashFiles.crash() or ProcessFiles.exit()).
- every test fails if it ends with more open files than it started with: one leaked log holds three per
  segment, and a run once reached 1500. Only files count: sockets and pipes belong to whatever else shares
  the process (a pytest-xdist worker runs other modules, whose clients' background threads may connect
  while a storage test runs), and the storage opens none.
"""

import os

import pytest

from sparklog.storage import Flusher
from support.crashfs import Crashed
from support.codecs import NAMES, switched


class ClosingFlusher(Flusher):
    """A Flusher that remembers its logs, so that the fixture can close those the test left open."""

    def __init__(self, name: str):
        super().__init__(name)
        self.registered: list = []

    def register(self, flushable) -> None:
        super().register(flushable)
        self.registered.append(flushable)

    def unregister(self, flushable) -> None:
        super().unregister(flushable)
        self.registered = [f for f in self.registered if f is not flushable]

    def close_logs(self) -> None:
        for log in reversed(self.registered):
            try:
                log.close()  # unregisters it
            except Crashed:  # its file layer lost power, and crash() closed every descriptor
                self.unregister(log)


@pytest.fixture
def flusher():
    """A private Flusher, so a test's logs never share a background thread with another test's."""
    flusher = ClosingFlusher("test-flusher")
    yield flusher
    try:
        flusher.close_logs()
    finally:
        flusher.close()


def _open_files() -> dict[int, str]:
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith("/"):  # not "socket:[…]", "pipe:[…]" or "anon_inode:…"
            found[int(name)] = target
    return found


@pytest.fixture(autouse=True)
def no_leaked_descriptors():
    """Autouse and function-scoped, so it is set up before and torn down after the test's other fixtures."""
    before = _open_files()
    yield
    leaked = {fd: path for fd, path in _open_files().items() if before.get(fd) != path}
    assert not leaked, f"the test left {len(leaked)} files open: {sorted(leaked.values())[:5]}"


@pytest.fixture(scope="module", params=NAMES)
def codec(request):
    """The cleaner's modules run once with each RecordBatch codec (tests/support/codecs.py): the compiled scan
    and the pure-Python one must clean alike."""
    with switched(request.param) as active:
        yield active
