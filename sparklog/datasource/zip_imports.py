"""Spark's Python workers re-read pyspark.zip's directory once per zip importer at every task; this makes
the re-read happen only when the archive changed.

pyspark's worker calls `importlib.invalidate_caches()` at the start of every task (`setup_spark_files`, so
that files added with `addPyFile` are found). Under Python 3.11 that makes every `zipimporter` in
`sys.path_importer_cache` parse its whole archive's directory again in pure Python, and a worker importing
pyspark from Spark's pyspark.zip holds one per imported subpackage (17 after `import pyspark.worker`):
about half a second of CPU per task here on a loaded machine, for a file that does not change.

Rule 1: a zip importer re-reads its archive when the archive's (mtime, size) differs from what it was at
its last read, or when it cannot be stat'ed; otherwise `invalidate_caches()` keeps what it has. An archive
`addPyFile` replaces in place gets a new mtime, so it is re-read as before.
Rule 2: `install()` is idempotent and only wraps `zipimport.zipimporter.invalidate_caches`; importing and
finding modules are untouched.
"""

from __future__ import annotations

import os
import zipimport

_MARK = "_sparklog_stat_gated"


def install() -> None:
    """Rule 2: wrap `zipimporter.invalidate_caches` once per process."""
    original = zipimport.zipimporter.invalidate_caches
    if getattr(original, _MARK, False):
        return

    def invalidate_caches(self) -> None:
        stamp = _stamp(self.archive)
        if stamp is not None and getattr(self, "_sparklog_stamp", None) == stamp:
            return  # Rule 1: the archive is the one last read
        original(self)
        self._sparklog_stamp = stamp

    setattr(invalidate_caches, _MARK, True)
    invalidate_caches.__doc__ = original.__doc__
    zipimport.zipimporter.invalidate_caches = invalidate_caches


def _stamp(archive: str) -> tuple[int, int] | None:
    try:
        status = os.stat(archive)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size
