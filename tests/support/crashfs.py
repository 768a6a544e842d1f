"""CrashFiles: a file layer that remembers what was fsynced, and on crash() keeps only that.

Model (a power loss on a journaling file system): a file's durable content is its content at its last
fsync; creations, renames and unlinks are durable at once (the log fsyncs the directory where it matters).
crash() closes every descriptor and rewrites each file to its durable content ("drop"), or to the durable
content plus a random prefix of the unsynced tail and optionally random garbage or zeros ("tear": the
inode grew but the blocks did not all land). Every call after crash() raises Crashed.
"""

from __future__ import annotations

import os
import random

from sparklog.storage.files import Files


class Crashed(OSError):
    """The simulated machine lost power; this file layer is dead."""


class CrashFiles(Files):
    def __init__(self):
        self._durable: dict[str, bytes] = {}
        self._paths: dict[int, str] = {}
        self.crashed = False
        self.fsyncs = 0
        self._armed = None

    def _alive(self, method: str = "", path: str = "") -> None:
        if self.crashed:
            raise Crashed("the file layer crashed")
        if self._armed and self._armed[0] == method and self._armed[1](path):
            self._armed[3] -= 1
            if self._armed[3] < 0:
                self.crash(self._armed[2])
                raise Crashed(f"power lost at {method}({path})")

    def arm(self, method: str, match=lambda path: True, mode: str = "drop", skip: int = 0) -> None:
        """Crash (then raise Crashed) at the (skip+1)-th call of `method` on a path that `match`es."""
        self._armed = [method, match, mode, skip]

    def open(self, path: str, create: bool = False) -> int:
        self._alive()
        existed = os.path.exists(path)
        fd = super().open(path, create)
        self._paths[fd] = path
        if path not in self._durable:
            self._durable[path] = _read(path) if existed else b""
        return fd

    def close(self, fd: int) -> None:
        self._alive()
        self._paths.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd, data, position):
        self._alive("pwrite", self._paths.get(fd, ""))
        super().pwrite(fd, data, position)

    def pread(self, fd, length, position):
        self._alive()
        return super().pread(fd, length, position)

    def truncate(self, fd, size):
        self._alive("truncate", self._paths.get(fd, ""))
        super().truncate(fd, size)

    def fsync(self, fd: int) -> None:
        self._alive("fsync", self._paths.get(fd, ""))
        super().fsync(fd)
        self.fsyncs += 1
        self._durable[self._paths[fd]] = _read(self._paths[fd])

    def rename(self, src: str, dst: str) -> None:
        self._alive("rename", src)
        super().rename(src, dst)
        self._durable[dst] = self._durable.pop(src, _read(dst))
        for fd, path in self._paths.items():
            if path == src:
                self._paths[fd] = dst

    def unlink(self, path: str) -> None:
        self._alive("unlink", path)
        super().unlink(path)
        self._durable.pop(path, None)

    def rmtree(self, path: str) -> None:
        self._alive()
        super().rmtree(path)
        for name in [p for p in self._durable if p.startswith(path.rstrip("/") + "/")]:
            del self._durable[name]

    def listdir(self, path):
        self._alive()
        return super().listdir(path)

    def crash(self, mode: str = "drop", rng: random.Random | None = None) -> None:
        """Lose power: close every descriptor and keep only durable bytes ("drop") or tear the tails ("tear")."""
        rng = rng or random.Random(0)
        self.crashed = True
        self._armed = None
        for fd in list(self._paths):
            os.close(fd)
        self._paths.clear()
        for path, durable in self._durable.items():
            if os.path.exists(path):
                _write(path, durable if mode == "drop" else _torn(durable, _read(path), rng))


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


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
