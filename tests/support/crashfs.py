"""CrashFiles: a file layer that remembers what was fsynced, and on crash() keeps only that.

Model (a power loss on a journaling file system, as ext4/xfs with default options behave for the calls
the log makes):
- a file's durable content is its content at its last fsync (of any descriptor of that file);
- a directory's durable entries are its entries at its last fsync_dir: a file created, renamed or unlinked
  since then is, after a crash, missing, back under its old name, or back (with its durable content);
- directories themselves (makedirs, rmtree) are durable at once: the log never relies on the opposite.
crash() closes every descriptor, puts back each directory's durable entries and rewrites each file to its
durable content ("drop"), or to the durable content plus a random prefix of the unsynced tail and
optionally random garbage or zeros ("tear": the inode grew but the blocks did not all land). Every call
after crash() raises Crashed.

`arm(method, mode="fail")` instead makes that one call raise OSError(ENOSPC) and nothing else: a disk error
the machine survives (the call writes nothing; later calls work); mode="fail-half" makes a pwrite write the
first half of its bytes first, as a disk that fills up mid-write does.

ProcessFiles: plain files that a simulated SIGKILL (`exit()`) releases, closing every descriptor unwritten.
"""

from __future__ import annotations

import errno
import itertools
import os
import random

from sparklog.storage.files import Files


class Crashed(OSError):
    """The simulated machine lost power; this file layer is dead."""


class _NoSpace(OSError):
    def __init__(self, half: bool, message: str):
        super().__init__(errno.ENOSPC, message)
        self.half = half


class ProcessFiles(Files):
    """Plain files whose descriptors `exit()` closes, as the kernel closes those of a killed process: a test
    that abandons a log (no close, no flush: what SIGKILL leaves) releases its files without writing."""

    def __init__(self):
        self.open_fds: set[int] = set()

    def open(self, path: str, create: bool = False) -> int:
        fd = super().open(path, create)
        self.open_fds.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self.open_fds.discard(fd)
        super().close(fd)

    def exit(self) -> None:
        for fd in self.open_fds:
            os.close(fd)
        self.open_fds.clear()


class CrashFiles(Files):
    def __init__(self):
        self._inodes = itertools.count()
        self._names: dict[str, int] = {}  # path -> inode, as the directories say now
        self._durable_names: dict[str, int] = {}  # path -> inode, as each directory said at its last fsync_dir
        self._durable: dict[int, bytes] = {}  # inode -> content at its last fsync
        self._fds: dict[int, int] = {}  # open descriptor -> inode
        self.crashed = False
        self.fsyncs = 0
        self.dir_fsyncs = 0
        self._armed = None

    def _alive(self, method: str = "", path: str = "") -> None:
        if self.crashed:
            raise Crashed("the file layer crashed")
        if self._armed and self._armed[0] == method and self._armed[1](path):
            self._armed[3] -= 1
            if self._armed[3] < 0:
                if self._armed[2] in ("fail", "fail-half"):
                    self._armed, half = None, self._armed[2] == "fail-half"
                    raise _NoSpace(half, f"No space left on device (injected at {method}({path}))")
                self.crash(self._armed[2])
                raise Crashed(f"power lost at {method}({path})")

    def arm(self, method: str, match=lambda path: True, mode: str = "drop", skip: int = 0) -> None:
        """Crash (then raise Crashed) at the (skip+1)-th call of `method` on a path that `match`es; with
        mode="fail", raise OSError(ENOSPC) from that call only, writing nothing, and stay alive ("fail-half":
        a pwrite writes half its bytes before it raises)."""
        self._armed = [method, match, mode, skip]

    def _path_of(self, fd: int) -> str:
        inode = self._fds.get(fd)
        return next((p for p, i in self._names.items() if i == inode), "")

    def open(self, path: str, create: bool = False) -> int:
        self._alive()
        existed = os.path.exists(path)
        fd = super().open(path, create)
        if path not in self._names:
            inode = self._names[path] = next(self._inodes)
            self._durable[inode] = _read(path) if existed else b""
            if existed:  # found on disk: it was there before this layer, so durable
                self._durable_names[path] = inode
        self._fds[fd] = self._names[path]
        return fd

    def close(self, fd: int) -> None:
        self._alive()
        self._fds.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd, data, position):
        try:
            self._alive("pwrite", self._path_of(fd))
        except _NoSpace as exc:
            if exc.half:
                super().pwrite(fd, memoryview(data)[:len(data) // 2], position)
            raise
        super().pwrite(fd, data, position)

    def pwritev(self, fd, buffers, position, size):
        self.pwrite(fd, b"".join(buffers), position)  # one write, failing or crashing as pwrite does

    def pread(self, fd, length, position):
        self._alive()
        return super().pread(fd, length, position)

    def truncate(self, fd, size):
        self._alive("truncate", self._path_of(fd))
        super().truncate(fd, size)

    def fsync(self, fd: int) -> None:
        self._alive("fsync", self._path_of(fd))
        super().fsync(fd)
        self.fsyncs += 1
        self._durable[self._fds[fd]] = _read_fd(fd)

    def fsync_dir(self, path: str) -> None:
        self._alive("fsync_dir", path)
        super().fsync_dir(path)
        self.dir_fsyncs += 1
        directory = os.path.normpath(path)
        for name in [p for p in self._durable_names if os.path.dirname(p) == directory]:
            del self._durable_names[name]
        for name, inode in self._names.items():
            if os.path.dirname(name) == directory:
                self._durable_names[name] = inode

    def rename(self, src: str, dst: str) -> None:
        self._alive("rename", src)
        super().rename(src, dst)
        if src in self._names:
            self._names[dst] = self._names.pop(src)
        else:
            self._names.pop(dst, None)

    def unlink(self, path: str) -> None:
        self._alive("unlink", path)
        super().unlink(path)
        self._names.pop(path, None)

    def rmtree(self, path: str) -> None:
        self._alive()
        super().rmtree(path)
        prefix = path.rstrip("/") + "/"
        for names in (self._names, self._durable_names):
            for name in [p for p in names if p.startswith(prefix)]:
                del names[name]

    def listdir(self, path):
        self._alive()
        return super().listdir(path)

    def durable_names(self) -> set[str]:
        """The paths that would exist after a crash now (for tests of what the log fsyncs)."""
        return set(self._durable_names)

    def crash(self, mode: str = "drop", rng: random.Random | None = None) -> None:
        """Lose power: close every descriptor, restore the durable directory entries, keep only durable bytes
        ("drop") or tear the tails ("tear")."""
        rng = rng or random.Random(0)
        self.crashed = True
        self._armed = None
        current = {}
        for path, inode in self._names.items():
            if os.path.exists(path):
                current[inode] = _read(path)
        for fd in list(self._fds):
            os.close(fd)
        self._fds.clear()
        for path in self._names:
            if os.path.exists(path):
                os.unlink(path)
        for path, inode in self._durable_names.items():
            if not os.path.isdir(os.path.dirname(path)):
                continue  # its directory was removed (rmtree is durable at once)
            durable = self._durable[inode]
            _write(path, durable if mode == "drop" else _torn(durable, current.get(inode, durable), rng))


def _torn(durable: bytes, current: bytes, rng: random.Random) -> bytes:
    if current == durable:
        return durable  # nothing was in flight for this file
    unsynced = current[len(durable):] if current.startswith(durable) else b""
    kept = durable + unsynced[: rng.randint(0, len(unsynced))]
    junk = rng.choice(("none", "zeros", "random"))
    length = rng.randint(1, 200)
    if junk == "zeros":
        kept += bytes(length)
    elif junk == "random":
        kept += rng.randbytes(length)
    return kept


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _read_fd(fd: int) -> bytes:
    return Files().pread(fd, os.fstat(fd).st_size, 0)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
