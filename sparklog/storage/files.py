"""The thin file layer through which the log does all its I/O, so tests can swap in a crash simulator.

Files are named by path and used through integer file descriptors (the FileSlice hands the descriptor to
os.sendfile). Checkpoints are written as Kafka's CheckpointFile does: tmp file, fsync, rename, fsync dir.
A file's creation, rename or removal is durable only once its directory is fsynced (`fsync_dir`): the log
does that before it moves its recovery point over a new segment, and after it retires or deletes segments.
"""

from __future__ import annotations

import os
import shutil

from sparklog.records import BytesLike

_OPEN_FLAGS = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16  # buffers one pwritev takes


class Files:
    """Plain OS files. Subclasses (tests/support/crashfs.py) override these methods to simulate crashes."""

    def open(self, path: str, create: bool = False) -> int:
        """Open for reading and positional writes; `create` makes the file if missing."""
        return os.open(path, _OPEN_FLAGS | (os.O_CREAT if create else 0), 0o644)

    def close(self, fd: int) -> None:
        os.close(fd)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def pwrite(self, fd: int, data: BytesLike, position: int) -> None:
        """Write all of `data` at `position` (loops over short writes, which regular files rarely do)."""
        written = os.pwrite(fd, data, position)
        if written == len(data):
            return
        view = memoryview(data)[written:]
        while view:
            position += written
            written = os.pwrite(fd, view, position)
            view = view[written:]

    def pwritev(self, fd: int, buffers: list[BytesLike], position: int, size: int) -> None:
        """Write the buffers (`size` bytes in all) one behind the other at `position`, with one system call
        for up to IOV_MAX of them: the log writes a run of batches from the views they arrived in, without
        first copying them into one buffer. A short write is finished with `pwrite`."""
        if len(buffers) > _IOV_MAX:
            for start in range(0, len(buffers), _IOV_MAX):
                chunk = buffers[start:start + _IOV_MAX]
                chunk_size = sum(map(len, chunk))
                self.pwritev(fd, chunk, position, chunk_size)
                position += chunk_size
            return
        written = os.pwritev(fd, buffers, position)
        if written != size:
            self.pwrite(fd, memoryview(b"".join(buffers))[written:], position + written)

    def modified_ms(self, fd: int) -> int:
        """The file's last-modified time in wall-clock milliseconds (retention's fallback timestamp)."""
        return os.fstat(fd).st_mtime_ns // 1_000_000

    def pread(self, fd: int, length: int, position: int) -> bytes:
        """Up to `length` bytes at `position`; shorter only at the end of the file."""
        data = os.pread(fd, length, position)
        if len(data) == length or not data:
            return data
        parts = [data]
        got = len(data)
        while got < length:
            more = os.pread(fd, length - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        """Create `path` if missing, and make its entry in the parent durable."""
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            self.fsync_dir(os.path.dirname(os.path.normpath(path)) or ".")

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def fsync_dir(self, path: str) -> None:
        """Make renames and creations in `path` durable."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_file(self, path: str) -> bytes | None:
        """The whole file, or None if it does not exist."""
        try:
            fd = self.open(path)
        except FileNotFoundError:
            return None
        try:
            return self.pread(fd, self.size(fd), 0)
        finally:
            self.close(fd)

    def write_atomically(self, path: str, data: bytes) -> None:
        """Replace `path` with `data` so a crash leaves either the old or the new content (CheckpointFile)."""
        tmp = path + ".tmp"
        fd = self.open(tmp, create=True)
        try:
            self.truncate(fd, 0)
            self.pwrite(fd, data, 0)
            self.fsync(fd)
        finally:
            self.close(fd)
        self.rename(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")


OS_FILES = Files()
